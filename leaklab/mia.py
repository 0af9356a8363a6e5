"""Membership inference on any labelled text: `leaklab mia model=M data=FILE`.

Any member / non-member set (MIMIR, WikiMIA, a user's own files: `leaklab.data.labelled`) becomes the
evaluation set of a one-checkpoint run (step 0) through the driver and detection evaluation a training
run uses: `leaklab report` and `leaklab compare` read the folder, and the same command again computes
only what it lacks. Detectors that need tests-verified variants, or a reference model the recipe does
not name, are left out with a logged reason (refused when named).

    leaklab mia model=builtin:tiny members=seen.jsonl non_members=unseen.jsonl detectors=[ppl,mink]
    leaklab mia model=M data=hub:swj0419/WikiMIA split=WikiMIA_length64 text_column=input
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from leaklab import tracking
from leaklab.data.labelled import DataSpec, LabelledSet, load_labelled, write_labelled
from leaklab.data.tasks import Task
from leaklab.detectors import needs_of
from leaklab.detectors.likelihood import REFERENCE
from leaklab.detectors.srdetection import VARIANTS
from leaklab.errors import InputError
from leaklab.evaluate import Evaluator, row_settings
from leaklab.evaluations.base import EvalSet
from leaklab.recipe import Recipe, to_dict, to_yaml
from leaklab.rundir import RunDir, environment_info, text_sha256, write_atomic, write_json

MIA_ALIASES = {"model": "model.name_or_path", "detectors": "evaluate.detectors"}
DATA_KEYS = {f.name for f in dataclasses.fields(DataSpec)}


def parse_mia_args(args: list[str]) -> tuple[list[str], DataSpec, int | None]:
    """(recipe overrides, the data named, --limit): `data=`, `members=`, `non_members=`, `split=`,
    `text_column=`, `label_column=` say what to score; `model=` and `detectors=` are short for their
    recipe keys; other keys pass through as recipe overrides."""
    overrides, data, limit = [], {}, None
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg in ("--limit", "limit") or arg.startswith(("--limit=", "limit=")):
            value = arg.partition("=")[2] if "=" in arg else (rest.pop(0) if rest else "")
            try:
                limit = int(value)
            except ValueError:
                raise InputError(f"mia: --limit takes a number of texts per label, got {value!r}") from None
            continue
        key, sep, value = arg.partition("=")
        if not sep:
            raise InputError(f"mia: expected key=value, got {arg!r} (see `leaklab mia --help`)")
        if key in DATA_KEYS:
            data[key] = value
        else:
            overrides.append(f"{MIA_ALIASES.get(key, key)}={value}")
    return overrides, DataSpec(**data), limit


def applicable_detectors(recipe: Recipe, named: bool, log=print) -> list[str]:
    """The recipe's detector specs that apply to plain text (module doc); those that do not are left out
    with a logged reason, or refused in one line when the user named the detectors (`named`)."""
    reasons = {VARIANTS: "needs variants verified by a benchmark's tests, which plain text has none of"}
    if not recipe.evaluate.reference_model:
        reasons[REFERENCE] = (
            "needs a reference model (evaluate.reference_model=a hub name or local directory)"
        )
    keep = []
    for spec in recipe.evaluate.detectors:
        why = next((text for need, text in reasons.items() if need in needs_of([spec])), None)
        if why is None:
            keep.append(spec)
        elif named:
            raise InputError(f"mia: detector {spec!r} {why}; leave it out of detectors=")
        else:
            log(f"[leaklab] mia: skipping {spec!r}: {why}")
    if not keep:
        raise InputError("mia: no detector applies to plain text here; name some with detectors=[ppl,...]")
    return keep


def eval_set_of(data: LabelledSet) -> EvalSet:
    """The labelled set as the detection evaluation's input: each text a task with no prompt and no
    tests, the whole text scored."""
    tasks = [
        Task(task_id=i, benchmark=data.name, prompt="", solution=t) for i, t in zip(data.ids, data.texts)
    ]
    return EvalSet(
        task_ids=list(data.ids),
        labels=data.labels,
        texts=list(data.texts),
        prompts=[""] * len(tasks),
        tasks=tasks,
    )


def manifest_of(data: LabelledSet) -> dict:
    """The folder's ground truth, in the shape of a run's manifest (what reports and compare read)."""
    members = [i for i, label in zip(data.ids, data.labels) if label == 1]
    non_members = [i for i, label in zip(data.ids, data.labels) if label == 0]
    return {
        "benchmark": data.name,
        "data_source": data.source,
        "mode": "mia",  # no training: the labels came with the data
        "text_format": "text",
        "n_members": len(members),
        "n_non_members": len(non_members),
        "data_sha256": data.sha256(),
        "member_ids": members,
        "non_member_ids": non_members,
    }


def folder_hash(recipe: Recipe, data: LabelledSet) -> str:
    """What names an mia folder besides the model and data names: the model settings, the data's
    contents and the settings the rows depend on (`evaluate.row_settings`), not the detector list, so
    the same command with more detectors adds their columns to the same folder."""
    identity = {"model": to_dict(recipe)["model"], "data": data.sha256(), **row_settings(recipe, "detection")}
    return text_sha256(json.dumps(identity, sort_keys=True, default=str))[:8]


def run_mia(
    recipe: Recipe, spec: DataSpec, limit: int | None = None, *, named: bool = False, log=print
) -> Path:
    """Score the labelled set `spec` names with the recipe's model; returns the output folder
    (<output_dir>/mia-<model>-<data>-<hash>/, a one-step run)."""
    from leaklab.models.load import load_model_and_tokenizer, resolve_model_path

    data = load_labelled(spec, limit)  # bad input fails before the model loads
    specs = applicable_detectors(recipe, named, log)
    recipe = dataclasses.replace(
        recipe,
        data=dataclasses.replace(recipe.data, name=data.name),
        evaluate=dataclasses.replace(recipe.evaluate, detectors=specs, evaluations=["detection"]),
    )
    path = resolve_model_path(recipe.model, log=log)  # builds the builtin model if asked and not cached
    slug = Path(path).name if Path(path).exists() else str(path).replace("/", "--")
    run = RunDir(Path(recipe.output_dir) / f"mia-{slug}-{data.name}-{folder_hash(recipe, data)}")
    evaluator = Evaluator(recipe, run, eval_set_of(data), log=log)
    if not evaluator.pending(0):
        log(f"[leaklab] mia: {run.root} already holds the results of {', '.join(specs)}")
        return run.root
    n_pos, n_neg = int(data.labels.sum()), int((1 - data.labels).sum())
    log(f"[leaklab] mia: {path} on {n_pos} members and {n_neg} non-members of {data.source} -> {run.root}")
    run.root.mkdir(parents=True, exist_ok=True)
    write_json(run.manifest, manifest_of(data))
    write_labelled(data, run.root / "data.jsonl")
    write_json(run.root / "environment.json", environment_info())
    write_atomic(run.recipe, to_yaml(recipe))

    model, tokenizer, _ = load_model_and_tokenizer(recipe.model, log=log)  # the path resolved above
    model.eval()
    tracking.start(recipe, run.root)
    try:
        evaluator.prepare()
        rows = evaluator.evaluate(model, tokenizer, step=0, epoch=0.0)
        log(evaluator.summary_line(rows, 0, 0.0))
        tracking.publish_report(run.root)
    finally:
        tracking.finish()
    return run.root
