"""PaCoST (Zhang et al., 2024, "PaCoST: Paired Confidence Significance Testing for Benchmark
Contamination Detection in Large Language Models"): is the model more confident on the benchmark's own
wording than on rephrasings that mean the same (leaklab's sandbox-verified variants)?

With confidence c = exp(-NLL) of the scored tokens and variants v_1..v_m of sample x:

    d(x) = c(x) - (1/m) * sum_j c(v_j),   then a one-sided paired t-test of mean(d) > 0

Its false-positive rate is measured on random halves of known-clean samples, where variants that are
less likely than their originals to every model (a bias, not a leak) show as a rate above alpha. Rows
and the choices this adaptation makes: docs/detectors.md#dataset-level-tests-one-p-value-for-the-set-each-with-its-measured-false-positive-rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from leaklab.dataset_tests.sharded_likelihood import one_sided_t, rejection_rate
from leaklab.detectors.srdetection import VARIANTS


def gap_test(gaps) -> dict[str, float]:
    """The paired test from the per-sample gaps d(x) (NaN gaps left out)."""
    d = np.asarray(gaps, dtype=np.float64)
    d = d[np.isfinite(d)]
    t, p = one_sided_t(d)
    return {
        "t": t,
        "p_value": p,
        "n": float(len(d)),
        "mean_difference": float(d.mean()) if len(d) else math.nan,
    }


def gap_null_rate(gaps, *, halvings: int = 100, alpha: float = 0.05, seed: int = 0) -> dict[str, float]:
    """The share of random halves of the known-clean samples' gaps d(x) (NaN gaps left out) whose test
    gives p < alpha."""
    d = np.asarray(gaps, dtype=np.float64)
    d = d[np.isfinite(d)]
    out = {"null_rejection_rate": math.nan, "null_halvings": 0.0, "null_alpha": float(alpha)}
    if len(d) < 4:
        return out
    rng = np.random.default_rng(seed)
    p_values = [one_sided_t(d[rng.permutation(len(d))[: len(d) // 2]])[1] for _ in range(halvings)]
    out["null_rejection_rate"], out["null_halvings"] = rejection_rate(p_values, alpha)
    return out


def confidence_gaps(original_nll, variant_nll) -> np.ndarray:
    """d(x) per sample (NaN where the sample has no finite variant or no scored token)."""
    original = np.exp(-np.asarray(original_nll, dtype=np.float64))
    variants = np.exp(-np.asarray(variant_nll, dtype=np.float64))
    finite = np.isfinite(variants)
    count = finite.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, np.where(finite, variants, 0.0).sum(axis=1) / np.maximum(count, 1), np.nan)
    return original - mean


@dataclass
class Pacost:
    """PaCoST's per-sample ingredient as a score column: pacost_gap = d(x), the confidence on the original
    minus the mean confidence on its verified variants (HIGHER MEANS MORE LIKELY A MEMBER). Its originals
    and variants are the one engine pass that srdetection_gray and neighbourhood read (cache hits next
    to them). The set's test is `gap_test` on the gaps (rows: `pacost_test`)."""

    name: ClassVar[str] = "pacost"
    needs: ClassVar[frozenset[str]] = frozenset({VARIANTS})

    def columns(self) -> dict[str, dict]:
        return {"pacost_gap": {"confidence": "exp(-NLL)"}}

    def run(self, inputs) -> dict[str, np.ndarray]:
        original, variants = inputs.variant_nlls("pacost")
        gaps = confidence_gaps(original, variants)
        inputs.info[self.name] = {"undefined": int(np.isnan(gaps).sum())}
        return {"pacost_gap": gaps}
