"""The embedded testbed does what the README promises: the full `tiny_cpt` recipe, as `make demo` runs it,
leaves the injected half of HumanEval measurably easier for the model than the held-out half.
Slow (a few minutes on 2 cores: it builds the real tiny model when it is not cached)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from leaklab.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(1500)  # the run itself is given 1200 s; a busy machine may need it
def test_tiny_cpt_shows_memorization(leaklab_cache, tmp_path):
    env = {**os.environ, "LEAKLAB_CACHE": leaklab_cache, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    out = subprocess.run(
        [
            sys.executable,
            "leaklab/train.py",
            "recipe=tiny_cpt",
            f"output_dir={tmp_path}",
            "tracking.wandb.enabled=false",
            # Score only what is asserted on: the training is the demo's, the evaluation is PPL alone.
            "evaluate.detectors=[ppl]",
            "evaluate.n_bootstrap=0",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    rows = RunDir(run_dir).results_rows()
    auroc = {r["step"]: r["value"] for r in rows if r.get("column") == "ppl" and r.get("metric") == "auroc"}
    steps = sorted(auroc)
    assert len(steps) == 9, "the base model and one checkpoint per epoch"
    assert abs(auroc[0] - 0.5) < 0.1, f"the untrained model cannot tell members apart: {auroc[0]:.3f}"
    assert auroc[steps[-1]] >= 0.8, f"PPL AUROC at the last epoch: {auroc[steps[-1]]:.3f}"
