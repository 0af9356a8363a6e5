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
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)
