"""The report's sections: the run header, detection and training built in (`SECTIONS`), one per other
evaluation with rows: its class's `report_section(rows, run)` (see `section.py`), else a generic section.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

import leaklab.report.charts as charts
from leaklab.evaluations import EVALUATIONS
from leaklab.metrics import roc_curve
from leaklab.plugins import ReportsSection, resolve
from leaklab.report.rundata import RunData
from leaklab.report.section import Panel, Section, Table, fmt_interval, panel_values
from leaklab.report.section import fmt as _fmt
from leaklab.report.tables import THRESHOLD_FREE, dataset_inference_cells, shift_warnings
from leaklab.results import (
    DELAY_LEVELS,
    column_of,
    detection_delays,
    display_name,
    exposures_by_dose,
    is_margin,
    is_rule,
    margin_column,
    ordered,
    undecided_note,
)

HEADLINE = ("auroc", "tpr@1%fpr", "f1")
HIST_BINS = 20


def _pct(v: Any) -> str:
    return f"{100 * v:.1f}%" if isinstance(v, (int, float)) and math.isfinite(v) else "–"


def _counts_caption(run: RunData) -> str:
    n_pos, n_neg = run.sample_counts()
    return f"n = {n_pos} members + {n_neg} non-members" if n_pos is not None else "sample counts unknown"


def _bootstrap_caption(run: RunData, rows: list[dict[str, Any]], metric: str) -> str:
    has_band = any(r.get("metric") == f"{metric}_ci_low" and r.get("value") is not None for r in rows)
    if not has_band:
        return "no intervals in the rows (evaluate.n_bootstrap = 0)"
    n = (run.recipe.get("evaluate") or {}).get("n_bootstrap")
    return f"band: bootstrap 95% interval ({n} resamples)" if n else "band: bootstrap 95% interval"


# --------------------------------------------------------------------------- header


def _phase_times(run: RunData) -> list[tuple[str, float]]:
    """Wall time of training (its evaluations included), each evaluation and each `timing` row."""
    phases: dict[str, float] = {}
    for r in run.rows:
        v = r.get("value")
        if r.get("metric") == "train_runtime" and isinstance(v, (int, float)):
            phases["training incl. evaluations (Trainer runtime)"] = float(v)
        elif r.get("metric") == "done" and isinstance(r.get("seconds"), (int, float)):
            key = f"{r.get('evaluation')} (all checkpoints)"
            phases[key] = phases.get(key, 0.0) + float(r["seconds"])
        elif r.get("evaluation") == "timing" and isinstance(v, (int, float)):
            phases[str(r.get("metric"))] = phases.get(str(r.get("metric")), 0.0) + float(v)
    return list(phases.items())


def header_section(run: RunData) -> Section:
    recipe, m, mix, env = run.recipe, run.manifest, run.mixture, run.environment
    facts: list[list[str]] = []
    model = (recipe.get("model") or {}).get("name_or_path")
    stage = (recipe.get("train") or {}).get("stage")
    mia = is_mia(run)
    if model:
        trained = "no training: leaklab mia" if mia else f"stage {stage}"
        facts.append(["model", f"{model} ({trained})"])
    if m:
        facts.append(["data" if mia else "benchmark", f"{m.get('benchmark')} ({m.get('data_source', '?')})"])
        facts.append(["members / non-members", f"{m.get('n_members')} / {m.get('n_non_members')}"])
        if not mia:
            facts.append(["split seed", str(m.get("seed"))])
        left_out = m.get("left_out") or []
        if left_out:
            first = f"{left_out[0].get('task_id')}: {str(left_out[0].get('reason', ''))[:120]}"
            why = "task(s) whose canonical solution fails its own tests"
            facts.append(["left out", f"{len(left_out)} {why} (first: {first})"])
    elif run.sample_counts()[0] is not None:
        n_pos, n_neg = run.sample_counts()
        facts.append(["members / non-members", f"{n_pos} / {n_neg}"])
    if mix:
        achieved = f"achieved 1:{mix.get('achieved_ratio', float('nan')):g}"
        tokens = f"{mix.get('member_tokens', 0):,} member + {mix.get('web_tokens', 0):,} corpus tokens"
        facts.append(["mixture (code:web)", f"requested {mix.get('requested_ratio')}, {achieved} ({tokens})"])
    if recipe.get("seed") is not None:
        sections = {k: (recipe.get(k) or {}).get("seed") for k in ("train", "mix", "evaluate")}
        given = ", ".join(f"{k} {v}" for k, v in sections.items() if v is not None)
        facts.append(["seeds", f"seed {recipe.get('seed')}" + (f" ({given})" if given else "")])
    steps = run.steps()
    if steps:
        facts.append(["checkpoints evaluated", ", ".join(f"{s} (epoch {run.epoch_of(s):g})" for s in steps)])
    if env:
        versions = ", ".join(f"{k} {v}" for k, v in (env.get("versions") or {}).items() if v)
        facts.append(["versions", f"{versions}, python {env.get('python')}"])
        facts.append(["git commit", str(env.get("git") or "unknown")])
    times = _phase_times(run)
    for phase, seconds in times:
        facts.append([f"wall time: {phase}", f"{seconds:.1f} s"])
    notes = list(run.problems)
    if not times and run.rows:
        notes.append("no wall times recorded (a run from before timing rows)")
    return Section(
        "run",
        f"Run {run.name}",
        intro=headline(run.rows_of("detection"), run),
        items=[Table("", ["", ""], facts)] if facts else [],
        notes=notes,
    )


def is_mia(run: RunData) -> bool:
    """An mia folder: a model scored once as given (`leaklab mia`), no training and no checkpoints."""
    return run.manifest.get("mode") == "mia"


def headline(rows: list[dict[str, Any]], run: RunData) -> str:
    """One sentence a reader can quote: the best detector at the last checkpoint, when its interval first
    clears chance, and the blind baseline's verdict ('' without detection rows)."""
    value = {(r.get("step"), column_of(r), r.get("metric")): r.get("value") for r in rows}
    steps = sorted({step for step, _, _ in value if step is not None})
    if not steps:
        return ""
    last = steps[-1]
    aurocs = {
        c: v
        for (step, c, m), v in value.items()
        if step == last and m == "auroc" and c not in (None, "blind") and isinstance(v, (int, float))
        if math.isfinite(v)
    }
    if not aurocs:
        return ""
    best = max(ordered(aurocs), key=lambda c: aurocs[c])  # ties: the first in the usual order
    low, high = (value.get((last, best, f"auroc_ci_{end}")) for end in ("low", "high"))
    interval = f" [{_fmt(low, 2)}, {_fmt(high, 2)}]" if isinstance(low, (int, float)) else ""
    where = "" if is_mia(run) else f" at the last checkpoint (step {last}, epoch {run.epoch_of(last):g})"
    parts = [f"Best detector{where}: {display_name(best)}, AUROC {_fmt(aurocs[best])}{interval}."]
    cleared = [
        s for s in steps if isinstance(lo := value.get((s, best, "auroc_ci_low")), (int, float)) and lo > 0.5
    ]
    if cleared and is_mia(run):
        parts.append("Its interval lies above 0.5.")
    elif is_mia(run) and isinstance(low, (int, float)):
        parts.append("Its interval includes 0.5: no detection.")
    elif cleared:
        parts.append(
            f"Its interval first clears 0.5 at step {cleared[0]} (epoch {run.epoch_of(cleared[0]):g})."
        )
    elif isinstance(low, (int, float)):
        parts.append("Its interval includes 0.5 at every checkpoint: no detection.")
    p_value = value.get((last, "blind", "shift_p_value"))
    if value.get((last, "blind", "distribution_shift")) == 1.0:
        parts.append(
            f"The blind baseline separates members from non-members by their text alone (permutation p = "
            f"{p_value:.2g}): part of every AUROC may be that difference, not training."
        )
    elif isinstance(p_value, (int, float)):
        parts.append(
            f"The blind baseline (text only) does not separate them (permutation p = {p_value:.2g})."
        )
    return " ".join(parts)


