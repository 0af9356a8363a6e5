"""The report's picture in W&B, offline: per-sample scores as a Table, a ROC curve and score histograms
per checkpoint, metric curves with their intervals, the summary (best detector, detection delays), the
report as an artifact, the sweep's group. Read back from the offline run's files."""

from __future__ import annotations

import json

from test_report import make_run

from leaklab import tracking
from leaklab.recipe import load_recipe
from leaklab.rundir import read_rows


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
        tracking.publish_report(run)
    finally:
        tracking.finish()
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
    record = next(offline.glob("run-*.wandb")).read_bytes()
    assert b"sweep-a" in record  # the group
    assert b"report-" in record and b"index.html" in record  # the report artifact
    assert b"detection/best_detector" in record and b"detection/ppl/scores_members" in record
    assert (run / "report" / "index.html").exists()
