"""What a model-level score detector reads: the model itself and the run's shared services.

Most score detectors read only token statistics (`likelihood.Signals`, one engine pass shared by all of
them). The detectors of `recall`, `cdd`, `ngram` and `neighbourhood` (kind "model") need more: a second
pass with a prefix, generations, or the samples' variants. Each has a `run(inputs) -> {column: scores}`
method instead of `score(signals)`, and `score_detectors` hands them one `ModelInputs`; rule detectors
get the same one in `decide(inputs)`. They still go through
the shared engines (`signals.logprobs.compute_token_stats`, `signals.continuations`) and caches, so
what another detector computed already is a cache hit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelInputs:
    """One model's evaluation set and services, as `score_detectors` received them.

    prompts: prompts[i] is the part of texts[i] before its solution ("" where there is none).
    settings: an `EvaluateConfig` or `ScoringSettings` (None: defaults).
    rule_inputs: the originals and their verified variants (`srdetection.SrInputs`), or None.
    cache / generation_cache: the shared signal and generation caches (None: the process-wide ones).
    generator: a `signals.generation.Generator` (None: an HFGenerator on `model`).
    reference: (model, tokenizer) of the reference model, or None.
    known_clean: bool per sample, True for samples known not to be in the model's training (a run's
        non-members), whose margins measure a rule's null (`srdetection_clean_null`, which never decides
        a sample by a threshold its own margin entered); None: no sample is known clean.
    info: per-detector counts (samples without a score and why), filled by the detectors.
    """

    model: Any
    tokenizer: Any
    texts: list[str]
    prompts: list[str] | None = None
    settings: Any = None
    rule_inputs: Any = None
    accelerator: Any = None
    cache: Any = None
    generation_cache: Any = None
    generator: Any = None
    reference: Any = None
    known_clean: Any = None
    info: dict[str, Any] = field(default_factory=dict)

    def contexts(self) -> list[str]:
        """Each text's context (its prompt), "" when the caller gave none."""
        if self.prompts is None:
            return [""] * len(self.texts)
        if len(self.prompts) != len(self.texts):
            raise ValueError(f"got {len(self.prompts)} prompts for {len(self.texts)} texts")
        return [p if t.startswith(p) else "" for t, p in zip(self.texts, self.prompts)]

    def prompt_boundary(self) -> str:
        """Where a prompt ends for the model in this run's generations (`evaluate.prompt_boundary`)."""
        return getattr(self.settings, "prompt_boundary", "heal")

    def scoring(self):
        from leaklab.signals.logprobs import ScoringSettings

        scoring = ScoringSettings.from_config(self.settings)
        scoring.check()
        return scoring
