"""Scoring throughput: leaklab's signal engine vs the reference implementations' way and a bare forward.

All four methods score the same HumanEval texts (truncated to the model's context) with the same weights,
starting from the strings (tokenisation is part of every method's time):

  per_sample    the reference way (Min-K%++ / MIMIR code): one text at a time, full log-softmax over the
                vocabulary, Min-K%++ moments from the full probability matrix
  padded_batch  the naive batch: 8 texts at a time in dataset order, padded and masked, same arithmetic
  bare_forward  logits only, no statistics at all, over the engine's own length-sorted batches (right
                padding, no mask): the floor any scorer pays
  engine        `compute_token_stats(..., distribution=True)`: token log-probs, Min-K%++ mean and
                variance, everything the gray-box detectors read (fresh cache; tokenisation, fingerprint
                and all included)

Two models: the builtin tiny architecture (hidden 128, 2 layers, 4k vocabulary) and a ~58M-parameter
random Llama with a 32k vocabulary. After one untimed warm-up round (on a fresh VM the first touch of
memory is very slow), timing runs alternate method by method for `--repeats` rounds and keep each
method's best time, so a busy machine hurts all methods alike. Peak host memory is measured
in a separate child process (glibc told to return freed memory, so the peak RSS growth during a method
is that method's own live memory, not reuse of a heap another method left behind), including the large
architecture with both vocabularies to show whether memory grows with the vocabulary.

    python bench/bench_scoring.py [--texts 300] [--texts-large 100] [--repeats 2] [--threads 2] [--smoke]

Prints tables, then one JSON line: {"bench": "scoring", "ratio_vs_per_sample": ..., ...}; the top-level
ratios are the worse of the two models.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

METHODS = ("per_sample", "padded_batch", "bare_forward", "engine")


# --------------------------------------------------------------------------- the methods


def truncated_ids(tokenizer, texts: list[str], max_length: int) -> list[list[int]]:
    return [ids[:max_length] for ids in tokenizer(texts, verbose=False)["input_ids"]]


def full_softmax_stats(logits: torch.Tensor, ids: torch.Tensor):
    """The reference implementations' arithmetic on one sequence's logits [T, V]."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)[:-1]
    probs = torch.softmax(logits.float(), dim=-1)[:-1]
    token_log_probs = log_probs.gather(-1, ids[1:, None]).squeeze(-1)
    mu = (probs * log_probs).sum(-1)
    sigma2 = (probs * torch.square(log_probs)).sum(-1) - torch.square(mu)
    return token_log_probs.numpy(), mu.numpy(), sigma2.numpy()


def per_sample(model, tokenizer, texts: list[str], max_length: int):
    out = []
    with torch.inference_mode():
        for text in texts:
            x = torch.tensor(tokenizer(text, verbose=False)["input_ids"][:max_length])
            out.append(full_softmax_stats(model(input_ids=x[None], use_cache=False).logits[0], x))
    return out


def padded_batch(model, tokenizer, texts: list[str], max_length: int, batch_size: int = 8):
    out = []
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            chunk = truncated_ids(tokenizer, texts[start : start + batch_size], max_length)
            width = max(len(x) for x in chunk)
            x = torch.full((len(chunk), width), pad_id)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, ids in enumerate(chunk):
                x[i, : len(ids)] = torch.tensor(ids)
                mask[i, : len(ids)] = 1
            logits = model(input_ids=x, attention_mask=mask, use_cache=False).logits
            for i, ids in enumerate(chunk):
                out.append(full_softmax_stats(logits[i, : len(ids)], x[i, : len(ids)]))
    return out


def bare_forward(model, tokenizer, texts: list[str], max_length: int, batch_tokens: int) -> int:
    """Logits only, batched exactly like the engine (right padding, no mask: see the engine's notes)."""
    from leaklab.signals.logprobs import plan_batches

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    n = 0
    with torch.inference_mode():
        for batch in plan_batches(tokenizer, texts, max_length, batch_tokens):
            width = max(len(ids) for ids in batch)
            x = torch.full((len(batch), width), pad_id)
            for i, ids in enumerate(batch):
                x[i, : len(ids)] = torch.from_numpy(ids)
            n += model(input_ids=x, use_cache=False).logits.shape[0]
    return n