# --------------------------------------------------------------------------- detection


def _roc_points(records: list[dict[str, Any]], columns: list[str]) -> list[dict[str, Any]]:
    labels = np.array([int(r.get("label", -1)) for r in records])
    keep = np.isin(labels, (0, 1))
    points = []
    for column in columns:
        scores = np.array([r.get(column) if r.get(column) is not None else np.nan for r in records], float)
        if np.isnan(scores[keep]).all():
            continue
        fpr, tpr = roc_curve(scores[keep], labels[keep])
        points += [
            {"column": column, "i": i, "fpr": float(f), "tpr": float(t)}
            for i, (f, t) in enumerate(zip(fpr, tpr))
        ]
    return points


def _histograms(run: RunData, steps: list[int], columns: list[str]) -> list[dict[str, Any]]:
    """Counts per (series, step, label) on bins shared by every checkpoint of a series."""
    per_step = {s: run.scores(s) for s in steps}
    values = []
    for column in columns:
        pooled = [r.get(column) for recs in per_step.values() for r in recs]
        finite = np.array([v for v in pooled if isinstance(v, (int, float)) and math.isfinite(v)], float)
        if not len(finite):
            continue
        lo, hi = float(finite.min()), float(finite.max())
        edges = np.linspace(lo, hi if hi > lo else lo + 1.0, HIST_BINS + 1)
        for step, recs in per_step.items():
            for label, name in ((1, "member"), (0, "non-member")):
                xs = [r.get(column) for r in recs if r.get("label") == label]
                xs = np.array([v for v in xs if isinstance(v, (int, float)) and math.isfinite(v)], float)
                if not len(xs):
                    continue
                counts, _ = np.histogram(xs, bins=edges)
                values += [
                    {
                        "series": display_name(column),
                        "step": step,
                        "label": name,
                        "bin0": float(edges[i]),
                        "bin1": float(edges[i + 1]),
                        "count": int(c),
                    }
                    for i, c in enumerate(counts)
                    if c
                ]
    return values


