"""The cost of the detectors beyond the seeds (ReCaLL, CDD, n-gram accuracy, neighbourhood), each
relative to `ppl` on the same tasks, model and settings, measured in the same run.

Every method starts from strings with fresh caches (signal and generation), so it pays for everything
it needs, ppl's own pass included where it reads it:

  ppl            `run_detectors(["ppl"])`: one signal-engine pass over the texts (the unit)
  recall         + one pass over prefix + text per shots value (default shots=1, the builtin prefix)
  cdd            one greedy and one sampled generation call (default 20 samples x 64 new tokens)
  ngram_acc      one greedy generation call: 5 starts x 5 new tokens per sample
  neighbourhood  one signal-engine pass over originals and their verified variants (srdetection_gray's)
  pac            + one pass over the word-swapped copies (default 5 per sample)
  conrecall      + one pass over member-prefix + text and one over non-member-prefix + text (5 shots each,
                 cross-fitted from alternating labels: every other task counts as a member here)
  samia          one sampled generation call (default 10 samples x 128 new tokens from half the solution)
  gradnorm       one forward and one backward per sample (not batched)

"in pipeline" is what the detector adds to a checkpoint's evaluation that already ran `ppl` (and, for
neighbourhood, `srdetection_gray`) with the same caches; cdd and ngram_acc reuse nothing of theirs, so
for them it is the fresh time, not measured twice. Samples carry their prompts, as in an evaluation
(CDD samples from the prompt; ppl, recall and ngram_acc score the whole text, `scoring_span: text`). The model is a randomly initialised Llama of
the builtin tiny architecture: its cost does not depend on the weights, except that an untrained model
never stops early, so every generation runs to its full length (the worst case for cdd and ngram_acc).
`ppl` is timed best of `--repeats` after a warm-up; the generation detectors, which take far longer, once
each (their ratio moves by a few percent between runs on a quiet machine). Variants come from the
per-benchmark cache (built and sandbox-verified once; not part of any ratio).

    python bench/bench_detectors.py [--tasks 40] [--repeats 3] [--threads 2] [--skip cdd,...] [--smoke]

Prints a table, then one JSON line: {"bench": "detectors", "ratio_vs_ppl": {...}, "ms_per_sample": {...},
...}.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

# What a detector can reuse from the detectors an evaluation usually runs before it (same caches).
SHARES = {
    "recall": ["ppl"],
    "neighbourhood": ["ppl", "srdetection_gray"],
    "pac": ["ppl"],
    "conrecall": ["ppl"],
}
SPECS = {
    "recall": "recall",
    "cdd": "cdd",
    "ngram_acc": "ngram_acc",
    "neighbourhood": "neighbourhood",
    "pac": "pac",
    "conrecall": "conrecall",
    "samia": "samia",
    "gradnorm": "gradnorm",
}
# What the smoke run uses instead (the smallest settings that exercise every path).
SMOKE_SPECS = {
    "cdd": "cdd:samples=2,max_new_tokens=8",
    "pac": "pac:copies=2",
    "conrecall": "conrecall:shots=1",
    "samia": "samia:samples=2,max_new_tokens=8",
}


def run(
    specs, model, tokenizer, texts, prompts, settings, rule_inputs, signal_cache, generation_cache
) -> float:
    import numpy as np

    from leaklab.detectors import score_detectors
    from leaklab.detectors.inputs import ModelInputs

    start = time.perf_counter()
    score_detectors(
        specs,
        ModelInputs(
            model,
            tokenizer,
            texts,
            prompts=prompts,
            rule_inputs=rule_inputs,
            settings=settings,
            cache=signal_cache,
            generation_cache=generation_cache,
            # conrecall's cross-fitted shots: alternate tasks count as members (the cost does not depend on it).
            known_clean=np.arange(len(texts)) % 2 == 1,
        ),
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=40, help="HumanEval tasks (164 = all)")
    parser.add_argument("--repeats", type=int, default=3, help="best-of rounds for ppl")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--skip", default="", help="comma-separated detectors to leave out")
    parser.add_argument("--smoke", action="store_true", help="the smallest run that exercises every path")
    args = parser.parse_args()
    if args.smoke:
        args.tasks, args.repeats = 3, 1
    torch.set_num_threads(args.threads)

    from leaklab.data.benchmarks import load_humaneval
    from leaklab.detectors.srdetection import inputs_from_tasks
    from leaklab.models.tiny import build_tokenizer, init_llama
    from leaklab.perturb import store as variant_store
    from leaklab.recipe import EvaluateConfig
    from leaklab.signals.continuations import GenerationCache
    from leaklab.signals.logprobs import SignalCache

    tasks = load_humaneval()[: args.tasks]
    settings = EvaluateConfig()
    specs = dict(SPECS)
    if args.smoke:  # CDD's 20 samples x 64 new tokens (and the others' defaults), cut down
        specs.update(SMOKE_SPECS)
    tokenizer = build_tokenizer(4096)
    model = init_llama(tokenizer, context_length=512).eval()
    texts = [t.text("prompt+solution") for t in tasks]
    prompts = [t.prompt for t in tasks]  # the context CDD samples from, as in an evaluation
    tokens = sum(len(ids) for ids in tokenizer(texts, verbose=False)["input_ids"])
    names = [n for n in SPECS if n not in set(filter(None, args.skip.split(",")))]
    rule_inputs = None
    if "neighbourhood" in names:
        sets = variant_store.variant_sets_for(tasks, settings.srdetection, log=lambda *a: None)
        rule_inputs = inputs_from_tasks(tasks, sets, "prompt+solution")

    def fresh(specs, n=None, inputs=rule_inputs, warm=()) -> float:
        n = len(tasks) if n is None else n
        signals, generations = SignalCache(), GenerationCache()
        for spec in warm:  # untimed: what the evaluation computed before this detector
            run([spec], model, tokenizer, texts[:n], prompts[:n], settings, inputs, signals, generations)
        return run(specs, model, tokenizer, texts[:n], prompts[:n], settings, inputs, signals, generations)

    # Warm-up (untimed): first touches of memory and kernels, on a few tasks.
    if rule_inputs is not None:
        fresh(["ppl", "neighbourhood"], 4, inputs_from_tasks(tasks[:4], sets[:4], "prompt+solution"))
    fresh(["ppl"], 4, None)

    ppl = min(fresh(["ppl"]) for _ in range(args.repeats))
    results = {}
    for name in names:
        spec = specs[name]
        cold = fresh([spec])
        # cdd, ngram_acc, samia and gradnorm read nothing that ppl computed: what they add is their fresh time.
        added = fresh([spec], warm=SHARES[name]) if name in SHARES else cold
        results[name] = (cold, added)

    print(
        f"HumanEval: {len(tasks)} tasks, {tokens:,} tokens; random tiny Llama (context 512), {args.threads} threads"
    )
    print("\n| detector | spec | seconds (fresh caches) | vs ppl | seconds added in pipeline | vs ppl |")
    print("|---|---|---|---|---|---|")
    print(f"| ppl | ppl | {ppl:.2f} (best of {args.repeats}) | 1.00 | {ppl:.2f} | 1.00 |")
    for name, (cold, added) in results.items():
        print(f"| {name} | {specs[name]} | {cold:.2f} | {cold / ppl:.2f} | {added:.2f} | {added / ppl:.2f} |")
    out = {
        "bench": "detectors",
        "ratio_vs_ppl": {name: round(cold / ppl, 2) for name, (cold, _) in results.items()},
        "ratio_in_pipeline_vs_ppl": {name: round(added / ppl, 2) for name, (_, added) in results.items()},
        "ppl_s": round(ppl, 3),
        "seconds": {name: round(cold, 2) for name, (cold, _) in results.items()},
        "ms_per_sample": {
            "ppl": round(1000 * ppl / len(tasks), 1),
            **{name: round(1000 * cold / len(tasks), 1) for name, (cold, _) in results.items()},
        },
        "tasks": len(tasks),
        "tokens": tokens,
        "threads": args.threads,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
