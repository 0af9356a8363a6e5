"""The embedded testbed does what the README promises: the full `tiny_cpt` recipe, as `make demo` runs it,
leaves the injected half of HumanEval measurably easier for the model than the held-out half.

That check costs about 11 minutes on one CPU thread (6 of them to build the real tiny model in the test
session's fresh cache), so it is marked `full`: `make test-full` runs it, `make test` does not. `make test`
runs the same recipe on the small tiny model the other end-to-end tests build (half a minute): weaker
numbers, the same claim, that training on the members is what separates them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SMALL_TINY
from leaklab.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]


def _train_tiny_cpt(cache: str, out_dir: Path, *overrides: str, timeout: int) -> list[dict]:
    """`tiny_cpt` with the overrides, evaluated with PPL alone (all that is asserted on); its result rows."""
    env = {**os.environ, "LEAKLAB_CACHE": cache, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    cmd = [sys.executable, "leaklab/train.py", "recipe=tiny_cpt", *overrides, f"output_dir={out_dir}"]
    cmd += ["tracking.wandb.enabled=false", "evaluate.detectors=[ppl]"]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    (run_dir,) = [p for p in out_dir.iterdir() if p.is_dir()]
    return RunDir(run_dir).results_rows()


def _ppl(rows: list[dict], metric: str) -> dict[int, float]:
    return {r["step"]: r["value"] for r in rows if r.get("column") == "ppl" and r.get("metric") == metric}


@pytest.mark.slow
def test_a_small_tiny_cpt_run_already_separates_the_members(leaklab_cache, tmp_path):
    rows = _train_tiny_cpt(
        leaklab_cache,
        tmp_path,
        *SMALL_TINY,
        # All of HumanEval (82 members, 82 non-members), as the demo; shorter windows and more of the
        # members per block than the demo, so the small model learns them in 4 epochs.
        "train.epochs=4",
        "mix.ratio=1:1",
        "mix.max_seq_len=256",
        "evaluate.n_bootstrap=200",
        timeout=600,
    )
    auroc, low = _ppl(rows, "auroc"), _ppl(rows, "auroc_ci_low")
    steps = sorted(auroc)
    assert len(steps) == 5, "the base model and one checkpoint per epoch"
    first, last = auroc[steps[0]], auroc[steps[-1]]
    # Measured on one thread when this test was written: 0.560 at step 0, 0.707 [0.63, 0.78] at epoch 4.
    assert abs(first - 0.5) < 0.1, f"the untrained model cannot tell members apart: {first:.3f}"
    assert last >= 0.65 and low[steps[-1]] > 0.5, f"PPL AUROC at the last epoch: {last:.3f}"
    assert last - first >= 0.1, f"training on the members moved PPL AUROC only {first:.3f} -> {last:.3f}"


@pytest.mark.full
@pytest.mark.timeout(1500)  # the run itself is given 1200 s; a busy machine may need it
def test_tiny_cpt_shows_memorization(leaklab_cache, tmp_path):
    # The demo's training as it is; no bootstrap (nothing here reads an interval).
    auroc = _ppl(_train_tiny_cpt(leaklab_cache, tmp_path, "evaluate.n_bootstrap=0", timeout=1200), "auroc")
    steps = sorted(auroc)
    assert len(steps) == 9, "the base model and one checkpoint per epoch"
    assert abs(auroc[0] - 0.5) < 0.1, f"the untrained model cannot tell members apart: {auroc[0]:.3f}"
    assert auroc[steps[-1]] >= 0.8, f"PPL AUROC at the last epoch: {auroc[steps[-1]]:.3f}"
