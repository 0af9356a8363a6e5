"""The report's picture in W&B, offline: per-sample scores as a Table, a ROC curve and score histograms
per checkpoint, metric curves with their intervals, the summary (best detector, detection delays), the
report as an artifact, the sweep's group. Read back from the offline run's files."""

from __future__ import annotations

import json
import time

from test_report import make_run
from test_wandb_resume import wandb_records

from leaklab import tracking
from leaklab.recipe import load_recipe
from leaklab.rundir import read_rows


def _complete_records(path, wait_s: float = 60.0) -> list:
    """The records of an offline run once its exit record is there: W&B's service process may still be
    writing the file when `finish()` returns."""
    deadline = time.monotonic() + wait_s
    while True:
        records = list(wandb_records(path))
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.5)


def test_detection_summary_by_hand():
    rows = []
    for step, (a, a_low, b, b_low) in {0: (0.5, 0.4, 0.6, 0.45), 10: (0.7, 0.55, 0.9, 0.81)}.items():
        for column, value, low in (("a", a, a_low), ("b", b, b_low)):
            base = {"step": step, "evaluation": "detection", "column": column}
            rows += [
                {**base, "metric": "auroc", "value": value},
                {**base, "metric": "auroc_ci_low", "value": low},
            ]
    summary = tracking.detection_summary(rows)
    assert summary["detection/best_detector"] == "b" and summary["detection/best_auroc"] == 0.9
    assert summary["detection/best_auroc_ci_low"] == 0.81
    assert summary["detection/delay_above_0.5/a"] == 10 and summary["detection/delay_above_0.8/a"] == -1
    assert summary["detection/delay_above_0.8/b"] == 10
    assert tracking.detection_summary([]) == {}


def test_offline_run_holds_tables_roc_intervals_and_the_report(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    run = make_run(tmp_path / "run")
    recipe = load_recipe("tiny_cpt", ["tracking.wandb.mode=offline", "tracking.wandb.group=sweep-a"])
    assert tracking.start(recipe, run) is not None
    try:
        tracking.log_checkpoint("detection", read_rows(run / "scores" / "step-16" / "detection.jsonl"), 16)
        index = tracking.publish_report(run)
    finally:
        tracking.finish()
    assert index == run / "report" / "index.html" and index.exists()
    # the run's summary reuses the report built for W&B instead of building it a second time
    from leaklab import report as report_module
    from leaklab.rundir import RunDir

    monkeypatch.setattr(
        report_module, "build_report", lambda *a: (_ for _ in ()).throw(AssertionError("rebuilt"))
    )
    report_module.print_summary(RunDir(run), index)
    (offline,) = (run / "wandb").glob("offline-run-*")
    tables = offline / "files" / "media" / "table" / "detection"
    (samples,) = tables.glob("samples_*.table.json")
    data = json.loads(samples.read_text())
    assert len(data["data"]) == 20 and {"task_id", "label", "ppl"} <= set(data["columns"])
    (roc,) = tables.glob("roc_table_*.table.json")
    roc_rows = json.loads(roc.read_text())["data"]
    assert {r[0] for r in roc_rows} == {
        "ppl",
        "zlib",
        "mink@0.2",
        "srdetection_gray@n=1",
        "srdetection_gray@n=10",
    }
    interval = next((tables / "ppl").glob("auroc_with_interval_*.table.json"))
    values = json.loads(interval.read_text())["data"]
    # line_series rows: (step, key, value); ppl's AUROC at step 16 is 0.9 with [0.75, 1.0]
    at_16 = {r[1]: r[2] for r in values if r[0] == 16}
    assert at_16 == {"auroc": 0.9, "auroc_ci_low": 0.75, "auroc_ci_high": 1.0}
    records = _complete_records(next(offline.glob("run-*.wandb")))
    by_kind = {}
    for r in records:
        by_kind.setdefault(r.WhichOneof("record_type"), []).append(r)
    assert by_kind["run"][0].run.run_group == "sweep-a"
    (report,) = [r.artifact for r in by_kind["artifact"] if r.artifact.type == "report"]
    assert "index.html" in {c.path for c in report.manifest.contents}
    summary = {i.key or i.nested_key[0]: i.value_json for r in by_kind["summary"] for i in r.summary.update}
    assert json.loads(summary["detection/best_detector"]) in {c for c in ("ppl", "zlib", "mink@0.2")}
    assert json.loads(summary["detection/delay_above_0.5/ppl"]) == 8  # AUROC interval [0.55, 0.85] at step 8
    # A logged object (histogram, table) is stored as nested keys: its name, then its fields.
    logged = {i.key or i.nested_key[0] for r in by_kind["history"] for i in r.history.item}
    # wandb.plot.line logs its data as <key>_table (the chart spec goes with the run)
    assert {
        "detection/ppl/scores_members",
        "detection/ppl/scores_non_members",
        "detection/roc_table",
    } <= logged
    assert (run / "report" / "index.html").exists()


def test_a_failing_publish_is_one_line_not_a_failed_run(tmp_path, monkeypatch, capsys):
    class Broken:
        class summary:  # noqa: N801 - stands in for wandb's run.summary
            @staticmethod
            def update(_):
                raise ConnectionError("no route to host")

    monkeypatch.setattr(tracking, "_run", Broken())
    tracking.publish_report(make_run(tmp_path / "run"))
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ["[leaklab] W&B: report not published (ConnectionError: no route to host)"]
