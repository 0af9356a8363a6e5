"""`make gpu-check`: every GPU path of leaklab, on randomly initialised models of real shapes, in one run.

Run it on a new cluster before the first real experiment. It needs no weights and no network: the models
are built from the published shapes of Qwen2.5-0.5B and Qwen2.5-7B (written below, full vocabulary) with
random weights, and the tokenizer is leaklab's builtin byte-level BPE (4,096 tokens, trained locally on
Python's standard library) inside the model's larger vocabulary. The rows of the vocabulary no token maps
to get zero embedding and output weights, so greedy decoding stays within the tokenizer's ids.

Sections (each through leaklab's own code; the budget is the planned share of one H100's ~8 minutes,
an estimate until a GPU run is recorded in docs/scaling.md):

  cpt_lora      the cpt stage's Trainer (`training/stages.py`, `training/cpt.py`) with LoRA (`models/
                lora.py`) as `apps_cpt` sets it up (bf16, gradient checkpointing, r 16 on every projection),
                on packed blocks of 2,048 random tokens: tokens/s, MFU, peak memory; 0.5B and 7B (~2 min)
  full_weights  the sft stage (TRL) with every weight trained at 0.5B; without TRL the cpt stage with LoRA
                off (said in the row) (~40 s)
  scoring       `signals/logprobs.compute_token_stats` (token log-probs + Min-K%++'s full-vocabulary mean
                and variance, on the device) vs a bare batched forward + log-softmax over the same batches:
                tokens/s and the ratio, peak memory; 0.5B and 7B (~1.5 min)
  generation    `signals/generation.HFGenerator` vs HF `generate` one prompt at a time and batched, greedy,
                tokens/s, 0.5B (~1 min)
  grpo          a few steps of the rl stage (TRL GRPO) at 0.5B with LoRA and the sandbox reward
                (`execution/rewards.py`), completions/s (~1 min)
  numerics      every gray-box detector (`detectors/`) in bfloat16 vs float32 on the same texts, Spearman
                per detector, 0.5B (~30 s)
  srdetection   projection: SrDetection gray box at n = 10 (11 texts per sample) on 2,000 APPS-length
                samples, from the engine's measured tokens/s at the largest size and an assumed mean APPS
                length (`--apps-tokens`, prompt + solution; APPS is not read here) (no cost)

Targets (one H100): LoRA cpt at 7B >= 40% MFU; scoring >= 0.9x the bare forward; the SrDetection
projection <= 10 minutes. MFU = model FLOPs per token x tokens/s / the card's bf16 dense peak (table
below, or --peak-tflops), with model FLOPs per token F = 2 N + 4 L d T for a forward (N: weights in
matrix multiplies, head included; L layers, d width, T sequence length; PaLM's convention), 3F for
full-weight training and 2F for LoRA (frozen weights need no weight gradients); recomputation under
gradient checkpointing is not counted. `mfu_6n` uses the common 6N + 12 L d T instead.

Each section runs in its own try/except: a missing library is "skipped: <why>", a failure is recorded with
its error in the table and the JSON, and the next section runs. A model that does not fit the card ends
the run before anything is built (exit 2, one line with the estimated memory).

    python bench/gpu_check.py                 # on a GPU: 0.5B and 7B (about 8 minutes on one H100)
    python bench/gpu_check.py --smoke         # CPU: a tiny random config, seconds (the test runs this)
    python bench/gpu_check.py --sizes 0.5b,/models/Qwen2.5-14B   # a local config.json directory too

Prints a table, then one JSON line: {"bench": "gpu_check", "sections": {...}, "targets": {...}, ...}.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

# Importable from the checkout without installing it: a GPU node may have torch and friends but no network
# to `pip install -e .` (whose build needs setuptools from PyPI).
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

# Published shapes (the models' config.json); rope and norm settings matter for numerics, not speed.
SHAPES: dict[str, dict[str, Any]] = {
    "0.5b": {
        "label": "Qwen2.5-0.5B",
        "vocab_size": 151936,
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
    },
    "7b": {
        "label": "Qwen2.5-7B",
        "vocab_size": 152064,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "tie_word_embeddings": False,
    },
    # --smoke: the builtin tiny model's size class, with a vocabulary twice the tokenizer's (as padded).
    "tiny": {
        "label": "tiny random Qwen2",
        "vocab_size": 8192,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
    },
}

# bf16 dense tensor-core peaks (TFLOP/s, no sparsity) from the vendors' data sheets; first match wins.
PEAK_BF16_TFLOPS: list[tuple[str, float]] = [
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("GH200", 989.0),
    ("H200", 989.0),
    ("H100", 989.0),  # SXM
    ("B200", 2250.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("A10G", 70.0),
    ("L4", 121.0),
]

TARGETS = {"cpt_lora_7b_mfu": 0.40, "scoring_ratio_vs_bare": 0.9, "srdetection_projected_min": 10.0}
TOKENIZER_VOCAB = 4096


# --------------------------------------------------------------------------- settings per mode


def plan(args) -> dict[str, Any]:
    """Sizes of every section: full on a GPU (fits ~8 min on one H100), tiny with --smoke."""
    if args.smoke:
        return {
            "seq": 128,
            "cpt_micro": 2,
            "cpt_batch": 4,
            "cpt_steps": (1, 2),  # (warm-up, timed) optimizer steps
            "score_texts": {"*": 8},
            "score_batch_tokens": 1024,
            "score_rounds": 1,
            "gen_prompts": 4,
            "gen_tokens": 8,
            "grpo": {"prompts": 2, "generations": 2, "tokens": 8, "steps": (1, 1)},
            "numerics_texts": 8,
            "numerics_corpus": 25,
            "text_chars": 800,
        }
    return {
        "seq": 2048,
        "cpt_micro": 4,
        "cpt_batch": 8,
        "cpt_steps": (2, 6),
        "score_texts": {"0.5b": 384, "7b": 128, "*": 128},
        "score_batch_tokens": 16384,
        "score_rounds": 2,
        "gen_prompts": 16,
        "gen_tokens": 64,
        "grpo": {"prompts": 4, "generations": 4, "tokens": 64, "steps": (1, 2)},
        "numerics_texts": 64,
        "numerics_corpus": 500,
        "text_chars": 2500,
    }


# --------------------------------------------------------------------------- models, texts, tokenizer


def shape_of(size: str) -> dict[str, Any]:
    """A named shape, or the config.json of a local directory (read with transformers, no network)."""
    if size in SHAPES:
        return dict(SHAPES[size])
    path = Path(size).expanduser()
    if not (path / "config.json").is_file():
        raise SystemExit(
            f"gpu_check: --sizes: {size!r} is neither {', '.join(SHAPES)} nor a directory with config.json"
        )
    cfg = json.loads((path / "config.json").read_text())
    keys = [k for k in SHAPES["7b"] if k != "label"]
    return {"label": path.name, **{k: cfg[k] for k in keys if k in cfg}}


def matmul_params(shape: dict[str, Any]) -> int:
    """Weights used in matrix multiplies per token (attention, MLP, LM head; not the embedding lookup)."""
    d, layers = shape["hidden_size"], shape["num_hidden_layers"]
    kv = d // shape["num_attention_heads"] * shape["num_key_value_heads"]
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * shape["intermediate_size"]
    return layers * per_layer + d * shape["vocab_size"]


def total_params(shape: dict[str, Any]) -> int:
    embed = shape["vocab_size"] * shape["hidden_size"]
    return matmul_params(shape) + (0 if shape["tie_word_embeddings"] else embed)


def forward_flops_per_token(shape: dict[str, Any], seq: int) -> float:
    return 2.0 * matmul_params(shape) + 4.0 * shape["num_hidden_layers"] * shape["hidden_size"] * seq


def estimate_gib(shape: dict[str, Any], seq: int, micro: int) -> float:
    """Peak memory of LoRA cpt (the largest section at every size): bf16 weights, checkpointed layer
    inputs, one layer's recomputed activations, and the logits with their float32 loss copies."""
    d, layers, v = shape["hidden_size"], shape["num_hidden_layers"], shape["vocab_size"]
    tokens = seq * micro
    weights = 2 * total_params(shape)
    checkpoints = tokens * d * 2 * layers
    one_layer = tokens * (18 * d + 6 * shape["intermediate_size"]) * 2
    logits = tokens * v * (2 + 4 + 4)
    return (weights + checkpoints + one_layer + logits) * 1.1 / 2**30  # +10% allocator slack


