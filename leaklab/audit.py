"""Audit: score a model that leaklab did not train on a whole benchmark.

    leaklab audit model=Qwen/Qwen2.5-7B benchmark=humaneval detectors=[minkpp,srdetection_gray]

With no ground truth the output is each score column's distribution, and each rule detector's leakage
rate with a bootstrap 95% interval (SrDetection §5.3). With `clean=C`, a set known not to be in the
model's training, the benchmark is also tested against C (`against_clean`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from leaklab.data.benchmarks import load_benchmark
from leaklab.dataset_inference import dataset_inference, feature_matrix, null_rejection_rate
from leaklab.dataset_tests.rows import (
    dataset_test_rows_vs_clean,
    file_order_rows,
    sharded_verdict,
    verdict_sentences,
)
from leaklab.detectors import needs_of, needs_variants, score_detectors
from leaklab.detectors.inputs import ModelInputs
from leaklab.detectors.likelihood import REFERENCE
from leaklab.detectors.srdetection import clean_null_against_set, inputs_from_tasks
from leaklab.errors import InputError
from leaklab.evaluate import load_reference, load_tasks
from leaklab.metrics import detection_metrics, leak_rate, two_rate_pvalue
from leaklab.plugins import AuditRates
from leaklab.recipe import Recipe, config_hash, to_yaml
from leaklab.report import plot_histograms
from leaklab.report.tables import markdown_table
from leaklab.rows import metric_rows
from leaklab.rundir import RunDir, environment_info, text_sha256, write_atomic, write_json

AUDIT_ALIASES = {
    "model": "model.name_or_path",
    "benchmark": "data.benchmark",
    "detectors": "evaluate.detectors",
    "dataset_tests": "evaluate.dataset_tests",
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
    from leaklab.models.load import load_model_and_tokenizer
    from leaklab.signals.continuations import GenerationCache

    cfg = recipe.evaluate
    specs = audit_specs(cfg, clean, log)
    tasks, clean_tasks = _audit_tasks(recipe, clean)  # bad input fails before the model loads
    model, tokenizer, path = load_model_and_tokenizer(recipe.model, log=log)
    model.eval()
    reference = load_reference(recipe, None) if REFERENCE in needs_of(specs) else None
    benchmark = recipe.data.name or recipe.data.benchmark  # a user's own file by its own name
    out = _audit_folder(recipe, path, benchmark, clean)
    fmt = recipe.data.text_format
    log(f"[leaklab] auditing {path} on {len(tasks)} {benchmark} tasks -> {out.root}")

    rule_inputs = None
    if needs_variants(specs):
        from leaklab.perturb import store

        sets = store.variant_sets_for(tasks, cfg.srdetection, log=log)
        sr_required = cfg.srdetection.min_variants or cfg.srdetection.n_variants  # undecided below it
        log(store.describe(store.write_run_variants(out.root, sets, tasks, sr_required)))
        rule_inputs = inputs_from_tasks(tasks, sets, fmt)

    def score(specs_, tasks_, rule_inputs_=None, known_clean=None):
        """The detectors' scores of `tasks_` (the benchmark or the clean set), one shared generation cache."""
        inputs = ModelInputs(
            model,
            tokenizer,
            [t.text(fmt) for t in tasks_],
            prompts=[t.prompt if fmt == "prompt+solution" else "" for t in tasks_],
            settings=cfg,
            rule_inputs=rule_inputs_,
            generation_cache=GenerationCache(out.generation_cache),
            reference=reference,
            known_clean=known_clean,
        )
        return score_detectors(specs_, inputs)

    scores = score(specs, tasks, rule_inputs)
    clean_scores = None
    if clean_tasks is not None:
        clean_rule_inputs = None
        if rule_inputs is not None:
            # The rules run on the clean set too: its measured flag rate is their null (`vs_clean_pvalue`),
            # where 1/(n+1) holds only if variants are as likely as originals to a model that never saw them.
            clean_sets = store.variant_sets_for(clean_tasks, cfg.srdetection, log=log)
            clean_rule_inputs = inputs_from_tasks(clean_tasks, clean_sets, fmt)
        # Every clean sample is known clean: srdetection_clean_null decides them cross-fitted (their flag
        # rate its measured false-positive rate) and the benchmark against all of them.
        known = np.ones(len(clean_tasks), dtype=bool)
        clean_scores = score(specs, clean_tasks, clean_rule_inputs, known_clean=known)
        clean_null_against_clean_set(scores, clean_scores)
    write_atomic(out.recipe, to_yaml(recipe))
    write_json(out.root / "environment.json", environment_info())
    _write_scores(out.scores(0, "audit"), tasks, scores)
    base = {"step": 0, "epoch": 0.0, "evaluation": "audit", "benchmark": benchmark}
    rows, leak_rows = _score_rows(scores, base, cfg)
    if "sharded_likelihood" in cfg.dataset_tests:
        rows += [{**base, **r} for r in _order_rows(model, tokenizer, tasks, clean_tasks or [], cfg)]
    clean_rows = []
    if clean_scores is not None:
        _write_scores(out.scores(0, "audit_clean"), clean_tasks, clean_scores)
        texts = ([t.text(fmt) for t in tasks], [t.text(fmt) for t in clean_tasks])
        leak_rows, clean_rows = _clean_set_rows(
            scores, clean_scores, leak_rows, texts, cfg, {**base, "clean_set": clean}, log
        )
    tested = {
        "model": str(path),
        "benchmark": benchmark,
        "n_tasks": len(tasks),
        "detectors": specs,
        "clean": clean,
        "n_clean": len(clean_tasks) if clean_tasks is not None else 0,
    }
    _write_audit(out, scores, (rows, leak_rows, clean_rows), tested, log)
    return out.root


