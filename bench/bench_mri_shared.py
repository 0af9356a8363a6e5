"""MRI's answers to the original tasks shared with the accuracy evaluation through the run's generation
cache, against MRI decoding them again (what it did before).

At one checkpoint (tiny_sft's base model, or --run RUN_DIR [--step N]) the driver runs accuracy, then
mri, with the same format / max_new_tokens / stops. Timed, each on a fresh generation cache:
  accuracy        `Accuracy().evaluate` (greedy pass@1; fills the cache with the originals' replies)
  mri shared      `Mri().evaluate` after accuracy: the originals come from the cache
  mri alone       `Mri().evaluate` on an empty cache: every prompt decoded (the old cost)
Both MRI runs must give the same rows (the shared replies are the ones accuracy judged).

    python bench/bench_mri_shared.py [--run RUN_DIR] [--step N] [--tasks 100] [--smoke]

Prints a table, then one JSON line: {"bench": "mri_shared", "ratio_alone_vs_shared": ..., ...}.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time


def main() -> None:
    import torch
    from bench_mri import checkpoint  # the same checkpoint loading as bench_mri.py

    from leaklab.evaluations.accuracy import Accuracy
    from leaklab.evaluations.base import EvalContext, first_per_side
    from leaklab.evaluations.mri import Mri
    from leaklab.rundir import RunDir
    from leaklab.signals.continuations import GenerationCache

    parser = argparse.ArgumentParser()
    parser.add_argument("--run", help="a tiny_sft run directory (default: the recipe's base model)")
    parser.add_argument("--step", type=int, help="its checkpoint (default: the last)")
    parser.add_argument(
        "--tasks", type=int, default=100, help="members and non-members each, both evaluations"
    )
    parser.add_argument("--smoke", action="store_true", help="as bench_mri.py --smoke")
    args = parser.parse_args()
    torch.set_num_threads(2)
    overrides = [f"evaluate.mri.max_tasks={args.tasks}", f"evaluate.accuracy.max_tasks={args.tasks}",
                 "evaluate.accuracy.n_samples=0"]  # fmt: skip
    recipe, model, tokenizer, eval_set, step = checkpoint(args.run, args.step, overrides, smoke=args.smoke)
    quiet = lambda *a, **k: None  # noqa: E731

    def context(tmp: str) -> EvalContext:
        run = RunDir(tmp)
        return EvalContext(recipe=recipe, run=run, eval_set=eval_set, generation_cache=GenerationCache(run.generation_cache), log=quiet)  # fmt: skip

    with tempfile.TemporaryDirectory() as shared_dir, tempfile.TemporaryDirectory() as alone_dir:
        shared_ctx, alone_ctx = context(shared_dir), context(alone_dir)
        mri = Mri()
        mri.prepare(shared_ctx)  # the perturbed sets (per-benchmark cache): not part of either timing
        t0 = time.perf_counter()
        Accuracy().evaluate(shared_ctx, model, tokenizer, step)
        accuracy_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        shared = mri.evaluate(shared_ctx, model, tokenizer, step)
        shared_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        alone = mri.evaluate(alone_ctx, model, tokenizer, step)
        alone_s = time.perf_counter() - t0
        chosen, _ = first_per_side(shared_ctx.eval_set, recipe.evaluate.mri.max_tasks)
        n_prompts = len(mri.items(chosen, recipe.evaluate.mri))

    same_rows = [r["value"] for r in shared.rows] == [r["value"] for r in alone.rows]
    print(f"checkpoint step {step}; {len(chosen)} tasks; MRI prompts {n_prompts} (originals {len(chosen)})")
    print(f"{'what':<14}{'seconds':>10}")
    for name, secs in (("accuracy", accuracy_s), ("mri shared", shared_s), ("mri alone", alone_s)):
        print(f"{name:<14}{secs:>10.1f}")
    print(f"saved per checkpoint: {alone_s - shared_s:.1f} s; same MRI rows: {same_rows}")
    print(json.dumps({
        "bench": "mri_shared", "tasks": len(chosen), "mri_prompts": n_prompts, "accuracy_s": round(accuracy_s, 2),
        "mri_shared_s": round(shared_s, 2), "mri_alone_s": round(alone_s, 2),
        "saved_s": round(alone_s - shared_s, 2), "ratio_alone_vs_shared": round(alone_s / shared_s, 3),
        "same_rows": same_rows,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
