"""Canaries (`inject.canaries`): exposure of each planted secret per checkpoint, by dose.

Exposure and targeted extraction (`leaklab/memorization/canaries.py`); rows, one set per dose group
(`column` "dose=<d>"): docs/evaluations.md#canaries. The secrets are synthetic, so the records
(scores/step-N/canaries.jsonl) hold them as they are.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import numpy as np

from leaklab.data.canaries import Canary
from leaklab.errors import InputError
from leaklab.evaluations.base import EvalContext, EvalOutput
from leaklab.memorization.canaries import (
    MAX_NEW_TOKENS,
    TOP_K,
    by_dose,
    canaries_in_outputs,
    canary_exposure,
    canary_prompt,
    candidates_for,
    extract_canaries,
    mean_with_interval,
)
from leaklab.rows import Row, float_or_none
from leaklab.rundir import read_json


def run_canaries(ctx: EvalContext) -> list[Canary]:
    """The canaries of the run's manifest (none when the run planted none or there is no run)."""
    run = getattr(ctx, "run", None)
    if run is None or not run.manifest.exists():
        return []
    return [Canary.from_dict(c) for c in read_json(run.manifest).get("canaries") or []]


def dose_row(dose: int, metric: str, value) -> dict[str, Any]:
    column = f"dose={dose}"
    return Row(
        metric, float_or_none(value), column, None, {"split": column, "dose": dose}, dose=dose
    ).as_dict()


def extraction_rows(ctx: EvalContext, outputs: list[str]) -> list[dict[str, Any]]:
    """`canary_extracted_untargeted_rate` per dose for the extraction evaluation's sampled outputs; []
    without canaries."""
    canaries = run_canaries(ctx)
    if not canaries:
        return []
    found = canaries_in_outputs(outputs, canaries)
    groups = by_dose(canaries, {c.id: float(found[c.id]) for c in canaries})
    return [
        dose_row(dose, "canary_extracted_untargeted_rate", values.mean()) for dose, values in groups.items()
    ]


def training_documents(ctx: EvalContext, canaries: list[Canary], tokenizer) -> dict[str, str]:
    """member task id -> its document as trained, canary lines planted (leaklab/training/cpt.py and
    sft.py plant them the same way): `data.text_format` in continued pretraining, the SFT prompt and
    answer in SFT. A member the evaluation set lacks gets its canary lines alone."""
    from leaklab.data.canaries import plant

    recipe = ctx.recipe
    lines: dict[str, list[str]] = {}
    for c in canaries:
        lines.setdefault(c.member, []).append(c.line)
    tasks = {t.task_id: t for t in (ctx.eval_set.tasks if ctx.eval_set is not None else [])}
    documents = {}
    for member, planted in lines.items():
        task = tasks.get(member)
        if task is None:
            documents[member] = "\n".join(planted)
        elif recipe.train.stage == "sft":
            from leaklab.data.prompting import resolve_format, training_pair

            fmt = resolve_format(tokenizer, recipe.train.sft.format, key="train.sft.format")
            answer = dataclasses.replace(task, solution=plant(task.solution, planted))
            documents[member] = "".join(training_pair(answer, tokenizer, fmt))
        else:
            documents[member] = plant(task.text(recipe.data.text_format), planted)
    return documents


def hf_generate(ctx: EvalContext, model, tokenizer):
    """`generate` for extract_canaries: the generation engine, prompts prepared as the recipe says."""
    from leaklab.signals.generation import HFGenerator

    engine = HFGenerator(
        model, tokenizer, batch_size=32, top_k=TOP_K, prompt_boundary=ctx.recipe.evaluate.prompt_boundary
    )

    def generate(prompts, *, temperature: float, n: int, seed: int) -> list[list[str]]:
        results = engine.generate(
            prompts, MAX_NEW_TOKENS, stop=["\n"], temperature=temperature, n=n, seed=seed
        )
        return [[c.text for c in completions] for completions in results]

    return generate


