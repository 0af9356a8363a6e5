"""Evaluation of checkpoints against the ground truth of the manifest.

Called two ways, with the same code underneath:
  - during training, by `training/callbacks.py` after every checkpoint save, on the model in memory;
  - afterwards, by `leaklab evaluate RUN_DIR`, which loads every checkpoint that has no results yet (and
    the base model as step 0).

For each checkpoint: detectors -> per-sample scores (scores/step-N/detection.jsonl) -> metrics rows
(results.jsonl). A step counts as evaluated when its closing "done" row is present, so a run killed in
the middle of writing is simply evaluated again; rows already present are never written twice.

SrDetection specs (srdetection_gray, srdetection_black) take another path than the token-statistics
baselines: they need each sample's verified variants, built once per run before training
(`prepare_variants`: <run>/variants.jsonl, from a per-benchmark cache) and reused by every checkpoint.
Their rows are the rule's own decisions (no threshold) plus AUROC of the margin; see
`leaklab.detectors.srdetection`. Their black-box generations are cached in <run>/cache/generations/.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from leaklab.data.benchmarks import load_benchmark
from leaklab.data.tasks import Task
from leaklab.recipe import Recipe
from leaklab.rundir import RunDir, read_json, write_atomic

DONE_METRIC = "done"


@dataclass
class EvalSet:
    """Members and non-members of one run, in manifest order, with the texts that get scored."""

    task_ids: list[str]
    labels: np.ndarray  # 1 = member (trained on), 0 = non-member
    texts: list[str]
    prompts: list[str]
    tasks: list[Task] = field(default_factory=list)
    # SrDetection's verified variants of each task (same order); set by `prepare_variants`.
    variant_sets: list[Any] | None = None


def load_tasks(recipe: Recipe) -> list[Task]:
    data = recipe.data
    return load_benchmark(
        data.benchmark, path=data.path, hub_name=data.hub_name, split=data.split, difficulty=data.difficulty
    )


def build_eval_set(tasks: list[Task], manifest: dict[str, Any], text_format: str) -> EvalSet:
    from leaklab.detectors.srdetection import context_of

    by_id = {t.task_id: t for t in tasks}
    ids = [*manifest["member_ids"], *manifest["non_member_ids"]]
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ValueError(f"{len(missing)} manifest ids are not in the benchmark (first: {missing[0]!r})")
    labels = np.array([1] * len(manifest["member_ids"]) + [0] * len(manifest["non_member_ids"]))
    tasks_in_order = [by_id[i] for i in ids]
    return EvalSet(
        task_ids=ids,
        labels=labels,
        texts=[t.text(text_format) for t in tasks_in_order],
        # The part before the solution: what `scoring_span=solution` conditions on.
        prompts=[context_of(t.text(text_format), t.solution) for t in tasks_in_order],
        tasks=tasks_in_order,
    )


def srdetection_specs(recipe: Recipe) -> list[str]:
    from leaklab.detectors import is_srdetection

    return [spec for spec in recipe.evaluate.detectors if is_srdetection(spec)]


def prepare_variants(run: RunDir, recipe: Recipe, eval_set: EvalSet, log=print) -> None:
    """Attach SrDetection's variant sets to `eval_set`: the run's own copy (<run>/variants.jsonl) when
    it has one, else from the per-benchmark cache (built there if missing) and written to the run."""
    from leaklab.perturb import store as variant_store

    sets = variant_store.read_run_variants(run.root, eval_set.tasks)
    if sets is None:
        cfg = recipe.evaluate.srdetection
        sets = variant_store.variant_sets_for(eval_set.tasks, cfg, log=log)
        info = variant_store.write_run_variants(run.root, sets, eval_set.tasks, cfg.min_variants)
        log(variant_store.describe(info))
    eval_set.variant_sets = sets


def load_reference(recipe: Recipe, base_path: str):
    """(model, tokenizer) for the `ref` detector, or None when no detector needs one.

    `evaluate.reference_model` names it; in a training run it defaults to the base model, the natural
    "not exposed" reference for the checkpoints trained from it.
    """
    from leaklab.detectors import parse_spec

    if not any(parse_spec(spec)[0] == "ref" for spec in recipe.evaluate.detectors):
        return None
    from leaklab.models.load import load_model, load_tokenizer

    path = recipe.evaluate.reference_model or base_path
    model = load_model(path, recipe.evaluate.dtype, recipe.model.trust_remote_code)
    model.eval()
    return model, load_tokenizer(path, recipe.model.trust_remote_code)


def done_specs(run: RunDir, step: int, evaluation: str = "detection") -> set[str]:
    """Detector specs whose results at `step` are complete."""
    specs: set[str] = set()
    for row in run.results_rows():
        if (
            row.get("step") == step
            and row.get("evaluation") == evaluation
            and row.get("metric") == DONE_METRIC
        ):
            specs.update(row.get("specs", []))
    return specs


def needs_evaluation(run: RunDir, step: int, recipe: Recipe) -> bool:
    return not set(recipe.evaluate.detectors) <= done_specs(run, step)


def evaluate_detection(
    model,
    tokenizer,
    eval_set: EvalSet,
    recipe: Recipe,
    run: RunDir,
    *,
    step: int,
    epoch: float,
    accelerator=None,
    reference=None,
    cache=None,
    generation_cache=None,
) -> list[dict[str, Any]]:
    """Score every sample with every detector of the recipe; write scores and metric rows (main process).

    cache: the signal cache (None: the process-wide one); generation_cache: SrDetection's black-box
    continuations (None: <run>/cache/generations/)."""
    from leaklab.detectors import is_srdetection, run_detectors
    from leaklab.metrics import detection_metrics

    cfg = recipe.evaluate
    # An empty list of baselines computes nothing.
    scores = run_detectors(
        [spec for spec in cfg.detectors if not is_srdetection(spec)],
        model,
        tokenizer,
        eval_set.texts,
        prompts=eval_set.prompts,
        settings=cfg,
        reference=reference,
        accelerator=accelerator,
        cache=cache,
    )
    sr = _score_srdetection(model, tokenizer, eval_set, recipe, run, accelerator, cache, generation_cache)
    if accelerator is not None and not accelerator.is_main_process:
        return []

    lines = []
    for i, task_id in enumerate(eval_set.task_ids):
        row = {"task_id": task_id, "label": int(eval_set.labels[i])}
        row.update({name: _float(values[i]) for name, values in scores.items()})
        row.update(_srdetection_cells(sr, i))
        lines.append(json.dumps(row) + "\n")
    write_atomic(run.scores(step, "detection"), "".join(lines))

    base = {"step": step, "epoch": round(float(epoch), 4), "evaluation": "detection"}
    rows = []
    for name, values in scores.items():
        metrics = detection_metrics(
            np.asarray(values, dtype=float), eval_set.labels, cv_folds=cfg.cv_folds, seed=cfg.seed
        )
        rows.extend({**base, "detector": name, "metric": k, "value": _float(v)} for k, v in metrics.items())
    if sr is not None:
        from leaklab.detectors.srdetection import srdetection_metrics

        for name, decisions in sr.decisions.items():
            metrics = srdetection_metrics(
                decisions, eval_set.labels, n_bootstrap=cfg.n_bootstrap, seed=cfg.seed
            )
            rows.extend(
                {**base, "detector": name, "metric": k, "value": _float(v)} for k, v in metrics.items()
            )
    rows.append(
        {
            **base,
            "detector": None,
            "metric": DONE_METRIC,
            "value": float(len(eval_set.task_ids)),
            "specs": sorted(cfg.detectors),
            "n_members": int(eval_set.labels.sum()),
            "n_non_members": int((1 - eval_set.labels).sum()),
        }
    )
    run.append_results(rows)
    from leaklab import tracking

    tracking.log_rows(rows)
    return rows


def _float(value) -> float | None:
    value = float(value)
    return None if np.isnan(value) else value


def _score_srdetection(model, tokenizer, eval_set, recipe, run, accelerator, cache, generation_cache):
    """SrDetection's scores for the recipe's srdetection specs, or None when it has none."""
    specs = srdetection_specs(recipe)
    if not specs:
        return None
    if eval_set.variant_sets is None:
        raise ValueError(f"{specs[0]!r} needs the variant sets of the evaluation set: call prepare_variants")
    from leaklab.detectors.srdetection import GenerationCache, inputs_from_tasks, score_srdetection

    inputs = inputs_from_tasks(eval_set.tasks, eval_set.variant_sets, recipe.data.text_format)
    return score_srdetection(
        specs,
        model,
        tokenizer,
        inputs,
        settings=recipe.evaluate,
        accelerator=accelerator,
        cache=cache,
        generation_cache=generation_cache or GenerationCache(run.root / "cache" / "generations"),
    )


def _srdetection_cells(sr, i: int) -> dict[str, Any]:
    """Sample i's SrDetection margin per column and the rule's decision (1 leak, 0 not, None undecided)."""
    if sr is None:
        return {}
    cells: dict[str, Any] = {}
    for name, decisions in sr.decisions.items():
        cells[name] = _float(decisions.margin[i])
        cells[f"{name}:leak"] = int(decisions.leak[i]) if decisions.decided[i] else None
    return cells


# --------------------------------------------------------------------------- evaluate a finished run


def evaluate_run(run_dir: str | Path, log=print) -> int:
    """Evaluate the base model (step 0) and every checkpoint of a run that has no complete results."""
    from leaklab import tracking
    from leaklab.models.load import load_checkpoint, load_model, load_tokenizer, resolve_model_path
    from leaklab.recipe import load_recipe

    run = RunDir(run_dir)
    if not run.recipe.exists():
        raise FileNotFoundError(f"{run.root} is not a leaklab run directory (no recipe.yaml)")
    recipe = load_recipe(str(run.recipe))
    manifest = read_json(run.manifest)
    eval_set = build_eval_set(load_tasks(recipe), manifest, recipe.data.text_format)
    base_path = resolve_model_path(recipe.model, log=log)
    tokenizer = load_tokenizer(base_path, recipe.model.trust_remote_code)

    todo: list[tuple[int, float, Path | None]] = []
    if recipe.evaluate.base_model and needs_evaluation(run, 0, recipe):
        todo.append((0, 0.0, None))
    for step, path in run.checkpoint_dirs():
        if needs_evaluation(run, step, recipe):
            epoch = read_json(path / "trainer_state.json").get("epoch") or 0.0
            todo.append((step, epoch, path))
    if not todo:
        log(f"{run.root}: every checkpoint is already evaluated")
        return 0
    if srdetection_specs(recipe):
        prepare_variants(run, recipe, eval_set, log=log)
    tracking.start(recipe, run.root)
    reference = load_reference(recipe, base_path)
    try:
        for step, epoch, path in todo:
            log(f"evaluating step {step} (epoch {epoch:g}) {'[base model]' if path is None else path}")
            if path is None:
                model = load_model(base_path, recipe.evaluate.dtype, recipe.model.trust_remote_code)
            else:
                model = load_checkpoint(path, base_path, recipe.model)
            model.eval()
            evaluate_detection(
                model, tokenizer, eval_set, recipe, run, step=step, epoch=epoch, reference=reference
            )
            del model
    finally:
        tracking.finish()
    return len(todo)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m leaklab.evaluate RUN_DIR", file=sys.stderr)
        return 2
    evaluate_run(argv[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


# --------------------------------------------------------------------------- audit: any model, no training


AUDIT_ALIASES = {
    "model": "model.name_or_path",
    "benchmark": "data.benchmark",
    "detectors": "evaluate.detectors",
}


def audit_overrides(args: list[str]) -> list[str]:
    """`model=X benchmark=Y detectors=[...]` -> recipe overrides (other keys pass through as they are)."""
    out = []
    for arg in args:
        key, sep, value = arg.partition("=")
        out.append(f"{AUDIT_ALIASES.get(key, key)}{sep}{value}")
    return out


def audit_model(recipe: Recipe, log=print) -> Path:
    """Score a whole benchmark with a model that leaklab did not train: no ground truth, so the output is
    per-sample scores and their distribution per detector (mean, spread, quantiles, a histogram).

    SrDetection specs decide leak / no leak per sample without a threshold, so for them the audit gives
    the benchmark's leakage rate (leaks among decided samples) with a bootstrap 95% interval (§5.3).
    """
    from leaklab.detectors import is_srdetection, run_detectors
    from leaklab.models.load import load_model_and_tokenizer
    from leaklab.recipe import config_hash
    from leaklab.report import plot_histograms
    from leaklab.rundir import environment_info, write_json

    tasks = load_tasks(recipe)
    if recipe.data.max_samples:
        tasks = tasks[: recipe.data.max_samples]
    model, tokenizer, path = load_model_and_tokenizer(recipe.model, log=log)
    model.eval()
    reference = load_reference(recipe, path) if recipe.evaluate.reference_model else None
    slug = Path(path).name if Path(path).exists() else path.replace("/", "--")
    out = RunDir(Path(recipe.output_dir) / f"audit-{slug}-{recipe.data.benchmark}-{config_hash(recipe)}")
    fmt = recipe.data.text_format
    log(f"[leaklab] auditing {path} on {len(tasks)} {recipe.data.benchmark} tasks -> {out.root}")
    scores = run_detectors(
        [spec for spec in recipe.evaluate.detectors if not is_srdetection(spec)],
        model,
        tokenizer,
        [t.text(fmt) for t in tasks],
        prompts=[t.prompt if fmt == "prompt+solution" else "" for t in tasks],
        settings=recipe.evaluate,
        reference=reference,
    )
    sr = _audit_srdetection(recipe, model, tokenizer, tasks, out, log)
    from leaklab.recipe import to_yaml

    write_atomic(out.recipe, to_yaml(recipe))
    write_json(out.root / "environment.json", environment_info())
    lines = [
        json.dumps(
            {
                "task_id": t.task_id,
                **{k: _float(v[i]) for k, v in scores.items()},
                **_srdetection_cells(sr, i),
            }
        )
        + "\n"
        for i, t in enumerate(tasks)
    ]
    write_atomic(out.scores(0, "audit"), "".join(lines))
    base = {"step": 0, "epoch": 0.0, "evaluation": "audit", "benchmark": recipe.data.benchmark}
    rows = []
    for name, values in scores.items():
        values = np.asarray(values, dtype=float)
        finite = values[np.isfinite(values)]
        summary = {
            "n": float(len(values)),
            "n_undefined": float(len(values) - len(finite)),
            "mean": finite.mean() if len(finite) else np.nan,
            "std": finite.std() if len(finite) else np.nan,
            **{f"p{q}": np.percentile(finite, q) if len(finite) else np.nan for q in (5, 25, 50, 75, 95)},
        }
        rows += [{**base, "detector": name, "metric": k, "value": _float(v)} for k, v in summary.items()]
    leak_rows = []
    if sr is not None:
        from leaklab.detectors.srdetection import leak_rate

        cfg = recipe.evaluate
        for name, decisions in sr.decisions.items():
            rates = leak_rate(decisions, n_bootstrap=cfg.srdetection.n_bootstrap, seed=cfg.seed)
            leak_rows += [
                {**base, "detector": name, "metric": k, "value": _float(v)} for k, v in rates.items()
            ]
    out.append_results(rows + leak_rows)
    plot_histograms({**scores, **(sr.columns if sr else {})}, out.report)
    if rows:
        log(_audit_table(rows))
    if leak_rows:
        log(_leak_table(leak_rows, recipe.data.benchmark))
    log(f"scores: {out.scores(0, 'audit')}\nplots: {out.report}")
    return out.root


def _audit_srdetection(recipe: Recipe, model, tokenizer, tasks: list[Task], out: RunDir, log):
    """SrDetection on the audited tasks (variants from the per-benchmark cache), or None."""
    specs = srdetection_specs(recipe)
    if not specs:
        return None
    from leaklab.detectors.srdetection import GenerationCache, inputs_from_tasks, score_srdetection
    from leaklab.perturb import store as variant_store

    cfg = recipe.evaluate.srdetection
    sets = variant_store.variant_sets_for(tasks, cfg, log=log)
    log(variant_store.describe(variant_store.write_run_variants(out.root, sets, tasks, cfg.min_variants)))
    return score_srdetection(
        specs,
        model,
        tokenizer,
        inputs_from_tasks(tasks, sets, recipe.data.text_format),
        settings=recipe.evaluate,
        generation_cache=GenerationCache(out.root / "cache" / "generations"),
    )


def _leak_table(rows: list[dict[str, Any]], benchmark: str) -> str:
    """SrDetection's leakage rate per detector column, in %, with its bootstrap 95% interval."""
    value = {(r["detector"], r["metric"]): r["value"] for r in rows}
    lines = [
        f"SrDetection leakage rate on {benchmark} (leaks among decided samples; bootstrap 95% interval):",
        "| detector | decided | undecided | leaks | leak rate % | 95% CI |",
        "|---|---|---|---|---|---|",
    ]

    def pct(x):
        return "–" if x is None else f"{100 * x:.1f}"

    for d in sorted({r["detector"] for r in rows}):
        low, high = value.get((d, "leak_rate_ci_low")), value.get((d, "leak_rate_ci_high"))
        lines.append(
            f"| {d} | {value[(d, 'n_decided')]:.0f} | {value[(d, 'n_undecided')]:.0f} | "
            f"{value[(d, 'n_leaks')]:.0f} | {pct(value.get((d, 'leak_rate')))} | [{pct(low)}, {pct(high)}] |"
        )
    return "\n".join(lines)


def _audit_table(rows: list[dict[str, Any]]) -> str:
    metrics = ["n", "mean", "std", "p5", "p50", "p95"]
    detectors = sorted({r["detector"] for r in rows})
    value = {(r["detector"], r["metric"]): r["value"] for r in rows}
    lines = ["| detector | " + " | ".join(metrics) + " |", "|---|" + "---|" * len(metrics)]
    for d in detectors:
        cells = ["–" if value.get((d, m)) is None else f"{value[(d, m)]:.4g}" for m in metrics]
        lines.append(f"| {d} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
