"""PAC, Polarized Augment Calibration (Ye et al., 2024, "Data Contamination Calibration for Black-box
LLMs"). With v_t the confidence of each scored token (its probability; its log-probability under
`space=logprob`, column `pac_log`) and x~_1..x~_m copies of x with max(1, floor(alpha * words)) random
swaps of two words (words split on single spaces, so indentation survives):

    PD(x)  =  mean of the ceil(far * n) highest v_t  -  mean of the ceil(local * n) lowest v_t
    pac    =  (1/m) * sum_j PD(x~_j)  -  PD(x)                  HIGHER MEANS MORE LIKELY A MEMBER

A trained-on sample sits in a local peak of confidence that its copies do not share. NaN when x or all
of its copies have no scored token. The choices the paper leaves open:
docs/detectors.md#pac-con-recall-samia-gradnorm-codec-pacost-and-the-sharded-order-test.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from leaklab.detectors.likelihood import TARGET, neighbour_gap, region_mean


def polarized_distance(values: np.ndarray, far: float, local: float) -> float:
    """Mean of the far region (highest values) minus mean of the local region (lowest values)."""
    return region_mean(values, far, highest=True) - region_mean(values, local, highest=False)


def swap_words(text: str, alpha: float, rng: random.Random) -> str:
    """The text with two random words swapped max(1, floor(alpha * words)) times; words are the text
    split on single spaces (a text of fewer than two words comes back as it is)."""
    words = text.split(" ")
    if len(words) < 2:
        return text
    for _ in range(max(1, int(alpha * len(words)))):
        i, j = rng.sample(range(len(words)), 2)
        words[i], words[j] = words[j], words[i]
    return " ".join(words)


def augmented_copies(text: str, alpha: float, count: int, seed: int) -> list[str]:
    """`count` swapped copies of a text, drawn from a generator seeded by the text itself and `seed`."""
    digest = hashlib.sha256(f"{seed}\0{text}".encode()).hexdigest()
    rng = random.Random(int(digest[:16], 16))
    return [swap_words(text, alpha, rng) for _ in range(count)]


@dataclass
class Pac:
    name: ClassVar[str] = "pac"
    needs: ClassVar[frozenset[str]] = frozenset({TARGET})
    far: float = 0.05  # share of the highest confidences (the far region)
    local: float = 0.3  # share of the lowest confidences (the local region)
    alpha: float = 0.3  # swaps per copy: max(1, floor(alpha * words))
    copies: int = 5  # augmented copies per sample (one engine pass over all of them)
    space: str = "prob"  # prob | logprob
    seed: int = 0

    def __post_init__(self) -> None:
        if not (0 < self.far <= 1 and 0 < self.local <= 1):
            raise ValueError(f"pac: far and local must be in (0, 1], got {self.far}, {self.local}")
        if not 0 <= self.alpha <= 1 or self.copies < 1:
            raise ValueError(
                f"pac: alpha must be in [0, 1] and copies positive, got {self.alpha}, {self.copies}"
            )
        if self.space not in ("prob", "logprob"):
            raise ValueError(f"pac: space must be prob or logprob, got {self.space!r}")

    @property
    def column(self) -> str:
        """ "pac", or "pac_log" in log-probability space (so both can be columns of one evaluation)."""
        return "pac" if self.space == "prob" else "pac_log"

    def columns(self) -> dict[str, dict]:
        params = {"far": self.far, "local": self.local, "alpha": self.alpha, "copies": self.copies}
        return {self.column: {**params, "space": self.space, "seed": self.seed}}

    def distances(self, stats: Sequence) -> np.ndarray:
        logprobs = [s.logprob.astype(np.float64) for s in stats]
        confidences = [np.exp(lp) for lp in logprobs] if self.space == "prob" else logprobs
        return np.array([polarized_distance(c, self.far, self.local) for c in confidences], dtype=np.float64)

    def run(self, inputs) -> dict[str, np.ndarray]:
        scoring = inputs.scoring()
        solution = scoring.scoring_span == "solution"
        contexts = inputs.contexts() if solution else [""] * len(inputs.texts)

        def stats(texts, prompts):
            return inputs.token_stats(texts, prompts if solution else None, scoring)

        original = self.distances(stats(inputs.texts, contexts))
        copy_texts, copy_prompts = [], []
        for text, context in zip(inputs.texts, contexts):
            span = text[len(context) :]
            copy_texts += [context + c for c in augmented_copies(span, self.alpha, self.copies, self.seed)]
            copy_prompts += [context] * self.copies
        augmented = self.distances(stats(copy_texts, copy_prompts)).reshape(len(inputs.texts), self.copies)
        scores = neighbour_gap(original, augmented)
        inputs.info[self.name] = {"undefined": int(np.isnan(scores).sum())}
        return {self.column: scores}
