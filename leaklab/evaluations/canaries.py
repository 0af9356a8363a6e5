"""Canaries (`inject.canaries`): exposure of each planted secret per checkpoint, by dose.

Per checkpoint, every canary of the run's manifest is ranked against `inject.canary_candidates` random
secrets of its format (seeded by evaluate.seed, the same candidates at every checkpoint) and its exposure
computed (leaklab/memorization/canaries.py: exposure = log2(M + 1) - log2(rank), after Carlini et al.
2019). It needs no sampling, so it is cheap next to the extraction audit.

Rows, one set per dose group (`column` "dose=<d>", `dose` in the row and its params):
  n_canaries, canary_exposure_mean (+ bootstrap 95% interval over the group's canaries),
  canary_rank1_fraction (share ranked above all M candidates), and the ceiling log2(M + 1) as
  canary_exposure_max.
The extraction evaluation adds `canary_extracted_rate` per dose (`extraction_rows`): the share of the
group's canaries whose secret appears verbatim in that checkpoint's sampled outputs.
Records (scores/step-N/canaries.jsonl): one per canary with its member, dose, format, log-probability,
rank and exposure (the secrets are synthetic, so they are written as they are).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from leaklab.data.canaries import Canary
from leaklab.errors import InputError
from leaklab.evaluations.base import EvalContext, EvalOutput, float_or_none
from leaklab.memorization.canaries import (
    by_dose,
    canaries_in_outputs,
    candidates_for,
    exposure_from_logprobs,
    mean_with_interval,
    secret_logprobs,
)
from leaklab.rundir import read_json


def run_canaries(ctx: EvalContext) -> list[Canary]:
    """The canaries of the run's manifest (none when the run planted none or there is no run)."""
    run = getattr(ctx, "run", None)
    if run is None or not run.manifest.exists():
        return []
    return [Canary.from_dict(c) for c in read_json(run.manifest).get("canaries") or []]


def dose_row(dose: int, metric: str, value) -> dict[str, Any]:
    column = f"dose={dose}"
    return {"detector": None, "params": {"split": column, "dose": dose}, "column": column, "dose": dose,
            "metric": metric, "value": None if value is None else float_or_none(value)}  # fmt: skip


def extraction_rows(ctx: EvalContext, outputs: list[str]) -> list[dict[str, Any]]:
    """`canary_extracted_rate` per dose for the extraction evaluation's sampled outputs; [] without
    canaries."""
    canaries = run_canaries(ctx)
    if not canaries:
        return []
    found = canaries_in_outputs(outputs, canaries)
    groups = by_dose(canaries, {c.id: float(found[c.id]) for c in canaries})
    return [dose_row(dose, "canary_extracted_rate", values.mean()) for dose, values in groups.items()]


class Canaries:
    name: ClassVar[str] = "canaries"

    def __init__(self) -> None:
        self.canaries: list[Canary] = []
        self.candidates: dict[str, list[str]] = {}

    def specs(self, recipe) -> list[str]:
        return [f"candidates={recipe.inject.canary_candidates}"]

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
        exposures = []
        for canary in self.canaries:  # one scoring pass per canary: its prefix is the prompt of all
            scores = secret_logprobs(
                model, tokenizer, canary.prefix, [canary.secret, *self.candidates[canary.id]],
                settings=ctx.recipe.evaluate, accelerator=ctx.accelerator, cache=ctx.signal_cache,
            )  # fmt: skip
            exposures.append(exposure_from_logprobs(canary.id, scores[0], scores[1:]))
        if not ctx.is_main_process:
            return EvalOutput()
        return self.output(exposures, ctx.recipe.evaluate.n_bootstrap, ctx.recipe.evaluate.seed)

    def output(self, exposures, n_bootstrap: int, seed: int) -> EvalOutput:
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
        records = [
            {"record": "canary", "canary": c.id, "format": c.format, "member": c.member, "dose": c.dose,
             "secret": c.secret, "logprob": of[c.id].logprob, "rank": of[c.id].rank,
             "n_candidates": of[c.id].n_candidates, "exposure": of[c.id].exposure}
            for c in self.canaries
        ]  # fmt: skip
        return EvalOutput(rows=rows, records=records)

    def summary(self, rows: list[dict[str, Any]]) -> str:
        means = [f"{r['column']} {r['value']:.2f}" for r in rows if r["metric"] == "canary_exposure_mean"
                 and r["value"] is not None]  # fmt: skip
        return "canary exposure " + ", ".join(means) if means else "canaries: no exposure"
