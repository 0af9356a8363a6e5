"""A run's tasks: the recipe's benchmark, checked against what the recipe will do with it.

Training reads them first (to split and mix), then every evaluation; both call `load_tasks`. Tasks
without tests are fine unless something in the recipe runs them (`tests_needed_by`), and a local
benchmark's canonical solutions are run against their own tests before anything trusts those tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leaklab.data.benchmarks import load_benchmark
from leaklab.data.tasks import Task
from leaklab.errors import InputError
from leaklab.evaluations import EVALUATIONS
from leaklab.execution.correctness import canonical_failures
from leaklab.plugins import RunsTests

if TYPE_CHECKING:
    from leaklab.recipe import Recipe


def tests_needed_by(recipe: Recipe) -> list[str]:
    """What in the recipe runs the benchmark's tests, each as the key and value that asks for it: the
    evaluations that need executions (accuracy, mri, detection with variants verified by `tests`), and
    RL training, whose reward is the tests passing. [] when nothing does."""
    needing = []
    if recipe.train.stage == "rl":
        needing.append("train.stage: rl (its reward runs the tests)")
    for name in recipe.evaluate.evaluations:
        evaluation = EVALUATIONS[name].load()()
        why = evaluation.runs_tests(recipe) if isinstance(evaluation, RunsTests) else None
        if why:
            needing.append(why)
    return needing


def load_tasks(
    recipe: Recipe, log=print, left_out: list[dict[str, str]] | None = None, check_solutions: bool = True
) -> list[Task]:
    """The recipe's benchmark, checked as the module says. A local task whose canonical solution fails
    is left out, logged and appended to `left_out` as {"task_id", "reason"} (the manifest records
    them); every one failing is an error. `check_solutions` False skips this (a trained run's
    evaluation: its manifest already decided the tasks)."""
    data = recipe.data
    # `synthetic` is drawn with data.seed and built at data.max_samples tasks; other loaders ignore both.
    tasks = load_benchmark(
        data.benchmark,
        label=data.name,
        path=data.path,
        hub_name=data.hub_name,
        split=data.split,
        difficulty=data.difficulty,
        seed=data.seed,
        max_samples=data.max_samples,
    )
    needing = tests_needed_by(recipe)
    source = data.path or data.hub_name or data.benchmark
    empty = [t for t in tasks if not t.has_tests()]
    if needing and empty:
        raise InputError(
            f"{source}: {len(empty)} of {len(tasks)} tasks have no tests (first: {empty[0].task_id}), "
            f"but {needing[0]} needs them; give every task a test, or leave out what runs them"
        )
    if needing and data.path and check_solutions:
        tasks = _drop_failing_solutions(tasks, source, log, left_out)
    return tasks


def _drop_failing_solutions(tasks: list[Task], source: str, log, left_out) -> list[Task]:
    """`tasks` without those whose canonical solution fails its own tests (see `load_tasks`)."""
    failing = canonical_failures(tasks)
    if not failing:
        return tasks
    first, why = next(iter(failing.items()))
    why = why.strip().splitlines()[0][:200] if why.strip() else "failed"
    if len(failing) == len(tasks):
        raise InputError(
            f"{source}: the canonical solution of every task fails its own tests (first: {first}: {why}); "
            "check the tests, and that data.benchmark names the file's format"
        )
    log(
        f"[leaklab] {source}: the canonical solutions of {len(failing)} of {len(tasks)} tasks fail their "
        f"own tests (first: {first}: {why}); those tasks are left out"
    )
    if left_out is not None:
        left_out.extend({"task_id": i, "reason": r} for i, r in failing.items())
    return [t for t in tasks if t.task_id not in failing]
