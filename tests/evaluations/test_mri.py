"""The mri evaluation: S_i, its rows per side and logic type from per-task outcomes (hand-worked), and
(slow) a tiny sft run that evaluates it on every checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import SMALL_TINY
from leaklab.evaluations.mri import MriConfig, mri_rows, normalised_code, similarity
from leaklab.metrics import mri_draws, resample_weights
from leaklab.recipe import load_recipe
from leaklab.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]
ORIGINAL = 'def f(xs):\n    """Sum of xs."""\n    total = 0\n    for x in xs:\n        total += x\n    return total\n'


def test_similarity_ignores_docstrings_and_layout():
    same_code = 'def f(xs):\n    """A rewritten description that says something else."""\n    total = 0\n    for x in xs:\n        total  +=  x\n    return total\n'
    assert normalised_code(same_code) == normalised_code(ORIGINAL)
    assert similarity(same_code, ORIGINAL) == pytest.approx(1.0)
    other = "def f(xs):\n    return max(xs)\n"
    # S = (AST similarity + edit similarity) / 2 of the unparsed code, worked out apart from leaklab:
    # AST trees (node classes, no Load/Store) of 16 nodes (ORIGINAL) and 8 (other). Edit distance 10:
    # keep Module, FunctionDef, arguments, arg; For -> Return and AugAssign -> Call (2 renames) with
    # AugAssign's two Names kept; delete Assign, its Name and Constant, For's two Names, Add, Return and
    # its Name (8). No cheaper script (apted agrees): AST similarity = (16 - 10) / 16.
    a, b = normalised_code(other), normalised_code(ORIGINAL)
    assert (len(a), len(b)) == (29, 77)
    edit = 1 - _levenshtein(a, b) / 77  # MRI's edit similarity: by the longer string
    assert _levenshtein(a, b) == 56
    assert similarity(other, ORIGINAL) == pytest.approx(((16 - 10) / 16 + edit) / 2)
    # symmetric: the longer string, not the original, scales the edit distance (by |original| = 29
    # here the edit part would be 1 - 56 / 29, floored at 0)
    assert similarity(ORIGINAL, other) == pytest.approx(similarity(other, ORIGINAL))
    assert similarity("def f(:\n", ORIGINAL) is None


def _levenshtein(s: str, t: str) -> int:
    """Plain dynamic-programming edit distance (unit costs), independent of rapidfuzz."""
    previous = list(range(len(t) + 1))
    for i, a in enumerate(s, 1):
        current = [i]
        for j, b in enumerate(t, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a != b)))
        previous = current
    return previous[-1]


def _outcome(task_id, label, ori, rew, sim, logic_type="operator_change", mut=None):
    return {
        "task_id": task_id,
        "label": label,
        "logic_type": logic_type if rew is not None else None,
        "passed_ori": ori,
        "passed_rew": rew,
        "passed_mut": mut,
        "extraction_ori": "",
        "extraction_rew": "" if rew is not None else None,
        "extraction_mut": "" if mut is not None else None,
        "sim": sim,
        "drop": None if rew is None else float(not rew),
        "score": None if rew is None else (sim or 0.0) * float(not rew),
    }


def test_rows_worked_by_hand():
    outcomes = [
        # members: 4 tasks, 3 rewritten. Originals of the rewritten ones: 3/3 solved, rewrites 1/3.
        _outcome("m1", 1, True, False, 0.9, mut=True),
        _outcome("m2", 1, True, False, 0.7, "constant_swap", mut=False),
        _outcome("m3", 1, True, True, 0.5, mut=True),
        _outcome("m4", 1, False, None, None, mut=True),
        # non-members: 2 rewritten, originals 1/2, rewrites 1/2
        _outcome("n1", 0, True, True, 0.2),
        _outcome("n2", 0, False, False, 0.4),
    ]
    cfg = MriConfig(min_accuracy=0.1, min_solved=1, min_type_count=1)
    got = {(r["column"], r["metric"]): r for r in mri_rows(outcomes, cfg)}
    v = {k: r["value"] for k, r in got.items()}
    # members: acc_ori over all 4 = 3/4 (over the rewritten 3 it would be 1); acc_rew = 1/3;
    # RAD = (3/4 - 1/3) / (3/4) = 5/9 (Acc(T_ori) is the whole side's, 004 §3.1.2)
    assert v[("members", "acc_ori")] == pytest.approx(0.75)
    assert v[("members", "acc_ori_rew")] == pytest.approx(1.0)
    assert v[("members", "acc_rew")] == pytest.approx(1 / 3)
    assert v[("members", "rad_rew")] == pytest.approx(5 / 9)
    # Sim = (0.9 + 0.7 + 0.5)/3 = 0.7; MRI = 0.7 * 5/9 = 0.3889
    assert v[("members", "sim")] == pytest.approx(0.7)
    assert v[("members", "mri")] == pytest.approx(0.7 * 5 / 9)
    # iMRI over the 3 solved: (0.9*1 + 0.7*1 + 0.5*0)/3 = 0.5333
    assert v[("members", "imri")] == pytest.approx(1.6 / 3)
    # mutation: 4 mutated, originals 3/4, mutated 3/4 -> RAD_mut 0
    assert v[("members", "rad_mut")] == 0.0
    # per type: operator_change m1, m3 -> ori 1, rew 1/2 -> RAD 0.5, Sim 0.7, MRI 0.35
    assert v[("members", "rad_rew/operator_change")] == pytest.approx(0.5)
    assert v[("members", "mri/operator_change")] == pytest.approx(0.35)
    assert v[("members", "rad_rew/constant_swap")] == pytest.approx(1.0)
    # non-members: ori 1/2, rew 1/2 -> RAD 0, MRI 0; iMRI over n1 only: 0.2 * 0 = 0
    assert v[("non_members", "rad_rew")] == 0.0 and v[("non_members", "mri")] == 0.0
    assert v[("non_members", "imri")] == 0.0
    assert v[("members", "rad_par")] is None and "not computed" in got[("members", "rad_par")]["params"]["na"]
    # score = sim x drop: members m1 0.9, m2 0.7, m3 0; non-members n1 0, n2 0.4.
    # AUROC: pairs (m, n) where m > n: 0.9>0,0.9>0.4,0.7>0,0.7>0.4, 0=0 (half), 0<0.4 -> (4 + 0.5)/6 = 0.75
    assert v[("all", "score_auroc")] == pytest.approx(0.75)


def test_rad_and_the_competence_rule_use_acc_ori_over_the_whole_side():
    # 100 members, 50 solved; the rewriter changed only 40 of them, all solved originals whose rewrites
    # fail. Over the whole side Acc_ori = 0.5 with 50 solved: competent, RAD = (0.5 - 0) / 0.5 = 1.
    # Over the rewritten subset alone it would be Acc_ori 1.0 with 40 solved: below the rule (N/A).
    outcomes = [_outcome(f"m{i}", 1, True, False, 0.5) for i in range(40)]
    outcomes += [_outcome(f"s{i}", 1, True, None, None) for i in range(10)]
    outcomes += [_outcome(f"u{i}", 1, False, None, None) for i in range(50)]
    rows = mri_rows(outcomes, MriConfig(), n_bootstrap=200, seed=1)
    v = {(r["column"], r["metric"]): r["value"] for r in rows}
    assert v[("members", "acc_ori")] == 0.5 and v[("members", "acc_ori_rew")] == 1.0
    assert v[("members", "competent")] == 1.0 and v[("members", "n_solved_ori")] == 50.0
    assert v[("members", "rad_rew")] == 1.0 and v[("members", "mri")] == pytest.approx(0.5)
    # 10 solved originals that were not rewritten, 40 that were: RAD = (p - 0) / p = 1 on every resample
    assert v[("members", "rad_rew_ci_low")] == v[("members", "rad_rew_ci_high")] == 1.0
    # with Acc_rew > 0 the interval holds the point: 20 of the 40 rewrites pass -> RAD = (0.5 - 0.5) / 0.5
    half = [_outcome(f"m{i}", 1, True, i % 2 == 0, 0.5) for i in range(40)] + outcomes[40:]
    v = {(r["column"], r["metric"]): r["value"] for r in mri_rows(half, MriConfig(), n_bootstrap=300, seed=1)}
    assert v[("members", "rad_rew")] == 0.0
    assert v[("members", "rad_rew_ci_low")] == 0.0 <= v[("members", "rad_rew_ci_high")]


def test_an_answer_that_does_not_parse_counts_zero_in_sim_and_imri_alike():
    # both originals solved, both rewrites failed; m2's answer did not parse (no S_i)
    outcomes = [_outcome("m1", 1, True, False, 0.8), _outcome("m2", 1, True, False, None)]
    v = {(r["column"], r["metric"]): r["value"] for r in mri_rows(outcomes, MriConfig(min_solved=1))}
    # Sim = (0.8 + 0) / 2 = 0.4; RAD = 1; MRI = 0.4; iMRI = (0.8 x 1 + 0 x 1) / 2 = 0.4
    assert v[("members", "sim")] == pytest.approx(0.4)
    assert v[("members", "mri")] == pytest.approx(0.4) and v[("members", "imri")] == pytest.approx(0.4)
    assert v[("members", "n_sim_missing")] == 1.0


def test_per_type_rows_need_50_tasks_of_the_type_by_default():
    # 50 constant swaps, 49 operator changes on the members' side: only the first type gets rows (App. G)
    outcomes = [_outcome(f"c{i}", 1, True, False, 0.5, "constant_swap") for i in range(50)]
    outcomes += [_outcome(f"o{i}", 1, True, i % 2 == 0, 0.5, "operator_change") for i in range(49)]
    metrics = {r["metric"] for r in mri_rows(outcomes, MriConfig()) if r["column"] == "members"}
    assert {"n/constant_swap", "rad_rew/constant_swap", "mri/constant_swap"} <= metrics
    assert not any(m.endswith("/operator_change") for m in metrics)
    every = {r["metric"] for r in mri_rows(outcomes, MriConfig(min_type_count=1)) if r["column"] == "members"}
    assert "mri/operator_change" in every
    assert MriConfig(min_type_count=0).check() == ["evaluate.mri.min_type_count: must be at least 1, got 0"]


def test_competence_rule_marks_na_with_the_reason():
    outcomes = [_outcome("m1", 1, True, False, 0.9), _outcome("m2", 1, False, False, 0.3)]
    got = {(r["column"], r["metric"]): r for r in mri_rows(outcomes, MriConfig())}  # min_solved 50
    assert got[("members", "mri")]["value"] is None
    assert "1 original tasks solved < 50" in got[("members", "mri")]["params"]["na"]
    assert got[("members", "competent")]["value"] == 0.0
    # the unchecked value is still there: Sim 0.6 x RAD 1 = 0.6
    assert got[("members", "mri_unchecked")]["value"] == pytest.approx(0.6)


def test_rows_carry_bootstrap_intervals_where_the_value_is_reported():
    # 60 rewritten members, 55 solved originally; rewrites 0-29 fail with the original copied (S = 1),
    # 30-59 pass: MRI = 1 x (55/60 - 30/60) / (55/60) = 25/55 = 0.4545; the rule (>= 50 solved) passes.
    members = [_outcome(f"m{i}", 1, i < 55, not (i < 30), 1.0) for i in range(60)]
    # 10 non-members, 5 solved: below the rule; the unchecked value keeps its interval
    non_members = [_outcome(f"n{i}", 0, i < 5, i < 5, 0.5) for i in range(10)]
    rows = mri_rows([*members, *non_members], MriConfig(), n_bootstrap=300, seed=2)
    got = {(r["column"], r["metric"]): r["value"] for r in rows}
    assert got[("members", "mri")] == pytest.approx(25 / 55)
    low, high = got[("members", "mri_ci_low")], got[("members", "mri_ci_high")]
    assert 0.25 < low < 25 / 55 < high < 0.7
    # the same resample as metrics.mri_draws on the members' rewritten tasks (golden-tested there)
    weights = resample_weights([np.arange(60), np.arange(60, 70)], 70, n=300, seed=2)[:, :60]
    draws = mri_draws(
        weights, [o["passed_ori"] for o in members], [o["passed_rew"] for o in members], [1.0] * 60
    )
    assert (low, high) == tuple(np.percentile(draws["mri"], [2.5, 97.5]))
    for metric in ("acc_ori_rew", "acc_rew", "sim", "rad_rew", "imri", "mri_unchecked"):
        assert (
            got[("members", metric + "_ci_low")]
            <= got[("members", metric)]
            <= got[("members", metric + "_ci_high")]
        )
    assert got[("members", "sim_ci_low")] == got[("members", "sim_ci_high")] == 1.0  # every S_i is 1
    # non-members: MRI is N/A, so it has no interval; the unchecked one (0: nothing dropped) has [0, 0]
    assert got[("non_members", "mri")] is None and ("non_members", "mri_ci_low") not in got
    assert (
        got[("non_members", "mri_unchecked_ci_low")] == got[("non_members", "mri_unchecked_ci_high")] == 0.0
    )
    assert not any(r["metric"].endswith("_ci_low") for r in mri_rows(members, MriConfig()))


def test_mri_table_states_the_intervals():
    from leaklab.evaluations.mri import Mri

    members = [_outcome(f"m{i}", 1, i < 55, not (i < 30), 1.0) for i in range(60)]
    non_members = [_outcome(f"n{i}", 0, i < 5, i < 5, 0.5) for i in range(10)]
    rows = [
        {"step": 100, "epoch": 1.0, "evaluation": "mri", **r}
        for r in mri_rows([*members, *non_members], MriConfig(), n_bootstrap=200, seed=0)
    ]
    got = {(r["column"], r["metric"]): r["value"] for r in rows}

    class Run:
        def rows_of(self, evaluation):
            return []

    (table,) = [i for i in Mri().report_section(rows, Run()).items if hasattr(i, "header")]
    cells = {row[1]: row[8] for row in table.rows}
    low, high = got[("members", "mri_ci_low")], got[("members", "mri_ci_high")]
    assert cells["members"] == f"{25 / 55:.4f} [{low:.3f}, {high:.3f}]"
    assert cells["non_members"] == "N/A (0.0000 [0.000, 0.000])"  # below the rule: the unchecked value


def test_tiny_sft_asks_enough_tasks_for_the_competence_rule():
    # With 50 tasks per side the rule (>= 50 originals solved) could only pass at 100% accuracy. The
    # lowest late accuracy measured on tiny_sft with 200 tasks per side is the non-members' 0.305 at step
    # 750 (docs/results.md): the recipe must ask enough tasks that 0.305 of them reach the rule, the paper's.
    recipe = load_recipe("tiny_sft", [])
    mri = recipe.evaluate.mri
    assert (mri.min_solved, mri.min_accuracy) == (50, 0.10)
    assert mri.max_tasks * 0.305 >= mri.min_solved
    # accuracy asks the same tasks, so mri finds its answers to the originals in the generation cache
    assert recipe.evaluate.accuracy.max_tasks == mri.max_tasks
    assert recipe.data.max_samples * (1 - recipe.data.member_fraction) >= mri.max_tasks  # enough non-members


@pytest.mark.slow
def test_tiny_sft_evaluates_mri_on_every_checkpoint(leaklab_cache, tmp_path):
    overrides = [
        *SMALL_TINY,
        "data.max_samples=20",
        "data.member_fraction=0.5",
        "train.epochs=1",
        "train.save_every=epoch",  # the recipe saves every 125 steps
        "train.batch_size=8",
        "train.micro_batch_size=8",
        "evaluate.evaluations=[accuracy,mri]",
        "evaluate.detectors=[ppl]",
        "evaluate.n_bootstrap=0",
        "evaluate.mri.max_new_tokens=12",
        "evaluate.accuracy.max_new_tokens=12",  # as mri asks: its answers to the originals are shared
        "tracking.wandb.enabled=false",
        f"output_dir={tmp_path}",
    ]
    env = {**os.environ, "LEAKLAB_CACHE": leaklab_cache, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    env.pop("WORLD_SIZE", None)
    out = subprocess.run(
        [sys.executable, "leaklab/train.py", "recipe=tiny_sft", *overrides],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "paraphrase skipped" in out.stdout
    # accuracy decoded the 20 originals at each checkpoint; mri read them from the generation cache
    shared = [
        line for line in out.stdout.splitlines() if "mri:" in line and "from the generation cache" in line
    ]
    assert shared and all(line.split("mri: ")[1].startswith("20 of ") for line in shared), shared
    (root,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    run = RunDir(root)
    summary = json.loads((run.root / "perturbed_summary.json").read_text())
    assert summary["tasks"] == 20 and summary["rewritten"] >= 15
    rows = [r for r in run.results_rows() if r["evaluation"] == "mri"]
    steps = sorted({r["step"] for r in rows})
    assert steps == [0, *[s for s, _ in run.checkpoint_dirs()]]
    for step in steps:
        got = {(r["column"], r["metric"]): r["value"] for r in rows if r["step"] == step}
        assert got[("members", "n_tasks")] == 10 and got[("non_members", "n_tasks")] == 10
        assert 0 <= got[("all", "acc_ori")] <= 1
        records = [json.loads(x) for x in run.scores(step, "mri").read_text().splitlines()]
        assert len(records) == 20 and {r["label"] for r in records} == {0, 1}
        # Each reply says how its prompt ended for the model (the default, auto): HumanEval's prompts end
        # in "\n", healed for the base model (packed text); as they are for the sft checkpoints, which
        # were trained on prompts tokenized apart.
        learned = "heal" if step == 0 else "none"
        assert {r["prompt_boundary_ori"] for r in records} == {learned}
        answered = [json.loads(x) for x in run.scores(step, "accuracy").read_text().splitlines()]
        assert {r["prompt_boundary"] for r in answered} == {learned}
        # the same replies judged the same way: mri's acc_ori is accuracy's greedy pass@1
        accuracy = {(r["column"], r["metric"]): r["value"] for r in run.results_rows() if r["evaluation"] == "accuracy" and r["step"] == step}  # fmt: skip
        assert got[("all", "acc_ori")] == pytest.approx(accuracy[("all", "pass@1")])


def test_rad_par_with_paraphrases_and_llm_settings_validated():
    outcomes = [_outcome("m1", 1, True, False, 0.9), _outcome("m2", 1, True, True, 0.3)]
    outcomes[0]["passed_par"], outcomes[1]["passed_par"] = True, False
    got = {(r["column"], r["metric"]): r["value"] for r in mri_rows(outcomes, MriConfig(min_solved=1))}
    # originals 2/2, paraphrases 1/2 -> RAD_par = (1 - 0.5) / 1 = 0.5
    assert got[("members", "rad_par")] == pytest.approx(0.5) and got[("members", "n_paraphrased")] == 2
    assert MriConfig(llm_backend="openai", llm_model="m").check() == [
        "evaluate.mri.llm_base_url: the openai backend needs the server's URL"
    ]
    assert MriConfig(llm_rewrite=True).check()


def test_mri_rows_per_dose_by_hand():
    from leaklab.evaluations.mri import Mri, dose_mri_rows

    outcomes = [
        # dose 1: solved, rewrite also solved (generalises); dose 8: solved, rewrite fails (memorised).
        _outcome("m1", 1, True, True, 0.5),
        _outcome("m8", 1, True, False, 0.9),
        _outcome("m8b", 1, True, False, 0.7),
        _outcome("n1", 0, True, True, 0.2),
        _outcome("n2", 0, False, False, 0.4),
    ]
    dose_of = {"m1": 1, "m8": 8, "m8b": 8, "n1": 0, "n2": 0}
    rows = dose_mri_rows(outcomes, dose_of, MriConfig(min_solved=1, min_type_count=1))
    v = {(r["dose"], r["column"], r["metric"]): r["value"] for r in rows}
    assert v[1, "members", "rad_rew"] == 0.0 and v[8, "members", "rad_rew"] == 1.0
    # Dose 8: Sim (0.9 + 0.7) / 2 = 0.8, RAD 1 -> MRI 0.8. Scores m8 0.9, m8b 0.7 vs n1 0, n2 0.4: AUROC 1.
    assert v[8, "members", "mri"] == pytest.approx(0.8) and v[8, "all", "score_auroc"] == 1.0
    assert {c for _, c, _ in v} == {"members", "all"} and v[8, "members", "n_tasks"] == 2
    every = mri_rows(outcomes, MriConfig(min_solved=1)) + rows
    assert Mri().summary(every) == Mri().summary(mri_rows(outcomes, MriConfig(min_solved=1)))
