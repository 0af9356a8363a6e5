"""Checkpoint selection by the accuracy–MRI trade-off: front, stages, the rule, the command."""

from __future__ import annotations

import json

import pytest

from leaklab.cli import main
from leaklab.selection import Point, checkpoint_points, pareto_front, select


def _rows():
    # step: (acc_ori, mri or None (N/A), mri_unchecked, eval_loss)
    table = {
        0: (0.10, None, 0.05, None),
        10: (0.30, 0.10, 0.10, 0.50),
        20: (0.36, 0.15, 0.15, 0.40),  # best validation loss
        30: (0.38, 0.12, 0.12, 0.41),  # within 5% of 0.40, lower MRI: recommended
        40: (0.40, 0.30, 0.30, 0.45),  # late: more accuracy, much more MRI, loss outside the tolerance
    }
    rows = []
    for step, (acc, mri, raw, loss) in table.items():
        base = {"step": step, "evaluation": "mri", "column": "non_members"}
        rows += [
            {**base, "metric": "acc_ori", "value": acc},
            {**base, "metric": "mri", "value": mri},
            {**base, "metric": "mri_unchecked", "value": raw},
            {**base, "column": "members", "metric": "mri", "value": 0.9},
        ]
        if loss is not None:
            rows.append(
                {"step": step, "evaluation": "training", "column": None, "metric": "eval_loss", "value": loss}
            )
    return rows


def test_points_take_the_side_and_flag_unchecked_mri():
    points = {p.step: p for p in checkpoint_points(_rows(), "non_members")}
    assert points[30] == Point(30, 0.38, 0.12, 0.41, False, 0.38)  # val_reward: non-members' acc_ori
    assert points[0].mri == 0.05 and points[0].mri_unchecked  # N/A there: the unchecked value, flagged
    assert {p.mri for p in checkpoint_points(_rows(), "members")} == {0.9}


def test_front_worked_by_hand():
    # (acc, mri): 0 (.10,.05) 10 (.30,.10) 20 (.36,.15) 30 (.38,.12) 40 (.40,.30)
    # 20 is beaten by 30 (more accuracy, less MRI); the others are not beaten on both
    assert pareto_front(checkpoint_points(_rows())) == [0, 10, 30, 40]


def test_rule_prefers_lower_mri_among_comparable_losses():
    sel = select(checkpoint_points(_rows()), tolerance=0.05)
    assert sel.criterion == "val_loss"
    assert sel.stages == {"Early": 10, "Best-Val": 20, "Late": 40}
    assert sel.comparable == [20, 30]  # 0.40 and 0.41 <= 0.40 * 1.05 = 0.42
    assert sel.recommended == 30 and "lowest MRI" in sel.why
    # a wider tolerance lets step 10 (0.50 <= 0.40 * 1.3) in, which has the lowest MRI of all
    assert select(checkpoint_points(_rows()), tolerance=0.3).recommended == 10


def test_the_papers_checkpoint_is_the_last_before_the_validation_loss_rises():
    # 004 §3.3.1 / App. J.1.1: "the epoch immediately prior to observed overfitting". The loss falls to
    # 0.40 at step 20, rises at 30, then falls lower at 40: the paper's checkpoint is 20, not the lowest
    # loss (40); §5.2's practitioner rule picks among losses within 5% of 0.38 (<= 0.399): only 40.
    points = [Point(10, 0.30, 0.10, 0.50), Point(20, 0.36, 0.15, 0.40), Point(30, 0.38, 0.12, 0.42),
              Point(40, 0.40, 0.30, 0.38)]  # fmt: skip
    sel = select(points, tolerance=0.05)
    assert sel.paper_checkpoint == 20 and sel.stages["Best-Val"] == 20
    assert sel.comparable == [40] and sel.recommended == 40
    monotone = [Point(10, 0.3, 0.1, 0.5), Point(20, 0.3, 0.1, 0.45), Point(30, 0.3, 0.2, 0.44)]
    assert select(monotone).paper_checkpoint == 30  # the loss never rose: the last checkpoint
    rows = [r for r in _rows() if r["evaluation"] != "training"]
    assert select(checkpoint_points(rows)).paper_checkpoint == 40  # no loss: the highest accuracy


def test_rule_without_losses_uses_accuracy():
    rows = [r for r in _rows() if r["evaluation"] != "training"]
    sel = select(checkpoint_points(rows), tolerance=0.03)
    # highest accuracy 0.40 (step 40); within 0.03: steps 30 (0.38) and 40; lower MRI: 30
    assert sel.criterion == "accuracy" and sel.stages["Best-Val"] == 40 and sel.recommended == 30


