"""Jobs side by side on one machine: `leaklab study` runs its conditions this way, `make reproduce` its runs.

Each job runs in a process of its own (forked), `slots` at a time, with 1/slots of the CPU threads. A job
that needs others starts once they are done, in the first free slot (not after a whole batch of jobs), and is
marked failed without running when one of them failed. The jobs that others wait for start first (they
begin the longest chain), then those that wait (each starts as soon as it can), the rest in the order given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterator
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
    """Two jobs side by side on a machine without a GPU and with two cores or more (two single-thread
    training runs finish 1.23x as fast as one after the other with two threads each: docs/study.md#cost),
    one where a GPU is there (each job would want all of it)."""
    from leaklab.hardware import gpu_state

    return 1 if gpu_state()[0] else min(2, os.cpu_count() or 1)


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """`values` set in os.environ for the block, the previous values (or their absence) restored after."""
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def thread_split(slots: int) -> dict[str, str]:
    """The thread counts each of `slots` jobs starts with (the training processes read them at start)."""
    threads = str(max(1, (os.cpu_count() or 1) // slots))
    return {"LEAKLAB_CPU_THREADS": threads, "OMP_NUM_THREADS": threads} if slots > 1 else {}


def run_jobs(
    jobs: list[Job], slots: int, started: Callable[[Job], None], ended: Callable[[Job, dict[str, Any]], None]
) -> dict[str, dict[str, Any]]:
    """Every job, `slots` at a time (see the module); name -> what its call returned, with its wall time in
    seconds (`wall_s`). `started` and `ended` are called here, in this process, as each job starts and ends
    (a log line, a status file)."""
    waited_for = {name for job in jobs for name in job.needs}
    waiting = sorted(jobs, key=lambda job: (job.name not in waited_for, not job.needs))
    running, status, since = {}, {}, {}
    with environment(thread_split(slots)), ProcessPoolExecutor(slots, mp_context=get_context("fork")) as pool:
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
