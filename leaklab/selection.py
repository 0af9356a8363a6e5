"""Checkpoint selection by the accuracy–MRI trade-off (Memorize or generalize?, §3.3, §5.2, Table 2): the
paper's checkpoint (Best-Val, App. J.1.1; rl: the highest validation reward) and §5.2's recommendation
(the lowest MRI among checkpoints with a validation loss near the best), stages Early / Best-Val / Late.
See docs/evaluations.md#memorization-risk-index-and-checkpoint-selection-evaluateevaluations-mri.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from leaklab.results import of_all_members
from leaklab.rundir import RunDir, write_json

SIDES = ("non_members", "members", "all")


@dataclass
class Point:
    step: int
    accuracy: float | None
    mri: float | None
    val_loss: float | None = None
    mri_unchecked: bool = False  # MRI taken without the competence rule (it was N/A)
    val_reward: float | None = None  # the non-members' pass@1: the rl stage's validation reward


@dataclass
class Selection:
    side: str
    tolerance: float
    criterion: str  # "val_loss" | "accuracy" | "val_reward"
    points: list[Point]
    front: list[int] = field(default_factory=list)
    stages: dict[str, int] = field(default_factory=dict)  # Early / Best-Val / Late -> step
    comparable: list[int] = field(default_factory=list)
    recommended: int | None = None  # the practitioner rule's choice (§5.2)
    why: str = ""
    paper_checkpoint: int | None = None  # what the paper evaluates: Best-Val (sft) / best reward (rl)


def _by_step(rows, evaluation: str, metric: str, side: str | None) -> dict[int, dict[str, Any]]:
    return {
        int(r["step"]): r
        for r in rows
        if r.get("evaluation") == evaluation
        and r.get("metric") == metric
        and (side is None or r.get("column") == side)
        and of_all_members(r)
    }


def checkpoint_points(rows: list[dict[str, Any]], side: str = "non_members") -> list[Point]:
    """One point per step that has an MRI row on `side`."""
    mri = _by_step(rows, "mri", "mri", side)
    unchecked = _by_step(rows, "mri", "mri_unchecked", side)
    acc_mri = _by_step(rows, "mri", "acc_ori", side)
    acc = _by_step(rows, "accuracy", "pass@1", side)
    loss = _by_step(rows, "training", "eval_loss", None)
    held_out = _by_step(rows, "accuracy", "pass@1", "non_members")
    held_out_mri = _by_step(rows, "mri", "acc_ori", "non_members")
    points = []
    for step in sorted(set(mri) | set(unchecked)):
        value = mri.get(step, {}).get("value")
        flagged = value is None
        if flagged:
            value = unchecked.get(step, {}).get("value")
        accuracy = (acc_mri.get(step) or acc.get(step) or {}).get("value")
        val = loss.get(step, {}).get("value")
        reward = (held_out.get(step) or held_out_mri.get(step) or {}).get("value")
        points.append(Point(step, accuracy, value, val, flagged and value is not None, reward))
    return points


def pareto_front(points: list[Point]) -> list[int]:
    """Steps no other point beats on both accuracy (higher) and MRI (lower)."""
    usable = [p for p in points if p.accuracy is not None and p.mri is not None]
    front = []
    for p in usable:
        dominated = any(
            q.accuracy >= p.accuracy and q.mri <= p.mri and (q.accuracy > p.accuracy or q.mri < p.mri)
            for q in usable
        )
        if not dominated:
            front.append(p.step)
    return sorted(front)


def best_val(losses: list[Point]) -> Point:
    """The checkpoint immediately before the validation loss first rises (004 §3.3.1, App. J.1.1): the
    first one whose successor has a higher loss, else the last (the loss never rose)."""
    for here, after in zip(losses, losses[1:]):
        if after.val_loss > here.val_loss:
            return here
    return losses[-1]


def select(
    points: list[Point], tolerance: float = 0.05, side: str = "non_members", stage: str = "sft"
) -> Selection:
    """Both rules of the module doc for a run trained by `stage` (without a validation loss, §5.2's
    recommendation compares the accuracies)."""
    if stage == "rl":
        return _select_by_reward(points, tolerance, side)
    # Stages come from every trained checkpoint, the recommendation from those with an MRI.
    trained = [p for p in points if p.step > 0]
    losses = [p for p in trained if p.val_loss is not None]
    criterion = "val_loss" if losses else "accuracy"
    sel = Selection(side, tolerance, criterion, points, front=pareto_front(points))
    with_acc = [p for p in trained if p.accuracy is not None]
    if not (losses or with_acc):
        sel.why = "no trained checkpoint has a validation loss or an accuracy: nothing to choose from"
        return sel
    if losses:
        best = min(losses, key=lambda p: (p.val_loss, p.step))
        comparable = [p for p in losses if p.val_loss <= best.val_loss * (1 + tolerance)]
        basis = (
            f"validation loss within {tolerance:.0%} of the lowest ({best.val_loss:.4f} at step {best.step})"
        )
    else:
        best = max(with_acc, key=lambda p: (p.accuracy, -p.step))
        comparable = [p for p in with_acc if p.accuracy >= best.accuracy - tolerance]
        basis = f"accuracy within {tolerance:g} of the highest ({best.accuracy:.3f} at step {best.step})"
    sel.paper_checkpoint = best_val(losses).step if losses else best.step
    sel.stages = {"Early": trained[0].step, "Best-Val": sel.paper_checkpoint, "Late": trained[-1].step}
    sel.comparable = [p.step for p in comparable]
    scored = [p for p in comparable if p.mri is not None and p.accuracy is not None]
    if not scored:
        sel.why = f"{len(comparable)} checkpoint(s) have {basis}, but none has an MRI (original accuracy 0?)"
        return sel
    chosen = min(scored, key=lambda p: (p.mri, -p.accuracy, p.step))
    sel.recommended = chosen.step
    flag = " (MRI without the competence rule: it was N/A)" if chosen.mri_unchecked else ""
    sel.why = (
        f"{len(comparable)} checkpoint(s) have {basis}; step {chosen.step} has the lowest MRI among them "
        f"({chosen.mri:.4f}{flag}, {side} accuracy {chosen.accuracy:.3f})"
        + ("" if chosen.step in sel.front else "; note: it is not on the accuracy–MRI front")
    )
    return sel


def _select_by_reward(points: list[Point], tolerance: float, side: str) -> Selection:
    """The paper's PPO rule (§3.3.2, App. J.1.2): the checkpoint with the highest validation reward."""
    trained = [p for p in points if p.step > 0]
    sel = Selection(side, tolerance, "val_reward", points, front=pareto_front(points))
    rewarded = [p for p in trained if p.val_reward is not None]
    if not rewarded:
        sel.why = (
            "no trained checkpoint has a validation reward (non-members' pass@1): nothing to choose from"
        )
        return sel
    best = max(rewarded, key=lambda p: (p.val_reward, -p.step))
    sel.stages = {"Early": trained[0].step, "Best-Val": best.step, "Late": trained[-1].step}
    sel.comparable = [best.step]
    sel.recommended = sel.paper_checkpoint = best.step
    mri = (
        "no MRI" if best.mri is None else f"MRI {best.mri:.4f}" + (" unchecked" if best.mri_unchecked else "")
    )
    sel.why = (
        f"rl stage: step {best.step} has the highest validation reward ({best.val_reward:.3f}, the "
        f"non-members' pass@1) of {len(rewarded)} checkpoint(s); {mri}"
        + ("" if best.step in sel.front else "; note: it is not on the accuracy–MRI front")
    )
    return sel


