"""Train and evaluate: `accelerate launch leaklab/train.py recipe=NAME [key.sub=value ...]`, or
`leaklab train` (the same `main()`; a script under accelerate, so imports are absolute).

`run_training` reads as its numbered steps. Re-running the same command finds the same run directory,
resumes training from its last checkpoint and evaluates only what is missing.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leaklab.errors import InputError, debug_requested, guarded, strip_debug
from leaklab.hardware import check_gpu_options
from leaklab.progress import quiet_library_bars
from leaklab.recipe import Recipe, config_hash, get_key, identity_changes, load_recipe, run_hash, to_yaml
from leaklab.rundir import RunDir, check_or_write_run_files, make_manifest, write_json


def parse_command_line(argv: list[str]) -> tuple[str, list[str], bool]:
    """`recipe=NAME`, `print_config=true` and key=value overrides, in any order."""
    recipe_name, overrides, print_config = "tiny_cpt", [], False
    for arg in argv:
        key, _, value = arg.partition("=")
        if key in ("recipe", "--recipe"):
            recipe_name = value
        elif key in ("print_config", "--print_config", "--print-config"):
            print_config = value.lower() in ("", "true", "1", "yes")
        else:
            overrides.append(arg)
    return recipe_name, overrides, print_config


HELP = """usage: leaklab train [recipe=NAME|FILE.yaml] [key.sub=value ...] [print_config=true] [--debug]

Train the recipe's model on its benchmark's members mixed with general text, evaluating every checkpoint;
the run directory is <output_dir>/<recipe name>-<training hash>, and the same command again resumes it;
with other evaluate.* keys on a trained run it trains nothing and evaluates what the checkpoints lack.

  recipe=NAME        a recipe from `leaklab recipes` or a YAML file (default tiny_cpt)
  key.sub=value      override any recipe key; `leaklab keys recipe=NAME` lists them with their values
  print_config=true  print the resolved recipe and exit
  --debug            show the traceback of an error (also LEAKLAB_DEBUG=1)

examples:
  leaklab train recipe=tiny_cpt train.epochs=2
  leaklab train recipe=humaneval_cpt model.name_or_path=/models/Qwen2.5-0.5B data.max_samples=40
"""


def main(argv: list[str] | None = None) -> int:
    """`leaklab train ...` and `accelerate launch leaklab/train.py ...`: errors become one line + exit code."""
    quiet_library_bars()
    argv = sys.argv[1:] if argv is None else argv
    return guarded(lambda: command(strip_debug(argv)), debug=debug_requested(argv))


def command(argv: list[str]) -> int:
    """The train command; raises leaklab's errors (the caller prints them)."""
    if any(a in ("-h", "--help", "help") for a in argv):
        print(HELP, end="")
        return 0
    recipe_name, overrides, print_config = parse_command_line(argv)
    recipe = load_recipe(recipe_name, overrides)
    if print_config:
        print(to_yaml(recipe), end="")
        return 0
    preflight(recipe)
    return run_training(recipe)


def _looks_local(name: str) -> bool:
    """A path rather than a hub id: absolute, explicitly relative, home-relative, or present on disk."""
    return name.startswith(("/", "./", "../", "~")) or os.path.exists(os.path.expanduser(name))


def preflight(recipe) -> None:
    """Every check that needs only the recipe, before anything is loaded or written: local paths the
    recipe names exist, and the output directory can be created."""
    for key in (
        "model.name_or_path",
        "evaluate.reference_model",
        "data.path",
        "train.deepspeed",
        "mix.corpus",
    ):
        value = get_key(recipe, key)
        local = value and (key in ("data.path", "train.deepspeed") or _looks_local(value))
        if local and not Path(value).expanduser().exists():
            raise InputError(f"{key}: {value} does not exist (a local path; check the spelling)")
    for key in ("model.name_or_path", "evaluate.reference_model"):
        value = get_key(recipe, key)
        if value and value != "builtin:tiny" and not _looks_local(value):
            from leaklab.models.load import check_hub_model

            check_hub_model(value, key)
    check_gpu_options(recipe)
    out = Path(recipe.output_dir).expanduser().absolute()
    existing = next(p for p in (out, *out.parents) if p.exists())
    if not existing.is_dir():
        raise InputError(f"output_dir: {recipe.output_dir} cannot be created: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(
            f"output_dir: {recipe.output_dir} is not writable (no write permission on {existing})"
        )


