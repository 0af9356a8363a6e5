"""The synthetic benchmark: seeded, shared families, canonical solutions that pass in the sandbox."""

from __future__ import annotations

import ast
import random
from collections import Counter

import pytest

from leaklab.data import synthetic
from leaklab.data.benchmarks import load_benchmark
from leaklab.data.splits import split_members
from leaklab.execution.correctness import check_many
from leaklab.execution.sandbox import Sandbox

N = 2 * len(synthetic.FAMILIES)  # every family twice


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2, timeout_s=5.0) as sb:
        yield sb


@pytest.fixture(scope="module")
def tasks(sandbox):
    return synthetic.build_synthetic(seed=3, size=N, sandbox=sandbox)


def test_at_least_thirty_families_each_used(tasks):
    assert len(synthetic.FAMILIES) >= 30
    assert len({f.name for f in synthetic.FAMILIES}) == len(synthetic.FAMILIES)
    counts = Counter(t.metadata["family"] for t in tasks)
    assert set(counts) == set(synthetic.FAMILY_BY_NAME) and set(counts.values()) == {2}


def test_drafts_are_deterministic_for_a_seed_and_differ_between_seeds():
    a = synthetic.drafts(0, 200)
    b = synthetic.drafts(0, 100)
    c = synthetic.drafts(1, 200)
    text = [d.signature + d.description + d.solution + repr(d.inputs) for d in a]
    assert text[:100] == [d.signature + d.description + d.solution + repr(d.inputs) for d in b]
    assert sum(t != d.signature + d.description + d.solution + repr(d.inputs) for t, d in zip(text, c)) > 150


def test_tasks_are_humaneval_shaped(tasks):
    for t in tasks:
        assert t.benchmark == "synthetic" and t.test_type == "function" and t.prompt_is_code
        tree = ast.parse(t.prompt + t.solution)
        (fn,) = tree.body
        assert fn.name == t.entry_point
        doc = ast.get_docstring(fn)
        assert doc.count(">>> ") == synthetic.N_EXAMPLES
        assert t.tests.startswith("def check(candidate):")
        assert t.tests.count("assert candidate(") == synthetic.N_TESTS


def test_every_canonical_solution_passes_and_a_wrong_one_fails(tasks, sandbox):
    results = check_many([(t, t.solution) for t in tasks], sandbox)
    assert [r.verdict for r in results] == ["passed"] * len(tasks), [
        r.reason for r in results if not r.passed
    ]
    # The tests can fail: a body that returns nothing fails every task.
    wrong = check_many([(t, "    return None\n") for t in tasks], sandbox)
    assert not any(r.passed for r in wrong)


def test_expected_outputs_are_the_canonical_solutions_outputs(tasks, sandbox):
    t = next(t for t in tasks if t.metadata["family"] == "count_cmp")
    op, k = t.metadata["logic"]["op"], t.metadata["logic"]["k"]
    compare = {">": int.__gt__, "<": int.__lt__, ">=": int.__ge__, "<=": int.__le__}
    compare |= {"==": int.__eq__, "!=": int.__ne__}
    for (values,), out in zip(t.metadata["inputs"], t.metadata["outputs"]):
        assert out == sum(compare[op](v, k) for v in values)


def test_members_and_non_members_share_families_not_tasks():
    # A 4:1 split of 1000 tasks (about 5 non-members per family): every family on both sides.
    drafts = synthetic.drafts(0, 1000)
    split = split_members([f"synthetic/{i}" for i in range(1000)], member_fraction=0.8, seed=0)
    family = {d.task_id: d.family for d in drafts}
    members = {family[i] for i in split.member_ids}
    non_members = {family[i] for i in split.non_member_ids}
    assert members == non_members == set(synthetic.FAMILY_BY_NAME)
    # Same family, other constants or names: no non-member's program is a member's.
    program = {d.task_id: d.signature + d.solution for d in drafts}
    assert not {program[i] for i in split.non_member_ids} & {program[i] for i in split.member_ids}


def test_the_default_size_has_no_repeated_program():
    programs = [d.signature + d.solution for d in synthetic.drafts(0, synthetic.DEFAULT_SIZE)]
    assert len(set(programs)) == len(programs)


def test_rewrite_changes_one_logic_choice_and_keeps_the_surface(tasks, sandbox):
    rng = random.Random(0)
    for t in tasks[: len(synthetic.FAMILIES)]:
        r = synthetic.rewrite(t, rng, sandbox)
        assert r.entry_point == t.entry_point and r.metadata["rewrite_of"] == t.task_id
        changed = r.metadata["changed"]
        assert r.metadata["logic"][changed] != t.metadata["logic"][changed]
        assert {k: v for k, v in r.metadata["logic"].items() if k != changed} == {
            k: v for k, v in t.metadata["logic"].items() if k != changed
        }
        assert r.metadata["inputs"] == t.metadata["inputs"]
        new, old = check_many([(r, r.solution), (r, t.solution)], sandbox)
        assert new.passed, (t.task_id, new.reason)
        assert not old.passed, f"{t.task_id}: the original solution passes its rewrite"
    with pytest.raises(ValueError, match="not a synthetic task"):
        synthetic.rewrite(load_benchmark("humaneval")[0], rng, sandbox)


def test_load_benchmark_builds_once_then_reads_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LEAKLAB_CACHE", str(tmp_path))
    first = load_benchmark("synthetic", seed=5, max_samples=40)
    assert len(first) == 40 and list(tmp_path.glob("synthetic/seed5-n40-*.jsonl"))

    def no_build(*a, **k):
        raise AssertionError("built again instead of read from the cache")

    monkeypatch.setattr(synthetic, "build_synthetic", no_build)
    again = load_benchmark("synthetic", seed=5, max_samples=40)
    assert again == first and [t.metadata for t in again] == [t.metadata for t in first]
    with pytest.raises(ValueError, match="data.path"):
        load_benchmark("synthetic", path="tasks.jsonl")


def test_recipe_accepts_the_synthetic_benchmark():
    from leaklab.recipe import load_recipe

    assert load_recipe("tiny_cpt", ["data.benchmark=synthetic"]).data.benchmark == "synthetic"


def _bound_and_used(solution: str) -> tuple[set[str], set[str]]:
    """Names a one-line body binds (comprehension targets) and names it reads."""
    tree = ast.parse(solution.strip().removeprefix("return "))
    bound = {n.id for c in ast.walk(tree) if isinstance(c, ast.comprehension) for n in ast.walk(c.target)
             if isinstance(n, ast.Name)}  # fmt: skip
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return bound, used


def test_solution_names_come_from_the_prompt_or_are_fixed_per_family(tasks):
    """A task is solvable from its prompt alone: every name the solution reads is a builtin, shown in the
    prompt (function, arguments), or a loop variable that every task of its family binds alike."""
    import builtins

    loop_vars: dict[str, set[frozenset[str]]] = {}
    for d in synthetic.drafts(5, 6 * len(synthetic.FAMILIES)):
        bound, used = _bound_and_used(d.solution)
        loop_vars.setdefault(d.family, set()).add(frozenset(bound))
        free = used - bound - set(d.params)
        assert all(hasattr(builtins, name) for name in free), (d.family, d.solution, free)
    varying = {f: v for f, v in loop_vars.items() if len(v) > 1}
    assert not varying, f"loop variables drawn per task: {varying}"
    # the built tasks' prompts hold every argument the solution reads
    for t in tasks:
        bound, used = _bound_and_used(t.solution)
        for name in used - bound:
            assert hasattr(builtins, name) or name in t.prompt, (t.task_id, name)
