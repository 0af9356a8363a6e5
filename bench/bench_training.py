"""Training throughput: leaklab's `cpt` stage vs a plain HF Trainer loop, same packed stream and model.

Both sides train the same initial weights on the same blocks with the same batch size; leaklab's side is
built exactly as `train.py` builds it (its TrainingArguments, callbacks that write result rows, the
checkpoint-evaluation hook present but with nothing to evaluate), the plain side is a bare `Trainer`.
Runs alternate A/B/A/B and the best of each is compared, so a busy machine hurts both sides alike.

    python bench/bench_training.py [--steps 40] [--repeats 2] [--smoke]

`--smoke` (what the test of every bench runs): 2 steps, one round, no warm-up, a small tiny model
(`leaklab.recipe.SMOKE_TINY`) and 40 corpus texts: it shows the script still runs, its numbers mean nothing.

Prints a table, then one JSON line: {"bench": "training", "ratio_vs_plain_trainer": ..., ...}.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import tempfile
import time
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="the smallest run that exercises every path")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.repeats = 2, 1

    from transformers import Trainer, TrainingArguments, default_data_collator
    from transformers.utils import logging as hf_logging

    from leaklab.data.benchmarks import load_humaneval
    from leaklab.data.corpora import corpus_texts
    from leaklab.data.mixing import build_mixture
    from leaklab.data.splits import split_members
    from leaklab.evaluate import Evaluator
    from leaklab.evaluations.base import build_eval_set
    from leaklab.models.load import load_model, load_tokenizer, resolve_model_path
    from leaklab.models.lora import apply_lora
    from leaklab.recipe import SMOKE_TINY, load_recipe
    from leaklab.rundir import RunDir
    from leaklab.training.callbacks import EvaluateCheckpoints, TrainingRows
    from leaklab.training.cpt import PackedBlocks, build_trainer

    hf_logging.set_verbosity_error()
    recipe = load_recipe(
        "tiny_cpt",
        [
            f"train.max_steps={args.steps}",
            "train.save_every=100000",
            "evaluate.base_model=false",
            "evaluate.every_checkpoint=false",
            "tracking.wandb.enabled=false",
            *(SMOKE_TINY if args.smoke else []),
        ],
    )
    path = resolve_model_path(recipe.model)
    tokenizer = load_tokenizer(path)
    base_model = load_model(path, "float32")
    tasks = load_humaneval()
    split = split_members([t.task_id for t in tasks], seed=0)
    by_id = {t.task_id: t for t in tasks}
    corpus = corpus_texts("builtin")
    blocks, stats = build_mixture(
        [by_id[i].text() for i in split.member_ids],
        itertools.islice(corpus, 40) if args.smoke else corpus,
        tokenizer,
        code=1,
        web=5,
        block_len=recipe.mix.max_seq_len,
    )
    tokens_per_step = recipe.train.batch_size * recipe.mix.max_seq_len

    def leaklab_side(workdir: Path) -> float:
        run = RunDir(workdir)
        manifest = {"member_ids": split.member_ids, "non_member_ids": split.non_member_ids}
        eval_set = build_eval_set(tasks, manifest, "prompt+solution")
        evaluator = Evaluator(recipe, run, eval_set, base_path=path, log=lambda *a: None)
        callbacks = [EvaluateCheckpoints(evaluator, tokenizer, log=lambda *a: None), TrainingRows(run)]
        model = apply_lora(copy.deepcopy(base_model), recipe)
        trainer = build_trainer(
            model, tokenizer, PackedBlocks(blocks), recipe, run.checkpoints, callbacks, report_to="none"
        )
        trainer.args.disable_tqdm = True
        return timed(trainer)

    def plain_side(workdir: Path) -> float:
        targs = TrainingArguments(
            output_dir=str(workdir),
            max_steps=args.steps,
            per_device_train_batch_size=recipe.train.micro_batch_size,
            gradient_accumulation_steps=recipe.train.batch_size // recipe.train.micro_batch_size,
            learning_rate=recipe.train.learning_rate,
            lr_scheduler_type="constant",
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            log_level="error",
            logging_steps=recipe.train.logging_steps,
            dataloader_pin_memory=False,
        )
        trainer = Trainer(
            model=copy.deepcopy(base_model),
            args=targs,
            train_dataset=PackedBlocks(blocks),
            data_collator=default_data_collator,
        )
        return timed(trainer)

    def timed(trainer) -> float:
        start = time.perf_counter()
        trainer.train()
        return args.steps * tokens_per_step / (time.perf_counter() - start)

    # One untimed round first: the first Trainer in a process pays for lazy imports and allocator warm-up.
    for side in () if args.smoke else (leaklab_side, plain_side):
        with tempfile.TemporaryDirectory() as tmp:
            side(Path(tmp))
    results: dict[str, list[float]] = {"leaklab": [], "plain": []}
    for _ in range(args.repeats):
        for name, side in (("leaklab", leaklab_side), ("plain", plain_side)):
            with tempfile.TemporaryDirectory() as tmp:
                results[name].append(side(Path(tmp)))

    best = {k: max(v) for k, v in results.items()}
    ratio = best["leaklab"] / best["plain"]
    print(
        f"model {path} ({sum(p.numel() for p in base_model.parameters()) / 1e6:.2f}M params), threads {torch.get_num_threads()}"
    )
    print(
        f"{args.steps} steps x {tokens_per_step} tokens, repeats {args.repeats} (A/B alternating, best taken)"
    )
    print(f"{'side':<10}{'tokens/s (each run)':<34}{'best':>10}")
    for name, values in results.items():
        print(f"{name:<10}{', '.join(f'{v:,.0f}' for v in values):<34}{best[name]:>10,.0f}")
    print(f"ratio leaklab / plain: {ratio:.3f} (target >= 0.95)")
    print(
        json.dumps(
            {
                "bench": "training",
                "ratio_vs_plain_trainer": round(ratio, 4),
                "leaklab_tokens_per_s": round(best["leaklab"]),
                "plain_tokens_per_s": round(best["plain"]),
                "steps": args.steps,
                "tokens_per_step": tokens_per_step,
                "threads": torch.get_num_threads(),
            }
        )
    )


if __name__ == "__main__":
    main()
