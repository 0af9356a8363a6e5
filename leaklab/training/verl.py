"""`train.rl.algorithm: ppo` on veRL (docs/rl.md): export the data, point veRL at leaklab's reward,
run it or print the command, and bring veRL's checkpoints back into the run to be evaluated.

Under <run>/verl/: train.parquet, val.parquet, overrides.txt (Hydra overrides of veRL's ppo_trainer
config) and command.sh. `VerlRun` stands where a Trainer stands in train.py.
"""

from __future__ import annotations

import importlib.util
import json
import math
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from leaklab.data.prompting import CHAT_INSTRUCTION
from leaklab.execution.rewards import task_from_json, task_to_json
from leaklab.recipe import Recipe
from leaklab.rundir import RunDir, write_atomic

VERL_EXTRA = "pip install 'leaklab[verl]'"
REWARD_MODULE = Path(__file__).with_name("verl_reward.py")
REWARD_FUNCTION = "compute_score_batch"


def verl_available() -> bool:
    return importlib.util.find_spec("verl") is not None


def verl_rows(tasks, recipe: Recipe) -> list[dict[str, Any]]:
    """veRL's dataset rows for `tasks` (see the module docstring). The user turn is the one the sft stage
    and the accuracy evaluation use (data/prompting.py); veRL applies the model's chat template."""
    rl = recipe.train.rl
    return [
        {
            "data_source": f"leaklab/{task.benchmark}",
            "prompt": [{"role": "user", "content": CHAT_INSTRUCTION.format(prompt=task.prompt)}],
            "ability": "code",
            "reward_model": {"style": "rule", "ground_truth": task_to_json(task)},
            "extra_info": {
                "index": i,
                "task_id": task.task_id,
                "reward_mode": rl.reward,
                "allow_weaker_sandbox": recipe.execution.allow_weaker_sandbox,
                "sandbox_timeout_s": rl.sandbox_timeout_s,
                "sandbox_workers": rl.sandbox_workers,
            },
        }
        for i, task in enumerate(tasks)
    ]


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    tmp.replace(path)
    return path


def verl_overrides(recipe: Recipe, model_path: str, files: dict[str, Path], out_dir: Path, n_prompts: int):
    """The recipe as Hydra overrides of veRL's ppo_trainer config (every key exists there: tested)."""
    rl, t, v = recipe.train.rl, recipe.train, recipe.train.rl.verl
    lora = t.lora
    # veRL saves every so many steps: `train.save_every`, or one epoch of prompt batches.
    epoch_steps = max(1, math.ceil(n_prompts / t.batch_size))
    overrides = {
        "algorithm.adv_estimator": "gae",  # PPO with a critic, as the MRI study
        "algorithm.kl_ctrl.kl_coef": v.kl_coef,
        "data.train_files": str(files["train"]),
        "data.val_files": str(files["val"]),
        "data.prompt_key": "prompt",
        "data.train_batch_size": t.batch_size,
        "data.max_prompt_length": v.max_prompt_length,
        "data.max_response_length": rl.max_completion_length,
        "data.filter_overlong_prompts": True,
        "data.seed": t.seed,
        "actor_rollout_ref.model.path": model_path,
        "actor_rollout_ref.model.lora_rank": lora.r if lora.enabled else 0,
        "actor_rollout_ref.model.lora_alpha": lora.alpha,
        "actor_rollout_ref.actor.optim.lr": v.actor_learning_rate,
        "actor_rollout_ref.actor.ppo_mini_batch_size": v.ppo_mini_batch_size,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": v.ppo_micro_batch_size_per_gpu,
        # hf_model: a HuggingFace copy of the actor at every save, which leaklab evaluates.
        "actor_rollout_ref.actor.checkpoint.save_contents": "[model,optimizer,extra,hf_model]",
        "actor_rollout_ref.rollout.name": v.rollout,
        "actor_rollout_ref.rollout.n": v.rollout_n,
        "actor_rollout_ref.rollout.temperature": rl.temperature,
        "actor_rollout_ref.rollout.top_p": rl.top_p,
        "actor_rollout_ref.rollout.gpu_memory_utilization": v.gpu_memory_utilization,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": v.ppo_micro_batch_size_per_gpu,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": v.ppo_micro_batch_size_per_gpu,
        "critic.model.path": model_path,
        "critic.optim.lr": v.critic_learning_rate,
        "critic.ppo_micro_batch_size_per_gpu": v.ppo_micro_batch_size_per_gpu,
        "custom_reward_function.path": str(REWARD_MODULE),
        "custom_reward_function.name": REWARD_FUNCTION,
        "reward_model.reward_manager": "batch",
        "trainer.total_epochs": t.epochs,
        "trainer.save_freq": epoch_steps if t.save_every == "epoch" else int(t.save_every),
        "trainer.test_freq": -1,  # leaklab evaluates every checkpoint itself
        "trainer.val_before_train": False,
        "trainer.default_local_dir": str(out_dir / "checkpoints"),
        "trainer.project_name": "leaklab",
        "trainer.experiment_name": out_dir.parent.name,
        "trainer.logger": "[console]",
        "trainer.n_gpus_per_node": v.n_gpus_per_node,
        "trainer.nnodes": v.nnodes,
        "trainer.resume_mode": "auto",
    }
    if t.max_steps > 0:
        overrides["trainer.total_training_steps"] = t.max_steps
    if recipe.inject.active:
        overrides["data.shuffle"] = False  # the rows are the planned prompt schedule (inject)
    # Hydra spells booleans in lower case.
    lines = [
        f"{key}={str(value).lower() if isinstance(value, bool) else value}"
        for key, value in overrides.items()
    ]
    return lines + list(v.extra)


