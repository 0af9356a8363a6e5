"""The SrDetection pre-filter (§3.2): drop benchmark tasks that look "leaked" before any injection.

A task whose original has a lower perplexity under the base model than every one of its variants would
be flagged by the gray box at step 0; the testbed leaves such tasks out of the member / non-member split
so that what the detectors find later was put there by training.
"""

from __future__ import annotations

from leaklab.data.splits import split_members
from leaklab.data.tasks import Task
from leaklab.detectors.srdetection import gray_box_decisions, gray_scores, inputs_from_tasks
from leaklab.perturb import store as variant_store
from leaklab.recipe import Recipe


def prefilter_candidates(tasks: list[Task], recipe: Recipe) -> list[Task]:
    """The tasks `data.max_samples` selects (the same draw as the split's), in benchmark order."""
    chosen = split_members(
        [t.task_id for t in tasks],
        member_fraction=recipe.data.member_fraction,
        seed=recipe.data.seed,
        max_samples=recipe.data.max_samples,
    )
    chosen_ids = set(chosen.member_ids) | set(chosen.non_member_ids)
    return [t for t in tasks if t.task_id in chosen_ids]


def prefilter_tasks(model, tokenizer, tasks: list[Task], recipe: Recipe, log=print) -> dict:
    """Drop the tasks whose original already has a lower perplexity than every one of its variants under
    the base model. Tasks the rule cannot decide (too few verified variants) are kept. Returns the
    counts, the dropped ids and the kept ids."""
    cfg = recipe.evaluate.srdetection
    sets = variant_store.variant_sets_for(tasks, cfg, log=log)
    original, variants = gray_scores(
        model, tokenizer, inputs_from_tasks(tasks, sets, recipe.data.text_format), recipe.evaluate
    )
    # Against all of a task's verified variants, at least two (one is a coin flip); not a per-n column,
    # so the detectors' "n verified variants" rule (min_variants 0) does not apply here.
    at_least = cfg.min_variants or 2
    decisions = gray_box_decisions(original, variants, n=cfg.n_variants, min_variants=at_least)
    dropped = [t.task_id for t, leak in zip(tasks, decisions.leak) if leak]
    log(
        f"[leaklab] pre-filter: dropped {len(dropped)} of {len(tasks)} tasks whose original is the easiest "
        f"of its variant set under the base model ({decisions.n_undecided} undecided, kept)"
    )
    return {
        "n_candidates": len(tasks),
        "n_dropped": len(dropped),
        "n_undecided": decisions.n_undecided,
        "n_variants": cfg.n_variants,
        "model": recipe.model.name_or_path,
        "dropped_ids": dropped,
        "kept_ids": [t.task_id for t, leak in zip(tasks, decisions.leak) if not leak],
    }
