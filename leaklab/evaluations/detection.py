"""Detection: every detector of the recipe on every checkpoint, scored against the manifest (the rows:
docs/detectors.md#metrics).

A rule's margin is also scored as a score column (`results.margin_column`): after training on half a
benchmark a raw rule flags most non-members too, while its margin still ranks members first. Beside the
detectors stand the rigour checks of
docs/detectors.md#blind-baseline-and-dataset-inference-rigour-checks-in-every-detection-evaluation.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from leaklab.dataset_inference import dataset_inference, feature_matrix, null_rejection_rate
from leaklab.dataset_tests.rows import dataset_test_rows
from leaklab.dataset_tests.rows import file_order_rows as dataset_file_order_rows
from leaklab.detectors import needs_of, needs_variants, score_detectors
from leaklab.detectors.blind import blind_scores, shift_pvalue, shift_warning
from leaklab.detectors.inputs import ModelInputs
from leaklab.detectors.likelihood import REFERENCE
from leaklab.detectors.srdetection import inputs_from_tasks
from leaklab.evaluations.base import EvalContext, EvalOutput
from leaklab.metrics import detection_metrics, flag_rates
from leaklab.perturb import store
from leaklab.results import MARGIN, is_rule, margin_column, rows_per_dose, rows_per_form, without_dose
from leaklab.rows import float_or_none, metric_rows

BLIND = "blind"  # the blind baseline's column (leaklab.detectors.blind.NAME)
DATASET_INFERENCE = "dataset_inference"


def dataset_inference_rows(columns: dict[str, Any], labels, *, seed: int = 0) -> list[dict[str, Any]]:
    """Dataset inference (leaklab.dataset_inference) of the members against the non-members from every
    score column: the p-value, t, df and test-half sizes, and the test's rejection rate at 0.05 over 100
    random halvings of the non-members (clean vs clean: should be about 0.05 or less)."""
    y = np.asarray(labels).astype(bool)
    if not columns:
        return []
    members = feature_matrix(columns, np.flatnonzero(y))
    clean = feature_matrix(columns, np.flatnonzero(~y))
    try:
        result = dataset_inference(members, clean, features=list(columns), seed=seed)
    except ValueError:  # too few samples on a side: no test, said by its absence
        return []
    metrics = {**result.as_metrics(), **null_rejection_rate(clean, seed=seed)}
    metrics["n_features"] = float(len(columns))
    return metric_rows(
        metrics, DATASET_INFERENCE, detector=DATASET_INFERENCE, params={"features": list(columns)}
    )


def rule_detector_metrics(detector, decisions, labels, n_bootstrap: int, seed: int) -> dict[str, float]:
    """A rule detector's own `metrics`, with both flag rates (`metrics.flag_rates`) added when they lack
    them: every rule shows its error rate on members and on non-members."""
    metrics = dict(detector.metrics(decisions, labels, n_bootstrap=n_bootstrap, seed=seed))
    if "flag_rate_members" not in metrics:
        metrics.update(flag_rates(decisions.leak, labels, n_bootstrap=n_bootstrap, seed=seed))
    return metrics


def margin_score_rows(column: str, detector: str, params, margin, labels, cfg) -> list[dict[str, Any]]:
    """A rule column's margin scored as a score detector's column is (`detection_metrics`, the same
    cross-validation folds and bootstrap as ppl's), under `margin_column(column)`; an undecided sample
    (NaN margin) ranks lowest, as a NaN score does."""
    metrics = detection_metrics(
        margin, labels, cv_folds=cfg.cv_folds, seed=cfg.seed, n_bootstrap=cfg.n_bootstrap
    )
    return metric_rows(metrics, margin_column(column), detector=margin_column(detector), params=params)


def column_rows(scores, labels, cfg, index=None) -> list[dict[str, Any]]:
    """The metric rows of every detector column on the samples `index` (all when None): score columns
    by `metrics.detection_metrics`, rule columns by the rule's own `metrics` (with both flag rates)."""
    rows = []
    for column, values in scores.columns.items():
        detector, params = scores.params[column]
        if column in scores.decisions:
            decisions = scores.decisions[column]
            if index is not None:
                decisions = subset_decisions(decisions, index, len(labels))
                if decisions is None:  # a plug-in's decisions this cannot take apart: no rows
                    continue
            metrics = rule_detector_metrics(
                scores.rules[column], decisions, pick(labels, index), cfg.n_bootstrap, cfg.seed
            )
        else:
            metrics = detection_metrics(
                pick(values, index),
                pick(labels, index),
                cv_folds=cfg.cv_folds,
                seed=cfg.seed,
                n_bootstrap=cfg.n_bootstrap,
            )
        rows += metric_rows(metrics, column, detector=detector, params=params)
        if column in scores.decisions:
            rows += margin_score_rows(column, detector, params, pick(values, index), pick(labels, index), cfg)
    return rows


def pick(values, index):
    return values if index is None else np.asarray(values)[index]


def subset_decisions(decisions, index, n_samples: int):
    """A rule's per-sample decisions (a dataclass of per-sample arrays, e.g. SrDetection's `Decisions`)
    on the samples `index`; None when they are not such a dataclass."""
    if not dataclasses.is_dataclass(decisions):
        return None
    changes = {}
    for f in dataclasses.fields(decisions):
        value = getattr(decisions, f.name)
        if isinstance(value, np.ndarray) and value.shape[:1] == (n_samples,):
            changes[f.name] = value[index]
    return dataclasses.replace(decisions, **changes)


def group_rows(scores, labels, cfg):
    """Every column's metric rows on one group's members (an index) against all the non-members: what
    `rows_per_dose` and `rows_per_form` compute per group."""
    return lambda index: column_rows(scores, labels, cfg, np.asarray(index))


def file_order_rows(ctx: EvalContext, model, tokenizer) -> list[dict[str, Any]]:
    """`evaluate.dataset_tests: [sharded_likelihood]`: the test on the members' and on the non-members'
    records of the benchmark's JSONL file, in the benchmark's order (`dataset_tests.rows.file_order_rows`),
    so a model trained on that file (`inject.form: file`) sees its canonical order here."""
    eval_set, cfg = ctx.eval_set, ctx.recipe.evaluate
    order = np.argsort(eval_set.positions, kind="stable")
    engine = {"settings": cfg, "accelerator": ctx.accelerator, "cache": ctx.signal_cache}
    return dataset_file_order_rows(
        model, tokenizer, [eval_set.tasks[i] for i in order], np.asarray(eval_set.labels)[order],
        seed=cfg.seed, **engine,
    )  # fmt: skip


class Detection:
    name: ClassVar[str] = "detection"

    def __init__(self) -> None:
        self.variant_sets: list[Any] | None = None
        self.blind_scores = None
        self.shift_p_value = float("nan")
        self.warned = False

    def specs(self, recipe) -> list[str]:
        return sorted(recipe.evaluate.detectors)

    def runs_tests(self, recipe) -> str | None:
        """Variants verified by the benchmark's tests (`verify: tests`) run them; alpha and none do not."""
        if needs_variants(recipe.evaluate.detectors) and recipe.evaluate.srdetection.verify == "tests":
            return "evaluate.srdetection.verify: tests (alpha or none verify variants without tests)"
        return None

    def narrow(self, recipe, done: set[str]):
        """The recipe with only the detectors not done yet (their rows and per-sample columns are added;
        the blind baseline's and dataset inference's rows, already written, are kept as they are)."""
        todo = [spec for spec in recipe.evaluate.detectors if spec not in done]
        return dataclasses.replace(recipe, evaluate=dataclasses.replace(recipe.evaluate, detectors=todo))

    def prepare(self, ctx: EvalContext) -> None:
        if not needs_variants(ctx.recipe.evaluate.detectors) or self.variant_sets is not None:
            return
        tasks = ctx.eval_set.tasks
        sets = store.read_run_variants(ctx.run.root, tasks)
        if sets is None:
            cfg = ctx.recipe.evaluate.srdetection
            sets = store.variant_sets_for(tasks, cfg, log=ctx.log)
            required = cfg.min_variants or cfg.n_variants  # a task with fewer is undecided at the top n
            if ctx.is_main_process:
                ctx.log(store.describe(store.write_run_variants(ctx.run.root, sets, tasks, required)))
        self.variant_sets = sets

    def evaluate(self, ctx: EvalContext, model, tokenizer, step: int) -> EvalOutput:
        cfg, data = ctx.recipe.evaluate, ctx.recipe.data
        eval_set = ctx.eval_set
        rule_inputs = None
        if self.variant_sets is not None:
            rule_inputs = inputs_from_tasks(eval_set.tasks, self.variant_sets, data.text_format)
        inputs = ModelInputs(
            model,
            tokenizer,
            list(eval_set.texts),
            prompts=list(eval_set.prompts),
            settings=cfg,
            rule_inputs=rule_inputs,
            accelerator=ctx.accelerator,
            cache=ctx.signal_cache,
            generation_cache=ctx.generation_cache,
            reference=ctx.reference() if REFERENCE in needs_of(cfg.detectors) else None,
            # The non-members are the clean samples whose margins measure srdetection_clean_null's null.
            known_clean=~np.asarray(eval_set.labels).astype(bool),
        )
        scores = score_detectors(cfg.detectors, inputs)
        order_rows = (
            file_order_rows(ctx, model, tokenizer) if "sharded_likelihood" in cfg.dataset_tests else []
        )
        if not ctx.is_main_process:
            return EvalOutput()

        labels = eval_set.labels
        rows = column_rows(scores, labels, cfg)
        if eval_set.doses is not None:  # members of each dose apart: how detection grows with exposure
            rows += rows_per_dose(labels, eval_set.doses, group_rows(scores, labels, cfg))
        if eval_set.forms is not None:  # inject.form rephrased: verbatim and rephrased members apart
            rows += rows_per_form(labels, eval_set.forms, group_rows(scores, labels, cfg))

        blind = self._blind(ctx)
        rows += self._blind_rows(ctx, blind)
        score_columns = {c: v for c, v in scores.columns.items() if c not in scores.decisions}
        rows += dataset_inference_rows(score_columns, labels, seed=cfg.seed)
        rows += dataset_test_rows(score_columns, labels, seed=cfg.seed)  # codec, pacost when computed
        rows += order_rows

        records = [
            {"task_id": task_id, "label": int(labels[i]), **scores.cells(i), BLIND: float_or_none(blind[i])}
            for i, task_id in enumerate(eval_set.task_ids)
        ]
        return EvalOutput(rows=rows, records=records)

    def _blind(self, ctx: EvalContext):
        """The blind baseline's out-of-fold scores: the same at every checkpoint (it never sees the
        model), so computed once."""
        if self.blind_scores is None:
            cfg = ctx.recipe.evaluate
            texts, labels = ctx.eval_set.texts, ctx.eval_set.labels
            self.blind_scores = blind_scores(texts, labels, folds=cfg.cv_folds, seed=cfg.seed)
            self.shift_p_value = shift_pvalue(
                texts, labels, folds=cfg.cv_folds, seed=cfg.seed, scores=self.blind_scores
            )
        return self.blind_scores

    def _blind_rows(self, ctx: EvalContext, blind) -> list[dict[str, Any]]:
        """The blind baseline's metric rows beside the detectors', its shift test's `shift_p_value` and a
        `distribution_shift` row (1 when the test rejects at SHIFT_ALPHA; the warning is also logged, once
        per run)."""
        cfg = ctx.recipe.evaluate
        labels = ctx.eval_set.labels
        metrics = detection_metrics(
            blind, labels, cv_folds=cfg.cv_folds, seed=cfg.seed, n_bootstrap=cfg.n_bootstrap
        )
        metrics["shift_p_value"] = self.shift_p_value
        warning = shift_warning(metrics["shift_p_value"], metrics["auroc"], "members from non-members")
        metrics["distribution_shift"] = float(bool(warning))
        if warning and not self.warned:
            ctx.log(f"[leaklab] {warning}")
            self.warned = True
        return metric_rows(metrics, BLIND, detector=BLIND, params={})

    def summary(self, rows: list[dict[str, Any]]) -> str:
        """AUROC per score column; for each rule detector macro-F1 at its largest n."""
        parts, rule_f1 = [], {}
        for r in without_dose(rows):
            if r.get("value") is None or r.get("column") is None:
                continue
            margin = r["detector"].endswith(MARGIN)  # the rule's margin: its AUROC is the rule's
            if r["metric"] == "auroc" and not is_rule(r["detector"]) and not margin:
                parts.append(f"{r['column']} AUROC {r['value']:.3f}")
            if r["metric"] == "f1" and is_rule(r["column"]):
                n, family = r.get("params", {}).get("n", 0), r["column"].partition("@")[0]
                if n >= rule_f1.get(family, (-1, ""))[0]:
                    rule_f1[family] = (n, f"{r['column']} F1 {r['value']:.3f}")
            if r["metric"] == "p_value" and r["detector"] == DATASET_INFERENCE:
                parts.append(f"dataset inference p {r['value']:.2g}")
        return ", ".join(parts + [text for _, text in rule_f1.values()])