def _best_step(rows: list[dict[str, Any]]) -> int | None:
    """The checkpoint of the highest AUROC (ties: the earliest), the blind baseline's left out."""
    aurocs = [
        (v, -int(r["step"]))
        for r in rows
        if r.get("metric") == "auroc" and column_of(r) != "blind"
        if isinstance(v := r.get("value"), (int, float)) and math.isfinite(v)
    ]
    return -max(aurocs)[1] if aurocs else None


def _at_last(rows: list[dict[str, Any]], run: RunData) -> tuple[int | None, dict, Callable]:
    """The last checkpoint, (column, metric) -> value there, and a column's name with its undecided note."""
    step = run.steps()[-1] if run.steps() else None
    value = {(column_of(r), r.get("metric")): r.get("value") for r in rows if r.get("step") == step}

    def named(column: str) -> str:
        return display_name(column) + undecided_note(
            {m: value.get((column, m)) for m in ("n", "n_undecided")}
        )

    return step, value, named


def _interval_table(rows: list[dict[str, Any]], run: RunData) -> Table | None:
    """The headline metrics of every detector at the last checkpoint, with their intervals."""
    step, value, named = _at_last(rows, run)
    columns = [c for c in ordered({c for c, m in value if m in HEADLINE}) if c]
    if not columns:
        return None

    def cell(column: str, metric: str) -> str:
        return fmt_interval(*(value.get((column, metric + tail)) for tail in ("", "_ci_low", "_ci_high")))

    return Table(
        f"Last checkpoint (step {step}, epoch {run.epoch_of(step):g}) with bootstrap 95% intervals",
        ["detector", *[charts.METRIC_TITLES.get(m, m) for m in HEADLINE]],
        [[named(c), *[cell(c, m) for m in HEADLINE]] for c in columns],
        "value [2.5th, 97.5th percentile over bootstrap resamples of members and non-members]",
    )


def _flag_rate_table(rows: list[dict[str, Any]], run: RunData) -> Table | None:
    """Every rule column's two flag rates at the last checkpoint, beside its null rate where it has one."""
    step, value, named = _at_last(rows, run)
    columns = [c for c in ordered({c for c, m in value if m == "flag_rate_members"}) if c and is_rule(c)]
    if not columns:
        return None

    def cell(column: str, metric: str) -> str:
        v, low, high = (value.get((column, metric + tail)) for tail in ("", "_ci_low", "_ci_high"))
        if _pct(v) != "–" and isinstance(low, (int, float)) and isinstance(high, (int, float)):
            return f"{_pct(v)} [{100 * low:.1f}, {100 * high:.1f}]"
        return _pct(v)

    return Table(
        f"Rule detectors' flag rates at the last checkpoint (step {step}, epoch {run.epoch_of(step):g})",
        ["detector", "members flagged", "non-members flagged", "expected on non-members (null)"],
        [
            [
                named(c),
                *(cell(c, m) for m in ("flag_rate_members", "flag_rate_non_members", "null_flag_rate")),
            ]
            for c in columns
        ],
        "share of each set the rule calls a leak (undecided: not flagged), with its bootstrap 95% interval; "
        "the non-members' share is the rule's false-positive rate, to be read against the null (what the "
        "rule flags when each original is exchangeable with its variants)",
    )


