"""Correctness: pass@k (golden values), output comparisons, and the real HumanEval end to end."""

from __future__ import annotations

import dataclasses
import math

import pytest

from leaklab.data.benchmarks import load_humaneval
from leaklab.data.tasks import Task
from leaklab.execution.correctness import (
    check_many,
    check_solution,
    outputs_match,
    pass_at_k,
    stdout_matches,
)
from leaklab.execution.sandbox import Sandbox


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2, timeout_s=3.0, memory_mb=1024) as sb:
        yield sb


ADD = Task(
    task_id="toy/add",
    benchmark="toy",
    prompt="def add(a, b):\n",
    solution="    return a + b\n",
    entry_point="add",
    tests="def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(0, 0) == 0\n",
)


# --------------------------------------------------------------------------- pass@k


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (5, 2, 1, 2 / 5),  # 1 - C(3,1)/C(5,1) = 1 - 3/5
        (5, 2, 2, 7 / 10),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (5, 2, 3, 9 / 10),  # 1 - C(3,3)/C(5,3) = 1 - 1/10
        (5, 2, 4, 1.0),  # only 3 wrong samples: any 4 hold a right one
        (4, 1, 3, 3 / 4),  # 1 - C(3,3)/C(4,3) = 1 - 1/4
        (10, 0, 5, 0.0),
        (10, 10, 1, 1.0),
        (200, 1, 100, 1 / 2),  # C(199,100)/C(200,100) = 100/200
    ],
)
def test_pass_at_k_matches_hand_computed_values(n, c, k, expected):
    assert math.isclose(pass_at_k(n, c, k), expected, rel_tol=1e-12)


def test_pass_at_k_rejects_impossible_counts():
    for n, c, k in [(3, 4, 1), (3, -1, 1), (3, 1, 4), (3, 1, 0)]:
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


def test_check_many_verdicts_in_order_with_the_failing_line(sandbox):
    completions = ["    return a + b\n", "    return a - b\n", "    while True:\n        pass\n"]
    results = check_many([(ADD, c) for c in completions], sandbox, timeout_s=1.0)
    assert [r.verdict for r in results] == ["passed", "failed", "timeout"]
    assert results[1].task_id == "toy/add" and not results[1].passed
    assert "line 2" in results[1].reason


# --------------------------------------------------------------------------- comparisons


def test_exact_comparison_follows_evalplus():
    assert outputs_match(3, 3) and not outputs_match(3, 4)
    assert outputs_match(0.1 + 0.2, 0.3)  # floats expected: atol 1e-6 is enforced
    assert not outputs_match(0.31, 0.3)
    assert outputs_match([0.1 + 0.2, 1.0], [0.3, 1.0]) and not outputs_match([0.3], [0.3, 1.0])
    assert outputs_match(1.05, 1.0, atol=0.1) and not outputs_match(1.2, 1.0, atol=0.1)
    assert not outputs_match("0.3", 0.3) and not outputs_match(None, 0.3)
    assert not outputs_match((1, 2), [1, 2])  # tuples are not lists


def test_special_comparisons():
    assert outputs_match([3, 1, 2], (1, 2, 3), "set") and not outputs_match([1], (1, 2), "set")
    assert not outputs_match([[1]], [[1]], "set")  # unhashable: no match, no exception
    assert outputs_match("match", True, "not_none") and outputs_match(None, False, "not_none")
    assert not outputs_match(False, True, "not_none")
    assert outputs_match(None, 5, "any")
    assert outputs_match(0, 7, "equal_or_zero") and outputs_match(7, 7, "equal_or_zero")
    assert not outputs_match(6, 7, "equal_or_zero")
    assert outputs_match(-0.5, None, "poly_root", 1e-6, ([1, 2],)) and not outputs_match(
        0.5, None, "poly_root", 1e-6, ([1, 2],)
    )
    assert outputs_match((0, 1), [[0, 1]], "apps") and outputs_match([(1, 2)], [[1, 2]], "apps")
    assert not outputs_match([1, 0], [[0, 1]], "apps")
    assert not outputs_match(1, 1, "no-such-rule")


def test_stdout_comparison_ignores_whitespace_and_float_noise():
    assert stdout_matches("1 2  3\n\n4\n", "1 2 3\n4")
    assert stdout_matches("2.5000001\n", "2.5")
    assert not stdout_matches("1 2 3\n", "1 2\n3\n")
    assert not stdout_matches("abc\n", "abd\n") and not stdout_matches("", "1\n")


# --------------------------------------------------------------------------- bad tasks


