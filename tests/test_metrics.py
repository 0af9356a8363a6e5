"""Detection metrics against scikit-learn (an independent implementation) and small hand-made cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score, roc_auc_score, roc_curve
from sklearn.model_selection import StratifiedKFold

from leaklab.metrics import auroc, best_threshold, binary_metrics, cv_decisions, detection_metrics, tpr_at_fpr


def noisy(n: int = 200, shift: float = 1.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.r_[np.ones(n // 2), np.zeros(n - n // 2)]).astype(int)
    scores = np.round(rng.normal(size=n) + shift * labels, 1)  # rounding makes ties
    return scores, labels


def test_binary_metrics_match_sklearn_macro():
    rng = np.random.default_rng(1)
    for _ in range(20):
        y, p = rng.integers(0, 2, 30), rng.integers(0, 2, 30)
        m = binary_metrics(y, p)
        assert m["accuracy"] == pytest.approx(accuracy_score(y, p))
        assert m["precision"] == pytest.approx(precision_score(y, p, average="macro", zero_division=0))
        assert m["recall"] == pytest.approx(recall_score(y, p, average="macro", zero_division=0))
        assert m["f1"] == pytest.approx(f1_score(y, p, average="macro", zero_division=0))
        assert m["precision_member"] == pytest.approx(precision_score(y, p, zero_division=0))
        assert m["recall_member"] == pytest.approx(recall_score(y, p, zero_division=0))


def test_everything_called_member_matches_srdetection_pattern():
    # Half members, all predicted member: acc 0.5, macro precision 0.25, macro recall 0.5, macro F1 1/3.
    m = binary_metrics([1, 1, 0, 0], [1, 1, 1, 1])
    assert (m["accuracy"], m["precision"], m["recall"], m["f1"]) == pytest.approx((0.5, 0.25, 0.5, 1 / 3))


def test_auroc_and_tpr_match_sklearn_with_ties():
    for seed in range(5):
        s, y = noisy(seed=seed)
        assert auroc(s, y) == pytest.approx(roc_auc_score(y, s))
        fpr, tpr, _ = roc_curve(y, s)
        for level in (0.01, 0.05, 0.2):
            assert tpr_at_fpr(s, y, level) == pytest.approx(tpr[fpr <= level].max())


def test_perfect_and_inverted_scores():
    s, y = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0, 0, 1, 1])
    m = detection_metrics(s, y, cv_folds=2)
    assert m["auroc"] == 1.0 and m["tpr@1%fpr"] == 1.0
    assert m["f1_oracle"] == 1.0 and m["threshold_oracle"] == pytest.approx(0.25)
    assert detection_metrics(-s, y, cv_folds=2)["auroc"] == 0.0


def test_best_threshold_maximises_macro_f1_by_brute_force():
    s, y = noisy(80, seed=3)
    t = best_threshold(s, y)
    best = max(f1_score(y, s >= c, average="macro", zero_division=0) for c in np.r_[np.unique(s), np.inf])
    assert f1_score(y, s >= t, average="macro", zero_division=0) == pytest.approx(best)
    assert math.isfinite(t)


def test_cv_thresholds_never_see_the_held_out_fold():
    s, y = noisy(100, seed=4)
    decisions, thresholds = cv_decisions(s, y, folds=5, seed=7)
    splits = StratifiedKFold(n_splits=5, shuffle=True, random_state=7).split(s, y)
    for (fit, held_out), t in zip(splits, thresholds):
        assert t == best_threshold(s[fit], y[fit])
        np.testing.assert_array_equal(decisions[held_out], s[held_out] >= t)
        # Relabelling the held-out fold cannot move its threshold.
        flipped = y.copy()
        flipped[held_out] = 1 - flipped[held_out]
        assert best_threshold(s[fit], flipped[fit]) == t


def test_cv_is_honest_on_pure_noise():
    """Random scores: the oracle threshold overfits, the cross-validated one does not."""
    oracle, honest = [], []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        y = rng.permutation(np.r_[np.ones(30), np.zeros(30)]).astype(int)
        m = detection_metrics(rng.normal(size=60), y, seed=seed)
        oracle.append(m["f1_oracle"])
        honest.append(m["f1"])
    assert np.mean(oracle) > np.mean(honest) + 0.03 and np.mean(honest) < 0.52


def test_metrics_are_seeded_and_thresholds_reported():
    s, y = noisy(seed=5)
    a = detection_metrics(s, y, seed=3, n_bootstrap=50)
    assert a == detection_metrics(s, y, seed=3, n_bootstrap=50)
    assert [a[f"threshold_cv_fold{i}"] for i in range(5)] and a["cv_folds"] == 5
    assert a["threshold_cv"] == pytest.approx(np.mean([a[f"threshold_cv_fold{i}"] for i in range(5)]))
    for name in ("auroc", "f1", "accuracy", "precision", "recall", "tpr@5%fpr", "f1_oracle"):
        assert a[f"{name}_ci_low"] <= a[f"{name}_ci_high"]
    assert a["auroc_ci_low"] < a["auroc"] < a["auroc_ci_high"]


def test_nan_scores_rank_lowest_and_are_never_members():
    s = np.array([np.nan, 0.5, 0.2, np.nan, 0.9, 0.1])
    y = np.array([1, 1, 0, 0, 1, 0])
    m = detection_metrics(s, y, cv_folds=2)
    assert m["n_nan"] == 2
    # As if NaN were below every score: -10 for both.
    assert m["auroc"] == pytest.approx(roc_auc_score(y, np.nan_to_num(s, nan=-10)))
    t = m["threshold_oracle"]
    assert np.isfinite(t) and not (np.nan_to_num(s, nan=-np.inf)[np.isnan(s)] >= t).any()
    every_nan = detection_metrics(np.full(4, np.nan), [1, 0, 1, 0], cv_folds=2)
    assert every_nan["auroc"] == 0.5 and every_nan["recall_member_oracle"] == 0.0


def test_degenerate_inputs():
    m = detection_metrics([1.0, 1.0, 1.0, 1.0], [1, 0, 1, 0], cv_folds=2)
    assert m["auroc"] == 0.5 and math.isfinite(m["threshold_oracle"])
    one_class = detection_metrics([0.1, 0.2, 0.3], [1, 1, 1])
    assert math.isnan(one_class["auroc"]) and math.isnan(one_class["f1"]) and one_class["cv_folds"] == 0
    few = detection_metrics([0.1, 0.2, 0.3, 0.4, 0.5], [1, 1, 1, 0, 0], cv_folds=5)
    assert few["cv_folds"] == 2  # limited by the two non-members
    with pytest.raises(ValueError):
        detection_metrics([0.1, 0.2], [1, 2])


def _loop_bootstrap(s, y, decisions, n, seed):
    """An independent reference: one resample at a time, through sklearn's AUROC and plain loops."""
    rng = np.random.default_rng(seed)
    pos, neg = np.flatnonzero(y), np.flatnonzero(~y)
    draws = {}
    for _ in range(n):
        idx = np.concatenate([rng.choice(pos, len(pos)), rng.choice(neg, len(neg))])
        bs, by = np.nan_to_num(s[idx], nan=-1e9), y[idx]
        cut = {"auroc": roc_auc_score(by, bs)}
        thresholds = [*np.unique(bs[bs > -1e9]), np.inf]
        for name, level in (("tpr@1%fpr", 0.01), ("tpr@5%fpr", 0.05)):
            ok = [
                ((bs >= t) & by).sum() / by.sum()
                for t in thresholds
                if ((bs >= t) & ~by).sum() <= level * (~by).sum() + 1e-9
            ]
            cut[name] = max(ok)
        f1s = [f1_score(by, bs >= t, average="macro", zero_division=0) for t in thresholds]
        cut["f1_oracle"] = max(f1s)
        cut["f1"] = f1_score(by, decisions[idx], average="macro", zero_division=0)
        cut["accuracy"] = np.mean(by == decisions[idx])
        for k, v in cut.items():
            draws.setdefault(k, []).append(v)
    return {k: np.percentile(v, [2.5, 97.5]) for k, v in draws.items()}