def _rule_rates_per_checkpoint(rows: list[dict[str, Any]], run: RunData) -> Table | None:
    """Per checkpoint, each rule family at its largest n: TPR / FPR, and F1 of the rule and its margin."""
    value = {(int(r.get("step", 0)), column_of(r), r.get("metric")): r.get("value") for r in rows}
    rules = ordered({c for _, c, m in value if c and m == "flag_rate_members" and is_rule(c)})
    largest = {c.partition("@n=")[0]: c for c in rules}  # in order, so a family's largest n comes last
    columns = ordered(largest.values())
    if not columns:
        return None

    body = []
    for step in run.steps():
        cells = [f"{step} (epoch {run.epoch_of(step):g})"]
        for c in columns:
            tpr, fpr = (
                _pct(value.get((step, c, f"flag_rate_{side}"))) for side in ("members", "non_members")
            )
            f1, f1_margin = value.get((step, c, "f1")), value.get((step, margin_column(c), "f1"))
            cells += [f"{tpr} / {fpr}", f"{_fmt(f1)} / {_fmt(f1_margin)}"]
        body.append(cells)
    header = ["step"] + [
        f"{display_name(c)}: {what}" for c in columns for what in ("TPR / FPR", "F1 rule / margin as a score")
    ]
    return Table(
        "Rule detectors per checkpoint: members flagged (TPR) / non-members flagged (FPR), and F1 of the rule "
        "beside F1 of its margin as a score",
        header,
        body,
        "TPR / FPR: share of members / non-members the rule flags (undecided: not flagged). F1 rule: the "
        "rule's own decisions; F1 margin: the same margin with a threshold chosen by cross-validation, as "
        "for ppl. A rule with FPR near its TPR flags by the benchmark's style, not by membership.",
    )


def detection_section(rows: list[dict[str, Any]], run: RunData) -> Section | None:
    rows = [r for r in rows if column_of(r) is not None]
    if not rows:
        return None
    scored_once = is_mia(run)
    when, hint = "with the model as given (nothing was trained: one scoring, step 0)", ""
    if not scored_once:
        when = "at every checkpoint (step 0 is the untrained model)"
        hint = " Click a legend entry to highlight one detector; hover a point for its value and interval."
    intro = (
        f"Each detector scores every sample (higher = more likely seen in training) {when}. AUROC and TPR at "
        "1% FPR need no threshold; macro-F1 uses a threshold chosen by cross-validation (SrDetection decides "
        f"by its own rule).{hint}"
    )
    section = Section("detection", "Detection: members vs non-members", intro=intro)
    section.notes += shift_warnings(rows)
    _add_metric_panels(section, rows, run, scored_once)
    section.notes += _checkpoint_notes(run, scored_once)
    _add_score_panels(section, rows, run, scored_once)
    tables = (
        _interval_table(rows, run),
        _flag_rate_table(rows, run),
        _rule_rates_per_checkpoint(rows, run),
        _dataset_inference_table(rows),
        _delay_table(rows, run),
    )
    section.items += [table for table in tables if table is not None]
    if not detection_delays(rows):
        section.notes.append("no AUROC intervals: no detection-delay table (evaluate.n_bootstrap = 0?)")
    return section


