"""The sharded likelihood comparison test of Oren et al. (2023, "Proving Test Set Contamination in Black
Box Language Models"): is the benchmark's own order of examples more likely than shuffled orders?

If the examples of a benchmark are exchangeable (nothing about them fixes their order), a model that
never saw the benchmark as a file finds its canonical order no more likely than any shuffle of it. A
model trained on the file, in order, prefers the order it saw. The test:

  1. cut the n examples, in canonical order, into r contiguous shards of (nearly) equal size;
  2. for each shard k: LL_k, the log-likelihood (the sum over all tokens) of its examples joined in
     canonical order, and LL_k,j for j = 1..m random permutations of the same examples (seeded);
  3. the shard statistic s_k = LL_k - (1/m) sum_j LL_k,j (mean 0 under exchangeability);
  4. a one-sided t-test of mean(s_k) > 0 over the r shards: t = mean(s) / (sd(s) / sqrt(r)), df r - 1.

That t-test is the paper's sharded test (valid as r grows). Beside it, the exact permutation p-value of
the unsharded statistic: with S_0 = sum_k LL_k and S_j = sum_k LL_k,j (the j-th draw of every shard is
one permutation of the whole set),

    p_exact = (1 + #{ j : S_j >= S_0 }) / (m + 1)

whose false-positive rate is at most alpha for every alpha and every n under exchangeability (at the
price of a floor 1 / (m + 1)). The measured false-positive rate of the t-test comes free from the same
passes (`null_rejection_rate`): each permutation j in turn plays the canonical order against the other
m - 1, which is the clean condition by construction (a random order is exchangeable).

Choices the paper leaves open here: r (10) and m (20) by default, the separator between examples (a
blank line), and the examples' text (what the caller passes: the benchmark's task texts, or its
JSONL lines to match a benchmark trained on as a file).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SEPARATOR = "\n\n"


def shard_bounds(n: int, shards: int) -> list[tuple[int, int]]:
    """(start, end) of `shards` contiguous shards of n items, sizes differing by at most one (the first
    n % shards shards one longer); fewer shards when n < shards."""
    shards = max(1, min(shards, n))
    size, extra = divmod(n, shards)
    out, start = [], 0
    for k in range(shards):
        end = start + size + (1 if k < extra else 0)
        out.append((start, end))
        start = end
    return out


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


@dataclass
class ShardedResult:
    t: float
    p_value: float  # the sharded t-test's
    p_value_exact: float  # the whole-set permutation test's
    shards: int
    permutations: int

    def as_metrics(self) -> dict[str, float]:
        return {
            "t": self.t,
            "p_value": self.p_value,
            "p_value_exact": self.p_value_exact,
            "shards": float(self.shards),
            "permutations": float(self.permutations),
        }


def sharded_test(canonical: np.ndarray, permuted: np.ndarray) -> ShardedResult:
    """The test from the log-likelihoods: canonical[k] = LL_k, permuted[k, j] = LL_k,j."""
    canonical = np.asarray(canonical, dtype=np.float64)
    permuted = np.asarray(permuted, dtype=np.float64)
    t, p = one_sided_t(canonical - permuted.mean(axis=1))
    whole, draws = canonical.sum(), permuted.sum(axis=0)
    exact = (1 + int(np.sum(draws >= whole))) / (len(draws) + 1)
    return ShardedResult(t, p, float(exact), len(canonical), permuted.shape[1])


def null_rejection_rate(permuted: np.ndarray, alpha: float = 0.05) -> dict[str, float]:
    """The t-test's false-positive rate measured on orders that are exchangeable by construction: each
    permutation j in turn plays the canonical order against the other m - 1; the share with p < alpha."""
    permuted = np.asarray(permuted, dtype=np.float64)
    m = permuted.shape[1]
    p_values = []
    for j in range(m):
        rest = np.delete(permuted, j, axis=1)
        if rest.shape[1]:
            p = one_sided_t(permuted[:, j] - rest.mean(axis=1))[1]
            if not math.isnan(p):
                p_values.append(p)
    rate = float(np.mean(np.asarray(p_values) < alpha)) if p_values else math.nan
    return {"null_rejection_rate": rate, "null_orders": float(len(p_values)), "null_alpha": float(alpha)}


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
    return {**sharded_test(canonical, permuted).as_metrics(), **null_rejection_rate(permuted)}
