"""The sharded likelihood comparison test of Oren et al. (2023, "Proving Test Set Contamination in Black
Box Language Models"): is the benchmark's own order of examples likelier than shuffles of it?

Exchangeable examples give a model that never saw the file no reason to prefer their canonical order.
Per contiguous shard k: s_k = LL_k - mean_j LL_k,j (log-likelihood of the shard in canonical order
minus that of its j-th of m seeded shuffles), then a one-sided t-test of mean(s_k) > 0 over the r
shards (the paper's test). Beside it the exact whole-set permutation p = (1 + #{j : S_j >= S_0}) /
(m + 1), S the sums over shards, and the t-test's false-positive rate measured on the shuffles
themselves. Rows, defaults (r 10, m 20) and choices: docs/detectors.md#dataset-level-tests-one-p-value-for-the-set-each-with-its-measured-false-positive-rate.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

SEPARATOR = "\n\n"


def shard_bounds(n: int, shards: int) -> list[tuple[int, int]]:
    """(start, end) of `shards` contiguous shards of n items, sizes differing by at most one (the first
    n % shards shards one longer); fewer shards when n < shards."""
    shards = max(1, min(shards, n))
    size, extra = divmod(n, shards)
    ends = list(itertools.accumulate(size + (k < extra) for k in range(shards)))
    return list(zip([0, *ends[:-1]], ends))


def shard_permutations(bounds: list[tuple[int, int]], m: int, seed: int) -> list[list[np.ndarray]]:
    """Per shard, m seeded permutations of its item indices (absolute indices)."""
    rng = np.random.default_rng(seed)
    return [[start + rng.permutation(end - start) for _ in range(m)] for start, end in bounds]


def one_sided_t(values: np.ndarray) -> tuple[float, float]:
    """(t, p) of the one-sided one-sample t-test of mean > 0; NaN with fewer than 2 values. A zero spread
    gives t = +-inf (p 0 or 1) when the mean is not 0, NaN when it is."""
    from scipy.stats import t as student_t

    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if len(values) < 2:
        return math.nan, math.nan
    mean, sd = values.mean(), values.std(ddof=1)
    if sd == 0:
        if mean == 0:
            return math.nan, math.nan
        return math.copysign(math.inf, mean), 0.0 if mean > 0 else 1.0
    t = mean / (sd / math.sqrt(len(values)))
    return float(t), float(student_t.sf(t, len(values) - 1))


def rejection_rate(p_values, alpha: float) -> tuple[float, float]:
    """(the share of the p-values below alpha, NaN p-values left out and NaN when none is left; how many
    were left): a test's false-positive rate measured on null data."""
    kept = [p for p in p_values if not math.isnan(p)]
    return (float(np.mean(np.asarray(kept) < alpha)) if kept else math.nan), float(len(kept))


def sharded_test(canonical: np.ndarray, permuted: np.ndarray) -> dict[str, float]:
    """The test's metrics from the log-likelihoods: canonical[k] = LL_k, permuted[k, j] = LL_k,j.
    p_value is the sharded t-test's, p_value_exact the whole-set permutation test's."""
    canonical = np.asarray(canonical, dtype=np.float64)
    permuted = np.asarray(permuted, dtype=np.float64)
    t, p = one_sided_t(canonical - permuted.mean(axis=1))
    whole, draws = canonical.sum(), permuted.sum(axis=0)
    exact = (1 + int(np.sum(draws >= whole))) / (len(draws) + 1)
    shape = {"shards": float(len(canonical)), "permutations": float(permuted.shape[1])}
    return {"t": t, "p_value": p, "p_value_exact": float(exact), **shape}


def null_rejection_rate(permuted: np.ndarray, alpha: float = 0.05) -> dict[str, float]:
    """The t-test's false-positive rate measured on orders that are exchangeable by construction: each
    permutation j in turn plays the canonical order against the other m - 1; the share with p < alpha."""
    permuted = np.asarray(permuted, dtype=np.float64)
    m = permuted.shape[1]
    others = [np.delete(permuted, j, axis=1).mean(axis=1) for j in range(m)] if m > 1 else []
    rate, n = rejection_rate([one_sided_t(permuted[:, j] - rest)[1] for j, rest in enumerate(others)], alpha)
    return {"null_rejection_rate": rate, "null_orders": n, "null_alpha": float(alpha)}


def shard_texts(examples: list[str], bounds, permutations, separator: str = SEPARATOR):
    """(canonical texts [r], permuted texts [r * m], row-major by shard) of the examples joined."""
    canonical = [separator.join(examples[start:end]) for start, end in bounds]
    permuted = [separator.join(examples[i] for i in order) for orders in permutations for order in orders]
    return canonical, permuted


def log_likelihoods(model, tokenizer, texts: list[str], *, settings=None, accelerator=None, cache=None):
    """The sum of token log-probs of each whole text (one batched pass of the signal engine)."""
    import dataclasses

    from leaklab.signals.logprobs import ScoringSettings, compute_token_stats

    scoring = dataclasses.replace(ScoringSettings.from_config(settings), scoring_span="text")
    stats = compute_token_stats(
        model, tokenizer, texts, settings=scoring, distribution=False, accelerator=accelerator, cache=cache
    )
    return np.array([float(s.logprob.astype(np.float64).sum()) for s in stats], dtype=np.float64)


def run_sharded_test(
    model,
    tokenizer,
    examples: list[str],
    *,
    shards: int = 10,
    permutations: int = 20,
    seed: int = 0,
    separator: str = SEPARATOR,
    **engine,
) -> dict[str, float]:
    """The test of `examples` (in their canonical order) on a model: its metrics and its measured
    false-positive rate. `separator` joins the examples (a JSONL file's lines: "\n"). engine: settings,
    accelerator, cache for the signal engine."""
    if len(examples) < 4 or permutations < 2:
        raise ValueError(
            f"sharded_likelihood needs at least 4 examples and 2 permutations, got {len(examples)}, {permutations}"
        )
    bounds = shard_bounds(len(examples), shards)
    orders = shard_permutations(bounds, permutations, seed)
    canonical_texts, permuted_texts = shard_texts(examples, bounds, orders, separator)
    ll = log_likelihoods(model, tokenizer, canonical_texts + permuted_texts, **engine)
    canonical, permuted = ll[: len(bounds)], ll[len(bounds) :].reshape(len(bounds), permutations)
    return {**sharded_test(canonical, permuted), **null_rejection_rate(permuted)}
