"""Golden values for MRI's formulas (Memorize or generalize?, §3.1, App. D, E), worked out by hand, and
for the bootstrap intervals of per-task means and of MRI against a plain resampling loop."""

from __future__ import annotations

import math

import numpy as np
import pytest

from leaklab.metrics import (
    competence,
    group_mean_intervals,
    instance_mri,
    mean_similarity,
    memorization_risk_index,
    mri_draws,
    relative_accuracy_drop,
    resample_weights,
)


def test_sim_is_the_mean_over_every_rewritten_task():
    # (0.9 + 0 + 0.5 + 0.4 + 0) / 5 = 0.36: the answer that did not parse (None) and a NaN count 0,
    # the rule iMRI uses
    assert mean_similarity([0.9, None, 0.5, 0.4, math.nan]) == pytest.approx(0.36)
    assert mean_similarity([]) is None and mean_similarity([None]) == 0.0


def test_rad_relative_drop_and_its_clamp():
    # Acc_ori 0.50, Acc_rew 0.20: (0.50 - 0.20) / 0.50 = 0.6
    assert relative_accuracy_drop(0.5, 0.2) == pytest.approx(0.6)
    # Acc_rew above Acc_ori: (0.4 - 0.5) / 0.4 = -0.25, clamped to 0
    assert relative_accuracy_drop(0.4, 0.5) == 0.0
    # everything lost: (0.3 - 0) / 0.3 = 1
    assert relative_accuracy_drop(0.3, 0.0) == pytest.approx(1.0)
    # Acc_ori = 0: a relative drop from nothing is undefined, not 0 and not a crash
    assert relative_accuracy_drop(0.0, 0.0) is None
    assert relative_accuracy_drop(0.0, 0.1) is None
    assert relative_accuracy_drop(None, 0.1) is None


def test_mri_is_sim_times_rad():
    # Sim 0.6, RAD 0.6 -> 0.36; either missing -> None
    assert memorization_risk_index(0.6, 0.6) == pytest.approx(0.36)
    assert memorization_risk_index(0.8, 0.0) == 0.0
    assert memorization_risk_index(None, 0.5) is None and memorization_risk_index(0.5, None) is None


def test_imri_averages_over_originally_solved_tasks():
    # four tasks; solved originally: 1, 2, 4. Their Sim_k x Drop_k: 0.8 x 1, 0.6 x 0, None(=0) x 1
    # task 3 (not solved) is left out although its rewrite failed: (0.8 + 0 + 0) / 3 = 0.2667
    solved = [True, True, False, True]
    sims = [0.8, 0.6, 0.9, None]
    failed = [True, False, True, True]
    assert instance_mri(solved, sims, failed) == pytest.approx(0.8 / 3)
    assert instance_mri([False, False], [0.5, 0.5], [True, True]) is None


def test_competence_rule_with_reasons():
    assert competence(0.10, 50) == ""  # both thresholds met exactly
    assert competence(0.30, 120) == ""
    low = competence(0.09, 80)
    assert low.startswith("below competence threshold") and "Acc_ori 0.090 < 0.1" in low
    few = competence(0.5, 49)
    assert "49 original tasks solved < 50" in few and "Acc_ori" not in few
    both = competence(0.05, 3)
    assert "Acc_ori" in both and "3 original tasks solved" in both
    # configurable
    assert competence(0.05, 3, min_accuracy=0.05, min_solved=3) == ""
    assert "Acc_ori none" in competence(None, 0)


# --------------------------------------------------------------------------- bootstrap intervals


def _by_hand_percentiles(draws):
    low, high = np.percentile(draws, [2.5, 97.5])
    return float(low), float(high)


