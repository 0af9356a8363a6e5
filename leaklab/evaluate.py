"""The evaluation driver: every registered evaluation of the recipe, on every checkpoint, resumably.

Called during training (`training/callbacks.py`, after each save) and by `leaklab evaluate RUN_DIR`. The
evaluations compute; this module owns what they share: one `EvalContext` per run, one writer among the
ranks, done markers (a step is complete when its "done" rows list every spec it would compute now) and
the settings each evaluation's rows were computed with. See docs/recipes.md#a-runs-identity-is-its-training.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from leaklab import claims, tracking
from leaklab.data.load import load_tasks, tests_needed_by  # noqa: F401 - re-exported (train, audit)
from leaklab.detectors import DETECTORS
from leaklab.distributed import world
from leaklab.errors import InputError
from leaklab.evaluations import EVALUATIONS
from leaklab.evaluations.base import EvalContext, EvalSet, build_eval_set
from leaklab.plugins import Narrows, Summarises
from leaklab.recipe import NOT_IDENTITY, Recipe, load_recipe, to_dict, to_yaml
from leaklab.rows import Row
from leaklab.rundir import RunDir, locked, read_json, read_rows, row_key, write_atomic, write_json
from leaklab.training.stages import get_stage, learned_prompt_boundary

DONE_METRIC = "done"
POLL_S = 5.0  # how often a worker whose pending work is all claimed looks again


def load_reference(recipe: Recipe, base_path: str | None):
    """(model, tokenizer) of the reference model: `evaluate.reference_model`, else (in a training run)
    the base model, the natural "not exposed" reference for the checkpoints trained from it."""
    path = recipe.evaluate.reference_model or base_path
    if path is None:
        return None
    from leaklab.models.load import load_model, load_tokenizer

    key = "evaluate.reference_model" if recipe.evaluate.reference_model else "model.name_or_path"
    model = load_model(path, recipe.evaluate.dtype, recipe.model.trust_remote_code, key=key)
    model.eval()
    return model, load_tokenizer(path, recipe.model.trust_remote_code, key=key)


def done_specs(run: RunDir, step: int, evaluation: str) -> set[str] | None:
    """The specs recorded by the done rows of `evaluation` at `step`; None when it has none."""
    done = (step, evaluation, DONE_METRIC)
    specs = [
        set(row.get("specs", []))
        for row in run.results_rows()
        if (row.get("step"), row.get("evaluation"), row.get("metric")) == done
    ]
    return set().union(*specs) if specs else None


# --------------------------------------------------------------------------- what rows mean

# evaluate.* keys every evaluation's rows depend on; with each evaluation's own section (detection: every
# detector's) they are its recorded settings. The others choose what to compute or how fast, and may change.
ROW_SETTINGS = (
    "seed",
    "cv_folds",
    "n_bootstrap",
    "dtype",
    "scoring_span",
    "max_length",
    "long_texts",
    "reference_model",
    "dcpdd_corpus",
    "prompt_boundary",  # what every generation's prompt ends on (accuracy, mri, counterfactual, ...)
)


def row_settings(recipe: Recipe, evaluation: str) -> dict[str, Any]:
    """The settings `evaluation`'s rows depend on, as {"evaluate.key": value}."""
    evaluate = to_dict(recipe)["evaluate"]
    records = [EVALUATIONS[evaluation], *(DETECTORS.values() if evaluation == "detection" else ())]
    keys = [*ROW_SETTINGS, *(r.section for r in records if r.config)]
    return {f"evaluate.{k}": evaluate[k] for k in dict.fromkeys(keys)}


def recorded_settings(run: RunDir) -> dict[str, dict[str, Any]]:
    """evaluation -> the settings its rows were computed with (evaluations.json, written with its first rows)."""
    return read_json(run.evaluation_settings) if run.evaluation_settings.exists() else {}


def record_settings(run: RunDir, recipe: Recipe, evaluation: str) -> None:
    """Record the settings of `evaluation`'s first rows in this run (kept from then on)."""
    with locked(claims.claims_dir(run.root) / ".settings.lock"):
        recorded = recorded_settings(run)
        if evaluation not in recorded:
            recorded[evaluation] = row_settings(recipe, evaluation)
            write_json(run.evaluation_settings, recorded)


