"""Reports built from a run's files only, so they can be rebuilt at any time (`leaklab report RUN_DIR`):
index.html, report.md, results.csv and the figures (each file: docs/outputs.md#reports)."""

from __future__ import annotations

from pathlib import Path

from leaklab.report.figures import plot_histograms, plot_metric, plot_training_loss
from leaklab.report.html import write_page
from leaklab.report.rundata import RunData, load_run
from leaklab.report.sections import build_sections, headline, is_mia
from leaklab.report.tables import (
    console_table,
    dataset_inference_cells,
    markdown_table,
    metric_table,
    rows_csv,
    shift_warnings,
)
from leaklab.results import detection_rows
from leaklab.rundir import RunDir, write_atomic

__all__ = ["HEADLINE_METRICS", "build_report", "metric_table", "plot_histograms", "print_summary", "rows_csv"]

# In report.md, in this order, when present; FIGURE_METRICS also as PNG + PDF figures.
HEADLINE_METRICS = ("auroc", "f1", "accuracy", "precision", "recall", "f1_oracle", "tpr@1%fpr", "tpr@5%fpr")
FIGURE_METRICS = ("auroc", "tpr@1%fpr", "f1")


def _markdown(data: RunData, figures: list[Path]) -> str:
    det = detection_rows(data.rows)
    lead = headline(data.rows_of("detection"), data)
    parts = [f"# leaklab report: {data.name}\n", "Interactive version: [index.html](index.html)\n"]
    parts += [f"{lead}\n"] if lead else []
    parts += [f"- missing: {p}\n" for p in data.problems]
    what = (
        "members vs non-members as labelled, scored once with the model as given (step 0; nothing trained)"
        if is_mia(data)
        else "injected (member) vs held-out (non-member) samples"
    )
    rows_are = "step 0" if is_mia(data) else "checkpoint (step 0 is the untrained model)"
    parts.append(
        f"Detection of {what}, one table per metric: a row per "
        f"{rows_are}, a column per detector. AUROC and TPR@FPR need no "
        "threshold; accuracy / precision / recall / F1 (macro) use a threshold chosen by k-fold "
        "cross-validation; *_oracle uses the best threshold on all labels (what papers usually report).\n"
    )
    parts += [f"**{line}**\n" for line in shift_warnings(det)]
    flagged = {"flag_rate_members": "members", "flag_rate_non_members": "non-members"}
    for metric in [*HEADLINE_METRICS, *flagged]:
        if any(r["metric"] == metric for r in det):
            parts.append(f"## {metric}\n")
            if metric in flagged:
                parts.append(
                    f"Rule detectors: the share of {flagged[metric]} flagged (undecided: not flagged).\n"
                )
            parts.append(metric_table(det, metric))
    header, body = dataset_inference_cells(det)
    if body:
        parts += [
            "## dataset inference\n",
            "Is the member set, as a whole, in training? One-sided Welch t-test of a learned combination of "
            "the detectors' scores, members vs non-members (Maini et al., 2024); the last column is the same "
            "test's rejection rate on random halvings of the non-members (should be at most α).\n",
            markdown_table(header, body),
        ]
    parts += [f"![{p.stem}]({p.name})\n" for p in figures if p.suffix == ".png"]
    return "\n".join(parts)


def build_report(run_dir: str | Path, out_dir: str | Path | None = None) -> Path:
    """Every file of report/ (or `out_dir`), even for an empty run (the page says what is missing)."""

    data = load_run(run_dir)
    out = Path(out_dir) if out_dir else data.run.report
    rows = data.rows
    figures: list[Path] = []
    n_pos, n_neg = data.sample_counts()
    caption = f"n = {n_pos} members + {n_neg} non-members; bands: bootstrap 95% intervals" if n_pos else ""
    for metric in [] if is_mia(data) else FIGURE_METRICS:  # one scoring: a per-epoch figure would be one dot
        stem = metric.replace("%", "pct").replace("@", "_at_")
        figures += plot_metric(rows, metric, out / f"detection_{stem}.png", caption=caption)
    figures += plot_training_loss(rows, out / "training_loss.png")
    write_atomic(out / "report.md", _markdown(data, figures))
    write_atomic(out / "results.csv", rows_csv(rows))
    links = " · ".join(
        f'<a href="{p.name}">{p.name}</a>' for p in [out / "report.md", out / "results.csv", *figures]
    )
    return write_page(out, f"leaklab report: {data.name}", build_sections(data), footer=f"Files: {links}")


def print_summary(run: RunDir, report: Path | None = None, out_dir: str | Path | None = None) -> None:
    """What a run ends with: its directory, AUROC and macro-F1 per checkpoint and detector, and the
    report (`report`, when already built from the run's current rows, else built in `out_dir`)."""
    rows = detection_rows(run.results_rows())
    report = report or build_report(run.root, out_dir)
    print(f"\nrun directory: {run.root}")
    print(
        "\nAUROC, members vs non-members (0.5 = chance), per detector and checkpoint, with bootstrap 95%\n"
        "intervals (a rule's margin column has the rule's AUROC: not repeated):"
    )
    print(console_table(rows, "auroc"))
    print("macro-F1 at a cross-validated threshold (SrDetection: its own rule; _margin: at a CV threshold):")
    print(console_table(rows, "f1"))
    lead = headline(rows, load_run(run.root))
    if lead:
        print(f"\n{lead}")
    print(f"report: {report}\n        {report.parent / 'report.md'}")
