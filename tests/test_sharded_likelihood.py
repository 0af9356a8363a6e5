"""Golden tests of the sharded likelihood comparison test (Oren et al., 2023): the statistics by hand,
and the model pass against log-likelihoods read from the bigram table of test_detectors.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_detectors_2026 import word_probs
from test_model_detectors import bigram

from leaklab.dataset_tests.sharded_likelihood import (
    null_rejection_rate,
    one_sided_t,
    run_sharded_test,
    shard_bounds,
    shard_permutations,
    sharded_test,
)
from leaklab.signals.logprobs import SignalCache


def test_shard_bounds_by_hand():
    assert shard_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert shard_bounds(3, 5) == [(0, 1), (1, 2), (2, 3)]  # never an empty shard


def test_one_sided_t_by_hand():
    """(1, 2, 3): mean 2, sd 1, t = 2 sqrt(3); with 2 degrees of freedom the tail has the closed form
    P(T >= t) = (1 - t / sqrt(t^2 + 2)) / 2 = (1 - sqrt(12 / 14)) / 2."""
    t, p = one_sided_t(np.array([1.0, 2.0, 3.0]))
    assert t == pytest.approx(2 * math.sqrt(3))
    assert p == pytest.approx((1 - math.sqrt(12 / 14)) / 2)
    # (1, 1.5): t = 1.25 / (0.3536 / sqrt 2) = 5; with 1 degree of freedom P(T >= 5) = 1/2 - atan(5) / pi.
    assert one_sided_t(np.array([1.0, 1.5]))[1] == pytest.approx(0.5 - math.atan(5) / math.pi)
    assert one_sided_t(np.array([1.0, 1.0])) == (math.inf, 0.0)
    assert all(math.isnan(v) for v in one_sided_t(np.array([1.0])))


def test_sharded_test_by_hand():
    """Shard statistics 10 - 9 and 5 - 4: both 1, no spread: t = inf, p = 0. Whole-set sums: canonical
    15 against draws 13, 13, 13: p_exact = 1/4; against 15, 12, 15: (1 + 2) / 4."""
    result = sharded_test(np.array([10.0, 5.0]), np.array([[8.0, 9.0, 10.0], [5.0, 4.0, 3.0]]))
    assert (result["t"], result["p_value"], result["p_value_exact"]) == (math.inf, 0.0, 0.25)
    other = sharded_test(np.array([10.0, 5.0]), np.array([[10.0, 8.0, 12.0], [5.0, 4.0, 3.0]]))
    assert other["p_value_exact"] == 0.75


def test_null_rejection_rate_by_hand():
    """Three orders of two shards (rows). Order 0 against orders 1 and 2: shard differences
    (1 - 1, 0 - 1.5) = (0, -1.5), p > 1/2. Order 1: (2 - 0.5, 2 - 0.5) = (1.5, 1.5), no spread: p = 0.
    Order 2: (0 - 1.5, 1 - 1) = (-1.5, 0), p > 1/2. One of three rejects at alpha 0.1."""
    permuted = np.array([[1.0, 2.0, 0.0], [0.0, 2.0, 1.0]])
    got = null_rejection_rate(permuted, alpha=0.1)
    assert got == {"null_rejection_rate": pytest.approx(1 / 3), "null_orders": 3.0, "null_alpha": 0.1}


def test_the_model_pass_matches_the_bigram_table():
    """Every shard text's log-likelihood is the sum of log p(word | previous word) of its words (the
    blank-line separator is whitespace to the word tokenizer), so the whole test can be recomputed from
    the table with the same seeded permutations."""
    model, tok = bigram()
    examples = ["a b", "c", "b b a", "c a", "a", "b c c"]
    got = run_sharded_test(model, tok, examples, shards=3, permutations=4, seed=7, cache=SignalCache())
    bounds = shard_bounds(6, 3)
    orders = shard_permutations(bounds, 4, 7)

    def ll(items):
        return float(np.sum(np.log(word_probs(" ".join(items)))))

    canonical = np.array([ll(examples[s:e]) for s, e in bounds])
    permuted = np.array([[ll([examples[i] for i in order]) for order in shard] for shard in orders])
    expected = {**sharded_test(canonical, permuted), **null_rejection_rate(permuted)}
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-5, nan_ok=True), key


def test_too_few_examples_is_refused():
    model, tok = bigram()
    with pytest.raises(ValueError, match="at least 4 examples"):
        run_sharded_test(model, tok, ["a", "b"])
