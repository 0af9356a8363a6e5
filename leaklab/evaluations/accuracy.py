"""Accuracy: pass@1 (greedy) and pass@k (sampled) of every checkpoint, on members and non-members apart.

Each task is asked as the sft stage taught it (`leaklab/data/prompting.py`) and its reply judged through
the pipeline MRI shares (`replies.py`); a reply without code fails. pass@k is the unbiased
1 - C(n-c, k) / C(n, k). Rows: docs/evaluations.md#sft-and-accuracy-tiny_sft.
"""

from __future__ import annotations

import ast
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from leaklab.data.prompting import model_prompt, resolve_format
from leaklab.distributed import world
from leaklab.evaluations.base import EvalContext, EvalOutput, first_per_side, side_indices
from leaklab.evaluations.replies import cached_judgements, read_replies, run_readings, verdict_cache
from leaklab.execution.correctness import pass_at_k
from leaklab.execution.extract import STOP_SEQUENCES
from leaklab.metrics import group_mean_intervals
from leaklab.report import charts
from leaklab.report.section import Panel, Section, Table
from leaklab.results import rows_per_dose, without_dose
from leaklab.rows import side_row


@dataclass
class AccuracyConfig:
    """`evaluate.accuracy` in a recipe."""

    # Values that are one of a few words (checked at recipe load with a suggestion).
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"format": ("auto", "completion", "chat", "evalplus")}

    format: str = "auto"  # auto | completion | chat: how the model is asked (auto: chat if it has a template)
    ks: list[int] = field(default_factory=lambda: [1, 5])  # pass@k from samples, for k <= n_samples
    n_samples: int = 0  # sampled completions per task for pass@k (0: greedy pass@1 only)
    temperature: float = 0.8  # sampling temperature of the pass@k samples
    top_p: float = 0.95  # nucleus sampling of the pass@k samples
    max_new_tokens: int = 128  # longest reply
    batch_size: int = 64  # rows decoded together
    max_tasks: int | None = None  # evaluate at most this many members and this many non-members
    sandbox_workers: int = 2  # processes that run the tests
    timeout_s: float = 5.0  # per program
    seed: int = 0  # seeds the sampled completions

    def check(self, parent=None) -> list[str]:
        problems = []
        for key in ("max_new_tokens", "batch_size", "sandbox_workers"):
            if getattr(self, key) < 1:
                problems.append(f"evaluate.accuracy.{key}: must be at least 1, got {getattr(self, key)}")
        if self.n_samples < 0 or any(k < 1 for k in self.ks):
            problems.append("evaluate.accuracy: n_samples must be >= 0 and every k >= 1")
        if self.n_samples and self.temperature <= 0:
            problems.append("evaluate.accuracy.temperature: sampling for pass@k needs a temperature > 0")
        if self.max_tasks is not None and self.max_tasks < 1:
            problems.append(f"evaluate.accuracy.max_tasks: must be at least 1, got {self.max_tasks}")
        return problems


def _syntax_ok(program: str) -> bool:
    # Parsing is not running: the program itself only ever runs in the sandbox.
    try:
        ast.parse(program)
    except (SyntaxError, ValueError):
        return False
    return True


