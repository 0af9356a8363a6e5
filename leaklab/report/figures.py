"""Static figures a paper can use (matplotlib): vector PDF and PNG of each headline metric per checkpoint
with bootstrap bands, the same series styles as the HTML page, the training loss, and audit histograms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import leaklab.report.charts as charts
from leaklab.results import display_name, is_rule, ordered


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: Path) -> list[Path]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    fig.savefig(path.with_suffix(".pdf"))
    plt.close(fig)
    return [path, path.with_suffix(".pdf")]


def plot_metric(rows: list[dict[str, Any]], metric: str, path: Path, caption: str = "") -> list[Path]:
    """One line per detector against epoch, with its band, as PNG + PDF; [] when there is nothing to plot."""
    values = charts.metric_values([r for r in rows if r.get("evaluation") == "detection"], metric)
    if not values:
        return []
    plt = _pyplot()
    columns = ordered(p["column"] for p in values)
    styles = charts.series_styles(columns)
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=130)
    for column in columns:
        points = sorted((p for p in values if p["column"] == column), key=lambda p: p["epoch"])
        st = styles[column]
        lw = 1.8 if st.group != "blind baseline" else 1.2
        xs, ys = [p["epoch"] for p in points], [p["value"] for p in points]
        ax.plot(xs, ys, ms=4, lw=lw, label=display_name(column), **_line_style(st))
        band = [p for p in points if p.get("low") is not None and p.get("high") is not None]
        if band and st.group != "blind baseline":
            edges = ([p[k] for p in band] for k in ("epoch", "low", "high"))
            ax.fill_between(*edges, color=st.color, alpha=0.1, lw=0)
    if metric in charts.RATE_METRICS:
        ax.set_ylim(0, 1)
        if metric in charts.CHANCE:
            ax.axhline(charts.CHANCE[metric], color="grey", lw=0.8, ls=":", label="chance")
    ax.set_xlabel("epoch")
    ax.set_ylabel(charts.METRIC_TITLES.get(metric, metric))
    ax.set_title(f"detection: {charts.METRIC_TITLES.get(metric, metric)} per checkpoint", fontsize=10)
    ax.grid(alpha=0.3)
    # Outside the axes, so the legend never covers a curve.
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    if caption:
        fig.text(0.01, 0.01, caption, fontsize=7, color="#555")
    # Fixed margins (the legend takes the right third): tight_layout costs more than drawing.
    fig.subplots_adjust(left=0.08, right=0.68, top=0.92, bottom=0.16 if caption else 0.12)
    return _save(plt, fig, path)


_MARKERS = {"circle": "o", "triangle-up": "^", "square": "s", "diamond": "D", "cross": "x"}


def _line_style(style: charts.Style) -> dict[str, Any]:
    """A series' colour, dash and marker as on the page, for matplotlib."""
    dash = (0, style.dash) if style.dash != (1, 0) else (0, ())
    return {"color": style.color, "linestyle": dash, "marker": _MARKERS.get(style.shape, "o")}


def plot_training_loss(rows: list[dict[str, Any]], path: Path) -> list[Path]:
    points = sorted(
        (r["step"], r["value"])
        for r in rows
        if r.get("evaluation") == "training"
        and r.get("metric") == "loss"
        and isinstance(r.get("value"), (int, float))
    )
    if not points:
        return []
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3), dpi=130)
    ax.plot([p[0] for p in points], [p[1] for p in points])
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(plt, fig, path)


def plot_histograms(scores: dict, out_dir: Path) -> list[Path]:
    """One histogram per score column (audit mode, where there are no labels to split by)."""

    plt = _pyplot()
    paths = []
    for name, values in scores.items():
        values = np.asarray(values, dtype=float)
        values = values[np.isfinite(values)]
        if not len(values):
            continue
        fig, ax = plt.subplots(figsize=(5, 3.5), dpi=120)
        ax.hist(values, bins=min(40, max(5, len(values) // 4)))
        ax.set_xlabel(f"{name} score (higher = more likely seen in training)")
        ax.set_ylabel("samples")
        ax.set_title(f"n = {len(values)} samples", fontsize=9)
        fig.tight_layout()
        path = out_dir / f"audit_{name.replace('@', '_at_').replace('/', '_')}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def plot_ratio(points: dict[str, dict[str, float]], ratios: list[str], path: Path, title: str) -> list[Path]:
    """SrDetection Fig. 3: macro-F1 (%) per detector against the code:web ratios given (PNG + PDF)."""
    plt = _pyplot()
    columns = ordered({c for values in points.values() for c in values})
    styles = charts.series_styles(columns)
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=130)
    for c in columns:
        xs = [i for i, r in enumerate(ratios) if c in points[r]]
        ys = [100 * points[ratios[i]][c] for i in xs]
        ax.plot(xs, ys, lw=2.2 if is_rule(c) else 1.2, label=display_name(c), **_line_style(styles[c]))
    ax.axhline(50, color="grey", lw=0.8, ls=":", label="chance")
    ax.set_xticks(range(len(ratios)), ratios)
    ax.set_xlabel("code : web mixing ratio")
    ax.set_ylabel("macro-F1 (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.subplots_adjust(left=0.08, right=0.68, top=0.9, bottom=0.12)
    return _save(plt, fig, path)
