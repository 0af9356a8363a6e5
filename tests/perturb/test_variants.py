"""Variants: renaming is alpha-equivalent, layout is untouched, examples are replaced through the
executor, every variant is verified, bad input never raises.

Nothing here runs benchmark code: semantics are checked by comparing ASTs after mapping names back,
and the executor / verifier are fakes (plain Python re-implementations of a few tiny tasks).
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import random
import re

import pytest

from leaklab.data.benchmarks import load_humaneval
from leaklab.data.tasks import Task
from leaklab.perturb import store
from leaklab.perturb.examples import RunError, find_examples, format_value, mutate_value
from leaklab.perturb.identifiers import RESERVED, NotRenamable, analyse_task, program_text
from leaklab.perturb.llm import llm_prompt
from leaklab.perturb.renaming import propose_renames, rename_task
from leaklab.perturb.variants import Verification, make_variants
from leaklab.perturb.vocabulary import SYNONYM_GROUPS, SYNONYMS, SYNONYMS_FILE

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@pytest.fixture(scope="module")
def humaneval() -> dict[str, Task]:
    return {t.task_id: t for t in load_humaneval()}


# --------------------------------------------------------------------------- helpers


class _NameBack(ast.NodeTransformer):
    """Map every identifier through `inverse` and blank docstrings (their prose is compared apart)."""

    def __init__(self, inverse: dict[str, str]):
        self.inverse = inverse

    def back(self, name: str) -> str:
        return self.inverse.get(name, name)

    def visit_Name(self, node):
        node.id = self.back(node.id)
        return node

    def visit_arg(self, node):
        node.arg = self.back(node.arg)
        self.generic_visit(node)
        return node

    def visit_keyword(self, node):
        if node.arg:
            node.arg = self.back(node.arg)
        self.generic_visit(node)
        return node

    def visit_FunctionDef(self, node):
        node.name = self.back(node.name)
        body = node.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(getattr(body[0], "value", None), ast.Constant)
        ):
            body[0].value.value = ""
        self.generic_visit(node)
        return node

    def visit_Global(self, node):
        node.names = [self.back(n) for n in node.names]
        return node

    visit_Nonlocal = visit_Global

    def visit_ExceptHandler(self, node):
        if node.name:
            node.name = self.back(node.name)
        self.generic_visit(node)
        return node


def _normalised(source: str, inverse: dict[str, str] | None = None) -> str:
    tree = _NameBack(inverse or {}).visit(ast.parse(source))
    return ast.dump(tree, include_attributes=False)


def _bound_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return names


def assert_alpha_equivalent(original: Task, variant: Task, renames: dict[str, str]) -> None:
    inverse = {new: old for old, new in renames.items()}
    assert _normalised(program_text(variant)[0], inverse) == _normalised(program_text(original)[0])
    if original.tests.strip():
        assert _normalised(variant.tests, inverse) == _normalised(original.tests)
        # Mapping back would hide a test left pointing at an old name: every name the tests read must
        # exist in the variant program, in the tests themselves, or in the builtins.
        known = _bound_names(ast.parse(program_text(variant)[0])) | _bound_names(ast.parse(variant.tests))
        read = {n.id for n in ast.walk(ast.parse(variant.tests)) if isinstance(n, ast.Name)}
        assert read <= known | set(dir(builtins)), read - known - set(dir(builtins))
    assert variant.entry_point == renames.get(original.entry_point, original.entry_point)


def assert_same_outside_identifiers(original: str, variant: str) -> None:
    """Byte-identical once identifier-like words are cut out: whitespace, comments' punctuation,
    operators, literals' non-word characters are all where they were."""
    assert IDENT.split(variant) == IDENT.split(original)


# --------------------------------------------------------------------------- renaming on HumanEval


def test_every_humaneval_variant_is_alpha_equivalent_with_layout_untouched(humaneval):
    counts = []
    for task in humaneval.values():
        result = make_variants(task, n=3, seed=0)
        counts.append(len(result.variants))
        for variant in result.variants:
            assert_alpha_equivalent(task, variant.task, variant.renames)
            for part in ("prompt", "solution", "tests"):
                assert_same_outside_identifiers(getattr(task, part), getattr(variant.task, part))
            assert variant.task.task_id.startswith(task.task_id + "#v")
    # Every task but HumanEval/160 (it calls eval on a string) gets its three variants.
    assert counts.count(3) == len(humaneval) - 1


def test_entry_point_rename_follows_into_prompt_tests_and_field(humaneval):
    task = humaneval["HumanEval/38"]  # decode_cyclic; its tests call the helper encode_cyclic by name
    variant = make_variants(task, n=1, seed=3).variants[0]
    new_encode = variant.renames["encode_cyclic"]
    assert variant.task.entry_point == variant.renames["decode_cyclic"]
    assert f"def {variant.task.entry_point}(" in variant.task.prompt
    assert f"{new_encode}(str)" in variant.task.tests and not re.search(
        r"\bencode_cyclic\b", variant.task.tests
    )
    # The helper's recursion-free call sites and the docstring mention are renamed too.
    assert not re.search(r"\bencode_cyclic\b", variant.task.prompt + variant.task.solution)
    assert f"encoded with {new_encode} function" in variant.task.prompt