def build_model(shape: dict[str, Any], dtype: torch.dtype, device: str, n_tokens: int, seed: int = 0):
    """A randomly initialised Qwen2 causal LM of `shape`, built on the device in `dtype`. Vocabulary
    rows past the tokenizer's `n_tokens` get zero weights: their logit is 0, below the real tokens' best,
    so greedy decoding never picks an id the tokenizer cannot decode."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    keys = {k: v for k, v in shape.items() if k != "label"}
    config = Qwen2Config(
        **keys, max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6, use_cache=True
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    with torch.no_grad():
        model.get_input_embeddings().weight[n_tokens:] = 0
        model.get_output_embeddings().weight[n_tokens:] = 0
    return model


def code_texts(n: int, chars: int = 2500) -> list[str]:
    """`n` pieces of Python's standard library source, `chars` long (about APPS's prompt + solution)."""
    import sysconfig

    root = Path(sysconfig.get_paths()["stdlib"])
    out: list[str] = []
    for path in sorted(root.glob("*.py")):
        text = path.read_text(errors="replace")
        for start in range(0, len(text) - chars, chars):
            out.append(text[start : start + chars])
            if len(out) == n:
                return out
    return out


def tokenizer():
    from leaklab.models.tiny import build_tokenizer

    return build_tokenizer(TOKENIZER_VOCAB)


# --------------------------------------------------------------------------- timing helpers


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def reset_peak(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device: str) -> float | None:
    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if device == "cuda" else None


def free(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


class StepTimer:
    """A Trainer callback: wall time of each optimizer step after `warmup` steps (device synchronised)."""

    def __init__(self, device: str, warmup: int):
        from transformers import TrainerCallback

        timer = self

        class Callback(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                sync(device)
                timer.started = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                sync(device)
                if state.global_step > warmup:
                    timer.times.append(time.perf_counter() - timer.started)

        self.times: list[float] = []
        self.started = 0.0
        self.callback = Callback()


# --------------------------------------------------------------------------- sections


class Context:
    def __init__(self, args, device: str, work: Path):
        self.args, self.device, self.work = args, device, work
        self.plan = plan(args)
        self.dtype = torch.bfloat16 if device == "cuda" else torch.float32
        self.peak_tflops = args.peak_tflops or card_peak(device)
        self._tokenizer = None
        self.scoring_rate: dict[str, float] = {}  # size -> engine tokens/s, for the projection

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = tokenizer()
        return self._tokenizer

    def mfu(self, flops_per_token: float, tokens_per_s: float) -> float | None:
        if not self.peak_tflops:
            return None
        return round(flops_per_token * tokens_per_s / (self.peak_tflops * 1e12), 4)


def card_peak(device: str) -> float | None:
    if device != "cuda":
        return None
    name = torch.cuda.get_device_name(0)
    return next((peak for key, peak in PEAK_BF16_TFLOPS if key in name), None)


def train_recipe(ctx: Context, base: str, overrides: list[str]):
    from leaklab.recipe import load_recipe

    p = ctx.plan
    warm, timed = p["cpt_steps"]
    return load_recipe(
        base,
        [
            f"train.max_steps={warm + timed}",
            f"train.batch_size={p['cpt_batch']}",
            f"train.micro_batch_size={p['cpt_micro']}",
            f"mix.max_seq_len={p['seq']}",
            "train.save_every=1000000",  # no checkpoint: this is about speed
            "train.logging_steps=1000000",
            f"train.bf16={'true' if ctx.device == 'cuda' else 'false'}",
            "tracking.wandb.enabled=false",
            *overrides,
        ],
    )


def run_trainer(ctx: Context, trainer, timer: StepTimer, tokens_per_step: int, flops: float) -> dict:
    reset_peak(ctx.device)
    trainer.train()
    step_s = float(np.median(timer.times))
    tokens_per_s = tokens_per_step / step_s
    return {
        "tokens_per_s": round(tokens_per_s, 1),
        "step_s": round(step_s, 3),
        "mfu": ctx.mfu(flops, tokens_per_s),
        "peak_gib": peak_gib(ctx.device),
    }


def cpt_lora(ctx: Context, size: str) -> dict:
    from leaklab.models.lora import apply_lora
    from leaklab.training.cpt import PackedBlocks
    from leaklab.training.stages import get_stage

    shape, p = shape_of(size), ctx.plan
    # apps_cpt's training settings (LoRA on every projection, gradient checkpointing, bf16).
    recipe = train_recipe(ctx, "apps_cpt", ctx.args.cpt_override)
    model = build_model(shape, ctx.dtype, ctx.device, len(ctx.tokenizer))
    model = apply_lora(model, recipe)
    rng = np.random.default_rng(0)
    n_blocks = p["cpt_batch"] * sum(p["cpt_steps"])
    blocks = PackedBlocks(rng.integers(3, len(ctx.tokenizer), size=(n_blocks, p["seq"])))
    timer = StepTimer(ctx.device, p["cpt_steps"][0])
    trainer = get_stage("cpt").build_trainer(
        model,
        ctx.tokenizer,
        blocks,
        recipe,
        ctx.work / f"cpt-{size}" / "checkpoints",
        [timer.callback],
        "none",
    )
    fwd = forward_flops_per_token(shape, p["seq"])
    out = run_trainer(ctx, trainer, timer, p["cpt_batch"] * p["seq"], 2 * fwd)
    mfu_6n = ctx.mfu(
        6 * matmul_params(shape) + 12 * shape["num_hidden_layers"] * shape["hidden_size"] * p["seq"],
        out["tokens_per_s"],
    )
    del trainer, model
    free(ctx.device)
    return {**out, "mfu_6n": mfu_6n, "tokens_per_step": p["cpt_batch"] * p["seq"]}


def full_weights(ctx: Context, size: str) -> dict:
    import importlib.util

    from leaklab.training.stages import get_stage

    shape, p = shape_of(size), ctx.plan
    warm, timed = p["cpt_steps"]
    model = build_model(
        shape, torch.float32, ctx.device, len(ctx.tokenizer)
    )  # fp32 master weights (bf16 autocast)
    rng = np.random.default_rng(0)
    n = p["cpt_batch"] * (warm + timed)
    timer = StepTimer(ctx.device, warm)
    if all(importlib.util.find_spec(m) is not None for m in ("trl", "datasets")):
        import datasets

        from leaklab.training.sft import SftData

        # Prompt/answer pairs of random tokens, a quarter prompt (masked out of the loss), as the sft stage
        # trains on them; the fused LM-head loss (train.sft.loss) is the stage's default.
        recipe = train_recipe(
            ctx,
            "mbpp_sft",
            [
                "train.lora.enabled=false",
                "train.sft.validation=false",
                "train.gradient_checkpointing=true",
                f"train.sft.max_length={p['seq']}",
            ],
        )
        ids = rng.integers(3, len(ctx.tokenizer), size=(n, p["seq"])).tolist()
        mask = [[0] * (p["seq"] // 4) + [1] * (p["seq"] - p["seq"] // 4)] * n
        data = SftData(datasets.Dataset.from_dict({"input_ids": ids, "completion_mask": mask}), None)
        stage, note = get_stage("sft"), "sft stage (TRL), every weight"
    else:
        from leaklab.training.cpt import PackedBlocks

        recipe = train_recipe(ctx, "apps_cpt", ["train.lora.enabled=false"])
        data = PackedBlocks(rng.integers(3, len(ctx.tokenizer), size=(n, p["seq"])))
        stage, note = (
            get_stage("cpt"),
            "trl or datasets not installed: the cpt stage with every weight, not sft",
        )
    trainer = stage.build_trainer(
        model,
        ctx.tokenizer,
        data,
        recipe,
        ctx.work / f"full-{size}" / "checkpoints",
        [timer.callback],
        "none",
    )
    out = run_trainer(
        ctx, trainer, timer, p["cpt_batch"] * p["seq"], 3 * forward_flops_per_token(shape, p["seq"])
    )
    del trainer, model
    free(ctx.device)
    return {**out, "note": note}


def engine_batches(tok, texts: list[str], max_length: int, batch_tokens: int):
    """The engine's own segments and token-budget batches, for the bare forward to run the same shapes."""
    from leaklab.signals.logprobs import _batches, _plan_text, _tokenise

    segments = []
    for i, (ids, scorable) in enumerate(_tokenise(tok, texts, None)):
        segments += _plan_text(i, ids, scorable, max_length, "truncate").segments
    return _batches(segments, batch_tokens)