class Canaries:
    name: ClassVar[str] = "canaries"

    def __init__(self) -> None:
        self.canaries: list[Canary] = []
        self.candidates: dict[str, list[str]] = {}

    # generator(ctx, model, tokenizer) -> generate(prompts, temperature=, n=, seed=): the outputs of
    # each prompt (tests put a fake one here).
    generator = staticmethod(hf_generate)

    def specs(self, recipe) -> list[str]:
        return [
            f"candidates={recipe.inject.canary_candidates}",
            f"targeted=greedy+{recipe.inject.canary_samples}",
        ]

    def prepare(self, ctx: EvalContext) -> None:
        self.canaries = run_canaries(ctx)
        if not self.canaries:
            raise InputError(
                "evaluate.evaluations: 'canaries' needs a run trained with inject.canaries > 0 (this run's "
                "manifest has no canaries); remove it from evaluate.evaluations"
            )
        m, seed = ctx.recipe.inject.canary_candidates, ctx.recipe.evaluate.seed
        self.candidates = {c.id: candidates_for(c, m, seed) for c in self.canaries}
        ctx.log(f"[leaklab] canaries: {len(self.canaries)} canaries, each ranked against {m} candidates")

    def evaluate(self, ctx: EvalContext, model, tokenizer, step: int) -> EvalOutput:
        exposures = [  # one scoring pass per canary: its prefix is the prompt of all
            canary_exposure(model, tokenizer, canary, self.candidates[canary.id], settings=ctx.recipe.evaluate,
                            accelerator=ctx.accelerator, cache=ctx.signal_cache)
            for canary in self.canaries
        ]  # fmt: skip
        documents = training_documents(ctx, self.canaries, tokenizer)
        prompts = {c.id: canary_prompt(c, documents[c.member]) for c in self.canaries}
        generate = self.generator(ctx, model, tokenizer)
        greedy: dict[str, list[str]] = {}

        def recording(texts, *, temperature, n, seed):  # keeps the greedy outputs for the records
            outputs = generate(texts, temperature=temperature, n=n, seed=seed)
            if temperature == 0:
                greedy.update(zip(texts, outputs, strict=True))
            return outputs

        found = extract_canaries(
            self.canaries, prompts, recording, ctx.recipe.inject.canary_samples, ctx.recipe.evaluate.seed
        )
        if not ctx.is_main_process:
            return EvalOutput()
        extraction = {
            c.id: {"prompt": prompts[c.id], "greedy_output": (greedy.get(prompts[c.id]) or [""])[0],
                   "extracted_by": found[c.id]}
            for c in self.canaries
        }  # fmt: skip
        return self.output(exposures, ctx.recipe.evaluate.n_bootstrap, ctx.recipe.evaluate.seed, extraction)

    def output(self, exposures, n_bootstrap: int, seed: int, extraction: dict | None = None) -> EvalOutput:
        """Rows and records; `extraction`: canary id -> its prompt, greedy output and extracted_by (None:
        no targeted extraction, no extraction rows)."""
        of = {e.canary_id: e for e in exposures}
        rows = []
        exposure = by_dose(self.canaries, {i: e.exposure for i, e in of.items()})
        rank1 = by_dose(self.canaries, {i: float(e.rank == 1) for i, e in of.items()})
        ceiling = math.log2(exposures[0].n_candidates + 1) if exposures else math.nan
        for dose, values in exposure.items():
            summary = mean_with_interval(values, n_bootstrap, seed)
            rows += [
                dose_row(dose, "n_canaries", len(values)),
                dose_row(dose, "canary_exposure_mean", summary["mean"]),
                dose_row(dose, "canary_exposure_mean_ci_low", summary["ci_low"]),
                dose_row(dose, "canary_exposure_mean_ci_high", summary["ci_high"]),
                dose_row(dose, "canary_rank1_fraction", float(np.mean(rank1[dose]))),
                dose_row(dose, "canary_exposure_max", ceiling),
            ]
        if extraction is not None:
            by = {i: e["extracted_by"] for i, e in extraction.items()}
            extracted = by_dose(self.canaries, {i: float(s is not None) for i, s in by.items()})
            greedy = by_dose(self.canaries, {i: float(s == "greedy") for i, s in by.items()})
            for dose, values in extracted.items():
                rows += [
                    dose_row(dose, "canary_extracted_rate", float(values.mean())),
                    dose_row(dose, "canary_extracted_greedy_rate", float(greedy[dose].mean())),
                ]
        records = [
            {"record": "canary", "canary": c.id, "format": c.format, "member": c.member, "dose": c.dose,
             "secret": c.secret, "logprob": of[c.id].logprob, "rank": of[c.id].rank,
             "n_candidates": of[c.id].n_candidates, "exposure": of[c.id].exposure,
             **(extraction or {}).get(c.id, {})}
            for c in self.canaries
        ]  # fmt: skip
        return EvalOutput(rows=rows, records=records)

    def summary(self, rows: list[dict[str, Any]]) -> str:
        means = [f"{r['column']} {r['value']:.2f}" for r in rows if r["metric"] == "canary_exposure_mean"
                 and r["value"] is not None]  # fmt: skip
        extracted = [f"{r['column']} {r['value']:.0%}" for r in rows if r["metric"] == "canary_extracted_rate"
                     and r["value"] is not None]  # fmt: skip
        text = "canary exposure " + ", ".join(means) if means else "canaries: no exposure"
        return text + ("; extracted " + ", ".join(extracted) if extracted else "")