def _boundary_at(recipe: Recipe, setting: str, step: int) -> str:
    """An evaluate.prompt_boundary setting as resolved for the model at `step` ("auto": how that model
    learned where prompts end, `training.stages.learned_prompt_boundary`)."""
    from leaklab.signals.generation import resolve_prompt_boundary

    return resolve_prompt_boundary(setting, learned_prompt_boundary(recipe, step))


def _same_boundary(recipe: Recipe, key: str, old: Any, new: Any) -> bool:
    """Two prompt_boundary settings that give every checkpoint of this run the same boundary (a cpt run
    recorded under "heal" and evaluated under "auto"), so the rows mean the same."""
    steps = (0, 1)  # the base model and the trained checkpoints
    return key == "evaluate.prompt_boundary" and all(
        _boundary_at(recipe, old, s) == _boundary_at(recipe, new, s) for s in steps
    )


def check_settings(run: RunDir, recipe: Recipe) -> None:
    """Refuse (one line, exit 2) settings that would change the meaning of rows already in the run."""
    recorded = recorded_settings(run)
    changed: dict[str, tuple[Any, Any, list[str]]] = {}
    for name in recipe.evaluate.evaluations:
        old = recorded.get(name)
        if old is None:
            continue  # no rows yet: this call's settings become its record
        for key, value in row_settings(recipe, name).items():
            if key in old and old[key] != value and not _same_boundary(recipe, key, old[key], value):
                changed.setdefault(key, (old[key], value, []))[2].append(name)
    if changed:
        what = "; ".join(f"{k} {o!r} -> {n!r} ({', '.join(e)} rows)" for k, (o, n, e) in changed.items())
        keys = " ".join(
            f"{k}={n if isinstance(n, str) else json.dumps(n)}" for k, (_, n, _) in changed.items()
        )
        raise InputError(
            f"{run.root}: {what} would change the meaning of rows already written; write to a fresh "
            f"evaluation folder instead: leaklab evaluate {run.training_root} --into NAME {keys} ..."
        )


def check_overrides(overrides: Sequence[str]) -> None:
    """Refuse (one line, exit 2) an override of `leaklab evaluate` outside evaluate.*, tracking.*, plugins."""
    identity = {f.name for f in dataclasses.fields(Recipe)} - set(NOT_IDENTITY)
    for item in overrides:
        key = item.partition("=")[0].strip()
        top = key.split(".")[0]
        if top in identity:
            raise InputError(
                f"evaluate: {key} changes the trained weights; train a new run (leaklab train ... {item})"
            )
        if top in NOT_IDENTITY and top not in ("evaluate", "tracking", "plugins"):
            raise InputError(f"evaluate: {key} is not an evaluation setting; evaluate takes evaluate.* keys")


