"""Exposure doses: how many times per epoch each member is seen, and where in the stream.

`inject.doses: [1, 4, 16]` splits the members (seeded by data.seed) into equal groups, one per dose.
`plan_positions` lays one epoch out as `n_slots` ordered slots (packed blocks for cpt, examples for sft,
prompts for rl) and says which slots hold a copy of which member; every other slot holds other data.
The stages train on the slots in this order and count each member's exposures back from the data they
built (`count_in_stream`, or the rows), so the manifest's dose and the recorded count can be compared.
Window groups (`inject.windows`) are dealt members by `assign_windows`, each laid out in its own window.
See docs/testbeds.md#the-layout-step-by-step for the layout's formulas.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence

import numpy as np

from leaklab.errors import InputError


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


def slots_needed(copies: int, window: Sequence[float] | None, extra: int = 0) -> int:
    """The fewest slots whose window holds `copies` slots plus `extra` (the further slots that copies
    longer than one slot take)."""
    n = copies + extra
    while True:
        first, end = window_slots(n, window)
        if end - first >= copies + extra:
            return n
        n += 1


def member_ranks(member_ids: list[str], seed: int) -> list[str]:
    """The members in their seeded order (rank 0 first), independent of the order given."""
    ranked = sorted(member_ids)
    random.Random(f"inject.order:{seed}").shuffle(ranked)
    return ranked


def assign_windows(doses: dict[str, int], windows: dict[str, Sequence[float]], seed: int) -> dict[str, str]:
    """task id -> window group: each dose group's members (sorted, then shuffled with `seed`, its own
    stream) dealt in turn to the groups in the order of their windows' starts, so that every dose is
    split between the groups as evenly as it can be. In the order of `doses`."""
    names = sorted(windows, key=lambda name: (windows[name][0], name))
    rng = random.Random(f"inject.windows:{seed}")
    group: dict[str, str] = {}
    for dose in sorted(set(doses.values())):
        members = sorted(t for t, d in doses.items() if d == dose)
        rng.shuffle(members)
        group.update({t: names[i % len(names)] for i, t in enumerate(members)})
    return {t: group[t] for t in doses}


def layout_groups(
    doses: dict[str, int],
    window: Sequence[float] | None,
    windows: dict[str, Sequence[float]] | None = None,
    window_of: dict[str, str] | None = None,
) -> list[tuple[dict[str, int], Sequence[float] | None]]:
    """The members laid out together, each set with its window: every member in `window` (one set), or
    with window groups (`windows`, and `window_of`: task id -> group) each group's members in theirs."""
    if not windows:
        return [(doses, window)]
    window_of = window_of or {}
    return [
        ({t: d for t, d in doses.items() if window_of.get(t) == name}, span) for name, span in windows.items()
    ]


def slots_for_groups(
    groups: list[tuple[dict[str, int], Sequence[float] | None]], spans: dict[str, int], times: int = 1
) -> int:
    """The fewest slots in which every group's window holds `times` slots per copy of its members (plus
    the further slots of members longer than one slot)."""
    needed = [
        slots_needed(
            times * sum(group.values()), window, sum(d * (spans.get(t, 1) - 1) for t, d in group.items())
        )
        for group, window in groups
        if group
    ]
    return max(needed, default=0)


def plan_groups(
    groups: list[tuple[dict[str, int], Sequence[float] | None]],
    n_slots: int,
    seed: int = 0,
    spans: dict[str, int] | None = None,
) -> dict[str, list[int]]:
    """`plan_positions` for each set of `layout_groups` in its own window, merged (the windows of
    different groups do not overlap, so neither do their slots)."""
    positions: dict[str, list[int]] = {}
    for group, window in groups:
        if group:
            positions.update(plan_positions(group, n_slots, window, seed, spans))
    return positions


class LayoutError(ValueError):
    """The doses do not fit the stream (the caller says which recipe key to change)."""


def plan_rows(
    doses: dict[str, int], n_rows: int, inject, window_of: dict[str, str] | None, seed: int, note: str
):
    """row -> task id of every member copy in one epoch of `n_rows` rows (sft examples, rl prompts), laid
    out as the recipe's `inject` section asks. A layout that does not fit is the user's error, naming
    the key to change and `note` (what else the stage has to fill the stream)."""
    try:
        plan = plan_groups(layout_groups(doses, inject.window, inject.windows, window_of), n_rows, seed)
    except LayoutError as err:
        window_key = "inject.windows" if inject.windows else "inject.window"
        key = window_key if "do not fit" in str(err) else "inject.doses"
        raise InputError(f"{key}: {err}; {note}") from None
    return {row: task_id for task_id, rows in plan.items() for row in rows}


def plan_positions(
    doses: dict[str, int],
    n_slots: int,
    window: Sequence[float] | None = None,
    seed: int = 0,
    spans: dict[str, int] | None = None,
) -> dict[str, list[int]]:
    """task id -> the sorted slots where its copies start, in one epoch of `n_slots` slots, laid out as
    docs/testbeds.md#the-layout-step-by-step says. `spans`: the slots one copy of a member takes (cpt: a
    member longer than a block takes consecutive blocks; default 1)."""
    spans = spans or {}
    first, end = window_slots(n_slots, window)
    extra = sum(dose * (spans.get(task_id, 1) - 1) for task_id, dose in doses.items())
    width = end - first - extra
    copies_total = sum(doses.values())
    if copies_total > width:
        raise LayoutError(
            f"{copies_total} member exposures do not fit the {width} slots of the window "
            f"(of {n_slots} in the stream)"
        )
    rank = {task_id: r for r, task_id in enumerate(member_ranks(list(doses), seed))}
    phase = {task_id: (r + 0.5) / len(rank) for task_id, r in rank.items()}
    copies = sorted(
        ((j + phase[task_id]) / dose, rank[task_id], task_id)
        for task_id, dose in doses.items()
        for j in range(dose)
    )
    order = [task_id for _, _, task_id in copies]
    slots = [first + (2 * i + 1) * width // (2 * copies_total) for i in range(copies_total)]
    for i in range(1, copies_total):
        if order[i] == order[i - 1] and slots[i] - slots[i - 1] < 2:
            # Side by side: the next copy of another member comes forward one place.
            other = next((k for k in range(i + 1, copies_total) if order[k] != order[i]), None)
            if other is not None:
                order.insert(i, order.pop(other))
    for task_id in doses:
        own = [slot for other, slot in zip(order, slots, strict=True) if other == task_id]
        if any(b - a < 2 for a, b in zip(own, own[1:], strict=False)):
            raise LayoutError(
                f"{task_id}'s {len(own)} copies would sit in adjacent slots: its dose is too large a "
                f"share of the {copies_total} exposures in {width} slots"
            )
    positions: dict[str, list[int]] = {task_id: [] for task_id in doses}
    pushed = 0  # the further slots of the copies placed so far
    for task_id, slot in zip(order, slots, strict=True):
        positions[task_id].append(slot + pushed)
        pushed += spans.get(task_id, 1) - 1
    return positions


def row_exposures(member_ids: Iterable[str], owners: Iterable[str | None]) -> dict:
    """The exposures read back from the rows built (sft examples, rl prompts): `owners` names the member
    on each row in training order (None: other data). Rows are 0-based, one epoch."""
    rows: dict[str, list[int]] = {task_id: [] for task_id in member_ids}
    for row, task_id in enumerate(owners):
        if task_id is not None:
            rows[task_id].append(row)
    return {"order": "sequential", "exposures": {t: len(at) for t, at in rows.items()}, "exposure_rows": rows}


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
