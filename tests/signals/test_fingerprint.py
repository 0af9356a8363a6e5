"""The one model fingerprint (`signals.logprobs.model_fingerprint`) that keys the signal, generation,
accuracy and MRI caches: a reloaded checkpoint shares it with the model in training, anything that can
change an output (a weight, an adapter switched off, a config field such as the rope base) changes it."""

from __future__ import annotations

import torch
from test_signals import tiny_model, tiny_tokenizer
from transformers import AutoModelForCausalLM

from leaklab.signals.logprobs import model_fingerprint


def test_the_model_in_training_and_its_reloaded_checkpoint_share_a_fingerprint(tmp_path):
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)  # config gains _name_or_path, a version, ...
    model.config.use_cache = False  # what a trainer flips while training
    model.train()
    assert model_fingerprint(model) == model_fingerprint(reloaded)


def test_one_weight_or_an_output_changing_config_field_changes_the_fingerprint():
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    before = model_fingerprint(model)
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight[0, 0] += 1e-3
    assert model_fingerprint(model) != before
    other = tiny_model(tok)
    other.config.rope_theta = 500.0  # same weights, other outputs
    if hasattr(other.config, "rope_parameters"):  # newer transformers keep rope settings here
        other.config.rope_parameters = {**other.config.rope_parameters, "rope_theta": 500.0}
    assert model_fingerprint(other) != model_fingerprint(tiny_model(tok))


def test_switching_a_lora_adapter_off_changes_the_fingerprint():
    from peft import LoraConfig, get_peft_model

    tok = tiny_tokenizer()
    model = get_peft_model(tiny_model(tok), LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    active = model_fingerprint(model)
    with model.disable_adapter():
        assert model_fingerprint(model) != active
    assert model_fingerprint(model) == active
