"""The study's leaderboard: detectors x conditions on known ground truth, and the pre-registered findings,
every number from the per-sample scores of each run's last evaluated checkpoint, every cell resampled the
same way (`metrics.member_resamples`). See docs/study.md#what-the-leaderboard-holds and
docs/study.md#findings-pre-registered.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from leaklab.metrics import (
    auroc,
    auroc_chance_pvalue,
    flag_rates,
    holm_adjusted,
    leak_rate,
    member_resamples,
    percentile_intervals,
    threshold_free_draws,
    tpr_at_fpr,
)
from leaklab.report.charts import SCHEMA
from leaklab.report.section import Panel, Section, Table
from leaklab.report.tables import markdown_table
from leaklab.results import is_rule, of_all_members
from leaklab.rundir import read_json, read_rows, write_atomic, write_json

SET_TESTS = ("sharded_likelihood", "codec_test", "pacost_test", "dataset_inference")
N_BOOTSTRAP = 1000
SEED = 0
LEAK = ":leak"


# --------------------------------------------------------------------------- cells from the runs


def make_cell(records: list[dict[str, Any]]) -> dict[str, Any]:
    """task ids, labels, score columns (NaN for a missing score) and rule flags of some records."""
    names = sorted({k for r in records for k in r if k not in ("task_id", "label")})
    columns = {
        c: np.array([np.nan if r.get(c) is None else float(r[c]) for r in records])
        for c in names
        if not c.endswith(LEAK)
    }
    flags = {c[: -len(LEAK)]: np.array([bool(r.get(c)) for r in records]) for c in names if c.endswith(LEAK)}
    return {
        "task_ids": [r["task_id"] for r in records],
        "labels": np.array([int(r["label"]) for r in records]),
        "columns": columns,
        "flags": flags,
    }


def run_cells(name: str, run_dir: str | Path) -> dict[str, dict[str, Any]]:
    """The run's cell, one per dose (`dose@16`), form (`rephrased@verbatim`) or window (`timing@early`) of
    its members against every non-member, and `<run>@base`, its starting model, when step 0 was scored."""
    scores = {
        p.parent.name.removeprefix("step-"): p for p in Path(run_dir).glob("scores/step-*/detection.jsonl")
    }
    steps = {int(step): path for step, path in scores.items() if step.isdigit()}
    if not steps:
        return {}
    step = max(steps)
    records = read_rows(steps[step])
    tests = set_tests(run_dir, step)
    cells = {name: {**make_cell(records), "step": step, "tests": tests}}
    if step > 0 and 0 in steps:
        cells[f"{name}@base"] = {**make_cell(read_rows(steps[0])), "step": 0, "run": name, "base": True}
    # Groups of members within one run, each against every non-member: the manifest maps task id -> group.
    manifest = read_json(Path(run_dir) / "manifest.json")
    for key, kind in (("doses", "dose"), ("forms", "form"), ("windows", "window")):
        group_of = manifest.get(key) or {}
        if kind == "dose" and len(set(group_of.values())) < 2:
            continue  # one dose: the run's own cell
        for group in sorted(set(group_of.values())):
            chosen = [r for r in records if not r["label"] or group_of.get(r["task_id"]) == group]
            cells[f"{name}@{group}"] = {**make_cell(chosen), "step": step, kind: group, "run": name}
            if kind == "dose":
                cells[f"{name}@{group}"]["tests"] = dose_tests(cells[f"{name}@{group}"])
    return cells


def set_tests(run_dir: str | Path, step: int) -> dict[str, dict[str, float | None]]:
    """The detection evaluation's SET_TESTS rows at `step`, as `tests_by_set` keys them."""
    rows = read_rows(Path(run_dir) / "results.jsonl")
    at_step = [r for r in rows if r.get("evaluation") == "detection" and r.get("step") == step]
    return tests_by_set([r for r in at_step if of_all_members(r) and r.get("column") in SET_TESTS])


