"""Per-checkpoint evaluations, one module each, registered here (see `base.py` for the interface).

  detection   every detector of `evaluate.detectors` against the manifest's ground truth
  accuracy    pass@1 (greedy) and pass@k (sampled) on members and non-members, run in the sandbox
  counterfactual  target vs reference generations of each function scored by the similarity suite
              (the paper's Tables 1 and 2, members and non-members apart)
  extraction  sample the model (4 strategies x top-k), Type-1 clones against the training corpus, corpus-free
              rankings with precision@100, secrets (masked), taxonomy, members vs non-members extracted
  mri         Memorization Risk Index: original / rewritten / mutated tasks, Sim, RAD, MRI, iMRI per side
  canaries    exposure of each planted canary (inject.canaries) against random same-format secrets, by dose

Shared by accuracy and mri (not an evaluation): `replies.py`, the cache -> generate -> extract -> judge
pipeline. A recipe picks them with `evaluate.evaluations`; `leaklab/evaluate.py` runs them. Adding one: a module
here with a class that satisfies `plugins.Evaluation` (as `detection.Detection`), one record in
EVALUATIONS (with `config` when it has an `evaluate.<name>` section, and `requires` when it measures
what a key of another section sets, as `canaries` does `inject.canaries`), and a test. Its rows are
built by `leaklab.rows` (`metric_rows`, `side_row`). Records name their
class by path, so reading this table imports no evaluation; the recipe imports only their settings.
"""

from __future__ import annotations

from leaklab.plugins import REGISTRIES, Record

EVALUATIONS: dict[str, Record] = {
    r.name: r
    for r in [
        Record("detection", "leaklab.evaluations.detection:Detection", "evaluation", "Detection"),
        Record(
            "accuracy",
            "leaklab.evaluations.accuracy:Accuracy",
            "evaluation",
            "Accuracy",
            config="leaklab.evaluations.accuracy:AccuracyConfig",
            section="accuracy",
            dose_panels="leaklab.evaluations.accuracy:dose_panels",
        ),
        Record(
            "counterfactual",
            "leaklab.evaluations.counterfactual:Counterfactual",
            "evaluation",
            "Counterfactual memorization",
            config="leaklab.evaluations.counterfactual:CounterfactualConfig",
            section="counterfactual",
            dose_panels="leaklab.evaluations.counterfactual:dose_panels",
        ),
        Record(
            "mri",
            "leaklab.evaluations.mri:Mri",
            "evaluation",
            "Memorization Risk Index",
            config="leaklab.evaluations.mri:MriConfig",
            section="mri",
            dose_panels="leaklab.evaluations.mri:dose_panels",
        ),
        Record(
            "extraction",
            "leaklab.evaluations.extraction:Extraction",
            "evaluation",
            "Extraction",
            config="leaklab.evaluations.extraction:ExtractionConfig",
            section="extraction",
            dose_panels="leaklab.evaluations.extraction:dose_panels",
        ),
        Record(
            "canaries",
            "leaklab.evaluations.canaries:Canaries",
            "evaluation",
            "Canaries",
            requires=(("inject.canaries", "the canaries", "12"),),
        ),
    ]
}
REGISTRIES["evaluation"] = EVALUATIONS  # where `plugins.register` adds outside evaluations