def engine(model, tokenizer, texts: list[str], max_length: int, batch_tokens: int):
    from leaklab.signals.logprobs import ScoringSettings, SignalCache, compute_token_stats

    settings = ScoringSettings(
        batch_tokens=batch_tokens, max_length=max_length, long_texts="truncate", progress=False
    )
    return compute_token_stats(
        model, tokenizer, texts, settings=settings, distribution=True, cache=SignalCache()
    )


def method_calls(model, tokenizer, texts: list[str], batch_tokens: int) -> dict[str, Callable[[], object]]:
    """Each method from the text strings (tokenisation is part of the work), truncated to the context."""
    max_length = model.config.max_position_embeddings
    return {
        "per_sample": lambda: per_sample(model, tokenizer, texts, max_length),
        "padded_batch": lambda: padded_batch(model, tokenizer, texts, max_length),
        "bare_forward": lambda: bare_forward(model, tokenizer, texts, max_length, batch_tokens),
        "engine": lambda: engine(model, tokenizer, texts, max_length, batch_tokens),
    }


# --------------------------------------------------------------------------- the models


def large_model(tokenizer):
    """A random Llama, hidden 512, 8 layers, untied head: ~58M parameters with a 32k vocabulary."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=512,
        intermediate_size=1376,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=8,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def setups(args) -> dict[str, tuple]:
    """label -> (model, tokenizer, texts); the same weights in every process (fixed seeds)."""
    from leaklab.data.benchmarks import load_humaneval
    from leaklab.models.tiny import build_tokenizer, init_llama

    tasks = load_humaneval()
    # 164 prompt+solution texts, then prompts alone, up to the number asked for: a spread of lengths.
    pool = [t.prompt + t.solution for t in tasks] + [t.prompt for t in tasks]
    small_tok = build_tokenizer(4096)
    out = {"4k": (init_llama(small_tok, context_length=512).eval(), small_tok, pool[: args.texts])}
    if not args.skip_large:
        large_tok = build_tokenizer(32000)
        out["32k"] = (large_model(large_tok), large_tok, pool[: args.texts_large])
        # For memory only: the large architecture with the small vocabulary.
        out["32k-arch-4k-vocab"] = (large_model(small_tok), small_tok, pool[: args.texts_large])
    return out


# --------------------------------------------------------------------------- timing (this process)


def time_model(label: str, model, tokenizer, texts: list[str], repeats: int, batch_tokens: int) -> dict:
    calls = method_calls(model, tokenizer, texts, batch_tokens)
    best = dict.fromkeys(METHODS, float("inf"))
    results = {name: fn() for name, fn in calls.items()}  # warm-up: first-touch page faults, lazy init
    for _ in range(repeats):
        for name, fn in calls.items():
            start = time.perf_counter()
            results[name] = fn()
            best[name] = min(best[name], time.perf_counter() - start)
    # The engine must agree with the reference arithmetic.
    diff = max(
        max(
            float(np.abs(s.logprob - ref[0][-s.n :]).max(initial=0)),
            float(np.abs(s.mean - ref[1][-s.n :]).max(initial=0)),
        )
        for s, ref in zip(results["engine"], results["per_sample"])
    )
    n_tokens = sum(len(x) for x in truncated_ids(tokenizer, texts, model.config.max_position_embeddings))
    return {
        "label": label,
        "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "vocab": len(tokenizer),
        "texts": len(texts),
        "tokens": n_tokens,
        "seconds": {k: round(v, 3) for k, v in best.items()},
        "ratio_vs_per_sample": round(best["per_sample"] / best["engine"], 3),
        "ratio_vs_bare_forward": round(best["bare_forward"] / best["engine"], 3),
        "ratio_vs_padded_batch": round(best["padded_batch"] / best["engine"], 3),
        "tokens_per_s": round(n_tokens / best["engine"]),
        "max_abs_diff": diff,
    }


# --------------------------------------------------------------------------- memory (a child process)


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"{field}:\s+(\d+)", f.read()).group(1))


def _return_freed_memory() -> None:
    """Make glibc unmap large freed blocks, so RSS follows live memory (Linux / glibc only)."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 1 << 16)
    libc.mallopt(m_trim_threshold, 1 << 16)