@torch.inference_mode()
def bare_forward(model, tok, texts: list[str], max_length: int, batch_tokens: int, device: str) -> int:
    """Batched forward + log-softmax + the tokens' log-probs, nothing else: the floor a scorer pays."""
    pad = tok.pad_token_id or 0
    n = 0
    for batch in engine_batches(tok, texts, max_length, batch_tokens):
        width = max(len(s.ids) for s in batch)
        x = torch.full((len(batch), width), pad, device=device)
        for i, seg in enumerate(batch):
            x[i, : len(seg.ids)] = torch.from_numpy(seg.ids).to(device)
        logits = model(input_ids=x, use_cache=False).logits
        lp = torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, x[:, 1:, None]).squeeze(-1)
        lp.cpu()
        n += sum(len(s.ids) for s in batch)
        del logits, lp
    return n


def scoring(ctx: Context, size: str) -> dict:
    from leaklab.signals.logprobs import ScoringSettings, SignalCache, compute_token_stats

    shape, p = shape_of(size), ctx.plan
    texts = code_texts(p["score_texts"].get(size, p["score_texts"]["*"]), chars=p["text_chars"])
    model = build_model(shape, ctx.dtype, ctx.device, len(ctx.tokenizer)).eval()
    max_length = 2048  # longer texts are cut: APPS-length texts fit
    settings = ScoringSettings(
        batch_tokens=p["score_batch_tokens"],
        max_length=max_length,
        long_texts="truncate",
        dtype="bfloat16" if ctx.dtype == torch.bfloat16 else "float32",
        progress=False,
    )
    methods: dict[str, Callable[[], Any]] = {
        "bare_forward": lambda: bare_forward(
            model, ctx.tokenizer, texts, max_length, p["score_batch_tokens"], ctx.device
        ),
        "engine": lambda: compute_token_stats(
            model, ctx.tokenizer, texts, settings=settings, distribution=True, cache=SignalCache()
        ),
    }
    best: dict[str, float] = {}
    peaks: dict[str, float | None] = {}
    for round_ in range(p["score_rounds"] + 1):  # round 0 warms up (kernels, allocator)
        for name, fn in methods.items():
            reset_peak(ctx.device)
            sync(ctx.device)
            started = time.perf_counter()
            fn()
            sync(ctx.device)
            if round_:
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - started)
                peaks[name] = peak_gib(ctx.device)
    tokens = sum(
        len(s.ids)
        for b in engine_batches(ctx.tokenizer, texts, max_length, p["score_batch_tokens"])
        for s in b
    )
    rate = tokens / best["engine"]
    ctx.scoring_rate[size] = rate
    model = None  # free it before the next section builds its own
    free(ctx.device)
    return {
        "texts": len(texts),
        "tokens": tokens,
        "mean_tokens_per_text": round(tokens / len(texts), 1),
        "engine_tokens_per_s": round(rate, 1),
        "bare_tokens_per_s": round(tokens / best["bare_forward"], 1),
        "ratio_vs_bare": round(best["bare_forward"] / best["engine"], 3),
        "engine_peak_gib": peaks["engine"],
        "bare_peak_gib": peaks["bare_forward"],
    }


