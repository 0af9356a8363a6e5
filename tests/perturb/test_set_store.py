"""The per-benchmark store that variant sets and MRI perturbed sets share (`perturb/set_store.py`)."""

from __future__ import annotations

import dataclasses

from leaklab.data.tasks import Task
from leaklab.perturb import set_store

TASKS = [
    Task(task_id=f"toy/{n}", benchmark="toy", prompt=f"def f{n}():\n", solution=f"    return {n}\n", entry_point=f"f{n}", tests="")
    for n in range(3)
]  # fmt: skip


def test_each_task_is_built_once_and_read_back_in_order(tmp_path):
    path = set_store.cache_file("kind", TASKS, [1, "x"], tmp_path)
    assert path.parent == tmp_path / "kind" and path.name.startswith("toy-")
    built, logs = [], []

    def build(todo):
        built.extend(t.task_id for t in todo)
        return [{"n": t.task_id} for t in todo]

    def cached(tasks):
        return set_store.cached_sets(
            path, tasks, build, lambda s, t: s, lambda d, t: (t.task_id, d["n"]), "toys", logs.append
        )

    assert cached(TASKS[:2]) == [("toy/0", "toy/0"), ("toy/1", "toy/1")]
    assert cached(TASKS[::-1]) == [(t.task_id, t.task_id) for t in TASKS[::-1]]
    assert built == ["toy/0", "toy/1", "toy/2"]  # each once; only the missing one the second time
    assert logs[0] == "[leaklab] building toys for 2 of 2 tasks" and "1 of 3" in logs[1]
    assert cached(TASKS) and logs[-1].startswith("[leaklab] toys of 3 tasks from")
    # A changed task is another key: built again, not served from its old content.
    changed = dataclasses.replace(TASKS[0], solution="    return -1\n")
    cached([changed])
    assert built[-1] == "toy/0"


def test_the_runs_copy_round_trips(tmp_path):
    rows = [{"task_id": t.task_id, "v": i} for i, t in enumerate(TASKS)]
    set_store.write_run_copy(tmp_path / "sets.jsonl", rows, tmp_path / "summary.json", {"tasks": 3})
    assert set_store.read_run_copy(tmp_path / "sets.jsonl") == {r["task_id"]: r for r in rows}
    assert set_store.read_run_copy(tmp_path / "none.jsonl") == {}
