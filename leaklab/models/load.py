"""Loading models: a hub name or local directory (or `builtin:tiny`), a dtype, and adapters.

A checkpoint saved with LoRA holds only the adapter; `load_checkpoint` puts it back on its base model.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

import torch

from leaklab.errors import UnavailableError
from leaklab.recipe import ModelConfig

BUILTIN_TINY = "builtin:tiny"

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelUnavailableError(UnavailableError):
    """Weights that are neither local nor reachable; the message says how to get them."""


def _unavailable(path: str, what: str, err: Exception, key: str) -> ModelUnavailableError:
    """The one message for a model or tokenizer that cannot be loaded: a missing local path, or a hub id
    that cannot be fetched here (offline, misspelt, gated), with what to download and which key to set."""
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
    if Path(path).exists():
        return ModelUnavailableError(
            f"{key}: {path} exists but holds no loadable {what} ({first[:200]})\n"
            f"a model directory needs config.json, the weights and the tokenizer files"
        )
    if path.startswith(("/", "./", "../", "~")):
        return ModelUnavailableError(f"{key}: {path} does not exist (a local model directory)")
    local = f"models/{path.split('/')[-1]}"
    return ModelUnavailableError(
        f"{key}: could not load the {what} of {path!r} from the hub (offline, misspelt or gated?)\n"
        f"download it where there is network: `hf download {path} --local-dir {local}`, "
        f"then set {key}={local} (a local directory)"
    )


def _hub_reachable(timeout_s: float = 3.0) -> bool:
    """Can a connection to the hub's host be opened? (behind a proxy: assume so, the proxy decides)."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection(
            (url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout_s
        ).close()
    except OSError:
        return False
    return True


def check_hub_model(name: str, key: str = "model.name_or_path") -> None:
    """Fail in seconds, not after a minute of retries, for a hub model that is not in the local cache
    when the hub cannot be reached; anything else is left to the load itself."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return  # offline mode: transformers fails at once on what is not cached
    try:
        from huggingface_hub import try_to_load_from_cache

        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            return
    except Exception:  # not a valid repo id: the load says so
        return
    if not _hub_reachable():
        raise _unavailable(name, "model", ConnectionError("the hub cannot be reached"), key)


def resolve_model_path(cfg: ModelConfig, log=print) -> str:
    """`builtin:tiny` -> the cached tiny model directory (built if needed); anything else unchanged."""
    if cfg.name_or_path == BUILTIN_TINY:
        from leaklab.models.tiny import build_tiny_model

        return str(build_tiny_model(cfg.tiny, log=log))
    return cfg.name_or_path


def torch_dtype(name: str) -> torch.dtype | str:
    if name == "auto":
        # bf16 where the hardware has it, fp32 elsewhere (CPU bf16 matmuls are slow and lossy).
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return _DTYPES[name]


def load_tokenizer(path: str, trust_remote_code: bool = False, key: str = "model.name_or_path"):
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:
        raise _unavailable(path, "tokenizer", err, key) from err
    if tokenizer.pad_token is None:
        # Causal LMs often ship without a pad token; padding is always masked, so EOS is a safe stand-in.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(
    path: str,
    dtype: str = "auto",
    trust_remote_code: bool = False,
    attn_implementation=None,
    key: str = "model.name_or_path",
):
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(
            path,
            dtype=torch_dtype(dtype),
            trust_remote_code=trust_remote_code,
            attn_implementation=attn_implementation,
        )
    except (OSError, ValueError) as err:
        raise _unavailable(path, "model", err, key) from err
    # The tied weights (e.g. lm_head.weight, saved once as the input embedding) listed as not saved, so
    # a Trainer resuming from a checkpoint re-ties them instead of warning that they are missing.
    tied = getattr(model, "all_tied_weights_keys", None) or {}
    if tied:
        model._keys_to_ignore_on_save = set(model._keys_to_ignore_on_save or ()) | set(tied)
    return model


def load_model_and_tokenizer(cfg: ModelConfig, log=print):
    path = resolve_model_path(cfg, log=log)
    tokenizer = load_tokenizer(path, cfg.trust_remote_code)
    model = load_model(path, cfg.dtype, cfg.trust_remote_code, cfg.attn_implementation)
    return model, tokenizer, path


def load_checkpoint(checkpoint: str | Path, base_path: str, cfg: ModelConfig):
    """A saved checkpoint as a model: base + adapter for LoRA checkpoints, the weights themselves otherwise."""
    checkpoint = Path(checkpoint)
    if not checkpoint.is_dir():
        raise ModelUnavailableError(
            f"checkpoint {checkpoint} is gone (deleted while the run was being evaluated?); results "
            f"written so far are kept: run `leaklab evaluate {checkpoint.parent.parent}` for what remains"
        )
    if (checkpoint / "adapter_config.json").exists():
        from peft import PeftModel

        base = load_model(base_path, cfg.dtype, cfg.trust_remote_code, cfg.attn_implementation)
        return PeftModel.from_pretrained(base, checkpoint)
    return load_model(
        str(checkpoint), cfg.dtype, cfg.trust_remote_code, cfg.attn_implementation, key="checkpoint"
    )