def _order_rows(model, tokenizer, tasks: list, clean_tasks: list, cfg) -> list[dict[str, Any]]:
    """The sharded likelihood test on the benchmark's records in its own order and on the clean set's in
    theirs: on exchangeable data (the clean set) its p-value is uniform, the baseline for the benchmark's."""
    labels = np.r_[np.ones(len(tasks)), np.zeros(len(clean_tasks))]
    return file_order_rows(model, tokenizer, [*tasks, *clean_tasks], labels, seed=cfg.seed, settings=cfg)


def _write_scores(path: Path, tasks: list, scores) -> None:
    """Per-sample scores, one {"task_id", column: score, ...} a line."""
    records = [{"task_id": task.task_id, **scores.cells(i)} for i, task in enumerate(tasks)]
    write_atomic(path, "".join(json.dumps(r) + "\n" for r in records))


def _audit_tasks(recipe: Recipe, clean: str | None) -> tuple[list, list | None]:
    """(the benchmark's tasks and the clean set's, checked disjoint, or None; each at most data.max_samples)."""
    most = recipe.data.max_samples or None
    tasks = load_tasks(recipe)[:most]
    clean_tasks = load_clean_set(recipe, clean)[:most] if clean else None
    if clean_tasks is not None:
        check_disjoint(tasks, clean_tasks, recipe.data.text_format)
    return tasks, clean_tasks


def _audit_folder(recipe: Recipe, path: str, benchmark: str, clean: str | None) -> RunDir:
    """<output_dir>/audit-<model>-<benchmark>[-vs-<clean set>]-<settings hash>."""
    slug = Path(path).name if Path(path).exists() else path.replace("/", "--")
    against = f"-vs-{clean_slug(clean)}" if clean else ""
    return RunDir(Path(recipe.output_dir) / f"audit-{slug}-{benchmark}{against}-{config_hash(recipe)}")


def _write_audit(out: RunDir, scores, row_groups: tuple[list, list, list], tested: dict, log) -> None:
    """results.jsonl, the histograms, the tables and verdict.md of a finished audit."""
    rows, leak_rows, clean_rows = row_groups
    # An audit is one finished measurement: its rows replace a previous audit's in the same folder (same
    # model, benchmark, clean set and settings), so no row of another audit stays behind.
    all_rows = rows + leak_rows + clean_rows
    write_atomic(out.results, "".join(json.dumps(r, default=str) + "\n" for r in all_rows))
    plot_histograms(scores.columns, out.report)
    if rows:
        log(_audit_table(rows))
    if leak_rows:
        log(_leak_table(leak_rows, tested["benchmark"]))
    summary = verdict(all_rows, tested)
    write_atomic(out.root / "verdict.md", summary + "\n")
    log(f"scores: {out.scores(0, 'audit')}\nplots: {out.report}")
    log(f"\nVerdict ({out.root / 'verdict.md'}):\n{summary}")


