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

import numpy as np

from leaklab.dataset_tests.sharded_likelihood import one_sided_t


def paired_differences(original_nll, variant_nll) -> np.ndarray:
    """d per sample with a finite original and at least one finite variant (the others left out)."""
    original = np.exp(-np.asarray(original_nll, dtype=np.float64))
    variants = np.exp(-np.asarray(variant_nll, dtype=np.float64))
    finite = np.isfinite(variants)
    count = finite.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, np.where(finite, variants, 0.0).sum(axis=1) / np.maximum(count, 1), np.nan)
    d = original - mean
    return d[np.isfinite(d)]


def pacost_test(original_nll, variant_nll) -> dict[str, float]:
    d = paired_differences(original_nll, variant_nll)
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
    d = paired_differences(original_nll, variant_nll)
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
