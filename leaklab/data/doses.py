"""Exposure doses: how many times per epoch each member is seen, and where in the stream.

`inject.doses: [1, 4, 16]` splits the members (seeded by data.seed) into equal groups, one per dose.
`plan_positions` lays one epoch out as `n_slots` ordered slots (packed blocks for cpt, examples for sft,
prompts for rl) and says which slots hold a copy of which member; every other slot holds other data
(corpus text, other instruction data). The stages train on the slots in this order (a sequential
sampler), and count the exposures each member actually got from the data they built
(`count_in_stream`, or the rows themselves), so the manifest's dose and the recorded count can be
compared.

The layout, so that it can be checked by hand:
  - the window [start, end] covers slots round(start * n) .. round(end * n) - 1 (L slots);
  - every copy gets a key (j + 0.5) / d (the j-th of a member's d copies, at the middle of its 1/d
    share of the window); copies are ordered by key, ties broken by a seeded rank of the members;
  - the i-th of the C copies in that order goes to slot start_slot + floor((i + 0.5) * L / C).
So a member's copies are spread evenly through the window, and two copies of one member are never in
adjacent slots (checked: a layout that would put them side by side is refused).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np


def assign_doses(member_ids: Sequence[str], doses: Sequence[int], seed: int) -> dict[str, int]:
    """task id -> dose: members shuffled with `seed`, then dealt in turn to the dose groups, so the
    groups differ in size by at most one. In the order of `member_ids`."""
    if len(doses) > len(member_ids):
        raise ValueError(f"{len(doses)} dose groups but only {len(member_ids)} members")
    shuffled = sorted(member_ids)
    # Its own stream of the seed: the split already shuffled the ids with data.seed itself.
    random.Random(f"inject.doses:{seed}").shuffle(shuffled)
    dose_of = {task_id: doses[i % len(doses)] for i, task_id in enumerate(shuffled)}
    return {task_id: dose_of[task_id] for task_id in member_ids}


def window_slots(n_slots: int, window: Sequence[float] | None) -> tuple[int, int]:
    """The slots [first, end) that the window [start, end] (fractions of the stream) covers."""
    start, end = window if window is not None else (0.0, 1.0)
    # Halves round up (Python's round() would send 2.5 to 2 and 3.5 to 4).
    return math.floor(start * n_slots + 0.5), math.floor(end * n_slots + 0.5)


def slots_needed(copies: int, window: Sequence[float] | None) -> int:
    """The fewest slots whose window holds `copies` slots."""
    n = copies
    while True:
        first, end = window_slots(n, window)
        if end - first >= copies:
            return n
        n += 1


class LayoutError(ValueError):
    """The doses do not fit the stream (the caller says which recipe key to change)."""


def plan_positions(
    doses: dict[str, int], n_slots: int, window: Sequence[float] | None = None, seed: int = 0
) -> dict[str, list[int]]:
    """task id -> the sorted slots its copies take in one epoch of `n_slots` slots (see the module)."""
    first, end = window_slots(n_slots, window)
    width = end - first
    copies_total = sum(doses.values())
    if copies_total > width:
        raise LayoutError(
            f"{copies_total} member exposures do not fit the {width} slots of the window "
            f"(of {n_slots} in the stream)"
        )
    ranked = sorted(doses)
    random.Random(f"inject.order:{seed}").shuffle(ranked)
    rank = {task_id: i for i, task_id in enumerate(ranked)}
    copies = sorted(
        ((j + 0.5) / dose, rank[task_id], task_id) for task_id, dose in doses.items() for j in range(dose)
    )
    positions: dict[str, list[int]] = {task_id: [] for task_id in doses}
    for i, (_, _, task_id) in enumerate(copies):
        positions[task_id].append(first + (2 * i + 1) * width // (2 * copies_total))
    for task_id, slots in positions.items():
        if any(b - a < 2 for a, b in zip(slots, slots[1:], strict=False)):
            raise LayoutError(
                f"{task_id}'s {len(slots)} copies would sit in adjacent slots: its dose is too large a "
                f"share of the {copies_total} exposures in {width} slots"
            )
    return positions


def find_all(stream: bytes, needle: bytes, item_size: int) -> list[int]:
    """Item offsets where `needle` occurs in `stream` (both arrays of `item_size`-byte items)."""
    found, at = [], stream.find(needle)
    while at != -1:
        if at % item_size == 0:
            found.append(at // item_size)
            at = stream.find(needle, at + len(needle))
        else:  # a match that straddles two items is no match
            at = stream.find(needle, at + 1)
    return found


def count_in_stream(blocks: np.ndarray, member_tokens: dict[str, list[int]]) -> dict[str, list[int]]:
    """task id -> the blocks where each occurrence of its token ids starts, read from the packed
    blocks themselves (their rows laid end to end, as the sequential sampler feeds them)."""
    flat = np.ascontiguousarray(blocks, dtype=np.int64).reshape(-1)
    stream, block_len = flat.tobytes(), blocks.shape[1]
    return {
        task_id: [offset // block_len for offset in find_all(stream, np.asarray(ids, np.int64).tobytes(), 8)]
        for task_id, ids in member_tokens.items()
    }
