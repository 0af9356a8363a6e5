"""The builtin tiny model: a byte-level BPE tokenizer and a small Llama trained from scratch on the
builtin corpus (Python's standard library source and pydoc text), so the pipeline runs on a laptop CPU
with no download. The result is an ordinary HF model directory under `<cache>/tiny/<settings-hash>/`;
the same settings give the same directory and, for a fixed thread count, the same weights.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from leaklab.data.corpora import builtin_corpus_texts
from leaklab.progress import Progress
from leaklab.recipe import TinyModelConfig
from leaklab.rundir import cache_root, locked

BOS, EOS, PAD = "<|bos|>", "<|endoftext|>", "<|pad|>"
# Bump when the build procedure changes, so stale caches are not reused.
BUILD_VERSION = 1


def _settings_hash(obj: dict) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:10]


def build_tokenizer(vocab_size: int, seed: int = 0, cache_dir: str | Path | None = None):
    """A byte-level BPE tokenizer trained on the builtin corpus, cached per vocabulary size.

    Every encoded text starts with BOS so that its first real token also gets a log-probability.
    (`seed` is part of the cache key for symmetry; BPE training itself is deterministic.)
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    key = _settings_hash({"vocab_size": vocab_size, "seed": seed, "v": BUILD_VERSION})
    path = Path(cache_dir or cache_root()) / "tokenizers" / f"bpe-{vocab_size}-{key}"
    if not (path / "tokenizer.json").exists():
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=[BOS, EOS, PAD],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(builtin_corpus_texts(), trainer=trainer)
        bos_id = tok.token_to_id(BOS)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, bos_id)]
        )
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        fast.save_pretrained(tmp)
        shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)
    return PreTrainedTokenizerFast.from_pretrained(path)


def init_llama(
    tokenizer,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 4,
    intermediate_size: int = 384,
    context_length: int = 256,
    seed: int = 0,
):
    """A randomly initialised Llama sized by the arguments, with the tokenizer's vocabulary."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=context_length,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def _corpus_token_stream(tokenizer) -> np.ndarray:
    """The builtin corpus as one token array, documents separated by EOS."""
    ids: list[int] = []
    for text in builtin_corpus_texts():
        ids.extend(tokenizer(text, add_special_tokens=True)["input_ids"])
        ids.append(tokenizer.eos_token_id)
    return np.asarray(ids, dtype=np.int32)


def tiny_model_dir(cfg: TinyModelConfig, cache_dir: str | Path | None = None) -> Path:
    key = _settings_hash({**dataclasses.asdict(cfg), "v": BUILD_VERSION})
    return Path(cache_dir or cache_root()) / "tiny" / key


def build_tiny_model(
    cfg: TinyModelConfig | None = None, cache_dir: str | Path | None = None, log=print
) -> Path:
    """Build (or find in the cache) the tiny model; returns its HF model directory."""
    cfg = cfg or TinyModelConfig()
    out = tiny_model_dir(cfg, cache_dir)
    if (out / "leaklab_tiny.json").exists():
        return out
    # One build at a time per model: a second process (a sweep's other run, a parallel test worker) waits
    # for the first and then finds the model, instead of spending the same minutes building it again.
    with locked(out.parent / f"{out.name}.lock"):
        if (out / "leaklab_tiny.json").exists():
            return out
        return _build(cfg, out, cache_dir, log)


def _build(cfg: TinyModelConfig, out: Path, cache_dir, log) -> Path:
    started = time.time()
    log(f"building the builtin tiny model into {out} (one-off; cached afterwards)")
    tokenizer = build_tokenizer(cfg.vocab_size, cfg.seed, cache_dir)
    stream = torch.from_numpy(_corpus_token_stream(tokenizer).astype(np.int64))
    model = init_llama(
        tokenizer,
        cfg.hidden_size,
        cfg.num_layers,
        cfg.num_heads,
        cfg.intermediate_size,
        cfg.context_length,
        cfg.seed,
    )
    n_params = sum(p.numel() for p in model.parameters())
    log(f"  corpus {len(stream):,} tokens; model {n_params / 1e6:.2f}M parameters")

    # Plain pretraining loop on random windows of the stream: AdamW, linear warm-up, cosine decay.
    generator = torch.Generator().manual_seed(cfg.seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=cfg.learning_rate, weight_decay=0.1, betas=(0.9, 0.95)
    )
    warmup = max(1, cfg.pretrain_steps // 20)
    model.train()
    # A bar a person can read in a terminal, and a line every 15 s or 10% in a log file.
    bar = Progress(cfg.pretrain_steps, "pretraining tiny model", unit="step", every_s=15)
    for step in range(cfg.pretrain_steps):
        lr_scale = (
            (step + 1) / warmup
            if step < warmup
            else 0.5 * (1 + math.cos(math.pi * step / cfg.pretrain_steps))
        )
        for group in optimizer.param_groups:
            group["lr"] = cfg.learning_rate * lr_scale
        starts = torch.randint(
            0, len(stream) - cfg.context_length - 1, (cfg.batch_size,), generator=generator
        )
        batch = torch.stack([stream[s : s + cfg.context_length] for s in starts.tolist()])
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 20 == 0:
            bar.set_postfix(f"loss={loss.item():.3f}")
        bar.update()
    bar.close()

    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    info = {
        "settings": dataclasses.asdict(cfg),
        "parameters": n_params,
        "corpus_tokens": len(stream),
        "final_loss": float(loss.item()),
        "build_seconds": round(time.time() - started, 1),
        "build_version": BUILD_VERSION,
    }
    (tmp / "leaklab_tiny.json").write_text(json.dumps(info, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, out)
    log(f"  built in {info['build_seconds']} s, final loss {info['final_loss']:.3f}")
    return out