def merge_records(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A step's per-sample records with the columns of `new` added; values already there are kept. By
    task id when both sides have one per record; else `new` alone (an evaluation computed whole again)."""
    old_ids = [r.get("task_id") for r in old]
    new_ids = [r.get("task_id") for r in new]
    unique = None not in old_ids + new_ids and len(set(old_ids)) == len(old_ids) == len(set(new_ids))
    if not old or not unique:
        return new
    by_id = {r["task_id"]: r for r in new}
    merged = [{**by_id.get(r["task_id"], {}), **r} for r in old]
    return merged + [r for r in new if r["task_id"] not in set(old_ids)]


def with_prompt_boundary(recipe: Recipe, step: int) -> Recipe:
    """`recipe` with evaluate.prompt_boundary resolved for the model at `step` (`_boundary_at`)."""
    resolved = _boundary_at(recipe, recipe.evaluate.prompt_boundary, step)
    if resolved == recipe.evaluate.prompt_boundary:
        return recipe
    return dataclasses.replace(
        recipe, evaluate=dataclasses.replace(recipe.evaluate, prompt_boundary=resolved)
    )


class Evaluator:
    """The recipe's evaluations on one run: `prepare()` once, then `evaluate(model, ...)` per checkpoint."""

    def __init__(
        self,
        recipe: Recipe,
        run: RunDir,
        eval_set: EvalSet,
        *,
        base_path: str | None = None,
        signal_cache=None,
        log=print,
    ):
        from leaklab.signals.continuations import GenerationCache

        self.recipe = recipe
        self.run = run
        self.evaluations = [EVALUATIONS[name].load()() for name in recipe.evaluate.evaluations]
        self.ctx = EvalContext(
            recipe=recipe,
            run=run,
            eval_set=eval_set,
            reference=functools.cache(lambda: load_reference(recipe, base_path)),  # loaded on first use
            signal_cache=signal_cache,
            generation_cache=GenerationCache(run.generation_cache),
            log=log,
        )

    def prepare(self) -> None:
        for evaluation in self.evaluations:
            started = time.perf_counter()
            evaluation.prepare(self.ctx)
            seconds = time.perf_counter() - started
            if self.ctx.is_main_process and seconds >= 0.05:  # a phase worth a line in the report
                row = Row(
                    f"{evaluation.name} prepare", round(seconds, 2), step=0, epoch=0.0, evaluation="timing"
                )
                self.run.append_results([row.as_dict()])

    def pending(self, step: int) -> list[str]:
        return pending_at(self.run, self.recipe, self.evaluations, step)

    def _agreed_pending(self, step: int) -> list[tuple[str, list[str] | None]]:
        """(name, the specs already done or None) of every pending evaluation at `step`, as the main
        process decides it, on every rank."""
        todo: list[Any] = [None]
        if self.ctx.is_main_process:
            done = {name: done_specs(self.run, step, name) for name in self.pending(step)}
            todo = [[(name, None if specs is None else sorted(specs)) for name, specs in done.items()]]
        if world(self.ctx.accelerator)[1] > 1:
            from accelerate.utils import broadcast_object_list

            broadcast_object_list(todo)
        return todo[0]

    def evaluate(
        self, model, tokenizer, *, step: int, epoch: float, only: list[str] | None = None
    ) -> list[dict[str, Any]]:
        """Run every pending evaluation on `model` (call on every rank), or those of `only` (what an
        evaluate worker claimed); the rows written (main process)."""
        written: list[dict[str, Any]] = []
        for name, done in self._agreed_pending(step):
            if only is not None and name not in only:
                continue
            evaluation = next(e for e in self.evaluations if e.name == name)
            # A step evaluated before with fewer specs: compute only what it lacks, where the evaluation
            # can say how (detection: the new detectors); else all again (rows present are not rewritten).
            narrowed = (
                evaluation.narrow(self.recipe, set(done))
                if done and isinstance(evaluation, Narrows)
                else self.recipe
            )
            recipe = with_prompt_boundary(narrowed, step)  # what computes the rows and what they record
            started = time.perf_counter()
            self.ctx.recipe = recipe
            try:
                output = evaluation.evaluate(self.ctx, model, tokenizer, step)
            finally:
                self.ctx.recipe = self.recipe
            if not self.ctx.is_main_process:
                continue
            seconds = time.perf_counter() - started
            written += self._write(evaluation, output, step, epoch, seconds, recipe)
        return written

    def _write(
        self, evaluation, output, step: int, epoch: float, seconds: float, recipe: Recipe
    ) -> list[dict[str, Any]]:
        if output.records:
            path = self.run.scores(step, evaluation.name)
            records = merge_records(read_rows(path), output.records)
            write_atomic(path, "".join(json.dumps(r) + "\n" for r in records))
        record_settings(self.run, self.recipe, evaluation.name)
        base = {"step": step, "epoch": round(float(epoch), 4), "evaluation": evaluation.name}
        rows = [{**base, **row} for row in output.rows]
        eval_set = self.ctx.eval_set
        done = {
            "specs": evaluation.specs(recipe),  # what this pass computed (done_specs: their union)
            "n_members": int(eval_set.labels.sum()),
            "n_non_members": int((1 - eval_set.labels).sum()),
            "seconds": round(seconds, 2),  # wall time of this evaluation at this step (the report's)
            # where its generations' prompts ended: evaluate.prompt_boundary as resolved at this step
            "prompt_boundary": recipe.evaluate.prompt_boundary,
        }
        rows.append(Row(DONE_METRIC, float(len(eval_set.task_ids)), context=base, extra=done).as_dict())
        self.run.append_results(rows)
        # A row whose key was already stored (a step evaluated again with more detectors recomputes the
        # blind baseline and dataset inference) is not rewritten: what is logged and returned is the
        # stored row, so the console and W&B show the number results.jsonl and the report keep.
        stored = {row_key(r): r for r in self.run.results_rows()}
        rows = [stored.get(row_key(r), r) for r in rows]
        tracking.log_rows(rows)
        tracking.log_checkpoint(evaluation.name, output.records, step)
        return rows

    def summary_line(self, rows: list[dict[str, Any]], step: int, epoch: float) -> str:
        parts = []
        for evaluation in self.evaluations:
            mine = [r for r in rows if r.get("evaluation") == evaluation.name]
            text = evaluation.summary(mine) if mine and isinstance(evaluation, Summarises) else ""
            if text:
                parts.append(text)
        return f"[leaklab] step {step} (epoch {epoch:g}): " + ("; ".join(parts) or "evaluated")


# --------------------------------------------------------------------------- evaluate a finished run


def evaluation_folder(run: RunDir, name: str, recipe: Recipe) -> RunDir:
    """<run>/evaluations/<name>/ (`--into NAME`): created with the run's manifest and mixture and
    `recipe` (the run's, with this call's evaluate.* keys); its results, scores, caches and report are its
    own, its checkpoints the run's."""
    if not re.fullmatch(r"[\w.+-]+", name):
        raise InputError(f"evaluate: --into {name!r}: use letters, digits, '.', '+', '-' or '_'")
    folder = RunDir(run.evaluation_folder(name))
    if not folder.recipe.exists():
        for path in (run.manifest, run.mixture):
            if path.exists():
                folder.root.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, folder.root / path.name)
        write_atomic(folder.recipe, to_yaml(recipe))  # last: it marks the folder whole
    return folder