@dataclass
class Launch:
    """What every step of a training run shares: the recipe, its stage, the run directory, the processes."""

    recipe: Recipe
    stage: Any  # a `leaklab.training.stages` record
    run: RunDir
    state: Any  # accelerate's PartialState: this process's rank among the run's processes
    log: Callable[..., None]  # print on the main process, silent on the others


def run_training(recipe: Recipe) -> int:
    """Train the recipe's model and evaluate every checkpoint; each numbered step is one function."""
    from leaklab.evaluate import load_tasks
    from leaklab.models.lora import apply_lora

    launch = start_processes(recipe)
    # 0. The same recipe again on a run it has finished (a sweep, a study or `make reproduce` run again).
    if finished_before(launch):
        return 0
    # 1. Tasks (first: a missing dataset is the cheapest error), then the base model.
    left_out: list[dict[str, str]] = []  # tasks whose canonical solution fails its tests (local files)
    tasks = load_tasks(recipe, log=launch.log, left_out=left_out)
    base_path, tokenizer, model = load_base_model(launch)
    # 2. The optional SrDetection pre-filter, the member / non-member split, the manifest (the ground truth).
    manifest = write_ground_truth(launch, tasks, left_out, model, tokenizer)
    if evaluate_trained_run(launch):
        return 0
    model = apply_lora(model, recipe)
    # 3. The training data, built by the stage from the manifest's members (cpt: members mixed with
    #    corpus text at code:web, packed into blocks).
    data = launch.stage.build_dataset(recipe, tokenizer, tasks, manifest, launch.run, launch.log)
    if launch.state.is_main_process:
        write_json(launch.run.mixture, data.info)
    # 4. Train; each saved checkpoint is evaluated by the callback.
    report = train(launch, model, tokenizer, data, tasks, manifest, base_path)
    del model, data  # the weights go before the last evaluation loads checkpoints
    # 5. Anything saved but not evaluated (a run killed during an evaluation), then the summary.
    finish(launch, report)
    return 0