def audit_specs(cfg, clean: str | None, log) -> list[str]:
    """The detectors an audit runs: evaluate.detectors less those it cannot run (no reference model, no
    clean set), plus the calibrated rule beside the raw ones when a reference model gives it a null."""
    specs = list(cfg.detectors)
    if REFERENCE in needs_of(specs) and not cfg.reference_model:
        # An audited model has no base model to compare with; without a named reference, skip `ref`.
        specs = [s for s in specs if REFERENCE not in needs_of([s])]
        skipped = ", ".join(repr(s) for s in cfg.detectors if s not in specs)
        log(f"[leaklab] skipping {skipped}: needs evaluate.reference_model (a hub name or local directory)")
    if not clean and any(s.startswith("srdetection_clean_null") for s in specs):
        # Its null is measured on a clean set under the same model: without one it decides nothing.
        log(f"[leaklab] skipping {', '.join(repr(s) for s in specs if s.startswith('srdetection_clean_null'))}: "
            "needs clean= (a set known not to be in the model's training)")  # fmt: skip
        specs = [s for s in specs if not s.startswith("srdetection_clean_null")]
    raw_rules = [s for s in specs if s.startswith(("srdetection_gray", "srdetection_black"))]
    if raw_rules and cfg.reference_model and not any(s.startswith("srdetection_calibrated") for s in specs):
        # A raw rule's rate has no measured null; with a reference model the calibrated rule gives one.
        specs.append("srdetection_calibrated")
        log(f"[leaklab] adding srdetection_calibrated beside {', '.join(raw_rules)}: the raw rules' null "
            "1/(n+1) is not measured, the calibrated rule's p-values are exact against the reference model")  # fmt: skip
    return specs


def _score_rows(scores, base: dict, cfg) -> tuple[list[dict], list[dict]]:
    """(each score column's distribution rows, each rule column's flag-rate rows)."""
    rows, leak_rows = [], []
    for column, values in scores.columns.items():
        detector, params = scores.params[column]
        head = {"detector": detector, "params": params, "context": base}
        decisions = scores.decisions.get(column)
        if decisions is None:
            rows += metric_rows(distribution(values), column, **head)
        else:
            rates = rule_rates(scores.rules[column], decisions, n_bootstrap=cfg.n_bootstrap, seed=cfg.seed)
            leak_rows += metric_rows(rates, column, **head)
    return rows, leak_rows


def _clean_set_rows(
    scores, clean_scores, leak_rows: list[dict], texts, cfg, base: dict, log
) -> tuple[list, list]:
    """(the rule rows with each rule's test against the clean set added, the score columns' rows against
    the clean set)."""
    heads = [row for row in leak_rows if row["metric"] == "n_decided"]  # one per rule column
    for head in heads:
        column = head["column"]
        leak_rows = leak_rows + rule_vs_clean(scores.decisions[column], clean_scores.decisions[column], head)
    score_columns = [c for c in clean_scores.columns if c not in clean_scores.decisions]
    suspect = {c: scores.columns[c] for c in score_columns}
    clean_rows = against_clean(
        suspect, {c: clean_scores.columns[c] for c in score_columns}, texts, cfg, base, log=log
    )
    return leak_rows, clean_rows


def clean_slug(clean: str) -> str:
    """The clean set in the audit folder's name: its file or benchmark name and a short hash of where it
    is, so two clean sets never share a folder."""
    where = str(Path(clean).resolve()) if Path(clean).exists() else clean
    name = Path(clean).stem if Path(clean).exists() else clean
    return f"{name.replace('/', '--')}-{text_sha256(where)[:8]}"


def verdict(rows: list[dict[str, Any]], tested: dict[str, Any]) -> str:
    """One paragraph: what was tested, the evidence (only what has a stated error rate) and what the audit
    does not show. See docs/evaluations.md#an-audits-verdict."""
    value = {(r.get("column"), r["metric"]): r.get("value") for r in rows}
    columns = list(dict.fromkeys(r.get("column") for r in rows))
    against = (
        f", against the clean set {tested['clean']} ({tested['n_clean']} tasks)" if tested["clean"] else ""
    )
    parts = [
        f"Tested: {tested['model']} on {tested['n_tasks']} {tested['benchmark']} tasks with "
        f"{', '.join(tested['detectors'])}{against}."
    ]
    parts += _dataset_inference_verdict(value, columns)
    if value.get(("blind", "distribution_shift")) == 1.0:
        parts.append(
            f"The blind baseline tells the two sets apart by their text alone (AUROC "
            f"{value.get(('blind', 'auroc_vs_clean')) or float('nan'):.3f}): any difference above may be the "
            "texts' difference rather than training."
        )
    parts += verdict_sentences(value)  # the other dataset-level tests (codec, pacost) when computed
    parts += sharded_verdict(rows)
    parts += _rule_verdicts(value, columns)
    if not tested["clean"] and not any(c.startswith("srdetection_calibrated") for c in columns):
        parts.append(
            "Without a clean set (clean=) or a calibrated rule (srdetection_calibrated with "
            "evaluate.reference_model), no test of membership was made: score distributions alone cannot "
            "show leakage."
        )
    parts.append(
        "Not shown: which tasks were trained on (per-task scores are not decisions), or whether the exposure "
        "came from the benchmark itself or from text like it (copies, translations, paraphrases)."
    )
    return " ".join(parts)