def test_recursion_and_call_sites(humaneval):
    task = Task(
        "t/rec",
        "hand",
        prompt='def fib(n):\n    """Return the n-th Fibonacci number; fib(0) == 0."""\n',
        solution="    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
        entry_point="fib",
        tests="def check(candidate):\n    assert candidate(10) == 55\n",
    )
    variant = make_variants(task, n=1).variants[0]
    new = variant.renames["fib"]
    assert variant.task.solution.count(f"{new}(") == 2
    assert f"{new}(0) == 0" in variant.task.prompt  # a call in prose follows
    assert_alpha_equivalent(task, variant.task, variant.renames)


def test_docstring_mentions_plain_words_only_where_used_as_code(humaneval):
    task = humaneval["HumanEval/2"]  # truncate_number(number): "a positive floating point number"
    variant = make_variants(task, n=1).variants[0]
    assert "floating point number" in variant.task.prompt  # English stays English
    assert f">>> {variant.task.entry_point}(3.5)" in variant.task.prompt
    task = humaneval["HumanEval/129"]  # minPath(grid, k): "positive integer k", "Input: grid = ..."
    variant = make_variants(task, n=1).variants[0]
    new_grid, new_k = variant.renames["grid"], variant.renames["k"]
    assert f"positive integer {new_k}," in variant.task.prompt  # a one-letter name is always code
    assert f"Input: {new_grid} = " in variant.task.prompt and "Given a grid with" in variant.task.prompt


def test_determinism_for_a_seed(humaneval):
    task = humaneval["HumanEval/0"]
    first = [v.task for v in make_variants(task, n=5, seed=7).variants]
    again = [v.task for v in make_variants(task, n=5, seed=7).variants]
    other = [v.task for v in make_variants(task, n=5, seed=8).variants]
    assert first == again
    assert first != other
    assert len({t.prompt + t.solution for t in first}) == 5  # all distinct


# --------------------------------------------------------------------------- what is never renamed

TRICKY = '''import math
from collections import Counter as Tally

LIMIT = 10


class Box:
    size = 3

    def grow(self, size):
        self.size = size + Box.size
        return self


def helper(values, key=None):
    """Sort values; key is passed to sorted."""
    ordered = sorted(values, key=key)  # key= of an outside call keeps its name
    count = Tally(ordered)
    total = 0
    for value in ordered:
        total += value * math.sqrt(count[value])
    try:
        total = total / len(values)
    except ZeroDivisionError as err:
        total = str(err)
    return total


def outer(items):
    seen = 0

    def inner(step):
        nonlocal seen
        seen += step
        return seen

    squares = [item * item for item in items]
    ones = items.count(1)  # an attribute spelled like a renamed variable of helper()
    scale = lambda factor: factor * LIMIT
    return [inner(s) for s in squares], scale(ones), helper(values=items), Box().grow(size=1).size
'''


def _tricky_task() -> Task:
    return Task("t/tricky", "hand", prompt="", solution=TRICKY, entry_point="outer", test_type="call")


def test_builtins_imports_attributes_and_outside_keywords_stay():
    analysis = analyse_task(_tricky_task())
    renamable = set(analysis.functions) | set(analysis.variables)
    for kept in ("math", "Tally", "Counter", "sorted", "len", "str", "Box", "size", "grow", "self"):
        assert kept not in renamable, kept
    assert analysis.frozen["Tally"] == "imported name"
    assert "class" in analysis.frozen["size"]
    assert {"helper", "outer", "inner"} <= set(analysis.functions)
    renamed = {"values", "key", "ordered", "count", "total", "value", "err", "seen", "step", "item", "factor"}
    assert renamed <= renamable

    task = _tricky_task()
    renames = propose_renames(analysis, random.Random(0))
    variant = rename_task(task, renames)
    assert_alpha_equivalent(task, variant, renames)
    assert_same_outside_identifiers(task.solution, variant.solution)
    text = variant.solution
    # The parameter `key` is renamed; the keyword `key=` of the builtin `sorted` is not.
    assert f"sorted({renames['values']}, key={renames['key']})" in text
    assert "self.size = size + Box.size" in text  # attribute and class attribute untouched
    assert "items" not in renames or f"{renames['items']}.count(1)" in text
    assert f"nonlocal {renames['seen']}" in text
    assert f"except ZeroDivisionError as {renames['err']}:" in text
    # A keyword argument of a call to the program's own function follows the parameter rename.
    assert f"{renames['helper']}({renames['values']}=" in text


def test_name_used_both_as_local_and_as_outside_global_is_kept():
    source = "def f(data):\n    total = data\n    return total\n\n\ndef g():\n    return total\n"
    analysis = analyse_task(
        Task("t/shadow", "hand", prompt="", solution=source, entry_point="f", test_type="call")
    )
    assert "total" not in analysis.variables
    assert "builtin or a global defined elsewhere" in analysis.frozen["total"]
    assert "data" in analysis.variables


def test_tests_defining_a_program_name_freeze_it():
    task = Task(
        "t/tests",
        "hand",
        prompt="def f(x):\n",
        solution="    return x + OFFSET\n\nOFFSET = 1\n",
        entry_point="f",
        tests="OFFSET = 1\n\ndef check(candidate):\n    assert candidate(1) == 2\n",
    )
    analysis = analyse_task(task)
    assert "OFFSET" not in analysis.variables and "f" in analysis.functions