class Accuracy:
    name: ClassVar[str] = "accuracy"

    def specs(self, recipe) -> list[str]:
        cfg = recipe.evaluate.accuracy
        return ["pass@1"] + [f"pass@{k}" for k in sorted(set(cfg.ks)) if k <= cfg.n_samples and k > 1]

    def runs_tests(self, recipe) -> str:
        return "evaluate.evaluations: accuracy (it runs the tests)"

    def prepare(self, ctx: EvalContext) -> None:
        """Nothing to build: the sandbox starts when a checkpoint's replies hold code to run."""

    # ------------------------------------------------------------------ helpers

    def _generate(self, ctx: EvalContext, model, tokenizer, prompts: list[str], fmt: str) -> list[list[str]]:
        """Per prompt: the greedy reply, then n_samples sampled ones. Under several processes each rank
        decodes its share and the main process gathers them. The greedy replies go through the run's
        generation cache, where the mri evaluation finds its answers to the same original tasks."""
        from leaklab.signals.continuations import Decoding, greedy_replies
        from leaklab.signals.generation import HFGenerator

        cfg = ctx.recipe.evaluate.accuracy
        acc = ctx.accelerator
        if acc is not None:
            model = acc.unwrap_model(model)
        rank, n_ranks = world(acc)
        mine = list(range(len(prompts)))[rank::n_ranks]
        generator = HFGenerator(
            model,
            tokenizer,
            batch_size=cfg.batch_size,
            top_p=cfg.top_p,
            prompt_boundary=ctx.recipe.evaluate.prompt_boundary,
        )
        stop = STOP_SEQUENCES if fmt == "completion" else ()
        decoding = Decoding(model, tokenizer, generator, ctx.generation_cache, acc)
        greedy = greedy_replies(decoding, prompts, cfg.max_new_tokens, stop)
        texts: dict[int, list[str]] = {i: [greedy[i]] for i in mine}
        if cfg.n_samples:
            sampled = generator.generate(
                [prompts[i] for i in mine], cfg.max_new_tokens, stop, cfg.temperature, cfg.n_samples, cfg.seed
            )
            for i, completions in zip(mine, sampled):
                texts[i].extend(c.text for c in completions)
        if n_ranks > 1:
            from accelerate.utils import gather_object

            for part in gather_object([texts]):
                texts.update(part)
        return [texts[i] for i in range(len(prompts))]

    def _judge(self, cfg: AccuracyConfig, tasks, replies: list[list[str]], fmt: str) -> list[list[dict]]:
        """Extraction and sandbox verdict of every reply."""
        where = [(i, j) for i, texts in enumerate(replies) for j in range(len(texts))]
        asked = [tasks[i] for i, _ in where]
        readings = read_replies(asked, [replies[i][j] for i, j in where], fmt)
        results = run_readings(asked, readings, cfg.sandbox_workers, cfg.timeout_s)
        judged: list[list[dict]] = [[] for _ in tasks]
        for (i, _), reading, result in zip(where, readings, results):
            entry = {"reply": reading.reply, "code": reading.code, "full_program": False}
            if reading.failure == "syntax_error":  # code was there but does not parse: a syntax error
                entry |= {"verdict": "failed", "reason": "syntax_error", "extraction": "", "syntax_ok": False}
            elif failure := reading.failure:
                entry |= {"verdict": "failed", "reason": f"extraction: {failure}", "extraction": failure}
            else:
                entry |= {"extraction": "", "syntax_ok": _syntax_ok(reading.program)}
                entry |= {"verdict": result.verdict, "reason": result.reason}
            judged[i].append(entry)
        return judged

    # ------------------------------------------------------------------ the evaluation

    def evaluate(self, ctx: EvalContext, model, tokenizer, step: int) -> EvalOutput:
        cfg = ctx.recipe.evaluate.accuracy
        fmt = resolve_format(tokenizer, cfg.format, key="evaluate.accuracy.format")
        tasks, labels = first_per_side(ctx.eval_set, cfg.max_tasks)
        prompts = [model_prompt(t, tokenizer, fmt) for t in tasks]
        settings = {k: v for k, v in asdict(cfg).items() if k not in ("ks", "sandbox_workers", "max_tasks")}
        judged = cached_judgements(
            ctx,
            "accuracy",
            verdict_cache(ctx, "accuracy", model, tokenizer, fmt, settings),
            [t.task_id for t in tasks],
            "tasks",
            generate=lambda: self._generate(ctx, model, tokenizer, prompts, fmt),
            judge=lambda replies: self._judge(cfg, tasks, replies, fmt),
        )
        if judged is None:  # not the main process
            return EvalOutput()
        from leaklab.signals.generation import prompt_boundaries

        applied = prompt_boundaries(tokenizer, prompts, ctx.recipe.evaluate.prompt_boundary)
        ev = ctx.recipe.evaluate
        rows = accuracy_rows(judged, labels, cfg, n_bootstrap=ev.n_bootstrap, seed=ev.seed)
        if ctx.eval_set.doses is not None:
            dose_of = dict(zip(ctx.eval_set.task_ids, (int(d) for d in ctx.eval_set.doses)))
            doses = [dose_of[t.task_id] for t in tasks]
            rows += dose_accuracy_rows(judged, labels, doses, cfg, n_bootstrap=ev.n_bootstrap, seed=ev.seed)
        return EvalOutput(rows=rows, records=_records(tasks, labels, judged, applied))

    def report_section(self, rows: list[dict[str, Any]], run) -> Any:
        """pass@ of members and non-members and their gap per checkpoint, with intervals: panels and a table."""
        return accuracy_section(rows, run)

    def summary(self, rows: list[dict[str, Any]]) -> str:
        got = {
            (r["column"], r["metric"]): r["value"] for r in without_dose(rows) if r.get("value") is not None
        }
        if ("members", "pass@1") not in got:
            return ""

        def shown(side: str) -> str:
            low, high = got.get((side, "pass@1_ci_low")), got.get((side, "pass@1_ci_high"))
            interval = f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""
            return f"{got[(side, 'pass@1')]:.3f}{interval}"

        text = f"pass@1 members {shown('members')}"
        if ("non_members", "pass@1") in got:
            text += f", non-members {shown('non_members')}, gap {shown('gap')}"
        failed = got.get(("all", "n_extraction_failed"))
        return text + (f" ({failed:.0f} replies without code)" if failed else "")


