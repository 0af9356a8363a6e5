"""Greedy generation: leaklab's HFGenerator vs per-sample `model.generate`, on CPU, in one run.

The workload SrDetection's black box and the extraction audits produce: many prompts, greedy decoding
of a fixed number of new tokens. The same 32 HumanEval prompts (64 new tokens) go through

  per-sample     `model.generate(prompt)` one prompt at a time (the naive loop);
  hf-batched     `model.generate` on left-padded batches of 16 (plain HF batching, for reference);
  engine         `HFGenerator.generate(prompts)`: length-sorted rows, chunked prefill merged into one
                 pre-allocated cache, finished rows dropped.

Each path runs `--repeats` times, interleaved (engine, per-sample, engine, per-sample, ...), and the
best time counts: for the per-sample loop the best time of each prompt, summed. On a shared machine
other processes' bursts only ever add time, so the minimum is the steadiest estimate, and both sides
get the same treatment. Process CPU time is printed next to wall time. On a CPU shared with other
jobs pass `--threads 1`: with two threads, a busy neighbour stalls the per-sample loop's many small
ops far more than the engine's large ones (one such run measured 40x), which flatters the engine. The engine's token ids must equal
the per-sample ones (fp32). The model is a random ~60M-parameter Llama with a 32k byte-level BPE
vocabulary (`leaklab.models.tiny`): generation cost does not depend on the weights' values.

    python bench/bench_generation.py [--prompts 32] [--new-tokens 64] [--levers] [--threads N] [--smoke]

The last line printed is one JSON object with the measurements.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from leaklab.data.benchmarks import load_humaneval
from leaklab.models.tiny import build_tokenizer, init_llama
from leaklab.signals.generation import HFGenerator


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def best_of(repeats: int, fn):
    runs = [timed(fn) for _ in range(repeats)]
    return runs[0][0], min(r[1] for r in runs), min(r[2] for r in runs)


def strip_eos(ids: list[int], eos: int) -> list[int]:
    return ids[: ids.index(eos)] if eos in ids else ids


@torch.inference_mode()
def per_sample(
    model, tokenizer, prompts: list[str], new_tokens: int, times: list | None = None
) -> list[list[int]]:
    """The naive loop; appends each prompt's (wall, cpu) seconds to `times` when given."""
    outputs = []
    for prompt in prompts:
        wall, cpu = time.perf_counter(), time.process_time()
        enc = tokenizer(prompt, return_tensors="pt")
        out = model.generate(
            **enc, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
        )
        outputs.append(strip_eos(out[0, enc["input_ids"].shape[1] :].tolist(), tokenizer.eos_token_id))
        if times is not None:
            times.append((time.perf_counter() - wall, time.process_time() - cpu))
    return outputs


@torch.inference_mode()
def hf_batched(
    model, tokenizer, prompts: list[str], new_tokens: int, batch_size: int = 16
) -> list[list[int]]:
    outputs = []
    for start in range(0, len(prompts), batch_size):
        enc = tokenizer(
            prompts[start : start + batch_size], return_tensors="pt", padding=True, padding_side="left"
        )
        out = model.generate(
            **enc, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
        )
        width = enc["input_ids"].shape[1]
        outputs.extend(strip_eos(row[width:].tolist(), tokenizer.eos_token_id) for row in out)
    return outputs


