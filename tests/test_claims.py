"""Evaluate workers sharing a run (leaklab/claims.py): claims, heartbeats, takeover, and several
`leaklab evaluate` processes on one run writing exactly the rows one worker writes."""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SMALL_RUN
from leaklab import claims
from leaklab.rundir import RunDir, append_rows, read_rows

REPO = Path(__file__).resolve().parents[1]


def _fake_claim(path: Path, age_s: float, token: str = "dead-worker") -> None:
    """A claim file left by a worker whose last heartbeat was `age_s` ago."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"token": token, "host": "gone", "pid": 1}) + "\n")
    old = time.time() - age_s
    os.utime(path, (old, old))


def test_a_claim_is_exclusive_and_released(tmp_path):
    path = claims.claim_path(tmp_path, 5, "detection")
    first = claims.try_claim(path)
    assert first is not None and path.exists()
    assert claims.try_claim(path) is None  # held by a live worker
    first.release()
    assert not path.exists()
    again = claims.try_claim(path)
    assert again is not None
    again.release()


def test_a_stale_claim_is_taken_over_and_a_fresh_one_is_not(tmp_path):
    logs: list[str] = []
    path = claims.claim_path(tmp_path, 5, "detection")
    _fake_claim(path, age_s=30)
    assert claims.try_claim(path, stale_s=60, log=logs.append) is None  # heartbeat 30 s old: alive
    _fake_claim(path, age_s=120)
    taken = claims.try_claim(path, stale_s=60, log=logs.append)
    assert taken is not None and taken.still_mine()
    assert json.loads(path.read_text())["token"] == taken.token
    assert any("taking over" in line and "gone" in line for line in logs)
    # The new holder's claim is fresh: a third worker leaves it alone.
    assert claims.try_claim(path, stale_s=60) is None
    taken.release()


def test_the_heartbeat_keeps_a_claim_alive(tmp_path):
    path = claims.claim_path(tmp_path, 0, "detection")
    claim = claims.try_claim(path, heartbeat_s=0.05)
    old = time.time() - 1000
    os.utime(path, (old, old))  # as if the holder had been silent for a long time...
    time.sleep(0.3)  # ...the heartbeat thread touches it again
    assert not claims.is_stale(path, stale_s=10)
    claim.release()


def test_a_holder_judged_dead_does_not_remove_its_successors_claim(tmp_path):
    path = claims.claim_path(tmp_path, 0, "detection")
    slow = claims.try_claim(path, heartbeat_s=3600)
    old = time.time() - 1000
    os.utime(path, (old, old))
    successor = claims.try_claim(path, stale_s=60, log=lambda *_: None)
    assert successor is not None and not slow.still_mine()
    slow.release()
    assert path.exists() and successor.still_mine()
    successor.release()


def test_concurrent_appends_write_each_row_once(tmp_path):
    """Processes appending overlapping batches to one file: every row once, none torn."""
    results = tmp_path / "results.jsonl"
    script = (
        "import sys; from leaklab.rundir import append_rows\n"
        "for i in range(40):\n"
        "    append_rows(sys.argv[1], [{'step': i, 'evaluation': 'e', 'column': c, 'metric': 'm',"
        " 'value': 'x' * 2000} for c in range(20)])\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(results)]) for _ in range(3)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    rows = read_rows(results)
    keys = collections.Counter((r["step"], r["column"]) for r in rows)
    assert len(keys) == 40 * 20 and max(keys.values()) == 1
    assert len(results.read_text().splitlines()) == 800
    assert append_rows(results, [rows[0]]) == 0


def test_the_slurm_evaluate_script_runs_one_worker_per_array_task():
    script = REPO / "launch" / "slurm_evaluate.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    lines = script.read_text().splitlines()
    assert "#SBATCH --gpus-per-node=1" in lines
    assert lines[-1] == 'leaklab evaluate "$RUN_DIR"'


# --------------------------------------------------------------------------- workers on one run


def _env(cache: str) -> dict[str, str]:
    env = {**os.environ, "LEAKLAB_CACHE": cache, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    env.pop("WORLD_SIZE", None)
    return env


def _comparable(rows: list[dict]) -> collections.Counter:
    """Rows as a multiset, without what differs between workers: timing rows and wall-time fields."""
    out = collections.Counter()
    for row in rows:
        if row.get("evaluation") in ("timing", "training"):
            continue
        out[json.dumps({k: v for k, v in row.items() if k != "seconds"}, sort_keys=True)] += 1
    return out


@pytest.mark.slow
def test_three_workers_share_a_run_and_write_what_one_worker_writes(leaklab_cache, tmp_path):
    env = _env(leaklab_cache)
    train = subprocess.run(
        [
            sys.executable,
            "leaklab/train.py",
            "recipe=tiny_cpt",
            *SMALL_RUN,
            "evaluate.detectors=[ppl,zlib]",
            "evaluate.during_training=false",
            f"output_dir={tmp_path / 'runs'}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert train.returncode == 0, train.stderr[-3000:]
    assert "evaluate.during_training is false" in train.stdout
    (root,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    run = RunDir(root)
    steps = [0, *(s for s, _ in run.checkpoint_dirs())]
    assert len(steps) == 3
    # Training saved checkpoints and its loss, nothing else.
    assert {r["evaluation"] for r in run.results_rows()} == {"training"}

    single = RunDir(tmp_path / "single")
    shutil.copytree(root, single.root)
    one = subprocess.run(
        [sys.executable, "-m", "leaklab.cli", "evaluate", str(single.root)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert one.returncode == 0, one.stderr[-3000:]

    # A worker that died an hour ago holding the last checkpoint's claim: the others must take it over.
    _fake_claim(claims.claim_path(root, steps[-1], "detection"), age_s=3600)
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "leaklab.cli", "evaluate", str(root)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [w.communicate(timeout=600) for w in workers]
    for w, (_, err) in zip(workers, outputs, strict=True):
        assert w.returncode == 0, err[-3000:]
    assert (
        sum("taking over the claim of gone" in err for _, err in outputs)
        + sum("taking over the claim of gone" in out for out, _ in outputs)
        == 1
    )
    # Each checkpoint was loaded and evaluated by exactly one worker.
    evaluated = [
        line for out, _ in outputs for line in out.splitlines() if line.startswith("evaluating step")
    ]
    assert sorted(int(line.split()[2]) for line in evaluated) == steps

    rows = run.results_rows()
    keys = collections.Counter((r["step"], r["evaluation"], r.get("column"), r["metric"]) for r in rows)
    assert max(keys.values()) == 1, "a row was written twice"
    assert len(run.results.read_text().splitlines()) == len(rows)  # no torn or unparseable line
    assert _comparable(rows) == _comparable(single.results_rows())
    for step in steps:
        assert run.scores(step, "detection").read_text() == single.scores(step, "detection").read_text()
    assert not list(claims.claims_dir(root).glob("*.claim")), "a claim was left behind"