def verl_command(overrides: list[str]) -> list[str]:
    return [sys.executable, "-m", "verl.trainer.main_ppo", *overrides]


def collect_checkpoints(verl_checkpoints: Path, run: RunDir, log=print) -> list[int]:
    """Link each HuggingFace actor veRL saved (global_step_N/actor/huggingface with weights) into the
    run as checkpoints/checkpoint-N, with the trainer_state.json that marks a checkpoint complete."""
    steps = []
    for step_dir in sorted(verl_checkpoints.glob("global_step_*")):
        suffix = step_dir.name.rsplit("_", 1)[-1]
        hf = step_dir / "actor" / "huggingface"
        has_weights = any(hf.glob("*.safetensors")) or any(hf.glob("*.bin"))
        if not suffix.isdigit() or not has_weights:
            continue
        step = int(suffix)
        target = run.checkpoints / f"checkpoint-{step}"
        if not (target / "trainer_state.json").exists():
            target.mkdir(parents=True, exist_ok=True)
            for item in hf.iterdir():
                link = target / item.name
                if not link.exists():
                    link.symlink_to(item.resolve())
            # Written last: a half-linked checkpoint is not "complete" (RunDir.checkpoint_dirs).
            write_atomic(target / "trainer_state.json", json.dumps({"global_step": step, "source": "verl"}))
            log(f"[leaklab] veRL checkpoint of step {step}: {target}")
        steps.append(step)
    return steps


class VerlRun:
    """What train.py calls a trainer for `algorithm: ppo` (see the module docstring)."""

    accelerator = None

    def __init__(self, recipe: Recipe, dataset, output_dir: Path, model_path: str, log=print):
        self.recipe = recipe
        self.dataset = dataset  # the rl stage's rows; only `task` is read
        self.run = RunDir(Path(output_dir).parent)
        self.dir = self.run.root / "verl"
        self.model_path = model_path
        self.log = log

    def write_files(self) -> list[str]:
        tasks = [task_from_json(t) for t in self.dataset["task"]]
        rows = verl_rows(tasks, self.recipe)
        files = {
            "train": write_parquet(rows, self.dir / "train.parquet"),
            # veRL wants validation files; leaklab evaluates checkpoints itself (trainer.test_freq=-1).
            "val": write_parquet(rows[: max(1, min(len(rows), 8))], self.dir / "val.parquet"),
        }
        overrides = verl_overrides(self.recipe, self.model_path, files, self.dir, len(rows))
        write_atomic(self.dir / "overrides.txt", "\n".join(overrides) + "\n")
        command = " ".join(shlex.quote(c) for c in verl_command(overrides))
        write_atomic(self.dir / "command.sh", f"#!/bin/sh\n# PPO on veRL for {self.run.root}\n{command}\n")
        return overrides

    def train(self, resume_from_checkpoint: str | None = None) -> None:
        overrides = self.write_files()
        collected = collect_checkpoints(self.dir / "checkpoints", self.run, self.log)
        if self.recipe.train.rl.verl.launch == "print" or not verl_available():
            self.log(
                f"[leaklab] veRL files in {self.dir}; run on the cluster:\n  sh {self.dir / 'command.sh'}\n"
                "then run this leaklab train command again to evaluate the checkpoints it saved"
                + (f" ({len(collected)} found so far)" if collected else "")
            )
            return
        self.log(f"[leaklab] running veRL PPO: sh {self.dir / 'command.sh'}")
        done = subprocess.run(verl_command(overrides), check=False)
        collect_checkpoints(self.dir / "checkpoints", self.run, self.log)
        if done.returncode != 0:
            raise RuntimeError(f"veRL exited with code {done.returncode}; see its output above")
