"""The RL reward: code extraction from replies, verdicts as rewards, bad completions counted by reason,
and the refusal to score on a sandbox that lacks its isolation layers."""

from __future__ import annotations

import functools
from contextlib import closing

import pytest

from leaklab.data.benchmarks import load_humaneval
from leaklab.data.tasks import Task
from leaklab.execution.config import WeakerSandboxError
from leaklab.execution.extract import candidate, reply_text
from leaklab.execution.rewards import CodeReward, task_from_json, task_to_json
from leaklab.execution.sandbox import Sandbox

PROMPT = 'def add(a, b):\n    """Return a + b."""\n'


@pytest.fixture(scope="module")
def humaneval0() -> Task:
    return load_humaneval()[0]


@pytest.fixture(scope="module")
def reward():
    with closing(CodeReward(workers=2, timeout_s=2.0)) as r:
        yield r


# --------------------------------------------------------------------------- extraction (no sandbox)


def test_a_base_model_body_stops_where_top_level_code_resumes():
    c = candidate(PROMPT, "    return a + b\n\ndef other(:\n    pass\nprint(add(1, 2))", "add")
    assert c.code == "    return a + b\n" and c.problem is None


def test_a_body_cut_mid_line_by_the_length_limit_is_recovered():
    c = candidate(PROMPT, "    s = a + b\n    return s\n    x = (1 +", "add")
    assert c.code == "    s = a + b\n    return s\n"


def test_a_fenced_whole_function_follows_the_prompt_on_its_own_line():
    reply = "Here you go:\n```python\nimport math\n\ndef add(a, b):\n    return a + b\n```\nDone."
    c = candidate(PROMPT, reply, "add")
    assert c.code.startswith("\nimport math") and "```" not in c.code


def test_the_fenced_block_that_defines_the_entry_point_wins():
    reply = "```\n>>> add(1, 2)\n3\n```\n```python\ndef add(a, b):\n    return a + b\n```"
    assert "def add" in candidate(PROMPT, reply, "add").code


def test_an_unclosed_fence_and_a_chat_conversation_are_read():
    conversation = [
        {"role": "user", "content": "write add"},
        {"role": "assistant", "content": "```python\ndef add(a, b):\n    return a + b\n"},
    ]
    assert reply_text(conversation).startswith("```python")
    assert candidate(PROMPT, conversation, "add").code.startswith("\ndef add")


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("", "no_code"),
        ("   \n\n", "no_code"),
        ("\ndef other():\n    pass", "no_code"),  # nothing before the next top-level def
        ("    return (a +\n", "syntax_error"),
        ("```python\ndef add(a, b) return a\n```", "syntax_error"),
        ("    return " + "(" * 5000 + "1" + ")" * 5000 + "\n", "syntax_error"),  # parser recursion
        ("    return 1\x00\n", "syntax_error"),
        ("    return 1\n" + "#" * 200_000, "too_long"),
    ],
)
def test_replies_without_runnable_code_say_why(reply, problem):
    c = candidate(PROMPT, reply, "add")
    assert c.code is None and c.problem == problem


def test_a_prose_prompt_takes_the_reply_as_the_whole_program():
    c = candidate(
        "Read two numbers and print their sum.",
        "```python\nprint(sum(map(int, input().split())))\n```",
        prompt_is_code=False,
    )
    assert c.code.startswith("print(")


def test_a_task_survives_its_json_column():
    task = Task(
        "t/1",
        "toy",
        PROMPT,
        "    return a + b\n",
        "add",
        test_type="call",
        test_cases=({"input": [1, 2], "output": 3},),
    )
    assert task_from_json(task_to_json(task)) == task


# --------------------------------------------------------------------------- rewards (sandbox)


