"""Text tables of a run's rows: the markdown metric table (printed at the end of a run and in
report.md) and the CSV of every row."""

from __future__ import annotations

import csv
import io
import json

from leaklab.report.section import fmt_interval
from leaklab.results import column_of, is_margin, ordered

THRESHOLD_FREE = ("auroc", "tpr@1%fpr", "tpr@5%fpr")


def metric_cells(rows: list[dict], metric: str, keep=None) -> tuple[dict, dict]:
    """(step, column) -> [value, ci_low, ci_high] of one metric (columns `keep` accepts), step -> epoch."""
    names = (metric, f"{metric}_ci_low", f"{metric}_ci_high")
    cells: dict[tuple[int, str], list] = {}
    epochs = {}
    for r in rows:
        column = column_of(r)
        if column is None or r.get("metric") not in names or (keep and not keep(column)):
            continue
        cells.setdefault((r["step"], column), [None, None, None])[names.index(r["metric"])] = r.get("value")
        if r["metric"] == metric:
            epochs[r["step"]] = r.get("epoch", 0.0)
    return cells, epochs


def metric_table(rows: list[dict], metric: str) -> str:
    """Markdown: a row per checkpoint, a column per detector, one metric with its intervals."""
    cells, epochs = metric_cells(rows, metric)
    columns = ordered(c for _, c in cells)
    lines = ["| step | epoch | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    for step in sorted(epochs):
        shown = [fmt_interval(*cells.get((step, c), [None] * 3)) for c in columns]
        lines.append(f"| {step} | {epochs[step] or 0:g} | " + " | ".join(shown) + " |")
    return "\n".join(lines) + "\n"


def console_table(rows: list[dict], metric: str) -> str:
    """`metric_table` turned for a terminal (a row per detector: there are more detectors than
    checkpoints), without a rule's margin column for a threshold-free metric (the rule's own line)."""
    threshold_free = metric in THRESHOLD_FREE
    cells, _ = metric_cells(rows, metric, keep=lambda column: not (threshold_free and is_margin(column)))
    cells = {key: cell for key, cell in cells.items() if isinstance(cell[0], (int, float))}
    columns, steps = ordered(c for _, c in cells), sorted({s for s, _ in cells})
    lines = ["| detector | " + " | ".join(f"step {s}" for s in steps) + " |", "|---|" + "---|" * len(steps)]
    lines += [
        f"| {c} | " + " | ".join(fmt_interval(*cells.get((s, c), [None] * 3)) for s in steps) + " |"
        for c in columns
    ]
    return "\n".join(lines) + "\n"


def rows_csv(rows: list[dict]) -> str:
    columns = ["step", "epoch", "evaluation", "detector", "params", "column", "metric", "value"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows({**r, "params": json.dumps(r["params"])} if r.get("params") else r for r in rows)
    return buffer.getvalue()


# The rows the detection evaluation writes beside the detectors (leaklab/evaluations/detection.py).
BLIND, DATASET_INFERENCE = "blind", "dataset_inference"


def shift_warnings(rows: list[dict]) -> list[str]:
    """One line when the blind baseline's shift test rejected (a `distribution_shift` row of 1)."""
    blind = {
        (int(r["step"]), r.get("metric")): r.get("value")
        for r in rows
        if column_of(r) == BLIND and r.get("metric") in ("distribution_shift", "auroc", "shift_p_value")
    }
    flagged = sorted(
        step for (step, metric), v in blind.items() if metric == "distribution_shift" and v == 1.0
    )
    if not flagged:
        return []
    # The blind baseline never sees the model, so its numbers are the same at every checkpoint.
    auroc, p_value = blind.get((flagged[0], "auroc")), blind.get((flagged[0], "shift_p_value"))
    shown = f"AUROC {auroc:.3f}" if auroc is not None else "AUROC –"
    if p_value is not None:
        shown += f", permutation p = {p_value:.2g}"
    return [
        f"WARNING: distribution shift. The blind baseline (a text-only classifier that never sees the model) "
        f"separates members from non-members ({shown}): the two sets differ in their text, "
        "so the detectors' scores measure that difference as well as training exposure."
    ]


def dataset_inference_cells(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """(header, one row of cells per checkpoint) of the dataset-inference rows; no rows: ([], [])."""
    value: dict[int, dict[str, float | None]] = {}
    epochs = {}
    for r in rows:
        if column_of(r) == DATASET_INFERENCE:
            value.setdefault(int(r["step"]), {})[r["metric"]] = r.get("value")
            epochs[int(r["step"])] = r.get("epoch") or 0.0
    if not value:
        return [], []

    def fmt(v, spec):
        return "–" if v is None else format(v, spec)

    header = ["step", "epoch", "p-value", "t", "members / non-members tested", "false-positive rate (null)"]
    body = []
    for step in sorted(value):
        m = value[step]
        p_value, t = fmt(m.get("p_value"), ".3g"), fmt(m.get("t"), ".2f")
        tested = f"{fmt(m.get('n_suspect_test'), '.0f')} / {fmt(m.get('n_clean_test'), '.0f')}"
        null = m.get("null_rejection_rate")
        null_test = f"at α = {m.get('null_alpha', 0.05):g} over {m.get('null_halvings', 0):.0f} halvings"
        null_rate = "–" if null is None else f"{null:.2f} {null_test}"
        body.append([str(step), f"{epochs[step]:g}", p_value, t, tested, null_rate])
    return header, body


def markdown_table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines) + "\n"
