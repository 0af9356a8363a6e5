"""Rule-based MRI rewriting of tasks whose tests are a unittest class (BigCodeBench): no input/output
pairs to recompute, so the literals the tests assert are regenerated in the sandbox instead, and the real
judge confirms the rewrite passes them while the original fails them.
See docs/perturbations.md#mri-rewriting.
"""

from __future__ import annotations

import ast
import dataclasses
import random
import re
from collections.abc import Sequence
from typing import Any

from leaklab.data.tasks import Task
from leaklab.execution.correctness import check_many
from leaklab.execution.sandbox import FunctionCalls
from leaklab.perturb.examples import literal
from leaklab.perturb.rewriting import (
    NotRewritable,
    Rewrite,
    _docstring_span,
    candidate_edits,
    parsed_edits,
    state_change,
)

EQUAL_ASSERTS = {"assertEqual", "assertListEqual", "assertTupleEqual", "assertDictEqual", "assertSetEqual"}
RECORDER = "__leaklab_record__"
RUNNER = "__leaklab_run_tests__"
# Appended to the program under test: runs the (instrumented) tests in the program's own module, so
# the tests see its names as they would under the judge, and returns what the sites recorded.
RUNNER_SOURCE = f'''

def {RUNNER}(tests_source, test_class="TestCases"):
    import unittest

    records = {{}}

    def record(k, value):
        records.setdefault(str(k), []).append(repr(value))

    namespace = dict(globals())
    namespace["{RECORDER}"] = record
    exec(compile(tests_source, "<tests>", "exec"), namespace)
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(namespace[test_class]).run(result)
    problems = [t.id().rsplit(".", 1)[-1] + ": " + (tb.strip().splitlines() or [""])[-1][:200]
                for t, tb in result.errors + result.failures]
    return {{"records": records, "problems": problems}}
'''


def literal_sites(tree: ast.AST) -> list[tuple[ast.Call, int]]:
    """Every equality assertion with exactly one literal side: (the call, which argument is literal)."""
    sites = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in EQUAL_ASSERTS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self"
            and len(node.args) >= 2
        ):
            continue
        first, second = literal(node.args[0])[0], literal(node.args[1])[0]
        if first != second:
            sites.append((node, 0 if first else 1))
    sites.sort(key=lambda s: (s[0].lineno, s[0].col_offset))
    return sites


def instrumented(tests: str, keep: set[int] | None = None) -> str:
    """The tests with site k (k in `keep`, all when None) recording its computed side, not asserting."""
    tree = ast.parse(tests)
    for k, (call, lit) in enumerate(literal_sites(tree)):
        if keep is None or k in keep:
            call.func = ast.Name(RECORDER, ast.Load())
            call.args, call.keywords = [ast.Constant(k), call.args[1 - lit]], []
    return ast.unparse(ast.fix_missing_locations(tree))


def regenerated(tests: str, new_values: dict[int, Any]) -> str:
    """The tests with site k's literal replaced by `new_values[k]`."""
    tree = ast.parse(tests)
    for k, (call, lit) in enumerate(literal_sites(tree)):
        if k in new_values:
            call.args[lit] = ast.parse(repr(new_values[k]), mode="eval").body
    return ast.unparse(tree)


def _values(result) -> tuple[dict[str, list[str]] | None, list[str], str]:
    """(records, problems, "") from one runner job, or (None, [], why it did not run)."""
    calls = result.calls or []
    if not calls:
        return None, [], (result.reason or result.verdict or "no result")[:200]
    call = calls[0]
    if not call.ok or not isinstance(call.value, dict):
        return None, [], (call.error or "the test runner failed")[:200]
    return call.value.get("records", {}), list(call.value.get("problems", [])), ""


def _recorded(records: dict[str, list[str]], k: int) -> tuple[bool, Any]:
    """(True, the value) when site k recorded exactly one value that reads back as a literal."""
    got = records.get(str(k), [])
    return literal(got[0]) if len(got) == 1 else (False, None)