def accuracy_rows(
    judged: list[list[dict]], labels: list[int], cfg: AccuracyConfig, *, n_bootstrap: int = 0, seed: int = 0
) -> list[dict[str, Any]]:
    """The metric rows of one checkpoint from the judged replies (greedy first in each task's list). With
    n_bootstrap > 0 every pass@ row (gap included) gets `<metric>_ci_low` / `_ci_high` rows: the bootstrap
    95% interval over tasks, members and non-members resampled apart (`metrics.group_mean_intervals`)."""

    ks = sorted({k for k in cfg.ks if 1 < k <= cfg.n_samples} | ({1} if cfg.n_samples else set()))
    # Per task, every pass@ metric: greedy pass@1 is 0 / 1, the sampled ones the unbiased estimate.
    per_task: dict[str, list[float]] = {"pass@1": [float(j[0]["verdict"] == "passed") for j in judged]}
    for k in ks:
        metric = "pass@1_sampled" if k == 1 else f"pass@{k}"  # "pass@1" is the greedy one
        per_task[metric] = [
            pass_at_k(len(j) - 1, sum(s["verdict"] == "passed" for s in j[1:]), k) for j in judged
        ]
    intervals = {
        metric: group_mean_intervals(values, labels, n_bootstrap=n_bootstrap, seed=seed)
        for metric, values in per_task.items()
    }
    rows: list[dict[str, Any]] = []

    def add(side: str, metric: str, value: float | None, **extra: Any) -> None:
        rows.append(side_row(side, metric, value, **extra))

    def add_with_interval(side: str, metric: str, value: float | None, **extra: Any) -> None:
        add(side, metric, value, **extra)
        if value is None:
            return
        for tail in ("_ci_low", "_ci_high"):
            bound = intervals[metric].get(side + tail)
            if bound is not None:
                add(side, metric + tail, None if math.isnan(bound) else bound, **extra)

    means: dict[tuple[str, str], float | None] = {}
    for side, index in side_indices(labels).items():
        for metric, values in per_task.items():
            value = sum(values[i] for i in index) / len(index) if index else None
            means[(side, metric)] = value
            if metric == "pass@1":
                add_with_interval(side, metric, value, decoding="greedy")
            else:
                add_with_interval(side, metric, value, decoding="sampled", n=cfg.n_samples, temperature=cfg.temperature)  # fmt: skip
        greedy = [judged[i][0] for i in index]
        verdicts = Counter(g["verdict"] for g in greedy)
        add(side, "n_tasks", float(len(greedy)))
        for verdict in ("passed", "failed", "timeout", "error"):
            add(side, f"n_{verdict}", float(verdicts.get(verdict, 0)))
        add(side, "n_extraction_failed", float(sum(bool(g.get("extraction")) for g in greedy)))
        add(side, "n_syntax_error", float(sum(g.get("syntax_ok") is False for g in greedy)))
    for metric in sorted(per_task):
        a, b = means.get(("members", metric)), means.get(("non_members", metric))
        add_with_interval("gap", metric, None if a is None or b is None else a - b)
    return rows