def start_processes(recipe: Recipe) -> Launch:
    """This process's place among the run's processes, its thread count, and the run directory."""
    import torch
    from accelerate import PartialState

    from leaklab.recipe import run_dir_of
    from leaklab.training.stages import get_stage

    # On a CPU-only machine accelerate's default CPU path wants MPI; several processes talk over gloo instead.
    several_cpu_processes = not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1
    state = PartialState(**({"cpu": True, "backend": "gloo"} if several_cpu_processes else {}))
    log = print if state.is_main_process else (lambda *a, **k: None)
    # Share the cores between the processes of this machine instead of oversubscribing them;
    # LEAKLAB_CPU_THREADS sets the count where other work shares the machine (the test suite's workers).
    local_procs = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if not torch.cuda.is_available():
        threads = os.environ.get("LEAKLAB_CPU_THREADS", "")
        torch.set_num_threads(
            int(threads)
            if threads.isdigit() and int(threads) > 0
            else max(1, (os.cpu_count() or 1) // local_procs)
        )
    return Launch(recipe, get_stage(recipe.train.stage), RunDir(run_dir_of(recipe)), state, log)


def load_base_model(launch: Launch) -> tuple[str, Any, Any]:
    """(base path, tokenizer, model). The main process builds the tiny model (if asked for and not
    cached) before the others look."""
    from leaklab.evaluate import base_model_path
    from leaklab.models.load import load_model, load_tokenizer

    recipe = launch.recipe
    with launch.state.main_process_first():
        base_path = base_model_path(recipe, launch.run, launch.log)
    tokenizer = load_tokenizer(base_path, recipe.model.trust_remote_code)
    model = load_model(
        base_path, recipe.model.dtype, recipe.model.trust_remote_code, recipe.model.attn_implementation
    )
    return base_path, tokenizer, model


def write_ground_truth(launch: Launch, tasks, left_out: list[dict[str, str]], model, tokenizer) -> dict:
    """The member / non-member split (after the optional pre-filter on the base model) and the manifest,
    written with the recipe into the run directory by the main process; returns the manifest."""
    from leaklab.data.prefilter import prefilter_candidates, prefilter_tasks
    from leaklab.data.splits import split_members
    from leaklab.evaluate import check_settings

    recipe, run, state, log = launch.recipe, launch.run, launch.state, launch.log
    ids = [t.task_id for t in tasks]
    max_samples = recipe.data.max_samples
    prefiltered = None
    if recipe.data.prefilter:
        # The tasks max_samples selects (the same draw as the split's), minus those already "leaked".
        with state.main_process_first():
            prefiltered = prefilter_tasks(model, tokenizer, prefilter_candidates(tasks, recipe), recipe, log)
        ids, max_samples = prefiltered["kept_ids"], None
    split = split_members(
        ids, member_fraction=recipe.data.member_fraction, seed=recipe.data.seed, max_samples=max_samples
    )
    manifest = make_manifest(recipe, tasks, split)
    if recipe.inject.form == "rephrased":
        with state.main_process_first():  # the main process builds (and caches) the variants
            settle_rephrased(manifest, tasks, log)
    if prefiltered is not None:
        manifest["prefilter"] = {k: v for k, v in prefiltered.items() if k != "kept_ids"}
    if left_out:
        manifest["left_out"] = left_out
    if state.is_main_process:
        if run.recipe.exists() and not identity_changes(load_recipe(str(run.recipe)), recipe):
            check_settings(run, recipe)  # the same run: its rows' settings must hold (before recipe.yaml)
        check_or_write_run_files(
            run,
            to_yaml(recipe),
            run_hash(recipe),
            manifest,
            lambda old: identity_changes(load_recipe(str(old)), recipe),
        )
        log(f"[leaklab] run directory: {run.root}")
        log(
            f"[leaklab] {len(split.member_ids)} members, {len(split.non_member_ids)} non-members of {manifest['benchmark']}"
        )
    state.wait_for_everyone()
    return manifest


def finished_before(launch: Launch) -> bool:
    """True when this very recipe (evaluate.* included; where the run lives and how it is tracked aside)
    trained the run to its last step and evaluated every step: nothing to do, so no tasks or model are
    loaded. Anything less takes the full path, which also checks the tasks against the manifest."""
    from leaklab.evaluate import nothing_pending
    from leaklab.report import print_summary

    run, recipe = launch.run, launch.recipe
    if not (
        recipe.evaluate.during_training
        and run.recipe.exists()
        and config_hash(load_recipe(str(run.recipe))) == config_hash(recipe)
        and trained_to_the_end(run)
        and nothing_pending(run, recipe)
    ):
        return False
    if launch.state.is_main_process:
        launch.log(f"[leaklab] {run.root} is trained and every checkpoint evaluated: nothing to do")
        print_summary(run)
    return True


def evaluate_trained_run(launch: Launch) -> bool:
    """True when the run is trained to its last step: changed evaluate.* settings on a trained run give
    its checkpoints what they lack, and nothing is trained."""
    from leaklab.evaluate import evaluate_run
    from leaklab.report import print_summary

    run, state, log = launch.run, launch.state, launch.log
    if not trained_to_the_end(run):
        return False
    if not launch.recipe.evaluate.during_training:
        log(f"[leaklab] {run.root} is trained; evaluate its checkpoints with `leaklab evaluate {run.root}`")
    elif state.is_main_process:
        log(
            f"[leaklab] {run.root} is trained ({run.checkpoint_dirs()[-1][1].name} is the last step): nothing to "
            f"train; evaluating what its checkpoints lack"
        )
        evaluate_run(run.root, log=log)
        print_summary(run)
    state.wait_for_everyone()
    return True


def settle_rephrased(manifest: dict, tasks, log) -> None:
    """`inject.form: rephrased`: the members planned as rephrased that have no verified variant are
    trained verbatim; the manifest records the forms as trained and counts the fallback. The variants
    are a pure function of the task and the code (cached), so a resumed run writes the same manifest."""
    from leaklab.data.forms import REPHRASED, settle_forms
    from leaklab.training.cpt import trained_variants

    by_id = {t.task_id: t for t in tasks}
    planned = [by_id[t] for t, form in manifest["forms"].items() if form == REPHRASED]
    manifest["forms"], fallback = settle_forms(manifest["forms"], set(trained_variants(planned, log=log)))
    manifest["inject"]["rephrased_fallback"] = fallback
    log(
        f"[leaklab] inject.form rephrased: {len(planned) - len(fallback)} members trained as a verified "
        f"variant, {len(fallback)} without one trained verbatim"
    )


def train(launch: Launch, model, tokenizer, data, tasks, manifest: dict, base_path: str):
    """Train from the newest complete checkpoint, each saved checkpoint evaluated by the callback (what
    the evaluations need once per run is prepared by the main process first); returns the report built
    for W&B, or None."""
    from leaklab import tracking
    from leaklab.evaluate import Evaluator, build_eval_set
    from leaklab.training.callbacks import EvaluateCheckpoints, TrainingRows, plain_progress

    recipe, run, state, log = launch.recipe, launch.run, launch.state, launch.log
    during = recipe.evaluate.during_training
    eval_set = build_eval_set(tasks, manifest, recipe.data.text_format)
    evaluator = Evaluator(recipe, run, eval_set, base_path=base_path, log=log)
    if during:
        with state.main_process_first():
            evaluator.prepare()
    tracker = tracking.start(recipe, run.root, is_main_process=state.is_main_process)
    callback = EvaluateCheckpoints(evaluator, tokenizer, log=log)
    report_to = ["wandb"] if tracker else "none"
    callbacks = [callback, TrainingRows(run)] if during else [TrainingRows(run)]
    trainer = launch.stage.build_trainer(
        model, tokenizer, data.dataset, recipe, run.checkpoints, callbacks, report_to
    )
    plain_progress(trainer)  # off a terminal: progress and loss lines, not a bar and raw dicts
    # Scoring is split over the ranks by the Trainer's own Accelerator.
    if state.num_processes > 1:
        evaluator.ctx.accelerator = trainer.accelerator
    # The newest complete checkpoint (trainer_state.json is written last, so a half-written one is skipped).
    complete = run.checkpoint_dirs()
    resume = str(complete[-1][1]) if complete else None
    if resume:
        log(f"[leaklab] resuming from {resume}")
    trainer.train(resume_from_checkpoint=resume)
    report = None  # built once: for W&B's artifact here, else by print_summary
    if state.is_main_process:
        report = tracking.publish_report(run.root)  # summary, curves with intervals, report/ as an artifact
    tracking.finish()
    return report


def finish(launch: Launch, report) -> None:
    """Evaluate what was saved but not evaluated, print the summary, and close the process group."""
    from leaklab.evaluate import evaluate_run
    from leaklab.report import print_summary

    run, state, log = launch.run, launch.state, launch.log
    if state.is_main_process and not launch.recipe.evaluate.during_training:
        log(
            f"[leaklab] evaluate.during_training is false: checkpoints saved, not evaluated; run "
            f"`leaklab evaluate {run.root}` (several at once share the checkpoints)"
        )
    elif state.is_main_process:
        # A run that evaluated every checkpoint while training has nothing left: no line saying so.
        if evaluate_run(run.root, log=log, say_when_done=False):
            report = None  # new rows since it was built
        print_summary(run, report)
    state.wait_for_everyone()
    # Several processes: tear the process group down while Python is alive. Left to interpreter exit,
    # gloo's worker threads may drop a tensor then, which aborts the process in C++ ("terminate called
    # without an active exception"). Only here, after a clean run: with a rank failed it could hang.
    state.destroy_process_group()


def trained_to_the_end(run: RunDir) -> bool:
    """True when the Trainer state of the run's newest complete checkpoint says it is the last step."""
    complete = run.checkpoint_dirs()
    if not complete:
        return False
    state = json.loads((complete[-1][1] / "trainer_state.json").read_text())
    return bool(state.get("max_steps")) and state.get("global_step", 0) >= state["max_steps"]


if __name__ == "__main__":
    raise SystemExit(main())