def _dataset_inference_verdict(value: dict, columns: list) -> list[str]:
    """Dataset inference against the clean set: its p-value, its measured false-positive rate, and what
    they show given the direction of the AUROCs."""
    parts: list[str] = []
    p_value = value.get(("dataset_inference", "p_value"))
    aurocs = {
        c: value[(c, "auroc_vs_clean")]
        for c in columns
        if c not in ("blind", "dataset_inference") and value.get((c, "auroc_vs_clean")) is not None
    }
    if p_value is None:
        return parts
    alpha = value.get(("dataset_inference", "null_alpha")) or 0.05
    false_positives = value.get(("dataset_inference", "null_rejection_rate"))
    fp = "not measured" if false_positives is None else f"{false_positives:.2f}"
    above = sum(v > 0.5 for v in aurocs.values())
    shown = ", ".join(f"{c} {v:.3f}" for c, v in aurocs.items())
    parts.append(
        f"Dataset inference (is the benchmark, as a set, scored as trained on?): p = {p_value:.3g}, with a "
        f"false-positive rate of {fp} at α = {alpha:g} on halvings of the clean set; AUROC benchmark vs "
        f"clean: {shown or 'none'}."
    )
    if false_positives is not None and false_positives > 2 * alpha:
        parts.append(
            "The test rejected too often on the clean set alone, so its p-value is not reliable here."
        )
    elif p_value < alpha and above > len(aurocs) / 2:
        parts.append(
            "This is evidence that the model treats the benchmark as more familiar than the clean set."
        )
    elif p_value < alpha:
        parts.append(
            "The sets differ, but the benchmark looks less member-like than the clean set (most AUROCs "
            "below 0.5): a distribution difference between the sets, not evidence of leakage."
        )
    else:
        parts.append("No evidence at this sample size that the benchmark as a set was trained on.")
    return parts


def _rule_verdicts(value: dict, columns: list) -> list[str]:
    """Each rule column's flag rate, read by what its null is: exact (calibrated), measured on the clean
    set, or nominal (uncalibrated: one caveat for all of them)."""
    parts: list[str] = []
    uncalibrated: list[str] = []
    for c in columns:
        rate, decided = value.get((c, "leak_rate")), value.get((c, "n_decided"))
        if rate is None or not decided:
            continue
        excess = value.get((c, "excess_pvalue"))
        chance = "–" if excess is None else f"{excess:.3g}"
        if c.startswith("srdetection_calibrated"):
            parts.append(
                f"{c} flagged {value.get((c, 'n_leaks')) or 0:.0f} of {decided:.0f} decided tasks "
                f"({100 * rate:.1f}%; chance of this many with no leakage {chance}, exact under "
                "exchangeability of each original with its variants)."
            )
        elif value.get((c, "vs_clean_pvalue")) is not None:
            p_clean = value[(c, "vs_clean_pvalue")]
            clean_rate = value.get((c, "clean_leak_rate"))
            finding = (
                "evidence that the model prefers the benchmark's originals over their variants more than it "
                "does on the clean set"
                if p_clean < 0.05
                else "no evidence at this sample size that the benchmark is flagged more often than the clean set"
            )
            parts.append(
                f"{c} flagged {100 * rate:.1f}% of {decided:.0f} decided benchmark tasks and "
                f"{100 * clean_rate:.1f}% of {value.get((c, 'clean_n_decided')) or 0:.0f} decided clean tasks "
                f"(one-sided Fisher exact p = {p_clean:.3g}): {finding}."
            )
        else:
            uncalibrated.append(
                f"{c} flagged {100 * rate:.1f}% of {decided:.0f} decided tasks against a nominal null of "
                f"{100 * (value.get((c, 'null_rate')) or float('nan')):.1f}%"
            )
    if uncalibrated:  # one caveat for them all, not one per n
        parts.append(
            "; ".join(uncalibrated) + ". Uncalibrated: each null holds only if the variants are as likely as "
            "the originals to a model that never saw them, which this audit did not measure; not evidence "
            "on its own."
        )
    return parts


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


