"""Golden values for MRI's formulas (Memorize or generalize?, §3.1, App. D, E), worked out by hand."""

from __future__ import annotations

import math

import pytest

from leaklab.metrics import (
    competence,
    instance_mri,
    mean_similarity,
    memorization_risk_index,
    relative_accuracy_drop,
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
