"""SrDetection Tables 3 and 11 from run directories: macro-F1 (%) per number of variants n (rows) and
epoch (columns), gray box (Table 3) and black box (Table 11).

    python analysis/srdetection_tables.py RUN_DIR [RUN_DIR ...] [--names NAME ...] [--metric f1] [--margin]

Every n comes from one computation of the variants (the evaluator writes a column per n of the spec,
"srdetection_gray@n=1" ... "@n=10"). Each run is a block of rows (its directory name, or --names);
--metric shows another metric of the rule (accuracy, precision, recall, auroc of the margin,
flag_rate_members = TPR, flag_rate_non_members = FPR, ...). --margin shows the same tables for the rule's
margin used as a score ("srdetection_gray_margin@n=10": F1 at a cross-validated threshold, as ppl's).
"""

from __future__ import annotations

import argparse
import difflib
import math
import sys
from pathlib import Path

from leaklab.results import MARGIN, Table, load_detection

TABLES = {"srdetection_gray": "Table 3 (gray box)", "srdetection_black": "Table 11 (black box)"}


def by_n(table: Table, detector: str, metric: str) -> dict[int, dict[float, float | None]]:
    """n -> epoch -> value of `metric` for one SrDetection family ("srdetection_gray")."""
    out: dict[int, dict[float, float | None]] = {}
    for (epoch, column), metrics in table.items():
        base, _, n = column.partition("@n=")
        if base == detector and n.isdigit():
            out.setdefault(int(n), {})[epoch] = metrics.get(metric)
    return out


def render(runs: dict[str, Table], detector: str, metric: str = "f1") -> str | None:
    """One markdown table: a block of n rows per run, a column per epoch; None when no run has it."""
    blocks = {name: by_n(table, detector, metric) for name, table in runs.items()}
    if not any(blocks.values()):
        return None
    epochs = sorted({e for block in blocks.values() for row in block.values() for e in row})
    header = ["Run", "Variants (n)", *(f"epoch {e:g}" + (" (base)" if e == 0 else "") for e in epochs)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, block in blocks.items():
        for i, n in enumerate(sorted(block)):
            cells = [name if i == 0 else "", str(n)]
            for epoch in epochs:
                value = block[n].get(epoch)
                ok = isinstance(value, (int, float)) and math.isfinite(value)
                cells.append(f"{100 * value:.2f}" if ok else "–")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", help="leaklab run directories")
    parser.add_argument("--names", nargs="+", help="one name per run (default: directory names)")
    parser.add_argument("--metric", default="f1", help="metric of the rule to show (default: f1, macro)")
    parser.add_argument(
        "--margin", action="store_true", help="the rule's margin as a score (cross-validated threshold)"
    )
    args = parser.parse_args(argv)
    tables = {f"{d}{MARGIN}": f"{t}, margin as a score" for d, t in TABLES.items()} if args.margin else TABLES
    names = args.names or [Path(d).resolve().name for d in args.run_dirs]
    if len(names) != len(args.run_dirs):
        parser.error("give one --names entry per run directory")
    try:
        runs = {name: load_detection(d) for name, d in zip(names, args.run_dirs)}
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    known = sorted(
        {
            m
            for table in runs.values()
            for (_, column), metrics in table.items()
            if column.partition("@n=")[0] in tables
            for m in metrics
        }
    )
    if known and args.metric not in known:
        close = difflib.get_close_matches(args.metric, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        print(f"error: --metric {args.metric!r} is not a metric of these runs' SrDetection rows; {hint}"
              f"known: {', '.join(known)}", file=sys.stderr)  # fmt: skip
        return 2
    printed = False
    for detector, title in tables.items():
        table = render(runs, detector, args.metric)
        if table is not None:
            print(f"{title}: SrDetection {args.metric} (%) by number of variants and epoch\n")
            print(table + "\n")
            printed = True
    if not printed:
        print("error: no srdetection_gray / srdetection_black results in these runs", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