def test_group_mean_intervals_equal_a_plain_resampling_loop():
    # Independent computation: draw the members, then the non-members, with rng.choice for each resample
    # (the documented order of resample_weights), average in plain Python, take numpy's percentiles.
    values = [1, 0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 1]
    labels = [1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0]
    members = [i for i, y in enumerate(labels) if y == 1]
    non_members = [i for i, y in enumerate(labels) if y == 0]
    rng = np.random.default_rng(7)
    draws = {"members": [], "non_members": [], "all": [], "gap": []}
    for _ in range(500):
        m = rng.choice(members, len(members))
        n = rng.choice(non_members, len(non_members))
        mean_m = sum(values[i] for i in m) / len(m)
        mean_n = sum(values[i] for i in n) / len(n)
        draws["members"].append(mean_m)
        draws["non_members"].append(mean_n)
        draws["all"].append(sum(values[i] for i in [*m, *n]) / len(labels))
        draws["gap"].append(mean_m - mean_n)
    got = group_mean_intervals(values, labels, n_bootstrap=500, seed=7)
    for side, side_draws in draws.items():
        low, high = _by_hand_percentiles(side_draws)
        assert got[f"{side}_ci_low"] == pytest.approx(low) and got[f"{side}_ci_high"] == pytest.approx(high)
    assert got["gap_ci_low"] < 0 < got["gap_ci_high"]  # 4/7 vs 3/5 on 12 tasks: no evidence of a gap
    assert group_mean_intervals(values, labels, n_bootstrap=0) == {}


def test_equal_values_give_zero_width_intervals():
    # Every task passed on both sides: every resample gives 1 and 1, so the gap is 0 in every resample.
    got = group_mean_intervals([1.0] * 6, [1, 1, 1, 0, 0, 0], n_bootstrap=200, seed=0)
    assert (got["members_ci_low"], got["members_ci_high"]) == (1.0, 1.0)
    assert (got["gap_ci_low"], got["gap_ci_high"]) == (0.0, 0.0)
    # No non-members: their interval (and the gap's) is NaN, not a crash.
    alone = group_mean_intervals([1.0, 0.0], [1, 1], n_bootstrap=50, seed=0)
    assert math.isnan(alone["non_members_ci_low"]) and math.isnan(alone["gap_ci_high"])
    assert alone["members_ci_low"] == 0.0 and alone["members_ci_high"] == 1.0


def test_mri_draws_are_the_formulas_on_each_resample():
    # Each resample's draws equal the scalar formulas applied to the resampled task list, written out.
    ori = [True, True, True, False, True, True]
    rew = [False, True, False, False, True, False]
    sims = [0.9, 0.4, None, 0.7, 0.8, 0.6]
    weights = resample_weights([np.arange(6)], 6, n=40, seed=3)
    draws = mri_draws(weights, ori, rew, sims)
    for b in range(40):
        tasks = [i for i in range(6) for _ in range(int(weights[b, i]))]
        acc_ori = sum(ori[i] for i in tasks) / len(tasks)
        acc_rew = sum(rew[i] for i in tasks) / len(tasks)
        rad = relative_accuracy_drop(acc_ori, acc_rew)
        sim = mean_similarity(sims[i] for i in tasks)
        expected = {
            "acc_ori_rew": acc_ori,
            "acc_rew": acc_rew,
            "sim": sim,
            "rad_rew": rad,
            "mri": memorization_risk_index(sim, rad),
            "imri": instance_mri(
                [ori[i] for i in tasks], [sims[i] for i in tasks], [not rew[i] for i in tasks]
            ),
        }
        for name, value in expected.items():
            if value is None:
                assert math.isnan(draws[name][b]), (name, b)
            else:
                assert draws[name][b] == pytest.approx(value), (name, b)


def test_mri_interval_is_a_point_when_every_task_is_copied_and_fails():
    # Every original solved, every rewrite failed with the original copied (S = 1): MRI = 1 x 1 in every
    # resample. Nothing solved originally: RAD (and MRI) undefined in every resample -> NaN.
    weights = resample_weights([np.arange(5)], 5, n=100, seed=1)
    copied = mri_draws(weights, [True] * 5, [False] * 5, [1.0] * 5)
    assert set(copied["mri"]) == {1.0} and set(copied["imri"]) == {1.0}
    unsolved = mri_draws(weights, [False] * 5, [False] * 5, [0.5] * 5)
    assert np.isnan(unsolved["mri"]).all() and np.isnan(unsolved["imri"]).all()
