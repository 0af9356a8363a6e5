"""Rule-based MRI rewriting of tasks whose tests are a unittest class (BigCodeBench): no input/output
pairs to recompute, so the tests' expected literals are regenerated instead.

    results = rewrite_unittest_tasks(tasks, sandbox, seed=0, per_type=2)   # list[Rewrite]

How (every program runs in the sandbox):
  1. Sites: each `self.assertEqual(expr, LITERAL)` (or LITERAL first; also assertListEqual / TupleEqual
     / DictEqual / SetEqual) in the tests. Each site becomes `__leaklab_record__(k, expr)`, which records
     repr(expr) instead of asserting; every other assertion is left as it is.
  2. The canonical program runs the instrumented tests. A site is regenerable when it recorded exactly
     one value (not a loop), the value reads back as a Python literal and equals the test's literal
     (so the recording matches what the test checks). The instrumented suite must otherwise pass.
  3. Each candidate edit of the solution (the operators of `rewriting.py`) runs the tests with only
     the regenerable sites instrumented. A candidate is accepted when every other assertion still
     passes, each regenerable site recorded one literal value, and at least one differs from the
     original's. The new tests are the old ones with those literals replaced by the candidate's values.
  4. The rewritten task goes through the real judge (`check_many`, the judged unittest path): the
     rewritten solution must pass the regenerated tests and the ORIGINAL solution must fail them.
     Otherwise the candidate is rejected ("regenerated_suite").
A task without a regenerable site is not rewritable by rule (`not_rewritable`, the reason says so);
the LLM backend (`evaluate.mri.llm_rewrite`) then is the path, through the same checks of its outputs.
The new prompt names the change as `rewriting.py` does; `>>>` examples in the docstring cannot be
recomputed from a unittest task, so they are dropped from the new prompt (metadata "examples_dropped").
"""

from __future__ import annotations

import ast
import dataclasses
import random
import re
from collections.abc import Sequence
from typing import Any

