"""How tasks are shown to models and how code is read back; the accuracy rows computed by hand."""

from __future__ import annotations

import pytest

from leaklab.data.prompting import (
    EVALPLUS_INSTRUCTION,
    EVALPLUS_RESPONSE,
    ChatFormatError,
    chat_answer,
    extract_code,
    model_prompt,
    resolve_format,
    training_pair,
)
from leaklab.data.tasks import Task
from leaklab.evaluations.accuracy import AccuracyConfig, accuracy_rows

TASK = Task(
    "t/1",
    "synthetic",
    'from typing import List\n\n\ndef add_k(xs):\n    """Add 3 to each."""\n',
    "    return [x + 3 for x in xs]\n",
    entry_point="add_k",
    tests="def check(candidate):\n    assert candidate([1]) == [4]\n",
)

# A minimal chat template (ChatML-like), enough to exercise the chat path without a real model.
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


class FakeTokenizer:
    name_or_path = "fake"

    def __init__(self, chat_template=None):
        self.chat_template = chat_template

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        from jinja2 import Template

        return Template(self.chat_template).render(
            messages=messages, add_generation_prompt=add_generation_prompt
        )


def test_format_follows_the_chat_template_and_refuses_chat_without_one():
    assert resolve_format(FakeTokenizer(), "auto") == "completion"
    assert resolve_format(FakeTokenizer(TEMPLATE), "auto") == "chat"
    assert resolve_format(FakeTokenizer(TEMPLATE), "completion") == "completion"
    with pytest.raises(ChatFormatError, match="train.sft.format: chat format asked.*no chat template"):
        resolve_format(FakeTokenizer(), "chat", key="train.sft.format")


def test_chat_without_a_template_is_one_line_and_exit_2(capsys):
    # The sft stage and the evaluations call resolve_format after the model loads: the refusal must reach
    # the user as bad input (one line, exit 2), not as a traceback.
    from leaklab.errors import guarded

    assert guarded(lambda: resolve_format(FakeTokenizer(), "chat", key="train.sft.format")) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "set train.sft.format=completion" in said[0]


def test_training_pairs_match_what_the_model_is_asked():
    assert training_pair(TASK, FakeTokenizer(), "completion") == (TASK.prompt, TASK.solution)
    tok = FakeTokenizer(TEMPLATE)
    prompt, answer = training_pair(TASK, tok, "chat")
    assert prompt == model_prompt(TASK, tok, "chat") and prompt.endswith("<|assistant|>\n")
    assert "```python\n" + TASK.prompt in prompt
    assert answer == chat_answer(TASK) + "<|end|>\n"  # the template's end of turn is learnt too


def test_the_evalplus_format_prefills_an_opened_python_fence():
    # 004 App. J: the user turn asks for a self-contained script in a markdown block and quotes the
    # problem in a fence; the assistant turn is prefilled with a preamble and an opened ```python fence.
    tok = FakeTokenizer(TEMPLATE)
    assert resolve_format(tok, "evalplus") == "evalplus"
    with pytest.raises(ChatFormatError, match="no chat template"):
        resolve_format(FakeTokenizer(), "evalplus")
    prompt = model_prompt(TASK, tok, "evalplus")
    user = f"<|user|>\n{EVALPLUS_INSTRUCTION}\n```\n{TASK.prompt.strip()}\n```\n<|end|>\n"
    assert prompt == f"{user}<|assistant|>\n{EVALPLUS_RESPONSE}\n```python\n"  # the turn left open
    # trained on: the program, the closing fence and the template's end of turn, after that same prompt
    assert training_pair(TASK, tok, "evalplus") == (prompt, TASK.program() + "```<|end|>\n")
    # the reply is code inside the fence the prompt opened: read as a whole function
    reply = "def add_k(xs):\n    return [x + 3 for x in xs]\n```\nThat adds 3."
    got = extract_code(TASK, reply, "evalplus")
    assert got.failure == "" and "return [x + 3 for x in xs]" in got.code and "That adds" not in got.code
    assert extract_code(TASK, "That is all.", "evalplus").failure != ""


def test_completion_replies_are_cut_at_the_next_top_level_statement():
    body = "    return [x + 3 for x in xs]\n"
    got = extract_code(TASK, body + "\n\ndef other():\n    pass\n", "completion")
    assert got == extract_code(TASK, body, "completion")
    assert got.code == body and not got.failure
    assert extract_code(TASK, body + "\nprint(add_k([1]))\n", "completion").code == body
    assert extract_code(TASK, "\n\n  \n", "completion").failure == "no_code"
    # A body cut mid-line by the generation limit loses its broken last line.
    assert extract_code(TASK, body + "    y = (", "completion").code == body
    assert extract_code(TASK, "    return [x +* for\n", "completion").failure == "syntax_error"
    # A reply that restates the whole function goes after the prompt, whose imports stay in scope.
    whole = extract_code(TASK, "def add_k(xs):\n" + body, "completion")
    assert whole.code == "\ndef add_k(xs):\n" + body and TASK.program(whole.code).startswith("from typing")


