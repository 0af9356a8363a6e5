"""Reading a run's result rows back: detection tables by checkpoint and column, in a readable order.

The report and the `analysis/` scripts build on these, so every table and figure orders and names the
detectors the same way: registry order, parameters ascending as numbers (n=1, 3, 5, 10 — not 1, 10,
3, 5). A row's column is its `column` field (older runs: its `detector` field).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from leaklab.rundir import read_rows

Table = dict[tuple[float, str], dict[str, float | None]]  # (epoch, column) -> metric -> value

# Display names, in the order detectors are shown; other families follow alphabetically.
DISPLAY = {
    "ppl": "PPL",
    "lowercase": "Lowercase",
    "zlib": "Zlib",
    "mink": "Min-K% Prob",
    "minkpp": "Min-K%++ Prob",
    "dcpdd": "DC-PDD",
    "ref": "Ref. ratio",
    "ref_diff": "Ref. difference",
    "srdetection": "SrDetection",
    "srdetection_gray": "SrDetection gray box",
    "srdetection_black": "SrDetection black box",
    "srdetection_calibrated": "SrDetection calibrated (vs reference)",
    "blind": "Blind baseline (text only)",
}
RULE_FAMILIES = ("srdetection",)  # columns decided by a rule (no threshold)


def column_of(row: dict[str, Any]) -> str | None:
    return row.get("column") or row.get("detector")


def is_rule(column: str) -> bool:
    return column.startswith(RULE_FAMILIES)


def column_sort_key(column: str) -> tuple:
    """Registry / display order of the family, then each number in the parameters, as a number."""
    family, _, tail = column.partition("@")
    rank = list(DISPLAY).index(family) if family in DISPLAY else len(DISPLAY)
    numbers = tuple(float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", tail))
    return rank, family, numbers, column


def ordered(columns) -> list[str]:
    return sorted(set(columns), key=column_sort_key)


def display_name(column: str) -> str:
    family, _, tail = column.partition("@")
    name = DISPLAY.get(family, family)
    if tail.startswith("n="):  # SrDetection: the number of variants compared
        return f"{name} ({tail})"
    return f"{name} (k={tail})" if tail else name


def undecided_note(metrics: dict[str, Any]) -> str:
    """The note " (all undecided)" for a rule column that decided no sample (e.g. no variant survived: a benchmark
    without tests under verify: tests), whose F1 / AUROC are then those of "never a leak", not a result."""
    n, undecided = metrics.get("n"), metrics.get("n_undecided")
    return " (all undecided)" if n and undecided is not None and undecided >= n else ""


def detection_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("evaluation") == "detection" and column_of(r) is not None]


def load_detection(run_dir: str | Path) -> Table:
    """Detection metric values of one run, keyed by (epoch, column). When a (step, column, metric) was
    written twice the later row wins; when two steps share an epoch the later step wins."""
    path = Path(run_dir) / "results.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir}: no results.jsonl (is it a leaklab run directory?)")
    rows = detection_rows(read_rows(path))
    rows.sort(key=lambda r: r.get("step", 0))  # stable: later lines of a step still win
    table: Table = {}
    for row in rows:
        key = (float(row.get("epoch") or 0.0), str(column_of(row)))
        table.setdefault(key, {})[row["metric"]] = row.get("value")
    return table


def largest_n_only(table: Table) -> Table:
    """The table without the rule columns of smaller n (per epoch and detector family)."""
    largest: dict[tuple[float, str], int] = {}
    for epoch, column in table:
        family, _, n = column.partition("@n=")
        if is_rule(column) and n.isdigit():
            largest[epoch, family] = max(largest.get((epoch, family), 0), int(n))
    keep = {}
    for (epoch, column), metrics in table.items():
        family, _, n = column.partition("@n=")
        if is_rule(column) and n.isdigit() and int(n) != largest[epoch, family]:
            continue
        keep[epoch, column] = metrics
    return keep
