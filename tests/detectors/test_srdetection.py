import numpy as np
import pytest

from leaklab.detectors.srdetection import (
    PAPER_NS,
    SrDetectionConfig,
    decisions_by_n,
    first_n_scores,
    gray_box_decisions,
)

nan = np.nan


def test_gray_box_golden():
    original = [1.0, 5.0, 2.0, 3.0]
    variants = [
        [2.0, 3.0, 1.5],  # original lowest -> leak
        [4.0, 6.0, 7.0],  # a variant is lower -> no leak
        [2.0, 2.5, 3.0],  # tie with the best variant -> not a leak
        [4.0, nan, nan],  # one verified variant -> undecided at n >= 2
    ]
    d = gray_box_decisions(original, variants)
    assert d.n == 3
    assert d.leak.tolist() == [True, False, False, False]
    assert d.decided.tolist() == [True, True, True, False]
    assert d.n_undecided == 1 and d.leak.sum() == 1
    assert d.variants_used.tolist() == [3, 3, 3, 1]
    assert d.margin[:3].tolist() == [0.5, -1.0, 0.0] and np.isnan(d.margin[3])


def test_black_box_golden():
    original = [0.9, 0.2, 0.5, nan]
    variants = [[0.1, 0.3, 0.0], [0.1, 0.6, 0.2], [0.5, 0.4, 0.1], [0.1, 0.2, 0.3]]
    d = decisions_by_n(original, variants, mode="black", ns=(3,))[3]
    assert d.leak.tolist() == [True, False, False, False]  # third row is a tie
    assert d.decided.tolist() == [True, True, True, False]  # the original's NaN makes it undecided


def test_all_zero_overlap_is_not_a_leak():
    d = decisions_by_n([0.0, 0.0], [[0.0] * 10, [0.0] * 10], mode="black", ns=(10,))[10]
    assert not d.leak.any() and d.decided.all()


def test_first_n_takes_first_finite_scores():
    scores = [[nan, 3.0, 1.0, nan, 2.0], [nan, nan, nan, nan, nan]]
    out = first_n_scores(scores, 2)
    assert out[0].tolist() == [3.0, 1.0]
    assert np.isnan(out[1]).all()


def test_decisions_by_n_from_one_set_of_ten():
    # Variant i of the single sample has PPL 10 - i (so later variants are easier). The original (1.5)
    # beats the first 8 (10..3) but not the ninth (2.0) or tenth (1.0).
    variants = [[10.0 - i for i in range(10)]]
    by_n = decisions_by_n([1.5], variants, mode="gray")
    assert sorted(by_n) == list(PAPER_NS)
    assert [bool(by_n[n].leak[0]) for n in PAPER_NS] == [True, True, True, False]
    assert by_n[1].decided[0]  # n = 1 needs only one variant
    assert by_n[10].variants_used[0] == 10


def test_undecided_threshold_follows_n():
    variants = [[4.0, nan, nan, nan, nan]]
    by_n = decisions_by_n([1.0], variants, mode="gray", ns=(1, 3))
    assert by_n[1].leak[0] and by_n[1].decided[0]
    assert not by_n[3].decided[0] and not by_n[3].leak[0]


def test_a_column_decides_only_samples_with_n_verified_variants():
    # The paper always compares n variants. Sample 0 has 10 verified variants, sample 1 only 4: at
    # n = 10 sample 1 is left out (undecided, counted) rather than compared with 4, so every decided
    # sample of the column has the null 1/11; at n = 3 both are decided.
    variants = [[5.0] * 10, [5.0] * 4 + [nan] * 6]
    by_n = decisions_by_n([1.0, 1.0], variants, mode="gray", ns=(3, 10))
    assert by_n[10].decided.tolist() == [True, False] and by_n[10].n_undecided == 1
    assert by_n[3].decided.tolist() == [True, True]
    assert np.nanmax(by_n[10].null_rate) == pytest.approx(1 / 11)
    # min_variants = 2 (the old default) decides sample 1 at n = 10 on 4 variants: its null is 1/5
    relaxed = decisions_by_n([1.0, 1.0], variants, mode="gray", ns=(10,), min_variants=2)[10]
    assert relaxed.decided.tolist() == [True, True] and relaxed.null_rate[1] == pytest.approx(1 / 5)
    assert SrDetectionConfig().min_variants == 0 and SrDetectionConfig(min_variants=-1).check()


def test_bad_shapes_and_modes():
    with pytest.raises(ValueError):
        gray_box_decisions([1.0, 2.0], [[1.0]])
    with pytest.raises(ValueError):
        decisions_by_n([1.0], [[1.0]], mode="white")