def test_select_command_writes_selection(tmp_path, capsys):
    (tmp_path / "recipe.yaml").write_text("name: x\n")
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    assert main(["select", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "recommended: step 30" in out and "Best-Val" in out
    assert "paper's checkpoint (§3.3, Best-Val, the last before the loss rises): step 20" in out
    saved = json.loads((tmp_path / "selection.json").read_text())
    assert saved["recommended"] == 30 and saved["front"] == [0, 10, 30, 40]
    assert main(["select", str(tmp_path), "--side", "nope"]) == 2


@pytest.mark.parametrize("args", [[], ["/nonexistent"]])
def test_select_bad_input(args):
    assert main(["select", *args]) == 2


def test_mri_report_section_draws_the_front_and_stages():
    from leaklab.evaluations.mri import Mri

    rows = _rows()

    class Run:
        def rows_of(self, evaluation):
            return [r for r in rows if r["evaluation"] == evaluation]

    mri_rows = [r for r in rows if r["evaluation"] == "mri"]
    section = Mri().report_section(mri_rows, Run())
    panels = [i for i in section.items if hasattr(i, "spec")]
    assert panels and section.key == "mri"
    values = panels[0].spec["data"]["values"]
    labels = {v["step"]: v["label"] for v in values}
    assert labels[10] == "Early" and labels[20] == "Best-Val" and labels[30] == "recommended"
    assert {v["step"] for v in values if v["front"]} == {0, 10, 30, 40}
    assert any("unchecked" in n for n in section.notes)  # step 0 was below the competence rule


def test_mri_tables_script(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "analysis" / "mri_tables.py"
    spec = importlib.util.spec_from_file_location("mri_tables", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = _rows()
    rows.append({"step": 0, "evaluation": "mri", "column": "non_members", "metric": "mri", "value": None, "params": {"na": "below"}})  # fmt: skip
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert module.main([str(tmp_path), "--names", "toy", "--step", "0"]) == 0
    out = capsys.readouterr().out
    assert "| toy | non_members | 0 | 0.1000 | – | – | – | – | – | N/A (0.0500) | – |" in out
    assert "| toy | non_members | Best-Val | 20 | 0.4000 | 36.00% | 0.1500 |" in out
    assert "| toy | non_members | recommended | 30 |" in out


def test_stages_count_checkpoints_without_mri():
    # step 10 has no MRI (accuracy 0: RAD undefined); it is still the Early checkpoint
    points = [Point(10, 0.0, None, 0.9), Point(20, 0.05, 0.3, 0.5), Point(30, 0.08, 0.6, 0.45)]
    sel = select(points)
    assert sel.stages == {"Early": 10, "Best-Val": 30, "Late": 30} and sel.recommended == 30
    none = select([Point(10, 0.0, None, 0.9)])
    assert none.recommended is None and "none has an MRI" in none.why


def _rl_rows():
    # The accuracy evaluation's greedy pass@1 on the held-out non-members: the binary all-tests reward's
    # mean there, i.e. the validation reward. Highest at step 20 (the sft rule picks 30 on these rows).
    held_out = {0: 0.1, 10: 0.2, 20: 0.5, 30: 0.3, 40: 0.45}
    rows = _rows()
    for step, value in held_out.items():
        base = {"step": step, "evaluation": "accuracy", "metric": "pass@1"}
        rows += [
            {**base, "column": "non_members", "value": value},
            {**base, "column": "members", "value": 0.9},
        ]
    return rows


def test_an_rl_run_is_chosen_by_its_validation_reward():
    points = checkpoint_points(_rl_rows(), "non_members")
    assert select(points).recommended == 30  # the sft rule
    sel = select(points, stage="rl")
    assert sel.criterion == "val_reward" and sel.recommended == 20
    assert sel.stages == {"Early": 10, "Best-Val": 20, "Late": 40} and "highest validation reward" in sel.why
    # the reward is the held-out split's whatever side MRI is read on
    members = checkpoint_points(_rl_rows(), "members")
    assert [p.val_reward for p in members] == [0.1, 0.2, 0.5, 0.3, 0.45]
    assert select(members, side="members", stage="rl").recommended == 20
    no_held_out = [r for r in _rows() if r["metric"] != "acc_ori"]
    none = select(checkpoint_points(no_held_out), stage="rl")
    assert none.recommended is None and "no trained checkpoint has a validation reward" in none.why


def test_select_command_chooses_by_the_runs_stage(tmp_path, capsys):
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rl_rows()))
    (tmp_path / "recipe.yaml").write_text("name: x\ntrain:\n  stage: sft\n")
    assert main(["select", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "selection.json").read_text())["recommended"] == 30
    (tmp_path / "recipe.yaml").write_text("name: x\ntrain:\n  stage: rl\n")
    assert main(["select", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "recommended: step 20" in out and "val_reward" in out
    assert json.loads((tmp_path / "selection.json").read_text())["criterion"] == "val_reward"


def test_mri_report_section_of_an_rl_run_marks_the_best_reward():
    from leaklab.evaluations.mri import Mri

    rows = _rl_rows()

    class Run:
        recipe = {"train": {"stage": "rl"}}

        def rows_of(self, evaluation):
            return [r for r in rows if r["evaluation"] == evaluation]

    section = Mri().report_section([r for r in rows if r["evaluation"] == "mri"], Run())
    values = next(i for i in section.items if hasattr(i, "spec")).spec["data"]["values"]
    assert {v["step"]: v["label"] for v in values}[20] == "Best-Val, recommended"
