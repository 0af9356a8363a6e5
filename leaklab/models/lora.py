"""LoRA adapters (peft) on a loaded model, as the recipe's `train.lora` asks; shared by every stage."""

from __future__ import annotations

from leaklab.recipe import Recipe


def apply_lora(model, recipe: Recipe):
    """The model wrapped with fresh LoRA adapters, or the model itself when LoRA is off (full weights)."""
    if not recipe.train.lora.enabled:
        return model
    from peft import LoraConfig, get_peft_model

    lora = recipe.train.lora
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=target_modules(model, list(lora.target_modules)),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def target_modules(model, requested: list[str]) -> list[str] | str:
    """The modules to adapt in this architecture: the requested names it has (Llama and Qwen2 name their
    attention projections q_proj ... o_proj); when it has none of them (GPT-2 fuses them into c_attn) or
    the recipe says `auto`, peft's default for the model type; without one, every linear layer
    ("all-linear", which leaves the output head alone). `all-linear` may also be asked for directly."""
    if requested == ["all-linear"]:
        return "all-linear"
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    present = [m for m in requested if m in names]
    if present and "auto" not in requested:
        return present
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as DEFAULTS

    default = DEFAULTS.get(getattr(model.config, "model_type", ""))
    return list(default) if default else "all-linear"
