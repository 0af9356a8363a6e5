"""The RL reward: a completion earns 1 when its program passes all of its task's tests in the sandbox;
nothing a completion does stops training. See docs/sandbox.md#the-rl-reward.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from leaklab.data.tasks import Task, task_from_dict, task_to_dict
from leaklab.execution.config import require_layers
from leaklab.execution.correctness import check_many
from leaklab.execution.extract import candidate
from leaklab.execution.sandbox import Sandbox
from leaklab.training.rl_config import REWARD_MODES

log = logging.getLogger(__name__)


@dataclass
class Scored:
    reward: float
    # passed, failed (by the tests), no_code, syntax_error, too_long, timeout, output_limit, error
    reason: str


def task_to_json(task: Task) -> str:
    """A task as one JSON string (a dataset column, veRL's ground_truth)."""
    return json.dumps(task_to_dict(task), default=str, sort_keys=True)


def task_from_json(text: str) -> Task:
    return task_from_dict(json.loads(text))


class CodeReward:
    """A TRL-compatible reward function over a lazily started, reused sandbox pool. `mode` is the
    recipe's `train.rl.reward`."""

    def __init__(
        self,
        *,
        mode: str = "binary",
        workers: int | None = None,
        timeout_s: float = 3.0,
        allow_weaker_sandbox: bool = False,
    ) -> None:
        if mode not in REWARD_MODES:  # veRL and direct callers arrive without the recipe's check
            raise ValueError(f"reward mode {mode!r}: use one of {', '.join(REWARD_MODES)}")
        self.__name__ = f"tests_{mode}"  # TRL names the logged reward after the function
        self.mode = mode
        self.allow_weaker_sandbox = allow_weaker_sandbox
        # Twice the cores: a run spends part of its time in fork and namespace set-up, not on a CPU
        # (measured on 2 cores: 4 workers score ~1.4x what 2 do).
        workers = workers or min(16, 2 * (os.cpu_count() or 1))
        # 64 KiB of output is plenty for a program that passes; more fails it (`output_limit`).
        self._sandbox_args = dict(workers=workers, timeout_s=timeout_s, max_output_bytes=1 << 16)
        self._sandbox: Sandbox | None = None
        self._checked = False
        self._parsed: dict[str, Task] = {}
        self.counts: Counter[str] = Counter()
        self._since_take: Counter[str] = Counter()
        self.missing_layers: list[str] = []

    # ------------------------------------------------------------------ the sandbox

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = Sandbox(**self._sandbox_args)
        if not self._checked:
            # Raises WeakerSandboxError (before any verdict) when a layer is missing and not allowed.
            self.missing_layers = require_layers(self._sandbox.isolation, self.allow_weaker_sandbox)
            self._checked = True
        return self._sandbox

    def check_sandbox(self) -> list[str]:
        """Start the pool and check its layers now (the `rl` stage does this before training)."""
        _ = self.sandbox
        return self.missing_layers

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
            self._checked = False

    # ------------------------------------------------------------------ scoring

    def score(self, tasks: Sequence[Task], completions: Sequence[Any]) -> list[Scored]:
        """One Scored per (task, completion), checked in one sandbox batch."""
        if len(tasks) != len(completions):
            raise ValueError(f"{len(tasks)} tasks for {len(completions)} completions")
        scored: list[Scored | None] = [None] * len(tasks)
        todo: list[tuple[int, Task, str]] = []
        for i, (task, completion) in enumerate(zip(tasks, completions)):
            found = candidate(task.prompt, completion, task.entry_point, task.prompt_is_code)
            if found.code is None:
                scored[i] = Scored(0.0, found.problem or "no_code")
            else:
                todo.append((i, task, found.code))
        if todo:
            sandbox = self.sandbox  # outside the try: a refused sandbox must stop training
            # A group of completions for one prompt often repeats itself (more so as the policy
            # converges): each distinct (task, program) runs once and its verdict is shared.
            unique = {(id(t), code): (t, code) for _, t, code in todo}  # (the task object, the code)
            try:
                checked = dict(zip(unique, check_many(list(unique.values()), sandbox, full_program=False)))
            except Exception as err:  # the pool itself failed: this batch scores 0, the next gets a new pool
                log.error("reward: the sandbox failed on a batch of %d (%s); scored 0", len(todo), err)
                self.close()
                checked = dict.fromkeys(unique)
            for i, t, code in todo:
                result = checked[(id(t), code)]
                scored[i] = Scored(0.0, "error") if result is None else self._from_result(result)
        out = [s for s in scored if s is not None]
        reasons = Counter(s.reason for s in out)
        self.counts.update(reasons)
        self._since_take.update(reasons)
        return out

    def _from_result(self, result) -> Scored:
        if result.truncated:
            # Flooding stdout is not a solution, whatever the tests said.
            return Scored(0.0, "output_limit")
        if result.verdict == "passed":
            return Scored(1.0, "passed")
        if result.verdict in ("timeout", "error"):
            return Scored(0.0, result.verdict)
        partial = 0.0
        if self.mode == "fraction" and result.cases_total:
            partial = (result.cases_passed or 0) / result.cases_total
        return Scored(partial, "failed")

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float]:
        if "task" not in columns:
            raise KeyError("reward: the dataset needs a `task` column (task_to_json)")
        texts = [columns["task"][i] for i in range(len(completions))]
        for text in texts:
            if text not in self._parsed:
                self._parsed[text] = task_from_json(text)
        return [s.reward for s in self.score([self._parsed[t] for t in texts], completions)]

    def take_counts(self) -> dict[str, int]:
        """The reasons counted since the last call (for a training log), then reset."""
        counts = dict(self._since_take)
        self._since_take.clear()
        return counts
