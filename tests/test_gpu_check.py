"""`bench/gpu_check.py` (make gpu-check) on the CPU at its smoke size, so the GPU check cannot rot
between GPU runs; and its refusal of a model that does not fit the card."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SECTIONS = (
    "cpt_lora_tiny",
    "full_weights_tiny",
    "scoring_tiny",
    "generation_tiny",
    "grpo_tiny",
    "numerics_tiny",
    "srdetection",
)


def _run(args: list[str], cache: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LEAKLAB_CACHE": cache, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    return subprocess.run(
        [sys.executable, "bench/gpu_check.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_a_model_that_does_not_fit_is_refused_with_its_estimated_memory(leaklab_cache):
    out = _run(["--smoke", "--sizes", "7b", "--card-memory-gib", "16"], leaklab_cache)
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert "Qwen2.5-7B" in line and "needs about" in line and "GiB" in line and "16 GiB" in line


def test_an_unknown_size_is_refused(leaklab_cache):
    out = _run(["--smoke", "--sizes", "13b"], leaklab_cache)
    assert out.returncode != 0 and "13b" in out.stderr and "0.5b" in out.stderr


@pytest.mark.slow
def test_smoke_run_measures_every_section_and_ends_with_one_json_line(leaklab_cache):
    out = _run(["--smoke"], leaklab_cache)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["bench"] == "gpu_check" and report["smoke"] is True
    assert set(report["sections"]) == set(SECTIONS)
    for name, row in report["sections"].items():
        # Every library is installed here: every section must run, so a broken path fails this test.
        assert row["status"] == "ok", (name, row["status"])
    assert report["sections"]["cpt_lora_tiny"]["tokens_per_s"] > 0
    assert report["sections"]["scoring_tiny"]["ratio_vs_bare"] > 0
    assert report["sections"]["generation_tiny"]["engine_tokens_per_s"] > 0
    assert report["sections"]["grpo_tiny"]["completions_per_s"] > 0
    spearman = {k: v for k, v in report["sections"]["numerics_tiny"].items() if k.startswith("spearman_")}
    assert {"spearman_ppl", "spearman_minkpp@0.2", "spearman_dcpdd", "spearman_ref"} <= set(spearman)
    assert set(report["targets"]) == {"cpt_lora_7b_mfu", "scoring_ratio_vs_bare", "srdetection_projected_min"}
    assert all(t["pass"] is None for t in report["targets"].values())  # no verdict at smoke sizes


def _render(kind: str) -> str:
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "bench" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.render(json.loads(module.RECORD.read_text()), kind)


@pytest.mark.parametrize("page", ["README.md", "docs/scaling.md"])
def test_the_gpu_tables_in_the_docs_are_rendered_from_the_recorded_runs(page):
    """Each `<!-- gpu_check --render KIND -->` block equals the render of bench/results/gpu_check-h200.json."""
    text = (REPO / page).read_text()
    blocks = re.findall(r"<!-- gpu_check --render (\w+) -->\n(.*?)\n<!-- /gpu_check -->", text, flags=re.S)
    assert blocks, f"{page} has no rendered gpu_check table"
    for kind, block in blocks:
        assert block == _render(kind), f"{page}: the {kind} table differs from --render {kind}"


def test_render_keeps_a_failed_sections_status_and_skips_unmeasured_targets():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "bench" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run = {
        "commit": "abc1234",
        "note": "test",
        "result": {
            "device": "Card",
            "sections": {"scoring_7b": {"status": "error: OutOfMemoryError: x", "seconds": 1.0}},
            "targets": {
                "a": {"value": None, "target": ">= 1", "pass": None},
                "b": {"value": 2, "target": ">= 1", "pass": True},
            },
        },
    }
    assert "error: OutOfMemoryError: x" in module.render([run], "sections")
    targets = module.render([run], "targets").splitlines()
    assert len(targets) == 3 and "`b` | 2 | >= 1 | yes" in targets[2]
