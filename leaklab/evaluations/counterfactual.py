"""Counterfactual functional memorization per checkpoint, members and non-members apart (000 §3; rows,
judges and HyClone's stages: docs/evaluations.md#counterfactual-memorization-and-the-similarity-suite-tiny_counterfactual).

The checkpoint (target) and the reference model (generated once per run) continue each task's function
(`leaklab/memorization/counterfactual.py`); the similarity suite compares what each wrote with the
ground truth. As the paper's Table 1 averages over all samples, a generation without a function scores
0 on the structural metrics and a HyClone pair that never ran scores 0.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

from leaklab.evaluations.base import EvalContext, EvalOutput, run_decoding, side_indices
from leaklab.execution.crossexec import MAX_INPUTS, CrossPair, cross_execute
from leaklab.execution.sandbox import Sandbox
from leaklab.memorization.counterfactual import (
    FunctionFilter,
    extract_functions,
    generate_functions,
    memorized_by,
    most_lenient,
    score_functions,
    table1,
    table2,
)
from leaklab.metrics import auroc
from leaklab.perturb.rewriting import NotRewritable, call_inputs
from leaklab.results import rows_per_dose, without_dose
from leaklab.rows import float_or_none, side_row
from leaklab.similarity.judges import judge_pairs, make_backend

JUDGES = ("structural", "rating", "equivalence")  # the similarity judges (clone_screen is HyClone's stage 1)
RAW_CHARS = 2000  # of each raw continuation kept in the records, to see why extraction failed
HYCLONE_EXECUTED_ONLY = "hyclone_executed_only"  # HyClone over executed pairs only: a diagnostic
# What Table 2 counts (in the done specs: a step counted another way is evaluated again)
TABLE2_SPEC = "table2: the paper's functional metrics, both unions; HyClone not executed = 0"
# What the ground truth is and how a generation without a function scores (a change re-evaluates a step)
GROUND_TRUTH_SPEC = "ground truth: all after the signature, docstring included; no function: structure 0"


@dataclass
class CounterfactualConfig:
    """`evaluate.counterfactual` in a recipe (defaults: the paper's settings)."""

    # Values that are one of a few words (checked at recipe load with a suggestion).
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"judge_backend": ("none", "hf", "openai")}

    context_tokens: int = 250  # P: tokens of preceding context in the prompt
    max_new_tokens: int = 500  # greedy continuation length
    batch_size: int = 16  # rows decoded together
    min_body_lines: int = 10  # the function filter (the paper: 10-50 body lines, >= 500 chars, not __init__)
    max_body_lines: int = 50  # longest function body kept, in lines (the filter above)
    min_chars: int = 500  # shortest function kept, in characters (the filter above)
    tau_text: float = 0.75  # BLEU below this is "not verbatim"
    tau_func: float = 0.75  # a functional metric at or above this is "reproduced"
    max_tasks: int | None = None  # at most this many members and this many non-members
    workers: int = 2  # similarity suite processes
    judges: list[str] = field(default_factory=list)  # LLM judges as metrics: structural, rating, equivalence
    judge_backend: str = "none"  # none | hf | openai: who answers the judges
    judge_model: str | None = None  # hf: a local directory or hub name; openai: the served model's name
    judge_base_url: str | None = None  # openai: the server, e.g. http://127.0.0.1:8000/v1 ($OPENAI_API_KEY)
    judge_max_new_tokens: int = 256  # longest judge reply
    execution: bool = False  # HyClone stage 2: run both functions on the task's test inputs in the sandbox
    execution_timeout_s: float = 5.0  # per program in the sandbox (execution: true)
    hyclone_screen: bool = True  # execution + a judge back-end: HyClone's stage 1 LLM screen first
    hyclone_llm_inputs: int = 10  # execution + a judge back-end: inputs the LLM proposes per function
    hyclone_generated_inputs: int = 10  # execution: inputs generated from the signature per pair (0: off)

    def check(self, parent=None) -> list[str]:
        problems = []
        for key in ("max_new_tokens", "batch_size", "workers", "min_body_lines"):
            if getattr(self, key) < 1:
                problems.append(
                    f"evaluate.counterfactual.{key}: must be at least 1, got {getattr(self, key)}"
                )
        if self.hyclone_llm_inputs < 0:
            problems.append(
                f"evaluate.counterfactual.hyclone_llm_inputs: must be >= 0, got {self.hyclone_llm_inputs}"
            )
        if not 0 <= self.hyclone_generated_inputs <= MAX_INPUTS:
            problems.append(
                f"evaluate.counterfactual.hyclone_generated_inputs: must lie in [0, {MAX_INPUTS}] (the inputs run"
                f" per pair), got {self.hyclone_generated_inputs}"
            )
        if self.context_tokens < 0 or self.min_chars < 0:
            problems.append("evaluate.counterfactual: context_tokens and min_chars must be >= 0")
        if self.max_body_lines < self.min_body_lines:
            problems.append("evaluate.counterfactual: max_body_lines must be >= min_body_lines")
        for key in ("tau_text", "tau_func"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                problems.append(
                    f"evaluate.counterfactual.{key}: must lie in [0, 1], got {getattr(self, key)}"
                )
        unknown = [j for j in self.judges if j not in JUDGES]
        if unknown:
            problems.append(f"evaluate.counterfactual.judges: unknown {unknown}; choose from {list(JUDGES)}")
        if self.judges and self.judge_backend == "none":
            problems.append(
                "evaluate.counterfactual.judges: needs evaluate.counterfactual.judge_backend (hf or openai)"
            )
        if self.judge_backend != "none" and not self.judge_model:
            problems.append(
                f"evaluate.counterfactual.judge_model: the {self.judge_backend} backend needs a model"
            )
        if self.judge_backend == "openai" and not self.judge_base_url:
            problems.append(
                "evaluate.counterfactual.judge_base_url: the openai backend needs the server's URL"
            )
        return problems


class Counterfactual:
    name: ClassVar[str] = "counterfactual"

    def __init__(self) -> None:
        self._samples: list = []
        self._labels: list[int] = []
        self._doses: list[int] = []  # per sample, its exposure dose (0: non-member) in a run with doses
        self._reference: list[dict] | None = None  # the reference's extracted functions, made once
        self._reference_judged: dict[str, list[float]] | None = None  # the judges on them, asked once
        self._judge = None  # (generator, render), loaded on first use (_judge_backend)
        self._inputs: list[list] = []  # per sample: the task's test inputs (HyClone's execution)
        self._reference_executed: list | None = None  # the reference's CrossResults, made once

    def specs(self, recipe) -> list[str]:
        from leaklab.similarity.structure import grammar_versions
        from leaklab.similarity.suite import EDIT_SIMILARITY, METRICS

        # A new grammar changes node counts (TSED, CodeBLEU syntax), a new normalisation the edit
        # similarity: either way the step is evaluated again.
        return [
            *METRICS,
            f"edit_similarity: {EDIT_SIMILARITY}",
            TABLE2_SPEC,
            GROUND_TRUTH_SPEC,
            f"tree-sitter-python=={grammar_versions()['tree-sitter-python']}",
        ]

    def prepare(self, ctx: EvalContext) -> None:
        """The function of every task that passes the filter (the relaxation, if any, is printed)."""
        cfg = ctx.recipe.evaluate.counterfactual
        keep = FunctionFilter(cfg.min_body_lines, cfg.max_body_lines, cfg.min_chars)
        if keep != FunctionFilter():
            ctx.log(
                f"[leaklab] counterfactual: function filter relaxed to {keep.describe()} "
                f"(the paper: {FunctionFilter().describe()})"
            )
        skipped: Counter = Counter()
        per_side: Counter = Counter()
        doses = getattr(ctx.eval_set, "doses", None)
        dose_of = {} if doses is None else dict(zip(ctx.eval_set.task_ids, (int(d) for d in doses)))
        for task, label in zip(ctx.eval_set.tasks, ctx.eval_set.labels):
            if cfg.max_tasks is not None and per_side[int(label)] >= cfg.max_tasks:
                continue
            source = task.prompt + task.solution if task.prompt_is_code else task.solution
            found, why = extract_functions(source, task.task_id, keep)
            skipped.update(why)
            if task.entry_point:
                found = [s for s in found if s.name == task.entry_point]
            if not found:
                skipped["entry point filtered out"] += 1
                continue
            self._samples.append(found[-1])  # the entry point is defined last when helpers precede it
            self._inputs.append(_test_inputs(task) if cfg.execution else [])
            self._labels.append(int(label))
            if dose_of:
                self._doses.append(dose_of[task.task_id])
            per_side[int(label)] += 1
        ctx.log(
            f"[leaklab] counterfactual: {per_side[1]} member and {per_side[0]} non-member functions"
            + (f"; skipped {dict(skipped)}" if skipped else "")
        )

    # ------------------------------------------------------------------ generation and extraction

    def _functions(self, ctx: EvalContext, model, tokenizer) -> list[dict]:
        """Per sample the continuation and the function extracted from it (`generate_functions`)."""
        cfg = ctx.recipe.evaluate.counterfactual
        decoding = run_decoding(ctx, model, tokenizer, cfg.batch_size)
        return generate_functions(decoding, self._samples, cfg.context_tokens, cfg.max_new_tokens)

    # ------------------------------------------------------------------ the evaluation

    def evaluate(self, ctx: EvalContext, model, tokenizer, step: int) -> EvalOutput:
        cfg = ctx.recipe.evaluate.counterfactual
        if not self._samples:
            return EvalOutput(rows=[side_row("all", "n_samples", 0.0)])
        target = self._functions(ctx, model, tokenizer)
        if self._reference is None:  # the reference's functions, made once per run
            if step == 0 and not ctx.recipe.evaluate.reference_model:
                self._reference = target  # step 0 is the base model, the reference itself
            elif (loaded := ctx.reference()) is None:
                raise ValueError(
                    "evaluate.counterfactual needs a reference model: evaluate.reference_model or a run's base model"
                )
            else:
                self._reference = self._functions(ctx, *loaded)
        reference = self._reference
        if not ctx.is_main_process:
            return EvalOutput()
        t_scores, r_scores = score_functions(self._samples, target, reference, cfg.workers)
        if cfg.judges:
            if self._reference_judged is None:
                self._reference_judged = self._ask_judges(ctx, reference)
            for scored, judged in (
                (t_scores, self._ask_judges(ctx, target)),
                (r_scores, self._reference_judged),
            ):
                for metric, values in judged.items():
                    for row, value in zip(scored, values):
                        row[metric] = value
        executed = None
        if cfg.execution:
            executed = self._execute(cfg, target)
            if self._reference_executed is None:
                self._reference_executed = self._execute(cfg, reference)
            for scored, results in ((t_scores, executed), (r_scores, self._reference_executed)):
                for row, result in zip(scored, results):
                    row.update(hyclone_scores(result, screens_pairs(cfg)))
        rows = counterfactual_rows(t_scores, r_scores, target, reference, self._labels, cfg)
        if self._doses:
            rows += dose_counterfactual_rows(
                t_scores, r_scores, target, reference, self._labels, self._doses, cfg
            )
        if executed is not None:
            rows += execution_rows(executed, self._labels, self._reference_executed)
        records = self._records(t_scores, r_scores, target, reference, cfg)
        for record, result, ref in zip(records, executed or [], self._reference_executed or []):
            for key, got in (("hyclone_target", result), ("hyclone_reference", ref)):
                record[key] = {
                    "s_a": got.s_a,
                    "clone": got.clone,
                    "n_inputs": got.n_inputs,
                    "reason": got.reason,
                    "repaired": list(got.repaired),  # sides run again with an LLM preamble
                }
        return EvalOutput(rows=rows, records=records)

    def _execute(self, cfg, functions: list[dict]) -> list:
        """HyClone stage 2 for every sample: ground truth vs the extracted function on the test inputs."""
        pairs = [
            CrossPair(
                s.context + s.function,
                None if f["body"] is None else s.context + s.signature + f["body"],
                s.name,
                inputs,
            )
            for s, f, inputs in zip(self._samples, functions, self._inputs)
        ]
        llm = None
        if cfg.judge_backend != "none" and (cfg.hyclone_screen or cfg.hyclone_llm_inputs > 0):
            from leaklab.execution.crossexec import LLMStages

            llm = LLMStages(*self._judge_backend(cfg), cfg.hyclone_screen, cfg.hyclone_llm_inputs,
                            max(cfg.judge_max_new_tokens, 512))  # fmt: skip
        with Sandbox(workers=cfg.workers, timeout_s=cfg.execution_timeout_s) as sandbox:
            return cross_execute(pairs, sandbox, timeout_s=cfg.execution_timeout_s, llm=llm,
                                 generated=cfg.hyclone_generated_inputs)  # fmt: skip

    def _judge_backend(self, cfg) -> tuple:
        """(generator, render) of the judge back-end, loaded on first use."""
        if self._judge is None:
            self._judge = make_backend(cfg.judge_backend, cfg.judge_model, cfg.judge_base_url)
        return self._judge

    def _ask_judges(self, ctx: EvalContext, functions: list[dict]) -> dict[str, list[float]]:
        """judge_<kind> -> a 0-1 score per sample (nan where the reply could not be read)."""
        cfg = ctx.recipe.evaluate.counterfactual
        generator, render = self._judge_backend(cfg)
        pairs = [
            (s.signature + s.ground_truth, s.signature + (f["body"] if f["body"] is not None else f["raw"]))
            for s, f in zip(self._samples, functions)
        ]
        out = {}
        for kind in cfg.judges:
            verdicts, failures = judge_pairs(generator, kind, pairs, render, cfg.judge_max_new_tokens)
            if failures:
                ctx.log(
                    f"[leaklab] counterfactual: judge {kind}: {sum(failures.values())} unreadable {dict(failures)}"
                )
            out[f"judge_{kind}"] = [math.nan if v.score is None else v.score for v in verdicts]
        return out

    def _records(self, t_scores, r_scores, target, reference, cfg) -> list[dict[str, Any]]:
        METRICS, FUNCTIONAL = metric_names(cfg)  # noqa: N806 - the suite's names, judges and HyClone added
        out = []
        for sample, label, ts, rs, tf, rf in zip(
            self._samples, self._labels, t_scores, r_scores, target, reference
        ):
            out.append(
                {
                    "task_id": sample.source_id,
                    "label": label,
                    "target_function": tf["body"],
                    "target_failure": tf["failure"],
                    "target_raw": tf["raw"][:RAW_CHARS],
                    "reference_function": rf["body"],
                    "reference_failure": rf["failure"],
                    "reference_raw": rf["raw"][:RAW_CHARS],
                    # cut | heal | none: how the prompt ended (the same for both models)
                    "prompt_boundary": tf.get("prompt_boundary"),
                    "target": {m: float_or_none(ts[m]) for m in METRICS},
                    "reference": {m: float_or_none(rs[m]) for m in METRICS},
                    "missing_target": ts["missing"],
                    "memorized_by": memorized_by(ts, rs, FUNCTIONAL, cfg.tau_text, cfg.tau_func),
                }
            )
        return out

    def summary(self, rows: list[dict[str, Any]]) -> str:
        rows = without_dose(rows)
        got = {(r["column"], r["metric"]): r["value"] for r in rows if r.get("value") is not None}
        if ("members", "memorized_any") not in got:
            return ""
        excluded = next(
            (r["params"].get("excluded") for r in rows if r["metric"] == "memorized_any_excl_lenient"), None
        )

        def flagged(side: str) -> str:
            text = f"{got.get((side, 'memorized_any'), 0):.0f}"
            if excluded:
                text += f" ({got.get((side, 'memorized_any_excl_lenient'), 0):.0f} without {excluded})"
            return text

        delta = got.get(("members", "tsed.delta"))
        failed = got.get(("members", "n_extraction_failed_target"), 0)
        line = (
            f"counterfactual: flagged by any functional metric: members {flagged('members')}, "
            f"non-members {flagged('non_members')}; "
            f"TSED delta members {'-' if delta is None else f'{delta:+.3f}'}; "
            f"{failed:.0f} member generations without a function"
        )
        if ("members", "hyclone.memorized") in got:
            line += (
                f"; HyClone members {got[('members', 'hyclone.memorized')]:.0f} flagged "
                f"({got.get(('members', f'{HYCLONE_EXECUTED_ONLY}.memorized'), 0):.0f} among pairs executed "
                f"on both sides; {got.get(('members', 'hyclone.n_executed_target'), 0):.0f} of "
                f"{got.get(('members', 'n_samples'), 0):.0f} target pairs executed)"
            )
        return line


def screens_pairs(cfg) -> bool:
    """Whether HyClone's stage 1 is asked: execution on, a judge back-end to ask, hyclone_screen."""
    return cfg.execution and cfg.judge_backend != "none" and cfg.hyclone_screen


def metric_names(cfg) -> tuple[list[str], list[str]]:
    """(every metric, the functional ones of Table 2 and its unions: the paper's, 000 §3, plus the judges
    asked and HyClone's stages)."""
    from leaklab.similarity.suite import FUNCTIONAL_METRICS, METRICS

    judges = [f"judge_{kind}" for kind in cfg.judges]
    hyclone = (["hyclone_stage1"] if screens_pairs(cfg) else []) + (["hyclone"] if cfg.execution else [])
    diagnostic = [HYCLONE_EXECUTED_ONLY] if cfg.execution else []
    return [*METRICS, *judges, *hyclone, *diagnostic], [*FUNCTIONAL_METRICS, *judges, *hyclone]


def hyclone_scores(result, screened: bool) -> dict[str, float]:
    """One pair's HyClone metrics from its `CrossResult`: `hyclone` (S_a + S_b) / 2, 0 for a pair that
    never ran (000, §4, App. C.2), NaN there in `hyclone_executed_only`; when screened, `hyclone_stage1`
    (1 a clone, NaN an unreadable reply)."""
    ran = result.similarity is not None
    out = {
        "hyclone": result.similarity if ran else 0.0,
        HYCLONE_EXECUTED_ONLY: result.similarity if ran else math.nan,
    }
    if screened:
        unreadable = result.screen.startswith("unreadable")
        out["hyclone_stage1"] = math.nan if unreadable else float(result.screen == "clone")
    return out


def _test_inputs(task) -> list[list]:
    """The argument lists the task's tests call its entry point with ([] when there are none)."""
    try:
        return call_inputs(task)
    except NotRewritable:
        return []


def execution_rows(executed, labels, reference=None) -> list[dict[str, Any]]:
    """Per side: how many target (and reference) pairs reached execution, and why the others did not."""
    rows = []
    runs = {"target": executed} if reference is None else {"target": executed, "reference": reference}
    for side, index in side_indices(labels).items():
        for name, results in runs.items():
            ran = [results[i] for i in index]
            why = dict(Counter(r.reason for r in ran if r.reason))
            n = float(sum(not r.reason for r in ran))
            rows.append(side_row(side, f"hyclone.n_executed_{name}", n, not_executed=why))
        chosen = [executed[i] for i in index]
        rows.append(side_row(side, "hyclone.clones_target", float(sum(bool(r.clone) for r in chosen))))
        dropped = sum((Counter(r.llm_inputs_dropped) for r in chosen), Counter())
        screens = Counter(r.screen.split(":")[0] for r in chosen if r.screen)
        rows.append(side_row(side, "hyclone.llm_inputs_target", float(sum(sum(r.llm_inputs) for r in chosen)),
                         dropped=dict(dropped), screen=dict(screens)))  # fmt: skip
        made = sum((Counter(r.generated_inputs) for r in chosen), Counter())
        total = float(sum(made.values()))
        rows.append(side_row(side, "hyclone.generated_inputs_target", total, by_source=dict(made)))
    return rows


def counterfactual_rows(t_scores, r_scores, target, reference, labels, cfg) -> list[dict[str, Any]]:
    """Table 1 and Table 2 as rows, for members, non-members and all samples."""
    from leaklab.similarity.structure import grammar_versions
    from leaklab.similarity.suite import STRUCTURE_METRICS as SUITE_STRUCTURE

    METRICS, FUNCTIONAL = metric_names(cfg)  # noqa: N806 - the suite's names, judges and HyClone added
    judges = [f"judge_{kind}" for kind in cfg.judges]
    diagnostic = [m for m in METRICS if m == HYCLONE_EXECUTED_ONLY]
    unreadable = judges + [m for m in FUNCTIONAL if m == "hyclone_stage1"]
    grammar = f"tree-sitter-python=={grammar_versions()['tree-sitter-python']}"
    # The paper's second union leaves out its most lenient judge; which one that is is read once, over
    # all samples, so that members and non-members leave out the same judge.
    lenient = most_lenient(table2(t_scores, r_scores, judges, cfg.tau_text, cfg.tau_func)["counts"], judges)

    rows: list[dict[str, Any]] = []
    for side, index in side_indices(labels).items():

        def add(metric: str, value, **params) -> None:
            rows.append(side_row(side, metric, value, **params))  # noqa: B023 - called within this iteration

        ts, rs = [t_scores[i] for i in index], [r_scores[i] for i in index]
        add("n_samples", float(len(index)))
        add("n_extraction_failed_target", float(sum(target[i]["body"] is None for i in index)))
        add("n_extraction_failed_reference", float(sum(reference[i]["body"] is None for i in index)))
        add("n_structure_missing_target", float(sum("tsed" in t["missing"] for t in ts)))
        for entry in table1(ts, rs, METRICS):
            # Structural scores depend on the grammar: their rows name it.
            extra = {"grammar": grammar} if entry["metric"] in SUITE_STRUCTURE else {}
            for stat in ("target_mean", "target_std", "reference_mean", "reference_std", "delta"):
                add(f"{entry['metric']}.{stat}", float_or_none(entry.get(stat, math.nan)), **extra)
        counts = table2(ts, rs, FUNCTIONAL, cfg.tau_text, cfg.tau_func, exclude=lenient)
        executed_only = table2(ts, rs, diagnostic, cfg.tau_text, cfg.tau_func)["counts"]
        thresholds = {"tau_text": cfg.tau_text, "tau_func": cfg.tau_func}
        for metric, count in {**counts["counts"], **executed_only}.items():
            add(f"{metric}.memorized", float(count), **thresholds, **_metric_params(metric, grammar, cfg))
        for metric in unreadable:
            missing = sum(math.isnan(t[metric]) for t in ts)
            add(f"{metric}.n_unreadable_target", float(missing), judge=cfg.judge_model)
        # Table 2's two unions: over every functional metric, and without the most lenient judge.
        add("memorized_any", float(counts["unique_over_metrics"]), metrics=list(FUNCTIONAL))
        add("memorized_any_excl_lenient", float(counts["unique_excluding"]), excluded=lenient)
        add("near_verbatim", float(counts["near_verbatim_bleu"]), tau_text=cfg.tau_text)
        add("exact_verbatim", float(counts["exact_verbatim"]))
    rows += membership_rows(t_scores, r_scores, labels, METRICS)
    return rows


def dose_counterfactual_rows(
    t_scores, r_scores, target, reference, labels, doses, cfg
) -> list[dict[str, Any]]:
    """A run with inject.doses: per dose d, the `members` rows (Table 1 and the criterion's flags) and
    the `membership` AUROCs of `counterfactual_rows` on the members of dose d with all the non-members,
    each with `"dose": d`."""

    def rows_of(index: list[int]) -> list[dict[str, Any]]:
        subset = ([values[i] for i in index] for values in (t_scores, r_scores, target, reference, labels))
        return counterfactual_rows(*subset, cfg)

    return rows_per_dose(labels, doses, rows_of, keep=lambda r: r["column"] in ("members", "membership"))


def _metric_params(metric: str, grammar: str, cfg) -> dict[str, Any]:
    """What a Table 2 count depends on beyond the thresholds, for its row's params."""
    from leaklab.similarity.suite import STRUCTURE_METRICS

    if metric in STRUCTURE_METRICS:
        return {"grammar": grammar}
    if metric == "hyclone":
        return {"not_executed": "scored 0 (not a clone)"}
    if metric == HYCLONE_EXECUTED_ONLY:
        return {"over": "pairs executed for both target and reference"}
    return {"judge": cfg.judge_model}


def membership_rows(t_scores, r_scores, labels, metrics) -> list[dict[str, Any]]:
    """Each similarity as one more membership signal: AUROC of members vs non-members when scored by the
    target's similarity, and by the delta (target - reference). A missing score ranks as least member-like."""
    rows = []
    for metric in metrics:
        target = [t[metric] for t in t_scores]
        delta = [t[metric] - r[metric] for t, r in zip(t_scores, r_scores)]
        for signal, scores in (("target", target), ("delta", delta)):
            value = auroc(scores, labels) if len(set(labels)) == 2 else math.nan
            rows.append(
                side_row("membership", f"{metric}.auroc_{signal}", float_or_none(value), signal=signal)
            )
    return rows


def dose_panels(rows: list[dict[str, Any]], run) -> list[Any]:
    """The report's dose-response panels (its record's `dose_panels`): the criterion's flag rate per dose
    at the last checkpoint it evaluated, the share of each dose's members that some functional metric
    calls memorized (`memorized_any` over `n_samples`), beside the non-members' share from the
    all-members rows of the same checkpoint."""
    from leaklab.report import charts
    from leaklab.report.section import Panel

    last = max(int(r["step"]) for r in rows)
    value = {
        (int(r["dose"]), r["metric"]): r.get("value")
        for r in rows
        if int(r["step"]) == last and r.get("column") == "members"
    }
    non_members = {
        r["metric"]: r.get("value")
        for r in run.rows_of("counterfactual")
        if int(r["step"]) == last and r.get("column") == "non_members"
    }

    def rate(flagged, n):
        return flagged / n if isinstance(flagged, (int, float)) and n else None

    base = {"evaluation": "counterfactual", "step": last, "epoch": run.epoch_of(last), "metric": "flag_rate"}
    points = []
    for dose in sorted({d for d, _ in value}):
        points.append({**base, "column": "members", "dose": dose,
                       "value": rate(value.get((dose, "memorized_any")), value.get((dose, "n_samples")))})  # fmt: skip
        reference = rate(non_members.get("memorized_any"), non_members.get("n_samples"))
        points.append({**base, "column": "non_members", "dose": dose, "value": reference})
    spec = charts.metric_panel_spec(points, "flag_rate", x="dose", bounded=True)
    if spec is None:
        return []
    return [
        Panel(
            f"Counterfactual criterion: members flagged against dose (step {last}, epoch {run.epoch_of(last):g})",
            spec,
            "share of the members of each dose that some functional metric calls memorized (Table 2's "
            "union, memorized_any); non_members: the share of all non-members, the same at every dose",
        )
    ]
