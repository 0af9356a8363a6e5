"""The counterfactual paper's Tables 1 and 2 from a run, members and non-members side by side.

    python analysis/counterfactual_tables.py RUN_DIR [--step N] [--plots DIR]

Reads the run's results.jsonl rows with "evaluation": "counterfactual" (written by
leaklab/evaluations/counterfactual.py: metric "<similarity>.<stat>" per column members / non_members / all)
of step N (default: the last evaluated step). Table 1: mean ± std of the similarity to the ground truth
for the checkpoint (target) and the reference model, and the delta. Table 2: how many functions each
functional metric flags as counterfactually memorized, then the two unions the paper reports (any
metric; without the most lenient judge, named) and near-verbatim memorization; on non-members (never
trained on) every flag is a false positive of the criterion. With HyClone, the executed-only diagnostic
(`hyclone_executed_only`: pairs that ran on both sides) follows, apart from the unions, with how many
pairs ran.

--plots DIR also draws, from the per-function records (scores/step-N/counterfactual.jsonl): target vs
reference similarity per metric (points above the diagonal moved towards the ground truth), the delta
vs the target's BLEU for the structural metrics (upper left = functional, not verbatim), and the Pearson
correlations between the metrics (target scores), members and non-members in two colours.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from leaklab.memorization.counterfactual import plots  # the figures W&B gets too
from leaklab.results import without_dose
from leaklab.rundir import RunDir

SIDES = ("members", "non_members")
DIAGNOSTIC = "hyclone_executed_only"


def load(
    run_dir: str | Path, step: int | None
) -> tuple[int, dict[tuple[str, str], float | None], str | None]:
    rows = [
        r for r in without_dose(RunDir(run_dir).results_rows()) if r.get("evaluation") == "counterfactual"
    ]
    if not rows:
        raise SystemExit(
            f"{run_dir}: no counterfactual rows in results.jsonl (is it in evaluate.evaluations?)"
        )
    steps = sorted({r["step"] for r in rows})
    chosen = steps[-1] if step is None else step
    if chosen not in steps:
        raise SystemExit(f"{run_dir}: step {chosen} has no counterfactual rows (steps: {steps})")
    chosen_rows = [r for r in rows if r["step"] == chosen]
    excluded = next(
        (r["params"].get("excluded") for r in chosen_rows if r["metric"] == "memorized_any_excl_lenient"),
        None,
    )
    return chosen, {(r["column"], r["metric"]): r["value"] for r in chosen_rows}, excluded


def _cell(got, side: str, metric: str, stat: str) -> str:
    mean, std = got.get((side, f"{metric}.{stat}_mean")), got.get((side, f"{metric}.{stat}_std"))
    return "-" if mean is None else f"{mean:.3f} ± {std:.3f}"


def render(got: dict, step: int, excluded: str | None = None) -> str:
    """Tables 1 and 2 as markdown; `excluded` names the judge the second union leaves out."""
    metrics = sorted({m.rsplit(".", 1)[0] for _, m in got if m.endswith(".delta")})
    lines = [f"## Step {step}", "", "Table 1: similarity to the ground truth (mean ± std)", ""]
    header = "| metric | " + " | ".join(f"{s} target | {s} reference | {s} Δ" for s in SIDES) + " |"
    lines += [header, "|" + "---|" * (1 + 3 * len(SIDES))]
    for metric in metrics:
        cells = []
        for side in SIDES:
            delta = got.get((side, f"{metric}.delta"))
            cells += [_cell(got, side, metric, "target"), _cell(got, side, metric, "reference")]
            cells.append("-" if delta is None else f"{delta:+.3f}")
        lines.append(f"| {metric} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Table 2: counterfactually memorized (BLEU < tau, SIM target >= tau, SIM reference < tau)",
        "",
    ]
    lines += ["| metric | " + " | ".join(SIDES) + " |", "|---|" + "---|" * len(SIDES)]
    flagged = sorted(m.rsplit(".", 1)[0] for s, m in got if s == "members" and m.endswith(".memorized"))
    unions = {
        "memorized_any": "unique (any metric)",
        "memorized_any_excl_lenient": "unique (excl. the most lenient judge"
        + (f": {excluded})" if excluded else ")"),
        "near_verbatim": "near_verbatim",
    }
    functional = [m for m in flagged if m != DIAGNOSTIC]
    for metric in [*functional, *unions, *([DIAGNOSTIC] if DIAGNOSTIC in flagged else [])]:
        key = metric if metric in unions else f"{metric}.memorized"
        cells = []
        for side in SIDES:
            count, n = got.get((side, key)), got.get((side, "n_samples"))
            cells.append("-" if count is None or not n else f"{count:.0f} / {n:.0f} ({count / n:.1%})")
        name = unions.get(metric, metric)
        if metric == DIAGNOSTIC:
            name += " (diagnostic: pairs executed on both sides; in no union)"
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    failed = [f"{s}: {got.get((s, 'n_extraction_failed_target'), 0):.0f}" for s in SIDES]
    lines += ["", f"target generations without an extractable function: {', '.join(failed)}"]
    if any((s, "hyclone.n_executed_target") in got for s in SIDES):
        ran = [
            f"{s}: target {got.get((s, 'hyclone.n_executed_target'), 0):.0f}, "
            f"reference {got.get((s, 'hyclone.n_executed_reference'), 0):.0f}"
            for s in SIDES
        ]
        lines.append(f"HyClone pairs executed (the rest score 0, not a clone): {'; '.join(ran)}")
    return "\n".join(lines)


def _read(run_dir: str | Path, step: int) -> list[dict]:
    import json

    path = RunDir(run_dir).scores(step, "counterfactual")
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--step", type=int, default=None)
    parser.add_argument("--plots", default=None, help="directory for the PNG figures")
    args = parser.parse_args(argv)
    step, got, excluded = load(args.run_dir, args.step)
    print(render(got, step, excluded))
    if args.plots:
        for path in plots(_read(args.run_dir, step), args.plots):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
