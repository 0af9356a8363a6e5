"""n-gram accuracy (Xu et al., 2024, "Benchmarking Benchmark Leakage in Large Language Models"): can the
model continue a sample exactly from K places spread evenly over its scored region? At a start s it sees
the text before token s and greedily predicts n tokens; a hit matches x_s..x_{s+n-1} exactly:

    ngram_acc@n  =  #hits / |S|                      HIGHER MEANS MORE LIKELY A MEMBER

The candidates are the positions s with text before them and n true tokens after (s >= 1, s + n <= L);
of m candidates the starts are those at indices floor(j (m - 1) / (K - 1) + 1/2), j = 0..K-1 (all when
K > m). No candidate: NaN. Several n share one generation of max(n) tokens per start.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from leaklab.detectors.inputs import ModelInputs
from leaklab.detectors.srdetection import GENERATIONS


def start_points(candidates: Sequence[int], k: int) -> list[int]:
    """k candidates spread evenly from the first to the last (all of them when there are at most k)."""
    m = len(candidates)
    if m <= k:
        return list(candidates)
    if k == 1:
        return [candidates[0]]
    return [candidates[math.floor(j * (m - 1) / (k - 1) + 0.5)] for j in range(k)]  # half rounds up


@dataclass(frozen=True)
class Probe:
    """One start of one sample: the model continues `prefix`; `truth` are the next true token ids."""

    sample: int
    prefix: str
    truth: tuple[int, ...]


def probes(
    tokenizer, texts: Sequence[str], contexts: Sequence[str], n: int, k: int, solution: bool
) -> list[Probe]:
    """Every start of every text (texts without a candidate contribute none)."""
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("ngram_acc needs a fast tokenizer (character offsets of tokens)")
    out = []
    for sample, (text, context) in enumerate(zip(texts, contexts)):
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = enc["input_ids"], enc["offset_mapping"]
        begin = len(context) if solution else 0
        candidates = [
            s for s in range(len(ids)) if offsets[s][1] > begin and offsets[s][0] > 0 and s + n <= len(ids)
        ]
        for s in start_points(candidates, k):
            out.append(Probe(sample, text[: offsets[s][0]], tuple(ids[s : s + n])))
    return out


def accuracy(probes: Sequence[Probe], predicted: Sequence[Sequence[int]], n: int, samples: int) -> np.ndarray:
    """Per sample: the fraction of its probes whose first n predicted tokens equal the truth's."""
    hits, total = np.zeros(samples), np.zeros(samples)
    for probe, ids in zip(probes, predicted):
        total[probe.sample] += 1
        hits[probe.sample] += tuple(ids[:n]) == probe.truth[:n]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, hits / np.maximum(total, 1), np.nan)


@dataclass
class NgramAccuracy:
    name: ClassVar[str] = "ngram_acc"
    needs: ClassVar[frozenset[str]] = frozenset({GENERATIONS})
    n: tuple[int, ...] = (5,)  # tokens predicted per start (the paper's 5-gram)
    starts: int = 5  # K starting points per sample
    batch_size: int = 64  # rows decoded together

    def __post_init__(self) -> None:
        if not self.n or any(v < 1 for v in self.n) or self.starts < 1 or self.batch_size < 1:
            raise ValueError(
                f"ngram_acc: n, starts and batch_size must be positive, got n={list(self.n)}, "
                f"starts={self.starts}, batch_size={self.batch_size}"
            )

    def columns(self) -> dict[str, dict]:
        return {f"ngram_acc@n={n}": {"n": n, "starts": self.starts} for n in self.n}

    def run(self, inputs: ModelInputs) -> dict[str, np.ndarray]:
        from leaklab.signals.continuations import Decoding, greedy_continuations

        longest = max(self.n)
        solution = inputs.scoring().scoring_span == "solution"
        found = probes(inputs.tokenizer, inputs.texts, inputs.contexts(), longest, self.starts, solution)
        # Each prefix ends on a token boundary of its text: cut there, the ids stay aligned with truth.
        predicted = greedy_continuations(
            Decoding.of(inputs, batch_size=self.batch_size),
            [p.prefix for p in found],
            [longest] * len(found),
            sources=[inputs.texts[p.sample] for p in found],
        )
        scores = {f"ngram_acc@n={n}": accuracy(found, predicted, n, len(inputs.texts)) for n in self.n}
        probed = {p.sample for p in found}
        inputs.info[self.name] = {"probes": len(found), "no_start": len(inputs.texts) - len(probed)}
        return scores
