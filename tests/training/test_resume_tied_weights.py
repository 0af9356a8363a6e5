"""Resuming a model with tied input and output embeddings (the builtin tiny model's) from a checkpoint.

transformers writes a tied weight once (lm_head.weight is the embedding matrix), and the Trainer, when it
resumes, used to warn that the checkpoint lacks lm_head.weight. `models.load.load_model` declares the
tied keys as not saved, so the Trainer re-ties them instead (a few seconds, a 4k-parameter Llama)."""

from __future__ import annotations

import json

import pytest
import torch


def _tiny_tied_llama(path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)


def _trainer(model, out, max_steps):
    from transformers import Trainer, TrainingArguments

    ids = torch.arange(32).reshape(4, 8) % 64
    data = [{"input_ids": row, "labels": row} for row in ids]
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=max_steps,
        save_steps=1,
        per_device_train_batch_size=2,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        save_only_model=False,
    )
    return Trainer(model=model, args=args, train_dataset=data)


@pytest.mark.slow  # trains three steps (of a 4k-parameter model)
def test_resuming_a_tied_model_reties_it_without_a_missing_key_warning(tmp_path, monkeypatch):
    import transformers.trainer
    from safetensors import safe_open

    from leaklab.models.load import load_model

    _tiny_tied_llama(tmp_path / "base")
    _trainer(load_model(str(tmp_path / "base"), "float32"), tmp_path / "run", 2).train()
    checkpoint = tmp_path / "run" / "checkpoint-1"
    with safe_open(checkpoint / "model.safetensors", "pt") as f:
        saved = set(f.keys())
        embedding = f.get_tensor("model.embed_tokens.weight")
    assert "lm_head.weight" not in saved  # written once, as the embedding

    warnings = []
    monkeypatch.setattr(
        transformers.trainer.logger, "warning", lambda msg, *a, **k: warnings.append(str(msg))
    )
    model = load_model(str(tmp_path / "base"), "float32")
    trainer = _trainer(model, tmp_path / "run", 2)
    trainer._load_from_checkpoint(str(checkpoint))  # what train(resume_from_checkpoint=...) calls first
    assert not [w for w in warnings if "missing keys" in w], warnings
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert torch.equal(model.lm_head.weight.detach(), embedding)  # the checkpoint's, not the base's
    # And a whole resumed training runs on from step 1 to 2 with the weights still tied.
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    trainer.train(resume_from_checkpoint=str(checkpoint))
    assert trainer.state.global_step == 2 and model.lm_head.weight is model.model.embed_tokens.weight
    assert not [w for w in warnings if "missing keys" in w], warnings
