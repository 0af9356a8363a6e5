"""MRI's Table 1 and Table 2 layouts from run directories (Memorize or generalize?, §5).

    python analysis/mri_tables.py RUN_DIR [RUN_DIR ...] [--names NAME ...] [--step N] [--side S]

Table 1: per run (a model) and side, at the last checkpoint with MRI rows (or --step): Acc(T_ori),
Acc(T_rew), Sim(T_rew), RAD_rew, RAD_mut, RAD_par, MRI, iMRI. Values below the competence rule are
"N/A" with the unchecked value in brackets, as the paper marks them.
Table 2: per run and side, the Early / Best-Val / Late checkpoints (`leaklab.selection`) with their
validation loss, Acc(T_ori) and MRI, and the checkpoint the selection rule recommends.
Members and non-members are shown apart: the paper's numbers are the held-out split (non-members).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from leaklab.results import without_dose
from leaklab.rundir import RunDir
from leaklab.selection import checkpoint_points, run_stage, select

SIDES = ("non_members", "members")
TABLE1 = ("acc_ori", "acc_rew", "sim", "rad_rew", "rad_mut", "rad_par", "mri", "imri")
TITLES = {
    "acc_ori": "Acc(T_ori)",
    "acc_rew": "Acc(T_rew)",
    "sim": "Sim(T_rew)",
    "rad_rew": "RAD_rew",
    "rad_mut": "RAD_mut",
    "rad_par": "RAD_par",
    "mri": "MRI",
    "imri": "iMRI",
}
CHECKED = ("rad_rew", "rad_mut", "mri", "imri")  # metrics the competence rule can make N/A


def _fmt(value, digits: int = 4) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _cell(got: dict, metric: str) -> str:
    value, params = got.get(metric, (None, {}))
    if value is None and "na" in params:
        unchecked = got.get(f"{metric}_unchecked", (None, {}))[0]
        if metric == "rad_par":
            return "not computed"
        return "N/A" + (f" ({_fmt(unchecked)})" if unchecked is not None else "")
    return _fmt(value)


def table1(runs: dict[str, list[dict]], step: int | None) -> str:
    header = ["Run", "Side", "step", *(TITLES[m] for m in TABLE1)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, rows in runs.items():
        mri = [r for r in rows if r.get("evaluation") == "mri"]
        steps = sorted({int(r["step"]) for r in mri})
        if not steps:
            lines.append(f"| {name} | – | – |" + " – |" * len(TABLE1))
            continue
        at = step if step is not None else steps[-1]
        for side in SIDES:
            got = {
                r["metric"]: (r["value"], r.get("params") or {})
                for r in mri
                if int(r["step"]) == at and r.get("column") == side
            }
            lines.append("| " + " | ".join([name, side, str(at), *(_cell(got, m) for m in TABLE1)]) + " |")
    return "\n".join(lines)


def table2(runs: dict[str, list[dict]], training: dict[str, str] | None = None) -> str:
    """`training`: each run's training stage (the selection rule depends on it; sft when not given)."""
    header = ["Run", "Side", "Stage", "step", "val loss", "Acc(T_ori)", "MRI"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, rows in runs.items():
        for side in SIDES:
            points = {p.step: p for p in checkpoint_points(rows, side)}
            sel = select(list(points.values()), side=side, stage=(training or {}).get(name, "sft"))
            stages = [*sel.stages.items()]
            if sel.recommended is not None:
                stages.append(("recommended", sel.recommended))
            for stage, step in stages:
                p = points[step]
                mri = _fmt(p.mri) + (" (unchecked)" if p.mri_unchecked else "")
                loss = _fmt(p.val_loss)
                acc = "–" if p.accuracy is None else f"{100 * p.accuracy:.2f}%"
                lines.append(f"| {name} | {side} | {stage} | {step} | {loss} | {acc} | {mri} |")
            if not stages:
                lines.append(f"| {name} | {side} | – | – | – | – | {sel.why} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", help="leaklab run directories")
    parser.add_argument("--names", nargs="+", help="one name per run (default: directory names)")
    parser.add_argument("--step", type=int, help="Table 1 at this step (default: each run's last)")
    args = parser.parse_args(argv)
    names = args.names or [Path(d).resolve().name for d in args.run_dirs]
    if len(names) != len(args.run_dirs):
        parser.error("give one --names entry per run directory")
    runs, training = {}, {}
    for name, run_dir in zip(names, args.run_dirs):
        run = RunDir(run_dir)
        if not run.results.exists():
            print(f"{run_dir}: no results.jsonl (not a leaklab run directory?)", file=sys.stderr)
            return 2
        runs[name] = without_dose(run.results_rows())
        training[name] = run_stage(run.training_root)
    print("Table 1: accuracy, similarity, RAD and MRI per run\n")
    print(table1(runs, args.step))
    print("\nTable 2: Early / Best-Val / Late checkpoints\n")
    print(table2(runs, training))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
