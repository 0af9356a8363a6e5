"""Experiment tracking: W&B (offline unless the recipe says otherwise) next to the local files.

The local files (results.jsonl, scores/) are the record; W&B is a view of them, logged against
`train/global_step` like the Trainer's loss, under a run id kept in the run directory. Offline W&B
cannot resume (every start is a new `offline-run-*` from _step 0, and `wandb sync` does not merge them:
wandb/wandb#3841), so a resumed offline run moves its earlier directories to wandb/superseded/ and
replays results.jsonl into the new one, which then holds the whole history.
"""

from __future__ import annotations

import math
import os
import secrets
import string
import tempfile
from pathlib import Path
from typing import Any

from leaklab.metrics import roc_curve
from leaklab.recipe import Recipe, to_dict
from leaklab.report import build_report
from leaklab.results import DELAY_LEVELS, column_of, detection_delays, detection_rows
from leaklab.rundir import read_rows

_run = None


def start(recipe: Recipe, run_dir: Path, is_main_process: bool = True):
    """Start (or resume) the W&B run for this run directory; returns it, or None when disabled."""
    global _run
    cfg = recipe.tracking.wandb
    if not is_main_process or not cfg.enabled or cfg.mode == "disabled":
        os.environ["WANDB_DISABLED"] = "true"
        return None
    import wandb

    os.environ.setdefault("WANDB_SILENT", "true")
    id_file = run_dir / "wandb_id.txt"
    alphabet = string.ascii_lowercase + string.digits  # W&B's run ids: short lowercase alphanumerics
    if not id_file.exists():
        id_file.write_text("".join(secrets.choice(alphabet) for _ in range(8)) + "\n")
    run_id = id_file.read_text().strip()
    earlier = _supersede_offline_runs(run_dir, run_id) if cfg.mode == "offline" else []
    _run = wandb.init(
        project=cfg.project,
        entity=cfg.entity,
        name=run_dir.name,
        id=run_id,
        resume="allow",
        dir=str(run_dir),
        mode=cfg.mode,
        group=cfg.group,  # the runs of one sweep side by side
        config=to_dict(recipe),
    )
    _run.define_metric("train/global_step")
    _run.define_metric("*", step_metric="train/global_step", step_sync=True)
    if earlier:
        _replay(run_dir / "results.jsonl")
    return _run


def _supersede_offline_runs(run_dir: Path, run_id: str) -> list[Path]:
    """Move this run's earlier offline directories to wandb/superseded/; the moved paths."""
    moved = []
    superseded = run_dir / "wandb" / "superseded"
    for old in sorted((run_dir / "wandb").glob(f"offline-run-*-{run_id}*")):
        superseded.mkdir(parents=True, exist_ok=True)
        target, n = superseded / old.name, 1
        while target.exists():  # two starts within one second get the same directory name
            target, n = superseded / f"{old.name}.{n}", n + 1
        moved.append(old.rename(target))
    return moved


def _replay(results: Path) -> None:
    """Every row already in results.jsonl, logged again as the live run logged it."""
    rows = read_rows(results)
    training: dict[int, dict[str, Any]] = {}
    for row in rows:
        if row.get("evaluation") == "training" and row.get("value") is not None:
            # The HF Trainer's W&B callback names its logs train/<key>.
            training.setdefault(row["step"], {})[f"train/{row['metric']}"] = row["value"]
    for step, metrics in sorted(training.items()):
        log_metrics(metrics, step)
    log_rows([r for r in rows if r.get("evaluation") != "training"])


def log_metrics(metrics: dict[str, Any], step: int) -> None:
    if _run is None:
        return
    clean = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and v == v}
    _run.log({**clean, "train/global_step": step})


def log_rows(rows: list[dict[str, Any]]) -> None:
    """Result rows as W&B metrics <evaluation>/[dose=d/][form=f/][<column>/]<metric> (done markers are
    bookkeeping, not curves), and the dose–response chart (`log_dose_response`)."""
    by_step: dict[int, dict[str, Any]] = {}
    for row in rows:
        column = row.get("column") or row.get("detector")
        if row.get("value") is None or row.get("metric") == "done":
            continue
        name = f"{column}/{row['metric']}" if column is not None else row["metric"]
        if "dose" in row:  # one exposure dose group's row, beside the all-members curve
            name = f"dose={row['dose']}/{name}"
        if "form" in row:  # one form group's row (inject.form: rephrased)
            name = f"form={row['form']}/{name}"
        key = f"{row['evaluation']}/{name}"
        by_step.setdefault(row["step"], {})[key] = row["value"]
    for step, metrics in sorted(by_step.items()):
        log_metrics(metrics, step)
    log_dose_response(rows)


