"""Memorization Risk Index of every checkpoint (004), members and non-members apart: does MRI rise on what
was injected and stay flat on what was not? Perturbed sets, rows and rules:
docs/evaluations.md#memorization-risk-index-and-checkpoint-selection-evaluateevaluations-mri; formulas:
docs/evaluations.md#mri-004-3-and-app-e. Tasks are asked, read back and judged as accuracy does
(`replies.py`). Every RAD and the competence rule use Acc(T_ori) over the whole side (004 §3.1.2, §4.1);
an answer without parsable code has S_i = 0 everywhere.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np

from leaklab.data.prompting import model_prompt, resolve_format
from leaklab.evaluations.base import EvalContext, EvalOutput, first_per_side, run_decoding, side_indices
from leaklab.evaluations.replies import cached_judgements, read_replies, run_readings, verdict_cache
from leaklab.execution.extract import STOP_SEQUENCES
from leaklab.metrics import (
    auroc,
    competence,
    instance_mri,
    mean_similarity,
    memorization_risk_index,
    mri_draws,
    percentile_intervals,
    relative_accuracy_drop,
    resample_weights,
    resampled_mean,
)
from leaklab.perturb.identifiers import docstring_statement
from leaklab.perturb.mri_sets import LlmBackend, SetSettings, describe, perturbed_sets_for, write_run_sets
from leaklab.perturb.rewriting import LOGIC_TYPES
from leaklab.report.charts import SCHEMA, metric_panel_spec, metric_values
from leaklab.report.section import Panel, Section, Table, fmt
from leaklab.results import rows_per_dose, without_dose
from leaklab.rows import side_row
from leaklab.rundir import text_sha256
from leaklab.selection import checkpoint_points, select, stage_of
from leaklab.similarity.judges import make_backend

SETS = ("ori", "rew", "mut", "par")
NO_LLM = "not computed: no LLM backend for paraphrase (evaluate.mri.llm_backend)"


@dataclass
class MriConfig:
    """`evaluate.mri` in a recipe."""

    # Values that are one of a few words (checked at recipe load with a suggestion).
    choices: ClassVar[dict[str, tuple[str, ...]]] = {
        "format": ("auto", "completion", "chat", "evalplus"),
        "llm_backend": ("none", "hf", "openai"),
        "llm_judge": ("off", "record", "filter"),
    }

    format: str = "auto"  # auto | completion | chat | evalplus: how the model is asked (as evaluate.accuracy)
    max_new_tokens: int = 128  # longest reply
    batch_size: int = 64  # rows decoded together
    max_tasks: int | None = None  # evaluate at most this many members and this many non-members
    seed: int = 0  # seed of the rewriting and mutation choices
    per_type: int = 2  # rewrite candidates validated per logic-change type and task
    mutation: bool = True  # also ask the mutated tasks (RAD_mut)
    min_accuracy: float = 0.10  # competence rule: Acc(T_ori) at least this ...
    min_solved: int = 50  # ... and at least this many originals solved, else RAD / MRI are N/A
    # Per-type rows only for types with at least this many rewritten tasks on a side: the paper drops
    # types with fewer than 50 as statistically unstable (004, App. G); 1 keeps every type.
    min_type_count: int = 50
    sandbox_workers: int = 2  # processes that run programs
    timeout_s: float = 5.0  # per program
    # The optional LLM that paraphrases (and with llm_rewrite, rewrites): none | hf | openai.
    llm_backend: str = "none"
    llm_model: str | None = None  # hf: a local directory or hub name; openai: the served model's name
    llm_base_url: str | None = None  # openai: the server, e.g. http://127.0.0.1:8000/v1 ($OPENAI_API_KEY)
    llm_rewrite: bool = False  # rewrite with the LLM instead of the rules (same execution checks)
    llm_max_new_tokens: int = 2048  # longest LLM reply
    # The LLM judges each rewrite (statement aligned with the new solution? as hard as the original?):
    # off | record (kept in perturbed.jsonl) | filter (also drops the rewrites it does not pass).
    llm_judge: str = "off"

    def check(self, parent=None) -> list[str]:
        problems = []
        if self.llm_backend != "none" and not self.llm_model:
            problems.append(
                f"evaluate.mri.llm_model: the {self.llm_backend} backend needs a model (name or local path)"
            )
        if self.llm_backend == "openai" and not self.llm_base_url:
            problems.append("evaluate.mri.llm_base_url: the openai backend needs the server's URL")
        if self.llm_rewrite and self.llm_backend == "none":
            problems.append("evaluate.mri.llm_rewrite: needs evaluate.mri.llm_backend (hf or openai)")
        if self.llm_judge != "off" and self.llm_backend == "none":
            problems.append("evaluate.mri.llm_judge: needs evaluate.mri.llm_backend (hf or openai)")
        for key in ("max_new_tokens", "batch_size", "sandbox_workers", "per_type", "min_type_count"):
            if getattr(self, key) < 1:
                problems.append(f"evaluate.mri.{key}: must be at least 1, got {getattr(self, key)}")
        if not 0 <= self.min_accuracy <= 1:
            problems.append(f"evaluate.mri.min_accuracy: must be in [0, 1], got {self.min_accuracy}")
        if self.min_solved < 0:
            problems.append(f"evaluate.mri.min_solved: must be >= 0, got {self.min_solved}")
        if self.max_tasks is not None and self.max_tasks < 1:
            problems.append(f"evaluate.mri.max_tasks: must be at least 1, got {self.max_tasks}")
        return problems


def normalised_code(program: str) -> str | None:
    """The program without docstrings, `ast.unparse`d (None when it does not parse): what S_i compares,
    so the prompt's prose (close to the original's by construction) does not count as copied code."""
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in ast.walk(tree):
        first = docstring_statement(node)
        if first is not None and isinstance(first.value.value, str):
            node.body.pop(0)
            if not node.body:
                node.body.append(ast.Pass())
    return ast.unparse(tree)


def similarity(answer_program: str, original_program: str) -> float | None:
    """S_i of one answer (None when either side does not parse)."""
    from leaklab.similarity.structure import mri_similarity, structure

    a, b = normalised_code(answer_program), normalised_code(original_program)
    if a is None or b is None:
        return None
    ref, cand = structure(b, ("ast",)), structure(a, ("ast",))
    if ref.error or cand.error:
        return None
    return mri_similarity(ref, cand)


def llm_backend(cfg: MriConfig):
    """The perturbation LLM of the settings (None for llm_backend none); loaded here, once per run."""
    if cfg.llm_backend == "none":
        return None
    generator, render = make_backend(cfg.llm_backend, cfg.llm_model, cfg.llm_base_url)
    identity = f"{cfg.llm_backend}:{cfg.llm_model}"
    return LlmBackend(generator, identity, cfg.llm_rewrite, render, cfg.llm_max_new_tokens, cfg.llm_judge)


class Mri:
    name: ClassVar[str] = "mri"

    def __init__(self) -> None:
        self._sets: dict[str, Any] | None = None

    def specs(self, recipe) -> list[str]:
        return ["mri", "rad_mut"] if recipe.evaluate.mri.mutation else ["mri"]

    def runs_tests(self, recipe) -> str:
        return "evaluate.evaluations: mri (it runs the tests of the original and rewritten tasks)"

    def prepare(self, ctx: EvalContext) -> None:
        """The perturbed sets of the evaluated tasks: cached per benchmark, copied into the run."""
        cfg = ctx.recipe.evaluate.mri
        tasks, _ = first_per_side(ctx.eval_set, cfg.max_tasks)
        # Under several processes the main one builds (and caches) the sets; the others then read them.
        first = (
            ctx.accelerator.main_process_first() if ctx.accelerator is not None else contextlib.nullcontext()
        )
        with first:
            settings = SetSettings(cfg.seed, cfg.per_type, cfg.sandbox_workers, cfg.timeout_s)
            sets = perturbed_sets_for(tasks, settings, llm=llm_backend(cfg), log=ctx.log)
        self._sets = {s.task_id: s for s in sets}
        if ctx.is_main_process:
            info = write_run_sets(ctx.run.root, sets)
            ctx.log(describe(info))
            if cfg.llm_backend == "none":
                ctx.log(
                    "[leaklab] MRI: paraphrase skipped (no LLM backend); RAD_par is reported as not computed"
                )

    # ------------------------------------------------------------------ generation and judging

    def items(self, tasks, cfg: MriConfig) -> list[tuple[str, Any, Any]]:
        """(key, task asked, original) for every prompt of this checkpoint."""
        items = []
        for task in tasks:
            ps = self._sets[task.task_id]
            mutation = ps.mutation if cfg.mutation else None
            asked = {"ori": task, "rew": ps.rewrite, "mut": mutation, "par": ps.paraphrase}
            items += [(f"{kind}:{task.task_id}", t, task) for kind, t in asked.items() if t is not None]
        return items

    def _generate(self, ctx: EvalContext, model, tokenizer, prompts: list[str], fmt: str) -> list[str]:
        """Greedy replies through the run's generation cache: the answers to the original tasks that the
        accuracy evaluation already decoded at this checkpoint (same format, stops and max_new_tokens)
        are read back, not decoded again."""
        from leaklab.signals.continuations import greedy_replies

        cfg = ctx.recipe.evaluate.mri
        stop = STOP_SEQUENCES if fmt == "completion" else ()
        info: dict[str, Any] = {}
        decoding = run_decoding(ctx, model, tokenizer, cfg.batch_size)
        texts = greedy_replies(decoding, prompts, cfg.max_new_tokens, stop, info=info)
        ctx.log(f"[leaklab] mri: {info['cached']} of {info['prompts']} replies from the generation cache")
        return texts

    def _judge(self, cfg: MriConfig, items, replies: list[str], fmt: str) -> list[dict]:
        asked = [task for _, task, _ in items]
        readings = read_replies(asked, replies, fmt)
        results = run_readings(asked, readings, cfg.sandbox_workers, cfg.timeout_s)
        judged: list[dict] = []
        for (key, _, original), reading, result in zip(items, readings, results):
            entry: dict[str, Any] = {"key": key, "reply": reading.reply, "extraction": reading.failure}
            if reading.failure:
                entry |= {"verdict": "failed", "reason": f"extraction: {reading.failure}", "sim": None}
            else:
                entry["full_program"] = False  # the code always continues the prompt (Extracted)
                if key.startswith("rew:"):
                    entry["sim"] = similarity(reading.program, original.program())
                entry |= {"verdict": result.verdict, "reason": result.reason}
            judged.append(entry)
        return judged

    # ------------------------------------------------------------------ the evaluation

    def evaluate(self, ctx: EvalContext, model, tokenizer, step: int) -> EvalOutput:
        from leaklab.signals.generation import prompt_boundaries

        cfg = ctx.recipe.evaluate.mri
        if self._sets is None:
            self.prepare(ctx)
        fmt = resolve_format(tokenizer, cfg.format, key="evaluate.mri.format")
        tasks, labels = first_per_side(ctx.eval_set, cfg.max_tasks)
        items = self.items(tasks, cfg)
        prompts = [model_prompt(t, tokenizer, fmt) for _, t, _ in items]

        def judge(replies: list[str]) -> list[dict]:
            judged = self._judge(cfg, items, replies, fmt)
            applied = prompt_boundaries(tokenizer, prompts, ctx.recipe.evaluate.prompt_boundary)
            for entry, boundary in zip(judged, applied):
                entry["prompt_boundary"] = boundary
            return judged

        settings = {k: v for k, v in asdict(cfg).items() if k in ("max_new_tokens", "timeout_s", "llm_model")}
        content = text_sha256("".join(t.prompt + t.solution for _, t, _ in items))
        judged = cached_judgements(
            ctx,
            "mri",
            verdict_cache(ctx, "mri", model, tokenizer, fmt, settings, content),
            [key for key, _, _ in items],
            "prompts",
            generate=lambda: self._generate(ctx, model, tokenizer, prompts, fmt),
            judge=judge,
        )
        if judged is None:  # not the main process
            return EvalOutput()
        outcomes = per_task_outcomes(tasks, labels, self._sets, judged)
        ev = ctx.recipe.evaluate
        rows = mri_rows(outcomes, cfg, n_bootstrap=ev.n_bootstrap, seed=ev.seed)
        if ctx.eval_set.doses is not None:
            dose_of = dict(zip(ctx.eval_set.task_ids, (int(d) for d in ctx.eval_set.doses)))
            rows += dose_mri_rows(outcomes, dose_of, cfg, n_bootstrap=ev.n_bootstrap, seed=ev.seed)
        return EvalOutput(rows=rows, records=outcomes)

    def report_section(self, rows: list[dict[str, Any]], run) -> Any:
        """Accuracy vs MRI with the front and the stages, per side, and the table per checkpoint."""
        return _mri_report_section(rows, run)

    def summary(self, rows: list[dict[str, Any]]) -> str:
        got = {(r["column"], r["metric"]): r["value"] for r in without_dose(rows)}
        parts = []
        for side in ("members", "non_members"):
            mri = got.get((side, "mri"))
            raw = got.get((side, "mri_unchecked"))
            low, high = got.get((side, "mri_ci_low")), got.get((side, "mri_ci_high"))
            interval = f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else ""
            shown = (
                f"{mri:.3f}{interval}"
                if mri is not None
                else (f"N/A (unchecked {raw:.3f})" if raw is not None else "N/A")
            )
            parts.append(f"{side.replace('_', '-')} MRI {shown}")
        return ", ".join(parts)


# --------------------------------------------------------------------------- outcomes and rows


def per_task_outcomes(tasks, labels: list[int], sets: dict, judged: list[dict]) -> list[dict[str, Any]]:
    """One record per task: verdicts on its sets, S_k, Drop_k, score = S_k x Drop_k."""
    by_key = {j["key"]: j for j in judged}
    out = []
    for task, label in zip(tasks, labels):
        ps = sets[task.task_id]
        record: dict[str, Any] = {"task_id": task.task_id, "label": label, "logic_type": ps.logic_type}
        for kind in SETS:
            j = by_key.get(f"{kind}:{task.task_id}")
            record[f"passed_{kind}"] = None if j is None else j["verdict"] == "passed"
            record[f"extraction_{kind}"] = None if j is None else j.get("extraction", "")
            record[f"reason_{kind}"] = None if j is None else j.get("reason", "")
            record[f"prompt_boundary_{kind}"] = None if j is None else j.get("prompt_boundary")
        rew = by_key.get(f"rew:{task.task_id}")
        sim = None if rew is None else rew.get("sim")
        drop = None if rew is None else float(rew["verdict"] != "passed")
        record["sim"] = sim
        record["drop"] = drop
        record["score"] = None if rew is None else (sim or 0.0) * drop
        record["reply_rew"] = None if rew is None else rew["reply"]
        out.append(record)
    return out


def _mean(values) -> float | None:
    values = [float(v) for v in values if v is not None]
    return sum(values) / len(values) if values else None


# MRI's quantities that get bootstrap intervals, with the name of their draw in `metrics.mri_draws`.
INTERVALS = {m: m for m in ("acc_ori_rew", "acc_rew", "sim", "rad_rew", "mri", "imri")} | {
    f"{m}_unchecked": m for m in ("rad_rew", "mri", "imri")
}


def mri_intervals(outcomes: list[dict[str, Any]], n_bootstrap: int, seed: int) -> dict[str, dict[str, float]]:
    """Per side, `<metric>_ci_low` / `_ci_high` for the metrics in INTERVALS: bootstrap 95% intervals,
    members and non-members resampled apart; RAD_rew divides by Acc_ori over all of a resample's
    originals, as the point value does."""
    labels = np.array([o["label"] == 1 for o in outcomes], dtype=bool)
    rewritten = np.array([o["passed_rew"] is not None for o in outcomes], dtype=bool)
    strata = [np.flatnonzero(labels), np.flatnonzero(~labels)]
    weights = resample_weights(strata, len(outcomes), n=n_bootstrap, seed=seed)
    solved = [bool(o["passed_ori"]) for o in outcomes]
    sides = {"members": labels, "non_members": ~labels, "all": np.ones(len(outcomes), dtype=bool)}
    out = {}
    for side, keep in sides.items():
        chosen = keep & rewritten
        group = [o for o, k in zip(outcomes, chosen) if k]
        draws = mri_draws(
            weights[:, chosen],
            [bool(o["passed_ori"]) for o in group],
            [bool(o["passed_rew"]) for o in group],
            [o["sim"] for o in group],
        )
        acc_ori = resampled_mean(weights, solved, keep)
        with np.errstate(invalid="ignore", divide="ignore"):
            rad = np.where(acc_ori > 0, np.maximum(0.0, (acc_ori - draws["acc_rew"]) / acc_ori), np.nan)
        draws["rad_rew"], draws["mri"] = rad, draws["sim"] * rad
        out[side] = percentile_intervals({metric: draws[name] for metric, name in INTERVALS.items()})
    return out


def mri_rows(
    outcomes: list[dict[str, Any]], cfg: MriConfig, *, n_bootstrap: int = 0, seed: int = 0
) -> list[dict[str, Any]]:
    """The rows of one checkpoint (see the module doc); with n_bootstrap > 0 the metrics in INTERVALS get
    `<metric>_ci_low` / `_ci_high` rows where they have a value (`mri_intervals`)."""
    rows: list[dict[str, Any]] = []
    intervals = mri_intervals(outcomes, n_bootstrap, seed) if n_bootstrap > 0 else {}

    def add(side: str, metric: str, value, **params: Any) -> None:
        value = None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
        rows.append(side_row(side, metric, value, **params))
        if value is not None and metric in INTERVALS and side in intervals:
            for tail in ("_ci_low", "_ci_high"):
                add(side, metric + tail, intervals[side][metric + tail], **params)

    for side, index in side_indices([o["label"] for o in outcomes]).items():
        _side_rows(functools.partial(add, side), [outcomes[i] for i in index], cfg)
    scored = [o for o in outcomes if o["score"] is not None]
    labels = [o["label"] for o in scored]
    value = auroc([o["score"] for o in scored], labels) if 0 < sum(labels) < len(labels) else None
    add("all", "score_auroc", value, score="sim x drop", n=len(scored))
    return rows


def _side_rows(add: Callable[..., None], group: list[dict[str, Any]], cfg: MriConfig) -> None:
    """One side's rows, through `add(metric, value, **params)`: the paper's quantities in order
    (accuracies, RAD, MRI, iMRI), the counts, then per logic type."""
    rewritten = [o for o in group if o["passed_rew"] is not None]
    mutated = [o for o in group if o["passed_mut"] is not None]
    # Acc(T_ori) is over the whole side (004 §3.1.2, §4.1): the RADs and the competence rule use it,
    # not the originals of the tasks that happen to have a rewrite.
    acc_ori = _mean(o["passed_ori"] for o in group)
    acc_rew = _mean(o["passed_rew"] for o in rewritten)
    acc_mut = _mean(o["passed_mut"] for o in mutated)
    sim = mean_similarity(o["sim"] for o in rewritten)
    n_solved = sum(bool(o["passed_ori"]) for o in group)
    na = competence(acc_ori, n_solved, cfg.min_accuracy, cfg.min_solved)
    rad_rew = relative_accuracy_drop(acc_ori, acc_rew)
    rad_mut = relative_accuracy_drop(acc_ori, acc_mut)
    mri = memorization_risk_index(sim, rad_rew)
    imri = instance_mri(
        [bool(o["passed_ori"]) for o in rewritten],
        [o["sim"] for o in rewritten],
        [o["drop"] for o in rewritten],
    )
    add("acc_ori", acc_ori)
    add("acc_ori_rew", _mean(o["passed_ori"] for o in rewritten))
    add("acc_rew", acc_rew)
    add("sim", sim)
    note = {"na": na} if na else {}
    add("rad_rew", None if na else rad_rew, **note)
    add("mri", None if na else mri, **note)
    add("imri", None if na else imri, **note)
    add("rad_rew_unchecked", rad_rew)
    add("mri_unchecked", mri)
    add("imri_unchecked", imri)
    if cfg.mutation:
        add("acc_ori_mut", _mean(o["passed_ori"] for o in mutated))
        add("acc_mut", acc_mut)
        add("rad_mut", None if na else rad_mut, **note)
        add("rad_mut_unchecked", rad_mut)
    paraphrased = [o for o in group if o.get("passed_par") is not None]
    if paraphrased:
        rad_par = relative_accuracy_drop(acc_ori, _mean(o["passed_par"] for o in paraphrased))
        add("acc_ori_par", _mean(o["passed_ori"] for o in paraphrased))
        add("acc_par", _mean(o["passed_par"] for o in paraphrased))
        add("rad_par", None if na else rad_par, **note)
        add("rad_par_unchecked", rad_par)
    else:
        add("rad_par", None, na=NO_LLM)
    add("n_paraphrased", len(paraphrased))
    add("n_tasks", len(group))
    add("n_rewritten", len(rewritten))
    add("n_mutated", len(mutated))
    add("n_solved_ori", n_solved)
    add("competent", 0.0 if na else 1.0, **note)
    add("n_sim_missing", sum(o["sim"] is None for o in rewritten))
    for kind in SETS:
        add(f"n_extraction_failed_{kind}", sum(bool(o.get(f"extraction_{kind}")) for o in group))
    for logic_type in LOGIC_TYPES:
        typed = [o for o in rewritten if o["logic_type"] == logic_type]
        if len(typed) < cfg.min_type_count:
            continue
        t_rad = relative_accuracy_drop(
            _mean(o["passed_ori"] for o in typed), _mean(o["passed_rew"] for o in typed)
        )
        t_mri = memorization_risk_index(mean_similarity(o["sim"] for o in typed), t_rad)
        add(f"n/{logic_type}", len(typed), logic_type=logic_type)
        add(f"rad_rew/{logic_type}", t_rad, logic_type=logic_type)
        add(f"mri/{logic_type}", t_mri, logic_type=logic_type)


def dose_mri_rows(
    outcomes: list[dict[str, Any]],
    dose_of: dict[str, int],
    cfg: MriConfig,
    *,
    n_bootstrap: int = 0,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """A run with inject.doses: per dose d, the `members` rows of `mri_rows` on the members of dose d,
    and the instance score's AUROC (`score_auroc`) of those members against all the non-members, each
    with `"dose": d`."""
    return rows_per_dose(
        [o["label"] for o in outcomes],
        [dose_of[o["task_id"]] for o in outcomes],
        lambda index: mri_rows([outcomes[i] for i in index], cfg, n_bootstrap=n_bootstrap, seed=seed),
        keep=lambda r: r["column"] == "members" or r["metric"] == "score_auroc",
    )


# --------------------------------------------------------------------------- report section


def _tradeoff_spec(points, sel) -> dict[str, Any]:
    """Accuracy vs MRI per checkpoint: every checkpoint a point, the Pareto front a line, the stages
    (Early / Best-Val / Late) and the recommendation labelled."""
    stage_of: dict[int, list[str]] = {}
    for name, step in sel.stages.items():
        stage_of.setdefault(step, []).append(name)
    if sel.recommended is not None:
        stage_of.setdefault(sel.recommended, []).append("recommended")
    values = [
        {
            "step": p.step,
            "accuracy": p.accuracy,
            "mri": p.mri,
            "front": p.step in sel.front,
            "label": ", ".join(stage_of.get(p.step, [])) or f"step {p.step}",
            "unchecked": p.mri_unchecked,
        }
        for p in points
        if p.accuracy is not None and p.mri is not None
    ]
    x = {"field": "mri", "type": "quantitative", "title": "MRI (lower is better)"}
    y = {"field": "accuracy", "type": "quantitative", "title": "Acc(T_ori), pass@1"}
    return {
        "$schema": SCHEMA,
        "width": 360,
        "height": 240,
        "data": {"values": values},
        "layer": [
            {
                "transform": [{"filter": "datum.front"}],
                "mark": {"type": "line", "strokeDash": [4, 3], "color": "#888"},
                "encoding": {"x": x, "y": y, "order": {"field": "mri", "type": "quantitative"}},
            },
            {
                "mark": {"type": "point", "filled": True, "size": 70},
                "encoding": {
                    "x": x,
                    "y": y,
                    "color": {"field": "front", "type": "nominal", "title": "on the front"},
                    "tooltip": [
                        {"field": "step"},
                        {"field": "accuracy", "format": ".3f"},
                        {"field": "mri", "format": ".4f"},
                        {"field": "unchecked", "title": "MRI below competence"},
                        {"field": "label", "title": "stage"},
                    ],
                },
            },
            {
                "mark": {"type": "text", "dy": -10, "fontSize": 10},
                "encoding": {"x": x, "y": y, "text": {"field": "label"}},
            },
        ],
    }


def _mri_report_section(rows: list[dict[str, Any]], run) -> Any:
    training = run.rows_of("training")
    # The paper picks by the training stage (sft: MRI among comparable losses; rl: validation reward).
    stage = stage_of(getattr(run, "recipe", None))
    accuracy_rows = run.rows_of("accuracy")
    items: list[Any] = []
    notes = []
    for side in ("non_members", "members"):
        points = checkpoint_points([*rows, *training, *accuracy_rows], side)
        sel = select(points, side=side, stage=stage)
        if any(p.mri_unchecked for p in points):
            notes.append(
                f"{side}: some checkpoints are below the competence rule; their MRI is shown unchecked"
            )
        if points:
            items.append(
                Panel(
                    f"Accuracy vs MRI, {side.replace('_', '-')}",
                    _tradeoff_spec(points, sel),
                    caption=f"one point per checkpoint; dashed: the accuracy–MRI front. {sel.why}",
                )
            )
    got: dict[tuple[int, str], dict[str, Any]] = {}
    for r in rows:
        got.setdefault((int(r["step"]), r["column"]), {})[r["metric"]] = r["value"]

    def with_interval(v: dict[str, Any], metric: str, digits: int = 4) -> str:
        low, high = v.get(f"{metric}_ci_low"), v.get(f"{metric}_ci_high")
        interval = (
            f" [{low:.{digits - 1}f}, {high:.{digits - 1}f}]" if low is not None and high is not None else ""
        )
        return fmt(v.get(metric), digits) + interval

    header = ["step", "side", "Acc_ori", "Acc_rew", "Acc_mut", "Sim", "RAD_rew", "RAD_mut", "MRI", "iMRI"]
    table = []
    for (step, side), v in sorted(got.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        if side not in ("members", "non_members"):
            continue
        na = v.get("competent") == 0.0
        mri = with_interval(v, "mri") if not na else f"N/A ({with_interval(v, 'mri_unchecked')})"
        table.append(
            [str(step), side, fmt(v.get("acc_ori")), fmt(v.get("acc_rew")), fmt(v.get("acc_mut")),
             fmt(v.get("sim")), fmt(v.get("rad_rew")) if not na else "N/A", fmt(v.get("rad_mut")) if not na else "N/A",
             mri, fmt(v.get("imri"), 4) if not na else "N/A"]
        )  # fmt: skip
    items.append(
        Table(
            "MRI per checkpoint",
            header,
            table,
            caption="N/A: below the competence rule (value unchecked); MRI [2.5th, 97.5th percentile over "
            "bootstrap resamples of the rewritten tasks, members and non-members resampled apart]",
        )
    )
    return Section(
        key="mri",
        title="Memorization Risk Index",
        intro=(
            "Answers to rewritten tasks compared with the original solutions: MRI = Sim x RAD_rew is high when "
            "the model copies the original and the copy fails. Members (trained on) and non-members apart; "
            "paraphrase only with an LLM backend (evaluate.mri.llm_backend)."
        ),
        items=items,
        notes=notes,
    )


def dose_panels(rows: list[dict[str, Any]], run) -> list[Panel]:
    """The report's dose-response panels (its record's `dose_panels`), at the last checkpoint MRI
    evaluated: the members' MRI (its unchecked value when the competence check left it undefined at
    every dose) and the instance score's AUROC, against the dose."""
    last = max(int(r["step"]) for r in rows)
    at_last = [r for r in rows if int(r["step"]) == last]
    members = [r for r in at_last if r.get("column") == "members"]
    when = f"step {last}, epoch {run.epoch_of(last):g}"
    items = []
    metric, note = "mri", "MRI of the members of each dose (with all non-members)"
    if metric_values(members, metric, "dose") == []:
        metric, note = (
            "mri_unchecked",
            "MRI without the competence check (it left MRI undefined at every dose)",
        )
    spec = metric_panel_spec(members, metric, x="dose", bounded=False)  # RAD < 0: MRI < 0
    if spec is not None:
        items.append(
            Panel(f"MRI of the members against dose ({when})", spec, f"{note}; band: bootstrap 95% interval")
        )
    spec = metric_panel_spec(at_last, "score_auroc", x="dose")
    if spec is not None:
        items.append(
            Panel(
                f"MRI instance score AUROC against dose ({when})",
                spec,
                "AUROC of the per-task score (similarity x accuracy drop) on the members of each dose "
                "against all non-members; dashed grey: chance",
            )
        )
    return items
