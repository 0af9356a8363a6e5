"""Audit: score a model that leaklab did not train on a whole benchmark.

There is no ground truth, so the output is per-sample scores and their distribution per score column
(count, mean, spread, quantiles, a histogram). Rule detectors (SrDetection) decide leak / no leak per
sample without a threshold, so for them the audit gives the benchmark's leakage rate (leaks among
decided samples) with a bootstrap 95% interval (SrDetection §5.3).

    leaklab audit model=Qwen/Qwen2.5-7B benchmark=humaneval detectors=[minkpp,srdetection_gray]

With `clean=C`, a set known not to be in the model's training, there is a comparison after all
(`against_clean`): each score column's AUROC benchmark vs C with its interval, the blind baseline beside
them (a text-only classifier; it warns when the sets differ in their text, which every detector would
pick up too) and dataset inference (a p-value for "the benchmark, as a set, was trained on").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from leaklab.evaluate import load_reference, load_tasks
from leaklab.evaluations.base import float_or_none
from leaklab.recipe import Recipe
from leaklab.rundir import RunDir, write_atomic

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


def clean_set_of(args: list[str]) -> tuple[list[str], str | None]:
    """(the other arguments, the value of `clean=`): the audit's known-clean set, not a recipe key."""
    rest = [a for a in args if not a.startswith("clean=")]
    given = [a.partition("=")[2] for a in args if a.startswith("clean=")]
    return rest, (given[-1] or None) if given else None


