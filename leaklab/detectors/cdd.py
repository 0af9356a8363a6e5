"""CDD (Dong et al., 2024, "Generalization or Memorization"): how peaked the output distribution is on a
sample's prompt, from sampled outputs alone. With g the greedy output, s_1..s_N sampled ones (token ids),
d_i their token edit distance to g and l the length of the longest of the N + 1 outputs:

    cdd@alpha  =  (1/N) * #{ i : d_i <= alpha * l }          (the paper's Peak(M; x) = F(alpha * l))

HIGHER MEANS MORE LIKELY A MEMBER; all outputs empty (l = 0) scores 1. Defaults follow the paper
(alpha = 0.05, temperature 0.8) except N = 20 rather than 50, for a CPU. The prompt is the sample's
context; a sample without one is cut like SrDetection's black box (`srdetection.cut_text`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from rapidfuzz.distance import Levenshtein

from leaklab.detectors.inputs import ModelInputs
from leaklab.detectors.srdetection import GENERATIONS, cut_text


def edit_distances(reference: Sequence[int], candidates: Sequence[Sequence[int]]) -> np.ndarray:
    """Levenshtein distance (unit insert / delete / substitute) from every candidate to `reference`."""
    return np.array([Levenshtein.distance(reference, c) for c in candidates], dtype=np.int64)


def peakedness(greedy: Sequence[int], samples: Sequence[Sequence[int]], alpha: float) -> float:
    """Fraction of samples within edit distance alpha * l of the greedy output (l: longest output)."""
    if not samples:
        return float("nan")
    longest = max(len(greedy), *(len(s) for s in samples))
    distances = edit_distances(greedy, samples)
    return float(np.mean(distances <= alpha * longest))


def cdd_prompts(tokenizer, texts: Sequence[str], contexts: Sequence[str]) -> list[str | None]:
    """The prompt CDD samples from: the context, else the first half of the text (None: too short)."""
    out: list[str | None] = []
    for text, context in zip(texts, contexts):
        if context.strip():
            out.append(context)
        else:
            cut = cut_text(tokenizer, text, "", split="text")
            out.append(None if cut is None else cut.prefix)
    return out


@dataclass
class Cdd:
    name: ClassVar[str] = "cdd"
    needs: ClassVar[frozenset[str]] = frozenset({GENERATIONS})
    alpha: tuple[float, ...] = (0.05,)
    samples: int = 20  # N sampled outputs per prompt
    temperature: float = 0.8
    max_new_tokens: int = 64
    seed: int = 0
    batch_size: int = 64  # rows decoded together

    def __post_init__(self) -> None:
        if not self.alpha or any(not 0 <= a <= 1 for a in self.alpha):
            raise ValueError(f"cdd: alpha must be in [0, 1], got {list(self.alpha)}")
        if self.samples < 1 or self.max_new_tokens < 1 or self.batch_size < 1:
            raise ValueError("cdd: samples, max_new_tokens and batch_size must be positive")
        if not self.temperature > 0:
            raise ValueError(f"cdd: temperature must be positive, got {self.temperature}")

    def columns(self) -> dict[str, dict]:
        params = {
            "samples": self.samples,
            "temperature": self.temperature,
            "max_new_tokens": self.max_new_tokens,
        }
        return {f"cdd@alpha={a:g}": {"alpha": a, **params} for a in self.alpha}

    def run(self, inputs: ModelInputs) -> dict[str, np.ndarray]:
        from leaklab.signals.continuations import Decoding, greedy_continuations, sampled_continuations

        prompts = cdd_prompts(inputs.tokenizer, inputs.texts, inputs.contexts())
        usable = [i for i, p in enumerate(prompts) if p is not None]
        chosen = [prompts[i] for i in usable]
        sources = [inputs.texts[i] for i in usable]  # each prompt is a prefix of its text
        decoding = Decoding.of(inputs, batch_size=self.batch_size)
        greedy = greedy_continuations(decoding, chosen, [self.max_new_tokens] * len(chosen), sources=sources)
        sampled = sampled_continuations(
            decoding,
            chosen,
            n=self.samples,
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            seed=self.seed,
            sources=sources,
        )
        inputs.info[self.name] = {"no_prompt": len(prompts) - len(usable)}
        out = {}
        for alpha in self.alpha:
            scores = np.full(len(prompts), np.nan)
            for i, g, s in zip(usable, greedy, sampled):
                scores[i] = peakedness(g, s, alpha)
            out[f"cdd@alpha={alpha:g}"] = scores
        return out
