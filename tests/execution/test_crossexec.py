"""HyClone's LLM stages around cross-execution: the stage-1 screen and LLM-proposed inputs (fake back-end)."""

import pytest

from leaklab.execution.crossexec import (
    SCREENED_OUT,
    CrossPair,
    LLMStages,
    arity,
    cross_execute,
    last_json_array,
    parse_inputs,
)
from leaklab.signals.generation import Completion

REF = "def f(x):\n    return x * 2\n"
NEAR = "def f(x):\n    return x * 2 if x < 100 else 0\n"  # agrees on small inputs only


class _Backend:
    """A Generator stand-in: answers the clone screen and the input prompts from fixed replies."""

    def __init__(self, screen='{"clone": true}', inputs="[]"):
        self.screen, self.inputs, self.prompts = screen, inputs, []

    def generate(self, prompts, max_new_tokens=256, stop=(), temperature=0.0, n=1, seed=0):
        self.prompts += prompts
        replies = []
        for p in prompts:
            if "functional cloning" in p:
                replies.append(self.screen)
            else:
                replies.append(self.inputs(p) if callable(self.inputs) else self.inputs)
        return [[Completion(r, None, "stop")] for r in replies]


class _Recording:
    """The sandbox, recording the jobs it is given."""

    def __init__(self, sandbox):
        self.sandbox, self.jobs = sandbox, []

    def run_jobs(self, jobs):
        self.jobs += list(jobs)
        return self.sandbox.run_jobs(jobs)


@pytest.fixture(scope="module")
def sandbox():
    from leaklab.execution.sandbox import Sandbox

    with Sandbox(workers=1, timeout_s=5.0) as box:
        yield box


def test_a_no_from_the_screen_skips_execution(sandbox):
    recording = _Recording(sandbox)
    backend = _Backend(screen='Looks different. {"clone": false}')
    pairs = [CrossPair(REF, NEAR, "f", [[1], [2]]), CrossPair(REF, None, "f", [[1]])]
    got = cross_execute(pairs, recording, llm=LLMStages(backend, screen=True, n_inputs=0))
    assert got[0].reason == SCREENED_OUT and got[0].similarity is None and got[0].screen == "not a clone"
    assert got[1].reason == "no generated function"  # never asked about
    assert recording.jobs == [] and sum("functional cloning" in p for p in backend.prompts) == 1
    # "yes" and an unreadable screen both go on to execution; the unreadable one says why
    for reply, screen in (('{"clone": true}', "clone"), ("hmm", "unreadable: no JSON object in the reply")):
        (result,) = cross_execute(pairs[:1], sandbox, llm=LLMStages(_Backend(screen=reply), n_inputs=0))
        assert result.similarity == 1.0 and result.screen == screen and result.reason == ""


def test_the_screen_asks_about_every_pair_with_a_function(sandbox):
    # stage 1's verdict is a metric of its own (000, Table 1), so a pair that cannot run is screened too
    backend = _Backend(screen='{"clone": true}')
    (got,) = cross_execute([CrossPair(REF, NEAR, "f", [])], sandbox, llm=LLMStages(backend, n_inputs=0))
    assert got.reason == "no inputs" and got.screen == "clone"
    assert sum("functional cloning" in p for p in backend.prompts) == 1


def test_proposed_inputs_run_in_the_sandbox(sandbox):
    recording = _Recording(sandbox)
    # A is asked for inputs first, then B: A's proposals find the difference, B's repeat a shared input.
    backend = _Backend(
        inputs=lambda p: "[[500], [7]]" if "x * 2\n" in p.split("```")[1] else "```json\n[[1]]\n```"
    )
    (got,) = cross_execute(
        [CrossPair(REF, NEAR, "f", [[1], [2]])], recording, llm=LLMStages(backend, screen=False)
    )
    assert [list(j.inputs) for j in recording.jobs] == [[[1], [2], [500], [7]]] * 2
    assert got.s_a == pytest.approx(3 / 4) and got.n_inputs == 4  # 500 disagrees
    assert got.llm_inputs == (2, 0) and got.llm_inputs_dropped == {"repeats an input already there": 1}
    assert got.s_b == got.s_a  # no input proposed for B was kept
    # without the LLM the same pair looks like a clone: the proposed input is what told them apart
    (plain,) = cross_execute([CrossPair(REF, NEAR, "f", [[1], [2]])], sandbox)
    assert plain.similarity == 1.0 and plain.clone


def test_malformed_input_lists_are_counted_not_fatal(sandbox):
    replies = iter(["no list here", '[[3], "x", [1, 2], 5, [4]]'])
    backend = _Backend(inputs=lambda p: next(replies))
    (got,) = cross_execute([CrossPair(REF, REF, "f", [])], sandbox, llm=LLMStages(backend, screen=False))
    assert got.similarity == 1.0 and got.llm_inputs == (0, 2)  # only B's [3] and [4] were usable
    assert got.llm_inputs_dropped == {
        "no JSON list in the reply": 1,
        "not a list of arguments": 2,
        "wrong number of arguments": 1,
    }
    # nothing usable and no shared inputs: not executed, and why
    (none,) = cross_execute(
        [CrossPair(REF, REF, "f", [])], sandbox, llm=LLMStages(_Backend(inputs="[}"), screen=False)
    )
    assert none.reason == "no inputs" and none.llm_inputs_dropped == {"no JSON list in the reply": 2}


def test_parsing_helpers():
    assert last_json_array('first [1] then the answer:\n[[1, "a"], [2, "b"]] done') == [[1, "a"], [2, "b"]]
    assert last_json_array("[[1], [2]") is not None and last_json_array("none") is None
    assert arity("def f(a, b=1, *args):\n    pass\n", "f") == (1, float("inf"))
    assert arity("def f(a, *, k):\n    pass\n", "f") == (1, 0)  # needs a keyword: no positional call fits
    assert arity("def f(:\n", "f") is None
    kept, dropped = parse_inputs("[[1], [2], [3]]", (1, 1), limit=2)
    assert kept == [[1], [2]] and dropped == {"beyond the number asked": 1}


