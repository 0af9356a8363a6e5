"""Functional correctness: a candidate solution against a Task's tests in the sandbox (`check_solution`,
or `check_many` in one batch); pass@k. The child never sees an expected value: outputs come back as
plain data and are compared here, by the rules of docs/sandbox.md#comparing-outputs.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from leaklab.data.tasks import Task
from leaklab.execution.extract import parses
from leaklab.execution.sandbox import (
    CallOutcome,
    CheckFunction,
    ExecResult,
    FunctionCalls,
    Job,
    Program,
    Sandbox,
    UnitTests,
)
from leaklab.execution.values import short_repr

# EvalPlus gives each input max(1 s, 4 x the canonical solution's time); this is the same budget for
# the whole batch of inputs, which run in one process.
REFERENCE_TIME_FACTOR = 4.0


@dataclass
class SampleResult:
    """One candidate on one task."""

    task_id: str
    verdict: str
    reason: str = ""
    cases_passed: int | None = None
    cases_total: int | None = None
    base_passed: bool | None = None  # HumanEval+ / MBPP+: the original benchmark's inputs alone
    truncated: bool = False  # output beyond the sandbox's cap was dropped: a reward fails it (rewards.py)

    @property
    def passed(self) -> bool:
        return self.verdict == "passed"


# --------------------------------------------------------------------------- comparing outputs


def _is_floats(value: Any) -> bool:
    floats = isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, float) for v in value)
    return isinstance(value, float) or floats


def _as_lists(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_as_lists(v) for v in value]
    return value


COMPARISONS = ("exact", "set", "not_none", "any", "equal_or_zero", "poly_root", "apps")


def outputs_match(
    out: Any, expected: Any, compare: str = "exact", atol: float = 0.0, args: Sequence = ()
) -> bool:
    """Whether `out` (a candidate's value, plain data) is right for `expected`; never raises."""
    if compare not in COMPARISONS:
        return False
    try:
        if compare == "any":
            return True
        if compare == "set":
            return set(out) == set(expected)
        if compare == "not_none":
            return out == expected if isinstance(out, bool) else (out is not None) == expected
        if compare == "poly_root":
            value = sum(c * math.pow(out, i) for i, c in enumerate(args[0]))  # args[0]: the coefficients
            return isinstance(out, (int, float)) and abs(value) <= (atol or 1e-6)
        if compare == "apps":
            out, expected = _as_lists(out), _as_lists(expected)
            return out == expected or (
                isinstance(expected, list) and len(expected) > 0 and out == expected[0]
            )
        if compare == "equal_or_zero" and out == 0:
            return True
        if out == expected:
            return True
        if atol == 0 and _is_floats(expected):
            atol = 1e-6
        if atol == 0 or type(out) is not type(expected):
            return False
        if isinstance(expected, (list, tuple)) and len(out) != len(expected):
            return False
        return bool(np.allclose(out, expected, rtol=1e-7, atol=atol))
    except Exception:  # an unhashable element for "set", a string for allclose: not a match
        return False


def _same_token(got: str, want: str) -> bool:
    try:
        return got == want or math.isclose(float(got), float(want), rel_tol=1e-6, abs_tol=1e-6)
    except ValueError:
        return False


def stdout_matches(out: str, expected: str) -> bool:
    """APPS-style: the same tokens on the same non-empty lines; numbers equal within 1e-6."""
    got = [line.split() for line in out.splitlines() if line.strip()]
    want = [line.split() for line in expected.splitlines() if line.strip()]
    if len(got) != len(want) or any(len(g) != len(w) for g, w in zip(got, want)):
        return False
    return all(_same_token(g, w) for g_line, w_line in zip(got, want) for g, w in zip(g_line, w_line))


def _text(value: Any) -> str:
    """APPS stores stdin/stdout as a string or as a list of lines."""
    if isinstance(value, list):
        return "\n".join(str(v) for v in value) + "\n"
    return str(value)


# --------------------------------------------------------------------------- reference outputs


def _reference_key(task: Task) -> str:
    """The task, its canonical program and its inputs: what the reference outputs depend on."""
    digest = hashlib.sha1(task.program().encode())
    digest.update(repr([c["input"] for c in task.test_cases]).encode())
    return f"{task.benchmark}:{task.task_id}:{digest.hexdigest()[:20]}"


# Reference outputs are computed once per task and kept: checking samples one call at a time
# (check_solution in a loop) must not rerun the canonical solution on a thousand inputs each time.
_REFERENCES: OrderedDict[str, ExecResult] = OrderedDict()
_REFERENCES_KEPT = 2048
_REFERENCES_LOCK = threading.Lock()


def reference_outputs(
    tasks: Sequence[Task], sandbox: Sandbox, timeout_s: float = 60.0
) -> dict[str, ExecResult]:
    """The canonical solution's outputs on every call input of each task, keyed by `_reference_key`.
    EvalPlus runs its reference without a time limit; `timeout_s` only stops a broken one."""
    needed = [t for t in tasks if t.test_type == "call" and any("output" not in c for c in t.test_cases)]
    wanted = {_reference_key(t): t for t in needed}
    with _REFERENCES_LOCK:
        known = {k: _REFERENCES[k] for k in wanted if k in _REFERENCES}
    todo = {k: t for k, t in wanted.items() if k not in known}
    jobs = [
        FunctionCalls(t.program(), t.entry_point or "", [c["input"] for c in t.test_cases], timeout_s)
        for t in todo.values()
    ]
    fresh = dict(zip(todo, sandbox.run_jobs(jobs)))
    with _REFERENCES_LOCK:
        for key, result in fresh.items():
            if result.passed:  # a failed reference is reported, not remembered
                _REFERENCES[key] = result
                _REFERENCES.move_to_end(key)
        while len(_REFERENCES) > _REFERENCES_KEPT:
            _REFERENCES.popitem(last=False)
    return known | fresh


# --------------------------------------------------------------------------- planning and folding


@dataclass
class _Plan:
    jobs: list[Job]
    fold: Callable[[list[ExecResult]], SampleResult]


def _from_exec(task_id: str, result: ExecResult) -> SampleResult:
    return SampleResult(task_id, result.verdict, result.reason, truncated=result.truncated)


def _plan_call(
    task: Task, program: str, reference: ExecResult | None, timeout_s: float
) -> _Plan | SampleResult:
    expected: list[Any] = []
    reference_calls = (reference.calls or []) if reference is not None else []
    for i, case in enumerate(task.test_cases):
        if "output" in case:
            expected.append(case["output"])
            continue
        if i >= len(reference_calls) or not reference_calls[i].ok:
            why = reference.reason if reference is not None else "no canonical solution to run"
            return SampleResult(
                task.task_id, "error", f"the canonical solution gives no output for case {i}: {why}"
            )
        expected.append(reference_calls[i].value)
    budget = timeout_s + REFERENCE_TIME_FACTOR * sum(c.duration_s for c in reference_calls)
    inputs = [c["input"] for c in task.test_cases]
    job = FunctionCalls(program, task.entry_point or "", inputs, budget)

    def fold(results: list[ExecResult]) -> SampleResult:
        (r,) = results
        calls: list[CallOutcome] = r.calls or []
        ok = [
            i < len(calls)
            and calls[i].ok
            and outputs_match(calls[i].value, expected[i], task.compare, task.atol, inputs[i])
            for i in range(len(inputs))
        ]
        res = SampleResult(
            task.task_id, "passed", cases_passed=sum(ok), cases_total=len(ok), truncated=r.truncated
        )
        n_base = task.metadata.get("n_base")
        if n_base is not None:
            res.base_passed = all(ok[:n_base])
        if all(ok):
            return res
        first = ok.index(False)
        if r.verdict in ("timeout", "error") and first >= len(calls):
            res.verdict, res.reason = r.verdict, r.reason
        elif first >= len(calls):
            res.verdict, res.reason = "failed", r.reason or f"no result for case {first}"
        elif not calls[first].ok:
            res.verdict, res.reason = "failed", f"case {first} raised {calls[first].error}"
        else:
            res.verdict = "failed"
            res.reason = (
                f"case {first}: {short_repr(inputs[first], 120)} gave {short_repr(calls[first].value, 120)}, "
                f"expected {short_repr(expected[first], 120)}"
            )
        return res

    return _Plan([job], fold)


def _plan_stdio(task: Task, program: str, timeout_s: float) -> _Plan:
    cases = task.test_cases
    jobs: list[Job] = [Program(program, _text(c["input"]), timeout_s) for c in cases]

    def fold(results: list[ExecResult]) -> SampleResult:
        res = SampleResult(task.task_id, "passed", cases_passed=0, cases_total=len(cases))
        for i, (r, case) in enumerate(zip(results, cases)):
            if r.verdict != "passed":
                verdict, why = r.verdict, r.reason
            elif r.truncated:
                verdict, why = "failed", "output too long"
            elif not stdout_matches(r.stdout, _text(case["output"])):
                verdict, why = "failed", f"wrong output {short_repr(r.stdout, 80)}"
            else:
                res.cases_passed += 1
                continue
            if res.verdict == "passed":  # the first case that did not pass decides
                res.verdict, res.reason = verdict, f"case {i}: {why}"
        return res

    return _Plan(jobs, fold)


def _plan(
    task: Task,
    completion: str,
    full_program: bool,
    reference: ExecResult | None,
    timeout_s: float,
    unittest_guard: bool | None,
) -> _Plan | SampleResult:
    program = completion if full_program else task.program(completion)
    if task.compare not in COMPARISONS:
        return SampleResult(
            task.task_id, "error", f"unknown comparison {task.compare!r}; use one of {COMPARISONS}"
        )
    if task.test_type in ("function", "unittest"):
        if not task.tests.strip():
            return SampleResult(task.task_id, "error", "the task has no tests")
        if task.test_type == "function":
            # The judge runs the task's own prompt and canonical solution first, when they compile: the
            # tests may call their helpers (HumanEval/32's poly).
            canonical = task.program()
            prelude = canonical if parses(canonical) else ""
            job: Job = CheckFunction(
                program, task.entry_point or "", task.tests, prelude, timeout_s=timeout_s
            )
        else:
            job = UnitTests(program, task.tests, timeout_s=timeout_s, guard_calls=unittest_guard)
        return _Plan([job], lambda rs: _from_exec(task.task_id, rs[0]))
    if task.test_type in ("call", "stdio") and not task.test_cases:
        return SampleResult(task.task_id, "error", "the task has no test cases")
    if task.test_type == "call":
        if not task.entry_point:
            return SampleResult(task.task_id, "error", "a call test needs the task's entry point")
        return _plan_call(task, program, reference, timeout_s)
    if task.test_type == "stdio":
        return _plan_stdio(task, program, timeout_s)
    return SampleResult(task.task_id, "error", f"unknown test_type {task.test_type!r}")


# --------------------------------------------------------------------------- public API


def check_many(
    items: Sequence[tuple[Task, str]],
    sandbox: Sandbox,
    *,
    full_program: bool = False,
    timeout_s: float | None = None,
) -> list[SampleResult]:
    """Each (task, completion) checked in one batch; results in order. A completion continues the
    task's prompt or, with `full_program=True`, is the whole program."""
    timeout = sandbox.limits.timeout_s if timeout_s is None else timeout_s
    references = reference_outputs([t for t, _ in items], sandbox, max(timeout, 60.0))
    # BigCodeBench programs delete files and start processes as part of the task; where the operating
    # system confines them (own uid, private mounts) the Python-level guards would only fail them.
    iso = sandbox.isolation
    unittest_guard = False if iso.get("uid") == "separate" and iso.get("mounts") != "shared" else None
    plans = [
        _plan(t, c, full_program, references.get(_reference_key(t)), timeout, unittest_guard)
        for t, c in items
    ]
    jobs = [job for p in plans if isinstance(p, _Plan) for job in p.jobs]
    results = iter(sandbox.run_jobs(jobs))
    return [p if isinstance(p, SampleResult) else p.fold([next(results) for _ in p.jobs]) for p in plans]


def canonical_failures(tasks: Sequence[Task], *, workers: int = 2, timeout_s: float = 10.0) -> dict[str, str]:
    """task id -> why, for every task whose canonical solution fails its own tests (run in a sandbox
    of its own); {} when all pass. A benchmark file of one's own can hold such tasks: a model could
    never pass them, and variants verified by them never verify."""
    with Sandbox(workers=workers, timeout_s=timeout_s) as sandbox:
        results = check_many([(t, t.solution) for t in tasks], sandbox)
    return {r.task_id: (r.reason or r.verdict) for r in results if not r.passed}


def check_solution(
    task: Task,
    completion: str,
    sandbox: Sandbox,
    *,
    full_program: bool = False,
    timeout_s: float | None = None,
) -> SampleResult:
    return check_many([(task, completion)], sandbox, full_program=full_program, timeout_s=timeout_s)[0]


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from n samples of which c are correct:
    1 - C(n - c, k) / C(n, k), the chance that k samples drawn without replacement hold a correct one.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got n={n}")
    # Python divides big integers exactly before rounding, so this is exact for any n.
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)