def generation(ctx: Context, size: str) -> dict:
    from leaklab.signals.generation import HFGenerator

    shape, p = shape_of(size), ctx.plan
    tok = ctx.tokenizer
    prompts = [t[:400] for t in code_texts(p["gen_prompts"], chars=1200)]
    new = p["gen_tokens"]
    model = build_model(shape, ctx.dtype, ctx.device, len(tok)).eval()
    model.generation_config.pad_token_id = tok.pad_token_id

    def hf_one_by_one() -> int:
        n = 0
        for prompt in prompts:
            enc = tok(prompt, return_tensors="pt").to(ctx.device)
            out = model.generate(**enc, max_new_tokens=new, do_sample=False)
            n += out.shape[1] - enc["input_ids"].shape[1]
        return n

    def hf_batched() -> int:
        enc = tok(prompts, return_tensors="pt", padding=True, padding_side="left").to(ctx.device)
        out = model.generate(**enc, max_new_tokens=new, do_sample=False)
        return int((out[:, enc["input_ids"].shape[1] :] != tok.pad_token_id).sum())

    def engine() -> int:
        done = HFGenerator(model, tok, batch_size=len(prompts), prompt_boundary="none").generate(
            prompts, max_new_tokens=new
        )
        return sum(len(c[0].token_ids) for c in done)

    out: dict[str, Any] = {"prompts": len(prompts), "max_new_tokens": new}
    with torch.inference_mode():
        for name, fn in (("engine", engine), ("hf_one_by_one", hf_one_by_one), ("hf_batched", hf_batched)):
            fn() if name != "hf_one_by_one" else None  # warm-up (the one-by-one loop warms itself)
            sync(ctx.device)
            started = time.perf_counter()
            n = fn()
            sync(ctx.device)
            out[f"{name}_tokens_per_s"] = round(n / (time.perf_counter() - started), 1)
    out["engine_vs_one_by_one"] = round(out["engine_tokens_per_s"] / out["hf_one_by_one_tokens_per_s"], 2)
    out["engine_vs_batched"] = round(out["engine_tokens_per_s"] / out["hf_batched_tokens_per_s"], 2)
    model = None  # free it before the next section builds its own
    free(ctx.device)
    return out


