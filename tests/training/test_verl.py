"""The veRL path (algorithm: ppo) on CPU: the exported dataset, the reward module called the way veRL calls
it, the config checked against veRL's own keys, and veRL's checkpoints brought back into the run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from leaklab.data.benchmarks import load_humaneval
from leaklab.data.prompting import CHAT_INSTRUCTION
from leaklab.execution.rewards import task_from_json, task_to_json
from leaklab.recipe import load_recipe
from leaklab.rundir import RunDir
from leaklab.training import verl

KEYS_FIXTURE = Path(__file__).parent.parent / "fixtures" / "verl_ppo_trainer_keys.txt"


def ppo_recipe(*overrides: str):
    return load_recipe(
        "tiny_cpt",
        [
            "train.stage=rl",
            "train.rl.algorithm=ppo",
            "train.batch_size=8",
            "train.micro_batch_size=8",
            *overrides,
        ],
    )


@pytest.fixture(scope="module")
def tasks():
    return load_humaneval()[:3]


def verl_keys() -> set[str]:
    """veRL's config keys: from the installed veRL when there is one, else the fixture read from its source."""
    spec = importlib.util.find_spec("verl")
    if spec is not None and spec.origin:
        import yaml

        generated = Path(spec.origin).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml"
        if generated.exists():
            keys: set[str] = set()

            def walk(node, prefix):
                if isinstance(node, dict) and node:
                    for k, v in node.items():
                        walk(v, f"{prefix}{k}.")
                else:
                    keys.add(prefix[:-1])

            walk(yaml.safe_load(generated.read_text()), "")
            return keys
    return {line for line in KEYS_FIXTURE.read_text().splitlines() if line and not line.startswith("#")}


def test_dataset_rows_have_verls_fields_and_survive_parquet(tasks, tmp_path):
    import pyarrow.parquet as pq

    recipe = ppo_recipe("train.rl.reward=fraction")
    rows = verl.verl_rows(tasks, recipe)
    path = verl.write_parquet(rows, tmp_path / "train.parquet")
    back = pq.read_table(path).to_pylist()
    assert len(back) == 3
    row = back[1]
    assert set(row) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert row["data_source"] == "leaklab/humaneval"
    assert row["prompt"] == [{"role": "user", "content": CHAT_INSTRUCTION.format(prompt=tasks[1].prompt)}]
    assert row["reward_model"]["style"] == "rule"
    assert task_from_json(row["reward_model"]["ground_truth"]) == tasks[1]
    assert row["extra_info"]["task_id"] == tasks[1].task_id and row["extra_info"]["index"] == 1
    assert (
        row["extra_info"]["reward_mode"] == "fraction" and row["extra_info"]["allow_weaker_sandbox"] is False
    )