def peak_mib(fn: Callable[[], object]) -> float:
    """Growth of the peak RSS during one call, in MiB (VmHWM reset through /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status_kib("VmRSS")
    fn()
    return round((_status_kib("VmHWM") - before) / 1024, 1)


def memory_child(args) -> None:
    _return_freed_memory()
    out = {}
    for label, (model, tok, texts) in setups(args).items():
        calls = method_calls(model, tok, texts, args.batch_tokens)
        names = ("bare_forward", "engine") if label == "32k-arch-4k-vocab" else METHODS
        out[label] = {name: peak_mib(calls[name]) for name in names}
    print(json.dumps(out))


def measure_memory(args) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--memory-child",
        "--texts",
        str(args.texts),
        "--texts-large",
        str(args.texts_large),
        "--batch-tokens",
        str(args.batch_tokens),
        "--threads",
        str(args.threads),
    ]
    if args.skip_large:
        cmd.append("--skip-large")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"memory measurement failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return {}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- report


def print_model(row: dict, memory: dict) -> None:
    print(
        f"\n{row['label']}: {row['params_m']}M parameters, vocabulary {row['vocab']}, {row['texts']} texts, "
        f"{row['tokens']} tokens; engine vs per_sample max |diff| {row['max_abs_diff']:.1e}"
    )
    print(f"{'method':<14}{'seconds':>9}{'samples/s':>11}{'tokens/s':>10}{'peak MiB':>10}")
    for name in METHODS:
        s = row["seconds"][name]
        print(
            f"{name:<14}{s:>9.2f}{row['texts'] / s:>11.1f}{row['tokens'] / s:>10.0f}{memory.get(name, float('nan')):>10.0f}"
        )
    print(
        f"engine vs per_sample {row['ratio_vs_per_sample']:.2f}x samples/s (target >= 1.3), "
        f"vs bare_forward {row['ratio_vs_bare_forward']:.2f}x tokens/s (target >= 0.8)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--texts", type=int, default=300, help="texts for the small model")
    parser.add_argument("--texts-large", type=int, default=100, help="texts for the 32k-vocabulary model")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-tokens", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="6 texts, the small model only, no memory")
    args = parser.parse_args()
    if args.smoke:
        args.texts, args.repeats, args.skip_large, args.skip_memory = 6, 1, True, True
    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    if args.memory_child:
        memory_child(args)
        return

    load_before = os.getloadavg()[0]
    print(
        f"threads {args.threads}, batch_tokens {args.batch_tokens}, load average {load_before:.1f} on {os.cpu_count()} cores"
    )
    models = setups(args)
    timing = {
        label: time_model(label, model, tok, texts, args.repeats, args.batch_tokens)
        for label, (model, tok, texts) in models.items()
        if label != "32k-arch-4k-vocab"
    }
    load_after = os.getloadavg()[0]
    memory = {} if args.skip_memory else measure_memory(args)
    for label, row in timing.items():
        print_model(row, memory.get(label, {}))
        row["peak_mib"] = memory.get(label, {})
    if "32k-arch-4k-vocab" in memory:
        by_vocab = {
            "4096": memory["32k-arch-4k-vocab"],
            "32000": {k: memory["32k"][k] for k in ("bare_forward", "engine")},
        }
        print("\npeak MiB, large architecture: vocabulary 4096 vs 32000")
        for name in ("bare_forward", "engine"):
            print(f"{name:<14}{by_vocab['4096'][name]:>8.0f}{by_vocab['32000'][name]:>8.0f}")
    else:
        by_vocab = {}
    print(f"load average before {load_before:.1f}, after timing {load_after:.1f}")
    summary = {
        "bench": "scoring",
        "ratio_vs_per_sample": min(r["ratio_vs_per_sample"] for r in timing.values()),
        "ratio_vs_bare_forward": min(r["ratio_vs_bare_forward"] for r in timing.values()),
        "tokens_per_s": timing["4k"]["tokens_per_s"],
        "models": timing,
        "peak_mib_large_arch_by_vocab": by_vocab,
        "threads": args.threads,
        "batch_tokens": args.batch_tokens,
        "load_avg_before": round(load_before, 2),
        "load_avg_after": round(load_after, 2),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
