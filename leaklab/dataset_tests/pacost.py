"""PaCoST (Zhang et al., 2024, "PaCoST: Paired Confidence Significance Testing for Benchmark
Contamination Detection in Large Language Models"): is the model more confident on the benchmark's own
wording than on a rephrasing that means the same?

A model that trained on a benchmark is more confident on its exact samples than on rephrased ones; a
model that did not has no reason to prefer either. Per sample x with rephrasings v_1..v_m (leaklab's
verified variants: renamed identifiers, replaced examples, each checked by the benchmark's tests in the
sandbox) and confidence c = exp(-NLL), the geometric-mean probability of the scored tokens:

    d(x)  =  c(x) - (1/m) * sum_j c(v_j)

and a one-sided paired t-test of mean(d) > 0 over the samples with a verified variant (t with n - 1
degrees of freedom). The paper asks the model for its confidence in an answer; leaklab's samples are
code with their solutions, so the confidence is the model's probability of the solution itself (the
choice this adaptation makes). The measured false-positive rate comes from the clean condition: the
same test on the known-clean samples (a run's non-members), over `halvings` random halves of them, the
share with p < alpha. A rephrasing that is less likely than the original to every model (a bias of
the variants, not a leak) shows up there as a rate above alpha.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from leaklab.dataset_tests.sharded_likelihood import one_sided_t
from leaklab.detectors.srdetection import VARIANTS


def paired_differences(original_nll, variant_nll) -> np.ndarray:
    """d per sample with a finite original and at least one finite variant (the others left out)."""
    d = confidence_gaps(original_nll, variant_nll)
    return d[np.isfinite(d)]


def pacost_test(original_nll, variant_nll) -> dict[str, float]:
    return gap_test(paired_differences(original_nll, variant_nll))


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


def null_rejection_rate(
    original_nll, variant_nll, *, halvings: int = 100, alpha: float = 0.05, seed: int = 0
) -> dict[str, float]:
    """The share of random halves of known-clean samples whose test gives p < alpha."""
    return gap_null_rate(
        paired_differences(original_nll, variant_nll), halvings=halvings, alpha=alpha, seed=seed
    )


def gap_null_rate(gaps, *, halvings: int = 100, alpha: float = 0.05, seed: int = 0) -> dict[str, float]:
    """`null_rejection_rate` from the known-clean samples' gaps d(x) (NaN gaps left out)."""
    d = np.asarray(gaps, dtype=np.float64)
    d = d[np.isfinite(d)]
    out = {"null_rejection_rate": math.nan, "null_halvings": 0.0, "null_alpha": float(alpha)}
    if len(d) < 4:
        return out
    rng = np.random.default_rng(seed)
    p_values = [one_sided_t(d[rng.permutation(len(d))[: len(d) // 2]])[1] for _ in range(halvings)]
    p_values = [p for p in p_values if not math.isnan(p)]
    if p_values:
        out["null_rejection_rate"] = float(np.mean(np.asarray(p_values) < alpha))
    out["null_halvings"] = float(len(p_values))
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
    to them). The set's test is `pacost_test` on the gaps."""

    name: ClassVar[str] = "pacost"
    needs: ClassVar[frozenset[str]] = frozenset({VARIANTS})

    def columns(self) -> dict[str, dict]:
        return {"pacost_gap": {"confidence": "exp(-NLL)"}}

    def run(self, inputs) -> dict[str, np.ndarray]:
        original, variants = inputs.variant_nlls("pacost")
        gaps = confidence_gaps(original, variants)
        inputs.info[self.name] = {"undefined": int(np.isnan(gaps).sum())}
        return {"pacost_gap": gaps}
