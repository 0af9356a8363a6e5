"""The per-benchmark cache of sets built per task (SrDetection's variants, MRI's perturbed sets:
`cache_file`, `cached_sets`) and a run's own copy of them (`write_run_copy`, `read_run_copy`).
See docs/perturbations.md#caches-of-perturbed-sets.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from leaklab.data.tasks import Task
from leaklab.rundir import append_rows, cache_root, read_rows, write_atomic, write_json


def task_key(task: Task) -> str:
    """A hash of everything about a task that a set built from it depends on."""
    payload = json.dumps(
        [task.task_id, task.benchmark, task.prompt, task.solution, task.entry_point, task.tests]
        + [task.test_type, task.prompt_is_code, repr(task.test_cases)],
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def code_digest(paths: Sequence[Path]) -> str:
    """A hash of the source files that decide what a builder makes."""
    return hashlib.sha256(b"".join(path.read_bytes() for path in paths)).hexdigest()


def cache_file(kind: str, tasks: Sequence[Task], settings: list, cache_dir: str | Path | None = None) -> Path:
    """<cache>/<kind>/<benchmark>-<hash of the settings' JSON>.jsonl (the benchmark of the first task)."""
    benchmark = tasks[0].benchmark if tasks else "none"
    digest = hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:16]
    return Path(cache_dir or cache_root()) / kind / f"{benchmark}-{digest}.jsonl"


def cached_sets(
    path: Path,
    tasks: Sequence[Task],
    build: Callable[[list[Task]], list],
    to_json: Callable[[Any, Task], dict[str, Any]],
    from_json: Callable[[dict[str, Any], Task], Any],
    what: str,
    log: Callable[[str], Any] = print,
) -> list:
    """The sets of `tasks` (same order): read from `path`, building (`build(missing tasks)`) and appending
    only the tasks it does not hold yet."""
    stored = {row["key"]: row["set"] for row in read_rows(path)}
    keys = [task_key(t) for t in tasks]
    todo = [t for t, k in zip(tasks, keys) if k not in stored]
    if todo:
        log(f"[leaklab] building {what} for {len(todo)} of {len(tasks)} tasks")
        rows = [{"key": task_key(t), "set": to_json(s, t)} for t, s in zip(todo, build(todo))]
        append_rows(path, rows, key=lambda r: r["key"])
        stored.update((r["key"], r["set"]) for r in rows)
    else:
        log(f"[leaklab] {what} of {len(tasks)} tasks from {path}")
    return [from_json(stored[k], t) for t, k in zip(tasks, keys)]


def write_run_copy(path: Path, rows: Sequence[dict[str, Any]], summary_path: Path, summary: dict) -> None:
    """The run's own copy of its sets (one JSON line each) and their summary (JSON)."""
    write_atomic(path, "".join(json.dumps(row) + "\n" for row in rows))
    write_json(summary_path, summary)


def read_run_copy(path: Path) -> dict[str, dict[str, Any]]:
    """The rows of a run's copy by task id ({} when the run has none)."""
    return {row["task_id"]: row for row in read_rows(path)} if path.exists() else {}
