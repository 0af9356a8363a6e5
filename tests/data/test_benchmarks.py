"""Benchmark loaders on hand-written fixtures in each format, their failure modes, and sanity: every
canonical solution passes its tests in the sandbox and the same task answered with None fails."""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path

import pytest

from leaklab.data.benchmarks import (
    DataFormatError,
    DataUnavailableError,
    load_apps,
    load_benchmark,
    load_bigcodebench,
    missing_libraries,
)
from leaklab.data.tasks import Task
from leaklab.execution.correctness import check_many
from leaklab.execution.sandbox import Sandbox

FIXTURES = Path(__file__).parent.parent / "fixtures"
PATHS = {name: FIXTURES / name for name in ("humaneval_plus", "mbpp_plus", "apps", "bigcodebench")}


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2, timeout_s=5.0, memory_mb=2048) as sb:
        yield sb


# --------------------------------------------------------------------------- HumanEval+ / MBPP+


def test_humaneval_plus_fixture(monkeypatch):
    monkeypatch.setenv("EVALPLUS_TIMEOUT_PER_TASK", "3")  # crashes evalplus's own evaluation, not us
    tasks = load_benchmark("humaneval_plus", path=PATHS["humaneval_plus"])
    assert [t.task_id for t in tasks] == ["HumanEval/0", "HumanEval/2", "HumanEval/32"]
    vowels, mean, zero = tasks
    assert vowels.test_type == "call" and vowels.metadata["n_base"] == 2 and len(vowels.test_cases) == 5
    assert all("output" not in case for case in vowels.test_cases)  # diff-tested against the canonical
    assert vowels.program("    return 0\n").startswith("def count_vowels")
    assert (zero.compare, zero.atol, mean.compare) == ("poly_root", 1e-6, "exact")
    # The same file, gzipped and given as a file rather than a directory.
    assert [
        t.task_id
        for t in load_benchmark("humaneval_plus", path=next(PATHS["humaneval_plus"].glob("*.jsonl")))
    ] == [t.task_id for t in tasks]


def test_mbpp_plus_fixture_gets_evalplus_input_types():
    tasks = {t.task_id: t for t in load_benchmark("mbpp_plus", path=PATHS["mbpp_plus"])}
    assert set(tasks) == {"Mbpp/2", "Mbpp/17", "Mbpp/18"}
    # evalplus turns Mbpp/2's JSON lists back into tuples; its canonical solution asserts that.
    assert tasks["Mbpp/2"].test_cases[0]["input"] == [(1, 2, 3), (2, 3, 4)]
    assert tasks["Mbpp/2"].compare == "set" and tasks["Mbpp/17"].compare == "exact"


def test_evalplus_formats_offline_and_malformed(monkeypatch, tmp_path):
    import evalplus.data.humaneval as he
    import evalplus.data.mbpp as mbpp

    monkeypatch.delenv("HUMANEVAL_OVERRIDE_PATH", raising=False)
    monkeypatch.delenv("MBPP_OVERRIDE_PATH", raising=False)
    monkeypatch.setattr(he, "HUMANEVAL_OVERRIDE_PATH", None)

    def offline(url, path):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(he, "make_cache", offline)
    monkeypatch.setattr(mbpp, "make_cache", offline)
    for name in ("humaneval_plus", "mbpp_plus"):
        with pytest.raises(DataUnavailableError, match=r"data\.path=/path/to/.*Plus\.jsonl\.gz"):
            load_benchmark(name)
    bad = tmp_path / "HumanEvalPlus.jsonl"
    bad.write_text(json.dumps({"task_id": "HumanEval/0", "prompt": "x"}) + "\n")
    with pytest.raises(DataFormatError, match=r"HumanEvalPlus.jsonl:1 \(task HumanEval/0\): missing field"):
        load_benchmark("humaneval_plus", path=bad)
    with pytest.raises(DataUnavailableError, match="does not exist"):
        load_benchmark("mbpp_plus", path=tmp_path / "missing.jsonl")
    assert he.HUMANEVAL_OVERRIDE_PATH is None  # a local path does not outlive the call