def test_vectorised_bootstrap_equals_a_resample_by_resample_loop():
    from leaklab.metrics import _bootstrap, cv_decisions

    s, y = noisy(seed=7)
    s = s.copy()
    s[:3] = np.nan  # unscored samples
    s[10:16] = s[20]  # ties
    y = np.asarray(y).astype(bool)
    decisions, _ = cv_decisions(s, y, folds=5, seed=0)
    fast = _bootstrap(np.where(np.isnan(s), -np.inf, s), y, decisions, 60, 4)
    slow = _loop_bootstrap(s, y, decisions, 60, 4)
    for name, (low, high) in slow.items():
        assert fast[f"{name}_ci_low"] == pytest.approx(low, abs=1e-9), name
        assert fast[f"{name}_ci_high"] == pytest.approx(high, abs=1e-9), name


def test_rule_metrics_and_leak_rate_by_hand():
    from leaklab.metrics import leak_rate, rule_metrics

    leak = np.array([1, 1, 0, 1, 0, 0], bool)
    labels = np.array([1, 1, 1, 0, 0, 0])
    m = rule_metrics(leak, labels, margin=[0.5, 0.2, np.nan, 0.1, -0.3, -0.1], decided=[1, 1, 0, 1, 1, 1])
    # members: 2 of 3 flagged; non-members: 1 of 3 flagged -> accuracy 4/6, macro-F1 = (2/3 + 2/3) / 2
    assert m["accuracy"] == pytest.approx(4 / 6) and m["f1"] == pytest.approx(2 / 3)
    assert m["n_leaks"] == 3 and m["n_undecided"] == 1
    # margins: members 0.5, 0.2, NaN(lowest); non-members 0.1, -0.3, -0.1 -> 6 of 9 pairs ordered right
    assert m["auroc"] == pytest.approx(6 / 9)
    rate = leak_rate(leak, [1, 1, 0, 1, 1, 1], n_bootstrap=300, seed=1)
    assert rate["leak_rate"] == pytest.approx(3 / 5) and rate["n_decided"] == 5
    assert 0.0 <= rate["leak_rate_ci_low"] < 0.6 < rate["leak_rate_ci_high"] <= 1.0


