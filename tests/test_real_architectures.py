"""Real model families without weights: tiny randomly initialised Qwen2 (chat template, pad token of its
own) and GPT-2 (no pad token, fused attention projection in Conv1D layers), each with a byte-level BPE
tokenizer trained here in a second, saved as ordinary HF directories and run through the `cpt` and `rl`
stages with LoRA, so a user's real model meets no path only the builtin Llama has walked."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from leaklab.models.lora import target_modules
from leaklab.rundir import RunDir
from leaklab.train import main

# Qwen's conversation markup, written for these tests.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _tokenizer(specials: list[str], **named: str):
    """A byte-level BPE tokenizer trained on some of Python's own source."""
    import json as json_module
    import textwrap

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [inspect.getsource(json_module), inspect.getsource(textwrap)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, **named)


def build_qwen2(path: Path) -> Path:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = _tokenizer(
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tok.chat_template = CHAT_TEMPLATE
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    Qwen2ForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def build_gpt2(path: Path) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = _tokenizer(["<|endoftext|>"], bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    assert tok.pad_token is None and tok.chat_template is None  # GPT-2's conventions
    config = GPT2Config(
        vocab_size=len(tok),
        n_embd=32,
        n_layer=1,
        n_head=2,
        n_positions=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    GPT2LMHeadModel(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


BUILDERS = {"qwen2": build_qwen2, "gpt2": build_gpt2}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("real-archs")
    return {name: build(root / name) for name, build in BUILDERS.items()}


def test_lora_targets_are_found_per_architecture(models):
    from transformers import AutoModelForCausalLM

    qwen = AutoModelForCausalLM.from_pretrained(models["qwen2"])
    gpt2 = AutoModelForCausalLM.from_pretrained(models["gpt2"])
    default = ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert target_modules(qwen, default) == default
    assert target_modules(qwen, ["q_proj", "gate_proj", "nonexistent"]) == ["q_proj", "gate_proj"]
    assert target_modules(gpt2, default) == ["c_attn"]  # GPT-2 fuses q, k, v into one Conv1D
    assert target_modules(gpt2, ["auto"]) == ["c_attn"]
    assert target_modules(qwen, ["all-linear"]) == "all-linear"


COMMON = [
    "data.benchmark=synthetic",
    "data.max_samples=8",
    "train.lora.enabled=true",
    "train.max_steps=2",
    "train.save_every=2",
    "train.logging_steps=1",
    "train.learning_rate=1e-3",
    "evaluate.detectors=[ppl]",
    "evaluate.n_bootstrap=0",
    "evaluate.dtype=float32",
    "model.dtype=float32",
    "tracking.wandb.enabled=false",
]
STAGES = {
    "cpt": [
        "train.stage=cpt",
        "mix.ratio=1:1",
        "mix.max_seq_len=128",
        "train.batch_size=4",
        "train.micro_batch_size=4",
    ],
    "rl": [
        "train.stage=rl",
        "train.batch_size=4",
        "train.micro_batch_size=4",
        "train.rl.num_generations=2",
        "train.rl.max_completion_length=16",
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("stage", list(STAGES))
@pytest.mark.parametrize("arch", list(BUILDERS))
def test_stage_trains_a_lora_on_the_architecture(arch, stage, models, tmp_path, leaklab_cache):
    code = main(
        [
            "recipe=tiny_cpt",
            f"model.name_or_path={models[arch]}",
            *COMMON,
            *STAGES[stage],
            f"output_dir={tmp_path}",
        ]
    )
    assert code == 0
    (root,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    run = RunDir(root)
    ((step, checkpoint),) = run.checkpoint_dirs()
    assert step == 2
    adapter = json.loads((checkpoint / "adapter_config.json").read_text())
    wanted = {"qwen2": {"q_proj", "k_proj", "v_proj", "o_proj"}, "gpt2": {"c_attn"}}[arch]
    assert set(adapter["target_modules"]) == wanted
    evaluated = {
        r["step"] for r in run.results_rows() if r["evaluation"] == "detection" and r["metric"] == "done"
    }
    assert evaluated == {0, 2}
    if stage == "rl":
        mixture = json.loads(run.mixture.read_text())
        assert mixture["prompt_format"] == ("chat" if arch == "qwen2" else "completion")
        rewards = [r for r in run.results_rows() if r["evaluation"] == "training" and r["metric"] == "reward"]
        assert len(rewards) == 2


@pytest.mark.slow
def test_rl_starts_from_an_earlier_lora_run_merged_once(models, tmp_path, leaklab_cache):
    """cpt with LoRA, then rl with train.rl.init_from = that run: the adapter is merged into its base once,
    the merged model is the rl run's step 0 and the base its evaluation and checkpoints are read against."""
    from leaklab.training import rl

    first = ["recipe=tiny_cpt", f"model.name_or_path={models['qwen2']}", *COMMON, *STAGES["cpt"]]
    assert main([*first, f"output_dir={tmp_path / 'cpt'}"]) == 0
    (cpt_run,) = (tmp_path / "cpt").iterdir()
    second = ["recipe=tiny_cpt", f"model.name_or_path={models['gpt2']}", *COMMON, *STAGES["rl"]]  # not used
    assert main([*second, f"train.rl.init_from={cpt_run}", f"output_dir={tmp_path / 'rl'}"]) == 0
    (rl_root,) = (tmp_path / "rl").iterdir()
    merged = rl_root / "init_model"
    record = json.loads((merged / "leaklab_init.json").read_text())
    assert record["checkpoint"] == str((cpt_run / "checkpoints" / "checkpoint-2").resolve())
    assert not (merged / "adapter_config.json").exists() and (merged / "config.json").exists()
    run = RunDir(rl_root)
    assert {r["step"] for r in run.results_rows() if r["metric"] == "done"} == {0, 2}
    adapter = json.loads((run.checkpoints / "checkpoint-2" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(merged)
    from leaklab.recipe import load_recipe

    recipe = load_recipe(str(run.recipe))
    assert rl.resolve_base(recipe, run, print) == str(merged)  # what `leaklab evaluate` starts from
