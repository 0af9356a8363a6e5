"""Jobs side by side on one machine (`leaklab study`'s conditions, `make reproduce`'s runs): each in a forked
process, `slots` at a time with 1/slots of the CPU threads. A job that needs others starts in the first free
slot once they are done (failed without running if one failed); those others wait for start first.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from typing import Any


@dataclasses.dataclass
class Job:
    name: str
    # module level (it is pickled); returns {"state": "done" | "failed", ...}
    call: Callable[[Any], dict[str, Any]]
    arg: Any
    needs: tuple[str, ...] = ()


def default_slots() -> int:
    """Two jobs without a GPU given two cores (1.23x as fast: docs/study.md#cost), one with a GPU."""
    from leaklab.hardware import gpu_state

    return 1 if gpu_state()[0] else min(2, os.cpu_count() or 1)


def run_jobs(
    jobs: list[Job], slots: int, started: Callable[[Job], None], ended: Callable[[Job, dict[str, Any]], None]
) -> dict[str, dict[str, Any]]:
    """Every job: name -> what it returned, with `wall_s`; `started` / `ended` are called in this process."""
    waited_for = {name for job in jobs for name in job.needs}
    waiting = sorted(jobs, key=lambda job: (job.name not in waited_for, not job.needs))
    running, status, since = {}, {}, {}
    # Each job's share of the CPU threads, set in the pool's processes only, never in this one.
    threads = str(max(1, (os.cpu_count() or 1) // slots))
    split = {"LEAKLAB_CPU_THREADS": threads, "OMP_NUM_THREADS": threads} if slots > 1 else {}
    with ProcessPoolExecutor(
        slots, mp_context=get_context("fork"), initializer=os.environ.update, initargs=(split,)
    ) as pool:
        while waiting or running:
            for job in list(waiting):
                failed = [n for n in job.needs if n in status and status[n]["state"] != "done"]
                if failed:
                    waiting.remove(job)
                    status[job.name] = {"state": "failed", "line": f"needs {failed[0]}, which failed"}
                    ended(job, status[job.name])
                elif len(running) < slots and all(n in status for n in job.needs):
                    waiting.remove(job)
                    started(job)
                    since[job.name] = time.monotonic()
                    running[pool.submit(job.call, job.arg)] = job
            if running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    job = running.pop(future)
                    status[job.name] = {
                        **future.result(),
                        "wall_s": round(time.monotonic() - since[job.name], 1),
                    }
                    ended(job, status[job.name])
    return status
