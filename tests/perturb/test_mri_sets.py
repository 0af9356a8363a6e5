"""MRI's perturbed sets: rule-based rewriting (validated in the sandbox), mutation, the cache."""

from __future__ import annotations

import ast
import random
import string

import pytest

from leaklab.data import synthetic
from leaklab.data.benchmarks import load_humaneval
from leaklab.data.tasks import Task
from leaklab.execution.correctness import check_many
from leaklab.execution.sandbox import Sandbox
from leaklab.perturb import mri_sets, set_store
from leaklab.perturb.mutation import KINDS, mutate_task, plan
from leaklab.perturb.rewriting import (
    LOGIC_TYPES,
    NotRewritable,
    _docstring_span,
    call_inputs,
    candidate_edits,
    code_fragments,
    edited_task,
    quoted_code,
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
        assert quoted_code(r.task.prompt, [t.program(), r.task.program()], t.entry_point, t.prompt) == []
        assert r.task.entry_point == t.entry_point
        sig = t.prompt[t.prompt.index(f"def {t.entry_point}(") :].split("\n")[0]
        assert sig in r.task.prompt  # signature kept
    # The example's output in the prompt is the rewrite's: add(2, 3) shows what the rewrite returns.
    add = results[0].task
    expected = next(c["output"] for c in add.test_cases if c["input"] == [2, 3])
    assert f">>> add(2, 3)\n    {expected!r}\n" in add.prompt


def test_quoted_code_finds_either_solutions_code_in_the_new_prose_only():
    # The sentence the rewriter used to add: it quoted the original solution and the rewrite.
    quoting = "This version uses a different operator: where the usual solution does `a + b`, this one does `a - b`."
    prompt = state_change(ADD.prompt, _docstring_span(ADD), quoting)
    found = quoted_code(prompt, [ADD.solution, "    return a - b\n"], "add", ADD.prompt)
    assert {"a+b", "a-b", "`a + b`", "`a - b`"} <= set(found)
    prose = "In one step this version uses subtraction where the task above uses addition."
    assert (
        quoted_code(state_change(ADD.prompt, _docstring_span(ADD), prose), [ADD.solution], "add", ADD.prompt)
        == []
    )
    # The signature and the examples are not prose; code the original statement already showed is not new.
    shown = ADD.prompt.replace("Add a and b.", "Return a + b.")
    assert quoted_code(shown, [ADD.solution], "add", ADD.prompt) == ["a+b"]
    assert quoted_code(shown, [ADD.solution], "add", shown) == []
    assert quoted_code(ADD.prompt + ">>> add(a + b, 1)\n", [ADD.solution], "add", ADD.prompt) == []


def test_no_rewrite_sentence_quotes_code_on_all_of_humaneval(humaneval):
    """Every candidate edit of every HumanEval task (a superset of the accepted rewrites), put into the
    prompt as the rewriter does: its sentence shows no code of the original or the edited solution."""
    scanned, quoting = 0, []
    assert all(code_fragments(t.program()) for t in humaneval)  # the scan sees code in every solution
    for task in humaneval:
        try:
            first = call_inputs(task)[0]
        except NotRewritable:
            first = None
        for output in (0, [0]):  # both kinds of added last step (doubled, reversed)
            for edits in candidate_edits(task, random.Random(0), first, output, True).values():
                for edit in edits:
                    program, _ = edited_task(task, edit)
                    prompt = state_change(task.prompt, _docstring_span(task), edit.sentence)
                    found = quoted_code(prompt, [task.program(), program], task.entry_point, task.prompt)
                    scanned += 1
                    if found:
                        quoting.append((task.task_id, edit.logic_type, found))
    assert scanned > 2000 and quoting == []


def test_rewritten_mbpp_plus_and_synthetic_prompts_quote_no_code(sandbox):
    from pathlib import Path

    from leaklab.data.benchmarks import load_benchmark

    mbpp = load_benchmark("mbpp_plus", path=Path(__file__).parent.parent / "fixtures" / "mbpp_plus")
    tasks = mbpp + synthetic.build_synthetic(seed=5, size=len(synthetic.FAMILIES), sandbox=sandbox)
    results = rewrite_tasks(tasks, sandbox, seed=0)
    rewritten = [(t, r.task) for t, r in zip(tasks, results) if r.task is not None]
    assert len(rewritten) == len(tasks)
    for task, new in rewritten:
        assert quoted_code(new.prompt, [task.program(), new.program()], task.entry_point, task.prompt) == []
    # An MBPP+ prompt is one module docstring: the sentence goes inside it, so prompt + solution still
    # parses, and each rewrite passes its own tests while the original solution fails them.
    news = [new for task, new in rewritten if task.benchmark == "mbpp_plus"]
    assert len(news) == 3 and all(r.passed for r in check_many([(n, n.solution) for n in news], sandbox))
    assert not any(r.passed for r in check_many([(n, t.solution) for t, n in zip(mbpp, news)], sandbox))
    # MBPP+'s example is an assert: it shows the rewrite's output, not the original's (40)
    square = next(new for task, new in rewritten if task.task_id == "Mbpp/17")
    shown = next(c["output"] for c in square.test_cases if c["input"] == [10])
    assert shown != 40 and f"assert square_perimeter(10) == {shown!r}\n" in square.prompt


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


def test_mbpp_plus_prompts_are_mutated_in_their_prose_and_keep_their_assert():
    from pathlib import Path

    from leaklab.data.benchmarks import load_benchmark

    for task in load_benchmark("mbpp_plus", path=Path(__file__).parent.parent / "fixtures" / "mbpp_plus"):
        mutated, info = mutate_task(task, random.Random(1))
        assert mutated is not None, info  # the prompt is one module docstring: its prose is mutated
        old_lines, new_lines = task.prompt.splitlines(), mutated.prompt.splitlines()
        assert [ln for ln in new_lines if ln.startswith("assert ")] == [
            ln for ln in old_lines if ln.startswith("assert ")
        ]
        assert new_lines[1] != old_lines[1]  # the sentence


def test_character_noise_uses_letters_digits_and_punctuation(humaneval):
    # 004 App. B.3: noising inserts, deletes or substitutes "one character (letter, digit, or
    # punctuation)"; quotes and backslashes are left out so the docstring still closes.
    from leaklab.perturb.mutation import NOISE_CHARACTERS, _noise

    rng = random.Random(0)
    made = {ch for _ in range(2000) for ch in _noise("word", rng)} - set("word")
    assert made & set(string.digits) and made & set("!#$%&()*+,-./:;<=>?@[]^_{|}~")
    assert not made & set("'\"\\`") and set(NOISE_CHARACTERS) >= made
    added = set()
    for task in humaneval[:40]:
        mutated, _ = mutate_task(task, random.Random(3))
        ast.parse(mutated.prompt)
        added |= set(mutated.prompt) - set(task.prompt)
    assert added & set(string.digits + string.punctuation)


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
    copy = set_store.read_run_copy(tmp_path / "run" / mri_sets.RUN_FILE)
    assert {task_id: mri_sets.set_from_json(row).task_id for task_id, row in copy.items()} == {
        t.task_id: t.task_id for t in tasks
    }


class _Scripted:
    """A generation back-end that answers each prompt with a scripted reply (by call order)."""

    def __init__(self, replies):
        self.replies = list(replies)

    def generate(self, prompts, max_new_tokens=256, stop=(), temperature=0.0, n=1, seed=0):
        from leaklab.signals.generation import Completion

        return [[Completion(self.replies.pop(0), None, "stop")] for _ in prompts]


def test_llm_paraphrase_is_read_and_checked():
    from leaklab.perturb.mri_llm import llm_paraphrases

    good = "<task>\n" + ADD.prompt.replace("Add a and b.", "Return the sum of a and b.") + "</task>"
    changed_example = "<task>\n" + ADD.prompt.replace(">>> add(2, 3)", ">>> add(1, 1)") + "</task>"
    paras, failures = llm_paraphrases([ADD, ADD, ADD], _Scripted([good, changed_example, "sorry, no"]))
    assert paras[0] is not None and "Return the sum of a and b." in paras[0].prompt
    assert paras[1] is None and paras[2] is None
    assert failures == {"the examples changed": 1, "no <task> block in the reply": 1}


def test_llm_rewrite_goes_through_the_execution_checks(sandbox):
    from leaklab.perturb.mri_llm import llm_rewrites

    statement = ADD.prompt.replace("Add a and b.", "Subtract b from a.")
    good = f"<type>operator change</type>\n<code>\n{statement}    return a - b\n</code>\n<task>\n{statement}</task>"
    same = f"<type>operator change</type>\n<code>\n{statement}    return b + a\n</code>\n<task>\n{statement}</task>"
    renamed = (
        "<type>constant swap</type>\n<code>\ndef plus(a, b):\n    return a + b + 1\n</code>\n<task>\nx</task>"
    )
    results = llm_rewrites([ADD, ADD, ADD, ADD], _Scripted([good, same, renamed, "no idea"]), sandbox)
    ok = results[0].task
    assert ok is not None and results[0].logic_type == "operator_change"
    assert ">>> add(2, 3)\n    -1\n" in ok.prompt  # the example's output is the rewrite's
    assert check_many([(ok, ok.solution)], sandbox)[0].passed
    assert not check_many([(ok, ADD.solution)], sandbox)[0].passed
    assert results[1].task is None and results[1].rejections[0]["reason"] == "equivalent"
    assert (
        results[2].rejections[0]["reason"] == "unreadable"
        and results[3].rejections[0]["reason"] == "unreadable"
    )


def test_an_llm_statement_that_quotes_the_code_is_refused(sandbox):
    from leaklab.perturb.mri_llm import llm_rewrites

    statement = ADD.prompt.replace("Add a and b.", "Compute `a - b` instead of a + b.")
    reply = f"<type>operator change</type>\n<code>\n{statement}    return a - b\n</code>\n<task>\n{statement}</task>"
    (result,) = llm_rewrites([ADD], _Scripted([reply]), sandbox)
    assert result.task is None
    assert result.rejections[0]["reason"] == "unreadable"
    assert "quotes the solutions' code" in result.rejections[0]["detail"]


def test_sets_with_an_llm_backend_carry_paraphrases(tmp_path, sandbox):
    good = "<task>\n" + ADD.prompt.replace("Add a and b.", "Return a plus b.") + "</task>"
    llm = mri_sets.LlmBackend(_Scripted([good]), "fake:model")
    sets = mri_sets.perturbed_sets_for(
        [ADD], cache_dir=tmp_path, sandbox=sandbox, llm=llm, log=lambda *a: None
    )
    assert sets[0].paraphrase is not None and "Return a plus b." in sets[0].paraphrase.prompt
    assert sets[0].rewrite is not None  # the rules still rewrite
    info = mri_sets.summary(sets)
    assert info["paraphrased"] == 1 and info["paraphrase"] == "made by the LLM backend"
    # a different backend is a different cache file
    assert mri_sets.cache_file([ADD], 0, 2, tmp_path, "fake:model|rewrite=False") != mri_sets.cache_file(
        [ADD], 0, 2, tmp_path
    )
