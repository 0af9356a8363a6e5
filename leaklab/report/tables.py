"""Text tables of a run's rows: the markdown metric table (printed at the end of a run and in
report.md) and the CSV of every row."""

from __future__ import annotations

import csv
import io
import json

from leaklab.results import column_of, ordered


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
        lines.append(f"| {step} | {epochs[step] or 0:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def rows_csv(rows: list[dict]) -> str:
    columns = ["step", "epoch", "evaluation", "detector", "params", "column", "metric", "value"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows({**r, "params": json.dumps(r["params"])} if r.get("params") else r for r in rows)
    return buffer.getvalue()
