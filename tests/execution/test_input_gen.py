"""Stage-2 inputs generated from a function's signature (no LLM), and their effect on HyClone's verdict."""

import pytest

from leaklab.execution.crossexec import CrossPair, cross_execute
from leaklab.execution.input_gen import generate_inputs

TYPED = (
    "from typing import List, Optional\n"
    "def f(n: int, s: str, xs: List[int], ws: 'list[str]', m: dict[str, int], o: Optional[float]):\n"
    "    return n\n"
)


def test_annotated_parameters_get_values_of_their_types():
    got = generate_inputs(TYPED, "f", n=10, seed=0)
    assert len(got.inputs) == 10 and got.sources == {"annotations": 10}
    for n, s, xs, ws, m, o in got.inputs:
        assert type(n) is int and type(s) is str and type(o) in (float, type(None))
        assert isinstance(xs, list) and all(type(x) is int for x in xs)
        assert isinstance(ws, list) and all(type(w) is str for w in ws)
        assert isinstance(m, dict) and all(type(k) is str and type(v) is int for k, v in m.items())
    assert len({repr(a) for a in got.inputs}) == 10  # no repeats
    assert any(xs == [] for _, _, xs, *_ in got.inputs) or any(len(xs) > 1 for _, _, xs, *_ in got.inputs)


def test_defaults_are_left_out_and_nudged():
    source = "def g(a: int, b=3, c='x', *args, **kwargs):\n    return a\n"
    got = generate_inputs(source, "g", n=10, seed=1)
    assert got.sources["defaults"] >= 2
    assert all(1 <= len(a) <= 3 for a in got.inputs)  # arity: *args and **kwargs get nothing
    assert any(len(a) == 1 for a in got.inputs)  # both defaults left out
    nudged = [a for a in got.inputs if len(a) == 2]
    assert nudged and all(type(a[1]) is int and a[1] != 3 for a in nudged)  # a nearby int, not the default
    assert any(len(a) == 3 and a[1] == 3 and type(a[2]) is str and a[2] != "x" for a in got.inputs)
    # a required keyword-only argument cannot be passed positionally; a method has `self`
    assert generate_inputs("def h(a, *, k):\n    pass\n", "h").inputs == []
    assert generate_inputs("def h(:\n", "h").inputs == []


def test_task_inputs_are_mutated_keeping_their_types_and_unknowns_get_common_values():
    source = "def u(a, b):\n    return a\n"
    task = [[5, "hello"], [12, "abc"]]
    got = generate_inputs(source, "u", task, n=10, seed=0)
    assert got.sources == {"mutated": len(got.inputs)} and got.inputs
    assert all(type(a) is int and type(b) is str for a, b in got.inputs)
    assert not any(list(a) in task for a in got.inputs)  # never a task input again
    plain = generate_inputs(source, "u", n=6, seed=0)  # nothing to learn from: common values
    assert plain.sources == {"common": 6} and all(len(a) == 2 for a in plain.inputs)


def test_the_same_seed_gives_the_same_inputs():
    first = generate_inputs(TYPED, "f", [[1, "a", [1], ["b"], {}, None]], n=8, seed=3)
    assert first == generate_inputs(TYPED, "f", [[1, "a", [1], ["b"], {}, None]], n=8, seed=3)
    assert first != generate_inputs(TYPED, "f", [[1, "a", [1], ["b"], {}, None]], n=8, seed=4)
    assert generate_inputs(TYPED, "f", n=0).inputs == []


@pytest.fixture(scope="module")
def sandbox():
    from leaklab.execution.sandbox import Sandbox

    with Sandbox(workers=1, timeout_s=5.0) as box:
        yield box


def test_a_pair_that_agrees_on_the_task_inputs_only_is_no_clone_with_generated_inputs(sandbox):
    ref = "def f(xs: list[int]) -> int:\n    return sum(xs)\n"
    near = "def f(xs: list[int]) -> int:\n    return sum(xs[:2])\n"  # wrong on longer lists
    pair = CrossPair(ref, near, "f", [[[1, 2]], [[3]]])
    (plain,) = cross_execute([pair], sandbox)
    assert plain.clone and plain.similarity == 1.0 and plain.generated_inputs == {}
    (gen,) = cross_execute([pair], sandbox, generated=10)
    assert gen.clone is False and gen.s_a < 0.8 and gen.s_b == gen.s_a
    made = gen.generated_inputs
    assert set(made) == {"annotations", "mutated"} and 5 <= sum(made.values()) <= 10
    assert gen.n_inputs == 2 + sum(made.values())  # the reference runs on every generated input here
    # a pair with no task inputs now reaches execution on the generated ones alone
    (alone,) = cross_execute([CrossPair(ref, ref, "f", [])], sandbox, generated=5)
    assert alone.clone and alone.n_inputs == 5 and alone.reason == ""


def test_the_setting_is_validated():
    from leaklab.evaluations.counterfactual import CounterfactualConfig

    assert CounterfactualConfig().check() == []
    (problem,) = CounterfactualConfig(hyclone_generated_inputs=51).check()
    assert problem.startswith("evaluate.counterfactual.hyclone_generated_inputs: must lie in [0, 50]")
    assert CounterfactualConfig(hyclone_generated_inputs=0).check() == []


def test_dict_inputs_with_mixed_key_types_do_not_crash_the_pairing(sandbox):
    # HumanEval/95 calls its function with {"p": "pineapple", 5: "banana"}: json.dumps(sort_keys) raises
    ref = "def f(d):\n    return len(d)\n"
    (got,) = cross_execute([CrossPair(ref, ref, "f", [[{"p": "x", 5: "y"}], [{}]])], sandbox, generated=4)
    assert got.clone and got.n_inputs >= 2