def grpo(ctx: Context, size: str) -> dict:
    import trl  # noqa: F401 - the rl stage's trainer; a missing library is a skip, said once

    from leaklab.evaluate import load_tasks
    from leaklab.models.lora import apply_lora
    from leaklab.recipe import load_recipe
    from leaklab.rundir import RunDir
    from leaklab.training.stages import get_stage

    shape, g = shape_of(size), ctx.plan["grpo"]
    warm, timed = g["steps"]
    per_step = g["prompts"] * g["generations"]
    recipe = load_recipe(
        "tiny_grpo",
        [
            "model.name_or_path=unused",  # the model is built here; the recipe supplies the stage settings
            "data.max_samples=40",
            f"train.max_steps={warm + timed}",
            f"train.batch_size={per_step}",
            f"train.micro_batch_size={per_step}",
            f"train.rl.num_generations={g['generations']}",
            f"train.rl.max_completion_length={g['tokens']}",
            "train.rl.use_vllm='false'",  # a string setting: auto | true | false
            "train.lora.enabled=true",
            "train.lora.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]",
            f"train.bf16={'true' if ctx.device == 'cuda' else 'false'}",
            "train.save_every=1000000",
            "train.logging_steps=1",
            "tracking.wandb.enabled=false",
            # A GPU node may lack a layer of the sandbox (user namespaces, say); the cost is what is measured.
            "execution.allow_weaker_sandbox=true",
        ],
    )
    tasks = load_tasks(recipe)
    manifest = {"member_ids": [t.task_id for t in tasks]}
    stage = get_stage("rl")
    run = RunDir(ctx.work / f"grpo-{size}")
    data = stage.build_dataset(recipe, ctx.tokenizer, tasks, manifest, run, log=lambda *a: None)
    model = apply_lora(build_model(shape, ctx.dtype, ctx.device, len(ctx.tokenizer)), recipe)
    timer = StepTimer(ctx.device, warm)
    trainer = stage.build_trainer(
        model, ctx.tokenizer, data.dataset, recipe, run.checkpoints, [timer.callback], "none"
    )
    reset_peak(ctx.device)
    trainer.train()
    step_s = float(np.median(timer.times))
    del trainer, model
    free(ctx.device)
    return {
        "completions_per_step": per_step,
        "max_completion_tokens": g["tokens"],
        "step_s": round(step_s, 3),
        "completions_per_s": round(per_step / step_s, 2),
        "peak_gib": peak_gib(ctx.device),
        "note": "random weights: completions are noise, the reward's cost is what is measured",
    }


