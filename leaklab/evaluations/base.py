"""What every evaluation works with: the evaluation set, the run's shared services, and its output.

An evaluation is a small class satisfying `plugins.Evaluation` (optionally `Summarises`,
`ReportsSection`), checked by tests/test_plugins.py: `specs(recipe)` is what its "done" marker
records, `prepare(ctx)` runs once per run, `evaluate(...)` once per checkpoint on every rank (only the
main process's output is written). The driver (`leaklab/evaluate.py`) owns done markers, resume, rank
agreement, writing rows and records, and W&B. An evaluation reads the recipe it is given, never the
recipe module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from leaklab.data.tasks import Task, context_of
from leaklab.rundir import RunDir


@dataclass
class EvalSet:
    """Members and non-members of one run, in manifest order, with the texts that get scored."""

    task_ids: list[str]
    labels: np.ndarray  # 1 = member (trained on), 0 = non-member
    texts: list[str]
    prompts: list[str]  # the part of each text before its solution
    tasks: list[Task] = field(default_factory=list)
    # Each sample's exposure dose (0 for non-members) when the run set `inject.doses`; None otherwise.
    doses: np.ndarray | None = None
    # Each sample's trained form (verbatim / rephrased; "" for non-members) when the run set
    # `inject.form: rephrased`; None otherwise. The texts scored are the originals either way.
    forms: list[str] | None = None
    # Each sample's place in the benchmark's own order (the loader's), e.g. for tests of that order.
    positions: list[int] = field(default_factory=list)


def build_eval_set(tasks: list[Task], manifest: dict[str, Any], text_format: str) -> EvalSet:
    """The evaluation set of a run: the manifest's members then non-members."""

    by_id = {t.task_id: t for t in tasks}
    position = {t.task_id: i for i, t in enumerate(tasks)}
    ids = [*manifest["member_ids"], *manifest["non_member_ids"]]
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ValueError(f"{len(missing)} manifest ids are not in the benchmark (first: {missing[0]!r})")
    labels = np.array([1] * len(manifest["member_ids"]) + [0] * len(manifest["non_member_ids"]))
    tasks_in_order = [by_id[i] for i in ids]
    return EvalSet(
        task_ids=ids,
        labels=labels,
        texts=[t.text(text_format) for t in tasks_in_order],
        # The part before the solution: what `scoring_span=solution` conditions on.
        prompts=[context_of(t.text(text_format), t.solution) for t in tasks_in_order],
        tasks=tasks_in_order,
        doses=np.array([manifest["doses"].get(i, 0) for i in ids]) if manifest.get("doses") else None,
        forms=[manifest["forms"].get(i, "") for i in ids] if manifest.get("forms") else None,
        positions=[position[i] for i in ids],
    )


@dataclass
class EvalContext:
    """A run's shared services, handed to every evaluation.

    reference: loads (model, tokenizer) of the reference model on first call (None when the recipe
        names none and there is no base model); the driver caches it.
    signal_cache: token statistics by (model fingerprint, text); None uses the process-wide cache.
    generation_cache: greedy continuations, <run>/cache/generations/ in a run.
    """

    recipe: Any
    run: RunDir
    eval_set: EvalSet
    accelerator: Any = None
    reference: Callable[[], Any] = lambda: None
    signal_cache: Any = None
    generation_cache: Any = None
    log: Callable[..., None] = print

    @property
    def is_main_process(self) -> bool:
        return self.accelerator is None or bool(getattr(self.accelerator, "is_main_process", True))


@dataclass
class EvalOutput:
    """One evaluation of one checkpoint: its metric rows (`leaklab.rows`; the driver adds step, epoch and
    evaluation) and per-sample records, written to scores/step-N/<evaluation>.jsonl."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)


def run_decoding(ctx: EvalContext, model, tokenizer, batch_size: int):
    """A `Decoding` through the run's generation cache, accelerator and prompt boundary."""
    from leaklab.signals.continuations import Decoding

    return Decoding(
        model,
        tokenizer,
        cache=ctx.generation_cache,
        accelerator=ctx.accelerator,
        prompt_boundary=ctx.recipe.evaluate.prompt_boundary,
        batch_size=batch_size,
    )


def side_indices(labels) -> dict[str, list[int]]:
    """The indices of the members, of the non-members and of all samples, by their rows' column."""
    return {
        "members": [i for i, y in enumerate(labels) if y == 1],
        "non_members": [i for i, y in enumerate(labels) if y == 0],
        "all": list(range(len(labels))),
    }


def first_per_side(eval_set: EvalSet, max_tasks: int | None) -> tuple[list[Task], list[int]]:
    """The first `max_tasks` members and the first `max_tasks` non-members (all when None), in order,
    with their labels: the tasks an evaluation that asks the model to solve them works on."""
    chosen, labels, per_side = [], [], {0: 0, 1: 0}
    for task, label in zip(eval_set.tasks, eval_set.labels):
        if max_tasks is None or per_side[int(label)] < max_tasks:
            per_side[int(label)] += 1
            chosen.append(task)
            labels.append(int(label))
    return chosen, labels
