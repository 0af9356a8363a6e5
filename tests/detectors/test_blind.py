"""The blind baseline (leaklab/detectors/blind.py): a text-only member classifier, scored out-of-fold."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from leaklab.data.benchmarks import load_benchmark
from leaklab.detectors.blind import (
    SHIFT_ALPHA,
    blind_scores,
    shift_pvalue,
    shift_warning,
    text_features,
)
from leaklab.evaluations.detection import Detection
from leaklab.metrics import auroc


@pytest.fixture(scope="module")
def humaneval_texts() -> list[str]:
    return [t.text("prompt+solution") for t in load_benchmark("humaneval")]


def test_random_split_is_chance(humaneval_texts):
    # Random halves of HumanEval, as a run's manifest draws them: nothing in the text tells members
    # apart. The null sd of AUROC at 82 + 82 is 0.045 per split, 0.026 over three; a classifier that saw
    # the labels of the samples it scores (fit and score on everything) gets 1.0 here.
    n = len(humaneval_texts)
    values = []
    for seed in range(3):
        labels = np.zeros(n, int)
        labels[np.random.default_rng(seed).permutation(n)[: n // 2]] = 1
        values.append(auroc(blind_scores(humaneval_texts, labels, seed=seed), labels))
    assert 0.40 <= np.mean(values) <= 0.60, values


def test_long_members_short_non_members(humaneval_texts):
    lengths = np.array([len(t) for t in humaneval_texts])
    labels = (lengths > np.median(lengths)).astype(int)
    scores = blind_scores(humaneval_texts, labels)
    value = auroc(scores, labels)
    assert value > 0.9
    # Not one of 49 shuffled labellings comes close: p at its floor, 1/50.
    p_value = shift_pvalue(humaneval_texts, labels, scores=scores)
    assert p_value == pytest.approx(1 / 50)
    assert "AUROC" in shift_warning(p_value, value, "members from non-members")


def test_dated_members(humaneval_texts):
    # The same kind of text on both sides, but the members carry a date line (a user's newer files).
    rng = np.random.default_rng(0)
    texts = humaneval_texts[:100]
    labels = np.zeros(len(texts), int)
    labels[rng.permutation(len(texts))[:50]] = 1
    months = ["Jan", "Mar", "June", "Sept", "Nov"]
    dated = [
        f"# last modified {2023 + i % 2}-{1 + i % 12:02d}-{1 + i % 28:02d}, reviewed {months[i % 5]} {1 + i % 28}\n{t}"
        if y
        else t
        for i, (t, y) in enumerate(zip(texts, labels))
    ]
    value = auroc(blind_scores(dated, labels, seed=1), labels)
    assert value > 0.9


def test_features():
    f = text_features("released 2024-05-01, fixed on March 3 and in 1999\n    x = 1\n")
    assert f[-1] == 3  # date-like tokens: an ISO date, a month and day, a year
    assert f[5] == pytest.approx(0.5)  # one of the two lines is indented
    assert text_features("") == text_features("")  # an empty text has features, no error
    assert len(text_features("")) == len(f)


def test_too_few_samples_is_nan_and_mismatch_is_an_error():
    assert np.isnan(blind_scores(["a", "b", "c"], [1, 0, 0])).all()
    with pytest.raises(ValueError, match="3 texts but 2 labels"):
        blind_scores(["a", "b", "c"], [1, 0])


def test_warning_only_when_the_test_rejects():
    assert shift_warning(SHIFT_ALPHA, 0.9, "x") == ""  # p must be below alpha, not equal
    assert shift_warning(float("nan"), 0.9, "x") == ""
    assert "AUROC 0.550" in shift_warning(0.01, 0.55, "x")  # a small but significant shift warns


def test_shift_false_alarms_on_random_splits(humaneval_texts):
    """The warning's false-alarm rate on random 20/20 splits of one benchmark (a run's manifest draws
    random splits): at most SHIFT_ALPHA, as the permutation test guarantees. The old AUROC cut-off (> 0.6)
    fired on 9 of the first 40 such splits, a rank test on the pooled scores on 5
    (analysis/blind_shift_null.py)."""
    texts = np.array(humaneval_texts, dtype=object)
    labels = np.r_[np.ones(20, int), np.zeros(20, int)]
    alarms = 0
    for i in range(20):
        chosen = list(texts[np.random.default_rng(i).choice(len(texts), 40, replace=False)])
        scores = blind_scores(chosen, labels, seed=i)
        p_value = shift_pvalue(chosen, labels, seed=i, scores=scores)
        alarms += bool(shift_warning(p_value, auroc(scores, labels), "x"))
    assert alarms <= SHIFT_ALPHA * 20, alarms


def test_detection_rows_and_warning_logged_once(humaneval_texts):
    lengths = np.array([len(t) for t in humaneval_texts[:80]])
    labels = (lengths > np.median(lengths)).astype(int)
    logged: list[str] = []
    ctx = SimpleNamespace(
        recipe=SimpleNamespace(evaluate=SimpleNamespace(cv_folds=5, seed=0, n_bootstrap=50)),
        eval_set=SimpleNamespace(texts=humaneval_texts[:80], labels=labels),
        log=logged.append,
    )
    detection = Detection()
    for _ in range(2):  # two checkpoints
        rows = {r["metric"]: r["value"] for r in detection._blind_rows(ctx, detection._blind(ctx))}
    assert rows["shift_p_value"] < SHIFT_ALPHA and rows["distribution_shift"] == 1.0
    assert rows["auroc_ci_low"] <= rows["auroc"] <= rows["auroc_ci_high"]
    assert len(logged) == 1 and "distribution shift" in logged[0]