def stage_of(recipe: Any) -> str:
    """The training stage (cpt | sft | rl) a resolved recipe (a dict) names; "sft" when it names none."""
    train = recipe.get("train") if isinstance(recipe, dict) else None
    stage = train.get("stage") if isinstance(train, dict) else None
    return stage if isinstance(stage, str) else "sft"


def run_stage(run_dir: str | Path) -> str:
    import yaml

    path = Path(run_dir) / "recipe.yaml"
    return stage_of(yaml.safe_load(path.read_text()) if path.exists() else None)


def describe(sel: Selection) -> str:
    lines = [f"checkpoints ({sel.side}; * on the accuracy–MRI front, criterion {sel.criterion}):"]
    by_reward = sel.criterion == "val_reward"
    lines.append(
        f"  {'step':>7} {'accuracy':>9} {'MRI':>8} {'val_reward' if by_reward else 'val_loss':>9}  stage"
    )
    for p in sel.points:
        acc = "–" if p.accuracy is None else f"{p.accuracy:.3f}"
        mri = "–" if p.mri is None else f"{p.mri:.4f}" + ("†" if p.mri_unchecked else "")
        val = p.val_reward if by_reward else p.val_loss
        loss = "–" if val is None else f"{val:.4f}"
        star = "*" if p.step in sel.front else " "
        stage = ", ".join(n for n, s in sel.stages.items() if s == p.step)
        lines.append(f" {star}{p.step:>7} {acc:>9} {mri:>9} {loss:>9}  {stage}")
    if any(p.mri_unchecked for p in sel.points):
        lines.append("  † below the competence rule: MRI shown without it")
    if sel.paper_checkpoint is not None:
        rule = "highest validation reward" if by_reward else "Best-Val, the last before the loss rises"
        lines.append(f"paper's checkpoint (§3.3, {rule}): step {sel.paper_checkpoint}")
    lines.append(
        f"recommended: step {sel.recommended} (§5.2 practitioner rule) — {sel.why}"
        if sel.recommended is not None
        else sel.why
    )
    return "\n".join(lines)


def select_run(run_dir: str | Path, side: str = "non_members", tolerance: float = 0.05) -> Selection:
    """`select` on a run, written to <run>/selection.json only when a checkpoint is recommended."""
    run = RunDir(run_dir)
    if not run.results.exists():
        raise FileNotFoundError(f"{run.results} does not exist: is {run_dir} a leaklab run directory?")
    stage = run_stage(run.training_root)
    sel = select(checkpoint_points(run.results_rows(), side), tolerance, side, stage)
    if sel.recommended is not None:
        write_json(run.root / "selection.json", asdict(sel))
    return sel