def audit_model(recipe: Recipe, log=print, clean: str | None = None) -> Path:
    """Score every task of the recipe's benchmark with its model; write <output_dir>/audit-.../.
    With `clean` (a file or directory in data.benchmark's format, or a benchmark name) the benchmark is
    also tested against that known-clean set (`against_clean`)."""
    from leaklab.detectors import kind_of, needs_of, needs_variants, score_detectors
    from leaklab.detectors.likelihood import REFERENCE
    from leaklab.detectors.srdetection import inputs_from_tasks
    from leaklab.models.load import load_model_and_tokenizer
    from leaklab.recipe import config_hash, to_yaml
    from leaklab.report import plot_histograms
    from leaklab.rundir import environment_info, write_json
    from leaklab.signals.continuations import GenerationCache

    cfg = recipe.evaluate
    specs = list(cfg.detectors)
    if REFERENCE in needs_of(specs) and not cfg.reference_model:
        # An audited model has no base model to compare with; without a named reference, skip `ref`.
        specs = [s for s in specs if REFERENCE not in needs_of([s])]
        skipped = ", ".join(repr(s) for s in cfg.detectors if s not in specs)
        log(f"[leaklab] skipping {skipped}: needs evaluate.reference_model (a hub name or local directory)")
    tasks = load_tasks(recipe)
    if recipe.data.max_samples:
        tasks = tasks[: recipe.data.max_samples]
    clean_tasks = None
    if clean:  # bad input fails before the model loads
        clean_tasks = load_clean_set(recipe, clean)
        check_disjoint(tasks, clean_tasks, recipe.data.text_format)
    model, tokenizer, path = load_model_and_tokenizer(recipe.model, log=log)
    model.eval()
    reference = load_reference(recipe, None) if REFERENCE in needs_of(specs) else None
    slug = Path(path).name if Path(path).exists() else path.replace("/", "--")
    benchmark = recipe.data.name or recipe.data.benchmark  # a user's own file by its own name
    out = RunDir(Path(recipe.output_dir) / f"audit-{slug}-{benchmark}-{config_hash(recipe)}")
    fmt = recipe.data.text_format
    log(f"[leaklab] auditing {path} on {len(tasks)} {benchmark} tasks -> {out.root}")

    rule_inputs = None
    if needs_variants(specs):
        from leaklab.perturb import store

        sets = store.variant_sets_for(tasks, cfg.srdetection, log=log)
        log(store.describe(store.write_run_variants(out.root, sets, tasks, cfg.srdetection.min_variants)))
        rule_inputs = inputs_from_tasks(tasks, sets, fmt)

    def score(specs_, tasks_, rule_inputs_=None):
        """The detectors' scores of `tasks_` (the benchmark or the clean set), one shared generation cache."""
        return score_detectors(
            specs_,
            model,
            tokenizer,
            [t.text(fmt) for t in tasks_],
            prompts=[t.prompt if fmt == "prompt+solution" else "" for t in tasks_],
            rule_inputs=rule_inputs_,
            settings=cfg,
            reference=reference,
            generation_cache=GenerationCache(out.generation_cache),
        )

    scores = score(specs, tasks, rule_inputs)
    write_atomic(out.recipe, to_yaml(recipe))
    write_json(out.root / "environment.json", environment_info())

    records = [{"task_id": task.task_id, **scores.cells(i)} for i, task in enumerate(tasks)]
    write_atomic(out.scores(0, "audit"), "".join(json.dumps(r) + "\n" for r in records))

    base = {"step": 0, "epoch": 0.0, "evaluation": "audit", "benchmark": benchmark}
    rows, leak_rows = [], []
    for column, values in scores.columns.items():
        detector, params = scores.params[column]
        head = {**base, "detector": detector, "params": params, "column": column}
        decisions = scores.decisions.get(column)
        if decisions is None:
            summary = distribution(values)
            rows += [{**head, "metric": k, "value": float_or_none(v)} for k, v in summary.items()]
        else:
            rates = rule_rates(decisions, n_bootstrap=cfg.n_bootstrap, seed=cfg.seed)
            leak_rows += [{**head, "metric": k, "value": float_or_none(v)} for k, v in rates.items()]
    clean_rows = []
    if clean_tasks is not None:
        score_specs = [s for s in specs if kind_of(s) != "rule"]
        clean_scores = score(score_specs, clean_tasks)
        clean_records = [{"task_id": t.task_id, **clean_scores.cells(i)} for i, t in enumerate(clean_tasks)]
        write_atomic(out.scores(0, "audit_clean"), "".join(json.dumps(r) + "\n" for r in clean_records))
        suspect = {c: scores.columns[c] for c in clean_scores.columns}
        texts = ([t.text(fmt) for t in tasks], [t.text(fmt) for t in clean_tasks])
        clean_rows = against_clean(
            suspect, clean_scores.columns, texts, cfg, {**base, "clean_set": clean}, log=log
        )
    out.append_results(rows + leak_rows + clean_rows)
    plot_histograms(scores.columns, out.report)
    if rows:
        log(_audit_table(rows))
    if leak_rows:
        log(_leak_table(leak_rows, benchmark))
    log(f"scores: {out.scores(0, 'audit')}\nplots: {out.report}")
    return out.root


def distribution(values) -> dict[str, float]:
    """Count, undefined count, mean, standard deviation and quantiles of one score column."""
    values = np.asarray(values, dtype=float)
    finite = values[np.isfinite(values)]
    some = len(finite) > 0
    return {
        "n": float(len(values)),
        "n_undefined": float(len(values) - len(finite)),
        "mean": finite.mean() if some else np.nan,
        "std": finite.std() if some else np.nan,
        **{f"p{q}": np.percentile(finite, q) if some else np.nan for q in (5, 25, 50, 75, 95)},
    }


def rule_rates(decisions, *, n_bootstrap: int, seed: int) -> dict[str, float]:
    """A rule's leakage rate (leaks among decided samples, bootstrap interval) beside its null rate: the
    mean over decided samples of 1/(m+1), what the rule flags on data no model saw when each original is
    exchangeable with its m variants; `excess_pvalue`: the chance of at least this many leaks under that
    null. The calibrated rule adds its per-sample p-values' median and how many are <= 0.05."""
    from leaklab.metrics import excess_rate_pvalue, leak_rate

    out = leak_rate(decisions.leak, decisions.decided, n_bootstrap=n_bootstrap, seed=seed)
    null = decisions.null_rate[decisions.decided]
    out["null_rate"] = float(null.mean()) if len(null) else float("nan")
    out["excess_pvalue"] = excess_rate_pvalue(decisions.leak[decisions.decided], null)
    if decisions.pvalue is not None:
        p = decisions.pvalue[decisions.decided]
        out["pvalue_median"] = float(np.median(p)) if len(p) else float("nan")
        out["n_pvalue_le_0.05"] = float((p <= 0.05).sum())
    return out


