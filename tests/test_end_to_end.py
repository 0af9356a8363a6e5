"""End to end on the builtin tiny model: train, evaluate each checkpoint, resume after a kill, two
processes under `accelerate launch`. Marked slow; CI runs them."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SMALL_RUN, free_port
from leaklab.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _env(cache: str) -> dict[str, str]:
    env = {**os.environ, "LEAKLAB_CACHE": cache, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    env.pop("WORLD_SIZE", None)
    return env


def _only_run_dir(root: Path) -> RunDir:
    (run,) = [p for p in root.iterdir() if p.is_dir()]
    return RunDir(run)


def _check_results(run: RunDir, expected_steps: list[int]) -> list[dict]:
    rows = run.results_rows()
    det = [r for r in rows if r["evaluation"] == "detection"]
    keys = collections.Counter((r["step"], r["column"], r["metric"]) for r in det)
    assert max(keys.values()) == 1, "a result row was written twice"
    assert sorted({r["step"] for r in det}) == expected_steps
    for step in expected_steps:
        done = [r for r in det if r["step"] == step and r["metric"] == "done"]
        assert len(done) == 1 and done[0]["value"] == 24
        scores = run.scores(step, "detection").read_text().splitlines()
        assert len(scores) == 24 and {json.loads(s)["label"] for s in scores} == {0, 1}
    # every line of results.jsonl is a complete JSON object
    for line in run.results.read_text().splitlines():
        json.loads(line)
    return det


def test_tiny_run_trains_evaluates_and_reports(leaklab_cache, tmp_path):
    out = subprocess.run(
        [sys.executable, "leaklab/train.py", "recipe=tiny_cpt", *SMALL_RUN, f"output_dir={tmp_path}"],
        cwd=REPO,
        env=_env(leaklab_cache),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    run = _only_run_dir(tmp_path)
    steps = [s for s, _ in run.checkpoint_dirs()]
    assert len(steps) == 2, "one checkpoint per epoch"
    det = _check_results(run, [0, *steps])
    assert {r["metric"] for r in det} >= {"auroc", "f1", "accuracy", "precision", "recall"}
    # Beside the detectors at every checkpoint: the blind baseline and dataset inference.
    for step in [0, *steps]:
        got = {(r["column"], r["metric"]) for r in det if r["step"] == step}
        assert {("blind", "auroc"), ("blind", "distribution_shift"), ("dataset_inference", "p_value")} <= got
    assert all(
        json.loads(s)["blind"] is not None for s in run.scores(0, "detection").read_text().splitlines()
    )
    assert "AUROC" in out.stdout and "| detector | step 0 |" in out.stdout and "| ppl | " in out.stdout
    assert str(run.root) in out.stdout
    assert (run.report / "report.md").exists() and (run.report / "detection_auroc.png").exists()
    manifest = json.loads(run.manifest.read_text())
    assert len(manifest["member_ids"]) == 12 and len(manifest["non_member_ids"]) == 12
    mixture = json.loads(run.mixture.read_text())
    assert abs(mixture["web_tokens"] / mixture["member_tokens"] - 2) < 0.2

    # Nothing is left to do: `leaklab evaluate` finds every checkpoint evaluated and adds no rows.
    before = run.results.read_text()
    again = subprocess.run(
        [sys.executable, "-m", "leaklab.cli", "evaluate", str(run.root)],
        cwd=REPO,
        env=_env(leaklab_cache),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert "already evaluated" in again.stdout
    assert run.results.read_text() == before

    # Drop the last checkpoint's results: `leaklab evaluate` loads that checkpoint from disk and scores
    # it again, with the same numbers as the in-training evaluation.
    last = steps[-1]
    kept = [line for line in before.splitlines(keepends=True) if json.loads(line)["step"] != last]
    run.results.write_text("".join(kept))
    again = subprocess.run(
        [sys.executable, "-m", "leaklab.cli", "evaluate", str(run.root)],
        cwd=REPO,
        env=_env(leaklab_cache),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"evaluating step {last}" in again.stdout
    rescored = {
        (r["column"], r["metric"]): r["value"] for r in _check_results(run, [0, *steps]) if r["step"] == last
    }
    original = {(r["column"], r["metric"]): r["value"] for r in det if r["step"] == last}
    assert rescored.keys() == original.keys()
    assert rescored[("ppl", "auroc")] == pytest.approx(original[("ppl", "auroc")], abs=1e-6)


def test_killed_run_resumes_without_duplicated_or_torn_rows(leaklab_cache, tmp_path):
    cmd = [
        sys.executable,
        "leaklab/train.py",
        "recipe=tiny_cpt",
        *SMALL_RUN,
        "train.epochs=3",
        f"output_dir={tmp_path}",
        # W&B on (offline, as by default): the resumed run must continue the same W&B run.
        "tracking.wandb.enabled=true",
        "tracking.wandb.mode=offline",
    ]
    env = _env(leaklab_cache)
    env.pop("WANDB_MODE")
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    # Kill it once the first checkpoint is on disk, i.e. in the middle of training.
    while time.time() < deadline and proc.poll() is None:
        runs = [p for p in tmp_path.iterdir() if p.is_dir()]
        if runs and RunDir(runs[0]).checkpoint_dirs():
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    run = _only_run_dir(tmp_path)
    assert len(run.checkpoint_dirs()) < 3

    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resuming from" in out.stdout
    steps = [s for s, _ in run.checkpoint_dirs()]
    assert len(steps) == 3
    _check_results(run, [0, *steps])
    run_id = (run.root / "wandb_id.txt").read_text().strip()
    # One live offline directory holds the whole history (tracking.py); the earlier ones are kept aside.
    offline_runs = sorted((run.root / "wandb").glob("offline-run-*"))
    assert len(offline_runs) == 1 and offline_runs[0].name.endswith(run_id)
    superseded = sorted((run.root / "wandb" / "superseded").glob("offline-run-*"))
    assert superseded and all(run_id in p.name for p in superseded)


def test_audit_scores_a_whole_benchmark_without_training(leaklab_cache, tmp_path):
    from conftest import SMALL_TINY

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "leaklab.cli",
            "audit",
            "model=builtin:tiny",
            "benchmark=humaneval",
            "detectors=[ppl,zlib]",
            "data.max_samples=20",
            f"output_dir={tmp_path}",
            *SMALL_TINY,
        ],
        cwd=REPO,
        env=_env(leaklab_cache),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    run = _only_run_dir(tmp_path)
    scores = [json.loads(line) for line in run.scores(0, "audit").read_text().splitlines()]
    assert len(scores) == 20 and all(s["ppl"] < 0 for s in scores)  # higher = member, so -PPL
    rows = {(r["column"], r["metric"]): r["value"] for r in run.results_rows()}
    assert rows[("ppl", "n")] == 20
    assert rows[("ppl", "mean")] == pytest.approx(sum(s["ppl"] for s in scores) / 20)
    assert (run.report / "audit_ppl.png").exists()
    # Neither a clean set nor a calibrated rule: the verdict says no test of membership was made.
    assert "no test of membership was made" in out.stdout
    assert (run.root / "verdict.md").read_text().startswith("Tested: ")


def test_two_cpu_processes_under_accelerate_write_results_once(leaklab_cache, tmp_path):
    env = {**_env(leaklab_cache), "ACCELERATE_USE_CPU": "1"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            "launch/cpu_ddp.yaml",
            "--main_process_port",
            str(free_port()),  # not the default 29500: another test's processes may hold it
            "leaklab/train.py",
            "recipe=tiny_cpt",
            *SMALL_RUN,
            f"output_dir={tmp_path}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    run = _only_run_dir(tmp_path)
    steps = [s for s, _ in run.checkpoint_dirs()]
    assert len(steps) == 2
    _check_results(run, [0, *steps])
    assert out.stdout.count("[leaklab] run directory:") == 1, "only the main process logs"
    assert out.stdout.count("\nrun directory:") == 1, "only the main process prints the summary"
