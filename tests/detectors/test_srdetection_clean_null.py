"""SrDetection's margin after training: the clean-null rule (threshold = a quantile of clean samples'
margins under the same model, cross-fitted in a run), the margin reported as a score beside the rule,
and the per-checkpoint TPR / FPR table. No training: hand-made margins and the bigram model."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from test_srdetection_pipeline import GRAY, LN2, bigram

from leaklab.detectors import build_detector, score_detectors
from leaklab.detectors.inputs import ModelInputs
from leaklab.detectors.srdetection import (
    Decisions,
    clean_null_against_set,
    clean_null_decisions,
    cross_fitted_thresholds,
    null_threshold,
)
from leaklab.evaluations.detection import margin_score_rows
from leaklab.metrics import detection_metrics
from leaklab.recipe import EvaluateConfig
from leaklab.signals.logprobs import SignalCache


def test_null_threshold_is_the_finite_sample_quantile_by_hand():
    # m = 19 clean margins 1..19, alpha 0.1: rank ceil(0.9 * 20) = 18 -> the 18th smallest, 18.
    assert null_threshold(np.arange(1, 20), 0.1) == 18.0
    # alpha 0.05: rank ceil(0.95 * 20) = 19 -> 19 (no rounding up to 20 from 0.95 * 20 = 19.000...04).
    assert null_threshold(np.arange(1, 20), 0.05) == 19.0
    # NaN margins (undecided clean samples) take no part; order does not matter.
    assert null_threshold([4.0, np.nan, 2.0, 3.0, 1.0], 0.25) == 4.0  # m = 4: rank ceil(3.75) = 4
    # Too few clean samples to flag at level alpha: no threshold (m = 10, rank ceil(0.95 * 11) = 11 > 10).
    assert math.isnan(null_threshold(np.arange(10), 0.05))


def test_cross_fitted_thresholds_by_hand():
    # Samples 0-4 clean (4 is undecided: NaN), 5-6 members. With folds >= the 4 clean margins every fold
    # holds one clean sample, whatever the seed: each clean threshold is the quantile of the 3 others.
    margin = np.array([1.0, 2.0, 3.0, 4.0, np.nan, 3.5, 5.0])
    clean = np.array([True, True, True, True, True, False, False])
    t = cross_fitted_thresholds(margin, clean, 0.25, folds=10, seed=3)
    # Clean, m = 3 others: rank ceil(0.75 * 4) = 3, their largest: 4, 4, 4, and 3 for the sample of 4.
    # Members, all m = 4 clean margins: rank ceil(0.75 * 5) = 4 -> 4. The undecided clean sample: 4 too.
    np.testing.assert_array_equal(t, [4.0, 4.0, 4.0, 3.0, 4.0, 4.0, 4.0])
    raw = Decisions(
        n=2, leak=margin > 0, decided=np.isfinite(margin), variants_used=np.full(7, 2), margin=margin
    )
    d = clean_null_decisions(raw, t, 0.25)
    # Strictly above: only clean sample 3 (4 > 3) and member 6 (5 > 4); member 5 (3.5) is not.
    assert d.leak.tolist() == [False, False, False, True, False, False, True]
    assert d.decided.tolist() == [True] * 4 + [False, True, True]
    # Its null is the level: 1 of 4 decided clean samples flagged, alpha 0.25.
    assert d.null_rate[0] == 0.25 and math.isnan(d.null_rate[4])


def test_a_non_members_own_margin_never_enters_its_threshold():
    rng = np.random.default_rng(0)
    margin = rng.normal(size=60)
    clean = np.arange(60) % 2 == 0  # 30 non-members, 30 members
    before = cross_fitted_thresholds(margin, clean, 0.1, folds=5, seed=7)
    members = ~clean
    for i in np.flatnonzero(clean):
        for extreme in (1e6, -1e6):
            moved = margin.copy()
            moved[i] = extreme
            after = cross_fitted_thresholds(moved, clean, 0.1, folds=5, seed=7)
            assert after[i] == before[i], f"non-member {i}'s threshold moved with its own margin"
    # Members are decided against all non-members, so moving one non-member far up moves theirs.
    moved = margin.copy()
    moved[np.flatnonzero(clean)[np.argmax(margin[clean])]] = 1e6  # the top clean margin goes higher
    moved[np.flatnonzero(clean)[0]] = 1e6  # and another one joins it
    after = cross_fitted_thresholds(moved, clean, 0.1, folds=5, seed=7)
    assert (after[members] != before[members]).all()


def test_the_audit_decides_the_benchmark_against_the_clean_sets_quantile():
    margin = np.array([0.5, 2.5, np.nan])
    undecided = Decisions(
        n=3, leak=np.zeros(3, bool), decided=np.zeros(3, bool), variants_used=np.full(3, 3), margin=margin
    )
    d = clean_null_against_set(undecided, [0.0, 1.0, 2.0, 3.0, np.nan], 0.25)  # rank 4 of 4 -> 3.0
    assert d.threshold.tolist() == [3.0, 3.0, 3.0] and d.leak.tolist() == [False, False, False]
    d = clean_null_against_set(undecided, [0.0, 1.0, 2.0, 3.0, np.nan], 0.5)  # rank ceil(2.5) = 3 -> 2.0
    assert d.leak.tolist() == [False, True, False] and d.decided.tolist() == [True, True, False]


def test_clean_null_rule_on_the_bigram_model_by_hand():
    # GRAY at n = 1 has raw margins [0.5 ln 2, -ln 2, 0, NaN] (test_srdetection_pipeline); samples 1 and 3
    # are known clean, 3 is undecided (no variants). One clean margin cannot be cross-fitted: sample 1 is
    # undecided; the members' threshold at alpha 0.5 is rank ceil(0.5 * 2) = 1 of [-ln 2]: -ln 2.
    model, tok = bigram()
    scores = score_detectors(
        ["srdetection_clean_null:n=1,alpha=0.5"],
        ModelInputs(
            model,
            tok,
            GRAY.texts,
            settings=EvaluateConfig(),
            rule_inputs=GRAY,
            cache=SignalCache(),
            known_clean=np.array([False, True, False, True]),
        ),
    )
    d = scores.decisions["srdetection_clean_null@n=1"]
    np.testing.assert_allclose(d.threshold[[0, 2]], [-LN2, -LN2], atol=1e-6)
    assert d.leak.tolist() == [True, False, True, False]  # the tie with its variant (0) now leaks
    assert d.decided.tolist() == [True, False, True, False]
    np.testing.assert_allclose(
        scores.columns["srdetection_clean_null@n=1"][:3], [0.5 * LN2, -LN2, 0.0], atol=1e-6
    )
    assert scores.params["srdetection_clean_null@n=1"] == (
        "srdetection_clean_null",
        {"n": 1, "base": "gray", "alpha": 0.5},
    )
    # Without known-clean samples (an audit before its clean set is scored) nothing is decided.
    alone = score_detectors(
        ["srdetection_clean_null:n=1"],
        ModelInputs(model, tok, GRAY.texts, settings=EvaluateConfig(), rule_inputs=GRAY, cache=SignalCache()),
    )
    assert not alone.decisions["srdetection_clean_null@n=1"].decided.any()
    assert build_detector("srdetection_clean_null:base=black,n=3").columns() == {
        "srdetection_clean_null_black@n=3": {"n": 3, "base": "black", "alpha": 0.05}
    }
    with pytest.raises(ValueError, match="base must be 'gray' or 'black'"):
        build_detector("srdetection_clean_null:base=calibrated")


def test_margin_as_a_score_rows_are_detection_metrics_of_the_margin():
    rng = np.random.default_rng(1)
    labels = np.r_[np.ones(20, int), np.zeros(20, int)]
    margin = rng.normal(size=40) + labels
    margin[[3, 30]] = np.nan  # undecided: ranked lowest, as a NaN score is
    cfg = SimpleNamespace(cv_folds=5, seed=2, n_bootstrap=50)
    rows = margin_score_rows("srdetection_gray@n=10", "srdetection_gray", {"n": 10}, margin, labels, cfg)
    expected = detection_metrics(margin, labels, cv_folds=5, seed=2, n_bootstrap=50)
    assert {r["column"] for r in rows} == {"srdetection_gray_margin@n=10"}
    assert {r["detector"] for r in rows} == {"srdetection_gray_margin"}
    got = {r["metric"]: r["value"] for r in rows}
    assert got.keys() == expected.keys()
    for metric in ("f1", "f1_ci_low", "f1_ci_high", "auroc", "tpr@1%fpr", "f1_oracle", "threshold_cv"):
        assert got[metric] == pytest.approx(expected[metric])


def test_the_audit_thresholds_the_benchmark_at_the_clean_sets_quantile_and_cross_fits_the_clean_set():
    from leaklab.audit import clean_null_against_clean_set, rule_vs_clean

    model, tok = bigram()
    spec = "srdetection_clean_null:n=1,alpha=0.5"
    # The benchmark: GRAY's samples 0 and 2 (raw margins 0.5 ln 2 and 0); the clean set: GRAY itself, every
    # sample known clean (decided margins 0.5 ln 2, -ln 2, 0; sample 3 undecided).
    bench = GRAY.__class__(
        [GRAY.texts[i] for i in (0, 2)],
        [GRAY.contexts[i] for i in (0, 2)],
        [GRAY.variant_texts[i] for i in (0, 2)],
        [GRAY.variant_contexts[i] for i in (0, 2)],
    )
    scores = score_detectors(
        [spec],
        ModelInputs(
            model, tok, bench.texts, settings=EvaluateConfig(), rule_inputs=bench, cache=SignalCache()
        ),
    )
    clean = score_detectors(
        [spec],
        ModelInputs(
            model,
            tok,
            GRAY.texts,
            settings=EvaluateConfig(),
            rule_inputs=GRAY,
            cache=SignalCache(),
            known_clean=np.ones(4, bool),
        ),
    )
    column = "srdetection_clean_null@n=1"
    # The clean set, cross-fitted (3 decided margins, 3 folds of one): each against the other two at
    # alpha 0.5, rank ceil(0.5 * 3) = 2, their larger: 0 for 0.5 ln 2 (flagged), 0.5 ln 2 for -ln 2 and 0.
    np.testing.assert_allclose(clean.decisions[column].threshold[:3], [0.0, 0.5 * LN2, 0.5 * LN2], atol=1e-6)
    assert clean.decisions[column].leak.tolist() == [True, False, False, False]
    clean_null_against_clean_set(scores, clean)
    # The benchmark against all 3 clean margins: rank ceil(0.5 * 4) = 2 of [-ln 2, 0, 0.5 ln 2] -> 0.
    d = scores.decisions[column]
    np.testing.assert_allclose(d.threshold, [0.0, 0.0], atol=1e-6)
    assert d.leak.tolist() == [True, False] and d.decided.tolist() == [True, True]
    rows = rule_vs_clean(d, clean.decisions[column], {"column": column, "metric": "n_decided"})
    got = {r["metric"]: r["value"] for r in rows}
    assert got["clean_n_decided"] == 3 and got["clean_n_leaks"] == 1


def test_srdetection_tables_show_the_margin_as_a_score(tmp_path, capsys):
    from test_srdetection_pipeline import load_script, write_sr_run

    from leaklab.rundir import append_rows

    tables = load_script("srdetection_tables")
    run = write_sr_run(tmp_path / "run", "1:5", 2.0)
    rows = [
        {"step": step, "epoch": epoch, "evaluation": "detection", "detector": "srdetection_gray_margin",
         "column": f"srdetection_gray_margin@n={n}", "metric": "f1", "value": 0.5 + 0.1 * step + 0.001 * n}
        for step, epoch in enumerate((0.0, 1.0, 2.0))
        for n in (1, 10)
    ]  # fmt: skip
    append_rows(run / "results.jsonl", rows)
    assert tables.main([str(run), "--names", "tiny", "--margin"]) == 0
    out = capsys.readouterr().out
    assert "Table 3 (gray box), margin as a score" in out and "Table 11" not in out
    lines = [line for line in out.splitlines() if line.startswith("| tiny") or line.startswith("|  |")]
    assert [cell.strip() for cell in lines[1].split("|")[2:6]] == ["10", "51.00", "61.00", "71.00"]


def test_compare_reads_the_margin_like_ppl_at_the_largest_n():
    from leaklab.report.compare import f1_at
    from leaklab.results import largest_n_only

    table = {
        (1.0, "ppl"): {"f1": 0.8, "f1_oracle": 0.85},
        (1.0, "srdetection_gray@n=1"): {"f1": 0.55, "f1_oracle": 0.9},
        (1.0, "srdetection_gray@n=10"): {"f1": 0.6, "f1_oracle": 0.9},
        (1.0, "srdetection_gray_margin@n=1"): {"f1": 0.7, "f1_oracle": 0.75},
        (1.0, "srdetection_gray_margin@n=10"): {"f1": 0.78, "f1_oracle": 0.82},
    }
    kept = largest_n_only(table)
    assert sorted(c for _, c in kept) == ["ppl", "srdetection_gray@n=10", "srdetection_gray_margin@n=10"]
    # --oracle: the oracle threshold for ppl and the margin alike, the rule's own F1 for the rule.
    assert f1_at(kept, 1.0, oracle=True) == {
        "ppl": 0.85,
        "srdetection_gray@n=10": 0.6,
        "srdetection_gray_margin@n=10": 0.82,
    }
