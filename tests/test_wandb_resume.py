"""A resumed offline run keeps its whole W&B history in one offline-run directory.

W&B writes a new offline directory on every start and `wandb sync` does not merge them, so tracking.start
moves the earlier ones aside and replays results.jsonl. The test reads the offline `.wandb` files back
with a small reader of their record log (wandb ships none).
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest

from leaklab import tracking
from leaklab.recipe import load_recipe
from leaklab.rundir import append_rows

wandb_pb = pytest.importorskip("wandb.proto.wandb_internal_pb2")

BLOCK, HEADER = 32768, 7  # the LevelDB log format W&B writes: 32 KiB blocks, 7-byte record headers


def wandb_records(path: Path):
    """The protobuf Records of one .wandb file (after its 7-byte ":W&B" file header)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, pending = 7, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # the rest of a block too small for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        pending = chunk if kind in (1, 2) else pending + chunk  # 1 full, 2 first, 3 middle, 4 last
        if kind in (1, 4):
            record = wandb_pb.Record()
            record.ParseFromString(pending)
            yield record


def complete_records(path: Path, wait_s: float = 60.0) -> list:
    """The records once the exit record is in the file: W&B's service may still be writing after finish()."""
    deadline = time.monotonic() + wait_s
    records = list(wandb_records(path))
    while not any(r.WhichOneof("record_type") == "exit" for r in records):
        assert time.monotonic() < deadline, f"{path} has no exit record after {wait_s}s"
        time.sleep(0.2)
        records = list(wandb_records(path))
    return records


def history(path: Path) -> list[dict]:
    return [
        {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item}
        for r in complete_records(path)
        if r.WhichOneof("record_type") == "history"
    ]


def rows(step: int) -> list[dict]:
    head = {"step": step, "epoch": float(step)}
    return [
        {
            **head,
            "evaluation": "training",
            "detector": None,
            "column": None,
            "metric": "loss",
            "value": 3.0 - step,
        },
        {
            **head,
            "evaluation": "detection",
            "detector": "ppl",
            "params": {},
            "column": "ppl",
            "metric": "auroc",
            "value": 0.5 + step / 10,
        },
    ]


def segment(recipe, run_dir: Path, step: int) -> None:
    """One process's life: start (or resume), write and log one step's rows, finish."""
    tracking.start(recipe, run_dir)
    append_rows(run_dir / "results.jsonl", rows(step))
    tracking.log_metrics({"train/loss": 3.0 - step}, step)  # what the Trainer's callback logs live
    tracking.log_rows(rows(step)[1:])
    tracking.finish()


def test_resumed_offline_run_holds_every_step_in_one_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    recipe = load_recipe("tiny_cpt", ["tracking.wandb.mode=offline"])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for step in (1, 2, 3):  # a first start and two resumes
        segment(recipe, run_dir, step)

    live = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(live) == 1, live
    assert len(list((run_dir / "wandb" / "superseded").glob("offline-run-*"))) == 2  # kept, not synced
    logged = history(next(live[0].glob("*.wandb")))
    loss = {h["train/global_step"]: h["train/loss"] for h in logged if "train/loss" in h}
    auroc = {h["train/global_step"]: h["detection/ppl/auroc"] for h in logged if "detection/ppl/auroc" in h}
    assert loss == {1: 2.0, 2: 1.0, 3: 0.0}
    assert auroc == pytest.approx({1: 0.6, 2: 0.7, 3: 0.8})
