import pytest

from leaklab.recipe import (
    RecipeError,
    available_recipes,
    config_hash,
    identity_changes,
    load_recipe,
    parse_ratio,
    run_dir_of,
    run_hash,
    to_yaml,
    yaml_load,
)


@pytest.mark.parametrize("name", sorted(available_recipes()))
def test_every_shipped_recipe_loads(name):
    recipe = load_recipe(name)
    assert recipe.name == name
    assert recipe.description, "every recipe needs a one-line description for `leaklab recipes`"


def test_the_three_required_recipes_exist():
    assert {"tiny_cpt", "humaneval_cpt", "apps_cpt"} <= set(available_recipes())


def test_apps_cpt_is_the_srdetection_testbed():
    r = load_recipe("apps_cpt")
    assert (r.data.benchmark, r.mix.ratio, r.train.learning_rate, r.train.batch_size) == (
        "apps",
        "1:5",
        1e-4,
        32,
    )
    assert r.train.lora.enabled and "Qwen2.5-7B" in r.model.name_or_path
    assert r.mix.corpus == "HuggingFaceFW/fineweb-edu"  # stands in for the paper's RefinedWeb (README)


@pytest.mark.parametrize("name", ["apps_cpt", "humaneval_cpt"])
def test_testbed_recipes_pre_filter_on_the_base_model(name):
    """SrDetection always pre-filters (§3.2, App. A.2): the testbed recipes do too, so their split (and
    run hash) depends on the variant and scoring settings that pick the dropped tasks."""
    r = load_recipe(name)
    assert r.data.prefilter
    other_variants = load_recipe(name, ["evaluate.srdetection.seed=1"])
    assert run_hash(other_variants) != run_hash(r)


def test_overrides_are_typed():
    r = load_recipe(
        "tiny_cpt", ["train.epochs=3", "train.learning_rate=1e-4", "mix.ratio=1:10", "evaluate.detectors=ppl"]
    )
    assert r.train.epochs == 3 and r.train.learning_rate == 1e-4
    assert r.mix.ratio == "1:10"  # YAML 1.1 would have read sexagesimal 70
    assert r.evaluate.detectors == ["ppl"]


def test_unknown_key_names_the_closest_valid_one():
    with pytest.raises(RecipeError) as err:
        load_recipe("tiny_cpt", ["train.epoch=3"])
    assert err.value.problems == ["train.epoch: unknown key; did you mean 'train.epochs'?"]


def test_all_problems_are_reported_at_once():
    with pytest.raises(RecipeError) as err:
        load_recipe(
            "tiny_cpt", ["train.epochs=many", "mix.ratio=oops", "data.benchmark=humaneva", "modle.dtype=x"]
        )
    text = "\n".join(err.value.problems)
    assert "train.epochs: expected an integer" in text
    assert "modle: unknown key; did you mean 'model'?" in text
    # value checks run once the types are right; here the type errors come first
    with pytest.raises(RecipeError) as err:
        load_recipe("tiny_cpt", ["mix.ratio=oops", "data.benchmark=humaneva"])
    text = "\n".join(err.value.problems)
    assert "did you mean 'humaneval'" in text and "mix.ratio" in text


def test_unknown_recipe_suggests_a_name():
    with pytest.raises(RecipeError, match="did you mean 'tiny_cpt'"):
        load_recipe("tiny_cp")


def test_base_recipe_is_merged(tmp_path):
    (tmp_path / "child.yaml").write_text("base: tiny_cpt\ndescription: child\ntrain:\n  epochs: 2\n")
    r = load_recipe(str(tmp_path / "child.yaml"))
    parent = load_recipe("tiny_cpt")
    assert r.train.epochs == 2 and r.train.learning_rate == parent.train.learning_rate
    assert r.model.name_or_path == parent.model.name_or_path


def test_run_dir_is_stable_and_ignores_tracking():
    a = load_recipe("tiny_cpt")
    b = load_recipe("tiny_cpt", ["tracking.wandb.mode=disabled"])
    c = load_recipe("tiny_cpt", ["train.epochs=2"])
    assert run_dir_of(a) == run_dir_of(b)
    assert config_hash(a) != config_hash(c)


def test_a_runs_identity_is_its_training_not_its_evaluation():
    """Adding a detector or changing any evaluate.* key finds the same run (no retraining);
    what changes the weights makes a new one."""
    a = load_recipe("tiny_cpt")
    same = [
        "evaluate.detectors=[ppl,zlib,'mink:k=0.2']",
        "evaluate.evaluations=[detection,accuracy]",
        "evaluate.batch_tokens=1024",
        "evaluate.cv_folds=3",
        "evaluate.n_bootstrap=0",
        "evaluate.srdetection.seed=1",
        "tracking.wandb.enabled=false",
    ]
    for override in same:
        assert run_dir_of(load_recipe("tiny_cpt", [override])) == run_dir_of(a), override
    for override in ["train.epochs=2", "mix.ratio=1:3", "data.seed=1", "model.tiny.num_layers=1", "seed=3"]:
        other = load_recipe("tiny_cpt", [override])
        assert run_dir_of(other) != run_dir_of(a), override
        assert identity_changes(a, other) and override.split("=")[0] in identity_changes(a, other)[0]
    # The audit, which trains nothing, is still named by every setting.
    assert config_hash(load_recipe("tiny_cpt", ["evaluate.cv_folds=3"])) != config_hash(a)
    # SrDetection's pre-filter picks the split with the srdetection variants: then they are identity.
    pre = load_recipe("tiny_cpt", ["data.prefilter=true"])
    pre3 = load_recipe("tiny_cpt", ["data.prefilter=true", "evaluate.srdetection.seed=1"])
    assert run_hash(pre) != run_hash(pre3)
    assert run_hash(pre) == run_hash(load_recipe("tiny_cpt", ["data.prefilter=true", "evaluate.cv_folds=3"]))


