"""Detection: every detector of the recipe on every checkpoint, scored against the manifest.

Score detectors (ppl ... ref) give one number per sample; their rows are AUROC, TPR@FPR, and the
binary metrics at a cross-validated threshold and at the oracle threshold (`metrics.detection_metrics`).
Rule detectors (SrDetection) decide themselves; their rows are the binary metrics of the decisions and
AUROC of the margin (`metrics.rule_metrics`). Every row carries 95% bootstrap intervals when
`evaluate.n_bootstrap` > 0. Per-sample records: each column's score and, for rules, the decision.

Detectors that need variants (SrDetection) get them in `prepare`: the run's own copy
(<run>/variants.jsonl) when it has one, else built once per benchmark (sandbox-verified, cached) and
copied into the run, so every checkpoint compares against the same variants.
"""

from __future__ import annotations

from typing import Any, ClassVar

from leaklab.evaluations.base import (
    EXECUTIONS,
    GENERATIONS,
    PERTURBED,
    REFERENCE_MODEL,
    TOKEN_STATS,
    EvalContext,
    EvalOutput,
    float_or_none,
)


class Detection:
    name: ClassVar[str] = "detection"

    def __init__(self) -> None:
        self.variant_sets: list[Any] | None = None

    def specs(self, recipe) -> list[str]:
        return sorted(recipe.evaluate.detectors)

    def needs(self, recipe) -> set[str]:
        from leaklab.detectors import needs_of
        from leaklab.detectors.likelihood import REFERENCE
        from leaklab.detectors.srdetection import GENERATIONS as SR_GENERATIONS
        from leaklab.detectors.srdetection import VARIANTS

        signals = needs_of(recipe.evaluate.detectors)
        out = {TOKEN_STATS}
        if VARIANTS in signals:
            out |= {PERTURBED, EXECUTIONS}
        if SR_GENERATIONS in signals:
            out.add(GENERATIONS)
        if REFERENCE in signals:
            out.add(REFERENCE_MODEL)
        return out

    def prepare(self, ctx: EvalContext) -> None:
        from leaklab.detectors import needs_variants

        if not needs_variants(ctx.recipe.evaluate.detectors) or self.variant_sets is not None:
            return
        from leaklab.perturb import store

        tasks = ctx.eval_set.tasks
        sets = store.read_run_variants(ctx.run.root, tasks)
        if sets is None:
            cfg = ctx.recipe.evaluate.srdetection
            sets = store.variant_sets_for(tasks, cfg, log=ctx.log)
            if ctx.is_main_process:
                ctx.log(store.describe(store.write_run_variants(ctx.run.root, sets, tasks, cfg.min_variants)))
        self.variant_sets = sets

    def evaluate(self, ctx: EvalContext, model, tokenizer, step: int) -> EvalOutput:
        from leaklab.detectors import needs_of, score_detectors
        from leaklab.detectors.likelihood import REFERENCE
        from leaklab.detectors.srdetection import inputs_from_tasks, srdetection_metrics
        from leaklab.metrics import detection_metrics

        cfg, data = ctx.recipe.evaluate, ctx.recipe.data
        eval_set = ctx.eval_set
        rule_inputs = None
        if self.variant_sets is not None:
            rule_inputs = inputs_from_tasks(eval_set.tasks, self.variant_sets, data.text_format)
        scores = score_detectors(
            cfg.detectors,
            model,
            tokenizer,
            eval_set.texts,
            prompts=eval_set.prompts,
            rule_inputs=rule_inputs,
            settings=cfg,
            reference=ctx.reference() if REFERENCE in needs_of(cfg.detectors) else None,
            accelerator=ctx.accelerator,
            cache=ctx.signal_cache,
            generation_cache=ctx.generation_cache,
        )
        if not ctx.is_main_process:
            return EvalOutput()

        labels = eval_set.labels
        rows = []
        for column, values in scores.columns.items():
            detector, params = scores.params[column]
            if column in scores.decisions:
                metrics = srdetection_metrics(
                    scores.decisions[column], labels, n_bootstrap=cfg.n_bootstrap, seed=cfg.seed
                )
            else:
                metrics = detection_metrics(
                    values, labels, cv_folds=cfg.cv_folds, seed=cfg.seed, n_bootstrap=cfg.n_bootstrap
                )
            head = {"detector": detector, "params": params, "column": column}
            rows.extend({**head, "metric": k, "value": float_or_none(v)} for k, v in metrics.items())

        records = [
            {"task_id": task_id, "label": int(labels[i]), **scores.cells(i)}
            for i, task_id in enumerate(eval_set.task_ids)
        ]
        return EvalOutput(rows=rows, records=records)

    def summary(self, rows: list[dict[str, Any]]) -> str:
        """AUROC per score column; for each rule detector macro-F1 at its largest n."""
        parts, rule_f1 = [], {}
        for r in rows:
            if r.get("value") is None or r.get("column") is None:
                continue
            if r["metric"] == "auroc" and not r["detector"].startswith("srdetection"):
                parts.append(f"{r['column']} AUROC {r['value']:.3f}")
            if r["metric"] == "f1" and r["detector"].startswith("srdetection"):
                n = r.get("params", {}).get("n", 0)
                if n >= rule_f1.get(r["detector"], (-1, ""))[0]:
                    rule_f1[r["detector"]] = (n, f"{r['column']} F1 {r['value']:.3f}")
        return ", ".join(parts + [text for _, text in rule_f1.values()])
