"""The rl stage: recipe checks, the prompt dataset, where training starts, the refusals (weaker sandbox,
ppo without veRL), and GRPO / RLOO end to end on the small tiny model."""

from __future__ import annotations

import json

import pytest

from conftest import SMALL_TINY
from leaklab.data.prompting import CHAT_INSTRUCTION
from leaklab.data.tasks import Task
from leaklab.errors import InputError
from leaklab.execution.rewards import task_from_json
from leaklab.recipe import RecipeError, load_recipe
from leaklab.rundir import RunDir
from leaklab.train import main
from leaklab.training import rl
from leaklab.training.stages import get_stage

RL = ["train.stage=rl", "train.batch_size=8", "train.micro_batch_size=8", "train.rl.num_generations=4"]

TASKS = [
    Task(f"t/{i}", "toy", f'def f{i}(x):\n    """Return x + {i}."""\n', f"    return x + {i}\n", f"f{i}")
    for i in range(4)
]
MANIFEST = {"member_ids": ["t/2", "t/0"], "non_member_ids": ["t/1", "t/3"]}


class _Tok:
    chat_template = None


class _ChatTok:
    chat_template = "(a template)"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        return "<user>" + messages[0]["content"] + "<assistant>"


def test_recipe_checks_the_rl_section():
    with pytest.raises(RecipeError, match="multiple of train.rl.num_generations"):
        load_recipe("tiny_cpt", [*RL, "train.batch_size=6", "train.micro_batch_size=6"])
    with pytest.raises(RecipeError, match="train.rl.max_prompts"):
        load_recipe("tiny_cpt", [*RL, "train.rl.max_prompts=0"])
    with pytest.raises(RecipeError, match="did you mean 'grpo'"):
        load_recipe("tiny_cpt", [*RL, "train.rl.algorithm=grp"])
    with pytest.raises(RecipeError, match="execution.allow_weaker_sandbo"):
        load_recipe("tiny_cpt", [*RL, "execution.allow_weaker=true"])
    assert load_recipe(
        "tiny_cpt", [*RL, "execution.allow_weaker_sandbox=true"]
    ).execution.allow_weaker_sandbox


def test_the_dataset_holds_the_members_prompts_and_tasks():
    recipe = load_recipe("tiny_cpt", RL)
    data = rl.build_dataset(recipe, _Tok(), TASKS, MANIFEST, None, lambda *a: None)
    assert data.dataset["task_id"] == ["t/2", "t/0"]
    assert data.dataset["prompt"] == [TASKS[2].prompt, TASKS[0].prompt]
    assert [task_from_json(t) for t in data.dataset["task"]] == [TASKS[2], TASKS[0]]
    assert data.info["prompt_format"] == "completion"
    # max_prompts keeps the first members in the manifest order, the order the accuracy evaluation uses
    first = rl.build_dataset(
        load_recipe("tiny_cpt", [*RL, "train.rl.max_prompts=1"]), _Tok(), TASKS, MANIFEST, None
    )
    assert first.dataset["task_id"] == ["t/2"] and first.info["prompts"] == 1
    # chat models get the sft stage's user turn through their template, as the accuracy evaluation asks
    chat = rl.build_dataset(recipe, _ChatTok(), TASKS, MANIFEST, None, lambda *a: None)
    expected = "<user>" + CHAT_INSTRUCTION.format(prompt=TASKS[2].prompt) + "<assistant>"
    assert chat.dataset["prompt"][0] == expected and chat.info["prompt_format"] == "chat"


def test_with_doses_the_schedule_repeats_each_member_prompt_and_counts_it():
    manifest = {
        "member_ids": ["t/2", "t/0", "t/3"],
        "non_member_ids": ["t/1"],
        "doses": {"t/2": 2, "t/0": 1, "t/3": 1},
        "inject": {"doses": [1, 2], "window": [0.0, 1.0]},
    }
    recipe = load_recipe("tiny_cpt", [*RL, "inject.doses=[1,2]", "train.rl.max_prompts=2"])
    data = rl.build_dataset(recipe, _Tok(), TASKS, manifest, None, lambda *a: None)
    schedule = data.dataset["task_id"]
    assert sorted(schedule) == ["t/0", "t/2", "t/2"] and schedule[0] != schedule[1] != schedule[2]
    assert data.info["exposures"] == {"t/2": 2, "t/0": 1, "t/3": 0}  # t/3 is past max_prompts
    assert data.info["exposure_rows"]["t/2"] == [i for i, t in enumerate(schedule) if t == "t/2"]