def test_new_names_come_from_the_vocabulary_and_are_fresh(humaneval):
    styles = []
    for task in list(humaneval.values())[:40]:
        for variant in make_variants(task, n=2).variants:
            for old, new in variant.renames.items():
                assert new.isidentifier() and new not in RESERVED
                assert not re.fullmatch(r"(var|v|name|func)_?\d+", new)
                styles.append((old, new))
    snake = [(o, n) for o, n in styles if "_" in o.strip("_")]
    assert snake and all("_" in n for o, n in snake)
    assert "values" in SYNONYMS["nums"] and "nums" in SYNONYMS["numbers"]


def test_synonym_groups_read_from_the_data_file_as_they_were_written():
    # the groups were a tuple literal in vocabulary.py; their order and count decide the draws
    assert len(SYNONYM_GROUPS) == 241 and len({w for g in SYNONYM_GROUPS for w in g}) == 708
    assert SYNONYM_GROUPS[0][:4] == ("numbers", "nums", "values", "vals") and len(SYNONYM_GROUPS[0]) == 10
    assert SYNONYM_GROUPS[-1] == ("N", "M", "K", "SIZE", "LIMIT")
    assert ("w", "wd", "word", "ww") in SYNONYM_GROUPS
    assert store.VARIANT_CODE[-1] == SYNONYMS_FILE  # editing the synonyms rebuilds the cached variants


def test_camel_case_stays_camel_case(humaneval):
    variant = make_variants(humaneval["HumanEval/129"], n=1).variants[0]  # minPath
    new = variant.renames["minPath"]
    assert "_" not in new and any(c.isupper() for c in new[1:])


# --------------------------------------------------------------------------- bad input


def test_unparsable_code_gives_no_variant_and_a_reason():
    task = Task("t/bad", "hand", prompt="", solution="def f(:\n    pass\n", entry_point="f", test_type="call")
    result = make_variants(task)
    assert result.variants == [] and "does not parse" in result.reasons[0]


def test_nothing_renamable_gives_no_variant_and_a_reason():
    task = Task("t/none", "hand", prompt="Echo.\n", solution="print(input())\n", test_type="stdio")
    result = make_variants(task)
    assert result.variants == [] and result.reasons[0].startswith("no renamable identifiers")


def test_eval_on_text_refuses_but_eval_of_input_does_not():
    risky = Task("t/eval", "hand", prompt="", solution="x = 1\nprint(eval('x + 1'))\n", test_type="stdio")
    assert "eval" in make_variants(risky).reasons[0]
    fine = Task("t/eval2", "hand", prompt="", solution="x = eval(input())\nprint(x + 1)\n", test_type="stdio")
    assert len(make_variants(fine, n=2).variants) == 2


def test_verification_drops_failing_variants_and_reports_the_fraction(humaneval):
    task = humaneval["HumanEval/0"]
    calls = []

    def verify(candidate: Task) -> bool:
        calls.append(candidate.task_id)
        return len(calls) % 2 == 1  # every second candidate "fails its tests"

    result = make_variants(task, n=4, verify=Verification(verify))
    assert len(result.variants) == 4 and result.tests_run
    assert result.n_candidates == 7 and result.n_verified == 4
    assert [v.task.task_id for v in result.variants] == [f"{task.task_id}#v{i}" for i in range(4)]

    def broken(candidate: Task) -> bool:
        raise RuntimeError("sandbox down")

    result = make_variants(task, n=2, verify=Verification(broken))
    assert result.variants == [] and any("verify raised RuntimeError" in r for r in result.reasons)


# --------------------------------------------------------------------------- tau_t: new examples


