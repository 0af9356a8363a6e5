"""The reward module veRL loads (`custom_reward_function.path` = this file): leaklab's sandbox verdict.

veRL calls `compute_score` per response or, with the `batch` reward manager leaklab's config selects,
`compute_score_batch` (one sandbox batch per step). `ground_truth` is the task as
`rewards.task_to_json` wrote it, `extra_info` the recipe's reward settings, so a row is all this needs.
One CodeReward (one pool of sandbox workers) lives per process and settings, checked like every reward:
a sandbox without its isolation layers refuses to score unless the recipe allowed it.
"""

from __future__ import annotations

import atexit
from collections.abc import Sequence
from typing import Any

from leaklab.execution.rewards import CodeReward, task_from_json

_REWARDS: dict[tuple, CodeReward] = {}


def _reward(extra_info: dict[str, Any] | None) -> CodeReward:
    info = extra_info or {}
    key = (
        str(info.get("reward_mode", "binary")),
        bool(info.get("allow_weaker_sandbox", False)),
        float(info.get("sandbox_timeout_s", 3.0)),
        int(info.get("sandbox_workers", 0)) or None,
    )
    if key not in _REWARDS:
        mode, allow_weaker, timeout_s, workers = key
        _REWARDS[key] = CodeReward(
            mode=mode, allow_weaker_sandbox=allow_weaker, timeout_s=timeout_s, workers=workers
        )
    return _REWARDS[key]


@atexit.register
def _close_all() -> None:
    for reward in _REWARDS.values():
        reward.close()


def compute_score_batch(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[str],
    extra_infos: Sequence[dict[str, Any] | None] | None = None,
    **kwargs: Any,
) -> list[float]:
    """One score per response, checked in one sandbox batch."""
    infos = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    reward = _reward(infos[0] if infos else None)
    tasks = [task_from_json(g) for g in ground_truths]
    return [s.reward for s in reward.score(tasks, list(solution_strs))]


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: dict[str, Any] | None = None, **kwargs
) -> float:
    """The score of one response (veRL's per-item signature)."""
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info])[0]
