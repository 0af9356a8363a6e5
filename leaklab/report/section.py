"""What a report section is: the one small interface between the report and the evaluations.

A section is a title, a short text, and a list of items, each either a `Panel` (one interactive chart:
a Vega-Lite spec with its data inline) or a `Table` (text cells), plus `notes` that say what is missing.
The report page (`html.py`) draws sections in order; it knows nothing about any evaluation.

An evaluation contributes its section with an optional method on the class its record names in
`leaklab.evaluations.EVALUATIONS`:

    def report_section(self, rows: list[dict], run: RunData) -> Section | None

`rows` are that evaluation's result rows (never empty: an evaluation without rows gets no section);
`run` (`leaklab.report.rundata.RunData`) gives the run's other files (manifest, per-sample scores).
Return None to leave the section out. `leaklab.report.charts` has builders for the usual panels
(`metric_panel`: one line per column with its bootstrap band, y from 0 to 1, chance marked).
Evaluations without the method get a generic section: each metric per checkpoint, one line per column.
This module imports nothing from leaklab, so an evaluation can import it without a cycle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Panel:
    """One chart: `spec` is a Vega-Lite spec (a dict, data inline); `caption` says what is drawn and
    over how many samples."""

    title: str
    spec: dict[str, Any]
    caption: str = ""


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class Section:
    key: str  # the HTML anchor, e.g. "detection"
    title: str
    intro: str = ""
    items: list[Panel | Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what is missing, shown above the items


def panel_values(panel: Panel) -> int:
    """How many data values a panel's spec carries inline (over every layer and concatenated view)."""
    count = 0
    stack: list[Any] = [panel.spec]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            data = node.get("data")
            if isinstance(data, dict) and isinstance(data.get("values"), list):
                count += len(data["values"])
            stack.extend(v for k, v in node.items() if k != "data")
        elif isinstance(node, list):
            stack.extend(node)
    return count


def fmt(v: Any, digits: int = 3) -> str:
    """A number as a table cell: `digits` decimals, "–" for a missing or non-finite value."""
    return f"{v:.{digits}f}" if isinstance(v, (int, float)) and math.isfinite(v) else "–"