def _number(value) -> float:
    """A table cell's number: NaN, not None, for a missing value (W&B fixes a column's type from its
    first row)."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else math.nan


def log_dose_response(rows: list[dict[str, Any]]) -> None:
    """The report's dose–response panel at every step with per-dose detection rows: AUROC against
    log2(dose), one line per detector (W&B's line preset has no log scale; doses 1, 4, 16, 64 should sit
    evenly apart)."""
    if _run is None:
        return
    import wandb

    from leaklab.results import dose_table, ordered

    for step, by_column in sorted(dose_table(rows).items()):
        table = wandb.Table(
            columns=["detector", "dose", "log2_dose", "auroc", "auroc_ci_low", "auroc_ci_high"]
        )
        for column in ordered(by_column):
            for dose, metrics in sorted(by_column[column].items()):
                if math.isnan(_number(metrics.get("auroc"))):
                    continue
                table.add_data(
                    column,
                    dose,
                    math.log2(dose),
                    *(_number(metrics.get(k)) for k in ("auroc", "auroc_ci_low", "auroc_ci_high")),
                )
        if table.data:
            chart = wandb.plot.line(
                table,
                "log2_dose",
                "auroc",
                stroke="detector",
                title=f"AUROC against log2(dose) at step {step}",
            )
            _run.log({"detection/dose_response": chart, "train/global_step": step})


def finish() -> None:
    global _run
    if _run is not None:
        _run.finish()
        _run = None


def log_leaderboard(board: dict[str, Any], root: Path, cfg) -> Path | None:
    """A study's leaderboard (per cell and detector) and findings as two tables in a W&B run of its own in
    the study folder; returns the run's directory, or None when `cfg` (tracking.wandb) turns W&B off."""
    if not cfg.enabled or cfg.mode == "disabled":
        return None
    import wandb

    metrics = ("auroc", "auroc_ci_low", "auroc_ci_high", "tpr@1%fpr", "tpr@1%fpr_ci_low", "tpr@1%fpr_ci_high")
    cells = wandb.Table(columns=["cell", "detector", *metrics])
    for cell, by_column in board["table"].items():
        for column, stats in by_column.items():
            cells.add_data(cell, column, *(_number(stats.get(m)) for m in metrics))
    findings = wandb.Table(columns=["id", "claim", "value", "ci_low", "ci_high", "verdict"])
    for f in board.get("findings") or []:
        findings.add_data(
            f["id"],
            f.get("claim") or "",
            *(_number(f.get(k)) for k in ("value", "ci_low", "ci_high")),
            f["verdict"],
        )
    os.environ.setdefault("WANDB_SILENT", "true")
    run = wandb.init(
        project=cfg.project, entity=cfg.entity, name=f"{board['study']}-leaderboard", dir=str(root),
        mode=cfg.mode, group=cfg.group, job_type="leaderboard",
    )  # fmt: skip
    try:
        run.log({"leaderboard": cells, "findings": findings})
        return Path(run.dir).parent
    finally:
        run.finish()


# --------------------------------------------------------------------------- the report's picture in W&B

HEADLINE = ("auroc", "tpr@1%fpr", "f1")


