"""What a model-level score detector reads: the model itself and the run's shared services.

Most score detectors read only token statistics (`likelihood.Signals`, one engine pass shared by all of
them). The detectors of `recall`, `cdd`, `ngram` and `neighbourhood` (kind "model") need more: a second
pass with a prefix, generations, or the samples' variants. Each has a `run(inputs) -> {column: scores}`
method instead of `score(signals)`, and `score_detectors` hands them the `ModelInputs` it was given;
rule detectors get the same one in `decide(inputs)`. They still go through
the shared engines (`signals.logprobs.compute_token_stats`, `signals.continuations`) and caches, so
what another detector computed already is a cache hit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the registry is read at recipe load: these stay out of that import
    import numpy as np
    from accelerate import Accelerator
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from leaklab.detectors.srdetection import SrInputs
    from leaklab.recipe import EvaluateConfig
    from leaklab.signals.continuations import GenerationCache
    from leaklab.signals.generation import Generator
    from leaklab.signals.logprobs import ScoringSettings, SignalCache


@dataclass
class ModelInputs:
    """One model's evaluation set and services: everything a detector may read.

    settings: the recipe's `evaluate` section (`EvaluateConfig()` for its defaults); the signal
        engine's settings are derived from it (`scoring`).
    prompts: prompts[i] is the part of texts[i] before its solution ("" where there is none).
    rule_inputs: the originals and their verified variants, for detectors that need variants.
    accelerator: the processes sharing the work (None: this process alone).
    cache / generation_cache: the shared signal and generation caches (None: the process-wide ones).
    generator: what decodes (None: an HFGenerator on `model`).
    reference: (model, tokenizer) of the reference model, or None.
    known_clean: bool per sample, True for samples known not to be in the model's training (a run's
        non-members), whose margins measure a rule's null (`srdetection_clean_null`, which never decides
        a sample by a threshold its own margin entered); None: no sample is known clean.
    corpus_texts: DC-PDD's reference corpus (None: `settings.dcpdd_corpus`).
    info: per detector, counts of its samples (without a score and why), filled by the detectors.
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    texts: list[str]
    # Required, never defaulted here: the recipe module imports the detector registry, so a default
    # built from it would tie the two modules in a cycle; callers hand in the recipe's section.
    settings: EvaluateConfig
    prompts: list[str] | None = None
    rule_inputs: SrInputs | None = None
    accelerator: Accelerator | None = None
    cache: SignalCache | None = None
    generation_cache: GenerationCache | None = None
    generator: Generator | None = None
    reference: tuple[PreTrainedModel, PreTrainedTokenizerBase] | None = None
    known_clean: np.ndarray | None = None
    corpus_texts: Iterable[str] | None = None
    info: dict[str, dict[str, int]] = field(default_factory=dict)

    def contexts(self) -> list[str]:
        """Each text's context (its prompt), "" when the caller gave none."""
        if self.prompts is None:
            return [""] * len(self.texts)
        if len(self.prompts) != len(self.texts):
            raise ValueError(f"got {len(self.prompts)} prompts for {len(self.texts)} texts")
        return [p if t.startswith(p) else "" for t, p in zip(self.texts, self.prompts)]

    def prompt_boundary(self) -> str:
        """Where a prompt ends for the model in this run's generations (`evaluate.prompt_boundary`)."""
        return self.settings.prompt_boundary

    def scoring(self) -> ScoringSettings:
        """The signal engine's settings, as the recipe's `evaluate` section sets them (checked)."""
        from leaklab.signals.logprobs import ScoringSettings

        scoring = ScoringSettings.from_config(self.settings)
        scoring.check()
        return scoring

    def token_stats(self, texts: list[str], prompts: list[str] | None, settings, info: dict | None = None):
        """Token statistics of `texts` under the target model, through the shared signal engine and cache
        (a text another detector scored already is a cache hit); `settings`: the `ScoringSettings`."""
        from leaklab.signals.logprobs import compute_token_stats

        return compute_token_stats(
            self.model,
            self.tokenizer,
            texts,
            prompts=prompts,
            settings=settings,
            distribution=False,
            accelerator=self.accelerator,
            cache=self.cache,
            info=info,
        )

    def nlls(
        self, texts: list[str], prompts: list[str] | None, settings, info: dict | None = None
    ) -> np.ndarray:
        """Mean NLL of each text under the target model (`token_stats`)."""
        import numpy as np

        return np.array([s.nll() for s in self.token_stats(texts, prompts, settings, info)], dtype=np.float64)

    def variant_nlls(self, detector: str) -> tuple[np.ndarray, np.ndarray]:
        """(originals [N], variants [N, width]) mean NLLs of the samples and their verified variants, in
        the one engine call SrDetection's gray box makes; `detector` names who asked, for the error."""
        from leaklab.detectors.srdetection import gray_scores

        if self.rule_inputs is None:
            raise ValueError(f"'{detector}' needs each sample's variants (rule_inputs)")
        return gray_scores(
            self.model,
            self.tokenizer,
            self.rule_inputs,
            self.settings,
            accelerator=self.accelerator,
            cache=self.cache,
        )