def rule_rates(detector, decisions, *, n_bootstrap: int, seed: int) -> dict[str, float]:
    """A rule's leakage rate on an unlabelled benchmark (leaks among decided samples, bootstrap interval),
    plus whatever the rule itself reports there (`plugins.AuditRates`: SrDetection's null rate beside it).
    Reads only the decisions' `leak` and `decided`, so any rule detector is audited."""
    out = leak_rate(decisions.leak, decisions.decided, n_bootstrap=n_bootstrap, seed=seed)
    if isinstance(detector, AuditRates):
        out.update(detector.audit_rates(decisions, n_bootstrap=n_bootstrap, seed=seed))
    return out


def clean_null_against_clean_set(scores, clean_scores) -> None:
    """srdetection_clean_null's benchmark decisions, in place: each raw margin against the (1 - alpha)
    quantile of the clean set's margins under the same model (`srdetection.clean_null_against_set`)."""
    for column, decisions in list(scores.decisions.items()):
        detector, params = scores.params[column]
        if detector == "srdetection_clean_null" and column in clean_scores.columns:
            scores.decisions[column] = clean_null_against_set(
                decisions, clean_scores.columns[column], params["alpha"]
            )


def rule_vs_clean(decisions, clean_decisions, head: dict[str, Any]) -> list[dict[str, Any]]:
    """A rule's flag rate on the clean set beside the benchmark's, and the exact one-sided test that the
    benchmark's is higher (`two_rate_pvalue`): the comparison a raw rule's rate needs, since its nominal
    null 1/(n+1) fails on code whose variants the model finds likelier than the originals."""
    n, n_clean = int(np.sum(decisions.decided)), int(np.sum(clean_decisions.decided))
    # `leak` is False where undecided: its sum counts the decided samples flagged.
    flagged, flagged_clean = int(np.sum(decisions.leak)), int(np.sum(clean_decisions.leak))
    values = {
        "clean_n_decided": float(n_clean),
        "clean_n_leaks": float(flagged_clean),
        "clean_leak_rate": flagged_clean / n_clean if n_clean else float("nan"),
        "vs_clean_pvalue": two_rate_pvalue(flagged, n, flagged_clean, n_clean),
    }
    context = {k: v for k, v in head.items() if k not in ("detector", "params", "column", "metric", "value")}
    return metric_rows(
        values, head["column"], detector=head.get("detector"), params=head.get("params"), context=context
    )


