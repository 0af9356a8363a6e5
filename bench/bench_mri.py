"""MRI evaluation of one tiny_sft checkpoint: perturbed sets, generation, sandbox, rows; against asking
the same prompts one at a time.

  mri         `Mri().prepare(ctx)` (perturbed sets; timed apart, cached per benchmark afterwards) and
              `Mri().evaluate(ctx, model, tokenizer, step)` as the driver calls them, with tiny_sft's
              settings (evaluate.mri: 200 members + 200 non-members, original + rewritten + mutated)
  one-by-one  the generation engine with batch_size 1 on the first --naive prompts (what a loop over
              tasks without batching does), compared per prompt

The model is a checkpoint of a tiny_sft run (--run RUN_DIR [--step N], default its last) or, without
--run, the recipe's base model (the same shapes and lengths; a trained model only stops earlier). The
target: one checkpoint in <= 3 minutes on 2 cores, so MRI can run at every checkpoint of a run.

    python bench/bench_mri.py [--run RUN_DIR] [--step N] [--naive 32] [--smoke]

Prints a table, then one JSON line: {"bench": "mri", "ratio_vs_one_by_one": ..., ...}.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

# --smoke: two tasks a side and short generations (with the small tiny model, `SMOKE_TINY`).
SMOKE_OVERRIDES = [
    "evaluate.mri.max_tasks=2",
    "evaluate.mri.max_new_tokens=8",
    "evaluate.accuracy.max_tasks=2",
    "evaluate.accuracy.max_new_tokens=8",
]


def checkpoint(run: str | None, step: int | None, overrides: list[str] = (), smoke: bool = False):
    """(recipe, model, tokenizer, eval set, step): a tiny_sft run's checkpoint (`step`, default its last)
    or, without a run, the tiny_sft recipe's base model on its own split. `smoke`: the small tiny
    model and `SMOKE_OVERRIDES` after `overrides`."""
    from leaklab.data.splits import split_members
    from leaklab.evaluate import build_eval_set, load_tasks
    from leaklab.models.load import load_checkpoint, load_model, load_tokenizer, resolve_model_path
    from leaklab.recipe import SMOKE_TINY, load_recipe
    from leaklab.rundir import RunDir, make_manifest, read_json

    if smoke:
        overrides = [*SMOKE_TINY, *overrides, *SMOKE_OVERRIDES]
    if run:
        source = RunDir(run)
        recipe = load_recipe(str(source.recipe), list(overrides))
        manifest = read_json(source.manifest)
        base = resolve_model_path(recipe.model)
        steps = dict(source.checkpoint_dirs())
        step = step if step is not None else max(steps)
        model = load_checkpoint(steps[step], base, recipe.model)
        tasks = load_tasks(recipe)
    else:
        recipe = load_recipe("tiny_sft", list(overrides))
        tasks = load_tasks(recipe)
        split = split_members([t.task_id for t in tasks], member_fraction=recipe.data.member_fraction,
                              seed=recipe.data.seed, max_samples=recipe.data.max_samples)  # fmt: skip
        manifest = make_manifest(recipe, tasks, split)
        base = resolve_model_path(recipe.model)
        model, step = load_model(base, "float32"), 0
    model.eval()
    return recipe, model, load_tokenizer(base), build_eval_set(tasks, manifest, recipe.data.text_format), step


def main() -> None:
    import torch

    from leaklab.data.prompting import model_prompt, resolve_format
    from leaklab.evaluations.base import EvalContext, first_per_side
    from leaklab.evaluations.mri import Mri
    from leaklab.execution.extract import STOP_SEQUENCES
    from leaklab.rundir import RunDir
    from leaklab.signals.generation import HFGenerator

    parser = argparse.ArgumentParser()
    parser.add_argument("--run", help="a tiny_sft run directory (default: the recipe's base model)")
    parser.add_argument("--step", type=int, help="its checkpoint (default: the last)")
    parser.add_argument("--naive", type=int, default=32, help="prompts generated one at a time")
    parser.add_argument("--smoke", action="store_true", help="the smoke tiny model, 2 tasks a side, 8 tokens")
    args = parser.parse_args()
    torch.set_num_threads(2)
    if args.smoke:
        args.naive = 2
    recipe, model, tokenizer, eval_set, step = checkpoint(args.run, args.step, smoke=args.smoke)

    with tempfile.TemporaryDirectory() as tmp:
        ctx = EvalContext(recipe=recipe, run=RunDir(tmp), eval_set=eval_set, log=lambda *a, **k: None)
        mri = Mri()
        t0 = time.perf_counter()
        mri.prepare(ctx)  # builds the sets into the per-benchmark cache, or reads them
        prepare_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = mri.evaluate(ctx, model, tokenizer, step)
        evaluate_s = time.perf_counter() - t0
        chosen, _ = first_per_side(ctx.eval_set, recipe.evaluate.mri.max_tasks)
        items = mri.items(chosen, recipe.evaluate.mri)

    # One at a time: the same engine, batch size 1, on the first --naive prompts.
    fmt = resolve_format(tokenizer, recipe.evaluate.mri.format)
    prompts = [model_prompt(t, tokenizer, fmt) for _, t, _ in items[: args.naive]]
    single = HFGenerator(model, tokenizer, batch_size=1)
    stop = STOP_SEQUENCES if fmt == "completion" else ()
    t0 = time.perf_counter()
    for p in prompts:
        single.generate([p], recipe.evaluate.mri.max_new_tokens, stop, 0.0)
    naive_rate = len(prompts) / (time.perf_counter() - t0)
    # The batched engine alone on the same prompts, for a like-for-like generation ratio.
    batched = HFGenerator(model, tokenizer, batch_size=recipe.evaluate.mri.batch_size)
    all_prompts = [model_prompt(t, tokenizer, fmt) for _, t, _ in items]
    t0 = time.perf_counter()
    batched.generate(all_prompts, recipe.evaluate.mri.max_new_tokens, stop, 0.0)
    batched_rate = len(all_prompts) / (time.perf_counter() - t0)

    got = {(r["column"], r["metric"]): r["value"] for r in out.rows}
    print(f"model: {'base' if not args.run else args.run} step {step}; {len(items)} prompts "
          f"({len(chosen)} tasks: original + rewritten + mutated)")  # fmt: skip
    print(f"{'phase':28} {'seconds':>8}")
    print(f"{'prepare (perturbed sets)':28} {prepare_s:8.1f}")
    print(f"{'evaluate (one checkpoint)':28} {evaluate_s:8.1f}")
    print(f"generation: batched {batched_rate:.1f} prompts/s, one-by-one {naive_rate:.1f} prompts/s")
    for side in ("members", "non_members"):
        print(f"{side:12} acc_ori {got.get((side, 'acc_ori'))} acc_rew {got.get((side, 'acc_rew'))} "
              f"sim {got.get((side, 'sim'))} mri_unchecked {got.get((side, 'mri_unchecked'))}")  # fmt: skip
    print(
        json.dumps(
            {
                "bench": "mri",
                "ratio_vs_one_by_one": round(batched_rate / naive_rate, 3),
                "evaluate_s": round(evaluate_s, 1),
                "prepare_s": round(prepare_s, 1),
                "prompts": len(items),
                "tasks": len(chosen),
                "step": step,
                "run": str(Path(args.run).resolve()) if args.run else None,
            }
        )
    )


if __name__ == "__main__":
    main()