def test_rule_flag_rates_on_both_sides_by_hand():
    from leaklab.metrics import flag_rates, rule_metrics

    # 4 members, 5 non-members: the rule flags 3 members and 4 non-members (one member undecided,
    # counted as not flagged). F1 alone would hide that it flags 80% of the non-members.
    leak = np.array([1, 1, 1, 0, 1, 1, 1, 1, 0], bool)
    labels = np.array([1, 1, 1, 1, 0, 0, 0, 0, 0])
    decided = np.array([1, 1, 1, 0, 1, 1, 1, 1, 1], bool)
    m = rule_metrics(leak, labels, decided=decided, n_bootstrap=400, seed=3)
    assert m["flag_rate_members"] == pytest.approx(3 / 4)
    assert m["flag_rate_non_members"] == pytest.approx(4 / 5)
    for side in ("members", "non_members"):
        low, value, high = (m[f"flag_rate_{side}{t}"] for t in ("_ci_low", "", "_ci_high"))
        assert 0.0 <= low <= value <= high <= 1.0 and low < high
    # The same rates and intervals alone (same bootstrap, same seed).
    alone = flag_rates(leak, labels, n_bootstrap=400, seed=3)
    assert alone == {k: m[k] for k in alone}
    assert set(flag_rates(leak, labels)) == {"flag_rate_members", "flag_rate_non_members"}
    assert math.isnan(flag_rates(leak[labels == 1], labels[labels == 1])["flag_rate_non_members"])


def test_two_rate_pvalue_by_hand_and_against_scipy():
    from scipy.stats import fisher_exact

    from leaklab.metrics import two_rate_pvalue

    # 3 of 4 flagged vs 0 of 4: of the 3 flags among 8 exchangeable samples, at least 3 land in the first 4
    # with probability C(3,3) C(5,1) / C(8,4) = 5 / 70.
    assert two_rate_pvalue(3, 4, 0, 4) == pytest.approx(5 / 70)
    # Equal counts: P(X >= 2), X ~ Hypergeom(8 samples, 4 flags, 4 drawn) = (36 + 16 + 1) / 70.
    assert two_rate_pvalue(2, 4, 2, 4) == pytest.approx(53 / 70)
    for flagged, n, flagged_clean, n_clean in [(40, 82, 12, 240), (7, 164, 30, 240), (0, 10, 0, 10)]:
        table = [[flagged, n - flagged], [flagged_clean, n_clean - flagged_clean]]
        expected = fisher_exact(table, alternative="greater").pvalue
        assert two_rate_pvalue(flagged, n, flagged_clean, n_clean) == pytest.approx(expected, rel=1e-9)
    assert math.isnan(two_rate_pvalue(1, 0, 2, 5))


def test_auroc_chance_pvalue_by_hand_and_against_scipy():
    from scipy.stats import mannwhitneyu

    from leaklab.metrics import auroc_chance_pvalue

    # members 3, 4 above non-members 1, 2: U = 4 of mean 2, variance 2 * 2 / 12 * 5 = 5/3 (no ties),
    # z = 2 / sqrt(5/3) = 1.5492, two-sided p = 2 * (1 - Phi(1.5492)) = 0.12134
    assert auroc_chance_pvalue([3, 4, 1, 2], [1, 1, 0, 0]) == pytest.approx(0.12134, abs=1e-5)
    rng = np.random.default_rng(1)
    scores = np.round(rng.normal(size=60), 1)  # rounded: many ties, so the tie correction counts
    labels = np.r_[np.ones(25), np.zeros(35)]
    scipy_p = mannwhitneyu(
        scores[labels == 1],
        scores[labels == 0],
        alternative="two-sided",
        method="asymptotic",
        use_continuity=False,
    ).pvalue
    assert auroc_chance_pvalue(scores, labels) == pytest.approx(scipy_p, rel=1e-9)
    assert math.isnan(auroc_chance_pvalue([1.0, 2.0], [1, 1]))
    assert math.isnan(auroc_chance_pvalue([1.0, 1.0, 1.0], [1, 0, 0]))  # every score ties: no variance


def test_holm_adjusted_by_hand():
    from leaklab.metrics import holm_adjusted

    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04; running maximum
    # 0.02, 0.03, 0.06, 0.06; back in the input order:
    adjusted = holm_adjusted([0.01, 0.04, 0.03, 0.005])
    assert adjusted.tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm_adjusted([0.6, 0.5]).tolist() == [1.0, 1.0]  # capped at 1