def _flat(record: dict[str, Any]) -> dict[str, Any]:
    """A record as table cells: nested dicts become `field.key` columns and lists one text cell, since
    W&B fixes a column's type from its first row (a nested None there rejects every later number)."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        elif isinstance(value, (list, tuple)):
            out[key] = ", ".join(map(str, value))
        else:
            out[key] = value
    return out


def log_checkpoint(evaluation: str, records: list[dict[str, Any]], step: int) -> None:
    """One checkpoint's per-sample records: a W&B Table of them and, for detection, a ROC curve of
    every score column and its member / non-member score histograms."""
    if _run is None or not records:
        return

    import numpy as np
    import wandb

    fields = list(dict.fromkeys(k for r in records for k in r))
    flat = [_flat(r) for r in records]
    columns = list(dict.fromkeys(k for r in flat for k in r))
    payload: dict[str, Any] = {
        f"{evaluation}/samples": wandb.Table(
            columns=columns, data=[[r.get(c) for c in columns] for r in flat]
        )
    }
    labels = np.array([r.get("label") if r.get("label") in (0, 1) else -1 for r in records])
    if evaluation == "detection" and {0, 1} <= set(labels.tolist()):
        roc = wandb.Table(columns=["detector", "fpr", "tpr"])
        for column in fields:
            if column in ("task_id", "label") or column.endswith(":leak"):
                continue
            scores = np.array([_number(r.get(column)) for r in records])
            keep = (labels >= 0) & np.isfinite(scores)
            if not keep.any():
                continue
            for f, t in zip(*roc_curve(scores[keep], labels[keep])):
                roc.add_data(column, float(f), float(t))
            for label, name in ((1, "members"), (0, "non_members")):
                chosen = scores[keep & (labels == label)]
                if len(chosen):
                    payload[f"detection/{column}/scores_{name}"] = wandb.Histogram(
                        chosen.tolist(), num_bins=20
                    )
        payload["detection/roc"] = wandb.plot.line(
            roc, "fpr", "tpr", stroke="detector", title=f"ROC at step {step}"
        )

    # The counterfactual figures (target vs reference scatter, delta vs target BLEU, the metric
    # correlation heatmap) as images; W&B copies them when they are logged, so a temporary folder does.
    with tempfile.TemporaryDirectory() as figures:
        if evaluation == "counterfactual" and isinstance(records[0].get("target"), dict):
            from leaklab.memorization.counterfactual import plots

            for path in plots(records, figures):
                payload[f"counterfactual/{path.stem}"] = wandb.Image(str(path))
        _run.log({**payload, "train/global_step": step})


def detection_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The W&B summary of a run's detection: the detector with the highest AUROC at the last checkpoint
    (with its interval) and each detector's detection delay (`results.detection_delays`: first step whose
    AUROC interval lies above 0.5 and above 0.8, threshold-free evidence only; -1: never)."""
    det = detection_rows(rows)
    steps = sorted({r["step"] for r in det})
    if not steps:
        return {}
    last = [r for r in det if r["step"] == steps[-1]]
    auroc = {column_of(r): r["value"] for r in last if r["metric"] == "auroc" and r.get("value") is not None}
    auroc.pop("blind", None)  # the blind baseline is a reference that never sees the model, not a contender
    out: dict[str, Any] = {"detection/last_step": steps[-1]}
    if auroc:
        best = max(auroc, key=auroc.get)
        out |= {"detection/best_detector": best, "detection/best_auroc": auroc[best]}
        for r in last:
            if column_of(r) == best and r["metric"] in ("auroc_ci_low", "auroc_ci_high"):
                out[f"detection/best_{r['metric']}"] = r["value"]
    for column, firsts in detection_delays(det).items():
        for level, first in zip(DELAY_LEVELS, firsts):
            out[f"detection/delay_above_{level}/{column}"] = -1 if first is None else first
    return out


def publish_report(run_dir: Path) -> Path | None:
    """Into the open W&B run: the detection summary, each headline metric per detector with its interval
    against the step, and report/ as an artifact; returns the report's index.html when built here. W&B is
    a view of the run's files: a failure here is one line and never fails the run."""
    if _run is None:
        return None
    try:
        return _publish(run_dir)
    except Exception as err:  # noqa: BLE001 - the record is on disk; the view is best effort
        print(f"[leaklab] W&B: report not published ({type(err).__name__}: {err})")
        return None


def _publish(run_dir: Path) -> Path:
    import wandb

    rows = read_rows(Path(run_dir) / "results.jsonl")
    _run.summary.update(detection_summary(rows))
    det = detection_rows(rows)
    charts = {}
    for metric in HEADLINE:
        names = (metric, f"{metric}_ci_low", f"{metric}_ci_high")
        series: dict[str, dict[str, dict[int, float]]] = {}
        for r in det:
            if r["metric"] in names and r.get("value") is not None:
                series.setdefault(column_of(r), {}).setdefault(r["metric"], {})[r["step"]] = r["value"]
        for column, parts in series.items():
            steps = sorted(parts.get(metric, {}))
            if not steps:
                continue
            keys = [k for k in names if k in parts]
            ys = [[parts[k].get(s, float("nan")) for s in steps] for k in keys]
            charts[f"detection/{column}/{metric}_with_interval"] = wandb.plot.line_series(
                xs=steps, ys=ys, keys=keys, title=f"{column}: {metric} with its 95% interval", xname="step"
            )
    if charts:
        _run.log({**charts, "train/global_step": max(r["step"] for r in det)})
    index = build_report(run_dir)
    artifact = wandb.Artifact(f"report-{_run.id}", type="report", description="leaklab report (index.html)")
    artifact.add_dir(str(index.parent))
    _run.log_artifact(artifact)
    return index
