"""Per-checkpoint evaluations, one module each (docs/evaluations.md), registered here (the interface:
`base.py`; `replies.py` is the pipeline accuracy and mri share). Records name their class by path, so
reading this table imports no evaluation. Adding one:
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
