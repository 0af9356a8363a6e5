"""SrDetection Figure 3 / Table 10 from run directories: macro-F1 (%) per detector against the code:web
mixing ratio of continued pretraining, at one epoch.

    python analysis/ratio_figure.py RUN_DIR [RUN_DIR ...] [--epoch 1|last] [--oracle] [--out fig3.png]

Each run's ratio is read from its own recipe.yaml (`mix.ratio`); runs that differ in anything else are
not this figure's business, so keep the rest of the recipe fixed (the `tiny_cpt_ratio_*` recipes do).
The paper plots epoch 1 (the default); `--epoch last` takes each run's last evaluated epoch. Baselines
show the cross-validated F1 (--oracle: the oracle-threshold F1); SrDetection its own rule at its largest
n. Prints the table and writes the PNG (default: ratio_f1.png in the current directory).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from leaklab.results import Table, column_sort_key, display_name, largest_n_only, load_detection


def run_ratio(run_dir: str | Path) -> str:
    from leaklab.recipe import yaml_load

    path = Path(run_dir) / "recipe.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir}: no recipe.yaml (is it a leaklab run directory?)")
    return str(yaml_load(path.read_text())["mix"]["ratio"])


def f1_at(table: Table, epoch: float, oracle: bool) -> dict[str, float]:
    """detector -> F1 at `epoch` (SrDetection: the rule's F1; baselines: CV or oracle)."""
    out = {}
    for (e, detector), metrics in table.items():
        key = "f1_oracle" if oracle and not detector.startswith("srdetection") else "f1"
        value = metrics.get(key)
        if e == epoch and isinstance(value, (int, float)) and math.isfinite(value):
            out[detector] = value
    return out


def collect(run_dirs: list[str], epoch: str, oracle: bool) -> dict[str, dict[str, float]]:
    """ratio -> detector -> F1, one entry per run."""
    points: dict[str, dict[str, float]] = {}
    for run_dir in run_dirs:
        ratio = run_ratio(run_dir)
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


def _web_share(ratio: str) -> float:
    code, web = (float(x) for x in ratio.split(":"))
    return web / code


def render(points: dict[str, dict[str, float]]) -> str:
    ratios = sorted(points, key=_web_share)
    detectors = sorted({d for values in points.values() for d in values}, key=column_sort_key)
    lines = ["| Method | " + " | ".join(ratios) + " |", "|---|" + "---|" * len(ratios)]
    for d in detectors:
        cells = [f"{100 * points[r][d]:.2f}" if d in points[r] else "–" for r in ratios]
        lines.append(f"| {display_name(d)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(points: dict[str, dict[str, float]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = sorted(points, key=_web_share)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for d in sorted({d for values in points.values() for d in values}, key=column_sort_key):
        xs = [i for i, r in enumerate(ratios) if d in points[r]]
        ys = [100 * points[ratios[i]][d] for i in xs]
        style = {"lw": 2.5} if d.startswith("srdetection") else {"lw": 1, "alpha": 0.8}
        ax.plot(xs, ys, marker="o", label=display_name(d), **style)
    ax.set_xticks(range(len(ratios)), ratios)
    ax.set_xlabel("code : web mixing ratio")
    ax.set_ylabel("macro-F1 (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", help="leaklab run directories, one per mixing ratio")
    parser.add_argument("--epoch", default="1", help="epoch to compare (a number, or 'last'; default 1)")
    parser.add_argument("--oracle", action="store_true", help="baselines at the oracle threshold")
    parser.add_argument("--out", default="ratio_f1.png", help="where to write the figure")
    args = parser.parse_args(argv)
    try:
        points = collect(args.run_dirs, args.epoch, args.oracle)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    kind = "oracle threshold" if args.oracle else "threshold by cross-validation"
    print(f"Macro-F1 (%) by code:web mixing ratio at epoch {args.epoch} (baselines: {kind}).\n")
    print(render(points))
    plot(points, Path(args.out), f"F1 vs mixing ratio (epoch {args.epoch})")
    print(f"\nfigure: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
