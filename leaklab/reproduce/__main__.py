import sys

from leaklab.reproduce import main

sys.exit(main())
