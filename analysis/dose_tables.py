"""Dose–response tables of one run with exposure doses (`inject.doses`).

    python analysis/dose_tables.py RUN_DIR [--step N] [--metric auroc]

Table 1: per detector (rows) and dose (columns), the metric (AUROC by default) with its 95% bootstrap
interval at the last evaluated checkpoint (or --step), on the members of that dose against all the
non-members; the last column is the all-members value. Table 2: per dose, its members and the exposures
per epoch counted in the built training data (mixture.json `exposures`), next to the dose the manifest
gave. A run without doses exits with status 2 and one line saying so.
"""

from __future__ import annotations

import argparse
import difflib
import math
import sys
from pathlib import Path

from leaklab.results import (
    detection_rows,
    display_name,
    dose_table,
    exposures_by_dose,
    largest_n_only,
    load_detection,
    ordered,
)
from leaklab.rundir import RunDir, read_json


def cell(metrics: dict | None, metric: str) -> str:
    """ "0.812 [0.701, 0.903]"; "–" where there is no value."""
    metrics = metrics or {}
    value = metrics.get(metric)
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "–"
    low, high = metrics.get(f"{metric}_ci_low"), metrics.get(f"{metric}_ci_high")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)):
        return f"{value:.3f} [{low:.3f}, {high:.3f}]"
    return f"{value:.3f}"


