"""Reading a run's result rows back, so that every table and figure (the report, `analysis/`) orders and
names the detectors the same way: registry order, then parameters as numbers (n=1, 3, 5, 10), names and
groups from the detectors' records.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from leaklab.detectors import DETECTORS
from leaklab.rundir import read_rows

Table = dict[tuple[float, str], dict[str, float | None]]  # (epoch, column) -> metric -> value


class Family(NamedTuple):
    """How a column family (the part of a column before "@") is shown."""

    display: str
    group: str
    rule: bool


def families() -> dict[str, Family]:
    """Every family reports know, in their order (the blind baseline before the model detectors)."""
    out: dict[str, Family] = {}

    def add(records) -> None:
        for record in records:
            rule = record.kind == "rule"
            for column, display in ((record.name, record.title), *record.columns):
                out[column] = Family(display, record.group, rule)
                # A rule's margin used as a score, with a cross-validated threshold (`margin_column`).
                if rule:
                    out[column + MARGIN] = Family(f"{display}: margin as a score", record.group, False)

    add(r for r in DETECTORS.values() if r.kind != "model")
    # A column that no registered detector writes: the detection evaluation's blind baseline.
    out["blind"] = Family("Blind baseline (text only)", "blind baseline", False)
    add(r for r in DETECTORS.values() if r.kind == "model")
    return out


MARGIN = "_margin"


def margin_column(column: str) -> str:
    """A rule column's margin as a score column: "srdetection_gray@n=10" -> "srdetection_gray_margin@n=10"."""
    family, at, tail = column.partition("@")
    return f"{family}{MARGIN}{at}{tail}"


def is_margin(column: str) -> bool:
    family = column.partition("@")[0]
    return family.endswith(MARGIN) and family in families()


def family_of(column: str) -> Family:
    """A family no record names is shown by its name, among "other detectors"."""
    family = column.partition("@")[0]
    return families().get(family) or Family(family, "other detectors", False)


def column_of(row: dict[str, Any]) -> str | None:
    return row.get("column") or row.get("detector")


def is_rule(column: str) -> bool:
    return family_of(column).rule


def column_sort_key(column: str) -> tuple:
    """Registry / display order of the family, then each number in the parameters, as a number."""
    family, _, tail = column.partition("@")
    known = list(families())
    rank = known.index(family) if family in known else len(known)
    numbers = tuple(float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", tail))
    return rank, family, numbers, column


def ordered(columns) -> list[str]:
    return sorted(set(columns), key=column_sort_key)


def display_name(column: str) -> str:
    tail = column.partition("@")[2]
    name = family_of(column).display
    if tail and "=" not in tail:  # a bare value is mink's or minkpp's k
        tail = f"k={tail}"
    if not tail:
        return name
    # The parameter goes right after the detector's own name, before any ": margin as a score": legends
    # cut long labels at the end, and four cut labels of one rule would then read the same.
    head, sep, rest = name.partition(": ")
    return f"{head} ({tail}){sep}{rest}"


def undecided_note(metrics: dict[str, Any]) -> str:
    """The note " (all undecided)" for a rule column that decided no sample (e.g. no variant survived: a benchmark
    without tests under verify: tests), whose F1 / AUROC are then those of "never a leak", not a result."""
    n, undecided = metrics.get("n"), metrics.get("n_undecided")
    return " (all undecided)" if n and undecided is not None and undecided >= n else ""


def of_all_members(row: dict[str, Any]) -> bool:
    """A row of all members, not of one dose or form group (no (step, column, metric) table mixes them)."""
    return "dose" not in row and "form" not in row


def without_dose(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if of_all_members(r)]


def dose_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of one exposure dose group each (members of dose d against all non-members)."""
    return [r for r in rows if "dose" in r]


def rows_per_dose(
    labels: Sequence,
    doses: Sequence,
    rows_of: Callable[[list[int]], list[dict[str, Any]]],
    keep: Callable[[dict[str, Any]], bool] | None = None,
) -> list[dict[str, Any]]:
    """For each dose d of the members, the rows `rows_of(index)` computes on the members of dose d and all
    non-members (`index`, in their order), those `keep` accepts, each with `"dose": d`."""
    return _rows_per_group("dose", labels, [int(d) for d in doses], rows_of, keep)


def rows_per_form(
    labels: Sequence, forms: Sequence, rows_of: Callable[[list[int]], list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """`rows_per_dose` with each member's form (verbatim, rephrased; "" for a non-member) for its dose."""
    return _rows_per_group("form", labels, forms, rows_of)


def _rows_per_group(
    name: str, labels: Sequence, groups: Sequence, rows_of, keep=None
) -> list[dict[str, Any]]:
    labels = [int(y) for y in labels]
    rows = []
    for group in sorted({g for g, y in zip(groups, labels) if y == 1}):
        index = [i for i, (g, y) in enumerate(zip(groups, labels)) if y == 0 or g == group]
        rows += [{**r, name: group} for r in rows_of(index) if keep is None or keep(r)]
    return rows


def detection_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in without_dose(rows) if r.get("evaluation") == "detection" and column_of(r) is not None]