def tests_by_set(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Set-level test rows as "column:set" -> metric -> value (set: a row's `params.set`, else members)."""
    out: dict[str, dict[str, float | None]] = {}
    for r in rows:
        key = f"{r['column']}:{(r.get('params') or {}).get('set', 'members')}"
        out.setdefault(key, {})[r["metric"]] = r.get("value")
    return out


def dose_tests(cell: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """The set-level tests that read per-sample scores, on one dose's cell, by the evaluation's functions."""
    from leaklab.dataset_tests.rows import dataset_test_rows
    from leaklab.evaluations.detection import BLIND, dataset_inference_rows

    # A rule's column (one with flags) is its margin, which the evaluation's tests leave out too.
    scores = {c: v for c, v in cell["columns"].items() if c != BLIND and c not in cell["flags"]}
    rows = dataset_inference_rows(scores, cell["labels"], seed=SEED)
    rows += dataset_test_rows(scores, cell["labels"], seed=SEED)
    return tests_by_set(rows)


def weights_for(cell: dict[str, Any], seed: int = SEED) -> np.ndarray:
    return member_resamples(cell["labels"], N_BOOTSTRAP, seed)


def auroc_draws(cell: dict[str, Any], column: str, weights: np.ndarray) -> np.ndarray:
    s = np.nan_to_num(cell["columns"][column], nan=-np.inf)
    return threshold_free_draws(s, cell["labels"].astype(bool), weights)["auroc"]


def cell_stats(cell: dict[str, Any], column: str, weights: np.ndarray) -> dict[str, float]:
    s, y = cell["columns"][column], cell["labels"]
    draws = threshold_free_draws(np.nan_to_num(s, nan=-np.inf), y.astype(bool), weights)
    out = {"auroc": auroc(s, y), "tpr@1%fpr": tpr_at_fpr(s, y, 0.01)}
    out.update(percentile_intervals({k: draws[k] for k in ("auroc", "tpr@1%fpr")}))
    out["n_members"], out["n_non_members"] = int(y.sum()), int((1 - y).sum())
    return out


def best_of(cell: dict[str, Any], stats: dict[str, dict[str, float]], weights: np.ndarray) -> dict[str, Any]:
    """The best and second score column by AUROC, and the paired bootstrap interval of their difference."""
    ranked = sorted((c for c in stats if not math.isnan(stats[c]["auroc"])), key=lambda c: -stats[c]["auroc"])
    if len(ranked) < 2:
        return {"best": ranked[0] if ranked else None, "second": None, "significant": False}
    best, second = ranked[:2]
    diff = auroc_draws(cell, best, weights) - auroc_draws(cell, second, weights)
    interval = percentile_intervals({"lead": diff})
    return {
        "best": best,
        "second": second,
        "lead": stats[best]["auroc"] - stats[second]["auroc"],
        **interval,
        "significant": bool(interval["lead_ci_low"] > 0),
    }


# --------------------------------------------------------------------------- the board


def measure(plan: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """Every cell's statistics, best detector, the detection doses and the control's rates."""
    cells: dict[str, dict[str, Any]] = {}
    missing: dict[str, str] = {}
    tokens: dict[str, dict[str, int]] = {}
    for cname, cond in plan["conditions"].items():
        state = status.get(cname, {})
        for run in cond["runs"]:
            trained = training_tokens(run["run_dir"])
            if trained:
                tokens[run["name"]] = trained
            found = run_cells(run["name"], run["run_dir"])
            if not found:
                why = state.get("line") if state.get("state") == "failed" else "no detection scores yet"
                missing[run["name"]] = f"{state.get('state', 'not run')}: {why}"
            cells.update(found)
    table: dict[str, dict[str, dict[str, float]]] = {}
    best: dict[str, dict[str, Any]] = {}
    for label, cell in cells.items():
        weights = weights_for(cell)
        table[label] = {c: cell_stats(cell, c, weights) for c in cell["columns"]}
        best[label] = best_of(cell, table[label], weights)
    return {
        "cells": cells,
        "table": table,
        "best": best,
        "missing": missing,
        "detection_dose": detection_doses(cells, table),
        "set_tests": {label: cell["tests"] for label, cell in cells.items() if cell.get("tests")},
        "training_tokens": tokens,
    }


def training_tokens(run_dir: str | Path) -> dict[str, int] | None:
    """A continued-pretraining run's member and corpus tokens per epoch and all tokens trained; None for
    a run without packed blocks (SFT, RL)."""
    mixture, recipe = Path(run_dir) / "mixture.json", Path(run_dir) / "recipe.yaml"
    if not mixture.is_file() or not recipe.is_file():
        return None
    mix = read_json(mixture)
    if "blocks" not in mix:
        return None
    from leaklab.recipe import yaml_load

    epochs = int((yaml_load(recipe.read_text()).get("train") or {}).get("epochs", 1))
    return {
        "epochs": epochs,
        "member_tokens": int(mix["member_tokens"]),
        "corpus_tokens": int(mix["web_tokens"]),
        "tokens_trained": int(mix["blocks"]) * int(mix["block_len"]) * epochs,
    }


def detection_doses(cells: dict[str, Any], table: dict[str, Any]) -> dict[str, dict[str, float]]:
    """run -> column -> its detection dose (inf: none), as docs/study.md#what-the-leaderboard-holds says."""
    out: dict[str, dict[str, float]] = {}
    for label, cell in sorted(cells.items(), key=lambda kv: kv[1].get("dose", 0)):
        if "dose" not in cell:
            continue
        run = out.setdefault(cell["run"], {})
        cleared = {column: stats["auroc_ci_low"] > 0.5 for column, stats in table[label].items()}
        for column, flags in cell["flags"].items():
            rates = flag_rates(flags, cell["labels"], n_bootstrap=N_BOOTSTRAP, seed=SEED)
            cleared[f"{column} (flags)"] = rates["flag_rate_members_ci_low"] > rates["flag_rate_non_members"]
        for key, above in cleared.items():
            if run.setdefault(key, math.inf) == math.inf and above:
                run[key] = cell["dose"]
    return out


def control_report(
    measured: dict[str, Any], control: str | None, nominal: dict[str, float]
) -> dict[str, Any]:
    """The control condition's AUROC intervals (do they hold 0.5?) with their chance p-values, also
    Holm-adjusted, and each rule's flag rate against its nominal level."""
    if not control:
        return {}
    out: dict[str, Any] = {"intervals": [], "flag_rates": []}
    for label, stats in measured["table"].items():
        # The untrained model's cell is no run of the control: it is shown, not counted in its family.
        cell = measured["cells"][label]
        if cell.get("base") or (label != control and not label.startswith((f"{control}/", f"{control}@"))):
            continue
        for column, s in stats.items():
            holds = s["auroc_ci_low"] <= 0.5 <= s["auroc_ci_high"]
            out["intervals"].append(
                {
                    "cell": label,
                    "column": column,
                    "auroc": s["auroc"],
                    "ci_low": s["auroc_ci_low"],
                    "ci_high": s["auroc_ci_high"],
                    "holds_chance": bool(holds),
                    "p_value": auroc_chance_pvalue(cell["columns"][column], cell["labels"]),
                }
            )
        for column, flags in cell["flags"].items():
            # No sample was trained on here, so every flag is a false positive: the rate of one group.
            rate = leak_rate(flags, n_bootstrap=N_BOOTSTRAP, seed=SEED)
            out["flag_rates"].append(
                {
                    "cell": label,
                    "column": column,
                    "flag_rate": rate["leak_rate"],
                    "ci_low": rate["leak_rate_ci_low"],
                    "ci_high": rate["leak_rate_ci_high"],
                    "nominal": nominal.get(column.partition("@")[0]),
                }
            )
    tested = [r for r in out["intervals"] if not math.isnan(r["p_value"])]
    for r, adjusted in zip(tested, holm_adjusted([r["p_value"] for r in tested]), strict=True):
        r["p_holm"] = float(adjusted)
    return out


# --------------------------------------------------------------------------- findings


def resolve_cell(label: str, cells: dict[str, Any]) -> str:
    """`dose@max` / `dose@min`: the run's largest / smallest dose cell, so that a finding holds for the
    smoke study's doses too; any other label as it is."""
    run, _, which = label.rpartition("@")
    if which not in ("max", "min"):
        return label
    doses = [c["dose"] for c in cells.values() if c.get("run") == run and "dose" in c]
    if not doses:
        raise KeyError(f"{run} has no dose groups")
    return f"{run}@{max(doses) if which == 'max' else min(doses)}"


def statistic(finding: dict[str, Any], measured: dict[str, Any], control: dict[str, Any]):
    """(point, draws or None, note) of a finding's statistic; raises KeyError naming what is missing."""
    kind, cells, table = finding["kind"], measured["cells"], measured["table"]
    finding = {**finding, **{k: resolve_cell(finding[k], cells) for k in ("a", "b", "cell") if k in finding}}
    if kind == "difference":
        a, b, column = cells[finding["a"]], cells[finding["b"]], finding["detector"]
        if column not in a["columns"] or column not in b["columns"]:
            raise KeyError(f"{column} was not scored in both {finding['a']} and {finding['b']}")
        # The same resamples for two cells of the same texts and labels (paired), else each its own.
        paired = a["task_ids"] == b["task_ids"] and (a["labels"] == b["labels"]).all()
        wa = weights_for(a)
        wb = wa if paired else weights_for(b, seed=SEED + 1)
        point = table[finding["a"]][column]["auroc"] - table[finding["b"]][column]["auroc"]
        draws = auroc_draws(a, column, wa) - auroc_draws(b, column, wb)
        pairing = "paired" if paired else "independent resamples"
        return point, draws, f"{finding['a']} - {finding['b']}, {pairing}"
    if kind == "versus_best":
        cell, column = cells[finding["cell"]], finding["detector"]
        if column not in cell["columns"]:
            raise KeyError(f"{column} was not scored in {finding['cell']}")
        exclude = {column, *(finding.get("exclude") or [])}
        others = {c: s for c, s in table[finding["cell"]].items() if c not in exclude and not is_rule(c)}
        rival = max(others, key=lambda c: others[c]["auroc"])
        weights = weights_for(cell)
        point = table[finding["cell"]][column]["auroc"] - others[rival]["auroc"]
        return point, auroc_draws(cell, column, weights) - auroc_draws(cell, rival, weights), f"vs {rival}"
    if kind == "p_value":
        test, p = finding["test"], {}
        for side in ("a", "b"):
            p[side] = cells[finding[side]].get("tests", {}).get(test, {}).get("p_value")
            if p[side] is None:
                raise KeyError(f"{test} has no p-value in {finding[side]}")
        note = f"p {p['a']:.3g} ({finding['a']}) - p {p['b']:.3g} ({finding['b']})"
        return p["a"] - p["b"], None, note
    if kind == "chance":
        if not control.get("intervals"):
            raise KeyError("the control condition has no scores")
        excluded = [f"{r['cell']}:{r['column']}" for r in control["intervals"] if not r["holds_chance"]]
        return float(len(excluded)), None, ", ".join(excluded) or "every interval holds 0.5"
    if kind == "chance_holm":
        tested = [r for r in control.get("intervals", []) if "p_holm" in r]
        if not tested:
            raise KeyError("the control condition has no scores")
        rejected = [f"{r['cell']}:{r['column']} (p {r['p_holm']:.3g})" for r in tested if r["p_holm"] < 0.05]
        note = f"{len(tested)} AUROCs, Holm-adjusted; " + (", ".join(rejected) or "none differs from 0.5")
        return float(len(rejected)), None, note
    raise KeyError(f"unknown finding kind {kind!r}")


def verdict(finding: dict[str, Any], low: float, high: float) -> str:
    """The pre-registered criterion on the statistic's interval (docs/study.md#findings-pre-registered)."""
    than, expect = float(finding.get("than", 0)), finding.get("expect", "greater")
    if expect == "equal":
        return "reproduced" if low == high == than else "not reproduced"
    above, below = low > than, high < than
    claimed, other = (above, below) if expect == "greater" else (below, above)
    return "reproduced" if claimed else "not reproduced" if other else "inconclusive"


def criterion_text(finding: dict[str, Any]) -> str:
    than, expect = finding.get("than", 0), finding.get("expect", "greater")
    if expect == "equal":
        return f"reproduced iff the statistic is {than}; otherwise not reproduced"
    side, other = ("above", "below") if expect == "greater" else ("below", "above")
    return (
        f"reproduced: 95% interval {side} {than}; not reproduced: interval {other} {than}; "
        f"inconclusive: interval holds {than}"
    )


def evaluate_findings(findings: list[dict[str, Any]], measured, control) -> list[dict[str, Any]]:
    out = []
    for finding in findings or []:
        entry = {k: finding.get(k) for k in ("id", "claim", "source", "kind")}
        entry["criterion"] = criterion_text(finding)
        try:
            point, draws, note = statistic(finding, measured, control)
        except KeyError as err:
            out.append({**entry, "verdict": "not measured", "note": str(err).strip("'\"")})
            continue
        if draws is None:
            low = high = point
        else:
            interval = percentile_intervals({"s": draws})
            low, high = interval["s_ci_low"], interval["s_ci_high"]
        out.append(
            {
                **entry,
                "value": point,
                "ci_low": low,
                "ci_high": high,
                "note": note,
                "verdict": verdict(finding, low, high),
            }
        )
    return out


# --------------------------------------------------------------------------- writing


def fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "—"
    if isinstance(v, float) and math.isinf(v):
        return "∞"
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def cell_text(s: dict[str, float] | None) -> str:
    if not s:
        return "—"
    return f"{fmt(s['auroc'])} [{fmt(s['auroc_ci_low'], 2)}, {fmt(s['auroc_ci_high'], 2)}] / {fmt(s['tpr@1%fpr'], 2)}"


def interval(low: Any, high: Any) -> str:
    return f"[{fmt(low)}, {fmt(high)}]"


def board_tables(board: dict[str, Any]) -> list[Table]:
    """The leaderboard's tables, in the order the markdown and the page show them."""
    labels = list(board["table"])
    columns = sorted({c for stats in board["table"].values() for c in stats})
    main = Table(
        "AUROC [95% interval] / TPR at 1% FPR",
        ["detector", *labels],
        [[c, *(cell_text(board["table"][lb].get(c)) for lb in labels)] for c in columns],
    )
    best = Table(
        "Best detector per cell",
        ["cell", "best", "second", "lead", "95% interval (paired)", "significant"],
        [
            [lb, b["best"] or "—", b["second"] or "—", fmt(b.get("lead")),
             interval(b.get("lead_ci_low"), b.get("lead_ci_high")), "yes" if b["significant"] else "no"]
            for lb, b in board["best"].items()
        ],
    )  # fmt: skip
    dose = Table(
        "Detection dose (smallest dose whose interval lies above chance)",
        ["run", "detector", "dose"],
        [[run, c, "∞" if d == math.inf else str(d)] for run, cols in board["detection_dose"].items() for c, d in cols.items()],
    )  # fmt: skip
    tokens = Table(
        "Tokens trained per run (continued pretraining; counted in the run's own tokenizer)",
        ["run", "epochs", "member tokens / epoch", "corpus tokens / epoch", "tokens trained"],
        [[run, str(t["epochs"]), f"{t['member_tokens']:,}", f"{t['corpus_tokens']:,}", f"{t['tokens_trained']:,}"]
         for run, t in (board.get("training_tokens") or {}).items()],
    )  # fmt: skip
    return [main, best, dose, set_tests_table(board.get("set_tests") or {}), control_table(board["control"]),
            findings_table(board["findings"]), tokens,
            *([Table("Conditions without scores", ["run", "why"], [[k, v] for k, v in board["missing"].items()])]
              if board["missing"] else [])]  # fmt: skip


def set_tests_table(tests: dict[str, dict[str, dict[str, Any]]]) -> Table:
    """Each run's set-level tests: the p-value and, where the test measures it, its false-positive rate."""
    rows = [
        [label, test, fmt(values.get("p_value"), 4), fmt(values.get("null_rejection_rate"))]
        for label, by_test in tests.items()
        for test, values in sorted(by_test.items())
    ]
    header = ["cell", "test:set", "p-value", "measured false-positive rate"]
    return Table("Set-level tests (p-value, and its false-positive rate where measured)", header, rows)


def control_table(control: dict[str, Any]) -> Table:
    intervals = [
        [r["cell"], r["column"], fmt(r["auroc"]), interval(r["ci_low"], r["ci_high"]),
         "yes" if r["holds_chance"] else "NO", fmt(r.get("p_value"), 4), fmt(r.get("p_holm"), 4)]
        for r in control.get("intervals", [])
    ]  # fmt: skip
    rates = [
        [r["cell"], f"{r['column']} flag rate", fmt(r["flag_rate"]), interval(r["ci_low"], r["ci_high"]),
         f"nominal {fmt(r['nominal'])}", "", ""]
        for r in control.get("flag_rates", [])
    ]  # fmt: skip
    header = ["cell", "detector", "AUROC", "95% interval", "holds 0.5", "p (AUROC = 0.5)", "p, Holm-adjusted"]
    return Table("Control condition: every interval and rule flag rate", header, intervals + rates)


def findings_table(findings: list[dict[str, Any]]) -> Table:
    header = ["finding", "claim", "source", "value", "95% interval", "verdict", "note"]
    rows = [
        [f["id"], f["claim"], f["source"], fmt(f.get("value")), interval(f.get("ci_low"), f.get("ci_high")),
         f["verdict"], f.get("note", "")]
        for f in findings
    ]  # fmt: skip
    return Table("Findings (pre-registered)", header, rows)


def heatmap_spec(board: dict[str, Any]) -> dict[str, Any]:
    values = [
        {"cell": lb, "detector": c, "auroc": s["auroc"], "text": fmt(s["auroc"], 2)}
        for lb, stats in board["table"].items()
        for c, s in stats.items()
        if not math.isnan(s["auroc"])
    ]
    color = {"field": "auroc", "type": "quantitative", "scale": {"domain": [0.3, 1], "scheme": "blues"}}
    return {
        "$schema": SCHEMA,
        "data": {"values": values},
        # A fixed size per cell, so that each cell's two-digit AUROC fits however many cells there are
        "width": {"step": 40},
        "height": {"step": 20},
        "encoding": {
            "x": {"field": "cell", "type": "nominal", "sort": list(board["table"])},
            "y": {"field": "detector", "type": "nominal"},
        },
        "layer": [
            {"mark": "rect", "encoding": {"color": color, "tooltip": [{"field": "auroc", "format": ".3f"}]}},
            {
                "mark": {"type": "text", "fontSize": 10},
                "encoding": {
                    "text": {"field": "text"},
                    # white on the darkest cells, where black text would be hard to read
                    "color": {
                        "condition": {"test": "datum.auroc > 0.85", "value": "white"},
                        "value": "black",
                    },
                },
            },
        ],
    }


def write_leaderboard(plan: dict[str, Any], study: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """leaderboard.md, leaderboard.json and index.html in the study folder; the board and its markdown."""
    from leaklab import tracking
    from leaklab.recipe import load_recipe
    from leaklab.report.html import write_page

    measured = measure(plan, status)
    control = control_report(measured, study.get("control"), study.get("nominal_levels") or {})
    board = {k: v for k, v in measured.items() if k != "cells"}
    board.update(
        study=plan["study"],
        control=control,
        status=status,
        findings=evaluate_findings(study.get("findings") or [], measured, control),
    )
    tables = board_tables(board)
    markdown = f"# Leaderboard: {plan['study']}\n\n" + "\n\n".join(
        f"## {t.title}\n\n{markdown_table(t.header, t.rows)}" for t in tables
    )
    root = Path(plan["root"])
    write_atomic(root / "leaderboard.md", markdown + "\n")
    write_json(root / "leaderboard.json", board)
    intro = "Detectors x conditions on known ground truth; every number from the runs' per-sample scores."
    items: list[Panel | Table] = [Panel("AUROC, detectors x cells", heatmap_spec(board)), *tables]
    write_page(root, f"leaklab study {plan['study']}", [Section("leaderboard", "Leaderboard", intro, items)])
    first = next(iter(plan["conditions"].values()))
    tracking.log_leaderboard(board, root, load_recipe(first["recipe"], plan["fixed"]).tracking.wandb)
    return {**board, "markdown": markdown}