def test_split_prefix_suffix():
    """The black box's cut (`cut_text`) at round(fraction x tokens): the suffix keeps at least one token
    (NGO stays defined), the prefix too when there are two or more."""
    from test_detectors import bigram

    from leaklab.detectors.srdetection import Cut, cut_text

    _, tok = bigram()
    ids = tok.get_vocab()
    ten = " ".join("abcabcabca")
    assert cut_text(tok, ten, "", split="text").prefix == "a b c a b "  # 5 of 10 tokens
    assert cut_text(tok, "a b", "", split="text", prefix_fraction=0.9) == Cut("a ", (ids["b"],))
    assert cut_text(tok, "a b", "", split="text", prefix_fraction=0.1) == Cut("a ", (ids["b"],))
    assert cut_text(tok, "c c a", "c c ", prefix_fraction=0.9) == Cut("c c ", (ids["a"],))  # lone token
    assert cut_text(tok, "c c ", "c c ") is None  # no solution token


def test_unflatten_pads_missing_variants_with_nan():
    from leaklab.detectors.srdetection import SrInputs

    rows = [["a0", "a1", "a2"], ["b0"], []]
    inputs = SrInputs(["a", "b", "c"], ["", "", ""], rows, [[""] * len(r) for r in rows])
    original, variants = inputs.unflatten(np.array([1.0, 4.0, np.nan, 2.0, 3.0, np.nan, 5.0]))
    assert original[:2].tolist() == [1.0, 4.0] and np.isnan(original[2])
    assert variants[0, :2].tolist() == [2.0, 3.0] and np.isnan(variants[0, 2])
    assert variants[1, 0] == 5.0 and np.isnan(variants[1, 1:]).all()
    assert np.isnan(variants[2]).all()
    d = gray_box_decisions(original, variants, n=2)
    assert d.decided.tolist() == [True, False, False]
    assert not gray_box_decisions(original, variants).decided.any()  # n = the width, 3: none has 3


# --------------------------------------------------------------------------- the calibrated rule


def test_calibrated_golden_hand_computed():
    from leaklab.detectors.srdetection import calibrated_decisions

    # Ranks by log PPL (1 = lowest), D_j = rank_reference(j) - rank_target(j), p = #{D_j >= D_0} / (m+1).
    t0 = [1.0, 1.0, 1.0, 1.0, 2.0]
    tv = [[2.0, 3.0], [2.0, 3.0], [1.0, 2.0], [2.0, nan], [1.0, 3.0]]
    r0 = [3.0, 1.0, 2.0, 1.0, 3.0]
    rv = [[1.0, 2.0], [2.0, 3.0], [1.0, 3.0], [2.0, 5.0], [2.0, 1.0]]
    d = calibrated_decisions(t0, tv, r0, rv)
    # 0: target ranks (1,2,3), reference (3,1,2): D = (2,-1,-1), p = 1/3, leak.
    # 1: both models agree: D = (0,0,0), p = 1, no leak.
    # 2: target ties the original with a variant, mid-ranks (1.5,1.5,3); reference (2,1,3):
    #    D = (0.5,-0.5,0), p = 1/3, leak.
    # 3: one variant scored by both models: undecided at n = 2.
    # 4: target (2,1,3), reference (3,2,1): D = (1,1,-2), p = 2/3: the original shares the top, no leak.
    assert d.decided.tolist() == [True, True, True, False, True]
    assert d.leak.tolist() == [True, False, True, False, False]
    np.testing.assert_allclose(d.margin, [2.0, 0.0, 0.5, nan, 1.0])
    np.testing.assert_allclose(d.pvalue, [1 / 3, 1.0, 1 / 3, nan, 2 / 3])
    np.testing.assert_allclose(d.null_rate, [1 / 3, 1 / 3, 1 / 3, nan, 1 / 3])
    # A looser alpha flags sample 4 too (p = 2/3 <= 0.7), never sample 1 (D_0 = 0).
    loose = calibrated_decisions(t0, tv, r0, rv, alpha=0.7)
    assert loose.leak.tolist() == [True, False, True, False, True]


def test_calibrated_ignores_variant_style_that_fools_the_plain_rule():
    """Variants uniformly less natural than the original (a style bias, no exposure): the plain rule
    flags every sample, the calibrated rule at most ~1/(n+1) of them, since the reference sees the
    same bias. Failed before the calibrated rule existed."""
    from leaklab.detectors.srdetection import calibrated_decisions

    rng = np.random.default_rng(0)
    samples, n = 4000, 10
    style = rng.normal(size=(samples, n + 1))  # what both models share about each text
    style[:, 1:] += 3.0  # every variant much less likely than its original
    target = style + 0.3 * rng.normal(size=style.shape)
    reference = style + 0.3 * rng.normal(size=style.shape)
    plain = gray_box_decisions(target[:, 0], target[:, 1:], n=n)
    assert plain.leak.mean() > 0.8
    for m in (1, 3, 10):
        d = calibrated_decisions(target[:, 0], target[:, 1:], reference[:, 0], reference[:, 1:], n=m)
        assert d.decided.all()
        assert d.leak.mean() <= 1 / (m + 1) + 3 * np.sqrt(1 / (m + 1) / samples)
        # Exchangeable null: the p-values are (super-)uniform on {1/(m+1), ..., 1}.
        assert np.mean(d.pvalue <= 0.5) <= 0.5 + 0.03


