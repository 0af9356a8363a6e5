"""Result rows are built in one place (`leaklab.rows`): their fields, order and JSON form are fixed there,
so a results.jsonl written before and after a change to an evaluation reads the same byte for byte."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import numpy as np

from leaklab.rows import Row, float_or_none, metric_rows, side_row

PACKAGE = Path(__file__).resolve().parents[1] / "leaklab"


def test_a_detector_row_has_the_fields_of_results_jsonl_in_their_order():
    rows = metric_rows({"auroc": np.float64(0.75), "tpr@1%fpr": math.nan}, "mink@k=0.2", detector="mink",
                       params={"k": 0.2})  # fmt: skip
    assert [json.dumps(r) for r in rows] == [
        '{"detector": "mink", "params": {"k": 0.2}, "column": "mink@k=0.2", "metric": "auroc", "value": 0.75}',
        '{"detector": "mink", "params": {"k": 0.2}, "column": "mink@k=0.2", "metric": "tpr@1%fpr", "value": null}',
    ]


def test_driver_fields_come_first_and_bookkeeping_after_the_value():
    row = Row(
        "done", 24.0, step=5, epoch=1.0, evaluation="detection", extra={"specs": ["ppl"], "seconds": 1.5}
    )
    assert json.dumps(row.as_dict()) == (
        '{"step": 5, "epoch": 1.0, "evaluation": "detection", "detector": null, "column": null, '
        '"metric": "done", "value": 24.0, "specs": ["ppl"], "seconds": 1.5}'
    )
    audit = metric_rows({"mean": 2}, "ppl", detector="ppl", params={}, context={"step": 0, "benchmark": "he"})
    assert list(audit[0]) == ["step", "benchmark", "detector", "params", "column", "metric", "value"]
    assert audit[0]["value"] == 2.0 and isinstance(audit[0]["value"], float)


def test_a_side_row_keeps_its_value_and_names_its_split():
    assert side_row("members", "pass@1", 1, k=1) == {
        "detector": None, "params": {"split": "members", "k": 1}, "column": "members", "metric": "pass@1", "value": 1,
    }  # fmt: skip
    assert list(Row("exposure", 3.0, "dose=2", None, {"split": "dose=2"}, dose=2).as_dict())[-1] == "dose"


def test_float_or_none():
    assert float_or_none(None) is None and float_or_none(float("nan")) is None
    assert float_or_none(np.float32(0.5)) == 0.5 and type(float_or_none(np.int64(3))) is float


def test_no_module_writes_a_result_row_by_hand():
    """A dict literal with both "metric" and "value" keys is a row built outside `leaklab.rows`."""
    by_hand = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "rows.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                fields = {k.value: v for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant)}
                # A schema that describes the fields (name -> (type, meaning)) is not a row.
                if {"metric", "value"} <= set(fields) and not isinstance(fields["value"], ast.Tuple):
                    by_hand.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert by_hand == []