from leaklab.data.tasks import Task
from leaklab.perturb.rewriting import (
    LOGIC_TYPES,
    NotRewritable,
    Rewrite,
    _docstring_span,
    candidate_edits,
    change_sentence,
    edited_task,
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


def _literal(node: ast.AST) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


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
        first, second = _literal(node.args[0])[0], _literal(node.args[1])[0]
        if first != second:
            sites.append((node, 0 if first else 1))
    sites.sort(key=lambda s: (s[0].lineno, s[0].col_offset))
    return sites


def instrumented(tests: str, keep: set[int] | None = None) -> str:
    """The tests with site k (k in `keep`, all when None) recording its computed side, not asserting."""
    tree = ast.parse(tests)
    sites = literal_sites(tree)
    by_id = {id(call): (k, lit) for k, (call, lit) in enumerate(sites) if keep is None or k in keep}

    class Swap(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            self.generic_visit(node)
            if id(node) not in by_id:
                return node
            k, lit = by_id[id(node)]
            computed = node.args[1 - lit]
            return ast.Call(ast.Name(RECORDER, ast.Load()), [ast.Constant(k), computed], [])

    return ast.unparse(ast.fix_missing_locations(Swap().visit(tree)))


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


def _read_back(text: str) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


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


def rewrite_unittest_tasks(
    tasks: Sequence[Task], sandbox, *, seed: int = 0, per_type: int = 2, timeout_s: float = 5.0
) -> list[Rewrite]:
    """One validated rewrite per unittest task (or None with the reasons), in the order of `tasks`."""
    from leaklab.execution.correctness import check_many
    from leaklab.execution.sandbox import FunctionCalls

    results = [Rewrite(t.task_id) for t in tasks]
    plans: list[dict | None] = [None] * len(tasks)
    jobs = []
    for i, task in enumerate(tasks):
        try:
            tree = ast.parse(task.tests)
        except (SyntaxError, ValueError) as err:
            results[i].rejections.append({"type": "any", "reason": "not_rewritable", "detail": f"the tests do not parse: {err}"[:200]})  # fmt: skip
            continue
        sites = literal_sites(tree)
        if not sites:
            why = "no self.assertEqual(..., literal) in the tests to regenerate"
            results[i].rejections.append({"type": "any", "reason": "not_rewritable", "detail": why})
            continue
        plans[i] = {"sites": sites, "job": len(jobs)}
        jobs.append(
            FunctionCalls(task.program() + RUNNER_SOURCE, RUNNER, [[instrumented(task.tests)]], timeout_s)
        )
    ran = sandbox.run_jobs(jobs)

    jobs = []
    for i, (task, plan) in enumerate(zip(tasks, plans)):
        if plan is None:
            continue
        records, problems, why = _values(ran[plan["job"]])
        if records is None or problems:
            detail = why or f"the canonical solution fails its instrumented tests: {problems[:2]}"
            results[i].rejections.append({"type": "any", "reason": "original_fails", "detail": detail[:200]})
            plans[i] = None
            continue
        keep = {}
        for k, (call, lit) in enumerate(plan["sites"]):
            got = records.get(str(k), [])
            ok, value = _read_back(got[0]) if len(got) == 1 else (False, None)
            if ok and value == _literal(call.args[lit])[1]:
                keep[k] = value
        if not keep:
            why = "no asserted literal is checked once with a value that reads back as a literal"
            results[i].rejections.append({"type": "any", "reason": "not_rewritable", "detail": why})
            plans[i] = None
            continue
        plan["original"] = keep
        rng = random.Random(f"rewrite-sites:{seed}:{task.task_id}")
        try:
            sites = candidate_edits(task, rng)
        except NotRewritable as err:
            results[i].rejections.append(
                {"type": "any", "reason": "not_rewritable", "detail": str(err)[:200]}
            )
            plans[i] = None
            continue
        tests = instrumented(task.tests, set(keep))
        order = list(LOGIC_TYPES)
        rng.shuffle(order)
        plan["candidates"] = []
        for logic_type in order:
            if not sites[logic_type]:
                results[i].rejections.append({"type": logic_type, "reason": "no_site", "detail": "no place in the solution to apply it"})  # fmt: skip
            for edit in sites[logic_type][:per_type]:
                try:
                    program, solution = edited_task(task, edit)
                    ast.parse(program)
                except (NotRewritable, SyntaxError, ValueError) as err:
                    results[i].rejections.append({"type": logic_type, "reason": "syntax", "detail": str(err)[:200]})  # fmt: skip
                    continue
                plan["candidates"].append((edit, solution, len(jobs)))
                jobs.append(FunctionCalls(program + RUNNER_SOURCE, RUNNER, [[tests]], timeout_s))
    ran = sandbox.run_jobs(jobs)

    # Accepted by the recordings; each task's candidates in order until one survives the real judge.
    pending: dict[int, list] = {}
    for i, plan in enumerate(plans):
        if plan is None:
            continue
        for edit, solution, j in plan["candidates"]:
            kind = edit.logic_type
            results[i].tried[kind] = results[i].tried.get(kind, 0) + 1
            records, problems, why = _values(ran[j])
            if records is None or problems:
                # A candidate that breaks an assertion leaklab cannot regenerate (np.testing, assertTrue,
                # assertRaises, a literal checked in a loop) is no valid rewrite of this task.
                reason = "other_asserts" if problems else ("timeout" if "time" in why.lower() else "crashes")
                detail = why or f"an assertion that is not regenerated fails: {problems[:2]}"
                results[i].rejections.append({"type": kind, "reason": reason, "detail": detail[:200]})
                continue
            new_values = {}
            for k in plan["original"]:
                got = records.get(str(k), [])
                ok, value = _read_back(got[0]) if len(got) == 1 else (False, None)
                if not ok:
                    break
                new_values[k] = value
            if len(new_values) < len(plan["original"]):
                detail = "an asserted value is not a literal or was checked more than once"
                results[i].rejections.append({"type": kind, "reason": "not_literal", "detail": detail})
                continue
            if all(_same(new_values[k], v) for k, v in plan["original"].items()):
                detail = "same value as the original at every asserted literal"
                results[i].rejections.append({"type": kind, "reason": "equivalent", "detail": detail})
                continue
            pending.setdefault(i, []).append((edit, solution, new_values))

    # The real judge on every candidate the recordings accepted (as `rewriting` counts every candidate
    # that passes); each task keeps the first in its order that passes.
    order = [(i, edit, solution, _new_task(tasks[i], edit, solution, values)) for i, queue in pending.items() for edit, solution, values in queue]  # fmt: skip
    items = [pair for i, _, solution, new in order for pair in ((new, solution), (new, tasks[i].solution))]
    verdicts = check_many(items, sandbox, timeout_s=timeout_s)
    for n, (i, edit, _, new_task) in enumerate(order):
        mine, original = verdicts[2 * n], verdicts[2 * n + 1]
        kind = edit.logic_type
        if not mine.passed or original.passed:
            detail = (
                f"the rewrite fails its regenerated tests: {mine.reason}"
                if not mine.passed
                else "the original solution passes the regenerated tests"
            )
            results[i].rejections.append({"type": kind, "reason": "regenerated_suite", "detail": detail[:200]})  # fmt: skip
            continue
        results[i].accepted[kind] = results[i].accepted.get(kind, 0) + 1
        if results[i].task is None:
            results[i].task, results[i].logic_type = new_task, kind
            results[i].change = change_sentence(edit)
    return results


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _new_task(task: Task, edit, solution: str, new_values: dict[int, Any]) -> Task:
    prompt, dropped = drop_examples(task.prompt)
    probe = dataclasses.replace(task, prompt=prompt)
    prompt = state_change(prompt, _docstring_span(probe), change_sentence(edit))
    return dataclasses.replace(
        task,
        task_id=f"{task.task_id}/rewrite",
        prompt=prompt,
        solution=solution,
        tests=regenerated(task.tests, new_values),
        metadata={
            **task.metadata,
            "rewrite_of": task.task_id,
            "logic_type": edit.logic_type,
            "change": change_sentence(edit),
            "regenerated_asserts": len(new_values),
            "examples_dropped": dropped,
        },
    )
