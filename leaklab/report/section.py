"""What a report section is: the one small interface between the report and the evaluations, which
contribute theirs with an optional `report_section(self, rows, run) -> Section | None` on their class
(docs/outputs.md#reports). It imports nothing from leaklab, so an evaluation imports it without a cycle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Panel:
    """One chart: a Vega-Lite spec (data inline) and a caption (what is drawn, over how many samples)."""

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


def fmt_interval(v: Any, low: Any = None, high: Any = None) -> str:
    """`fmt(v)`, followed by its interval ` [low, high]` (2 decimals) where both ends are numbers."""
    if isinstance(low, (int, float)) and isinstance(high, (int, float)) and fmt(v) != "–":
        return f"{fmt(v)} [{fmt(low, 2)}, {fmt(high, 2)}]"
    return fmt(v)
