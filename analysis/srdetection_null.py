"""SrDetection's null rate: how often the gray-box rule fires on a model that never saw the benchmark.

The rule says "leak" when the original has a lower perplexity than each of its n variants. If the
variants were as likely as the original under a model that never saw the task (exchangeable), the
original would be the lowest of its n + 1 texts for about 1/(n + 1) of the tasks. This script measures
the fraction actually flagged on the builtin tiny model (never trained on HumanEval: step 0 of
tiny_cpt) for n = 1, 3, 5, 10 with a bootstrap 95% interval, next to 1/(n + 1) and the target
1.5/(n + 1), and the band [0.5, 1.5]/(n + 1) the rate must lie in (a rate below it is as wrong as one above).

    python analysis/srdetection_null.py [--tasks 164] [--no-verify] [--ablate] [--model builtin:tiny] [--seed 0]
        [--heldout FILE.jsonl ...] [--skip-humaneval]

--heldout adds sets the model never saw either (code outside HumanEval, e.g. a library's
documented functions written by `analysis/heldout_functions.py`), read in HumanEval's schema. They have
no tests, so their variants are renamings checked with `verify=alpha`, without example replacement (the
functions cannot run outside their package).

--ablate adds rows for variants made by one transformation alone (renaming only; example replacement
only), built without verification (the rule's bias does not depend on it; building is faster).
Variants come from the per-benchmark cache (built in the sandbox when missing). Prints the table, then
one JSON line with every measured rate.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path

import numpy as np

NS = (1, 3, 5, 10)


def flagged(original: np.ndarray, variants: np.ndarray, n_bootstrap: int, seed: int) -> dict[int, dict]:
    """n -> leak_rate of the gray-box rule (fraction of decided tasks flagged, with its interval)."""
    from leaklab.detectors.srdetection import gray_box_decisions
    from leaklab.metrics import leak_rate

    out = {}
    for n in NS:
        d = gray_box_decisions(original, variants, n=n)
        out[n] = leak_rate(d.leak, d.decided, n_bootstrap=n_bootstrap, seed=seed)
    return out


def measure(label, tasks, cfg, model, tokenizer, settings, cache, n_bootstrap, seed, rename=True):
    from leaklab.detectors.srdetection import gray_scores, inputs_from_tasks
    from leaklab.perturb import store

    if rename:
        sets = store.variant_sets_for(tasks, cfg, log=lambda *a: None)
    else:  # example replacement alone: every variant keeps the original's names
        sets = store.build_variant_sets(tasks, cfg, log=lambda *a: None, rename=False)
    inputs = inputs_from_tasks(tasks, sets, "prompt+solution")
    original, variants = gray_scores(model, tokenizer, inputs, settings, cache=cache)
    shift = float(np.nanmean(variants - original[:, None]))
    return label, flagged(original, variants, n_bootstrap, seed), shift, int(np.isfinite(variants).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=164, help="HumanEval tasks (164 = all)")
    parser.add_argument("--model", default="builtin:tiny", help="a model that never saw HumanEval")
    parser.add_argument("--no-verify", action="store_true", help="variants checked by parsing only")
    parser.add_argument("--ablate", action="store_true", help="also renaming only / examples only")
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0, help="seeds the variants' names and example inputs")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--heldout", nargs="*", default=[], help="held-out JSONL files (HumanEval schema)")
    parser.add_argument("--skip-humaneval", action="store_true", help="only the --heldout sets")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from leaklab.data.benchmarks import load_benchmark, load_humaneval
    from leaklab.models.load import load_model_and_tokenizer
    from leaklab.recipe import EvaluateConfig, ModelConfig
    from leaklab.signals.logprobs import SignalCache

    tasks = load_humaneval()[: args.tasks]
    settings = EvaluateConfig(batch_tokens=2048, dtype="float32")
    cfg = dataclasses.replace(
        settings.srdetection, verify="none" if args.no_verify else "tests", seed=args.seed
    )
    model, tokenizer, path = load_model_and_tokenizer(
        ModelConfig(name_or_path=args.model, dtype="float32"), log=lambda *a: None
    )
    model.eval()
    cache = SignalCache()
    common = (model, tokenizer, settings, cache, args.bootstrap, 0)
    print(f"gray-box rule on {path} (never trained on these sets; seed {args.seed})")
    print(
        "| set | variants | n | decided | flagged % | 95% CI | 1/(n+1) % | band [0.5, 1.5]/(n+1) % | mean Δ log PPL |"
    )
    print("|---|---|---|---|---|---|---|---|---|", flush=True)
    result = {
        "bench": "srdetection_null",
        "model": str(path),
        "tasks": len(tasks),
        "seed": args.seed,
        "rows": [],
    }

    def report(set_label, row):  # printed as soon as a set is scored: a long run shows what it has
        label, rates, shift, n_variants = row
        for n, r in rates.items():
            rate = r["leak_rate"]
            ok = 0.5 / (n + 1) <= rate <= 1.5 / (n + 1)
            print(
                f"| {set_label} | {label} | {n} | {r['n_decided']:.0f} | {100 * rate:.1f}{'' if ok else ' ✗'} | "
                f"[{100 * r['leak_rate_ci_low']:.1f}, {100 * r['leak_rate_ci_high']:.1f}] | "
                f"{100 / (n + 1):.1f} | {50 / (n + 1):.1f}-{150 / (n + 1):.1f} | {shift:+.4f} |",
                flush=True,
            )
            result["rows"].append(
                {
                    "set": set_label,
                    "variants": label,
                    "n": n,
                    "flagged": round(rate, 4),
                    "ci": [round(r["leak_rate_ci_low"], 4), round(r["leak_rate_ci_high"], 4)],
                    "null": round(1 / (n + 1), 4),
                    "in_band": ok,
                    "variants_scored": n_variants,
                    "mean_shift": round(shift, 5),
                }
            )

    if not args.skip_humaneval:
        he = f"humaneval ({len(tasks)} tasks)"
        report(he, measure("all (as evaluated)", tasks, cfg, *common))
        if args.ablate:
            unverified = dataclasses.replace(cfg, verify="none")
            only_renaming = dataclasses.replace(unverified, replace_examples=False)
            report(he, measure("renaming only", tasks, only_renaming, *common))
            report(he, measure("examples only", tasks, unverified, *common, rename=False))
    heldout_cfg = dataclasses.replace(cfg, verify="alpha", replace_examples=False)
    for file in args.heldout:
        label = "heldout-" + Path(file).stem
        held = load_benchmark("humaneval", label=label, path=file)
        report(f"{label} ({len(held)} functions)", measure("renaming", held, heldout_cfg, *common))
    print("(mean Δ log PPL: variant minus original, > 0 means variants are less likely than originals)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
