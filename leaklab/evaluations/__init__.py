"""Per-checkpoint evaluations, one module each, registered here (see `base.py` for the interface).

  detection   every detector of `evaluate.detectors` against the manifest's ground truth
  accuracy    pass@1 (greedy) and pass@k (sampled) on members and non-members, run in the sandbox
  counterfactual  target vs reference generations of each function scored by the similarity suite
              (the paper's Tables 1 and 2, members and non-members apart)
  extraction  sample the model (4 strategies x top-k), Type-1 clones against the training corpus, corpus-free
              rankings with precision@100, secrets (masked), taxonomy, members vs non-members extracted
  mri         Memorization Risk Index: original / rewritten / mutated tasks, Sim, RAD, MRI, iMRI per side

A recipe picks them with `evaluate.evaluations`; `leaklab/evaluate.py` runs them. Adding one: a module
here with a class like `detection.Detection`, one line in EVALUATIONS, and a test.
"""

from __future__ import annotations

from leaklab.evaluations.accuracy import Accuracy
from leaklab.evaluations.counterfactual import Counterfactual
from leaklab.evaluations.detection import Detection
from leaklab.evaluations.extraction import Extraction
from leaklab.evaluations.mri import Mri

EVALUATIONS: dict[str, type] = {
    "detection": Detection,
    "accuracy": Accuracy,
    "counterfactual": Counterfactual,
    "mri": Mri,
    "extraction": Extraction,
}