def _add_metric_panels(section: Section, rows: list[dict[str, Any]], run: RunData, scored_once: bool) -> None:
    """One panel per headline metric per checkpoint, then the rule detectors' flag rates."""
    counts = _counts_caption(run)
    for metric in [] if scored_once else HEADLINE:  # one scoring: a per-checkpoint chart is one dot
        shown = rows
        if metric in THRESHOLD_FREE:  # a rule's margin as a score: the rule's own line already shows it
            shown = [r for r in rows if not is_margin(column_of(r))]
        spec = charts.metric_panel_spec(shown, metric)
        if spec is None:
            section.notes.append(f"no {charts.METRIC_TITLES.get(metric, metric)} rows")
            continue
        caption = f"{counts}; {_bootstrap_caption(run, rows, metric)}; dashed grey: chance"
        section.items.append(
            Panel(charts.METRIC_TITLES.get(metric, metric) + " per checkpoint", spec, caption)
        )
    spec = charts.flag_rate_spec(rows)
    if spec is not None:
        section.items.append(
            Panel(
                "Rule detectors: members vs non-members flagged per checkpoint",
                spec,
                f"{counts}; solid: members (true-positive rate), dashed: non-members (false-positive rate); "
                f"{_bootstrap_caption(run, rows, 'flag_rate_members')}; dotted grey: the non-members' rate "
                "expected under exchangeable variants",
            )
        )


def _checkpoint_notes(run: RunData, scored_once: bool) -> list[str]:
    """Checkpoints whose evaluation did not finish, and a run of one checkpoint."""
    notes = []
    steps = run.steps()
    done = {int(r["step"]) for r in run.rows_of("detection") if r.get("metric") == "done"}
    if done:  # no done row at all: nothing finished yet, nothing to tell apart
        unfinished = [s for s in steps if s not in done]
        if unfinished:
            notes.append(
                f"step {', '.join(map(str, unfinished))}: evaluation unfinished (no done row: killed "
                "mid-evaluation? `leaklab evaluate RUN_DIR` completes it); its values may be partial"
            )
    if len(steps) == 1 and not scored_once:
        notes.append("one checkpoint only: curves are single points")
    return notes


def _add_score_panels(section: Section, rows: list[dict[str, Any]], run: RunData, scored_once: bool) -> None:
    """ROC curves at the first, best and last checkpoint with scores, and score histograms per checkpoint."""
    counts = _counts_caption(run)
    steps = run.steps()
    score_columns = ordered(c for c in {column_of(r) for r in rows} if c)
    with_scores = [s for s in steps if run.scores(s)]
    missing = [s for s in steps if s not in with_scores]
    if missing:
        section.notes.append(
            f"no per-sample scores at step {', '.join(map(str, missing))} (no ROC or histogram there)"
        )
    if not with_scores:
        return
    best = _best_step(rows)
    roles: dict[int, list[str]] = {}  # step -> its roles; the best one may also be the first or last
    for what, step in (("first", with_scores[0]), ("best AUROC", best), ("last", with_scores[-1])):
        if step in with_scores:
            roles.setdefault(step, []).append(what)
    curves, n_neg = {}, 0
    for step in sorted(roles):
        title = f"{' = '.join(roles[step])}: step {step} (epoch {run.epoch_of(step):g})"
        records = run.scores(step)
        n_neg = max(n_neg, sum(1 for r in records if r.get("label") == 0))
        curves[title] = _roc_points(records, [c for c in score_columns if c in records[0]])
    floor = 1.0 / (2 * n_neg) if n_neg else 1e-3
    spec = charts.roc_spec(curves, floor)
    if spec is not None:
        section.items.append(
            Panel(
                "ROC curves (log FPR)" + ("" if scored_once else " at the first, best and last checkpoint"),
                spec,
                f"{counts}; FPR 0 drawn at {floor:.3g} (half of one non-member); dashed: chance. "
                "SrDetection's curve is that of its margin.",
            )
        )
    hist = _histograms(run, with_scores, [c for c in score_columns if c in run.scores(with_scores[-1])[0]])
    spec = charts.histogram_spec(hist, with_scores, with_scores[-1])
    if spec is not None:
        section.items.append(
            Panel(
                "Member vs non-member scores per detector",
                spec,
                f"{counts}; pick the checkpoint in the drop-down (default: the last); "
                f"{HIST_BINS} bins per detector, the same at every checkpoint",
            )
        )


def _dataset_inference_table(rows: list[dict[str, Any]]) -> Table | None:
    header, body = dataset_inference_cells(rows)
    if not body:
        return None
    return Table(
        "Dataset inference: is the member set, as a whole, in training?",
        header,
        body,
        "one-sided Welch t-test of a combination of the detectors' scores learned on half of each "
        "set, tested on the other half (Maini et al., 2024); the last column: the same test's "
        "rejection rate on random halvings of the non-members (clean vs clean), which should be at "
        "most α",
    )


