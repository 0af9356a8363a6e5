"""MRI rewriting of unittest tasks (BigCodeBench): asserted literals regenerated in the sandbox, the
rewrite passes its regenerated suite and the original solution fails it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from leaklab.data.benchmarks import load_bigcodebench
from leaklab.data.tasks import Task
from leaklab.execution.correctness import check_many
from leaklab.execution.sandbox import Sandbox
from leaklab.perturb import mri_sets
from leaklab.perturb.rewriting import quoted_code
from leaklab.perturb.unittest_rewrite import drop_examples, instrumented, literal_sites, regenerated

TESTS = """import unittest


class TestCases(unittest.TestCase):
    def test_some(self):
        self.assertEqual(task_func("a bb ccc dddd", 2), (2, "dddd"))

    def test_literal_first(self):
        self.assertEqual((0, None), task_func("x y", 3))

    def test_loop(self):
        for n in range(2):
            self.assertEqual(task_func("zz", 5), (0, None))

    def test_type(self):
        with self.assertRaises(TypeError):
            task_func(None, 1)
        self.assertTrue(isinstance(task_func("q", 0)[0], int))
"""
LONG_WORDS = Task(
    task_id="BigCodeBench/900",
    benchmark="bigcodebench",
    prompt=(
        "import re\n\n\ndef task_func(text, n):\n"
        '    """\n    Count the words of text longer than n characters and name the longest.\n\n'
        "    Returns:\n    - tuple: (count, longest word or None)\n\n"
        "    Example:\n    >>> task_func('hello big world', 3)\n    (2, 'hello')\n    \"\"\"\n"
    ),
    solution=(
        '    words = re.findall(r"\\w+", text)\n'
        "    long = [w for w in words if len(w) > n]\n"
        "    return len(long), (max(long, key=len) if long else None)\n"
    ),
    entry_point="task_func",
    tests=TESTS,
    test_type="unittest",
)
FIXTURE = Path(__file__).parent.parent / "fixtures" / "bigcodebench" / "bigcodebench-fixture.jsonl"


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2, timeout_s=10.0) as sb:
        yield sb


def test_sites_are_equality_asserts_with_one_literal_side():
    sites = literal_sites(ast.parse(TESTS))
    assert [(call.lineno, lit) for call, lit in sites] == [(6, 1), (9, 0), (13, 1)]
    text = instrumented(TESTS, keep={1})
    assert "__leaklab_record__(1, task_func('x y', 3))" in text
    assert "self.assertEqual(task_func('a bb ccc dddd', 2), (2, 'dddd'))" in text  # not kept: unchanged
    again = regenerated(TESTS, {0: (3, "dddd"), 1: (1, "yy")})
    assert "(3, 'dddd')" in again and "self.assertEqual((1, 'yy'), task_func('x y', 3))" in again
    assert "assertRaises(TypeError)" in again


def test_doctest_examples_are_dropped_with_their_heading():
    text, dropped = drop_examples(LONG_WORDS.prompt)
    assert dropped == 1 and ">>>" not in text and "(2, 'hello')" not in text and "Example" not in text
    assert "Returns:" in text and text.rstrip().endswith('"""')


def test_a_unittest_task_is_rewritten_with_regenerated_asserts(sandbox, tmp_path):
    (ps,) = mri_sets.perturbed_sets_for(
        [LONG_WORDS], cache_dir=tmp_path, sandbox=sandbox, log=lambda *a: None
    )
    new = ps.rewrite
    assert new is not None, ps.rejections
    assert new.test_type == "unittest" and new.task_id == "BigCodeBench/900/rewrite"
    assert ps.logic_type in new.metadata["logic_type"] and new.metadata["examples_dropped"] == 1
    assert new.solution != LONG_WORDS.solution and ps.change in new.prompt
    # the sentence describes the change in words: no code of either solution
    assert (
        quoted_code(new.prompt, [LONG_WORDS.program(), new.program()], "task_func", LONG_WORDS.prompt) == []
    )
    assert 1 <= new.metadata["regenerated_asserts"] <= 2  # the loop's literal is checked twice: kept as is
    # through the real (judged) unittest path: the rewrite passes, the original fails, the original task
    # still passes with its own solution
    mine, original, before = check_many(
        [(new, new.solution), (new, LONG_WORDS.solution), (LONG_WORDS, LONG_WORDS.solution)], sandbox
    )
    assert mine.passed and not original.passed and before.passed
    # every rejection is counted with its reason
    reasons = {r["reason"] for r in ps.rejections}
    assert reasons <= {"no_site", "other_asserts", "equivalent", "not_literal", "regenerated_suite", "crashes", "syntax", "timeout"}  # fmt: skip


def test_fixture_tasks_are_refused_with_reasons(sandbox, tmp_path):
    # BigCodeBench/0: a constant swap breaks another assertion or changes nothing; /1: its array is
    # asserted with np.testing, which leaklab does not regenerate, so every change fails it.
    tasks = load_bigcodebench(FIXTURE)
    sets = mri_sets.perturbed_sets_for(tasks, cache_dir=tmp_path, sandbox=sandbox, log=lambda *a: None)
    assert [s.rewrite for s in sets] == [None, None]
    info = mri_sets.summary(sets)
    assert info["rejections"].get("constant_swap: other_asserts", 0) >= 1
    assert sum(n for r, n in info["rejections"].items() if r.endswith(": equivalent")) >= 1


@pytest.mark.parametrize("name", ["bigcodebench_sft", "bigcodebench_ppo"])
def test_bigcodebench_recipes_evaluate_mri(name):
    from leaklab.recipe import load_recipe

    recipe = load_recipe(name, [f"data.path={FIXTURE}"])
    assert "mri" in recipe.evaluate.evaluations and recipe.evaluate.mri.max_new_tokens == 1024


def test_an_llm_rewrite_of_a_unittest_task_goes_through_the_same_checks(sandbox):
    from test_mri_sets import _Scripted

    from leaklab.perturb.mri_llm import llm_rewrites

    statement = LONG_WORDS.prompt.replace("longer than n", "at least n")
    body = LONG_WORDS.solution.replace("len(w) > n", "len(w) >= n")
    good = f"<type>constraint change</type>\n<code>\n{statement}{body}</code>\n<task>\n{statement}</task>"
    same = good.replace("len(w) >= n", "n < len(w)")  # the same behaviour written otherwise
    results = llm_rewrites([LONG_WORDS, LONG_WORDS], _Scripted([good, same]), sandbox)
    new = results[0].task
    assert new is not None and results[0].logic_type == "constraint_change" and new.test_type == "unittest"
    assert "at least n" in new.prompt and ">>>" not in new.prompt  # the stale example is gone
    mine, original = check_many([(new, new.solution), (new, LONG_WORDS.solution)], sandbox)
    assert mine.passed and not original.passed
    assert results[1].task is None and results[1].rejections[-1]["reason"] == "equivalent"
