"""The one record every benchmark loader returns."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Task:
    """One benchmark problem.

    `prompt` is what a model is shown (HumanEval: signature + docstring; APPS: the problem statement),
    `solution` the canonical answer that completes it (HumanEval: the body; APPS: a whole program).
    `test_type` names the shape of the tests:
      - "function": `tests` defines `check(candidate)` (HumanEval), called on `entry_point`;
      - "stdio" / "call": `test_cases` is a list of {"input": ..., "output": ...}, fed on standard
        input or passed as arguments to `entry_point`; a "call" case without "output" is checked
        against the canonical solution's output (EvalPlus differential testing);
      - "unittest": `tests` defines a unittest.TestCase subclass `TestCases` (BigCodeBench).
    `prompt_is_code` is False when the prompt is prose and the solution a whole program (APPS);
    `compare` and `atol` say how "call" outputs are compared (`execution/correctness.py`).
    """

    task_id: str
    benchmark: str
    prompt: str
    solution: str
    entry_point: str | None = None
    tests: str = ""
    test_cases: tuple[dict[str, Any], ...] = ()
    test_type: str = "function"
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    prompt_is_code: bool = True
    compare: str = "exact"
    atol: float = 0.0

    def has_tests(self) -> bool:
        """Whether there is anything to run: test code (function, unittest) or test cases (stdio, call)."""
        return bool(self.tests.strip() or self.test_cases)

    def program(self, completion: str | None = None) -> str:
        """The program that runs: prompt + completion, or the completion alone when the prompt is prose.
        Without a completion, the canonical solution's program."""
        completion = self.solution if completion is None else completion
        return self.prompt + completion if self.prompt_is_code else completion

    def text(self, text_format: str = "prompt+solution") -> str:
        """The text that is injected into training and scored by the detectors (`data.text_format`, one of
        prompt+solution | solution | prompt: recipe validation checks it)."""
        if text_format == "prompt":
            return self.prompt
        return self.solution if text_format == "solution" else self.prompt + self.solution


def context_of(text: str, solution: str) -> str:
    """The part of a sample's text before its solution (what `scoring_span=solution` conditions on):
    all of it when there is no solution, none when the text does not end with the solution."""
    if not solution:
        return text
    return text[: -len(solution)] if text.endswith(solution) else ""


def task_to_dict(task: Task) -> dict[str, Any]:
    """A task as plain JSON-ready data (test_cases as a list): the one stored form of a task, used by the
    perturbed-set stores and the RL reward's dataset column."""
    data = dataclasses.asdict(task)
    data["test_cases"] = list(task.test_cases)
    return data


def task_from_dict(data: dict[str, Any]) -> Task:
    """The task `task_to_dict` wrote; keys of other leaklab versions that Task no longer has are ignored."""
    known = {f.name for f in dataclasses.fields(Task)}
    return Task(
        **{**{k: v for k, v in data.items() if k in known}, "test_cases": tuple(data.get("test_cases") or ())}
    )