def test_bad_completions_score_zero_and_are_counted_by_reason(reward, humaneval0):
    t = humaneval0
    completions = {
        "passed": t.solution,
        "no_code": "",
        "syntax_error": "    return (\n",
        "timeout": "    while True:\n        pass\n",
        "output_limit": "    print('x' * 10**7)\n" + t.solution,  # right answer, megabytes printed
        "failed": "    return True\n",
        "chat_passed": "```python\nfrom typing import List\n\ndef has_close_elements(numbers, threshold):\n"
        "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n```",
    }
    reward.take_counts()
    rewards = reward([t.prompt] * len(completions), list(completions.values()), task=[task_to_json(t)] * 7)
    assert rewards == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert reward.take_counts() == {
        "passed": 2,
        "no_code": 1,
        "syntax_error": 1,
        "timeout": 1,
        "output_limit": 1,
        "failed": 1,
    }
    assert reward.take_counts() == {}  # reset after each take


def test_fraction_mode_gives_partial_credit_on_case_tests():
    task = Task(
        "t/abs",
        "toy",
        'def f(x):\n    """Absolute value."""\n',
        "    return abs(x)\n",
        "f",
        test_type="call",
        test_cases=tuple({"input": [x], "output": abs(x)} for x in (1, 2, -3, -4)),
    )
    wrong_on_negatives = "    return x\n"
    with closing(CodeReward(mode="fraction", workers=1)) as r:
        assert r(["p"] * 2, [wrong_on_negatives, task.solution], task=[task_to_json(task)] * 2) == [0.5, 1.0]
    with closing(CodeReward(mode="binary", workers=1)) as r:
        assert r(["p"], [wrong_on_negatives], task=[task_to_json(task)]) == [0.0]


def test_a_missing_task_column_is_a_clear_error(reward):
    with pytest.raises(KeyError, match="`task`"):
        reward(["p"], ["    return 1\n"])


def test_a_sandbox_without_its_layers_refuses_to_score_unless_allowed(humaneval0, monkeypatch):
    from leaklab.execution import rewards

    monkeypatch.setattr(rewards, "Sandbox", functools.partial(Sandbox, disable=["seccomp"]))
    with closing(CodeReward(workers=1)) as refusing:
        with pytest.raises(WeakerSandboxError, match="seccomp"):
            refusing([humaneval0.prompt], [humaneval0.solution], task=[task_to_json(humaneval0)])
        assert refusing.counts == {}  # refused before any verdict
    with closing(CodeReward(workers=1, allow_weaker_sandbox=True)) as allowed:
        assert allowed([humaneval0.prompt], [humaneval0.solution], task=[task_to_json(humaneval0)]) == [1.0]
        assert any("seccomp" in m for m in allowed.missing_layers)


def test_a_failing_pool_scores_the_batch_zero_and_the_next_call_gets_a_new_pool(humaneval0, monkeypatch):
    from leaklab.execution import rewards

    t = humaneval0
    with closing(CodeReward(workers=1)) as r:
        real = rewards.check_many
        monkeypatch.setattr(
            rewards, "check_many", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("pool died"))
        )
        assert r([t.prompt], [t.solution], task=[task_to_json(t)]) == [0.0]
        assert r.take_counts() == {"error": 1}
        monkeypatch.setattr(rewards, "check_many", real)
        assert r([t.prompt], [t.solution], task=[task_to_json(t)]) == [1.0]


def test_repeated_completions_of_a_group_run_once_and_share_the_verdict(humaneval0, monkeypatch):
    from leaklab.execution import rewards

    t = humaneval0
    seen: list[int] = []
    real = rewards.check_many

    def counting(items, *a, **k):
        seen.append(len(items))
        return real(items, *a, **k)

    monkeypatch.setattr(rewards, "check_many", counting)
    group = [t.solution, "    return False\n", t.solution, t.solution, "    return False\n", ""]
    with closing(CodeReward(workers=1)) as r:
        assert r([t.prompt] * 6, group, task=[task_to_json(t)] * 6) == [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
        assert r.take_counts() == {"passed": 3, "failed": 2, "no_code": 1}  # counted per completion
    assert seen == [2]  # two distinct programs reached the sandbox


def test_an_unknown_reward_mode_is_refused_not_scored_as_binary():
    # A typo must not silently train on the binary reward.
    with pytest.raises(ValueError, match="'fractoin': use one of binary, fraction"):
        CodeReward(mode="fractoin")
