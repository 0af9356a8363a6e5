"""Which process this is among those sharing an evaluation: every engine splits its work by it.

A module of its own, outside `signals`, so that evaluations whose settings the recipe reads can use it
without importing torch."""

from __future__ import annotations

from typing import Any


def world(accelerator: Any) -> tuple[int, int]:
    """(rank, number of processes); (0, 1) without an accelerator or in a single process."""
    if accelerator is None or getattr(accelerator, "num_processes", 1) <= 1:
        return 0, 1
    return int(accelerator.process_index), int(accelerator.num_processes)
