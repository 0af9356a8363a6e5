"""SrDetection's cost: the gray box with n = 10 variants against 11 separate PPL passes.

The target: scoring every original and its 10 variants costs at most 1.2x the signal cost of
11 PPL passes over the benchmark. Both sides start from strings, on the same model and texts:

  eleven_passes   the naive way: `compute_token_stats` (log-probs only) once on the originals and once
                  per variant index i = 1..10 on every sample's i-th variant, each with a fresh cache
  srdetection     `score_srdetection(["srdetection_gray"])`: one engine call over originals and variants
                  (fresh cache), plus the decisions for n = 1, 3, 5, 10
  in_pipeline     the same after `ppl` scored the originals with the same cache, as in an evaluation:
                  what SrDetection adds to a checkpoint's evaluation

Variant construction (rename, replace examples, run the tests in the sandbox) is paid once per benchmark
and cached (`leaklab.detectors.variant_store`); it is reported, not part of the ratio. The model is a
randomly initialised Llama of the builtin tiny architecture (the cost does not depend on the weights).
After an untimed warm-up round, the methods alternate for `--repeats` rounds; each keeps its best time,
so a busy machine hurts both alike. With --black the black box (greedy suffix generation for every
text, fresh generation cache) is timed once too.

    python bench/bench_srdetection.py [--tasks 164] [--repeats 3] [--threads 2] [--black] [--smoke]

Prints a table, then one JSON line: {"bench": "srdetection", "ratio_vs_11_ppl_passes": ..., ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch


def eleven_passes(model, tokenizer, inputs, settings) -> None:
    from leaklab.signals.logprobs import SignalCache, compute_token_stats

    for i in range(inputs.width + 1):
        texts = inputs.texts if i == 0 else [row[i - 1] for row in inputs.variant_texts if len(row) >= i]
        compute_token_stats(
            model, tokenizer, texts, settings=settings, distribution=False, cache=SignalCache()
        )


def srdetection(model, tokenizer, inputs, settings, cache=None) -> None:
    from leaklab.detectors import build_detector
    from leaklab.detectors.inputs import ModelInputs
    from leaklab.detectors.srdetection import score_srdetection
    from leaklab.signals.logprobs import SignalCache

    score_srdetection(
        [build_detector("srdetection_gray")],
        ModelInputs(
            model,
            tokenizer,
            inputs.texts,
            rule_inputs=inputs,
            settings=settings,
            cache=cache or SignalCache(),
        ),
    )


def in_pipeline(model, tokenizer, inputs, settings) -> float:
    """Seconds SrDetection adds once `ppl` has scored the originals (untimed) with the same cache."""
    from leaklab.detectors import run_detectors
    from leaklab.detectors.inputs import ModelInputs
    from leaklab.signals.logprobs import SignalCache

    cache = SignalCache()
    run_detectors(["ppl"], ModelInputs(model, tokenizer, inputs.texts, settings=settings, cache=cache))
    start = time.perf_counter()
    srdetection(model, tokenizer, inputs, settings, cache)
    return time.perf_counter() - start


def timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=164, help="HumanEval tasks (164 = all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--batch-tokens", type=int, default=8192, help="evaluate.batch_tokens")
    parser.add_argument("--black", action="store_true", help="also time the black box once")
    parser.add_argument("--smoke", action="store_true", help="the smallest run that exercises every path")
    args = parser.parse_args()
    if args.smoke:  # every path, the black box's included, so none can rot unseen
        args.tasks, args.repeats, args.black = 3, 1, True
    torch.set_num_threads(args.threads)

    from leaklab.data.benchmarks import load_humaneval
    from leaklab.detectors.srdetection import black_scores, inputs_from_tasks
    from leaklab.models.tiny import build_tokenizer, init_llama
    from leaklab.perturb import store as variant_store
    from leaklab.recipe import EvaluateConfig

    tasks = load_humaneval()[: args.tasks]
    settings = EvaluateConfig(batch_tokens=args.batch_tokens)
    cfg = settings.srdetection
    cached = variant_store.cache_file(tasks, cfg).exists()
    start = time.perf_counter()
    sets = variant_store.variant_sets_for(tasks, cfg, log=lambda *a: None)
    variants_s = time.perf_counter() - start
    start = time.perf_counter()
    variant_store.variant_sets_for(tasks, cfg, log=lambda *a: None)
    reload_s = time.perf_counter() - start
    info = variant_store.summary(sets, cfg.min_variants)

    tokenizer = build_tokenizer(4096)
    model = init_llama(tokenizer, context_length=512).eval()
    inputs = inputs_from_tasks(tasks, sets, "prompt+solution")
    n_texts = len(inputs.texts) + sum(len(r) for r in inputs.variant_texts)
    tokens = sum(len(ids) for ids in tokenizer(inputs.flat()[0], verbose=False)["input_ids"])

    if not args.smoke:  # warm-up (untimed): first touches of memory and kernels
        warm = inputs_from_tasks(tasks[:8], sets[:8], "prompt+solution")
        eleven_passes(model, tokenizer, warm, settings)
        srdetection(model, tokenizer, warm, settings)

    best = {"eleven_passes": np.inf, "srdetection": np.inf, "in_pipeline": np.inf}
    for _ in range(args.repeats):
        best["eleven_passes"] = min(
            best["eleven_passes"], timed(eleven_passes, model, tokenizer, inputs, settings)
        )
        best["srdetection"] = min(best["srdetection"], timed(srdetection, model, tokenizer, inputs, settings))
        best["in_pipeline"] = min(best["in_pipeline"], in_pipeline(model, tokenizer, inputs, settings))

    black_s = None
    if args.black:
        from leaklab.detectors.inputs import ModelInputs
        from leaklab.signals.continuations import GenerationCache

        start = time.perf_counter()
        black_inputs = ModelInputs(
            model, tokenizer, inputs.texts, settings, rule_inputs=inputs, generation_cache=GenerationCache()
        )
        black_scores(black_inputs)
        black_s = time.perf_counter() - start

    print(
        f"HumanEval: {len(tasks)} tasks, {n_texts} texts (originals + verified variants), {tokens:,} tokens"
    )
    verified = info["fraction_verified"]
    print(
        f"variants: {info['variants']} kept, {100 * (verified or 0):.1f}% of candidates verified; "
        f"{'read from the cache' if cached else 'built'} in {variants_s:.1f}s, re-read in {reload_s:.2f}s"
    )
    print(f"\n| method | seconds (best of {args.repeats}) | tokens/s | vs 11 PPL passes |")
    print("|---|---|---|---|")
    for name, seconds in best.items():
        print(f"| {name} | {seconds:.2f} | {tokens / seconds:,.0f} | {seconds / best['eleven_passes']:.3f} |")
    if black_s is not None:
        print(f"| black box (generation, once) | {black_s:.2f} | | {black_s / best['eleven_passes']:.3f} |")
    result = {
        "bench": "srdetection",
        "ratio_vs_11_ppl_passes": round(best["srdetection"] / best["eleven_passes"], 3),
        "ratio_in_pipeline_vs_11_ppl_passes": round(best["in_pipeline"] / best["eleven_passes"], 3),
        "target": 1.2,
        "texts": n_texts,
        "tokens": tokens,
        "eleven_passes_s": round(best["eleven_passes"], 3),
        "srdetection_s": round(best["srdetection"], 3),
        "in_pipeline_s": round(best["in_pipeline"], 3),
        "variants_fraction_verified": None if verified is None else round(verified, 4),
        "variants_s": round(variants_s, 2),
        "variants_from_cache": cached,
        "variants_reload_s": round(reload_s, 3),
        "black_box_s": None if black_s is None else round(black_s, 2),
        "threads": args.threads,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
