"""Recipe options that only a GPU can honour, checked before a run writes anything (else transformers
refuses bf16 on a CPU deep inside the Trainer, after the run's files were written)."""

from __future__ import annotations

import importlib.util

from leaklab.errors import InputError


def gpu_state() -> tuple[bool, bool]:
    """(a CUDA GPU is present, it supports bfloat16)."""
    import torch

    if not torch.cuda.is_available():
        return False, False
    return True, bool(torch.cuda.is_bf16_supported())


def check_gpu_options(recipe, state: tuple[bool, bool] | None = None) -> None:
    """Refuse, with one line naming the key and the value that works here, each option the machine
    cannot run: train.bf16 without a bfloat16 GPU, train.deepspeed without a GPU, and vLLM generation
    (train.rl.use_vllm=true, rl stage) without a GPU or without vllm installed."""
    has_gpu, has_bf16 = state if state is not None else gpu_state()
    train = recipe.train
    if train.bf16 and not has_bf16:
        where = "this GPU has no bfloat16 support" if has_gpu else "no GPU here"
        raise InputError(f"train.bf16: true needs a GPU with bfloat16 ({where}); set train.bf16=false")
    if train.deepspeed and not has_gpu:
        raise InputError(
            f"train.deepspeed: {train.deepspeed} needs a GPU (no GPU here); leave train.deepspeed unset"
        )
    if train.stage == "rl" and train.rl.use_vllm == "true":
        if not has_gpu:
            raise InputError("train.rl.use_vllm: true needs a GPU (no GPU here); set train.rl.use_vllm=auto")
        if importlib.util.find_spec("vllm") is None:
            raise InputError(
                "train.rl.use_vllm: true needs vllm, which is not installed (pip install vllm); "
                "set train.rl.use_vllm=auto"
            )
