"""What a detector that reads more than token statistics gets: the model itself and the run's shared
services (`ModelInputs`). "model" detectors get it in `run(inputs)`, rule detectors in `decide(inputs)`;
both still go through the shared engines and caches, so what another detector computed is a cache hit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the registry is read at recipe load: these stay out of that import
    from accelerate import Accelerator
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from leaklab.detectors.srdetection import SrInputs
    from leaklab.recipe import EvaluateConfig
    from leaklab.signals.continuations import GenerationCache
    from leaklab.signals.generation import Generator
    from leaklab.signals.logprobs import ScoringSettings, SignalCache


@dataclass
class ModelInputs:
    """One model's evaluation set and services: everything a detector may read (None: none, or the
    process-wide default). prompts[i]: the part of texts[i] before its solution; known_clean[i]: True
    for a sample known not to be in training (a run's non-members); info: per detector, counts of its
    samples (without a score and why), filled by the detectors."""

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

    def scoring(self) -> ScoringSettings:
        """The signal engine's settings, as the recipe's `evaluate` section sets them (checked)."""
        from leaklab.signals.logprobs import ScoringSettings

        scoring = ScoringSettings.from_config(self.settings)
        scoring.check()
        return scoring

    def token_stats(
        self, texts: list[str], prompts: list[str] | None, settings, info=None, distribution=False, model=None
    ):
        """Token statistics of `texts` under the target model (or `model`, a (model, tokenizer) pair),
        through the shared signal engine and cache (a text another detector scored already is a cache
        hit); `settings`: the `ScoringSettings`."""
        from leaklab.signals.logprobs import compute_token_stats

        return compute_token_stats(
            *(model or (self.model, self.tokenizer)),
            texts,
            prompts=prompts,
            settings=settings,
            distribution=distribution,
            accelerator=self.accelerator,
            cache=self.cache,
            info=info,
        )

    def nlls(
        self, texts: list[str], prompts: list[str] | None, settings, info: dict | None = None
    ) -> np.ndarray:
        """Mean NLL of each text under the target model (`token_stats`)."""
        return np.array([s.nll() for s in self.token_stats(texts, prompts, settings, info)], dtype=np.float64)

    def variant_nlls(self, detector: str, info=None, model=None) -> tuple[np.ndarray, np.ndarray]:
        """(originals [N], variants [N, width]) mean NLLs of the samples and their verified variants under
        the target model (or `model`, a (model, tokenizer) pair), in the one engine call SrDetection's
        gray box makes; `detector` names who asked, for the error."""
        from leaklab.detectors.srdetection import gray_scores

        if self.rule_inputs is None:
            raise ValueError(f"'{detector}' needs each sample's variants (rule_inputs)")
        return gray_scores(
            *(model or (self.model, self.tokenizer)),
            self.rule_inputs,
            self.settings,
            accelerator=self.accelerator,
            cache=self.cache,
            info=info,
        )