def test_parse_ratio():
    assert parse_ratio("1:5") == (1.0, 5.0)
    for bad in ("5", "a:b", "0:5", "1:-1"):
        with pytest.raises(ValueError):
            parse_ratio(bad)


def test_yaml_numbers():
    assert yaml_load("1e-4") == 1e-4 and yaml_load("1:5") == "1:5" and yaml_load("3") == 3


def test_yaml_booleans_are_true_and_false_only():
    # YAML 1.1 reads off / on / yes / no as booleans: `llm_judge: off` (its default) could not be written.
    assert yaml_load("[true, False, off, on, yes, no]") == [True, False, "off", "on", "yes", "no"]
    assert load_recipe("tiny_sft", ["evaluate.mri.llm_judge=off"]).evaluate.mri.llm_judge == "off"


def test_detector_specs_keep_their_comma_separated_values():
    """The command line's `detectors=[ppl,srdetection_gray:n=1,3,5,10]` (YAML splits it into ppl,
    srdetection_gray:n=1, 3, 5, 10) is two specs, as is the quoted form; in a recipe file too."""
    unquoted = load_recipe("tiny_cpt", ["evaluate.detectors=[ppl,srdetection_gray:n=1,3,5,10]"])
    quoted = load_recipe("tiny_cpt", ["evaluate.detectors=[ppl, 'srdetection_gray:n=1,3,5,10']"])
    assert unquoted.evaluate.detectors == quoted.evaluate.detectors == ["ppl", "srdetection_gray:n=1,3,5,10"]
    many = load_recipe("tiny_cpt", ["evaluate.detectors=[mink:k=0.1,0.2,zlib,ref:forms=ratio,diff,ppl]"])
    assert many.evaluate.detectors == ["mink:k=0.1,0.2", "zlib", "ref:forms=ratio,diff", "ppl"]


def test_an_unknown_detector_is_still_rejected_with_the_closest_name():
    for detectors in ("[pll,srdetection_gray:n=1,3]", "[srdetection_gray:n=1,3,zlibb]", "[ppl,3]"):
        with pytest.raises(RecipeError) as err:
            load_recipe("tiny_cpt", [f"evaluate.detectors={detectors}"])
        text = str(err.value)
        assert "unknown detector" in text, text
        if "pll" in detectors:
            assert "did you mean 'ppl'" in text
        if "zlibb" in detectors:
            assert "did you mean 'zlib'" in text


def _seeds(recipe) -> dict[str, int]:
    from leaklab.recipe import SPREAD_SEEDS, get_key

    return {key: get_key(recipe, key) for key in ("seed", "model.tiny.seed", *SPREAD_SEEDS)}


def test_one_seed_sets_every_section_seed_not_given(tmp_path):
    from leaklab.recipe import SPREAD_SEEDS

    # tiny_cpt gives data.seed in its file: it stays; the command line's mix.seed stays; the rest follow.
    recipe = load_recipe("tiny_cpt", ["seed=7", "mix.seed=3"])
    seeds = _seeds(recipe)
    assert seeds.pop("data.seed") == 0 and seeds.pop("mix.seed") == 3 and seeds.pop("model.tiny.seed") == 0
    assert set(seeds.values()) == {7} and set(seeds) == {"seed", *SPREAD_SEEDS} - {"data.seed", "mix.seed"}
    # A recipe file with a top-level seed and no section seeds: every one follows it.
    path = tmp_path / "mine.yaml"
    path.write_text("seed: 4\nevaluate:\n  n_bootstrap: 0\n  srdetection:\n    seed: 9\n")
    seeds = _seeds(load_recipe(str(path)))
    assert seeds.pop("evaluate.srdetection.seed") == 9 and seeds.pop("model.tiny.seed") == 0
    assert set(seeds.values()) == {4}
    # A run's own recipe.yaml (every seed written out) loads back to the same values.
    again = tmp_path / "again.yaml"
    again.write_text(to_yaml(recipe))
    assert _seeds(load_recipe(str(again))) == _seeds(recipe)


@pytest.mark.parametrize("name", sorted(available_recipes()))
def test_the_seed_changes_no_existing_recipe(name, monkeypatch):
    """No shipped recipe sets a top-level seed, and every seed defaults to 0: each resolves, and hashes,
    as it did before `seed` spread to the sections."""
    import leaklab.recipe as recipe_module

    now = load_recipe(name)
    monkeypatch.setattr(recipe_module, "_spread_seed", lambda raw: raw)
    before = load_recipe(name)
    assert to_yaml(now) == to_yaml(before) and config_hash(now) == config_hash(before)
    assert run_dir_of(now) == run_dir_of(before)