def test_tasks_that_cannot_be_checked_get_an_error_verdict(sandbox):
    bad = [
        dataclasses.replace(ADD, task_id="no-tests", tests=""),
        dataclasses.replace(ADD, task_id="no-cases", test_type="call"),
        dataclasses.replace(
            ADD,
            task_id="no-entry",
            test_type="call",
            entry_point=None,
            test_cases=({"input": [1, 2], "output": 3},),
        ),
        dataclasses.replace(ADD, task_id="odd-type", test_type="quiz"),
        dataclasses.replace(
            ADD,
            task_id="odd-compare",
            test_type="call",
            compare="fuzzy",
            test_cases=({"input": [1, 2], "output": 3},),
        ),
        dataclasses.replace(ADD, task_id="broken-tests", tests="def check(candidate)\n"),
    ]
    results = check_many([(t, ADD.solution) for t in bad], sandbox)
    assert [r.verdict for r in results] == ["error"] * len(bad)
    assert [r.reason.split(":")[0] for r in results[:3]] == [
        "the task has no tests",
        "the task has no test cases",
        "a call test needs the task's entry point",
    ]


def test_call_tests_compare_in_the_parent_and_report_the_case(sandbox):
    task = dataclasses.replace(
        ADD, test_type="call", test_cases=({"input": [1, 2], "output": 3}, {"input": [2, 2], "output": 4})
    )
    assert check_solution(task, "    return a + b\n", sandbox).passed
    r = check_solution(task, "    return 3\n", sandbox)
    assert (r.verdict, r.cases_passed, r.cases_total) == ("failed", 1, 2)
    assert r.reason == "case 1: [2, 2] gave 3, expected 4"
    r = check_solution(task, "    return a / 0\n", sandbox)
    assert r.verdict == "failed" and r.reason.startswith("case 0 raised ZeroDivisionError")


def test_stdio_verdict_is_that_of_the_first_case_that_fails(sandbox):
    task = Task(
        task_id="toy/echo",
        benchmark="toy",
        prompt="Print the number you read, doubled.",
        solution="print(2 * int(input()))\n",
        test_cases=(
            {"input": "1\n", "output": "2\n"},
            {"input": ["3"], "output": ["6"]},
            {"input": "0\n", "output": "0\n"},
        ),
        test_type="stdio",
        prompt_is_code=False,
    )
    assert check_solution(task, task.solution, sandbox).passed
    looping = "x = int(input())\nwhile x == 0:\n    pass\nprint(2 * x if x != 3 else 7)\n"
    r = check_solution(task, looping, sandbox, timeout_s=1.0)
    assert (r.verdict, r.cases_passed) == ("failed", 1) and r.reason.startswith("case 1: wrong output")
    r = check_solution(
        task, "x = int(input())\nwhile x == 0:\n    pass\nprint(2 * x)\n", sandbox, timeout_s=1.0
    )
    assert r.verdict == "timeout" and r.reason.startswith("case 2:")


# --------------------------------------------------------------------------- the real HumanEval


def _return_none(task: Task) -> str:
    return "    return None\n"


def test_all_humaneval_canonical_solutions_pass_and_return_none_fails(sandbox):
    tasks = load_humaneval()
    assert len(tasks) == 164
    results = check_many([(t, t.solution) for t in tasks] + [(t, _return_none(t)) for t in tasks], sandbox)
    canonical, broken = results[:164], results[164:]
    assert [r.task_id for r in canonical if not r.passed] == []
    assert [r.task_id for r in broken if r.verdict != "failed"] == []


def test_call_and_stdio_tests_without_a_benchmark(sandbox):
    code = "def add(a, b):\n    return a + b\n"

    def calls(*cases):
        task = Task("adhoc", "adhoc", "", code, "add", test_type="call", test_cases=cases)
        return check_solution(task, code, sandbox, full_program=True)

    assert calls({"input": [1, 2], "output": 3}).passed
    r = calls({"input": [0.1, 0.2], "output": 0.3}, {"input": [1, 1], "output": 3})
    assert (r.verdict, r.cases_passed) == ("failed", 1)
    echo = "import sys\nprint(sys.stdin.read().upper())\n"

    def stdio(case):
        task = Task("adhoc", "adhoc", "", echo, test_cases=(case,), test_type="stdio")
        return check_solution(task, echo, sandbox, full_program=True)

    assert stdio({"input": "ab\n", "output": "AB"}).passed
    assert not stdio({"input": "ab\n", "output": "ab"}).passed