def _delay_table(rows: list[dict[str, Any]], run: RunData) -> Table | None:
    """Per detector, the first checkpoint whose AUROC interval clears each level."""
    delays = detection_delays(rows)
    if not delays:
        return None

    def reached(s: int | None) -> str:
        if s is None:
            return "not reached"
        return "before training (step 0)" if s == 0 else f"step {s} (epoch {run.epoch_of(s):g})"

    table_rows = [[display_name(column), *map(reached, delays[column])] for column in ordered(delays)]
    return Table(
        "Detection delay",
        ["detector", *[f"AUROC interval above {level}" for level in DELAY_LEVELS]],
        table_rows,
        "the first checkpoint at which the lower end of the bootstrap 95% interval of AUROC exceeds "
        "the level. Only threshold-free evidence counts: the AUROC of a score, or of a rule's margin; "
        'a rule\'s flags (F1, flag rates) never do. "before training": the interval already lies '
        "above the level at step 0, the model before this run's training, so the detector separates "
        "the sets without having been trained on the members (a difference between the sets, see "
        "the blind baseline, or a starting model that had seen them): no detection delay",
    )


# --------------------------------------------------------------------------- dose–response


def dose_response_section(run: RunData) -> Section | None:
    """Detection against exposure dose, each evaluation's `dose_panels`, the exposures; None without doses."""
    rows = [r for r in run.dose_rows if r.get("evaluation") == "detection" and column_of(r) is not None]
    drawers = {name: record.dose_panels for name, record in EVALUATIONS.items() if record.dose_panels}
    by_evaluation = {name: [r for r in run.dose_rows if r.get("evaluation") == name] for name in drawers}
    if not rows and not any(by_evaluation.values()):
        return None
    steps = sorted({int(r["step"]) for r in rows})
    last = steps[-1] if steps else None
    doses = sorted({int(r["dose"]) for r in rows})
    at_last = [r for r in rows if int(r["step"]) == last]
    n_members = {int(r["dose"]): r.get("value") for r in at_last if r["metric"] == "n_members"}
    sizes = ", ".join(f"dose {d}: {_fmt(n_members.get(d), 0)}" for d in doses)
    counts = f"members per dose ({sizes}) against all {run.sample_counts()[1]} non-members"
    section = Section(
        "dose-response",
        "Dose–response: detection against exposure dose",
        intro=(
            "Members were trained on at different doses (inject.doses: copies per epoch). Each detector is "
            "scored on the members of one dose against all the non-members; a detector that reads "
            "memorization should separate the higher doses better."
        ),
    )
    spec = charts.metric_panel_spec(at_last, "auroc", x="dose")
    if spec is not None:
        section.items.append(
            Panel(
                f"AUROC against dose at the last checkpoint (step {last}, epoch {run.epoch_of(last):g})",
                spec,
                f"{counts}; {_bootstrap_caption(run, at_last, 'auroc')}; dashed grey: chance",
            )
        )
    for dose in doses:
        spec = charts.metric_panel_spec([r for r in rows if r["dose"] == dose], "auroc")
        if spec is not None and len(steps) > 1:
            section.items.append(
                Panel(f"AUROC per checkpoint, members of dose {dose}", spec, f"{counts}; dashed grey: chance")
            )
    for name, draw in drawers.items():
        if by_evaluation[name]:
            section.items += resolve(draw)(by_evaluation[name], run)
    section.items += _exposures_table(run, section.notes)
    return section


def _exposures_table(run: RunData, notes: list[str]) -> list[Table]:
    """The exposures per epoch counted in the training data against the dose the manifest assigned."""
    exposures = run.mixture.get("exposures") or {}
    manifest_doses = run.manifest.get("doses") or {}
    if not manifest_doses:
        return []
    if not exposures:
        notes.append("mixture.json has no exposure counts")
    by_dose = exposures_by_dose({t: int(d) for t, d in manifest_doses.items()}, exposures)
    return [
        Table(
            "Exposures per dose counted in the training data",
            ["dose", "members", "counted", "min", "mean", "max"],
            [
                [str(d), _fmt(s["members"], 0), _fmt(s["counted"], 0)]
                + [_fmt(s.get(k), 2) if k in s else "–" for k in ("min", "mean", "max")]
                for d, s in by_dose.items()
            ],
            "exposures per epoch of each member, counted in the data the stage built (mixture.json), "
            "against the dose the manifest assigned; members past a stage's cap count none",
        )
    ]


