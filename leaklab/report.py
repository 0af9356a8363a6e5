"""Reports built from a run's files: a markdown table, a CSV of every row, one PNG per metric.

`leaklab report RUN_DIR` writes <run>/report/{report.md, results.csv, <evaluation>_<metric>.png}.
Everything is derived from results.jsonl, so a report can be rebuilt at any time.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from pathlib import Path

from leaklab.results import column_of, detection_rows, ordered
from leaklab.rundir import RunDir, write_atomic

# Shown in the summary table and plotted, in this order, when present.
HEADLINE_METRICS = ("auroc", "f1", "accuracy", "precision", "recall", "f1_oracle", "tpr@1%fpr", "tpr@5%fpr")


def metric_table(rows: list[dict], metric: str, intervals: bool = True) -> str:
    """Markdown: a row per checkpoint, a column per detector (in `results.ordered` order), for one
    metric; with `intervals`, each cell also shows its bootstrap 95% interval when the rows have one."""
    value, low, high = {}, {}, {}
    epochs = {}
    for r in rows:
        column = column_of(r)
        if column is None:
            continue
        if r.get("metric") == metric:
            value[(r["step"], column)] = r.get("value")
            epochs[r["step"]] = r.get("epoch", 0.0)
        elif r.get("metric") == f"{metric}_ci_low":
            low[(r["step"], column)] = r.get("value")
        elif r.get("metric") == f"{metric}_ci_high":
            high[(r["step"], column)] = r.get("value")
    columns = ordered(c for _, c in value)

    def cell(key) -> str:
        v = value.get(key)
        if v is None:
            return "–"
        if intervals and low.get(key) is not None and high.get(key) is not None:
            return f"{v:.3f} [{low[key]:.2f}, {high[key]:.2f}]"
        return f"{v:.3f}"

    lines = ["| step | epoch | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    for step in sorted(epochs):
        cells = [cell((step, c)) for c in columns]
        lines.append(f"| {step} | {epochs[step]:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _run_header(run: RunDir) -> str:
    """Model, benchmark, split and mixture of the run, from its own files."""

    facts = []
    if run.recipe.exists():
        from leaklab.recipe import yaml_load

        recipe = yaml_load(run.recipe.read_text())
        facts.append(f"model `{recipe['model']['name_or_path']}`, stage `{recipe['train']['stage']}`")
    if run.manifest.exists():
        m = json.loads(run.manifest.read_text())
        facts.append(
            f"{m['benchmark']}: {m['n_members']} members / {m['n_non_members']} non-members (seed {m['seed']})"
        )
    if run.mixture.exists():
        x = json.loads(run.mixture.read_text())
        facts.append(
            f"mixture {x['member_tokens']:,} member + {x['web_tokens']:,} corpus tokens "
            f"(code:web requested {x['requested_ratio']}, achieved 1:{x['achieved_ratio']:g})"
        )
    return "".join(f"- {f}\n" for f in facts) + "\n" if facts else ""


def plot_metric(rows: list[dict], metric: str, path: Path, evaluation: str = "detection") -> bool:
    """One line per detector, x = epoch. Returns False when there is nothing to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        wanted = r.get("evaluation") == evaluation and r.get("metric") == metric and column_of(r) is not None
        if wanted and r.get("value") is not None:
            series[column_of(r)].append((r.get("epoch", 0.0), r["value"]))
    if not series:
        return False
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for column in ordered(series):
        points = sorted(series[column])
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=column)
    if metric in ("auroc", "f1", "accuracy", "f1_oracle"):
        ax.axhline(0.5, color="grey", lw=0.8, ls="--", label="chance")
    if metric in HEADLINE_METRICS:
        ax.set_ylim(-0.02, 1.02)  # bounded metrics on a fixed scale, so small wiggles do not look large
    ax.set_xlabel("epoch")
    ax.set_ylabel(metric)
    ax.set_title(f"{evaluation}: {metric} per checkpoint")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return True


def plot_training_loss(rows: list[dict], path: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = sorted(
        (r["step"], r["value"])
        for r in rows
        if r.get("evaluation") == "training" and r.get("metric") == "loss"
    )
    if not points:
        return False
    fig, ax = plt.subplots(figsize=(6, 3), dpi=120)
    ax.plot([p[0] for p in points], [p[1] for p in points])
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return True


def plot_histograms(scores: dict, out_dir: Path) -> list[Path]:
    """One histogram per score column (audit mode, where there are no labels to split by)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    paths = []
    for name, values in scores.items():
        values = np.asarray(values, dtype=float)
        values = values[np.isfinite(values)]
        if not len(values):
            continue
        fig, ax = plt.subplots(figsize=(5, 3.5), dpi=120)
        ax.hist(values, bins=min(40, max(5, len(values) // 4)))
        ax.set_xlabel(f"{name} score (higher = more likely seen in training)")
        ax.set_ylabel("samples")
        fig.tight_layout()
        path = out_dir / f"audit_{name.replace('@', '_at_').replace('/', '_')}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def rows_csv(rows: list[dict]) -> str:
    columns = ["step", "epoch", "evaluation", "detector", "params", "column", "metric", "value"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows({**r, "params": json.dumps(r["params"])} if r.get("params") else r for r in rows)
    return buffer.getvalue()


def build_report(run_dir: str | Path) -> Path:
    run = RunDir(run_dir)
    rows = run.results_rows()
    det = detection_rows(rows)
    plots = []
    for metric in HEADLINE_METRICS:
        png = run.report / f"detection_{metric.replace('%', 'pct').replace('@', '_at_')}.png"
        if plot_metric(rows, metric, png):
            plots.append(png)
    if plot_training_loss(rows, run.report / "training_loss.png"):
        plots.append(run.report / "training_loss.png")
    parts = [f"# leaklab report: {run.root.name}\n", _run_header(run)]
    parts.append(
        "Detection of injected (member) vs held-out (non-member) samples, one table per metric: a row per "
        "checkpoint (step 0 is the untrained model), a column per detector. AUROC and TPR@FPR need no "
        "threshold; accuracy / precision / recall / F1 (macro) use a threshold chosen by k-fold "
        "cross-validation; *_oracle uses the best threshold on all labels (what papers usually report).\n"
    )
    for metric in HEADLINE_METRICS:
        if any(r["metric"] == metric for r in det):
            parts += [f"## {metric}\n", metric_table(det, metric)]
    parts += [f"![{p.stem}]({p.name})\n" for p in plots]
    write_atomic(run.report / "report.md", "\n".join(parts))
    write_atomic(run.report / "results.csv", rows_csv(rows))
    return run.report / "report.md"


def print_summary(run: RunDir) -> None:
    """What a run ends with: the run directory, then AUROC and macro-F1 per checkpoint and detector."""
    rows = detection_rows(run.results_rows())
    report = build_report(run.root)
    print(f"\nrun directory: {run.root}")
    print(
        "\nAUROC, members vs non-members (0.5 = chance), per checkpoint (rows) and detector (columns), "
        "with bootstrap 95% intervals:"
    )
    print(metric_table(rows, "auroc"))
    print("macro-F1 at a cross-validated threshold:")
    print(metric_table(rows, "f1"))
    print(f"report: {report}")