def test_chat_replies_give_their_first_python_block_defining_the_entry_point():
    fn = "def add_k(xs):\n    return [x + 3 for x in xs]\n"
    reply = f"Sure.\n```text\nnot code\n```\n```python\n{fn}```\nDone."
    got = extract_code(TASK, reply, "chat")
    assert not got.failure and got.code == "\n" + fn
    assert extract_code(TASK, f"```python\n{fn}", "chat").code.endswith(fn)  # unclosed fence
    assert extract_code(TASK, fn, "chat").code.endswith(fn)  # no fence, but the function is there
    assert extract_code(TASK, "", "chat").failure == "no_code"
    assert extract_code(TASK, "I cannot help with that.", "chat").failure == "syntax_error"


@pytest.mark.parametrize(
    "reply",
    [
        "    return [x + 3 for x in xs]\n\ndef other():\n    pass\n",
        "    return [x + 3 for x in xs]\n    y = (",
        "```python\ndef add_k(xs):\n    return [x + 3 for x in xs]\n```",
        "def add_k(xs):\n    return xs\n",
        "",
        "no code here",
        "    return [x +* for\n",
    ],
)
def test_accuracy_and_rewards_read_the_same_code(reply):
    """pass@1 and the RL reward judge one program: extract_code is the reward's extractor."""
    from leaklab.execution.extract import candidate

    found = candidate(TASK.prompt, reply, TASK.entry_point, TASK.prompt_is_code)
    got = extract_code(TASK, reply, "completion")
    assert (got.code or None, got.failure or None) == (found.code, found.problem)


def _judged(verdicts: list[str]) -> list[dict]:
    return [{"verdict": v, "extraction": "empty" if v == "x" else "", "syntax_ok": True} for v in verdicts]


def test_accuracy_rows_by_hand():
    # Two members, two non-members; each list: the greedy reply, then 4 samples.
    judged = [
        _judged(["passed", "passed", "failed", "failed", "failed"]),  # member: greedy ok, c = 1 of 4
        _judged(["failed", "passed", "passed", "passed", "passed"]),  # member: greedy wrong, c = 4
        _judged(["passed", "failed", "failed", "failed", "failed"]),  # non-member: c = 0
        _judged(["x", "failed", "failed", "passed", "passed"]),  # non-member: no code, c = 2
    ]
    labels = [1, 1, 0, 0]
    rows = accuracy_rows(judged, labels, AccuracyConfig(ks=[1, 2, 8], n_samples=4))
    got = {(r["column"], r["metric"]): r["value"] for r in rows}
    assert got[("members", "pass@1")] == 0.5 and got[("non_members", "pass@1")] == 0.5
    assert got[("all", "pass@1")] == 0.5 and got[("gap", "pass@1")] == 0.0
    # pass@1 from samples = c / n: members (1/4 + 4/4) / 2, non-members (0 + 2/4) / 2.
    assert got[("members", "pass@1_sampled")] == pytest.approx(0.625)
    assert got[("non_members", "pass@1_sampled")] == pytest.approx(0.25)
    # pass@2 = 1 - C(n-c, 2) / C(n, 2): c=1 -> 1 - 3/6, c=4 -> 1, c=0 -> 0, c=2 -> 1 - 1/6.
    assert got[("members", "pass@2")] == pytest.approx((0.5 + 1.0) / 2)
    assert got[("non_members", "pass@2")] == pytest.approx((0.0 + 5 / 6) / 2)
    assert got[("gap", "pass@2")] == pytest.approx(0.75 - 5 / 12)
    assert ("members", "pass@8") not in got  # k above n_samples has no estimate
    assert got[("non_members", "n_extraction_failed")] == 1 and got[("all", "n_extraction_failed")] == 1
    assert got[("members", "n_passed")] == 1 and got[("all", "n_tasks")] == 4


def test_accuracy_rows_per_dose_by_hand():
    from leaklab.evaluations.accuracy import Accuracy, dose_accuracy_rows

    # Members of dose 1 (greedy fails), dose 8 (greedy passes twice); two non-members, one passing.
    verdicts = ["failed", "passed", "passed", "passed", "failed"]
    judged = [_judged([v]) for v in verdicts]
    labels, doses = [1, 1, 1, 0, 0], [1, 8, 8, 0, 0]
    rows = dose_accuracy_rows(judged, labels, doses, AccuracyConfig(ks=[1], n_samples=0))
    got = {(r["dose"], r["column"], r["metric"]): r["value"] for r in rows}
    assert got[1, "members", "pass@1"] == 0.0 and got[8, "members", "pass@1"] == 1.0
    assert got[1, "gap", "pass@1"] == -0.5 and got[8, "gap", "pass@1"] == 0.5
    assert got[8, "members", "n_tasks"] == 2 and {c for _, c, _ in got} == {"members", "gap"}
    # The summary line reads the all-members rows only.
    every = accuracy_rows(judged, labels, AccuracyConfig(ks=[1], n_samples=0)) + rows
    assert Accuracy().summary(every).startswith("pass@1 members 0.667, non-members 0.500")