def _leak_table(rows: list[dict[str, Any]], benchmark: str) -> str:
    """The leakage rate per rule column, in %, with its bootstrap 95% interval, beside the null rate."""
    value = {(r["column"], r["metric"]): r["value"] for r in rows}
    lines = [
        f"SrDetection leakage rate on {benchmark} (leaks among decided samples; bootstrap 95% interval), "
        "beside the rate on data no model saw (null) and the chance of this many leaks under that null:",
        "| detector | decided | undecided | leaks | leak rate % | 95% CI | null rate % | P(>= leaks | null) |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def pct(x):
        return "–" if x is None else f"{100 * x:.1f}"

    for column in dict.fromkeys(r["column"] for r in rows):
        low, high = value.get((column, "leak_rate_ci_low")), value.get((column, "leak_rate_ci_high"))
        excess = value.get((column, "excess_pvalue"))
        lines.append(
            f"| {column} | {value[(column, 'n_decided')]:.0f} | {value[(column, 'n_undecided')]:.0f} | "
            f"{value[(column, 'n_leaks')]:.0f} | {pct(value.get((column, 'leak_rate')))} | "
            f"[{pct(low)}, {pct(high)}] | {pct(value.get((column, 'null_rate')))} | "
            f"{'–' if excess is None else f'{excess:.3g}'} |"
        )
    columns = {r["column"] for r in rows}
    if any(not c.startswith("srdetection_calibrated") for c in columns):
        lines.append(
            "srdetection_gray / _black: the null rate holds only if variants are as likely as originals to a "
            "model that never saw them (measured by analysis/srdetection_null.py); a rate near it is no "
            "evidence of leakage."
        )
    if any(c.startswith("srdetection_calibrated") for c in columns):
        lines.append(
            "srdetection_calibrated: the original's rank among its variants under the model minus under the "
            "reference; exact p-values under exchangeability, whatever the variants' style."
        )
    return "\n".join(lines)


def _audit_table(rows: list[dict[str, Any]]) -> str:
    metrics = ["n", "mean", "std", "p5", "p50", "p95"]
    columns = list(dict.fromkeys(r["column"] for r in rows))
    value = {(r["column"], r["metric"]): r["value"] for r in rows}
    lines = ["| detector | " + " | ".join(metrics) + " |", "|---|" + "---|" * len(metrics)]
    for column in columns:
        cells = ["–" if value.get((column, m)) is None else f"{value[(column, m)]:.4g}" for m in metrics]
        lines.append(f"| {column} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def load_clean_set(recipe: Recipe, clean: str):
    """The known-clean tasks: a local file / directory read in data.benchmark's format, else a benchmark
    name (its own format)."""
    from leaklab.data.benchmarks import load_benchmark

    if Path(clean).exists():
        tasks = load_benchmark(recipe.data.benchmark, label="clean", path=clean)
    else:
        tasks = load_benchmark(clean, label="clean")
    if recipe.data.max_samples:
        tasks = tasks[: recipe.data.max_samples]
    return tasks


def check_disjoint(tasks, clean_tasks, fmt: str) -> None:
    """A sample on both sides would make the sets look alike: a clear error, not a weak test."""
    from leaklab.errors import InputError

    shared = {t.text(fmt) for t in tasks} & {t.text(fmt) for t in clean_tasks}
    if shared:
        raise InputError(
            f"clean=: {len(shared)} of its {len(clean_tasks)} tasks are also in the audited benchmark; "
            "the clean set must hold only tasks the benchmark does not"
        )


def against_clean(suspect, clean, texts, cfg, head, log=print) -> list[dict[str, Any]]:
    """The audited benchmark (suspect) against a known-clean set: every score column's AUROC with its
    bootstrap interval (suspect = positive), the blind baseline beside them (a text-only classifier: above
    AUROC 0.6 the two sets differ in their text and the warning says so), and dataset inference (is the
    suspect set, as a whole, in training? a p-value, with its false-positive rate over random halvings
    of the clean set). Logs the table; returns the rows."""
    from leaklab.dataset_inference import dataset_inference, feature_matrix, null_rejection_rate
    from leaklab.detectors.blind import blind_scores, shift_warning
    from leaklab.metrics import detection_metrics

    n_s, n_c = len(texts[0]), len(texts[1])
    labels = np.r_[np.ones(n_s, int), np.zeros(n_c, int)]
    columns = {c: np.r_[suspect[c], clean[c]] for c in suspect}
    columns["blind"] = blind_scores([*texts[0], *texts[1]], labels, folds=cfg.cv_folds, seed=cfg.seed)
    keep = (
        "n",
        "auroc",
        "auroc_ci_low",
        "auroc_ci_high",
        "tpr@5%fpr",
        "tpr@5%fpr_ci_low",
        "tpr@5%fpr_ci_high",
    )
    rows, auroc = [], {}
    for column, values in columns.items():
        m = detection_metrics(
            values, labels, cv_folds=cfg.cv_folds, seed=cfg.seed, n_bootstrap=cfg.n_bootstrap
        )
        auroc[column] = (m["auroc"], m.get("auroc_ci_low"), m.get("auroc_ci_high"))
        # `<metric>_vs_clean` and its `_ci_low` / `_ci_high`, the interval naming every report reads.
        metrics = {
            k.replace("_ci_", "_vs_clean_ci_") if "_ci_" in k else f"{k}_vs_clean": m[k]
            for k in keep
            if k in m
        }
        if column == "blind":
            metrics["distribution_shift"] = float(bool(shift_warning(m["auroc"], "")))
        rows += [
            {
                **head,
                "detector": column,
                "params": {},
                "column": column,
                "metric": k,
                "value": float_or_none(v),
            }
            for k, v in metrics.items()
        ]
    inference = {}
    if suspect and min(n_s, n_c) >= 4:
        result = dataset_inference(
            feature_matrix(suspect, np.arange(n_s)), feature_matrix(clean, np.arange(n_c)),
            features=list(suspect), seed=cfg.seed,
        )  # fmt: skip
        inference = {
            **result.as_metrics(),
            **null_rejection_rate(feature_matrix(clean, np.arange(n_c)), seed=cfg.seed),
        }
        rows += [
            {**head, "detector": "dataset_inference", "params": {"features": list(suspect)},
             "column": "dataset_inference", "metric": k, "value": float_or_none(v)}
            for k, v in inference.items()
        ]  # fmt: skip

    lines = [
        f"{head['benchmark']} ({n_s} tasks) against the clean set {head['clean_set']} ({n_c} tasks):",
        "| detector | AUROC suspect vs clean | 95% CI |",
        "|---|---|---|",
    ]
    for column, (v, low, high) in auroc.items():
        shown = "–" if v is None or np.isnan(v) else f"{v:.3f}"
        ci = "–" if low is None or np.isnan(low) else f"[{low:.2f}, {high:.2f}]"
        lines.append(f"| {'blind baseline (text only)' if column == 'blind' else column} | {shown} | {ci} |")
    if inference:
        lines.append(
            f"dataset inference (is {head['benchmark']} in training?): p = {inference['p_value']:.3g} "
            f"(one-sided Welch t = {inference['t']:.2f}); the same test on halvings of the clean set rejected "
            f"{inference['null_rejection_rate']:.0%} at alpha {inference['null_alpha']:g}"
        )
    else:
        lines.append("dataset inference: not run (needs score detectors and at least 4 tasks per set)")
    warning = shift_warning(auroc["blind"][0], f"{head['benchmark']} from the clean set")
    if warning:
        lines.append(warning)
    log("\n".join(lines))
    return rows