GRAY_BOX = ["ppl", "zlib", "lowercase", "mink", "minkpp", "dcpdd", "ref", "recall"]


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3:
        return None

    def ranks(x: np.ndarray) -> np.ndarray:
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x))
        for value in np.unique(x[np.r_[np.diff(np.sort(x)) == 0, False]]):  # ties share their mean rank
            r[x == value] = r[x == value].mean()
        return r

    ra, rb = ranks(a[ok]), ranks(b[ok])
    if ra.std() == 0 or rb.std() == 0:
        return None
    return round(float(np.corrcoef(ra, rb)[0, 1]), 4)


def numerics(ctx: Context, size: str) -> dict:
    from leaklab.detectors import score_detectors
    from leaklab.detectors.inputs import ModelInputs
    from leaklab.recipe import EvaluateConfig
    from leaklab.signals.logprobs import SignalCache

    shape = shape_of(size)
    texts = code_texts(ctx.plan["numerics_texts"], chars=ctx.plan["text_chars"])
    tok = ctx.tokenizer
    model = build_model(shape, torch.float32, ctx.device, len(tok)).eval()
    # `ref` needs a reference model: a small random one, float32 in both runs, so only the target changes.
    reference = build_model(SHAPES["tiny"], torch.float32, ctx.device, len(tok), seed=1).eval()
    # DC-PDD's token frequencies from a slice of the standard library (the whole builtin corpus costs a
    # minute of tokenising and says nothing more about numerics); counted once, shared by both runs.
    corpus = ctx.work / "dcpdd_corpus"
    corpus.mkdir(exist_ok=True)
    for i, text in enumerate(code_texts(ctx.plan["numerics_corpus"], chars=4000)):
        (corpus / f"{i}.py").write_text(text)
    cache = SignalCache(ctx.work / "signals")  # keyed by dtype too: nothing is shared between the runs
    scores = {}
    for dtype in ("float32", "bfloat16"):
        if dtype == "bfloat16":
            model = model.to(torch.bfloat16)  # as evaluate.dtype=bfloat16 loads the weights
        settings = EvaluateConfig(
            dtype=dtype,
            batch_tokens=ctx.plan["score_batch_tokens"],
            max_length=2048,
            dcpdd_corpus=str(corpus),
        )
        scores[dtype] = score_detectors(
            GRAY_BOX,
            ModelInputs(model, tok, texts, settings=settings, reference=(reference, tok), cache=cache),
        ).columns
    out: dict[str, Any] = {"texts": len(texts)}
    for column in scores["float32"]:
        out[f"spearman_{column}"] = spearman(scores["float32"][column], scores["bfloat16"][column])
    low = [c for c, v in out.items() if c.startswith("spearman_") and (v is None or v < 0.99)]
    out["below_0.99"] = [c.removeprefix("spearman_") for c in low]
    del model, reference
    free(ctx.device)
    return out


