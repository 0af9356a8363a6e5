"""SrDetection Figure 3 / Table 10 from run directories: macro-F1 (%) per detector against the code:web
mixing ratio of continued pretraining, at one epoch.

    python analysis/ratio_figure.py RUN_DIR [RUN_DIR ...] [--epoch 1|last] [--oracle] [--out fig3.png]

A thin call to `leaklab.report.compare` (which `leaklab compare` uses too). Each run's ratio is read from
its recipe.yaml (`mix.ratio`); keep the rest of the recipe fixed (the `tiny_cpt_ratio_*` recipes do).
The paper plots epoch 1 (the default); `--epoch last` takes each run's last evaluated epoch. Baselines
show the cross-validated F1 (--oracle: the oracle-threshold F1); SrDetection its own rule at its largest
n. Prints the table and writes the PNG (and a PDF beside it; default: ratio_f1.png here).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from leaklab.report.compare import ratio_points, ratio_table, web_share
from leaklab.report.figures import plot_ratio
from leaklab.results import load_detection  # noqa: F401 - tests read a run's table through this script


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", help="leaklab run directories, one per mixing ratio")
    parser.add_argument("--epoch", default="1", help="epoch to compare (a number, or 'last'; default 1)")
    parser.add_argument("--oracle", action="store_true", help="baselines at the oracle threshold")
    parser.add_argument("--out", default="ratio_f1.png", help="where to write the figure")
    args = parser.parse_args(argv)
    try:
        points = ratio_points(args.run_dirs, args.epoch, args.oracle)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    kind = "oracle threshold" if args.oracle else "threshold by cross-validation"
    print(f"Macro-F1 (%) by code:web mixing ratio at epoch {args.epoch} (baselines: {kind}).\n")
    print(ratio_table(points))
    plot_ratio(
        points, sorted(points, key=web_share), Path(args.out), f"F1 vs mixing ratio (epoch {args.epoch})"
    )
    print(f"\nfigure: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