# --------------------------------------------------------------------------- training


def training_section(rows: list[dict[str, Any]], run: RunData) -> Section | None:
    def series(metric: str) -> list[dict[str, Any]]:
        points = {
            int(r["step"]): r["value"]
            for r in rows
            if r.get("metric") == metric and isinstance(r.get("value"), (int, float))
        }
        return [{"step": s, "value": v} for s, v in sorted(points.items())]

    loss, lr = series("loss"), series("learning_rate")
    markers = [s for s, _ in run.run.checkpoint_dirs()] or [s for s in run.steps() if s > 0]
    spec = charts.step_lines_spec([("training loss", loss), ("learning rate", lr)], markers)
    if spec is None:
        return None
    intro = "Loss and learning rate as the Trainer logged them; dotted: saved checkpoints."
    panel = Panel("Loss and learning rate per optimizer step", spec, f"{len(loss)} logged steps")
    return Section("training", "Training", intro=intro, items=[panel])


# --------------------------------------------------------------------------- other evaluations


def generic_section(name: str, rows: list[dict[str, Any]], run: RunData) -> Section | None:
    """Each metric per checkpoint, one line per column: for evaluations that supply no section."""
    metrics = [
        m
        for m in dict.fromkeys(str(r.get("metric")) for r in rows)
        if not m.endswith(("_ci_low", "_ci_high")) and m != "done"
    ]
    section = Section(
        name,
        f"{name} (generic view)",
        intro=f"The `{name}` evaluation supplies no report section; each of its metrics per checkpoint.",
    )
    for metric in metrics:
        spec = charts.metric_panel_spec(rows, metric)
        if spec is not None:
            section.items.append(
                Panel(metric, spec, f"{_counts_caption(run)}; {_bootstrap_caption(run, rows, metric)}")
            )
    return section if section.items else None


SectionFn = Callable[[list[dict[str, Any]], RunData], "Section | None"]
SECTIONS: dict[str, SectionFn] = {
    "detection": detection_section,
    "training": training_section,
}
NOT_SECTIONS = ("timing", "audit")  # rows shown elsewhere (the header) or by their own tools


def _plugin_section(name: str) -> SectionFn | None:
    record = EVALUATIONS.get(name)
    cls = record.load() if record is not None else None
    if cls is None or not issubclass(cls, ReportsSection):
        return None
    return lambda rows, run: cls().report_section(rows, run)


def build_sections(run: RunData) -> list[Section]:
    """The header, then a section per evaluation with rows; one that fails to draw is a note saying why."""
    sections = [header_section(run)]
    present = run.evaluations()
    names = [n for n in SECTIONS if n in present] + [
        n for n in present if n not in SECTIONS and n not in NOT_SECTIONS
    ]
    for name in names:  # each has rows: run.evaluations() are those of the rows
        fn = SECTIONS.get(name) or _plugin_section(name) or functools.partial(generic_section, name)
        section = _drawn(name, fn, run.rows_of(name), run)
        if section is not None:
            sections.append(_drop_empty_panels(section))
    # A run with inject.doses: its per-dose rows, right after detection (or last without detection).
    dose_section = _drawn("dose-response", dose_response_section, run)
    if dose_section is not None:
        keys = [s.key for s in sections]
        at = keys.index("detection") + 1 if "detection" in keys else len(sections)
        sections.insert(at, _drop_empty_panels(dose_section))
    return sections


def _drawn(name: str, draw: Callable[..., Section | None], *args) -> Section | None:
    try:
        return draw(*args)
    except Exception as err:  # a plug-in's bug is reported in the page, never a lost report
        return Section(
            name, name, notes=[f"the {name} section could not be drawn: {type(err).__name__}: {err}"]
        )


def _drop_empty_panels(section: Section) -> Section:
    empty = [item for item in section.items if isinstance(item, Panel) and panel_values(item) == 0]
    section.notes += [f"panel {item.title!r} has no data and is left out" for item in empty]
    section.items = [item for item in section.items if item not in empty]
    return section
