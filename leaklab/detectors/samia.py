"""SaMIA (Kaneko et al., 2024, "Sampling-based Pseudo-Likelihood for Membership Inference Attacks"):
black box, from sampled text alone. The scored span is split in words (runs of non-space characters);
the prompt is the context plus its first floor(prefix * words) words (at least one word on each side),
the reference r the words after. Each of N sampled continuations, cut to its first |r| words, is c_j:

    samia@n       =  (1/N) * sum_j ROUGE-N(c_j, r)                          (recall over r's n-grams)
    samia_zlib@n  =  (1/N) * sum_j ROUGE-N(c_j, r) * len(zlib(c_j))         (the paper's SaMIA*zlib)

HIGHER MEANS MORE LIKELY A MEMBER. NaN when the span has fewer than two words, or fewer than n words
after the prompt. Choices and where leaklab and Fast-MIA differ:
docs/detectors.md#pac-con-recall-samia-gradnorm-codec-pacost-and-the-sharded-order-test.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from leaklab.detectors.srdetection import GENERATIONS
from leaklab.similarity.text import clipped_matches, ngram_counts

_WORD = re.compile(r"\S+")


def rouge_recall(candidate: Sequence[str], reference: Sequence[str], n: int) -> float:
    """Share of the reference's n-grams (counted with multiplicity) that the candidate holds; NaN when
    the reference has no n-gram."""
    ref = ngram_counts(reference, n)[-1]
    total = sum(ref.values())
    if total == 0:
        return float("nan")
    return clipped_matches(ref, ngram_counts(candidate, n)[-1]) / total


def split_prompt(span: str, share: float) -> tuple[str, list[str]] | None:
    """(the span up to the end of its first floor(share * words) words, the words after them); at least
    one word on each side, None when the span has fewer than two words."""
    words = list(_WORD.finditer(span))
    if len(words) < 2:
        return None
    k = min(max(1, int(share * len(words))), len(words) - 1)
    return span[: words[k - 1].end()], [m.group() for m in words[k:]]


def samia_score(candidates: Sequence[str], reference: Sequence[str], n: int, weigh_zlib: bool) -> float:
    """Mean ROUGE-N recall of the candidates' first |reference| words (times the zlib size of those
    words joined by spaces when `weigh_zlib`); NaN without candidates or reference n-grams."""
    values = []
    for text in candidates:
        words = _WORD.findall(text)[: len(reference)]
        value = rouge_recall(words, reference, n)
        if weigh_zlib:
            value *= len(zlib.compress(" ".join(words).encode("utf-8")))
        values.append(value)
    return float(np.mean(values)) if values else float("nan")


@dataclass
class Samia:
    name: ClassVar[str] = "samia"
    needs: ClassVar[frozenset[str]] = frozenset({GENERATIONS})
    n: tuple[int, ...] = (1,)
    samples: int = 10
    prefix: float = 0.5  # share of the span's words given as the prompt
    max_new_tokens: int = 128
    temperature: float = 1.0
    seed: int = 0
    batch_size: int = 64  # rows decoded together

    def __post_init__(self) -> None:
        if not self.n or any(k < 1 for k in self.n):
            raise ValueError(f"samia: n must be positive, got {list(self.n)}")
        if self.samples < 1 or self.max_new_tokens < 1 or self.batch_size < 1:
            raise ValueError("samia: samples, max_new_tokens and batch_size must be positive")
        if not 0 < self.prefix < 1:
            raise ValueError(f"samia: prefix must be in (0, 1), got {self.prefix}")
        if not self.temperature > 0:
            raise ValueError(f"samia: temperature must be positive, got {self.temperature}")

    def columns(self) -> dict[str, dict]:
        params = {"samples": self.samples, "prefix": self.prefix, "max_new_tokens": self.max_new_tokens}
        out = {}
        for n in self.n:
            out[f"samia@n={n}"] = {"n": n, "zlib": False, **params}
            out[f"samia_zlib@n={n}"] = {"n": n, "zlib": True, **params}
        return out

    def run(self, inputs) -> dict[str, np.ndarray]:
        from leaklab.signals.continuations import Decoding, boundary_setting, sampled_continuations
        from leaklab.signals.generation import after_healed, prepare_prompt

        solution = inputs.scoring().scoring_span == "solution"
        contexts = inputs.contexts() if solution else [""] * len(inputs.texts)
        usable, prompts, references = [], [], []
        for i, (text, context) in enumerate(zip(inputs.texts, contexts)):
            cut = split_prompt(text[len(context) :], self.prefix)
            if cut is not None:
                usable.append(i)
                prompts.append(context + cut[0])
                references.append(cut[1])
        sources = [inputs.texts[i] for i in usable]  # each prompt is a prefix of its text
        sampled = sampled_continuations(
            Decoding.of(inputs, batch_size=self.batch_size),
            prompts,
            n=self.samples,
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            seed=self.seed,
            sources=sources,
        )
        # A healed prompt boundary makes the first token re-generate the prompt's last characters.
        boundary = boundary_setting(inputs.generator, inputs.settings.prompt_boundary)
        healed = [prepare_prompt(inputs.tokenizer, p, boundary, s).healed for p, s in zip(prompts, sources)]
        decode = inputs.tokenizer.decode
        texts = [
            [after_healed(decode(ids, skip_special_tokens=True), cut) for ids in row]
            for row, cut in zip(sampled, healed)
        ]
        inputs.info[self.name] = {"too_short": len(inputs.texts) - len(usable)}
        out = {}
        for n in self.n:
            for column, weigh in ((f"samia@n={n}", False), (f"samia_zlib@n={n}", True)):
                scores = np.full(len(inputs.texts), np.nan)
                for i, candidates, reference in zip(usable, texts, references):
                    scores[i] = samia_score(candidates, reference, n, weigh)
                out[column] = scores
        return out