def drop_examples(prompt: str) -> tuple[str, int]:
    """The prompt without its doctest lines (`>>>`, and the output lines under them up to a blank line
    or the docstring's end), and how many `>>>` lines went: their outputs cannot be recomputed."""
    lines = prompt.splitlines(keepends=True)
    out, dropped, in_example = [], 0, False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith(">>>") or stripped.startswith("..."):
            dropped += stripped.startswith(">>>")
            in_example = True
            continue
        if in_example and stripped and not stripped.startswith(('"""', "'''")):
            continue  # an example's output
        in_example = False
        out.append(line)
    text = "".join(out)
    if dropped:  # an "Example:" heading left with nothing under it
        text = re.sub(r"(?m)^[ \t]*Examples?:?[ \t]*\n(?=[ \t]*(\n|\"\"\"|'''))", "", text)
    return text, dropped


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One proposed rewrite of a unittest task, from the rules or an LLM."""

    logic_type: str
    program: str  # the whole program the tests run against
    solution: str  # what completes `prompt`
    prompt: str  # the new statement (examples not yet dropped)
    change: str  # the sentence that describes the change in prose (Rewrite.change)


def regenerable_sites(
    tasks: Sequence[Task], sandbox, results: list[Rewrite], timeout_s: float
) -> list[dict | None]:
    """Per task, {site index: the original's value} of the asserted literals that can be regenerated
    (None, with the rejection recorded, where there are none or the original fails its tests)."""
    found: list[dict | None] = [None] * len(tasks)
    at, jobs = {}, []
    for i, task in enumerate(tasks):
        try:
            sites = literal_sites(ast.parse(task.tests))
        except (SyntaxError, ValueError) as err:
            results[i].reject("any", "not_rewritable", f"the tests do not parse: {err}"[:200])
            continue
        if not sites:
            why = "no self.assertEqual(..., literal) in the tests to regenerate"
            results[i].reject("any", "not_rewritable", why)
            continue
        at[i] = (sites, len(jobs))
        jobs.append(
            FunctionCalls(task.program() + RUNNER_SOURCE, RUNNER, [[instrumented(task.tests)]], timeout_s)
        )
    ran = sandbox.run_jobs(jobs)
    for i, (sites, j) in at.items():
        records, problems, why = _values(ran[j])
        if records is None or problems:
            detail = why or f"the canonical solution fails its instrumented tests: {problems[:2]}"
            results[i].reject("any", "original_fails", detail[:200])
            continue
        keep = {}
        for k, (call, lit) in enumerate(sites):
            ok, value = _recorded(records, k)
            if ok and value == literal(call.args[lit])[1]:
                keep[k] = value
        if not keep:
            why = "no asserted literal is checked once with a value that reads back as a literal"
            results[i].reject("any", "not_rewritable", why)
            continue
        found[i] = keep
    return found


def validate_candidates(
    tasks: Sequence[Task],
    sites: Sequence[dict | None],
    candidates: Sequence[Sequence[Candidate]],
    sandbox,
    results: list[Rewrite],
    timeout_s: float,
) -> None:
    """Run every candidate on its task's instrumented tests, regenerate the asserted literals, and keep in
    `results` per task the first candidate that passes the regenerated suite while the original fails it."""
    jobs, where = [], []
    for i, (task, keep) in enumerate(zip(tasks, sites)):
        if keep is None:
            continue
        tests = instrumented(task.tests, set(keep))
        for cand in candidates[i]:
            where.append((i, cand))
            jobs.append(FunctionCalls(cand.program + RUNNER_SOURCE, RUNNER, [[tests]], timeout_s))
    ran = sandbox.run_jobs(jobs)

    recorded = []  # (i, candidate, new task) that the recordings accept
    for (i, cand), result in zip(where, ran):
        kind = cand.logic_type
        results[i].tried[kind] = results[i].tried.get(kind, 0) + 1
        records, problems, why = _values(result)
        if records is None or problems:
            # A candidate that breaks an assertion leaklab cannot regenerate (np.testing, assertTrue,
            # assertRaises, a literal checked in a loop) is no valid rewrite of this task.
            reason = "other_asserts" if problems else ("timeout" if "time" in why.lower() else "crashes")
            detail = why or f"an assertion that is not regenerated fails: {problems[:2]}"
            results[i].reject(kind, reason, detail[:200])
            continue
        read_back = {k: _recorded(records, k) for k in sites[i]}
        new_values = {k: value for k, (ok, value) in read_back.items() if ok}
        if len(new_values) < len(sites[i]):
            detail = "an asserted value is not a literal or was checked more than once"
            results[i].reject(kind, "not_literal", detail)
            continue
        if all(type(new_values[k]) is type(v) and new_values[k] == v for k, v in sites[i].items()):
            detail = "same value as the original at every asserted literal"
            results[i].reject(kind, "equivalent", detail)
            continue
        recorded.append((i, cand, _new_task(tasks[i], cand, new_values)))

    # The real judge on every candidate the recordings accepted (`rewriting` too counts all that pass).
    items = [pair for i, cand, new in recorded for pair in ((new, cand.solution), (new, tasks[i].solution))]
    verdicts = check_many(items, sandbox, timeout_s=timeout_s)
    for n, (i, cand, new_task) in enumerate(recorded):
        mine, original = verdicts[2 * n], verdicts[2 * n + 1]
        if mine.passed and not original.passed:
            results[i].accept(new_task, cand.logic_type, cand.change)
            continue
        why = "the original solution passes the regenerated tests"
        if not mine.passed:
            why = f"the rewrite fails its regenerated tests: {mine.reason}"
        results[i].reject(cand.logic_type, "regenerated_suite", why[:200])


def rewrite_unittest_tasks(
    tasks: Sequence[Task], sandbox, *, seed: int = 0, per_type: int = 2, timeout_s: float = 5.0
) -> list[Rewrite]:
    """One validated rule-based rewrite per unittest task (or None with the reasons), in order."""
    results = [Rewrite(t.task_id) for t in tasks]
    sites = regenerable_sites(tasks, sandbox, results, timeout_s)
    candidates: list[list[Candidate]] = [[] for _ in tasks]
    for i, task in enumerate(tasks):
        if sites[i] is None:
            continue
        rng = random.Random(f"rewrite-sites:{seed}:{task.task_id}")
        try:
            edits = candidate_edits(task, rng)
        except NotRewritable as err:
            results[i].reject("any", "not_rewritable", str(err)[:200])
            sites[i] = None
            continue
        for logic_type, edit, program, solution in parsed_edits(task, edits, rng, per_type, results[i]):
            prompt = state_change(task.prompt, _docstring_span(task), edit.sentence)
            candidates[i].append(Candidate(logic_type, program, solution, prompt, edit.sentence))
    validate_candidates(tasks, sites, candidates, sandbox, results, timeout_s)
    return results


def _new_task(task: Task, cand: Candidate, new_values: dict[int, Any]) -> Task:
    prompt, dropped = drop_examples(cand.prompt)
    return dataclasses.replace(
        task,
        task_id=f"{task.task_id}/rewrite",
        prompt=prompt,
        solution=cand.solution,
        tests=regenerated(task.tests, new_values),
        metadata={
            **task.metadata,
            "rewrite_of": task.task_id,
            "logic_type": cand.logic_type,
            "change": cand.change,
            "regenerated_asserts": len(new_values),
            "examples_dropped": dropped,
        },
    )
