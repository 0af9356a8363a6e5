"""`make reproduce`'s machinery (leaklab/reproduce): the stated-numbers file, reading a claim's row,
the tolerances, and a smoke run end to end (`make reproduce-smoke`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from leaklab.errors import InputError
from leaklab.reproduce import Claim, claims_table, load_claims, measure, step_table

REPO = Path(__file__).resolve().parents[1]


def row(step, column, metric, value, **extra):
    return {
        "step": step,
        "evaluation": "accuracy",
        "column": column,
        "metric": metric,
        "value": value,
        **extra,
    }


ROWS = [
    row(0, "non_members", "pass@1", 0.0),
    row(250, "non_members", "pass@1", 0.4),
    row(250, "non_members", "pass@1_ci_low", 0.3),
    row(250, "non_members", "pass@1_ci_high", 0.5),
    row(250, "members", "pass@1", 0.6, dose=4),  # a dose group's row is not the side's
    row(250, "members", "pass@1", 0.7),
]


def claim(tolerance="interval", stated=0.45, bound=None, **where):
    want = {"evaluation": "accuracy", "step": "last", "column": "non_members", "metric": "pass@1", **where}
    return Claim("c", "r", "w", want, stated, tolerance, bound)


def test_a_claim_reads_its_row_and_interval_at_the_last_step_and_applies_its_tolerance():
    m = measure(claim(), ROWS)
    assert (m.value, m.low, m.high) == (0.4, 0.3, 0.5) and m.ok  # 0.45 in [0.3, 0.5]
    assert not measure(claim(stated=0.55), ROWS).ok
    assert (
        measure(claim("at_least", bound=0.4), ROWS).ok and not measure(claim("at_least", bound=0.41), ROWS).ok
    )
    assert measure(claim("abs", bound=0.05), ROWS).ok and not measure(claim("abs", bound=0.04), ROWS).ok
    assert measure(claim(column="members"), ROWS).value == 0.7
    assert measure(claim(column="members", dose=4), ROWS).value == 0.6
    missing = measure(claim(step=500), ROWS)
    assert missing.value is None and not missing.ok and not missing.found
    assert not measure(claim("interval", stated=0.0, step=0), ROWS).ok, "no interval: not checked, not ok"
    assert "**no**" in claims_table([missing]) and "| c | w | 0.450 | – |" in claims_table([missing])


def test_a_row_with_a_null_value_is_found_but_not_ok():
    """A side below MRI's competence rule writes its row with a null value: the row is there (what a smoke
    run checks), and the claim it backs does not reproduce."""
    na = measure(claim(), [*ROWS, row(300, "non_members", "pass@1", None, na="not competent")])
    assert na.found and na.value is None and not na.ok


def test_step_table_lists_every_step_with_its_interval():
    table = step_table(ROWS, {"evaluation": "accuracy", "metric": "pass@1", "columns": ["non_members"]})
    assert "| 0 | 0 |" in table and "| 250 | 0.400 [0.300, 0.500] |" in table
    # A row without a column (the training reward) is headed by its metric.
    reward = [{**row(5, None, "reward", 0.25), "evaluation": "training"}]
    table = step_table(reward, {"evaluation": "training", "metric": "reward", "columns": [None]})
    assert "| step | reward |" in table and "| 5 | 0.250 |" in table


def test_dose_table_reads_each_dose_at_the_last_step_and_all_members():
    from leaklab.reproduce import dose_table

    rows = [
        {"step": 100, "evaluation": "detection", "column": "ppl", "metric": "auroc", "value": 0.5},
        *({"step": 200, "evaluation": "detection", "column": "ppl", "metric": "auroc", "value": v, **d}
          for v, d in ((0.6, {"dose": 1}), (0.9, {"dose": 4}), (0.7, {}))),
    ]  # fmt: skip
    got = dose_table(rows, {"per": "dose", "evaluation": "detection", "metric": "auroc", "columns": ["ppl"]})
    assert "| | dose 1 | dose 4 | all members |" in got and "| ppl | 0.600 | 0.900 | 0.700 |" in got


def test_the_shipped_file_names_runs_that_load_and_rows_with_known_keys():
    from leaklab import study
    from leaklab.recipe import load_recipe

    runs, claims = load_claims()
    assert {"tiny_cpt", "tiny_sft", "tiny_dose", "tiny_extraction", "tiny_grpo", "detectors"} <= set(runs)
    studies = {
        name: study.load_study(study.study_path(spec.study)) for name, spec in runs.items() if spec.study
    }
    for spec in runs.values():
        if spec.study:
            continue
        load_recipe(spec.recipe, spec.overrides)
        if spec.smoke is not None:
            load_recipe(spec.recipe, [*spec.overrides, *spec.smoke])
    assert {c.run for c in claims} == set(runs)
    evaluations = {
        name: load_recipe(runs[name].recipe).evaluate.evaluations for name in runs if name not in studies
    }
    for c in claims:
        if c.run in studies:  # a study's claim names a cell of one of its conditions, or one of its findings
            known = studies[c.run]
            if c.row["evaluation"] == "finding":
                assert c.row["column"] in {f["id"] for f in known["findings"]}, c.name
            else:
                assert c.row["evaluation"] == "leaderboard", c.name
                assert c.row["cell"].partition("@")[0].partition("/")[0] in known["conditions"], c.name
            continue
        assert c.row["evaluation"] in evaluations[c.run], (c.name, c.row)


def test_a_study_claim_reads_the_leaderboard_as_rows(tmp_path):
    from leaklab.reproduce import leaderboard_rows

    board = {
        "table": {
            "dose@64": {"ppl": {"auroc": 0.9, "auroc_ci_low": 0.8, "auroc_ci_high": 0.97, "tpr@1%fpr": 0.5}}
        },
        "findings": [
            {"id": "late_beats_early", "value": 0.2, "ci_low": 0.1, "ci_high": 0.3, "verdict": "reproduced"}
        ],
    }
    rows = leaderboard_rows(board)

    def claim(row: dict, stated: float) -> Claim:
        return Claim("c", "d", "w", row, stated, "interval")

    cell = claim({"evaluation": "leaderboard", "cell": "dose@64", "column": "ppl", "metric": "auroc"}, 0.85)
    got = measure(cell, rows)
    assert (got.value, got.low, got.high, got.ok) == (0.9, 0.8, 0.97, True)
    other = claim({"evaluation": "leaderboard", "cell": "dose@16", "column": "ppl", "metric": "auroc"}, 0.85)
    assert not measure(other, rows).found  # another cell's row is not this one's
    finding = claim({"evaluation": "finding", "column": "late_beats_early", "metric": "statistic"}, 0.35)
    got = measure(finding, rows)
    assert (got.value, got.low, got.high, got.ok) == (0.2, 0.1, 0.3, False)  # 0.35 is outside [0.1, 0.3]


def _written_forms(x: float) -> list[str]:
    """How a docs page may write a stated number: 0.33 as 0.33 or 0.330, 0.25 as 25%, 50 as 50."""
    forms = {f"{x:.3f}", f"{x:.2f}", f"{x:g}", f"{x * 100:g}%"}
    return sorted(forms | ({str(int(x))} if x == int(x) else set()))


def test_every_claim_is_stated_on_the_page_it_names():
    """A claim whose page no longer states it is stale: the page was corrected and the file was not (two
    tiny_sft figures, 0.72 / 0.55, stayed here after docs/results.md replaced them)."""
    root = Path(__file__).resolve().parents[1]
    _, claims = load_claims()
    for c in claims:
        page = root / c.where.split(":")[0].split(" (")[0]
        assert page.is_file(), f"{c.name}: `where` must start with a page of the repository ({c.where!r})"
        text = page.read_text()
        written = [f for f in _written_forms(c.stated) if re.search(rf"(?<![\d.]){re.escape(f)}(?!\d)", text)]
        assert written, f"{c.name}: {c.stated:g} is not written in {page.name}"


def test_a_bad_entry_is_one_line_naming_it(tmp_path):
    path = tmp_path / "stated.yaml"
    path.write_text(
        "runs: {a: {recipe: tiny_cpt}}\n"
        "claims: [{claim: x, where: w, run: a, row: {metric: auroc}, stated: 1, tolerance: {within: 1}}]\n"
    )
    with pytest.raises(InputError, match=r"claim 'x': unknown tolerance 'within' \(choose one of interval"):
        load_claims(path)


def test_differences_leave_out_timing_and_name_what_moved():
    from leaklab.reproduce import differences

    timing = {"step": 0, "evaluation": "timing", "column": None, "metric": "detection prepare", "value": 3.0}
    done = {"step": 1, "evaluation": "accuracy", "column": None, "metric": "done", "value": 12.0}
    a = [timing, {**done, "seconds": 4.0}, row(1, "all", "pass@1", 0.5), row(1, "all", "train_runtime", 9.0)]
    b = [{**timing, "value": 5.0}, {**done, "seconds": 7.5}, row(1, "all", "pass@1", 0.5)]
    assert differences(a, b) == []
    moved = differences(a, [*b[:2], row(1, "all", "pass@1", 0.55), row(2, "all", "pass@1", 0.1)])
    assert [(k[0], k[3], x, y) for k, x, y in moved] == [(1, "pass@1", 0.5, 0.55), (2, "pass@1", None, 0.1)]


def _env(cache: str) -> dict[str, str]:
    env = {**os.environ, "LEAKLAB_CACHE": cache, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    env.update(LEAKLAB_CPU_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("WORLD_SIZE", None)
    return env


@pytest.mark.slow
@pytest.mark.timeout(1500)  # two small trainings: ~4 min alone, more on a busy machine
def test_reproduce_smoke_runs_trains_reads_and_writes_the_generated_pages(leaklab_cache, tmp_path):
    """`make reproduce-smoke`: the runs with smoke sizes are trained, every claim of theirs finds its row,
    and the generated pages hold the tables; a second call resumes (trains nothing again)."""
    command = [sys.executable, "-m", "leaklab.reproduce", "--smoke", "--output-dir", str(tmp_path / "runs"),
               "--docs", str(tmp_path / "docs")]  # fmt: skip
    out = subprocess.run(
        command, cwd=REPO, env=_env(leaklab_cache), capture_output=True, text=True, timeout=1200
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "claims found their row" in out.stdout
    page = (tmp_path / "docs" / "tiny_sft.md").read_text()
    assert "Generated by `make reproduce`" in page and "Greedy pass@1 per checkpoint" in page
    assert (
        "| tiny_sft non-member pass@1, last step (target) |" in (tmp_path / "docs" / "claims.md").read_text()
    )
    cost = (tmp_path / "docs" / "cost.md").read_text()
    assert re.search(r"^\| tiny_sft \| [0-9.]+ min \|  \|$", cost, re.M)  # trained from empty: not resumed
    assert re.search(r"^\| all, side by side as above \| [0-9.]+ min \| \|$", cost, re.M)
    again = subprocess.run(
        command, cwd=REPO, env=_env(leaklab_cache), capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0
    assert (tmp_path / "docs" / "cost.md").read_text() == cost  # nothing trained: the measured cost stays
    # each run's own output went to its log (runs side by side would interleave theirs on the terminal)
    assert "nothing to do" in (tmp_path / "runs" / "logs" / "tiny_sft.log").read_text()


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_same_recipe_seed_and_thread_count_give_the_same_results(leaklab_cache, tmp_path):
    """Determinism on one machine: tiny_sft at its smoke sizes (training, generation, the sandbox,
    detection, MRI, bootstrap intervals) trained twice with one thread writes the same results.jsonl
    apart from timing (docs/reproducibility.md says what moves with the thread count)."""
    from leaklab.reproduce import differences, run_dir
    from leaklab.rundir import read_json, read_rows

    spec = load_claims()[0]["tiny_sft"]
    roots = []
    for name in ("first", "second"):
        out = str(tmp_path / name)
        command = [sys.executable, "-m", "leaklab.cli", *spec.command(smoke=True, output_dir=out)]
        done = subprocess.run(
            command, cwd=REPO, env=_env(leaklab_cache), capture_output=True, text=True, timeout=1200
        )
        assert done.returncode == 0, done.stderr[-3000:]
        roots.append(run_dir(spec, True, out))
    first, second = (read_rows(root / "results.jsonl") for root in roots)
    assert len(first) > 50 and differences(first, second) == []
    assert read_json(roots[0] / "manifest.json")["provenance"][0]["cpu_threads"] == 1


def test_a_smoke_run_reads_a_named_trained_step_at_its_last_step():
    from leaklab.reproduce import at_smoke_steps

    assert measure(at_smoke_steps(claim(step=1000)), ROWS).value == 0.4
    assert at_smoke_steps(claim(step=0)).row["step"] == 0


def _fake_train_job(arg):
    """In place of reproduce._train_job, in the pool's forked process: no training."""
    spec, _, output_dir, log_file = arg
    assert log_file.parent == Path(output_dir) / "logs"
    return {"state": "failed", "line": "exited 1"} if spec.name == "tiny_sft" else {"state": "done"}


