"""Several runs side by side (`leaklab compare`): each detector's AUROC and macro-F1 at each run's chosen
checkpoint, its curves overlaid, and for a code:web ratio sweep SrDetection's Fig. 3 (F1 vs ratio, also
drawn by `analysis/ratio_figure.py` from `ratio_points` / `ratio_table`).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import leaklab.report.charts as charts
from leaklab.errors import InputError
from leaklab.recipe import yaml_load
from leaklab.report.html import write_page
from leaklab.report.rundata import RunData, load_run
from leaklab.report.section import Panel, Section, Table, fmt_interval
from leaklab.report.sections import is_mia
from leaklab.report.tables import markdown_table, metric_cells
from leaklab.results import Table as ResultTable
from leaklab.results import (
    column_of,
    column_sort_key,
    display_name,
    is_rule,
    largest_n_only,
    load_detection,
    ordered,
)
from leaklab.rundir import write_atomic

RUN_COLORS = ["#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1", "#76b7b2", "#9c755f", "#edc948"]
COMPARED = ("auroc", "f1")


def web_share(ratio: str) -> float:
    code, web = (float(x) for x in ratio.split(":"))
    return web / code


def f1_at(table: ResultTable, epoch: float, oracle: bool) -> dict[str, float]:
    """column -> F1 at `epoch` (SrDetection: the rule's F1; baselines: CV or oracle threshold)."""
    out = {}
    for (e, column), metrics in table.items():
        key = "f1_oracle" if oracle and not is_rule(column) else "f1"
        value = metrics.get(key)
        if e == epoch and isinstance(value, (int, float)) and math.isfinite(value):
            out[column] = value
    return out


def ratio_points(run_dirs: list[str], epoch: str, oracle: bool) -> dict[str, dict[str, float]]:
    """ratio -> column -> F1 at `epoch` (a number or "last"); ValueError / FileNotFoundError say why not."""
    points: dict[str, dict[str, float]] = {}
    for run_dir in run_dirs:
        recipe = Path(run_dir) / "recipe.yaml"
        if not recipe.exists():
            raise FileNotFoundError(f"{run_dir}: no recipe.yaml (is it a leaklab run directory?)")
        ratio = str(yaml_load(recipe.read_text())["mix"]["ratio"])
        if ratio in points:
            raise ValueError(f"two runs with mix.ratio {ratio}: give one run per ratio")
        table = largest_n_only(load_detection(run_dir))
        epochs = sorted({e for e, _ in table})
        if not epochs:
            raise ValueError(f"{run_dir}: no detection results")
        chosen = epochs[-1] if epoch == "last" else float(epoch)
        if chosen not in epochs:
            raise ValueError(
                f"{run_dir}: no results at epoch {chosen:g} (has {', '.join(f'{e:g}' for e in epochs)})"
            )
        points[ratio] = f1_at(table, chosen, oracle)
    return points


def ratio_table(points: dict[str, dict[str, float]]) -> str:
    ratios = sorted(points, key=web_share)
    columns = sorted({c for values in points.values() for c in values}, key=column_sort_key)
    body = [
        [display_name(c), *(f"{100 * points[r][c]:.2f}" if c in points[r] else "–" for r in ratios)]
        for c in columns
    ]
    return markdown_table(["Method", *ratios], body).rstrip("\n")


def _overlay_spec(runs: list[RunData], names: list[str], metric: str) -> dict[str, Any] | None:
    values = []
    for run, name in zip(runs, names):
        for p in charts.metric_values(run.rows_of("detection"), metric):
            values.append({**p, "run": name})
    if not values:
        return None
    series = [display_name(c) for c in ordered(v["column"] for v in values)]
    color = {
        "field": "run",
        "type": "nominal",
        "sort": names,
        "scale": {"domain": names, "range": [RUN_COLORS[i % len(RUN_COLORS)] for i in range(len(names))]},
        "legend": {"title": None, "orient": "top", "labelLimit": 400},
    }
    x = {"field": "epoch", "type": "quantitative", "title": "epoch"}
    y = {
        "field": "value",
        "type": "quantitative",
        "scale": {"domain": [0, 1]},
        "title": charts.METRIC_TITLES.get(metric, metric),
    }
    tooltip = [{"field": "run"}, {"field": "series", "title": "detector"}, {"field": "step"},
               {"field": "value", "format": ".3f"}, {"field": "low", "format": ".3f"}, {"field": "high", "format": ".3f"}]  # fmt: skip
    chance = charts.CHANCE.get(metric, 0.5)
    return {
        "$schema": charts.SCHEMA,
        "data": {"values": values},
        "facet": {"field": "series", "type": "nominal", "sort": series, "title": None},
        "columns": 4,
        "spec": {
            "width": 200,
            "height": 140,
            "layer": [
                {"transform": [{"filter": "isValid(datum.low) && isValid(datum.high)"}], "mark": {"type": "area", "opacity": 0.15},
                 "encoding": {"x": x, "y": {"field": "low", "type": "quantitative", "scale": {"domain": [0, 1]}}, "y2": {"field": "high"}, "color": color}},
                {"mark": {"type": "line", "point": True}, "encoding": {"x": x, "y": y, "color": color, "tooltip": tooltip}},
                {"mark": {"type": "rule", "strokeDash": [3, 3], "color": "#999"}, "encoding": {"y": {"datum": chance}}},
            ],
        },
    }  # fmt: skip


def compare_runs(
    run_dirs: list[str | Path], step: str = "last", out_dir: str | Path = "compare"
) -> tuple[str, Path]:
    """(markdown tables, path of the page). Runs without results are named in the page, not dropped silently."""

    runs = [load_run(d) for d in run_dirs]
    names = [r.name for r in runs]
    if len(set(names)) < len(names):  # same run name in different output dirs
        names = [f"{r.run.root.parent.name}/{r.name}" for r in runs]
    section, chosen = _overview_section(runs, names, step)
    markdown = []
    # Columns with a compared metric: dataset inference (a p-value) would be a row of dashes.
    columns = ordered(
        column_of(r)
        for run in runs
        for r in run.rows_of("detection")
        if column_of(r) and r.get("metric") in COMPARED
    )
    for metric in COMPARED:
        by_run = {n: metric_cells(run.rows_of("detection"), metric)[0] for run, n in zip(runs, names)}
        rows = []
        for column in columns:
            cells = [fmt_interval(*by_run[n].get((chosen[n], column), [None] * 3)) for n in names]
            rows.append([display_name(column), *cells])
        title = f"{charts.METRIC_TITLES.get(metric, metric)} at each run's {'last' if step == 'last' else 'chosen'} checkpoint"
        section.items.append(Table(title, ["detector", *names], rows, "[bootstrap 95% interval]"))
        markdown.append(f"## {title}\n\n{markdown_table(['detector', *names], rows)}")
    curves = Section("curves", "Curves per detector, runs overlaid")
    for metric in COMPARED:
        spec = _overlay_spec(runs, names, metric)
        if spec is not None:
            curves.items.append(Panel(f"{charts.METRIC_TITLES.get(metric, metric)} per checkpoint", spec,
                                      "one colour per run; bands: bootstrap 95% intervals; dashed: chance"))  # fmt: skip
    sections = [section, curves]
    ratio = _ratio_section(runs, step, out_dir, section.notes, markdown)
    if ratio is not None:
        sections.append(ratio)
    out = Path(out_dir)
    write_atomic(out / "compare.md", "\n".join(markdown) + "\n")
    index = write_page(
        out,
        f"leaklab compare: {len(runs)} runs",
        sections,
        footer='Files: <a href="compare.md">compare.md</a>',
    )
    return "\n".join(markdown), index


def _overview_section(runs: list, names: list[str], step: str) -> tuple[Section, dict[str, int | None]]:
    """The runs compared (model, mixture, seed, sizes, checkpoint) and each run's chosen step."""
    overview, notes, chosen = [], [], {}
    for run, name in zip(runs, names):
        wanted = run.steps()[-1:] if step == "last" else [int(step)]
        s = chosen[name] = next((w for w in wanted if w in run.steps()), None)
        n_pos, n_neg = run.sample_counts()
        model = (run.recipe.get("model") or {}).get("name_or_path", "?")
        ratio = (run.recipe.get("mix") or {}).get("ratio", "?")
        if is_mia(run):
            ratio = "– (mia)"  # nothing was trained, so no mixture
        overview.append([name, str(model), str(ratio), str(run.recipe.get("seed", "?")), f"{n_pos} / {n_neg}",
                         "none" if s is None else f"step {s} (epoch {run.epoch_of(s):g})"])  # fmt: skip
        if s is None:
            has = ", ".join(map(str, run.steps()))
            notes.append(f"{name}: " + (f"no step {step} (has {has})" if has else "no detection results"))
        notes += [f"{name}: {p}" for p in run.problems if "results.jsonl" in p]
    section = Section("runs", "Runs compared", notes=notes)
    section.items.append(
        Table("", ["run", "model", "code:web", "seed", "members / non-members", "checkpoint"], overview)
    )
    return section, chosen


def _ratio_section(runs: list, step: str, out_dir, notes: list[str], markdown: list[str]) -> Section | None:
    """macro-F1 against the code:web ratio (panel, ratio_f1.png, markdown); None unless a ratio sweep."""
    given = {str((r.recipe.get("mix") or {}).get("ratio")) for r in runs}
    if len(runs) < 2 or len(given) < len(runs) or not all(":" in x for x in given):
        return None
    epoch = "last" if step == "last" else str(runs[0].epoch_of(int(step)))
    try:
        points = ratio_points([str(r.run.root) for r in runs], epoch, False)
    except (ValueError, FileNotFoundError) as err:
        notes.append(f"no F1-vs-ratio figure: {err}")
        return None
    ratios = sorted(points, key=web_share)
    values = [
        {"ratio": r, "column": c, "series": display_name(c), "value": v}
        for r in ratios
        for c, v in points[r].items()
    ]
    if not values:
        return None
    columns = ordered(v["column"] for v in values)
    enc = charts._scale(charts.series_styles(columns), columns)
    x = {"field": "ratio", "type": "ordinal", "sort": ratios, "title": "code : web mixing ratio"}
    y = {"field": "value", "type": "quantitative", "scale": {"domain": [0, 1]}, "title": "macro-F1"}
    spec = {
        "$schema": charts.SCHEMA,
        "width": 380,
        "height": 260,
        "data": {"values": values},
        "layer": [
            {"mark": {"type": "line", "point": True}, "encoding": {"x": x, "y": y, **enc, "tooltip": [
                {"field": "series", "title": "detector"}, {"field": "ratio"}, {"field": "value", "format": ".3f"}]}},
            {"data": {"values": [{"y": 0.5}]}, "mark": {"type": "rule", "strokeDash": [3, 3], "color": "#999"},
             "encoding": {"y": {"field": "y", "type": "quantitative"}}},
        ],
    }  # fmt: skip
    from leaklab.report.figures import plot_ratio

    plot_ratio(points, ratios, Path(out_dir) / "ratio_f1.png", "F1 vs mixing ratio")
    markdown += ["## macro-F1 (%) by code:web ratio", "", ratio_table(points), ""]
    what = "at each run's chosen checkpoint; baselines at the CV threshold, SrDetection at its largest n"
    panel = Panel("macro-F1 vs mixing ratio (SrDetection Fig. 3)", spec, what + "; dashed: chance")
    return Section("ratio", "Mixing-ratio sweep", items=[panel])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="leaklab compare", description="several runs side by side")
    parser.add_argument("run_dirs", nargs="+")
    parser.add_argument(
        "--step", default="last", help="checkpoint step to compare (default: each run's last)"
    )
    parser.add_argument(
        "--out", default=None, help="output directory (default: compare/ beside the first run)"
    )
    args = parser.parse_args(argv)
    # Beside the runs, not in the working directory (the user's git tree).
    args.out = args.out or str(Path(args.run_dirs[0]).absolute().parent / "compare")
    if args.step != "last" and not args.step.isdigit():
        raise InputError(f"--step takes a step number or 'last', not {args.step!r}")
    missing = [d for d in args.run_dirs if not Path(d).is_dir()]
    if missing:
        raise InputError(f"not a directory: {missing[0]}")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise InputError(f"compare: --out {args.out} is a file; name a directory (created if missing)")
    if args.step != "last":
        steps = sorted({s for d in args.run_dirs for s in load_run(d).steps()})
        if int(args.step) not in steps:
            raise InputError(
                f"compare: no run has results at step {args.step} (steps with results: "
                f"{', '.join(map(str, steps)) or 'none'}); use one of them or --step last"
            )
    text, index = compare_runs(args.run_dirs, args.step, args.out)
    print(text)
    print(f"compare: {index}")
    return 0
