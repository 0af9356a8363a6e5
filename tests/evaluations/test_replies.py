"""The generate -> extract -> judge pipeline shared by accuracy and MRI (`evaluations/replies.py`): code
read from replies, run in the sandbox only when some was read, verdicts cached per key so a second
evaluation of the same checkpoint neither generates nor judges."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from leaklab.data.tasks import Task
from leaklab.evaluations import replies
from leaklab.evaluations.replies import cached_judgements, read_replies, run_readings, verdict_cache
from leaklab.execution.sandbox import Sandbox
from leaklab.rundir import RunDir

ADD = Task(
    task_id="toy/add",
    benchmark="toy",
    prompt="def add(a, b):\n",
    solution="    return a + b\n",
    entry_point="add",
    tests="def check(candidate):\n    assert candidate(1, 2) == 3\n",
)
REPLIES = ["    return a + b\n", "    return a - b\n", ""]  # right, wrong, no code


def test_replies_are_read_and_only_code_is_run(monkeypatch):
    readings = read_replies([ADD] * 3, REPLIES, "completion")
    assert [bool(r.failure) for r in readings] == [False, False, True]
    assert readings[0].program == ADD.program(REPLIES[0])
    opened = []

    def recording_sandbox(**settings):
        opened.append(Sandbox(**settings))
        return opened[-1]

    monkeypatch.setattr(replies, "Sandbox", recording_sandbox)
    assert run_readings([ADD], readings[2:], 1, 5.0) == [None] and not opened  # nothing to run
    results = run_readings([ADD] * 3, readings, 1, 5.0)
    assert [r and r.verdict for r in results] == ["passed", "failed", None]
    assert len(opened) == 1


def test_a_second_evaluation_reads_every_verdict_from_the_cache(tmp_path):
    recipe = SimpleNamespace(evaluate=SimpleNamespace(prompt_boundary="cut"))
    ctx = SimpleNamespace(recipe=recipe, run=RunDir(tmp_path), is_main_process=True, log=lambda *a: None)
    model, tokenizer = torch.nn.Linear(2, 2), SimpleNamespace(get_vocab=lambda: {"a": 0})
    cache = verdict_cache(ctx, "toy", model, tokenizer, "completion", {"max_new_tokens": 8})
    assert cache.parent == RunDir(tmp_path).execution_cache / "toy"
    assert verdict_cache(ctx, "toy", model, tokenizer, "completion", {"max_new_tokens": 9}) != cache
    calls = []

    def generate():
        calls.append("generate")
        return REPLIES[:2]

    def judge(replies):
        calls.append("judge")
        return [{"verdict": "passed" if "+" in r else "failed"} for r in replies]

    first = cached_judgements(ctx, "toy", cache, ["a", "b"], "tasks", generate, judge)
    again = cached_judgements(ctx, "toy", cache, ["a", "b"], "tasks", generate, judge)
    assert first == again == [{"verdict": "passed"}, {"verdict": "failed"}]
    assert calls == ["generate", "judge"]
    cached_judgements(ctx, "toy", cache, ["a", "b", "c"], "tasks", lambda: REPLIES, judge)  # a new key
    assert calls == ["generate", "judge", "judge"]
    other = SimpleNamespace(**{**vars(ctx), "is_main_process": False})
    assert cached_judgements(other, "toy", cache, ["a"], "tasks", generate, judge) is None