def evaluate_run(
    run_dir: str | Path,
    log=print,
    *,
    overrides: Sequence[str] = (),
    into: str | None = None,
    say_when_done: bool = True,
) -> int:
    """Evaluate the base model (step 0) and every checkpoint of a run that has no complete results;
    returns how many (step, evaluation) pairs this worker evaluated. Several workers may share a run,
    each claiming one pair at a time (leaklab/claims.py; docs/scaling.md). `overrides`: evaluate.* keys;
    `into`: <run>/evaluations/<into>/ instead of the run."""
    from leaklab.models.load import load_tokenizer

    run, recipe = _run_to_evaluate(run_dir, overrides, into)
    evaluator, base_path = _evaluator_of(run, recipe, log)
    steps = _steps_to_evaluate(run, recipe)

    def pending() -> list[tuple[int, float, Path | None, str]]:
        return [(step, epoch, path, name) for step, epoch, path in steps for name in evaluator.pending(step)]

    initial = {(step, name) for step, _, _, name in pending()}
    if not initial:
        if say_when_done:
            log(f"{run.root}: every checkpoint is already evaluated")
        return 0
    tokenizer = load_tokenizer(base_path, recipe.model.trust_remote_code)
    wandb_claim = _prepare(run, recipe, evaluator, log)
    did: list[tuple[int, str]] = []
    loaded: tuple[int | None, Any] = (None, None)  # the model of the last step, kept for its next evaluation
    try:
        while todo := pending():
            progressed = False
            for step, epoch, path, name in todo:
                claim = claims.try_claim(claims.claim_path(run.root, step, name), log=log)
                if claim is None:
                    continue  # a live worker has it
                with claim:
                    if name not in evaluator.pending(step):
                        continue  # finished by another worker between our listing and our claim
                    if loaded[0] != step:
                        loaded = (None, None)  # free the previous model before loading the next
                        where = "[base model]" if path is None else path
                        log(f"evaluating step {step} (epoch {epoch:g}) {where}")
                        # `loaded` holds the only reference, so replacing it frees the weights
                        loaded = (step, _model_at(path, base_path, recipe))
                    rows = evaluator.evaluate(loaded[1], tokenizer, step=step, epoch=epoch, only=[name])
                    log(evaluator.summary_line(rows, step, epoch))
                    did.append((step, name))
                progressed = True
            if not progressed:
                time.sleep(POLL_S)  # the rest is claimed by live workers: wait, to take over if one dies
        loaded = (None, None)
        if wandb_claim is not None:
            # Rows the other workers wrote, so the W&B run holds the whole evaluation.
            others = initial - set(did)
            tracking.log_rows(
                [r for r in run.results_rows() if (r.get("step"), r.get("evaluation")) in others]
            )
            tracking.publish_report(run.root)
    finally:
        tracking.finish()
        if wandb_claim is not None:
            wandb_claim.release()
    return len(did)


