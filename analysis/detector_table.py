"""SrDetection Table 1 from run directories: accuracy / precision / recall / F1 (macro, in %) per detector
per epoch, the best value of each epoch and column in bold.

    python analysis/detector_table.py RUN_DIR [RUN_DIR ...] [--oracle] [--names NAME ...]

Reads each run's `results.jsonl` with `leaklab.results.load_detection` (rows with "evaluation":
"detection"; the "column" field names a score column such as "ppl" or "mink@0.2", the "metric" field a
key of `leaklab.metrics.detection_metrics`).
Each run is one group of columns (headed by the run directory's name, or --names), one row per epoch
and detector. By default the cross-validated metrics are shown; --oracle shows the oracle-threshold
ones, which is what the paper's table reports. When a (step, detector, metric) was written twice the
later row wins; when two steps share an epoch the later step wins.

SrDetection ("srdetection_gray@n=10", "srdetection_black@n=10") decides without a threshold, so its
rows are the rule's metrics in both modes. Only its largest n is shown (the paper's Table 1 uses
n = 10); --all-n shows every n (Table 3 / 11 per n and epoch: analysis/srdetection_tables.py).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from leaklab.results import (
    Table,
    column_sort_key,
    display_name,
    is_rule,
    largest_n_only,
    load_detection,
    undecided_note,
)

METRICS = [("accuracy", "Acc."), ("precision", "Prec."), ("recall", "Rec."), ("f1", "F1")]


def _epoch(epoch: float) -> str:
    return f"{epoch:g}" + (" (base)" if epoch == 0 else "")


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def render(runs: dict[str, Table], oracle: bool = False) -> str:
    """The markdown table for runs (name -> table)."""

    def cell(table: Table, epoch: float, detector: str, metric: str):
        suffix = "_oracle" if oracle and not is_rule(detector) else ""
        return table.get((epoch, detector), {}).get(metric + suffix)

    epochs = sorted({e for table in runs.values() for e, _ in table})
    header = ["Epoch", "Method"]
    for run in runs:
        header += [f"{run} {label}" if len(runs) > 1 else label for _, label in METRICS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for epoch in epochs:
        detectors = sorted(
            {d for table in runs.values() for e, d in table if e == epoch}, key=column_sort_key
        )
        # Best value of each (run, metric) among this epoch's detectors.
        best = {}
        for run, table in runs.items():
            for metric, _ in METRICS:
                values = [cell(table, epoch, d, metric) for d in detectors]
                finite = [v for v in values if _finite(v)]
                best[run, metric] = max(finite) if finite else None
        for i, detector in enumerate(detectors):
            notes = {undecided_note(t.get((epoch, detector), {})) for t in runs.values()} - {""}
            cells = [_epoch(epoch) if i == 0 else "", display_name(detector) + "".join(notes)]
            for run, table in runs.items():
                for metric, _ in METRICS:
                    value = cell(table, epoch, detector, metric)
                    if not _finite(value):
                        cells.append("–")
                        continue
                    text = f"{100 * value:.2f}"
                    cells.append(
                        f"**{text}**" if round(100 * value, 2) == round(100 * best[run, metric], 2) else text
                    )
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", help="leaklab run directories")
    parser.add_argument("--oracle", action="store_true", help="oracle-threshold metrics instead of CV")
    parser.add_argument(
        "--names", nargs="+", help="column group names, one per run (default: directory names)"
    )
    parser.add_argument("--all-n", action="store_true", help="SrDetection at every n, not only the largest")
    args = parser.parse_args(argv)
    names = args.names or [Path(d).resolve().name for d in args.run_dirs]
    if len(names) != len(args.run_dirs):
        parser.error("give one --names entry per run directory")
    try:
        runs = {name: load_detection(d) for name, d in zip(names, args.run_dirs)}
        if not args.all_n:
            runs = {name: largest_n_only(table) for name, table in runs.items()}
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not any(runs.values()):
        print("error: no detection results in these runs", file=sys.stderr)
        return 1
    kind = "oracle threshold" if args.oracle else "threshold by cross-validation"
    print(f"Detection performance (macro, %; {kind}; SrDetection: its own rule); best per epoch in bold.\n")
    print(render(runs, oracle=args.oracle))
    return 0


if __name__ == "__main__":
    sys.exit(main())