def test_examples_are_found_in_the_humaneval_forms(humaneval):
    doctest = find_examples(humaneval["HumanEval/0"])
    assert [ex.args for ex in doctest] == [([1.0, 2.0, 3.0], 0.5), ([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)]
    assert [ex.output_text for ex in doctest] == ["False", "True"]
    arrows = find_examples(humaneval["HumanEval/110"])  # exchange([1, 2, 3, 4], [1, 2, 3, 4]) => "YES"
    assert [ex.output_text for ex in arrows] == ['"YES"', '"NO"']
    pairs = find_examples(humaneval["HumanEval/129"], params=["grid", "k"])  # Input: grid = ..., k = 3
    assert [ex.args[1] for ex in pairs] == [3, 1]
    assert (
        len(find_examples(humaneval["HumanEval/94"], params=["lst"])) == 6
    )  # For lst = [...] the output ...


def test_example_replacement_goes_through_the_executor(humaneval):
    task = humaneval["HumanEval/2"]  # truncate_number(3.5) -> 0.5
    seen = []

    def run_solution(t: Task, inputs: list) -> list:
        seen.append((t.task_id, inputs))
        return [args[0] % 1.0 for args in inputs]  # the task's behaviour, re-implemented here

    result = make_variants(task, n=3, run_solution=run_solution, seed=1)
    assert len(seen) == 1 and seen[0][0] == task.task_id  # one executor call for all variants
    assert all(isinstance(args, list) and len(args) == 1 for args in seen[0][1])
    for variant in result.variants:
        assert variant.examples_replaced == 1
        (ex,) = find_examples(variant.task)
        assert ex.args[0] != 3.5 and ex.args[0] > 0  # positive, as the statement requires
        assert ex.output_text == format_value(round(ex.args[0] % 1.0, 10))
        # Renaming is still exact outside the example.
        stripped = variant.task.prompt.replace(ex.output_text, "0.5").replace(repr(ex.args[0]), "3.5")
        assert_same_outside_identifiers(task.prompt, stripped)


def test_failed_runs_keep_the_original_example(humaneval):
    task = humaneval["HumanEval/0"]

    def run_solution(t: Task, inputs: list) -> list:
        return [RunError("boom")] * len(inputs)

    result = make_variants(task, n=2, run_solution=run_solution)
    assert all(v.examples_replaced == 0 for v in result.variants)
    assert all(">>> " in v.task.prompt and "0.5)\n    False" in v.task.prompt for v in result.variants)


APPS_STDIO = Task(
    "apps/test/hand-1",
    "apps",
    prompt=(
        "You are given n integers. Print their sum.\n\n-----Input-----\n\nThe first line contains n.\n\n"
        "-----Examples-----\nInput\n3\n1 2 3\n\nOutput\n6\n\nInput\n2\n10 -4\n\nOutput\n6\n"
    ),
    solution=(
        "import sys\n\ndef read_ints():\n    return list(map(int, sys.stdin.readline().split()))\n\n"
        "n = int(input())\nvalues = read_ints()\ntotal = 0\nfor v in values:\n    total += v  # running sum\n"
        "print(total)\n"
    ),
    test_cases=({"input": "3\n1 2 3\n", "output": "6\n"},),
    test_type="stdio",
)


def test_apps_stdio_samples_get_new_inputs_and_computed_outputs():
    calls = []

    def run_solution(t: Task, inputs: list) -> list:
        calls.append(inputs)
        return [f"{sum(int(x) for x in stdin.split()[1:])}\n" for stdin in inputs]

    result = make_variants(APPS_STDIO, n=3, run_solution=run_solution)
    assert len(result.variants) == 3 and len(calls) == 1
    assert all(isinstance(stdin, str) for stdin in calls[0])
    for variant in result.variants:
        assert variant.examples_replaced == 2
        for ex in find_examples(variant.task):
            first, rest = ex.args[0].split("\n", 1)
            assert first in ("3", "2")  # the size line is kept
            assert ex.output_text == str(sum(int(x) for x in rest.split()))
        # Module-level names of a stdio program are renamed; the statement's "n" is left alone.
        assert "You are given n integers" in variant.task.prompt
        assert_alpha_equivalent(APPS_STDIO, variant.task, variant.renames)


def test_the_store_runs_an_apps_stdio_solution_in_the_sandbox():
    """The store's executor feeds each new stdin to the solution in the sandbox; the outputs it returns
    become the variants' examples (the path the other stdio test fakes)."""
    from leaklab.execution.sandbox import Sandbox

    task = dataclasses.replace(APPS_STDIO, prompt_is_code=False)  # as the APPS loader marks it
    with Sandbox(workers=1) as sandbox:
        run_solution, _ = store.sandbox_executors(sandbox, {task.task_id: task})
        assert run_solution(task, ["3\n1 2 3\n", "2\n10 -4\n"]) == ["6\n", "6\n"]
        (failed,) = run_solution(task, ["not a number\n"])
        assert isinstance(failed, RunError)


def test_apps_call_task_renames_the_entry_point_in_the_statement():
    task = Task(
        "apps/test/hand-2",
        "apps",
        prompt="Write solve(arr) returning the largest gap.\n\nInput: arr = [1, 5, 2]\nOutput: 4\n\ndef solve(arr):\n\t",
        solution="def solve(arr):\n    best = 0\n    for i in range(1, len(arr)):\n"
        "        best = max(best, abs(arr[i] - arr[i - 1]))\n    return best\n",
        entry_point="solve",
        test_cases=({"input": [[1, 5, 2]], "output": 4},),
        test_type="call",
    )

    def run_solution(t: Task, inputs: list) -> list:
        return [
            max(abs(a - b) for a, b in zip(args[0][1:], args[0])) if len(args[0]) > 1 else 0
            for args in inputs
        ]

    variant = make_variants(task, n=1, run_solution=run_solution).variants[0]
    new_solve, new_arr = variant.renames["solve"], variant.renames["arr"]
    assert variant.task.entry_point == new_solve
    assert f"Write {new_solve}({new_arr}) returning" in variant.task.prompt
    assert f"def {new_solve}({new_arr}):\n\t" in variant.task.prompt
    assert f"Input: {new_arr} = " in variant.task.prompt
    assert variant.task.test_cases == task.test_cases


def test_mutation_is_type_aware_and_keeps_shape():
    rng = random.Random(0)
    for _ in range(50):
        assert mutate_value(True, rng) is True and mutate_value(None, rng) is None
        assert mutate_value(0, rng) == 0
        assert mutate_value(7, rng) > 0 and mutate_value(-7, rng) < 0
        date = mutate_value("03-11-2000", rng)
        assert re.fullmatch(r"\d\d-\d\d-\d\d\d\d", date)
        word = mutate_value("Hello World", rng)
        assert len(word) == 11 and word[5] == " " and word[0].isupper()
        lst = mutate_value([1, 2, 3, 4], rng)
        assert isinstance(lst, list) and lst == sorted(lst)
        assert isinstance(mutate_value((1.5, "a"), rng), tuple)
    assert format_value([1, "x"], like='["a", "b"]') == '[1, "x"]'
    assert format_value([1, 2], like="[1,2]") == "[1,2]"
    assert format_value(0.7000000000000002) == "0.7"


# --------------------------------------------------------------------------- the LLM hook


def test_llm_proposals_are_checked_and_rendered_by_leaklab(humaneval):
    task = humaneval["HumanEval/0"]
    prompts = []

    def good_llm(prompt: str) -> str:
        prompts.append(prompt)
        code = prompt.split("<code>\n")[-1].split("</code>")[0]  # the program, after the instructions
        for old, new in (
            ("has_close_elements", "any_pair_within"),
            ("numbers", "values"),
            ("distance", "gap"),
        ):
            code = re.sub(rf"\b{old}\b", new, code)
        return f"<code>\n{code}</code>"

    result = make_variants(task, n=1, llm=good_llm)
    (variant,) = result.variants
    assert variant.source == "llm"
    assert variant.renames == {
        "has_close_elements": "any_pair_within",
        "numbers": "values",
        "distance": "gap",
    }
    assert variant.task.entry_point == "any_pair_within"
    assert "<code>" in prompts[0] and "has_close_elements" in prompts[0]
    assert "has_close_elements" not in llm_prompt(variant.task)

    def logic_changing_llm(prompt: str) -> str:
        return (
            "<code>\n"
            + program_text(task)[0].replace("distance < threshold", "distance > threshold")
            + "</code>"
        )

    result = make_variants(task, n=1, llm=logic_changing_llm)
    assert result.variants == [] and any("changes" in r for r in result.reasons)

    def builtin_renaming_llm(prompt: str) -> str:
        return "<code>\n" + re.sub(r"\babs\b", "absolute", program_text(task)[0]) + "</code>"

    result = make_variants(task, n=1, llm=builtin_renaming_llm)
    assert result.variants == [] and any("'abs' may not be renamed" in r for r in result.reasons)


def test_rename_task_rejects_unsafe_requests(humaneval):
    task = humaneval["HumanEval/0"]
    from leaklab.perturb.identifiers import NotRenamable

    with pytest.raises(NotRenamable):
        rename_task(task, {"enumerate": "walk"})
    with pytest.raises(NotRenamable):
        rename_task(task, {"numbers": "threshold"})  # not fresh
    with pytest.raises(NotRenamable):
        rename_task(task, {"numbers": "vals", "threshold": "vals"})
    ok = rename_task(task, {"numbers": "vals"})
    assert dataclasses.replace(ok, prompt=task.prompt, solution=task.solution) == task


def test_prose_rename_leaves_string_prefixes_escapes_and_contractions():
    # Parameters named like a string prefix (r) and an escape letter (n); a contraction ("it's").
    task = Task(
        "t/prose",
        "hand",
        prompt='def join_lines(s, n, r):\n    r"""Repeat s n*r times, joined by \\n; it\'s e.g. join_lines(\'x\', 2, 1)."""\n',
        solution="    return '\\n'.join([s] * n * r)\n",
        entry_point="join_lines",
        tests="def check(candidate):\n    assert candidate('x', 2, 1) == 'x\\nx'\n",
    )
    variant = make_variants(task, n=1).variants[0]
    new = variant.renames
    doc = variant.task.prompt.split("\n")[1]
    assert doc.startswith('    r"""Repeat ')  # the prefix r is not the parameter r
    expected = f"Repeat {new['s']} {new['n']}*{new['r']} times, joined by \\n; it's e.g. {new['join_lines']}('x', 2, 1)."
    assert expected in doc
    assert_alpha_equivalent(task, variant.task, variant.renames)


def test_apps_fixture_tasks_rename_cleanly():
    from pathlib import Path

    from leaklab.data.benchmarks import load_apps

    fixture = Path(__file__).parent.parent / "fixtures" / "apps" / "apps-fixture.jsonl"
    tasks = load_apps(fixture)
    assert tasks
    for task in tasks:
        result = make_variants(task, n=2)
        assert len(result.variants) == 2, (task.task_id, result.reasons)
        for variant in result.variants:
            assert_alpha_equivalent(task, variant.task, variant.renames)
            assert_same_outside_identifiers(task.solution, variant.task.solution)
            assert variant.task.test_cases == task.test_cases
            if task.entry_point and task.entry_point in variant.renames:  # a plain function is renamed
                assert f"def {variant.task.entry_point}(" in variant.task.prompt


# --------------------------------------------------------------------------- unbiased variants


def _log_count_shift(tasks, propose) -> float:
    """Mean over renamed identifiers of log-frequency(new) - log-frequency(old) in the reference corpus."""
    from leaklab.perturb.vocabulary import log_count

    shifts = []
    for task in tasks:
        try:
            analysis = analyse_task(task)
        except NotRenamable:
            continue
        for old, new in propose(analysis, random.Random(task.task_id)).items():
            shifts.append(log_count(new) - log_count(old))
    return sum(shifts) / len(shifts)


def test_new_names_are_about_as_frequent_as_the_originals(humaneval):
    """Names are chosen by closeness of their frequency in reference code to the original's: on all of
    HumanEval the renamed identifiers are, on average, neither rarer nor commoner than the originals.
    The synonym-first order made them rarer (mean shift -0.70 at HEAD before the fix; now -0.32)."""
    assert abs(_log_count_shift(humaneval.values(), propose_renames)) < 0.5


def test_example_strings_keep_their_alphabet_and_numbers_their_roundness():
    rng = random.Random(0)
    for _ in range(50):  # a binary string stays binary ('010' became '019' before)
        assert set(mutate_value("010110", rng)) <= {"0", "1"}
    # Words are swapped for words of the same length from the reference corpus's prose (not identifier
    # fragments such as "cfunc" or "msgi", which made "Hello world" read as "Cfunc msgi").
    from leaklab.perturb.vocabulary import prose_counts

    for _ in range(20):
        new = mutate_value("hello world", rng)
        assert len(new) == 11 and all(w in prose_counts() or w in ("hello", "world") for w in new.split())
    # A round number is replaced by a number about as common in code as itself.
    from leaklab.perturb.vocabulary import log_count

    drawn = [mutate_value(100, rng) for _ in range(200)]
    assert all(50 <= d <= 200 and d != 100 for d in drawn)
    assert sum(log_count(str(d)) for d in drawn) / len(drawn) > 1.5  # uniform draws: about 0.4
    floats = [mutate_value(0.5, rng) for _ in range(20)]
    assert all(f != 0.5 for f in floats)


def test_alpha_verification_accepts_renamings_and_rejects_anything_else(humaneval):
    from leaklab.perturb.variants import alpha_equivalent

    task = humaneval["HumanEval/0"]
    variant = make_variants(task, n=1, seed=1).variants[0]
    assert alpha_equivalent(task, variant.task, variant.renames)
    # A changed constant in the code is not a renaming.
    broken = dataclasses.replace(
        variant.task, solution=variant.task.solution.replace("return True", "return False")
    )
    assert broken.solution != variant.task.solution
    assert not alpha_equivalent(task, broken, variant.renames)
    # Two names onto one, or onto a name the program uses and keeps (a builtin), could capture a reference.
    clash = dict(variant.renames)
    first, second = list(clash)[:2]
    assert not alpha_equivalent(task, variant.task, {**clash, second: clash[first]})
    assert not alpha_equivalent(task, variant.task, {**clash, first: "enumerate"})


def test_no_tests_is_said_and_alpha_verifies_without_them(humaneval):
    from leaklab.detectors.srdetection import SrDetectionConfig
    from leaklab.perturb import store

    task = dataclasses.replace(humaneval["HumanEval/0"], tests="", test_cases=())
    # verify by tests on a task without tests: no variants, and the reason says "no tests".
    result = make_variants(task, n=3, verify=Verification(lambda t: True, by="tests"))
    assert not result.variants and not result.tests_run
    assert any(r.startswith("no tests") for r in result.reasons)
    assert not any("tests failed" in r for r in result.reasons)
    # verify: alpha keeps renaming-only variants, recorded as such.
    cfg = SrDetectionConfig(n_variants=3, verify="alpha", replace_examples=False)
    (vs,) = store.build_variant_sets([task], cfg, log=lambda *a: None)
    assert len(vs.variants) == 3 and vs.verified_by == "alpha" and not vs.tests_run
    info = store.summary([vs])
    assert info["verified_by"] == ["alpha"] and info["tests_run"] is False
    again = store.set_from_json(store.set_to_json(vs, task), task)
    assert again.verified_by == "alpha"
    (none,) = store.build_variant_sets([task], dataclasses.replace(cfg, verify="tests"), log=lambda *a: None)
    assert not none.variants and store.summary([none])["tasks_without_tests"] == 1


def test_new_example_numbers_are_as_often_smaller_as_larger():
    """Uniform draws on [n/2, 2n] were larger than the original two times in three (larger inputs,
    longer outputs: variants less likely than originals); log-uniform draws are symmetric."""
    from leaklab.perturb.examples import _draw_int

    rng = random.Random(0)
    for size in (3, 10, 100, 1000):
        draws = [_draw_int(size, rng) for _ in range(2000)]
        assert all(d != size and size / 2 - 1 <= d <= 2 * size + 1 for d in draws)
        below = sum(d < size for d in draws) / len(draws)
        assert 0.42 <= below <= 0.58, (size, below)


def test_a_parse_lost_to_another_thread_is_built_again(humaneval, monkeypatch):
    """CPython < 3.11.8 (gh-106905) can fail an `ast.parse` racing another thread's with a SystemError;
    variants are built by a few threads, so one such failure must cost a retry, not the run."""
    from leaklab.detectors.srdetection import SrDetectionConfig
    from leaklab.perturb import store

    real, failures = store.make_variants, []

    def flaky(task, *args, **kwargs):
        if not failures:
            failures.append(task.task_id)
            raise SystemError("AST constructor recursion depth mismatch (before=1, after=2)")
        return real(task, *args, **kwargs)

    monkeypatch.setattr(store, "make_variants", flaky)
    cfg = SrDetectionConfig(n_variants=2, verify="alpha", replace_examples=False)
    sets = store.build_variant_sets(
        [humaneval["HumanEval/0"], humaneval["HumanEval/2"]], cfg, log=lambda *a: None
    )
    assert failures and [len(s.variants) for s in sets] == [2, 2]
    # Any other SystemError is a real error.
    monkeypatch.setattr(store, "make_variants", lambda *a, **k: (_ for _ in ()).throw(SystemError("other")))
    with pytest.raises(SystemError, match="other"):
        store.build_variant_sets([humaneval["HumanEval/0"]], cfg, log=lambda *a: None)


# --------------------------------------------------------------------------- examples drawn like the originals


def _example_task(prompt_examples: str, entry_point: str = "f") -> Task:
    prompt = f'def {entry_point}(a, b):\n    """Do it.\n{prompt_examples}    """\n'
    return Task("t/examples", "hand", prompt=prompt, solution="    return a\n", entry_point=entry_point)


def test_choose_set_keeps_the_set_closest_in_shape_and_skips_failed_runs():
    from leaklab.perturb.examples import choose_set, example_cost, shape_distance

    task = _example_task("    >>> f(1, 4)\n    0.25\n    >>> f(3, 4)\n    True\n")
    examples = find_examples(task, ["a", "b"])
    assert [ex.args for ex in examples] == [(1, 4), (3, 4)]
    sets = [[(1, 3), (2, 4)], [(2, 4), (3, 5)], [(3, 4), (2, 5)]]
    outputs = [[0.3333333333, False], [0.5, True], [RunError("boom"), True]]
    # Set 0 shows 1 3 0.3333333333 (8 more digits, x 0.5) and flips True to False (+2); set 1 keeps the
    # pieces, digits and answers of the originals; set 2's first run failed.
    costs = [
        [example_cost(ex, task.prompt, a, o) for ex, a, o in zip(examples, s, out)]
        for s, out in zip(sets, outputs)
    ]
    assert costs[0][0] > 4.8 and costs[0][1] >= 2.0 and costs[2][0] is None
    assert sum(costs[1]) + 2 < sum(costs[0])
    inputs, outs = choose_set(examples, task.prompt, sets, outputs)
    assert inputs == [(2, 4), (3, 5)] and outs == [0.5, True]
    # With only the set whose first run failed, that example is left as it was (input None).
    inputs, outs = choose_set(examples, task.prompt, [sets[2]], [outputs[2]])
    assert inputs == [None, (2, 5)] and outs == [None, True]
    assert choose_set(examples, task.prompt, [], []) == ([None, None], [None, None])
    # shape_distance by hand: "1 4 0.25" -> "1 3 0.3333333333": pieces 1 4 0 . 25 vs 1 3 0 . 3333333333
    # (same count), digits +8 (x 0.5 = 4), characters +8 (x 0.1 = 0.8), plus familiarity and magnitude.
    assert shape_distance("1 4 0.25", "1 3 0.3333333333") > 4.8
    assert shape_distance("1 4 0.25", "1 4 0.25") == 0


def test_candidate_sets_keep_values_repeated_across_examples():
    from leaklab.perturb.examples import candidate_sets

    task = _example_task("    >>> f(3, 101)\n    3\n    >>> f(0, 101)\n    0\n    >>> f(100, 101)\n    100\n")
    examples = find_examples(task, ["a", "b"])
    sets = candidate_sets(examples, random.Random(0), 16)
    assert 8 <= len(sets) <= 16 and len({tuple(s) for s in sets}) == len(sets)
    for chosen in sets:
        assert all(args is None or args != ex.args for ex, args in zip(examples, chosen))
        seconds = {args[1] for args in chosen if args is not None}
        # 101 is shown three times: one set maps it to one value (a retry without the memo aside).
        assert len(seconds) <= 2


def test_int_draws_go_down_as_often_as_up():
    from leaklab.perturb.examples import _mutate_int

    rng = random.Random(0)
    for value in (3, 5, 10, 30, 100):
        drawn = [_mutate_int(value, rng) for _ in range(600)]
        up = sum(d > value for d in drawn) / len(drawn)
        assert 0.4 < up < 0.6 and value not in drawn, (value, up)
    ones = [_mutate_int(1, rng) for _ in range(600)]  # 1 can only grow: it does, half the time
    assert set(ones) == {1, 2} and 0.4 < ones.count(2) / len(ones) < 0.6


def test_replaced_examples_show_the_solutions_outputs_and_keep_their_shape():
    """End to end through make_variants with a fake executor (a + b): each replaced example's shown
    output is the solution's output on the shown input, and the chosen sets stay within a few pieces."""
    from leaklab.perturb.examples import _PIECES

    task = _example_task(
        "    >>> f(2, 3)\n    5\n    >>> f(10, 20)\n    30\n    >>> f(7, 7)\n    14\n", entry_point="add"
    )
    task = dataclasses.replace(task, prompt=task.prompt.replace("f(", "add("))

    def run_solution(t: Task, inputs: list) -> list:
        return [a + b for a, b in inputs]

    result = make_variants(task, n=5, run_solution=run_solution, rename=False)
    assert len(result.variants) == 5
    original = find_examples(task, ["a", "b"])
    for variant in result.variants:
        assert variant.examples_replaced >= 2
        for old, ex in zip(original, find_examples(variant.task, ["a", "b"])):
            assert int(ex.output_text) == sum(ex.args)  # semantics: the solution's output is shown
            old_text = " ".join(map(str, old.args)) + " " + old.output_text
            new_text = " ".join(map(str, ex.args)) + " " + ex.output_text
            assert abs(len(_PIECES.findall(new_text)) - len(_PIECES.findall(old_text))) <= 1


def test_echo_counts_the_name_parts_found_in_the_tasks_prose():
    from leaklab.perturb.vocabulary import context_words, echo

    # Hand-worked: the names being renamed are left out (renaming rewrites them in prose too), `sums`
    # folds to `sum`, `numbers` to `number`; "1" is no word.
    ctx = context_words("sum_to_n is a function that sums numbers from 1 to n.", skip=["sum_to_n", "n"])
    assert ctx == {"is", "a", "function", "that", "sum", "number", "from", "to"}
    assert echo("sum_to_n", ctx) == pytest.approx(2 / 3)  # sum, to; not n
    assert echo("total_to_number", ctx) == pytest.approx(2 / 3)  # to, number
    assert echo("calc_sum_to_n", ctx) == pytest.approx(2 / 4)
    assert echo("totalToN", ctx) == pytest.approx(1 / 3)  # camelCase parts: total, To, N


def test_candidates_echo_the_prose_as_much_as_the_original():
    """With no frequency difference (empty counts) only the jitter (< 2) and the echo mismatch (3 per
    unit) order candidates: `sum` echoes the context fully, so `sum_up` (echo 1) always beats `total`
    (echo 0); without the context the jitter alone puts either first."""
    from leaklab.perturb.vocabulary import frequency_order

    ctx = frozenset({"sum", "up"})
    with_ctx = {frequency_order("sum", ["total", "sum_up"], random.Random(i), {}, ctx)[0] for i in range(30)}
    without = {frequency_order("sum", ["total", "sum_up"], random.Random(i), {})[0] for i in range(30)}
    assert with_ctx == {"sum_up"} and without == {"sum_up", "total"}


def test_new_names_echo_the_docstring_about_as_much_as_the_originals(humaneval):
    """On all of HumanEval, the new names' share of word parts found in the task's prose is close to the
    originals' (mean |difference| 0.124 before candidates took the prose into account, 0.043 after)."""
    from leaklab.perturb.identifiers import analyse_task
    from leaklab.perturb.vocabulary import context_words, echo

    diffs = []
    for task in humaneval.values():
        try:
            analysis = analyse_task(task)
        except NotRenamable:
            continue  # tasks that renaming leaves alone
        program = analysis.program
        prose = "\n".join(program.source[lo:hi] for lo, hi in program.prose_spans)
        ctx = context_words(prose, skip=analysis.functions + analysis.variables)
        renames = propose_renames(analysis, random.Random(task.task_id))
        diffs += [abs(echo(new, ctx) - echo(old, ctx)) for old, new in renames.items()]
    assert sum(diffs) / len(diffs) < 0.08


def test_a_variant_leans_to_prefixed_names_or_to_synonyms():
    """`prefer` pushes the other style STYLE_WEIGHT back: `nums` (which has synonyms and prefixed forms)
    gets a prefixed name first when preferring prefixes and a synonym otherwise, whatever the jitter."""
    from leaklab.perturb.vocabulary import VARIABLE_PREFIXES, candidates

    prefixed = {f"{p}_nums" for p in VARIABLE_PREFIXES}
    for i in range(20):
        assert candidates("nums", False, random.Random(i), prefer="prefix")[0] in prefixed
        assert candidates("nums", False, random.Random(i), prefer="synonym")[0] not in prefixed


def test_names_without_vocabulary_words_get_matched_words_not_prefixes():
    """`nbrs_soln` has no vocabulary word, so a prefix (`cur_nbrs_soln`) used to be its only
    change in both leans, and prefixes made variants of library code likelier than their originals. A
    variant leaning away from prefixes now swaps one of its words for a reference word of the same case
    and length (no word added); one leaning to prefixes keeps them."""
    from leaklab.perturb.vocabulary import (
        FUNCTION_PREFIXES,
        VARIABLE_PREFIXES,
        candidates,
        code_counts,
        matched_word,
    )

    prefixes = tuple(f"{p}_" for p in VARIABLE_PREFIXES + FUNCTION_PREFIXES)
    for i in range(20):
        for new in candidates("nbrs_soln", False, random.Random(i), prefer="synonym"):
            assert len(new) == len("nbrs_soln") and new.count("_") == 1, new
            assert not new.startswith(prefixes), new
            assert new.startswith("nbrs_") or new.endswith("_soln"), new  # one word swapped
        assert candidates("nbrs_soln", False, random.Random(i), prefer="prefix")[0].startswith(prefixes)
    # The replacement keeps the case and length, and a word the reference never saw gets a rare one.
    for i in range(20):
        title = matched_word("Nbrs", random.Random(i))
        assert len(title) == 4 and title[0].isupper() and title[1:].islower()
        assert code_counts()[matched_word("soln", random.Random(i))] <= 50
    assert matched_word("42", random.Random(0)) == "42"  # no letters: nothing to match