def test_runs_train_side_by_side_after_the_studies_and_a_failed_one_fails_what_starts_from_it(
    tmp_path, monkeypatch
):
    from leaklab import reproduce

    trained, lines = [], []
    monkeypatch.setattr(reproduce, "train", lambda spec, *a, **k: trained.append(spec.name))
    monkeypatch.setattr(reproduce, "_train_job", _fake_train_job)
    monkeypatch.setattr(reproduce, "default_slots", lambda: 2)
    specs = [
        reproduce.RunSpec("tiny_grpo", "tiny_grpo", after="tiny_sft"),
        reproduce.RunSpec("tiny_cpt", "tiny_cpt"),
        reproduce.RunSpec("detectors", study="detectors"),
        reproduce.RunSpec("tiny_sft", "tiny_sft"),
    ]
    with pytest.raises(RuntimeError) as err:
        reproduce.train_all(specs, False, str(tmp_path), log=lines.append)
    assert trained == ["detectors"]  # in this process, before the others
    assert str(err.value) == "tiny_sft: exited 1; tiny_grpo: needs tiny_sft, which failed"
    assert "[reproduce] tiny_cpt: done" in lines
    assert (
        lines[0] == f"[reproduce] tiny_sft: started, output in {tmp_path}/logs/tiny_sft.log"
    )  # waited for: first