def test_the_counterfactual_evaluation_applies_both_stages_with_a_judge_backend(monkeypatch):
    from types import SimpleNamespace

    from test_counterfactual import BODY, _context, _stub_generations

    from leaklab.evaluations.counterfactual import Counterfactual

    tests = "def check(candidate):\n    assert candidate([0] * 12, 2) == 2\n"
    tasks = [
        SimpleNamespace(task_id=f"t{i}", prompt=f"def f{i}(items, offset):\n", solution=BODY, prompt_is_code=True,
                        entry_point=f"f{i}", test_type="function", tests=tests, test_cases=())
        for i in range(2)
    ]  # fmt: skip
    ctx = _context(tasks, [1, 0], min_chars=0, execution=True, judge_backend="openai", judge_model="m",
                   judge_base_url="http://127.0.0.1:1/v1", hyclone_llm_inputs=3)  # fmt: skip
    evaluation = Counterfactual()
    evaluation.prepare(ctx)
    _stub_generations(evaluation, ctx, monkeypatch)
    # the target's member reproduces the function: screened a clone, then run on the proposed inputs;
    # the reference's `return 0` is screened out
    backend = _Backend(inputs="[[[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], 1], [[1], 2, 3]]")
    backend.screen = None
    backend.generate_screen = backend.generate

    def generate(prompts, **kwargs):
        backend.screen = '{"clone": false}' if any("return 0" in p for p in prompts) else '{"clone": true}'
        return backend.generate_screen(prompts, **kwargs)

    evaluation._judge = (SimpleNamespace(generate=generate), lambda text: text)  # (generator, render)
    out = evaluation.evaluate(ctx, "target", None, step=1)
    got = {(r["column"], r["metric"]): r for r in out.rows}
    # no test inputs were readable here: the proposed ones alone (A's, repeated by B) reached execution
    assert evaluation._inputs == [[], []]
    assert out.records[0]["hyclone_target"] == {
        "s_a": 1.0, "clone": True, "n_inputs": 1, "reason": "", "repaired": []
    }  # fmt: skip
    row = got[("members", "hyclone.llm_inputs_target")]
    assert row["value"] == 2.0 and row["params"]["screen"] == {"clone": 1}
    assert row["params"]["dropped"] == {"wrong number of arguments": 2, "repeats an input already there": 1}
    assert got[("non_members", "hyclone.n_executed_target")]["params"]["not_executed"] == {
        "no generated function": 1
    }
    # the reference's `return 0` was screened out: not a clone, similarity 0 (000, §4, App. C.2), so the
    # target's clone counts as counterfactually memorized
    assert evaluation._reference_executed[0].reason == SCREENED_OUT
    value = {k: r["value"] for k, r in got.items()}
    assert (
        value[("members", "hyclone.target_mean")] == 1.0
        and value[("members", "hyclone.reference_mean")] == 0.0
    )
    assert value[("members", "hyclone.memorized")] == 1.0 and value[("members", "memorized_any")] == 1.0
    # stage 1 is a binary metric of its own: the member's target a clone, its reference not
    assert value[("members", "hyclone_stage1.target_mean")] == 1.0
    assert value[("members", "hyclone_stage1.reference_mean")] == 0.0
    assert value[("members", "hyclone_stage1.memorized")] == 1.0
    assert value[("members", "hyclone_stage1.n_unreadable_target")] == 0.0
    # the executed-only diagnostic: no pair ran on both sides, so no mean and no flag
    assert value[("members", "hyclone_executed_only.target_mean")] is None
    assert value[("members", "hyclone_executed_only.memorized")] == 0.0
    assert value[("members", "hyclone.n_executed_reference")] == 0.0
    assert got[("members", "hyclone.n_executed_reference")]["params"]["not_executed"] == {SCREENED_OUT: 1}
    assert out.records[0]["hyclone_reference"]["reason"] == SCREENED_OUT
    assert "HyClone members 1 flagged (0 among pairs executed on both sides" in evaluation.summary(out.rows)


def test_a_program_that_cannot_run_gets_a_preamble_and_runs_again(sandbox):
    # 000 App. C.2: when a function fails in the standard environment, the LLM writes a minimal preamble
    # (imports, helpers) and the pair runs again. The ground truth calls a helper its file defined.
    needs_helper = "def f(x):\n    return helper(x) + 1\n"
    plain = "def f(x):\n    return x * 2 + 1\n"
    backend = _Backend(
        inputs=lambda p: "```python\ndef helper(x):\n    return x * 2\n```" if "cannot run" in p else "[]"
    )
    pairs = [CrossPair(needs_helper, plain, "f", [[1], [2]])]
    (got,) = cross_execute(pairs, sandbox, llm=LLMStages(backend, screen=False, n_inputs=0))
    assert got.similarity == 1.0 and got.repaired == ("reference",)
    (asked,) = [p for p in backend.prompts if "cannot run" in p]
    assert "NameError" in asked and "return helper(x) + 1" in asked
    # without an LLM to repair it the ground truth runs on none of the inputs
    (off,) = cross_execute(pairs, sandbox)
    assert off.similarity is None and off.reason == "the ground truth runs on none of the inputs"
    # a reply without a code block repairs nothing
    (none,) = cross_execute(
        pairs, sandbox, llm=LLMStages(_Backend(inputs="no idea"), screen=False, n_inputs=0)
    )
    assert none.similarity is None and none.repaired == ()