def dose_accuracy_rows(
    judged: list[list[dict]],
    labels: list[int],
    doses: list[int],
    cfg: AccuracyConfig,
    *,
    n_bootstrap: int = 0,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """A run with inject.doses: per dose d, the `members` and `gap` rows of `accuracy_rows` computed on
    the members of dose d with all the non-members, each with `"dose": d`."""

    def rows_of(index: list[int]) -> list[dict[str, Any]]:
        subset = [judged[i] for i in index], [labels[i] for i in index]
        return accuracy_rows(*subset, cfg, n_bootstrap=n_bootstrap, seed=seed)

    return rows_per_dose(labels, doses, rows_of, keep=lambda r: r["column"] in ("members", "gap"))


def _records(tasks, labels: list[int], judged: list[list[dict]], applied: list[str]) -> list[dict[str, Any]]:
    out = []
    for task, label, replies, boundary in zip(tasks, labels, judged, applied):
        greedy, samples = replies[0], replies[1:]
        out.append(
            {
                "task_id": task.task_id,
                "label": label,
                "reply": greedy["reply"],
                "extraction": greedy.get("extraction", ""),
                "verdict": greedy["verdict"],
                "reason": greedy.get("reason", ""),
                "n": len(samples),
                "c": sum(s["verdict"] == "passed" for s in samples),
                "prompt_boundary": boundary,  # how the prompt ended for the model (cut | heal | none)
            }
        )
    return out


# --------------------------------------------------------------------------- report section

SIDE_NAMES = {"members": "members", "non_members": "non-members", "gap": "gap (members - non-members)"}


def _is_pass_metric(metric: str) -> bool:
    return metric.startswith("pass@") and not metric.endswith(("_ci_low", "_ci_high"))


def accuracy_section(rows: list[dict[str, Any]], run) -> Any:
    """Per pass@ metric a panel of members vs non-members and one of their gap over checkpoints, each
    with its bootstrap band, and a table per checkpoint: value [95% interval] per side."""
    metrics = list(dict.fromkeys(str(r["metric"]) for r in rows if _is_pass_metric(str(r.get("metric")))))
    # The charts name each series after its column: show the sides as readers say them.
    named = [{**r, "column": SIDE_NAMES[r["column"]]} for r in rows if r.get("column") in SIDE_NAMES]
    has_intervals = any(str(r.get("metric")).endswith("_ci_low") for r in rows)
    n_bootstrap = (run.recipe.get("evaluate") or {}).get("n_bootstrap")
    no_intervals = "no intervals in the rows (evaluate.n_bootstrap = 0 or an older run)"
    band = (
        f"band: bootstrap 95% interval over tasks ({n_bootstrap} resamples)"
        if has_intervals
        else no_intervals
    )
    items: list[Any] = []
    for metric in metrics:
        sides = [r for r in named if r["column"] != SIDE_NAMES["gap"]]
        gap = [r for r in named if r["column"] == SIDE_NAMES["gap"]]
        spec = charts.metric_panel_spec(sides, metric, x="step", bounded=True)
        if spec is not None:
            items.append(Panel(f"{metric}: members vs non-members", spec, band))
        spec = charts.metric_panel_spec(gap, metric, x="step", bounded=False)
        if spec is not None:
            items.append(
                Panel(f"{metric}: members - non-members", spec, f"above 0: accuracy inflated; {band}")
            )

    value = {(int(r["step"]), r["column"], r["metric"]): r.get("value") for r in rows}

    def cell(step: int, side: str, metric: str) -> str:
        v, low, high = (value.get((step, side, metric + tail)) for tail in ("", "_ci_low", "_ci_high"))
        if v is None:
            return "–"
        sign = "+" if side == "gap" else ""
        text = f"{v:{sign}.3f}"
        return text + (
            f" [{low:{sign}.2f}, {high:{sign}.2f}]" if low is not None and high is not None else ""
        )

    def count(step: int, side: str) -> str:
        n = value.get((step, side, "n_tasks"))
        return "?" if n is None else f"{n:.0f}"

    table = [
        [str(step), metric, cell(step, "members", metric), cell(step, "non_members", metric),
         cell(step, "gap", metric), f"{count(step, 'members')} / {count(step, 'non_members')}"]
        for step in sorted({s for s, _, _ in value})
        for metric in metrics
    ]  # fmt: skip
    items.append(
        Table(
            "Accuracy per checkpoint",
            ["step", "metric", "members", "non-members", "gap (members - non-members)", "tasks (members / non-members)"],
            table,
            caption="value [2.5th, 97.5th percentile over bootstrap resamples of the tasks, members and "
            "non-members resampled apart]",
        )
    )  # fmt: skip
    return Section(
        key="accuracy",
        title="Accuracy: members vs non-members",
        intro=(
            "Each task asked as training taught it, the reply's code run against the task's tests. pass@1 "
            "is greedy; a positive gap is accuracy the injection inflated (members were trained on)."
        ),
        items=items,
        notes=[] if has_intervals else [no_intervals],
    )


def dose_panels(rows: list[dict[str, Any]], run) -> list[Panel]:
    """The report's dose-response panels (its record's `dose_panels`): the members' pass@1 against the
    dose at the last checkpoint accuracy evaluated."""
    members = [r for r in rows if r.get("column") == "members"]
    if not members:
        return []
    last = max(int(r["step"]) for r in members)
    spec = charts.metric_panel_spec(
        [r for r in members if int(r["step"]) == last], "pass@1", x="dose", bounded=True
    )
    if spec is None:
        return []
    return [
        Panel(
            f"Members' pass@1 (greedy) against dose (step {last}, epoch {run.epoch_of(last):g})",
            spec,
            "share of the members of each dose whose greedy solution passes the tests; the "
            "non-members' pass@1 is in the accuracy section",
        )
    ]