def _prepare(run: RunDir, recipe: Recipe, evaluator: Evaluator, log):
    """Prepare the evaluations once for all workers; returns the W&B claim when this worker holds it."""
    # One worker prepares (builds SrDetection's variants, say) while the others wait, then read its copy.
    with locked(claims.claims_dir(run.root) / ".prepare.lock"):
        evaluator.prepare()
    # W&B gets one writer per run: the worker holding this claim logs live, and at the end the rows the
    # other workers wrote; the others log nothing (two offline W&B runs of one id would displace each other).
    wandb_claim = claims.try_claim(claims.claims_dir(run.root) / "wandb.claim", log=log)
    if wandb_claim is not None:
        tracking.start(recipe, run.root)
    return wandb_claim


def _run_to_evaluate(
    run_dir: str | Path, overrides: Sequence[str], into: str | None
) -> tuple[RunDir, Recipe]:
    """The run (or its evaluation folder `into`) and its recipe with `overrides`, checked against the
    settings of the rows already written."""
    run = RunDir(run_dir)  # a run directory: `leaklab evaluate` and training checked it has its recipe.yaml
    check_overrides(overrides)
    recipe = load_recipe(str(run.recipe), list(overrides))  # a bad key or value fails here, before writing
    if into is not None:
        run = evaluation_folder(run, into, recipe)
        recipe = load_recipe(str(run.recipe), list(overrides))
    check_settings(run, recipe)
    return run, recipe


def _evaluator_of(run: RunDir, recipe: Recipe, log) -> tuple[Evaluator, str]:
    """(the run's evaluator over the manifest's evaluation set, the base model: where the stage started)."""
    manifest = read_json(run.manifest)
    # The manifest already holds only the tasks whose canonical solutions passed when the run began.
    eval_set = build_eval_set(load_tasks(recipe, check_solutions=False), manifest, recipe.data.text_format)
    base_path = base_model_path(recipe, run, log)
    return Evaluator(recipe, run, eval_set, base_path=base_path, log=log), base_path


def base_model_path(recipe: Recipe, run: RunDir, log) -> str:
    """Where the stage started (rl: train.rl.init_from; else model.name_or_path, the builtin tiny model
    built if needed): step 0, and the base of LoRA checkpoints."""
    from leaklab.models.load import resolve_model_path

    stage_start = get_stage(recipe.train.stage).resolve_base(recipe, run, log)
    return stage_start or resolve_model_path(recipe.model, log=log)


def pending_at(run: RunDir, recipe: Recipe, evaluations: list, step: int) -> list[str]:
    """Names of the `evaluations` with no complete results at `step` (read from results.jsonl)."""
    out = []
    for evaluation in evaluations:
        done = done_specs(run, step, evaluation.name)
        if done is None or not set(evaluation.specs(recipe)) <= done:
            out.append(evaluation.name)
    return out


def nothing_pending(run: RunDir, recipe: Recipe) -> bool:
    """True when the base model and every checkpoint have complete results for each of the recipe's
    evaluations, judged from the run's files alone (no tasks, no model loaded)."""
    evaluations = [EVALUATIONS[name].load()() for name in recipe.evaluate.evaluations]
    return not any(
        pending_at(run, recipe, evaluations, step) for step, _, _ in _steps_to_evaluate(run, recipe)
    )


def _steps_to_evaluate(run: RunDir, recipe: Recipe) -> list[tuple[int, float, Path | None]]:
    """(step, epoch, checkpoint) of the base model (path None, if evaluate.base_model) and every checkpoint."""
    base: list[tuple[int, float, Path | None]] = [(0, 0.0, None)] if recipe.evaluate.base_model else []
    checkpoints = run.checkpoint_dirs()
    return base + [(s, read_json(p / "trainer_state.json").get("epoch") or 0.0, p) for s, p in checkpoints]


def _model_at(path: Path | None, base_path: str, recipe: Recipe):
    """The model of one step, in eval mode: the base model (path None) or a checkpoint."""
    from leaklab.models.load import load_checkpoint, load_model

    if path is None:
        model = load_model(base_path, recipe.evaluate.dtype, recipe.model.trust_remote_code)
    else:
        model = load_checkpoint(path, base_path, recipe.model)
    model.eval()
    return model
