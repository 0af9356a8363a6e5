"""CoDeC (Zawalski et al., 2025, "Detecting Data Contamination in LLMs via In-Context Learning"): does
context from the same benchmark help the model, or get in its way?

Other samples in context teach an unseen benchmark's style (x becomes likelier) but disturb what a
model memorised (x becomes less likely). Per sample x, with LL the mean log-likelihood of its scored
tokens and C_x up to k other samples of the same set that fit (seeded order, never x):

    delta(x) = LL(x | C_x) - LL(x),    codec = share of the samples with delta(x) < 0

read against a clean set's share by a one-sided exact test (`metrics.two_rate_pvalue`). Rows and the
choices this adaptation makes: docs/detectors.md#dataset-level-tests-one-p-value-for-the-set-each-with-its-measured-false-positive-rate.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from leaklab.detectors.conrecall import fitting_shots
from leaklab.detectors.likelihood import TARGET
from leaklab.detectors.recall import join_prefix
from leaklab.metrics import two_rate_pvalue


def codec_score(plain_nll, context_nll) -> tuple[float, int, int]:
    """(share of drops, drops, samples compared): a drop is a higher NLL with context (LL falls);
    samples with a NaN on either side are left out. NaN share when none is compared."""
    plain = np.asarray(plain_nll, dtype=np.float64)
    context = np.asarray(context_nll, dtype=np.float64)
    ok = np.isfinite(plain) & np.isfinite(context)
    drops, n = int(np.sum(context[ok] > plain[ok])), int(ok.sum())
    return (drops / n if n else float("nan")), drops, n


def codec_vs_clean(suspect: tuple[float, int, int], clean: tuple[float, int, int]) -> dict[str, float]:
    """The rows of the test against a clean set: both shares and the one-sided exact p-value."""
    return {
        "codec": suspect[0],
        "codec_clean": clean[0],
        "p_value": two_rate_pvalue(suspect[1], suspect[2], clean[1], clean[2]),
        "n": float(suspect[2]),
        "n_clean": float(clean[2]),
    }


def context_shots(texts: list[str], seed: int) -> list[list[str]]:
    """Per sample, the other samples of the same set in a seeded random order (per sample position):
    the order they are tried in as its context. Never the sample itself."""
    out = []
    for i in range(len(texts)):
        others = [t for j, t in enumerate(texts) if j != i]
        out.append(random.Random(seed * 100003 + i).sample(others, len(others)))
    return out


def context_nlls(inputs, *, k: int = 3, seed: int = 0):
    """(NLL(x), NLL(x | C_x)) per sample of `inputs` (ModelInputs), the context never scored; NaN where
    not one shot fits."""
    from leaklab.signals.logprobs import ScoringSettings, forward_length

    texts = list(inputs.texts)
    scoring = dataclasses.replace(ScoringSettings.from_config(inputs.settings), scoring_span="text")
    max_length = forward_length(scoring, inputs.model)
    plain = inputs.nlls(texts, None, scoring)
    fitted, heads = [], []
    for i, candidates in enumerate(context_shots(texts, seed)):
        shots = fitting_shots(inputs.tokenizer, candidates, "", texts[i], max_length, k)
        if shots:
            fitted.append(i)
            heads.append(join_prefix(shots))
    context = np.full(len(texts), np.nan)
    context[fitted] = inputs.nlls(
        [h + texts[i] for h, i in zip(heads, fitted)],
        heads,
        dataclasses.replace(scoring, scoring_span="solution"),
    )
    return plain, context


@dataclass
class Codec:
    """CoDeC's per-sample ingredient as a score column: codec_drop = NLL(x | C_x) - NLL(x), above 0 where
    the context lowered the sample's likelihood (a drop), so HIGHER MEANS MORE LIKELY A MEMBER; the
    context comes from the other samples scored with it (the benchmark itself in an audit). The set's
    contamination score is the share of drops (`codec_score`), its test `codec_vs_clean`."""

    name: ClassVar[str] = "codec"
    needs: ClassVar[frozenset[str]] = frozenset({TARGET})
    k: int = 3  # other samples in context (the most that fit)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"codec: k must be positive, got {self.k}")

    def columns(self) -> dict[str, dict]:
        return {"codec_drop": {"k": self.k, "seed": self.seed}}

    def run(self, inputs) -> dict[str, np.ndarray]:
        plain, context = context_nlls(inputs, k=self.k, seed=self.seed)
        inputs.info[self.name] = {"no_room": int(np.isnan(context).sum())}
        return {"codec_drop": context - plain}