def test_chat_format_without_a_chat_template_is_a_clear_error():
    recipe = load_recipe("tiny_cpt", [*RL, "train.rl.prompt_format=chat"])
    with pytest.raises(InputError, match="no chat template"):
        rl.build_dataset(recipe, _Tok(), TASKS, MANIFEST, None)


def test_a_weaker_sandbox_stops_the_stage_before_training(monkeypatch):
    from leaklab.execution import rewards

    real = rewards.Sandbox

    def weak(**kwargs):
        return real(**kwargs, disable=["seccomp"])

    monkeypatch.setattr(rewards, "Sandbox", weak)
    with pytest.raises(RecipeError, match="allow_weaker_sandbox"):
        rl.make_reward(load_recipe("tiny_cpt", RL))
    reward = rl.make_reward(load_recipe("tiny_cpt", [*RL, "execution.allow_weaker_sandbox=true"]))
    try:
        assert any("seccomp" in m for m in reward.missing_layers)
    finally:
        reward.close()


def test_ppo_without_verl_exits_2_naming_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(rl, "verl_available", lambda: False)
    code = main(["recipe=tiny_cpt", *RL, *SMALL_TINY, "train.rl.algorithm=ppo", f"output_dir={tmp_path}"])
    assert code == 2
    assert "leaklab[verl]" in capsys.readouterr().err


def test_init_from_finds_a_model_a_run_or_a_recipe_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an empty ./runs, even in a checkout where `make demo` has run
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert rl.find_init_checkpoint(str(model)) == model
    run = RunDir(tmp_path / "run")
    for step in (5, 10):
        (run.checkpoints / f"checkpoint-{step}").mkdir(parents=True)
        (run.checkpoints / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    (run.checkpoints / "checkpoint-15").mkdir()  # unfinished: no trainer_state.json
    assert rl.find_init_checkpoint(str(run.root)) == run.checkpoints / "checkpoint-10"
    with pytest.raises(Exception, match="leaklab train recipe=tiny_cpt"):
        rl.find_init_checkpoint("recipe:tiny_cpt")  # no such run under ./runs
    with pytest.raises(Exception, match="not a directory"):
        rl.find_init_checkpoint(str(tmp_path / "nowhere"))


def _training_rows(run: RunDir) -> list[dict]:
    return [r for r in run.results_rows() if r["evaluation"] == "training"]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["grpo", "rloo"])
def test_rl_trains_logs_rewards_and_evaluates_each_checkpoint(algorithm, leaklab_cache, tmp_path):
    code = main(
        [
            "recipe=tiny_cpt",
            *RL,
            *SMALL_TINY,
            f"train.rl.algorithm={algorithm}",
            "train.rl.max_completion_length=24",
            "train.max_steps=2",
            "train.save_every=2",
            "train.logging_steps=1",
            "data.benchmark=synthetic",
            "data.max_samples=16",
            "evaluate.detectors=[ppl]",
            "evaluate.n_bootstrap=0",
            "tracking.wandb.enabled=false",
            f"output_dir={tmp_path}",
        ]
    )
    assert code == 0
    (root,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    run = RunDir(root)
    assert [s for s, _ in run.checkpoint_dirs()] == [2]
    rows = _training_rows(run)
    rewards = [r for r in rows if r["metric"] == "reward"]
    assert [r["step"] for r in rewards] == [1, 2] and all(0 <= r["value"] <= 1 for r in rewards)
    reasons = [r for r in rows if r["metric"].startswith("reward_reasons/")]
    # every completion of both steps is counted under one reason (4 prompts x ... = 8 per step)
    assert sum(r["value"] for r in reasons) == 2 * 8
    detection_steps = {r["step"] for r in run.results_rows() if r["evaluation"] == "detection"}
    assert detection_steps == {0, 2}
    assert json.loads(run.mixture.read_text())["algorithm"] == algorithm


def test_the_stage_is_registered():
    assert get_stage("rl").builders() is rl
