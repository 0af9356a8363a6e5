"""Stage `rl`: reinforcement learning on the member tasks with the sandbox's verdict as the reward.

`build_dataset`: one prompt per member task (as sft trains and accuracy asks) plus the task as JSON,
which TRL hands to the reward (`execution/rewards.py`). `build_trainer`: TRL's GRPOTrainer or
RLOOTrainer in process, or for `algorithm: ppo` veRL (`training/verl.py`). Training starts from
`model.name_or_path` or `train.rl.init_from` (`resolve_base`); a LoRA checkpoint is merged into its
base once, so step 0 evaluates exactly the model the earlier stage produced. See docs/rl.md.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from leaklab.data.doses import plan_rows, row_exposures
from leaklab.data.prompting import model_prompt, resolve_format
from leaklab.data.tasks import Task
from leaklab.execution.config import WeakerSandboxError
from leaklab.execution.rewards import CodeReward, task_to_json
from leaklab.recipe import Recipe, RecipeError
from leaklab.rundir import RunDir
from leaklab.training.stages import StageData
from leaklab.training.verl import VERL_EXTRA, VerlRun, verl_available

# --------------------------------------------------------------------------- where training starts


def resolve_base(recipe: Recipe, run: RunDir, log=print) -> str | None:
    """The model the rl stage starts from (see the module docstring); None (model.name_or_path) when
    init_from is unset. Refuses ppo without veRL here, before any model is built or loaded."""
    rl = recipe.train.rl
    if rl.algorithm == "ppo" and not verl_available() and rl.verl.launch != "print":
        raise RecipeError(
            [
                f"train.rl.algorithm=ppo runs on veRL, which is not installed: {VERL_EXTRA} "
                "(or set train.rl.verl.launch=print to write the files and print the command for a cluster)"
            ]
        )
    if not rl.init_from:
        return None
    checkpoint = find_init_checkpoint(rl.init_from, recipe.output_dir)
    if (checkpoint / "adapter_config.json").exists():
        return str(merge_adapter(checkpoint, Path(run.root) / "init_model", recipe, log))
    log(f"[leaklab] rl: starting from {checkpoint}")
    return str(checkpoint)


def find_init_checkpoint(init_from: str, output_dir: str | None = None) -> Path:
    """A model directory for `train.rl.init_from`: itself, a run's last checkpoint, or recipe:NAME's
    (its run under `output_dir`, the rl run's own: the earlier stage was trained with the same one)."""
    from leaklab.models.load import ModelUnavailableError

    if init_from.startswith("recipe:"):
        from leaklab.recipe import load_recipe, run_dir_of

        name = init_from.split(":", 1)[1]
        path = run_dir_of(load_recipe(name, [f"output_dir={output_dir}"] if output_dir else []))
        if not path.is_dir():
            # The settings hash changes when the schema gains keys; take the newest run of that recipe.
            runs = sorted(path.parent.glob(f"{name}-*"), key=lambda p: p.stat().st_mtime)
            path = runs[-1] if runs else path
        if not path.is_dir():
            raise ModelUnavailableError(
                f"train.rl.init_from={init_from}: no run of recipe {name} at {path}; "
                f"train it first: leaklab train recipe={name}"
            )
    else:
        path = Path(init_from).expanduser()
    if not path.is_dir():
        raise ModelUnavailableError(f"train.rl.init_from: {init_from} is not a directory")
    if (path / "config.json").exists() or (path / "adapter_config.json").exists():
        return path
    checkpoints = RunDir(path).checkpoint_dirs()
    if not checkpoints:
        raise ModelUnavailableError(
            f"train.rl.init_from: {path} is neither a model directory nor a run with a finished checkpoint"
        )
    return checkpoints[-1][1]


def merge_adapter(checkpoint: Path, target: Path, recipe: Recipe, log=print) -> Path:
    """A LoRA checkpoint merged into its base model, saved once under `target` (reused when present)."""
    done = target / "leaklab_init.json"
    if done.exists() and json.loads(done.read_text()).get("checkpoint") == str(checkpoint.resolve()):
        return target
    from peft import PeftModel

    from leaklab.models.load import load_model, load_tokenizer

    base = json.loads((checkpoint / "adapter_config.json").read_text())["base_model_name_or_path"]
    log(f"[leaklab] rl: merging the LoRA checkpoint {checkpoint} into its base {base}")
    model = load_model(base, recipe.model.dtype, recipe.model.trust_remote_code)
    merged = PeftModel.from_pretrained(model, checkpoint).merge_and_unload()
    merged.save_pretrained(target)
    tokenizer_dir = checkpoint if (checkpoint / "tokenizer_config.json").exists() else base
    load_tokenizer(str(tokenizer_dir), recipe.model.trust_remote_code).save_pretrained(target)
    done.write_text(json.dumps({"checkpoint": str(checkpoint.resolve()), "base": base}))
    return target


# --------------------------------------------------------------------------- data


def build_dataset(
    recipe: Recipe, tokenizer, tasks: list[Task], manifest: dict, run: RunDir, log=print
) -> StageData:
    """One row per member task: `prompt`, `task` (JSON, read by the reward) and `task_id`."""
    from datasets import Dataset

    by_id = {t.task_id: t for t in tasks}
    # The first max_prompts members in the manifest's order: those the accuracy evaluation asks first
    # (evaluate.accuracy.max_tasks), so the prompts RL was rewarded on are among those evaluated.
    members = [by_id[i] for i in manifest["member_ids"]][: recipe.train.rl.max_prompts]
    # As sft and accuracy decide it; chat without a chat template is an InputError (exit 2).
    fmt = resolve_format(tokenizer, recipe.train.rl.prompt_format, key="train.rl.prompt_format")
    if recipe.inject.active:
        members = prompt_schedule(recipe, members, manifest["doses"], manifest.get("windows"))
    rows = {
        # The text generation starts from, chat template applied, exactly as sft trained on and accuracy
        # asks: an rl run after sft sees the prompts its checkpoint learnt.
        "prompt": [model_prompt(t, tokenizer, fmt) for t in members],
        "task": [task_to_json(t) for t in members],
        "task_id": [t.task_id for t in members],
    }
    rl = recipe.train.rl
    log(
        f"[leaklab] rl: {len(members)} member prompts ({fmt}), {rl.algorithm}, "
        f"{rl.num_generations} completions each, reward {rl.reward}"
    )
    info = {"stage": "rl", "algorithm": rl.algorithm, "prompts": len(members), "prompt_format": fmt}
    if recipe.inject.active:
        # Read back from the schedule itself; members past train.rl.max_prompts are listed with none.
        info |= {"inject": manifest["inject"], **row_exposures(manifest["member_ids"], rows["task_id"])}
    return StageData(Dataset.from_dict(rows), info)


def prompt_schedule(
    recipe: Recipe, members: list[Task], doses: dict[str, int], window_of: dict[str, str] | None = None
) -> list[Task]:
    """`inject` set: the member prompts in training order, each as many times as its dose, spread as
    leaklab.data.doses plans them (`window_of`: each member's window group, the manifest's `windows`).
    There are no other prompts, so the window must be the whole stream (window groups: their windows
    must share it out in proportion to their copies)."""
    by_id = {t.task_id: t for t in members}
    chosen = {t.task_id: doses[t.task_id] for t in members}
    n_rows = sum(chosen.values())
    note = "the rl stage has only member prompts (no other data to fill the stream)"
    member_at = plan_rows(chosen, n_rows, recipe.inject, window_of, recipe.mix.seed, note)
    return [by_id[member_at[row]] for row in range(n_rows)]


# --------------------------------------------------------------------------- trainer


def make_reward(recipe: Recipe) -> CodeReward:
    """The reward with its pool started and its isolation checked: a weaker sandbox fails here, before
    any training (exit 2 at the command line), unless execution.allow_weaker_sandbox says otherwise."""
    rl = recipe.train.rl
    reward = CodeReward(
        mode=rl.reward,
        workers=rl.sandbox_workers or None,
        timeout_s=rl.sandbox_timeout_s,
        allow_weaker_sandbox=recipe.execution.allow_weaker_sandbox,
    )
    try:
        reward.check_sandbox()
    except WeakerSandboxError as err:
        reward.close()
        raise RecipeError([f"execution.allow_weaker_sandbox: {err}"]) from err
    return reward


def reward_callback(reward: CodeReward):
    """Adds the reasons counted since the last log (passed, failed, no_code, ...) to each training log,
    so they become `evaluation: training` rows next to TRL's mean reward."""
    from transformers import TrainerCallback

    class RewardReasons(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs is not None:
                for reason, n in reward.take_counts().items():
                    logs[f"reward_reasons/{reason}"] = n

        def on_train_end(self, args, state, control, **kwargs):
            reward.close()

    return RewardReasons()


def build_trainer(model, tokenizer, dataset, recipe: Recipe, output_dir: Path, callbacks, report_to):
    rl = recipe.train.rl
    if rl.algorithm == "ppo":
        # veRL trains out of process from the model's directory (the in-process model is not used).
        model_path = getattr(model, "name_or_path", None) or model.config._name_or_path
        return VerlRun(recipe, dataset, output_dir, model_path)
    import torch
    from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

    from leaklab.training.cpt import training_arguments

    config_cls, trainer_cls = (
        (GRPOConfig, GRPOTrainer) if rl.algorithm == "grpo" else (RLOOConfig, RLOOTrainer)
    )
    vllm = rl.use_vllm == "true" or (
        rl.use_vllm == "auto" and importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()
    )
    args = training_arguments(
        recipe,
        output_dir,
        report_to,
        cls=config_cls,
        num_generations=rl.num_generations,
        max_completion_length=rl.max_completion_length,
        temperature=rl.temperature,
        top_p=rl.top_p,
        beta=rl.beta,
        use_vllm=vllm,
        **({"vllm_mode": "colocate"} if vllm else {}),
        log_completions=rl.log_completions,
        # `inject` plans the prompt schedule: TRL's sampler keeps it instead of shuffling.
        **({"shuffle_dataset": False} if recipe.inject.active else {}),
    )
    reward = make_reward(recipe)
    trainer = trainer_cls(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=callbacks,
    )
    # First in line, so the reasons are in the logs before W&B and the result rows read them.
    trainer.callback_handler.callbacks.insert(0, reward_callback(reward))
    return trainer
