"""The member / non-member split: the ground truth of a leakage experiment.

Only the manifest decides membership. The split depends on the task ids, the seed, the member fraction
and `max_samples`, nothing else, so the same recipe gives the same manifest byte for byte.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Split:
    member_ids: list[str]
    non_member_ids: list[str]


def split_members(
    task_ids: list[str], *, member_fraction: float = 0.5, seed: int = 0, max_samples: int | None = None
) -> Split:
    """Shuffle the ids with `seed`, keep the first `max_samples`, make the first `member_fraction` members.

    Ids are sorted first so the result does not depend on the order a loader returned them in.
    """
    if len(set(task_ids)) != len(task_ids):
        raise ValueError("task ids must be unique")
    ids = sorted(task_ids)
    random.Random(seed).shuffle(ids)
    if max_samples is not None:
        ids = ids[:max_samples]
    n_members = round(len(ids) * member_fraction)
    if not 0 < n_members < len(ids):
        raise ValueError(
            f"cannot split {len(ids)} tasks at member_fraction={member_fraction}: both sides need a task"
        )
    # Sorted inside each side so the manifest reads naturally; membership is what matters.
    return Split(member_ids=sorted(ids[:n_members]), non_member_ids=sorted(ids[n_members:]))