def _leak_table(rows: list[dict[str, Any]], benchmark: str) -> str:
    """The leakage rate per rule column, in %, with its bootstrap 95% interval, beside the null rate."""
    value = {(r["column"], r["metric"]): r["value"] for r in rows}
    lines = [
        f"Rule detectors' leakage rate on {benchmark} (leaks among decided samples; bootstrap 95% interval), "
        "beside the rate on data no model saw (null) and the chance of this many leaks under that null:",
        "| detector | decided | undecided | leaks | leak rate % | 95% CI | null rate % | P(>= leaks | null) |"
        " clean rate % | P(rate > clean) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def pct(x):
        return "–" if x is None else f"{100 * x:.1f}"

    def pval(x):
        return "–" if x is None else f"{x:.3g}"

    for column in dict.fromkeys(r["column"] for r in rows):
        low, high = value.get((column, "leak_rate_ci_low")), value.get((column, "leak_rate_ci_high"))
        excess = value.get((column, "excess_pvalue"))
        lines.append(
            f"| {column} | {value[(column, 'n_decided')]:.0f} | {value[(column, 'n_undecided')]:.0f} | "
            f"{value[(column, 'n_leaks')]:.0f} | {pct(value.get((column, 'leak_rate')))} | "
            f"[{pct(low)}, {pct(high)}] | {pct(value.get((column, 'null_rate')))} | "
            f"{pval(excess)} | {pct(value.get((column, 'clean_leak_rate')))} | "
            f"{pval(value.get((column, 'vs_clean_pvalue')))} |"
        )
    columns = {r["column"] for r in rows}
    if any(c.startswith(("srdetection_gray", "srdetection_black")) for c in columns):
        lines.append(
            "srdetection_gray / _black: the null rate holds only if variants are as likely as originals to a "
            "model that never saw them (measured by analysis/srdetection_null.py); a rate near it is no "
            "evidence of leakage. With clean=, the clean set's rate under the same model is the null instead "
            "(one-sided Fisher exact test)."
        )
    if any(c.startswith("srdetection_clean_null") for c in columns):
        lines.append(
            "srdetection_clean_null: leak iff the raw margin exceeds the (1 - alpha) quantile of the clean set's "
            "margins under the same model (null rate: alpha); the clean set's own rate is cross-fitted."
        )
    if any(c.startswith("srdetection_calibrated") for c in columns):
        lines.append(
            "srdetection_calibrated: the original's rank among its variants under the model minus under the "
            "reference; exact p-values under exchangeability, whatever the variants' style."
        )
    return "\n".join(lines)


def _audit_table(rows: list[dict[str, Any]]) -> str:
    metrics = ["n", "mean", "std", "p5", "p50", "p95"]
    value = {(r["column"], r["metric"]): r["value"] for r in rows}
    body = [
        [column, *("–" if value.get((column, m)) is None else f"{value[(column, m)]:.4g}" for m in metrics)]
        for column in dict.fromkeys(r["column"] for r in rows)
    ]
    return markdown_table(["detector", *metrics], body).rstrip("\n")


def load_clean_set(recipe: Recipe, clean: str):
    """The known-clean tasks: a local file / directory read in data.benchmark's format, else a benchmark
    name (its own format)."""
    if Path(clean).exists():
        return load_benchmark(recipe.data.benchmark, label="clean", path=clean)
    return load_benchmark(clean, label="clean")


def check_disjoint(tasks, clean_tasks, fmt: str) -> None:
    """A sample on both sides would make the sets look alike: a clear error, not a weak test."""
    shared = {t.text(fmt) for t in tasks} & {t.text(fmt) for t in clean_tasks}
    if shared:
        raise InputError(
            f"clean=: {len(shared)} of its {len(clean_tasks)} tasks are also in the audited benchmark; "
            "the clean set must hold only tasks the benchmark does not"
        )


def against_clean(suspect, clean, texts, cfg, head, log=print) -> list[dict[str, Any]]:
    """The audited benchmark (suspect) against a known-clean set: every score column's AUROC (suspect =
    positive), the blind baseline beside them (a warning when the sets differ in their text alone), and
    dataset inference with its false-positive rate on halvings of the clean set. Logs the table; returns
    the rows."""
    from leaklab.detectors.blind import blind_scores, shift_pvalue, shift_warning

    n_s, n_c = len(texts[0]), len(texts[1])
    labels = np.r_[np.ones(n_s, int), np.zeros(n_c, int)]
    columns = {c: np.r_[suspect[c], clean[c]] for c in suspect}
    blind_texts = [*texts[0], *texts[1]]
    columns["blind"] = blind_scores(blind_texts, labels, folds=cfg.cv_folds, seed=cfg.seed)
    shift_p = shift_pvalue(blind_texts, labels, folds=cfg.cv_folds, seed=cfg.seed, scores=columns["blind"])
    keep = ["n", *(m + tail for m in ("auroc", "tpr@5%fpr") for tail in ("", "_ci_low", "_ci_high"))]
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
            metrics["shift_p_value_vs_clean"] = shift_p
            metrics["distribution_shift"] = float(bool(shift_warning(shift_p, m["auroc"], "")))
        rows += metric_rows(metrics, column, detector=column, params={}, context=head)
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
        rows += metric_rows(
            inference,
            "dataset_inference",
            detector="dataset_inference",
            params={"features": list(suspect)},
            context=head,
        )
    rows += [{**head, **r} for r in dataset_test_rows_vs_clean(suspect, clean, seed=cfg.seed)]

    log(_clean_table(head, (n_s, n_c), auroc, inference, shift_p))
    return rows


def _clean_table(head: dict, sizes: tuple[int, int], auroc: dict, inference: dict, shift_p: float) -> str:
    """The log's table of `against_clean`: AUROC suspect vs clean per column, dataset inference, and the
    blind baseline's warning when the sets differ in their text."""
    from leaklab.detectors.blind import shift_warning

    n_s, n_c = sizes
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
    warning = shift_warning(shift_p, auroc["blind"][0], f"{head['benchmark']} from the clean set")
    if warning:
        lines.append(warning)
    return "\n".join(lines)