PAPER_MRI_RECIPES = ("mbpp_sft", "bigcodebench_sft", "bigcodebench_ppo")


@pytest.mark.parametrize("name", PAPER_MRI_RECIPES)
def test_the_paper_recipes_rewrite_with_the_llm_and_its_judge_as_filter(name):
    """MRI's paper writes each rewritten statement from the new code with an LLM and keeps what its judge
    passes (004, §3.1, App. B): the paper recipes do so; the offline rule-based path is three overrides."""
    mri = load_recipe(name).evaluate.mri
    assert (mri.llm_backend, mri.llm_rewrite, mri.llm_judge) == ("openai", True, "filter")
    assert mri.llm_model and mri.llm_base_url
    offline = [
        "evaluate.mri.llm_backend=none",
        "evaluate.mri.llm_rewrite=false",
        "evaluate.mri.llm_judge=off",
    ]
    assert load_recipe(name, offline).evaluate.mri.llm_backend == "none"


def test_bigcodebench_ppo_generates_the_papers_512_response_tokens():
    assert load_recipe("bigcodebench_ppo").train.rl.max_completion_length == 512  # 004, App. J.1.2


@pytest.mark.parametrize("name", PAPER_MRI_RECIPES)
def test_the_paper_recipes_fine_tune_base_models_and_ask_with_the_papers_template(name):
    """004 §4.2 fine-tunes the base Qwen-2.5-7B / Qwen-2.5-Coder-7B, and App. J asks (and trains) with an
    instruction prefix and a prefilled ```python fence (leaklab's `evalplus` format)."""
    recipe = load_recipe(name)
    assert not recipe.model.name_or_path.endswith("Instruct")
    assert recipe.evaluate.accuracy.format == recipe.evaluate.mri.format == "evalplus"
    if recipe.train.stage == "sft":
        assert recipe.train.sft.format == "evalplus"


def test_bigcodebench_ppo_saves_every_5_steps_with_1024_token_prompts():
    # Table 23: save_freq 5, max_prompt_length 1024 (Best-Reward chooses among all of those checkpoints)
    train = load_recipe("bigcodebench_ppo").train
    assert str(train.save_every) == "5" and train.rl.verl.max_prompt_length == 1024


def test_prompt_boundary_is_an_evaluation_setting_auto_by_default():
    """evaluate.prompt_boundary: auto by default (resolved per checkpoint, tests/training/test_stages.py),
    heal or none on request, anything else refused with the valid values; the rows of every evaluation
    record it (a changed value is a row-setting conflict)."""
    from leaklab.evaluate import row_settings

    assert load_recipe("tiny_cpt").evaluate.prompt_boundary == "auto"
    for value in ("heal", "none"):
        assert (
            load_recipe("tiny_cpt", [f"evaluate.prompt_boundary={value}"]).evaluate.prompt_boundary == value
        )
    with pytest.raises(RecipeError) as err:
        load_recipe("tiny_cpt", ["evaluate.prompt_boundary=cut"])
    assert "evaluate.prompt_boundary" in err.value.problems[0] and "heal" in err.value.problems[0]
    recipe = load_recipe("tiny_cpt")
    for evaluation in ("detection", "accuracy", "counterfactual", "extraction", "mri"):
        assert row_settings(recipe, evaluation)["evaluate.prompt_boundary"] == "auto"


def test_tiny_dose_is_tiny_cpt_with_doses_canaries_and_every_evaluation_that_applies():
    """The dose testbed: the same cached tiny model and split as tiny_cpt (a different
    model.tiny would rebuild it for half an hour), four dose groups, canaries, and the detection,
    extraction and canary evaluations with both generation-based black-box detectors."""
    tiny, dosed = load_recipe("tiny_cpt"), load_recipe("tiny_dose")
    assert dosed.model == tiny.model and dosed.data == tiny.data
    assert dosed.inject.doses == [1, 4, 16, 64] and dosed.inject.canaries == 8
    assert dosed.evaluate.evaluations == ["detection", "extraction", "canaries"]
    assert {"ppl", "zlib", "mink", "ngram_acc", "srdetection_black"} <= set(dosed.evaluate.detectors)
    # Discoverable extraction from each task's first 8 lines: with 4 it reached 2 of 20 top-dose members
    # (the testbed's target is 25%), with 8 6 of 20 on the same checkpoint.
    assert "discoverable" in dosed.evaluate.extraction.strategies
    assert dosed.evaluate.extraction.prefix_lines == 8
    # One checkpoint, the last: two epochs of 214 steps, each member seen twice its dose.
    assert (dosed.train.epochs, dosed.train.save_every) == (2, "428")
    # Validation says why a recipe cannot run (RecipeError); planting canaries without measuring them
    # is allowed, measuring them without planting is not.
    with pytest.raises(RecipeError, match="inject.canaries"):
        load_recipe("tiny_dose", ["inject.canaries=0"])
