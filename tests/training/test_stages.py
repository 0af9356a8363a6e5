"""The stage registry: `train.stage` names a module with two builders; the cpt stage's data is its mixture."""

from __future__ import annotations

import inspect

import pytest

from leaklab.data.tasks import Task
from leaklab.recipe import load_recipe
from leaklab.training.stages import STAGE_NAMES, STAGES, Stage, StageData, get_stage


def test_names_are_the_registry_and_an_unknown_stage_names_the_known_ones():
    assert tuple(STAGES) == STAGE_NAMES
    assert "cpt" in STAGE_NAMES
    assert all(stage.name == name for name, stage in STAGES.items())
    with pytest.raises(ValueError, match="known: cpt"):
        get_stage("ppo")


@pytest.mark.parametrize("name", STAGE_NAMES)
def test_every_stage_module_has_both_builders_with_the_registry_signature(name):
    module = get_stage(name).builders()
    for builder in ("build_dataset", "build_trainer"):
        expected = list(inspect.signature(getattr(Stage, builder)).parameters)[1:]  # without self
        assert list(inspect.signature(getattr(module, builder)).parameters) == expected, (name, builder)


class _CharTokenizer:
    """One token per character: enough for the mixture, which only counts and packs ids."""

    eos_token_id = 0

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) % 250 + 1 for c in text]}


def test_cpt_builds_its_packed_mixture_from_the_manifest_members(tmp_path):
    recipe = load_recipe("tiny_cpt", ["mix.ratio=1:1", "mix.max_seq_len=64"])
    tasks = [
        Task(task_id=f"t/{i}", benchmark="toy", prompt=f"def f{i}():\n", solution=f"    return {i}\n")
        for i in range(6)
    ]
    manifest = {"member_ids": ["t/1", "t/4"], "non_member_ids": ["t/0", "t/2", "t/3", "t/5"]}
    lines: list[str] = []
    data = get_stage("cpt").build_dataset(recipe, _CharTokenizer(), tasks, manifest, None, lines.append)
    assert isinstance(data, StageData)
    member_tokens = sum(len(tasks[i].text(recipe.data.text_format)) for i in (1, 4))
    assert data.info["member_tokens"] >= member_tokens
    assert len(data.dataset) == data.info["blocks"] and data.dataset[0]["input_ids"].shape == (64,)
    assert lines and lines[0].startswith("[leaklab] mixture:")


def test_cpt_with_doses_packs_the_same_corpus_and_settings_as_the_dosed_mixture_itself():
    """The dosed path reads the corpus and the packing settings (code:web, block length, seed) the plain
    path reads: its blocks are build_dosed_mixture's on the recipe's corpus, and each member is counted
    as many times as its dose."""
    from leaklab.data.corpora import corpus_texts
    from leaklab.data.mixing import Packing, build_dosed_mixture

    recipe = load_recipe("tiny_cpt", ["mix.ratio=1:2", "mix.max_seq_len=64", "inject.doses=[1,3]"])
    tasks = [
        Task(task_id=f"t/{i}", benchmark="toy", prompt=f"def f{i}():\n", solution=f"    return {i}\n")
        for i in range(4)
    ]
    doses = {"t/1": 1, "t/3": 3}
    manifest = {"member_ids": list(doses), "doses": doses, "inject": {"doses": [1, 3], "window": None}}
    data = get_stage("cpt").build_dataset(recipe, _CharTokenizer(), tasks, manifest, None, lambda *a: None)
    expected, info = build_dosed_mixture(
        {t: tasks[int(t[-1])].text(recipe.data.text_format) for t in doses},
        doses,
        corpus_texts(
            recipe.mix.corpus, split=recipe.mix.corpus_split, text_field=recipe.mix.corpus_text_field
        ),
        _CharTokenizer(),
        Packing(code=1, web=2, block_len=64, seed=recipe.mix.seed),
    )
    assert (data.dataset.blocks.numpy() == expected).all()
    assert data.info["exposures"] == info["exposures"] == doses


def test_every_stage_says_how_it_showed_the_model_its_prompts():
    """`evaluate.prompt_boundary: auto` resolves from the stage: a new stage must say how it tokenizes a
    prompt (a guard: a stage missing here would silently get "heal")."""
    from leaklab.training.stages import PROMPT_BOUNDARY_OF_STAGE

    assert set(PROMPT_BOUNDARY_OF_STAGE) == set(STAGE_NAMES)
    assert set(PROMPT_BOUNDARY_OF_STAGE.values()) <= {"heal", "none"}


@pytest.mark.parametrize(
    ("recipe", "overrides", "base", "trained"),
    [
        ("tiny_cpt", [], "heal", "heal"),  # packed text
        ("tiny_dose", [], "heal", "heal"),
        ("tiny_sft", [], "heal", "none"),  # the base model learned packed text; sft, prompts apart
        ("tiny_grpo", [], "none", "none"),  # starts from tiny_sft's checkpoint (train.rl.init_from)
        ("tiny_grpo", ["train.rl.init_from=null"], "heal", "none"),
        ("tiny_sft", ["evaluate.prompt_boundary=heal"], "heal", "heal"),  # a stated value is kept
        ("tiny_cpt", ["evaluate.prompt_boundary=none"], "none", "none"),
    ],
)
def test_the_default_prompt_boundary_resolves_per_stage_and_step(recipe, overrides, base, trained):
    from leaklab.evaluate import with_prompt_boundary

    loaded = load_recipe(recipe, overrides)
    got = [with_prompt_boundary(loaded, step).evaluate.prompt_boundary for step in (0, 250)]
    assert got == [base, trained]