def srdetection_projection(ctx: Context) -> dict:
    if not ctx.scoring_rate:
        raise RuntimeError("no scoring rate measured (the scoring section did not run)")
    size = max(ctx.scoring_rate, key=lambda s: total_params(shape_of(s)))
    texts = 2000 * 11  # each sample and its 10 variants
    seconds = texts * ctx.args.apps_tokens / ctx.scoring_rate[size]
    return {
        "size": size,
        "engine_tokens_per_s": round(ctx.scoring_rate[size], 1),
        "assumed_tokens_per_text": ctx.args.apps_tokens,
        "texts": texts,
        "projected_min": round(seconds / 60, 2),
        "note": "gray box only (one token-statistics pass per text); APPS length assumed, not measured",
    }


# --------------------------------------------------------------------------- driver


def run_section(
    results: dict, name: str, fn: Callable[[], dict], started: float, limit_s: float, only: list[str] | None
) -> None:
    """One section; whatever happens, the row is recorded and the run goes on."""
    if only and not any(name.startswith(prefix) for prefix in only):
        return
    if time.perf_counter() - started > limit_s:
        results[name] = {"status": f"skipped: past the time limit ({limit_s:g} s)"}
        return
    t0 = time.perf_counter()
    try:
        row = {"status": "ok", **fn()}
    except ModuleNotFoundError as err:
        row = {"status": f"skipped: {err.name or err} is not installed"}
    except Exception as err:  # noqa: BLE001 - a broken section is a finding, not the end of the check
        row = {"status": f"error: {type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"}
        traceback.print_exc(file=sys.stderr)
    row["seconds"] = round(time.perf_counter() - t0, 1)
    results[name] = row
    # The whole row on one line as it finishes: a run stopped by a wall-clock limit keeps what it measured.
    print(f"[gpu_check] {name}: {json.dumps(row)}", file=sys.stderr, flush=True)


def targets(results: dict, smoke: bool) -> dict:
    """Each target with its value and verdict; a smoke run's sizes are not the targets' (no verdict)."""

    def get(section: str, key: str):
        row = results.get(section, {})
        return row.get(key) if row.get("status") == "ok" else None

    mfu = get("cpt_lora_7b", "mfu")
    ratios = [r for s in results if s.startswith("scoring_") and (r := get(s, "ratio_vs_bare")) is not None]
    ratio = min(ratios) if ratios else None
    proj = get("srdetection", "projected_min")
    out = {
        "cpt_lora_7b_mfu": {"value": mfu, "target": ">= 0.40", "pass": None if mfu is None else mfu >= 0.40},
        "scoring_ratio_vs_bare": {
            "value": ratio,
            "target": ">= 0.9",
            "pass": None if ratio is None else ratio >= 0.9,
        },
        "srdetection_projected_min": {
            "value": proj,
            "target": "<= 10",
            "pass": None if proj is None else proj <= 10,
        },
    }
    if smoke:
        for t in out.values():
            t["pass"] = None
    return out


def print_table(results: dict, tgt: dict) -> None:
    print(f"{'section':<22} {'status':<10} {'seconds':>8}  measurements")
    for name, row in results.items():
        status = row["status"] if row["status"] == "ok" else row["status"][:60]
        values = ", ".join(f"{k}={v}" for k, v in row.items() if k not in ("status", "seconds"))
        print(f"{name:<22} {status:<10} {row.get('seconds', ''):>8}  {values}")
    print()
    print(f"{'target':<28} {'value':>10} {'wanted':>8}  pass")
    for name, t in tgt.items():
        verdict = {True: "yes", False: "NO", None: "n/a"}[t["pass"]]
        print(f"{name:<28} {t['value'] if t['value'] is not None else '-':>10} {t['target']:>8}  {verdict}")


# --------------------------------------------------------------------------- recorded runs -> docs tables

# Where the docs hold the tables rendered from a recorded file of runs (tests/test_gpu_check.py checks
# that each block equals `render(...)` of the file, so no GPU figure in the docs is typed by hand).
RECORD = Path(__file__).resolve().parent / "results" / "gpu_check-h200.json"