def engine(generator: HFGenerator, prompts: list[str], new_tokens: int) -> list[list[int]]:
    return [list(c[0].token_ids) for c in generator.generate(prompts, max_new_tokens=new_tokens)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--hidden-size", type=int, default=512)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--intermediate-size", type=int, default=1664)
    parser.add_argument(
        "--repeats", type=int, default=2, help="interleaved runs of each path; the best counts"
    )
    parser.add_argument("--no-hf-batched", action="store_true", help="skip the plain HF batching reference")
    parser.add_argument(
        "--levers", action="store_true", help="also time the engine with each lever switched off"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--smoke", action="store_true", help="the smallest run that exercises every path")
    args = parser.parse_args()
    if args.smoke:  # the smoke tiny model's tokenizer (1024), a one-layer model, short generations
        args.prompts, args.new_tokens, args.repeats, args.vocab_size = 3, 6, 1, 1024
        args.hidden_size, args.layers, args.intermediate_size = 64, 1, 128
    if args.threads:
        torch.set_num_threads(args.threads)

    load_before = os.getloadavg()[0]
    tokenizer = build_tokenizer(args.vocab_size)
    model = init_llama(
        tokenizer,
        hidden_size=args.hidden_size,
        num_layers=args.layers,
        num_heads=8,
        intermediate_size=args.intermediate_size,
        context_length=1024,  # HumanEval prompts are up to ~180 tokens with this tokenizer; no truncation
    ).eval()
    params = sum(p.numel() for p in model.parameters())
    prompts = [t.prompt for t in load_humaneval()[: args.prompts]]
    prompt_tokens = sum(len(tokenizer(p)["input_ids"]) for p in prompts)
    generator = HFGenerator(model, tokenizer, prompt_boundary="none")  # as model.generate reads prompts

    # Warm-up: first calls pay for allocator growth and kernel selection on both paths.
    per_sample(model, tokenizer, prompts[:2], 4)
    engine(generator, prompts[:2], 4)

    rows = []
    engine_runs, engine_times, per_prompt = [], [], []
    for _ in range(args.repeats):
        out, wall, cpu = timed(lambda: engine(generator, prompts, args.new_tokens))
        engine_runs.append(out)
        engine_times.append((wall, cpu))
        times: list[tuple[float, float]] = []
        ref = per_sample(model, tokenizer, prompts, args.new_tokens, times)
        per_prompt.append(times)
    eng_wall, eng_cpu = min(w for w, _ in engine_times), min(c for _, c in engine_times)
    ref_wall = sum(min(run[i][0] for run in per_prompt) for i in range(len(prompts)))
    ref_cpu = sum(min(run[i][1] for run in per_prompt) for i in range(len(prompts)))
    ref_wall_mean = sum(sum(w for w, _ in run) for run in per_prompt) / args.repeats
    eng_wall_mean = sum(w for w, _ in engine_times) / args.repeats
    eng1 = engine_runs[0]
    match = sum(a == b for a, b in zip(eng1, ref))
    new_tokens = sum(len(x) for x in eng1)
    rows.append(("per-sample model.generate", ref_wall, ref_cpu, len(prompts)))
    rows.append(("engine (HFGenerator)", eng_wall, eng_cpu, match))

    result = {
        "bench": "generation",
        "ratio_vs_per_sample": round(ref_wall / eng_wall, 2),
        "ratio_vs_per_sample_cpu": round(ref_cpu / eng_cpu, 2),
        "ratio_vs_per_sample_mean_times": round(ref_wall_mean / eng_wall_mean, 2),
        "greedy_match": f"{match}/{len(prompts)}",
        "engine_runs_identical": all(run == eng1 for run in engine_runs),
        "engine_s": round(eng_wall, 2),
        "engine_cpu_s": round(eng_cpu, 2),
        "per_sample_s": round(ref_wall, 2),
        "per_sample_cpu_s": round(ref_cpu, 2),
        "new_tokens_per_s": round(new_tokens / eng_wall, 1),
    }
    if not args.no_hf_batched:
        hfb, hfb_wall, hfb_cpu = best_of(
            args.repeats, lambda: hf_batched(model, tokenizer, prompts, args.new_tokens)
        )
        rows.append(
            (
                "hf generate, left-padded batches of 16",
                hfb_wall,
                hfb_cpu,
                sum(a == b for a, b in zip(hfb, ref)),
            )
        )
        result["ratio_vs_hf_batched"] = round(hfb_wall / eng_wall, 2)
    if args.levers:
        # Each lever switched off in turn: how much of the speed-up it is worth.
        for key, name, kwargs in (
            ("no_sorting", "engine, no length sorting", {"sort_by_length": False}),
            ("no_preallocation", "engine, no pre-allocated cache", {"preallocate": False}),
            ("one_prefill", "engine, one prefill for the whole batch", {"prefill_tokens": 10**9}),
            ("batch_16", "engine, batches of 16", {"batch_size": 16}),
        ):
            lever = HFGenerator(model, tokenizer, prompt_boundary="none", **kwargs)
            out, wall, cpu = best_of(args.repeats, lambda g=lever: engine(g, prompts, args.new_tokens))
            rows.append((name, wall, cpu, sum(a == b for a, b in zip(out, ref))))
            result[f"lever_{key}_s"] = round(wall, 2)
            result[f"lever_{key}_cpu_s"] = round(cpu, 2)

    result.update(
        params_m=round(params / 1e6, 1),
        vocab=len(tokenizer),
        prompts=len(prompts),
        prompt_tokens=prompt_tokens,
        max_new_tokens=args.new_tokens,
        threads=torch.get_num_threads(),
        load_avg_1m_before=round(load_before, 2),
        load_avg_1m_after=round(os.getloadavg()[0], 2),
    )

    print(
        f"\nmodel: random Llama, {params / 1e6:.1f}M parameters, vocabulary {len(tokenizer)}; "
        f"{len(prompts)} HumanEval prompts ({prompt_tokens} tokens), {args.new_tokens} new tokens, greedy, fp32, "
        f"{torch.get_num_threads()} threads; load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}\n"
    )
    print(f"{'path':42s} {'wall s':>8s} {'cpu s':>8s} {'speed-up':>9s} {'= per-sample':>13s}")
    for name, wall, cpu, same in rows:
        print(f"{name:42s} {wall:8.2f} {cpu:8.2f} {ref_wall / wall:8.2f}x {same:>7d}/{len(prompts)}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
