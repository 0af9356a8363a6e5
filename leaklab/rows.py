"""One result row: the line of results.jsonl every evaluation, audit and training log writes, built here
so that its fields, their order and the JSON form of a missing value are decided once (`Row.as_dict`).
See docs/outputs.md#what-a-run-writes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Row:
    metric: str
    value: float | None
    column: str | None = None
    detector: str | None = None
    params: dict[str, Any] | None = None  # the parameters that produced the column; None: no params field
    dose: int | None = None  # the exposure dose group the row is computed on; None: all members
    step: int | None = None
    epoch: float | None = None
    evaluation: str | None = None
    context: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The row as results.jsonl holds it; a None field is left out, but for detector, column, value."""
        out = {k: getattr(self, k) for k in ("step", "epoch", "evaluation") if getattr(self, k) is not None}
        out |= {**self.context, "detector": self.detector}
        if self.params is not None:
            out["params"] = self.params
        out |= {"column": self.column, "metric": self.metric, "value": self.value, **self.extra}
        if self.dose is not None:
            out["dose"] = self.dose
        return out


def float_or_none(value: Any) -> float | None:
    """A value as JSON can hold it: a float, or None for NaN and for no value at all."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def metric_rows(
    metrics: Mapping[str, Any],
    column: str | None,
    *,
    detector: str | None = None,
    params: dict[str, Any] | None = None,
    context: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One row per metric of `metrics` (in its order), each value a float or None (`float_or_none`)."""
    return [
        Row(k, float_or_none(v), column, detector, params, context=dict(context or {})).as_dict()
        for k, v in metrics.items()
    ]


def side_row(side: str, metric: str, value: Any, **params: Any) -> dict[str, Any]:
    """A row of an evaluation that compares sides or groups (accuracy, mri, extraction, counterfactual):
    the side is its column, and `split` its first parameter. `value` is written as given."""
    return Row(metric, value, side, None, {"split": side, **params}).as_dict()