def render(runs: list[dict], kind: str) -> str:
    """Markdown from recorded runs ({commit, command, note, result: the script's JSON line}).

    kind "targets": one row per target a run measured; kind "sections": one row per section of each run.
    """
    lines = []
    if kind == "targets":
        lines += ["| card | run | target | measured | wanted | met |", "|---|---|---|---|---|---|"]
        for run in runs:
            res = run["result"]
            for name, t in res["targets"].items():
                if t["value"] is not None:
                    met = {True: "yes", False: "no", None: "n/a"}[t["pass"]]
                    lines.append(
                        f"| {res['device']} | {run['commit']}: {run['note']} | `{name}` | {t['value']} "
                        f"| {t['target']} | {met} |"
                    )
    elif kind == "sections":
        lines += ["| run | section | seconds | measurements |", "|---|---|---|---|"]
        for run in runs:
            for name, row in run["result"]["sections"].items():
                values = ", ".join(f"{k}={v}" for k, v in row.items() if k not in ("status", "seconds"))
                status = "" if row["status"] == "ok" else f"{row['status']}; "
                head = f"| {run['commit']}: {run['note']} | `{name}` | {row.get('seconds', '')} |"
                lines.append(f"{head} {status}{values} |")
    else:
        raise ValueError(f"render: kind must be targets or sections, got {kind!r}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny random config, seconds")
    parser.add_argument("--sizes", default=None, help="comma-separated: tiny, 0.5b, 7b or config.json dirs")
    parser.add_argument("--peak-tflops", type=float, default=None, help="the card's bf16 dense peak")
    parser.add_argument("--card-memory-gib", type=float, default=None, help="default: the card's own")
    parser.add_argument("--apps-tokens", type=int, default=700, help="assumed mean APPS text length")
    parser.add_argument("--time-limit", type=float, default=480, help="skip sections started after this")
    parser.add_argument(
        "--cpt-override",
        action="append",
        default=[],
        help="a recipe override for the cpt sections, repeatable (e.g. train.gradient_checkpointing=false)",
    )
    parser.add_argument(
        "--sections",
        default=None,
        help="comma-separated section names or prefixes to run (e.g. scoring,cpt_lora); default: all",
    )
    parser.add_argument(
        "--render",
        choices=["targets", "sections"],
        default=None,
        help=f"print the docs' markdown table of the recorded runs ({RECORD.name}) and exit",
    )
    args = parser.parse_args(argv)
    if args.render:
        print(render(json.loads(RECORD.read_text()), args.render))
        return 0

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.smoke:
        print("gpu_check: no GPU here; running --smoke (tiny sizes on the CPU)", file=sys.stderr)
        args.smoke = True
    sizes = (args.sizes or ("tiny" if args.smoke else "0.5b,7b")).split(",")
    p = plan(args)

    # Bad input first, before anything is built: every size must fit the card.
    if args.card_memory_gib:
        card_gib, card = args.card_memory_gib, "the given --card-memory-gib"
    elif device == "cuda":
        card_gib, card = (
            torch.cuda.get_device_properties(0).total_memory / 2**30,
            torch.cuda.get_device_name(0),
        )
    else:
        card_gib, card = (
            os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30,
            "this host's memory",
        )
    for size in sizes:
        shape = shape_of(size)
        need = estimate_gib(shape, p["seq"], p["cpt_micro"])
        if need > 0.95 * card_gib:
            print(
                f"gpu_check: {shape['label']} ({total_params(shape) / 1e9:.2f}B parameters) needs about "
                f"{need:.0f} GiB for LoRA cpt at {p['cpt_micro']} x {p['seq']} tokens; {card} has "
                f"{card_gib:.0f} GiB: choose a smaller --sizes entry (e.g. 0.5b) or a larger card",
                file=sys.stderr,
            )
            return 2

    only = args.sections.split(",") if args.sections else None
    small = sizes[0]  # the single-size sections run at the smallest size asked for (0.5B by default)
    results: dict[str, dict] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as work:
        ctx = Context(args, device, Path(work))
        for size in sizes:
            run_section(
                results, f"cpt_lora_{size}", lambda s=size: cpt_lora(ctx, s), started, args.time_limit, only
            )
        run_section(
            results, f"full_weights_{small}", lambda: full_weights(ctx, small), started, args.time_limit, only
        )
        for size in sizes:
            run_section(
                results, f"scoring_{size}", lambda s=size: scoring(ctx, s), started, args.time_limit, only
            )
        run_section(
            results, f"generation_{small}", lambda: generation(ctx, small), started, args.time_limit, only
        )
        run_section(results, f"grpo_{small}", lambda: grpo(ctx, small), started, args.time_limit, only)
        run_section(
            results, f"numerics_{small}", lambda: numerics(ctx, small), started, args.time_limit, only
        )
        run_section(results, "srdetection", lambda: srdetection_projection(ctx), started, float("inf"), only)
    tgt = targets(results, args.smoke)
    print_table(results, tgt)
    card_name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    print(
        json.dumps(
            {
                "bench": "gpu_check",
                "device": card_name,
                "smoke": args.smoke,
                "sizes": sizes,
                "peak_tflops": ctx.peak_tflops,
                "torch": torch.__version__,
                "seconds": round(time.perf_counter() - started, 1),
                "sections": results,
                "targets": tgt,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
