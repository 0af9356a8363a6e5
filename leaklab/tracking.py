"""Experiment tracking: W&B (offline unless the recipe says otherwise) next to the local files.

The local files (`results.jsonl`, `scores/`) are the record; W&B is a view of them. Runs are offline by
default so nothing reaches the network; `wandb sync <run>/wandb/offline-run-*` uploads them later.
The W&B run id is kept in the run directory, so a resumed run continues the same W&B run. Metrics are
logged against `train/global_step`, the same step axis the HF Trainer uses for the training loss.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from leaklab.recipe import Recipe, to_dict

_run = None


def start(recipe: Recipe, run_dir: Path, is_main_process: bool = True):
    """Start (or resume) the W&B run for this run directory; returns it, or None when disabled."""
    global _run
    cfg = recipe.tracking.wandb
    if not is_main_process or not cfg.enabled or cfg.mode == "disabled":
        os.environ["WANDB_DISABLED"] = "true"
        return None
    try:
        import wandb
    except ImportError:
        return None
    os.environ.setdefault("WANDB_SILENT", "true")
    id_file = run_dir / "wandb_id.txt"
    run_id = id_file.read_text().strip() if id_file.exists() else _new_run_id()
    id_file.write_text(run_id + "\n")
    _run = wandb.init(
        project=cfg.project,
        entity=cfg.entity,
        name=run_dir.name,
        id=run_id,
        resume="allow",
        dir=str(run_dir),
        mode=cfg.mode,
        config=to_dict(recipe),
    )
    _run.define_metric("train/global_step")
    _run.define_metric("*", step_metric="train/global_step", step_sync=True)
    return _run


def _new_run_id() -> str:
    """W&B run ids are short lowercase alphanumerics; make one here rather than rely on wandb internals."""
    import secrets
    import string

    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def log_metrics(metrics: dict[str, Any], step: int) -> None:
    if _run is None:
        return
    clean = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and v == v}
    _run.log({**clean, "train/global_step": step})


def log_rows(rows: list[dict[str, Any]]) -> None:
    """Result rows as W&B metrics named <evaluation>/<column>/<metric> (column: e.g. "mink@0.2")."""
    by_step: dict[int, dict[str, Any]] = {}
    for row in rows:
        column = row.get("column") or row.get("detector")
        if row.get("value") is None or column is None:
            continue
        key = f"{row['evaluation']}/{column}/{row['metric']}"
        by_step.setdefault(row["step"], {})[key] = row["value"]
    for step, metrics in sorted(by_step.items()):
        log_metrics(metrics, step)


def finish() -> None:
    global _run
    if _run is not None:
        _run.finish()
        _run = None