# step -> column -> dose -> metric -> value
DoseTable = dict[int, dict[str, dict[int, dict[str, float | None]]]]


def dose_table(rows: list[dict[str, Any]], evaluation: str = "detection") -> DoseTable:
    """The per-dose rows of `evaluation` by step, column and dose (a later row of the same key wins)."""
    table: DoseTable = {}
    for r in dose_rows(rows):
        if r.get("evaluation") != evaluation or column_of(r) is None:
            continue
        by_dose = table.setdefault(int(r["step"]), {}).setdefault(str(column_of(r)), {})
        by_dose.setdefault(int(r["dose"]), {})[r["metric"]] = r.get("value")
    return table


def exposures_by_dose(doses: dict[str, int], exposures: dict[str, int]) -> dict[int, dict[str, float]]:
    """Per dose group: its members, and min, mean and max of the exposures per epoch mixture.json counted."""
    out: dict[int, dict[str, float]] = {}
    for dose in sorted(set(doses.values())):
        ids = [t for t, d in doses.items() if d == dose]
        counts = [exposures[t] for t in ids if exposures.get(t) is not None]
        out[dose] = {"members": float(len(ids)), "counted": float(len(counts))}
        if counts:
            out[dose] |= {
                "min": float(min(counts)),
                "mean": sum(counts) / len(counts),
                "max": float(max(counts)),
            }
    return out


def load_detection(run_dir: str | Path) -> Table:
    """Detection metric values of one run, keyed by (epoch, column); a later row or step wins."""
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


def _by_n(column: str) -> bool:
    """A column of a rule, or of its margin as a score, at one number of variants ("...@n=10")."""
    family, _, n = column.partition("@n=")
    return n.isdigit() and (is_rule(column) or is_margin(column))


def largest_n_only(table: Table) -> Table:
    """The table without the rule (and rule margin) columns of a smaller n than their family's largest."""
    largest: dict[tuple[float, str], int] = {}
    for epoch, column in table:
        family, _, n = column.partition("@n=")
        if _by_n(column):
            largest[epoch, family] = max(largest.get((epoch, family), 0), int(n))

    def kept(epoch: float, column: str) -> bool:
        family, _, n = column.partition("@n=")
        return not _by_n(column) or int(n) == largest[epoch, family]

    return {key: metrics for key, metrics in table.items() if kept(*key)}


DELAY_LEVELS = (0.5, 0.8)


def detection_delays(rows: list[dict[str, Any]], levels=DELAY_LEVELS) -> dict[str, list[int | None]]:
    """column -> per level, the first step whose AUROC interval lies wholly above it (None: never); a rule's
    flags never count (they sit at its operating point); step 0: the sets differed before training."""
    low: dict[str, dict[int, float]] = {}
    for r in rows:
        value = r.get("value")
        if r.get("metric") == "auroc_ci_low" and isinstance(value, (int, float)) and column_of(r):
            low.setdefault(str(column_of(r)), {})[int(r["step"])] = float(value)
    return {
        column: [next((s for s in sorted(by_step) if by_step[s] > level), None) for level in levels]
        for column, by_step in low.items()
    }
