"""The counterfactual paper's Tables 1 and 2 from a run, members and non-members side by side.

    python analysis/counterfactual_tables.py RUN_DIR [--step N] [--plots DIR]

Reads the run's results.jsonl rows with "evaluation": "counterfactual" (written by
leaklab/evaluations/counterfactual.py: metric "<similarity>.<stat>" per column members / non_members / all)
of step N (default: the last evaluated step). Table 1: mean ± std of the similarity to the ground truth
for the checkpoint (target) and the reference model, and the delta. Table 2: how many functions each
structural metric flags as counterfactually memorized; on non-members (never trained on) every flag is a
false positive of the criterion.

--plots DIR also draws, from the per-function records (scores/step-N/counterfactual.jsonl): target vs
reference similarity per metric (points above the diagonal moved towards the ground truth), the delta
vs the target's BLEU for the structural metrics (upper left = functional, not verbatim), and the Pearson
correlations between the metrics (target scores), members and non-members in two colours.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from leaklab.rundir import RunDir

SIDES = ("members", "non_members")


def load(run_dir: str | Path, step: int | None) -> tuple[int, dict[tuple[str, str], float | None]]:
    rows = [r for r in RunDir(run_dir).results_rows() if r.get("evaluation") == "counterfactual"]
    if not rows:
        raise SystemExit(
            f"{run_dir}: no counterfactual rows in results.jsonl (is it in evaluate.evaluations?)"
        )
    steps = sorted({r["step"] for r in rows})
    chosen = steps[-1] if step is None else step
    if chosen not in steps:
        raise SystemExit(f"{run_dir}: step {chosen} has no counterfactual rows (steps: {steps})")
    return chosen, {(r["column"], r["metric"]): r["value"] for r in rows if r["step"] == chosen}


def _cell(got, side: str, metric: str, stat: str) -> str:
    mean, std = got.get((side, f"{metric}.{stat}_mean")), got.get((side, f"{metric}.{stat}_std"))
    return "-" if mean is None else f"{mean:.3f} ± {std:.3f}"


def render(got: dict, step: int) -> str:
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
    for metric in [*flagged, "memorized_any", "near_verbatim"]:
        key = metric if metric in ("memorized_any", "near_verbatim") else f"{metric}.memorized"
        cells = []
        for side in SIDES:
            count, n = got.get((side, key)), got.get((side, "n_samples"))
            cells.append("-" if count is None or not n else f"{count:.0f} / {n:.0f} ({count / n:.1%})")
        lines.append(f"| {metric} | " + " | ".join(cells) + " |")
    failed = [f"{s}: {got.get((s, 'n_extraction_failed_target'), 0):.0f}" for s in SIDES]
    lines += ["", f"target generations without an extractable function: {', '.join(failed)}"]
    return "\n".join(lines)


def _read(run_dir: str | Path, step: int) -> list[dict]:
    import json

    path = RunDir(run_dir).scores(step, "counterfactual")
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def plots(records: list[dict], out: str | Path) -> list[Path]:
    """Three PNGs from per-function records; returns their paths."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    metrics = list(records[0]["target"])
    colour = {1: "tab:red", 0: "tab:blue"}

    def value(record, side, metric):
        v = record[side].get(metric)
        return math.nan if v is None else v

    cols = 4
    rows = math.ceil(len(metrics) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        for label, name in ((1, "members"), (0, "non-members")):
            pts = [
                (value(r, "reference", metric), value(r, "target", metric))
                for r in records
                if r["label"] == label
            ]
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=8, alpha=0.6, c=colour[label], label=name)
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8)
        ax.set(title=metric, xlabel="reference", ylabel="target", xlim=(-0.02, 1.02), ylim=(-0.02, 1.02))
    for ax in list(axes.flat)[len(metrics) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    paths = [out / "target_vs_reference.png"]
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    from leaklab.similarity.suite import TEXT_METRICS

    structural = [m for m in metrics if m not in TEXT_METRICS]
    fig, axes = plt.subplots(1, len(structural), figsize=(3.2 * len(structural), 3.0), squeeze=False)
    for ax, metric in zip(axes.flat, structural):
        for label, name in ((1, "members"), (0, "non-members")):
            sel = [r for r in records if r["label"] == label]
            ax.scatter([value(r, "target", "bleu") for r in sel],
                       [value(r, "target", metric) - value(r, "reference", metric) for r in sel],
                       s=8, alpha=0.6, c=colour[label], label=name)  # fmt: skip
        ax.axhline(0, color="grey", lw=0.8)
        ax.axvline(0.75, color="grey", lw=0.8, ls="--")
        ax.set(title=f"{metric} delta", xlabel="target BLEU", ylabel="target - reference")
    fig.tight_layout()
    paths.append(out / "delta_vs_bleu.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    table = np.array([[value(r, "target", m) for m in metrics] for r in records], dtype=float)
    corr = np.full((len(metrics), len(metrics)), np.nan)
    for i in range(len(metrics)):
        for j in range(len(metrics)):
            ok = ~np.isnan(table[:, i]) & ~np.isnan(table[:, j])
            if ok.sum() > 2 and table[ok, i].std() > 0 and table[ok, j].std() > 0:
                corr[i, j] = np.corrcoef(table[ok, i], table[ok, j])[0, 1]
    fig, ax = plt.subplots(figsize=(7, 6))
    image = ax.imshow(corr, vmin=-1, vmax=1, cmap="coolwarm")
    ax.set_xticks(range(len(metrics)), metrics, rotation=90, fontsize=7)
    ax.set_yticks(range(len(metrics)), metrics, fontsize=7)
    fig.colorbar(image, ax=ax, label="Pearson r of the target scores (blank: constant, or < 3 pairs)")
    fig.tight_layout()
    paths.append(out / "metric_correlations.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--step", type=int, default=None)
    parser.add_argument("--plots", default=None, help="directory for the PNG figures")
    args = parser.parse_args(argv)
    step, got = load(args.run_dir, args.step)
    print(render(got, step))
    if args.plots:
        for path in plots(_read(args.run_dir, step), args.plots):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