@pytest.mark.parametrize("name", ["mbpp_plus", "humaneval_plus"])
def test_a_humaneval_file_read_as_evalplus_names_the_missing_fields(name, capsys):
    """data.benchmark=mbpp_plus on HumanEval rows was a KeyError traceback from inside evalplus."""
    from leaklab.data.benchmarks import humaneval_path
    from leaklab.train import main as train_main

    with pytest.raises(DataFormatError) as err:
        load_benchmark(name, path=humaneval_path())
    assert (
        "HumanEval.jsonl.gz:1 (task HumanEval/0): missing field(s) contract, base_input, plus_input, atol"
        in str(err.value)
    )
    rc = train_main(["recipe=tiny_cpt", f"data.benchmark={name}", f"data.path={humaneval_path()}"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "missing field(s) contract" in lines[0], lines


# --------------------------------------------------------------------------- APPS


def test_apps_fixture_skips_unusable_rows_and_reads_both_kinds():
    tasks = {t.task_id: t for t in load_apps(path=PATHS["apps"])}
    assert set(tasks) == {f"apps/test/{i}" for i in (4001, 4002, 4003, 4004)}  # 4005-4007 are unusable
    assert tasks["apps/test/4001"].test_type == "stdio" and tasks["apps/test/4003"].test_type == "call"
    assert tasks["apps/test/4003"].entry_point == "twoSum" and tasks["apps/test/4003"].compare == "apps"
    assert not tasks["apps/test/4001"].prompt_is_code
    assert tasks["apps/test/4001"].program() == tasks["apps/test/4001"].solution


def test_apps_difficulty_filter():
    by = {
        d: {t.task_id for t in load_apps(path=PATHS["apps"], difficulty=d)}
        for d in ("introductory", "interview")
    }
    assert by["introductory"] == {"apps/test/4001", "apps/test/4004"}
    assert by["interview"] == {"apps/test/4002"}
    both = {t.task_id for t in load_apps(path=PATHS["apps"], difficulty=["interview", "competition"])}
    assert both == {"apps/test/4002", "apps/test/4003"}
    # A bare string is one level, never a set of substrings; a typo is an error with a suggestion.
    with pytest.raises(ValueError, match="did you mean 'interview'"):
        load_apps(path=PATHS["apps"], difficulty="interveiw")
    with pytest.raises(ValueError, match="unknown APPS difficulty 'intro'"):
        load_apps(path=PATHS["apps"], difficulty=["intro"])


def test_rows_in_another_schema_are_named(tmp_path):
    (tmp_path / "rows.jsonl").write_text(json.dumps({"id": 1, "text": "not APPS"}) + "\n")
    with pytest.raises(DataFormatError, match="rows.jsonl:1: missing field.s. problem_id, question"):
        load_apps(path=tmp_path)
    with pytest.raises(DataFormatError, match="missing field.s. task_id, complete_prompt"):
        load_bigcodebench(path=tmp_path)
    (tmp_path / "rows.jsonl").write_text("{not json\n")
    with pytest.raises(DataFormatError, match="rows.jsonl:1: not valid JSON"):
        load_apps(path=tmp_path)


def test_apps_hub_offline_names_the_local_path_key(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("offline")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataUnavailableError, match=r"data\.path="):
        load_apps()


# --------------------------------------------------------------------------- BigCodeBench


def test_bigcodebench_skips_tasks_with_missing_libraries(caplog):
    tasks = load_bigcodebench(path=PATHS["bigcodebench"])
    assert [t.task_id for t in tasks] == ["BigCodeBench/0", "BigCodeBench/1"]
    assert "skipped 1 task(s) with missing libraries" in caplog.text
    assert "'BigCodeBench/2', 'reason': 'missing libraries: leaklab_missing_library_xyz'" in caplog.text
    assert tasks[1].metadata["libs"] == ["numpy"] and tasks[0].test_type == "unittest"
    assert missing_libraries(["os", "numpy.linalg", "no_such_lib_abc"]) == ["no_such_lib_abc"]


def test_bigcodebench_hub_offline(monkeypatch):
    import datasets

    seen = {}

    def offline(name, split):
        seen.update(name=name, split=split)
        raise ConnectionError("offline")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataUnavailableError, match=r"bigcode/bigcodebench.*data\.path="):
        load_benchmark("bigcodebench")
    assert seen == {"name": "bigcode/bigcodebench", "split": "v0.1.4"}


def test_registry_errors(tmp_path):
    with pytest.raises(DataUnavailableError, match="did you mean 'mbpp_plus'"):
        load_benchmark("mbpp+")
    twice = tmp_path / "he.jsonl"
    row = {
        "task_id": "X/0",
        "prompt": "def f():\n",
        "canonical_solution": "    return 1\n",
        "entry_point": "f",
        "test": "def check(candidate):\n    assert candidate() == 1\n",
    }
    twice.write_text((json.dumps(row) + "\n") * 2)
    with pytest.raises(DataFormatError, match="duplicate task id.s. 'X/0'"):
        load_benchmark("humaneval", path=twice)


# --------------------------------------------------------------------------- sanity in the sandbox


def _answer_none(task: Task) -> str:
    """The task answered with None: a body for prompt-continuations, a whole program otherwise."""
    if task.benchmark == "mbpp_plus":
        return f"def {task.entry_point}(*args):\n    return None\n"
    if task.benchmark == "apps":
        if task.test_type == "stdio":
            return "print(None)\n"
        return f"class Solution:\n    def {task.entry_point}(self, *args):\n        return None\n"
    return "    return None\n"


@pytest.mark.parametrize("name", ["humaneval_plus", "mbpp_plus", "apps", "bigcodebench"])
def test_fixture_canonical_solutions_pass_and_none_fails(sandbox, name):
    tasks = load_benchmark(name, path=PATHS[name])
    results = check_many([(t, t.solution) for t in tasks] + [(t, _answer_none(t)) for t in tasks], sandbox)
    canonical, broken = results[: len(tasks)], results[len(tasks) :]
    assert [(r.task_id, r.reason) for r in canonical if not r.passed] == []
    assert [(r.task_id, r.verdict) for r in broken if r.verdict != "failed"] == []
    if name in ("humaneval_plus", "mbpp_plus"):
        assert all(r.base_passed for r in canonical) and not any(r.base_passed for r in broken)


def test_plus_inputs_catch_what_base_inputs_miss(sandbox):
    """A candidate right on HumanEval's inputs and wrong on the extra ones: base passes, the task fails."""
    vowels = load_benchmark("humaneval_plus", path=PATHS["humaneval_plus"])[0]
    lowercase_only = "    return sum(ch in 'aeiou' for ch in text)\n"  # base inputs are lower case
    r = check_many([(vowels, lowercase_only)], sandbox)[0]
    assert (r.verdict, r.base_passed, r.cases_passed, r.cases_total) == ("failed", True, 4, 5)


def test_float_outputs_are_compared_with_tolerance(sandbox):
    mean = load_benchmark("humaneval_plus", path=PATHS["humaneval_plus"])[1]
    other_order = "    import math\n    return math.fsum(reversed(values)) / len(values)\n"
    assert check_many([(mean, other_order)], sandbox)[0].passed
    assert not check_many([(mean, "    return sum(values) / len(values) + 1e-3\n")], sandbox)[0].passed
