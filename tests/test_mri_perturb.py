"""MRI's perturbed sets: rule-based rewriting (validated in the sandbox), mutation, the cache."""

from __future__ import annotations

import ast
import random

import pytest

from leaklab.data import synthetic
from leaklab.data.benchmarks import load_humaneval
from leaklab.data.tasks import Task
from leaklab.execution.correctness import check_many
from leaklab.execution.sandbox import Sandbox
from leaklab.perturb import mri_sets
from leaklab.perturb.mutation import KINDS, mutate_task, plan
from leaklab.perturb.rewriting import (
    LOGIC_TYPES,
    call_inputs,
    candidate_edits,
    edited_task,
    rewrite_tasks,
    state_change,
)

ADD = Task(
    task_id="toy/add",
    benchmark="toy",
    prompt='def add(a, b):\n    """Add a and b.\n    >>> add(2, 3)\n    5\n    """\n',
    solution="    return a + b\n",
    entry_point="add",
    tests="def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(0, 0) == 0\n",
)
SAME = Task(  # every edit of `return x * 0` that runs gives 0 on these inputs or crashes
    task_id="toy/zero",
    benchmark="toy",
    prompt='def zero(x):\n    """Zero."""\n',
    solution="    return x * 0\n",
    entry_point="zero",
    tests="def check(candidate):\n    assert candidate(0) == 0\n",
)


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2, timeout_s=5.0) as sb:
        yield sb


@pytest.fixture(scope="module")
def humaneval():
    return load_humaneval()


def test_test_inputs_are_the_literal_candidate_calls(humaneval):
    assert call_inputs(ADD) == [[2, 3], [0, 0]]
    he53 = next(t for t in humaneval if t.task_id == "HumanEval/53")
    inputs = call_inputs(he53)  # the random calls in its loop are skipped
    assert [0, 1] in inputs and [7, 5] in inputs and len(inputs) == 5


def test_candidates_change_only_the_solution_and_keep_the_signature(humaneval):
    for task in humaneval[:30]:
        sites = candidate_edits(task, random.Random(0), call_inputs(task)[0], None, False)
        for edits in sites.values():
            for edit in edits:
                program, solution = edited_task(task, edit)
                assert program == task.prompt + solution and program != task.program()
                ast.parse(program)


def test_operator_change_on_a_plus(humaneval):
    sites = candidate_edits(ADD, random.Random(0))
    texts = {edited_task(ADD, e)[1] for e in sites["operator_change"]}
    assert "    return a - b\n" in texts


def test_state_change_goes_before_the_examples():
    prompt = state_change(ADD.prompt, (19, len(ADD.prompt) - 1), "Subtract instead.")
    assert prompt.index("Subtract instead.") < prompt.index(">>>")
    ast.parse(prompt)


def test_rewrites_are_validated_and_their_tests_come_from_the_rewrite(sandbox, humaneval):
    tasks = [ADD, SAME, *humaneval[:12]]
    results = rewrite_tasks(tasks, sandbox, seed=0)
    assert results[0].task is not None and results[1].task is None
    # Nothing passed for `x * 0`: every candidate is rejected with its type and reason.
    assert results[1].rejections and all(r["reason"] != "" for r in results[1].rejections)
    assert {r["reason"] for r in results[1].rejections} <= {
        "equivalent",
        "crashes",
        "no_site",
        "syntax",
        "timeout",
    }
    rewritten = [(t, r) for t, r in zip(tasks, results) if r.task is not None]
    assert len(rewritten) >= 10
    new_pass = check_many([(r.task, r.task.solution) for _, r in rewritten], sandbox)
    old_on_new = check_many([(r.task, t.solution) for t, r in rewritten], sandbox)
    assert all(x.passed for x in new_pass)  # the rewrite passes its own tests
    assert not any(x.passed for x in old_on_new)  # and the original solution fails them
    for t, r in rewritten:
        assert r.logic_type in LOGIC_TYPES and r.change in r.task.prompt
        assert r.task.entry_point == t.entry_point
        sig = t.prompt[t.prompt.index(f"def {t.entry_point}(") :].split("\n")[0]
        assert sig in r.task.prompt  # signature kept
    # The example's output in the prompt is the rewrite's: add(2, 3) shows what the rewrite returns.
    add = results[0].task
    expected = next(c["output"] for c in add.test_cases if c["input"] == [2, 3])
    assert f">>> add(2, 3)\n    {expected!r}\n" in add.prompt


def test_synthetic_tasks_use_the_family_rewrite(sandbox):
    tasks = synthetic.build_synthetic(seed=5, size=4, sandbox=sandbox)
    results = rewrite_tasks(tasks, sandbox, seed=0)
    for task, r in zip(tasks, results):
        assert r.task is not None and r.task.metadata["rewrite_of"] == task.task_id
        assert r.logic_type in ("operator_change", "constant_swap")


def test_mutation_counts_and_protected_text(humaneval):
    for task in humaneval[:40]:
        mutated, info = mutate_task(task, random.Random(1))
        assert mutated is not None, info
        assert all(info[k] >= 1 for k in KINDS)
        ast.parse(mutated.prompt)
        # identifiers and doctest lines untouched
        assert f"def {task.entry_point}(" in mutated.prompt
        old_examples = [ln for ln in task.prompt.splitlines() if ln.strip().startswith(">>>")]
        new_examples = [ln for ln in mutated.prompt.splitlines() if ln.strip().startswith(">>>")]
        assert old_examples == new_examples
        assert mutated.solution == task.solution and mutated.tests == task.tests
    assert (
        mutate_task(humaneval[0], random.Random(1))[0].prompt
        == mutate_task(humaneval[0], random.Random(1))[0].prompt
    )


def test_plan_is_about_four_operations_per_five_words():
    rng = random.Random(0)
    assert len(plan(50, rng)) == 40 and len(plan(2, rng)) == 3
    kinds = plan(10, rng)
    assert all(kinds.count(k) >= 1 for k in KINDS)


def test_the_cache_builds_once_and_round_trips(tmp_path, sandbox, humaneval):
    tasks = [ADD, *humaneval[:3]]
    logs = []
    first = mri_sets.perturbed_sets_for(tasks, cache_dir=tmp_path, sandbox=sandbox, log=logs.append)
    again = mri_sets.perturbed_sets_for(tasks, cache_dir=tmp_path, sandbox=sandbox, log=logs.append)
    assert "building" in logs[0] and "from" in logs[-1]
    assert [s.rewrite for s in first] == [s.rewrite for s in again]
    assert again[0].rewrite.test_cases == first[0].rewrite.test_cases
    info = mri_sets.write_run_sets(tmp_path / "run", first) if (tmp_path / "run").mkdir() is None else None
    assert info["tasks"] == 4 and info["paraphrase"].startswith("not computed")
    assert set(mri_sets.read_run_sets(tmp_path / "run")) == {t.task_id for t in tasks}