def _load_like_verl(path: str, name: str):
    """veRL's loader: the module from its file path, the function by name."""
    spec = importlib.util.spec_from_file_location("custom_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def test_the_reward_module_scores_like_the_sandbox_when_called_as_verl_calls_it(tasks):
    recipe = ppo_recipe()
    rows = verl.verl_rows(tasks, recipe)
    overrides = dict(
        o.split("=", 1)
        for o in verl.verl_overrides(recipe, "/m", {"train": "t", "val": "v"}, Path("/r/verl"), 3)
    )
    batch = _load_like_verl(
        overrides["custom_reward_function.path"], overrides["custom_reward_function.name"]
    )
    single = _load_like_verl(overrides["custom_reward_function.path"], "compute_score")
    t = tasks[0]
    reply = f"Sure.\n```python\n{t.prompt}{t.solution}```"
    gt, info = rows[0]["reward_model"]["ground_truth"], rows[0]["extra_info"]
    assert (
        single(data_source="leaklab/humaneval", solution_str=reply, ground_truth=gt, extra_info=info) == 1.0
    )
    assert (
        single(data_source="leaklab/humaneval", solution_str="no code here", ground_truth=gt, extra_info=info)
        == 0
    )
    scores = batch(
        data_sources=["leaklab/humaneval"] * 3,
        solution_strs=[reply, "```python\ndef broken(:\n```", t.solution],
        ground_truths=[gt, gt, rows[1]["reward_model"]["ground_truth"]],  # task 0's body is wrong for task 1
        extra_infos=[info, info, rows[1]["extra_info"]],
    )
    assert scores == [1.0, 0.0, 0.0]


def test_every_config_key_leaklab_sets_is_a_verl_key():
    recipe = ppo_recipe("train.max_steps=20", "train.save_every=5")
    lines = verl.verl_overrides(recipe, "/models/m", {"train": "a", "val": "b"}, Path("/runs/x/verl"), 40)
    keys = [line.split("=", 1)[0] for line in lines]
    unknown = sorted(set(keys) - verl_keys())
    assert not unknown, unknown
    values = dict(line.split("=", 1) for line in lines)
    assert values["algorithm.adv_estimator"] == "gae"
    assert values["trainer.save_freq"] == "5" and values["trainer.total_training_steps"] == "20"
    assert "hf_model" in values["actor_rollout_ref.actor.checkpoint.save_contents"]
    assert values["reward_model.reward_manager"] == "batch"
    assert Path(values["custom_reward_function.path"]).is_file()
    # an epoch of prompt batches when saving by epoch
    by_epoch = verl.verl_overrides(ppo_recipe(), "/m", {"train": "a", "val": "b"}, Path("/r/verl"), 40)
    assert "trainer.save_freq=5" in by_epoch


def test_verls_hf_checkpoints_become_run_checkpoints(tmp_path):
    run = RunDir(tmp_path / "run")
    ckpts = tmp_path / "run" / "verl" / "checkpoints"
    for step, weights in ((10, True), (20, False), (30, True)):
        hf = ckpts / f"global_step_{step}" / "actor" / "huggingface"
        hf.mkdir(parents=True)
        (hf / "config.json").write_text("{}")
        if weights:
            (hf / "model.safetensors").write_bytes(b"x")
    lines: list[str] = []
    assert verl.collect_checkpoints(ckpts, run, lines.append) == [10, 30]
    assert [s for s, _ in run.checkpoint_dirs()] == [10, 30]  # step 20 has no weights yet
    linked = run.checkpoints / "checkpoint-30" / "model.safetensors"
    assert linked.is_symlink() and linked.read_bytes() == b"x"
    assert (
        json.loads((run.checkpoints / "checkpoint-30" / "trainer_state.json").read_text())["global_step"]
        == 30
    )
    assert verl.collect_checkpoints(ckpts, run, lines.append) == [10, 30] and len(lines) == 2  # idempotent


def test_print_mode_writes_the_files_and_the_command(tasks, tmp_path):
    from datasets import Dataset

    recipe = ppo_recipe("train.rl.verl.launch=print")
    dataset = Dataset.from_dict({"task": [task_to_json(t) for t in tasks]})
    lines: list[str] = []
    run = verl.VerlRun(recipe, dataset, tmp_path / "run" / "checkpoints", "/models/m", log=lines.append)
    run.train()
    files = {p.name for p in (tmp_path / "run" / "verl").iterdir()}
    assert {"train.parquet", "val.parquet", "overrides.txt", "command.sh"} <= files
    command = (tmp_path / "run" / "verl" / "command.sh").read_text()
    assert "verl.trainer.main_ppo" in command and "actor_rollout_ref.model.path=/models/m" in command
    assert any("command.sh" in line for line in lines)


def test_a_planned_prompt_schedule_is_not_shuffled_by_verl():
    def shuffle(recipe):
        lines = verl.verl_overrides(recipe, "/m", {"train": "a", "val": "b"}, Path("/r/verl"), 40)
        return dict(line.split("=", 1) for line in lines).get("data.shuffle")

    assert shuffle(ppo_recipe()) is None  # veRL's default (shuffled), as before
    assert shuffle(ppo_recipe("inject.doses=[1,2]")) == "false"
    assert "data.shuffle" in verl_keys()
