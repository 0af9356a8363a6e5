"""Per-checkpoint evaluations, one module each, registered here (the interface: `base.py`).

  detection       every detector of `evaluate.detectors` against the manifest's ground truth
  accuracy        pass@1 (greedy) and pass@k (sampled) on members and non-members, run in the sandbox
  counterfactual  target vs reference generations of each function scored by the similarity suite
  extraction      sampled outputs' Type-1 clones of the training corpus, corpus-free rankings, secrets
  mri             Memorization Risk Index: original / rewritten / mutated tasks, Sim, RAD, MRI, iMRI
  canaries        exposure of each planted canary (inject.canaries) against random secrets, by dose

`replies.py` is the pipeline accuracy and mri share, not an evaluation. Records name their class by
path, so reading this table imports no evaluation. Adding one:
docs/development.md#adding-a-detector-an-evaluation-or-a-stage-step-by-step.
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