def metric_table(run_dir: Path, step: int, metric: str, rows: list[dict]) -> str:
    by_column = dose_table(rows).get(step, {})
    doses = sorted({d for by_dose in by_column.values() for d in by_dose})
    # The all-members rows of the same step (load_detection keys them by epoch).
    everyone = load_detection(run_dir)
    epoch = next((float(r.get("epoch") or 0.0) for r in detection_rows(rows) if r["step"] == step), 0.0)
    # SrDetection at its largest n only, as the detector table shows it.
    shown = [column for _, column in largest_n_only({(0.0, c): {} for c in by_column})]
    header = ["Detector", *(f"dose {d}" for d in doses), "all members"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for column in ordered(shown):
        cells = [cell(by_column[column].get(d), metric) for d in doses]
        lines.append(
            f"| {display_name(column)} | "
            + " | ".join([*cells, cell(everyone.get((epoch, column)), metric)])
            + " |"
        )
    return "\n".join(lines)


def count(value) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else "–"


def extraction_lines(rows: list[dict], step: int, column: str = "members") -> str:
    """The extraction audit at `step`, when the run has it: members extracted verbatim per dose and the
    Spearman correlation between a member's exposures and the outputs reproducing it. `column`:
    members (the untargeted strategies) or members/discoverable (each task prompted with its first lines;
    then the non-members it reproduced, the false discoveries, too)."""
    at_step = [r for r in rows if r.get("evaluation") == "extraction" and r.get("step") == step]
    mine = [r for r in at_step if r.get("column") == column]
    by_dose = {r["dose"]: {} for r in mine if "dose" in r}
    for r in mine:
        if "dose" in r:
            by_dose[r["dose"]][r["metric"]] = r.get("value")
    if not by_dose:
        return ""
    title = (
        "discoverable extraction (greedy from each task's first lines)"
        if "/" in column
        else "untargeted strategies"
    )
    lines = [f"Members extracted verbatim per dose at step {step}, {title}\n", "| Dose | Extracted | Share [95% CI] |",
             "|---|---|---|"]  # fmt: skip
    for dose, m in sorted(by_dose.items()):
        lines.append(
            f"| {dose} | {count(m.get('n_extracted'))}/{count(m.get('n_tasks'))} | {cell(m, 'extracted_fraction')} |"
        )
    stats = {r["metric"]: r.get("value") for r in mine if "dose" not in r}
    if "exposure_spearman" in stats:
        lines.append(
            f"\nSpearman (exposures vs outputs reproducing each member): {cell(stats, 'exposure_spearman')}"
        )
    others = {
        r["metric"]: r.get("value") for r in at_step if r.get("column") == "non_" + column and "dose" not in r
    }
    if "n_extracted" in others:
        lines.append(
            f"Non-members matched by >= 6 lines (false discoveries): {count(others['n_extracted'])}/"
            f"{count(others.get('n_tasks'))}"
        )
    # The extraction evaluation's untargeted share (named canary_extracted_rate before targeted
    # extraction joined the canaries evaluation).
    canaries = {
        r["dose"]: r.get("value")
        for r in at_step
        if r["metric"] == "canary_extracted_untargeted_rate"
        or (r["metric"] == "canary_extracted_rate" and r.get("evaluation") == "extraction")
    }
    if canaries and column == "members":
        lines.append(
            "Canaries extracted by the untargeted outputs: "
            + ", ".join(f"dose {d}: {v:.0%}" for d, v in sorted(canaries.items()) if v is not None)
        )
    return "\n".join(lines)


def canary_table(rows: list[dict], step: int) -> str:
    """Canary exposure per dose at `step` (the `canaries` evaluation), when the run has it."""
    at_step = [r for r in rows if r.get("evaluation") == "canaries" and r.get("step") == step and "dose" in r]
    by_dose: dict[int, dict] = {}
    for r in at_step:
        by_dose.setdefault(r["dose"], {})[r["metric"]] = r.get("value")
    if not by_dose:
        return ""
    lines = [f"Canary exposure and targeted extraction per dose at step {step} (ceiling log2(M + 1); "
             "extracted: prompted with the text before the secret, greedy then sampled)\n",
             "| Dose | Canaries | Exposure mean [95% CI] | Ranked first | Ceiling | Extracted | by greedy |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip

    def share(value) -> str:
        return "–" if value is None else f"{value:.0%}"

    for dose, m in sorted(by_dose.items()):
        ceiling = m.get("canary_exposure_max")
        lines.append(
            f"| {dose} | {count(m.get('n_canaries'))} | {cell(m, 'canary_exposure_mean')} | "
            f"{share(m.get('canary_rank1_fraction'))} | {'–' if ceiling is None else f'{ceiling:.2f}'} | "
            f"{share(m.get('canary_extracted_rate'))} | {share(m.get('canary_extracted_greedy_rate'))} |"
        )
    return "\n".join(lines)


def exposure_table(doses: dict[str, int], exposures: dict[str, int]) -> str:
    lines = ["| Dose | Members | Counted | Exposures min | mean | max |", "|---|---|---|---|---|---|"]
    for dose, stats in exposures_by_dose(doses, exposures).items():
        spread = [f"{stats[k]:g}" if k in stats else "–" for k in ("min", "mean", "max")]
        lines.append(f"| {dose} | {stats['members']:g} | {stats['counted']:g} | " + " | ".join(spread) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a leaklab run directory of a run with inject.doses")
    parser.add_argument("--step", type=int, help="checkpoint step (default: the last with dose rows)")
    parser.add_argument("--metric", default="auroc", help="metric to show (default: auroc)")
    args = parser.parse_args(argv)
    run = RunDir(args.run_dir)
    if not run.manifest.exists():
        print(f"error: {args.run_dir}: no manifest.json (is it a leaklab run directory?)", file=sys.stderr)
        return 2
    manifest = read_json(run.manifest)
    if not manifest.get("doses"):
        print(f"error: {args.run_dir}: the run has no exposure doses (set inject.doses, e.g. [1, 4, 16])",
              file=sys.stderr)  # fmt: skip
        return 2
    rows = run.results_rows()
    table = dose_table(rows)
    if not table:
        print(
            f"error: {args.run_dir}: no per-dose detection rows yet (run `leaklab evaluate` on it)",
            file=sys.stderr,
        )
        return 2
    step = max(table) if args.step is None else args.step
    if step not in table:
        closest = min(table, key=lambda s: abs(s - step))
        print(
            f"error: --step {step} has no per-dose rows; closest evaluated step: {closest}", file=sys.stderr
        )
        return 2
    known = sorted({m for by_dose in table[step].values() for metrics in by_dose.values() for m in metrics})
    if args.metric not in known:
        close = difflib.get_close_matches(args.metric, known, n=1)
        print(f"error: --metric {args.metric!r} is not a detection metric; did you mean {close[0] if close else 'auroc'!r}?",
              file=sys.stderr)  # fmt: skip
        return 2
    print(f"{args.metric} per dose at step {step}: members of each dose vs all non-members [95% bootstrap]\n")
    print(metric_table(Path(args.run_dir), step, args.metric, rows) + "\n")
    for column in ("members", "members/discoverable"):
        extraction = extraction_lines(rows, step, column)
        if extraction:
            print(extraction + "\n")
    canaries = canary_table(rows, step)
    if canaries:
        print(canaries + "\n")
    mixture = read_json(run.mixture) if run.mixture.exists() else {}
    exposures = mixture.get("exposures") or {}
    print("Exposures per epoch counted in the training data (mixture.json), by the manifest's dose\n")
    print(exposure_table({t: int(d) for t, d in manifest["doses"].items()}, exposures))
    if not exposures:
        print("\n(mixture.json has no exposure counts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