def test_calibrated_finds_exposure():
    from leaklab.detectors.srdetection import calibrated_decisions

    rng = np.random.default_rng(1)
    style = rng.normal(size=(500, 11))
    reference = style
    target = style.copy()
    target[:, 0] -= 5.0  # the target saw the originals
    d = calibrated_decisions(target[:, 0], target[:, 1:], reference[:, 0], reference[:, 1:], n=10)
    assert d.leak.mean() > 0.9
    np.testing.assert_allclose(d.pvalue[d.leak], 1 / 11)


def test_calibrated_registry_entry():
    from leaklab.detectors import build_detector, needs_of, record_of

    det = build_detector("srdetection_calibrated:n=1,5,alpha=0.2")
    assert record_of("srdetection_calibrated").kind == "rule"
    assert "reference" in needs_of(["srdetection_calibrated"]) and "variants" in needs_of(
        ["srdetection_calibrated"]
    )
    assert list(det.columns()) == ["srdetection_calibrated@n=1", "srdetection_calibrated@n=5"]
    with pytest.raises(ValueError, match="alpha"):
        build_detector("srdetection_calibrated:alpha=1.5")


def test_excess_rate_pvalue_hand_computed():
    from scipy.stats import binom

    from leaklab.metrics import excess_rate_pvalue

    # Three samples each flagged with chance 1/2: P(>= 2 flagged) = (3 + 1) / 8.
    assert excess_rate_pvalue([1, 1, 0], [0.5, 0.5, 0.5]) == pytest.approx(0.5)
    # Chances 1/2 and 1/4: P(both) = 1/8; P(>= 1) = 1 - (1/2)(3/4) = 5/8; P(>= 0) = 1.
    assert excess_rate_pvalue([1, 1], [0.5, 0.25]) == pytest.approx(0.125)
    assert excess_rate_pvalue([0, 1], [0.5, 0.25]) == pytest.approx(0.625)
    assert excess_rate_pvalue([0, 0], [0.5, 0.25]) == pytest.approx(1.0)
    # Equal chances: the binomial tail (scipy, an independent implementation).
    flags = [1] * 30 + [0] * 134
    assert excess_rate_pvalue(flags, [1 / 11] * 164) == pytest.approx(binom.sf(29, 164, 1 / 11), rel=1e-9)
    assert np.isnan(excess_rate_pvalue([], []))


def test_audit_rule_rates_report_the_null_beside_the_rate():
    from leaklab.audit import rule_rates
    from leaklab.detectors.srdetection import SrDetectionCalibrated, SrDetectionGray, calibrated_decisions

    # Sample 0 flagged, 1 not, 2 undecided; two variants each: null rate 1/3 per decided sample.
    d = gray_box_decisions([1.0, 5.0, 1.0], [[2.0, 3.0], [4.0, 6.0], [nan, nan]], n=2)
    rates = rule_rates(SrDetectionGray(), d, n_bootstrap=0, seed=0)
    assert rates["leak_rate"] == 0.5 and rates["null_rate"] == pytest.approx(1 / 3)
    assert rates["excess_pvalue"] == pytest.approx(1 - (2 / 3) ** 2)
    assert "pvalue_median" not in rates
    c = calibrated_decisions([1.0, 1.0], [[2.0, 3.0], [2.0, 3.0]], [3.0, 1.0], [[1.0, 2.0], [2.0, 3.0]])
    rates = rule_rates(SrDetectionCalibrated(), c, n_bootstrap=0, seed=0)
    assert rates["pvalue_median"] == pytest.approx((1 / 3 + 1) / 2) and rates["n_pvalue_le_0.05"] == 0


def test_a_rule_column_that_decided_nothing_is_marked_in_the_results_table():
    """A benchmark without tests under verify: tests leaves SrDetection undecided everywhere; its
    F1 / AUROC (those of "never a leak") must not read as a result."""
    import importlib.util
    from pathlib import Path

    from leaklab.results import undecided_note

    assert undecided_note({"n": 10.0, "n_undecided": 10.0}) == " (all undecided)"
    assert undecided_note({"n": 10.0, "n_undecided": 3.0}) == ""
    assert undecided_note({}) == ""
    script = Path(__file__).resolve().parents[2] / "analysis" / "detector_table.py"
    spec = importlib.util.spec_from_file_location("detector_table", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    table = {
        (1.0, "ppl"): {"n": 10.0, "auroc": 0.7, "f1": 0.6},
        (1.0, "srdetection_gray@n=10"): {"n": 10.0, "n_undecided": 10.0, "auroc": 0.5, "f1": 0.333},
    }
    text = module.render({"run": table})
    line = next(x for x in text.splitlines() if "SrDetection" in x)
    assert "all undecided" in line
    assert "all undecided" not in next(x for x in text.splitlines() if "PPL" in x)
