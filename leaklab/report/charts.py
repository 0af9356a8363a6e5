"""Vega-Lite specs for the report's panels (data inline: the page opens from disk), and the series styles
shared with the paper figures: a palette, dash and shape per registry group, a ramp of one hue per rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from leaklab.results import column_of, display_name, family_of, is_rule, ordered

SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json"  # an identifier only; nothing is fetched
BASELINES = "likelihood baselines"  # the group drawn with BASELINE_COLORS
BLIND = "blind baseline"
RATE_METRICS = ("auroc", "f1", "f1_oracle", "accuracy", "precision", "recall", "tpr@1%fpr", "tpr@5%fpr")
CHANCE = {"auroc": 0.5, "f1": 0.5, "f1_oracle": 0.5, "accuracy": 0.5, "tpr@1%fpr": 0.01, "tpr@5%fpr": 0.05}
METRIC_TITLES = {
    "auroc": "AUROC",
    "tpr@1%fpr": "TPR at 1% FPR",
    "tpr@5%fpr": "TPR at 5% FPR",
    "f1": "macro-F1 (CV threshold)",
    "f1_oracle": "macro-F1 (oracle threshold)",
}
# Tableau 10 and Dark2: two qualitative palettes that do not share a hue order.
BASELINE_COLORS = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
    "#79706e",
]  # fmt: skip
OTHER_COLORS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"]
# SrDetection's settings are ramps of one hue each, light (few variants) to dark (many).
RAMPS = [("#c9b8e6", "#3f007d"), ("#b5e0b0", "#00441b"), ("#fdd0a2", "#7f2704")]
DASHES = [[1, 0], [6, 3], [2, 2], [8, 3, 2, 3]]
SHAPES = ["circle", "triangle-up", "square", "diamond", "cross"]
CI_TOOLTIP = [
    {"field": "low", "format": ".3f", "title": "95% CI low"},
    {"field": "high", "format": ".3f", "title": "95% CI high"},
]


@dataclass(frozen=True)
class Style:
    color: str
    dash: tuple[int, ...]
    shape: str
    group: str


def group_of(column: str) -> str:
    return family_of(column).group


def _mix(a: str, b: str, t: float) -> str:
    ca = [int(a[i : i + 2], 16) for i in (1, 3, 5)]
    cb = [int(b[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(ca, cb))


def series_styles(columns) -> dict[str, Style]:
    """A distinct (colour, dash, shape) per column, by group, the same in every panel and figure."""
    columns = ordered(columns)
    styles: dict[str, Style] = {}
    baselines = [c for c in columns if group_of(c) == BASELINES and not is_rule(c)]
    others = [c for c in columns if group_of(c) not in (BASELINES, BLIND) and not is_rule(c)]
    # Past the end of its palette a group starts over with the next dash.
    for group, palette, first_dash, shape in (
        (baselines, BASELINE_COLORS, 0, "circle"),
        (others, OTHER_COLORS, 2, "square"),
    ):
        for i, c in enumerate(group):
            dash = DASHES[(first_dash + i // len(palette)) % 4]
            styles[c] = Style(palette[i % len(palette)], tuple(dash), shape, group_of(c))
    families = ordered({c.partition("@")[0] for c in columns if is_rule(c)})
    for f_index, family in enumerate(families):
        members = [c for c in columns if c.partition("@")[0] == family]
        light, dark = RAMPS[f_index % len(RAMPS)]
        for i, c in enumerate(members):
            t = 1.0 if len(members) == 1 else 0.25 + 0.75 * i / (len(members) - 1)
            styles[c] = Style(_mix(light, dark, t), tuple(DASHES[1]), SHAPES[1 + f_index % 4], group_of(c))
    styles |= {c: Style("#7f7f7f", (4, 4), "cross", BLIND) for c in columns if group_of(c) == BLIND}
    return styles


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _scale(styles: dict[str, Style], series: list[str]) -> dict[str, dict[str, Any]]:
    """color / strokeDash / shape encodings on the `series` field with the styles' explicit ranges."""
    names = [display_name(c) for c in series]
    legend = {"title": None, "symbolStrokeWidth": 2, "labelLimit": 260, "orient": "right"}
    ranges = {
        "color": [styles[c].color for c in series],
        "strokeDash": [list(styles[c].dash) for c in series],
        "shape": [styles[c].shape for c in series],
    }
    return {
        channel: {
            "field": "series",
            "type": "nominal",
            "sort": names,
            "scale": {"domain": names, "range": values},
            "legend": legend,
        }
        for channel, values in ranges.items()
    }


def metric_values(rows: list[dict[str, Any]], metric: str, x: str = "epoch") -> list[dict[str, Any]]:
    """One value per (step, series, dose) of `metric`, with its interval when the rows carry one; a row
    with no column is the series "value"."""
    found: dict[tuple[int, str], dict[str, Any]] = {}
    for r in rows:
        name = r.get("metric")
        if name not in (metric, f"{metric}_ci_low", f"{metric}_ci_high"):
            continue
        column = column_of(r) or "value"
        key = (int(r.get("step", 0)), column, r.get("dose"))
        point = found.setdefault(
            key,
            {
                "column": column,
                "step": key[0],
                "epoch": float(r.get("epoch") or 0.0),
                "dose": key[2],
                "x": None,
            },
        )
        field = {metric: "value", f"{metric}_ci_low": "low", f"{metric}_ci_high": "high"}[name]
        point[field] = r.get("value") if _finite(r.get("value")) else None
    out = []
    for point in found.values():
        if point.get("value") is None:
            continue
        point["x"] = point[x]
        point["series"] = display_name(point["column"])
        out.append(point)
    return sorted(out, key=lambda p: (p["step"], p["column"], p["dose"] or 0))


def _x_encoding(values: list[dict[str, Any]], x: str) -> dict[str, Any]:
    """The x axis, a tick at every checkpoint drawn (x="dose": at every dose, on a log axis)."""
    axis = {"values": sorted({p["x"] for p in values}), "format": "~g"}
    if x == "dose":
        title = "exposure dose (copies per epoch, log scale)"
        return {"field": "x", "type": "quantitative", "title": title, "scale": {"type": "log"}, "axis": axis}
    return {"field": "x", "type": "quantitative", "title": x, "axis": {**axis, "labelOverlap": True}}


def metric_panel_spec(
    rows: list[dict[str, Any]], metric: str, *, x: str = "epoch", bounded: bool | None = None
) -> dict[str, Any] | None:
    """Lines per series of one metric, bands, chance and blind references; None when no row has a value."""
    values = metric_values(rows, metric, x)
    if not values:
        return None
    bounded = metric in RATE_METRICS if bounded is None else bounded
    columns = ordered(p["column"] for p in values)
    styles = series_styles(columns)
    contenders = [c for c in columns if styles[c].group != BLIND]
    blind = [c for c in columns if styles[c].group == BLIND]
    y_title = METRIC_TITLES.get(metric, metric)
    y = {"field": "value", "type": "quantitative", "title": y_title}
    if bounded:
        y["scale"] = {"domain": [0, 1], "nice": False}
    x_enc = _x_encoding(values, x)
    tooltip = [
        {"field": "series", "title": "detector"},
        {"field": "step"},
        {"field": "epoch", "format": ".2f"},
        *([{"field": "dose"}] if x == "dose" else []),
        {"field": "value", "format": ".3f", "title": y_title},
        *CI_TOOLTIP,
    ]
    enc = _scale(styles, contenders)
    main = [p for p in values if p["column"] in contenders]
    # The band's series sits in its own field, so its scale (and absent legend) stay apart from the lines'.
    bands = [{**p, "band": p["series"]} for p in main]
    # Faint until a detector is picked in the legend; then only its band shows.
    opacity = {"condition": {"param": "pick", "empty": False, "value": 0.25}, "value": 0.04}
    layers = _band_layers(bands, x_enc, y, {**enc["color"], "field": "band"}, {}, opacity=opacity)
    # Lines and points fade together while another detector is picked in the legend.
    shared = {"x": x_enc, "y": y, "color": enc["color"]}
    opacity = {"condition": {"param": "pick", "empty": True, "value": 1}, "value": 0.12}
    layers.append(
        {
            "data": {"values": main},
            "mark": {"type": "line", "strokeWidth": 2, "point": False},
            "params": [{"name": "pick", "select": {"type": "point", "fields": ["series"]}, "bind": "legend"}],
            "encoding": {**shared, "strokeDash": enc["strokeDash"], "opacity": opacity},
        }
    )
    layers.append(
        {
            "data": {"values": main},
            "mark": {"type": "point", "filled": True, "size": 45},
            "encoding": {**shared, "shape": enc["shape"], "opacity": opacity, "tooltip": tooltip},
        }
    )
    if blind:
        layers += _blind_layers([p for p in values if p["column"] in blind], blind, x_enc, y, tooltip)
    if metric in CHANCE and bounded:
        layers.append(_chance_layer(CHANCE[metric]))
    return {
        "$schema": SCHEMA,
        "width": 340,
        "height": 240,
        "layer": layers,
        "resolve": {"scale": {"fill": "independent"}, "legend": {"fill": "independent"}},
    }


def _band_layers(
    points: list[dict[str, Any]], x_enc: dict, y: dict, fill: dict, mark: dict, **encoding
) -> list[dict]:
    """Bands from each point's `low` to its `high` where it has both, filled by `fill` (no legend: it shows
    lines only); none when no point has both."""
    bands = [p for p in points if p.get("low") is not None and p.get("high") is not None]
    if not bands:
        return []
    band = {
        "data": {"values": bands},
        "mark": {"type": "area", **mark},
        "encoding": {
            "x": x_enc,
            "y": {"field": "low", "type": "quantitative", "scale": y.get("scale")},
            "y2": {"field": "high"},
            "fill": {**fill, "legend": None},
            **encoding,
        },
    }
    return [band]


def _blind_layers(points: list[dict], blind: list[str], x_enc: dict, y: dict, tooltip: list) -> list[dict]:
    """The blind baseline: a grey dashed line, named where it ends (it has no colour in the legend)."""
    ends = [max((p for p in points if p["column"] == c), key=lambda p: p["x"]) for c in blind]
    return [
        {
            "data": {"values": points},
            "mark": {"type": "line", "color": "#7f7f7f", "strokeDash": [4, 4], "point": True},
            "encoding": {"x": x_enc, "y": y, "detail": {"field": "series"}, "tooltip": tooltip},
        },
        {
            "data": {"values": [{**p, "label": BLIND} for p in ends]},
            "mark": {"type": "text", "align": "right", "dy": -8, "color": "#7f7f7f"},
            "encoding": {"x": x_enc, "y": y, "text": {"field": "label"}},
        },
    ]


def _chance_layer(chance: float) -> dict[str, Any]:
    return {
        "data": {"values": [{"chance": chance, "label": "chance"}]},
        "layer": [
            {
                "mark": {"type": "rule", "color": "#999", "strokeDash": [3, 3]},
                "encoding": {"y": {"field": "chance", "type": "quantitative"}},
            },
            {
                "mark": {"type": "text", "align": "left", "dx": 4, "dy": -6, "color": "#777"},
                "encoding": {
                    "y": {"field": "chance", "type": "quantitative"},
                    "x": {"value": 0},
                    "text": {"field": "label"},
                },
            },
        ],
    }


def flag_rate_spec(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Rule detectors' two flag rates per checkpoint, a view per rule family (see `_flag_rate_layers`);
    None when no rule column has flag-rate rows."""
    values = []
    for metric, side in (("flag_rate_members", "members"), ("flag_rate_non_members", "non-members")):
        values += [{**p, "side": side} for p in metric_values(rows, metric) if is_rule(p["column"])]
    if not values:
        return None
    null = [p for p in metric_values(rows, "null_flag_rate") if is_rule(p["column"])]
    x_enc = _x_encoding(values, "epoch")
    y = {"field": "value", "type": "quantitative", "title": "share flagged", "scale": {"domain": [0, 1]}}
    tooltip = [
        {"field": "series", "title": "detector"},
        {"field": "side"},
        {"field": "step"},
        {"field": "value", "format": ".3f", "title": "share flagged"},
        *CI_TOOLTIP,
    ]
    views = []
    for family in dict.fromkeys(family_of(c).display for c in ordered(p["column"] for p in values)):
        mine = [p for p in values if family_of(p["column"]).display == family]
        expected = [p for p in null if family_of(p["column"]).display == family]
        title = {"text": family, "subtitle": "solid: members, dashed: non-members, dotted: null"}
        views.append(
            {
                "title": title,
                "width": 300,
                "height": 220,
                "layer": _flag_rate_layers(mine, expected, x_enc, y, tooltip),
            }
        )
    return {"$schema": SCHEMA, "hconcat": views, "resolve": {"scale": {"color": "independent"}}}


def _flag_rate_layers(
    mine: list[dict], expected: list[dict], x_enc: dict, y: dict, tooltip: list
) -> list[dict]:
    """One rule family: each column's members (solid) and non-members (dashed) with bands, null dotted."""
    dash = {
        "field": "side",
        "type": "nominal",
        "scale": {"domain": ["members", "non-members"], "range": [[1, 0], [6, 3]]},
        "legend": None,  # the panel's caption and each view's subtitle say which dash is which
    }
    columns = ordered(p["column"] for p in mine)
    styles = series_styles(columns)
    color = _scale(styles, columns)["color"]
    layers = _band_layers(mine, x_enc, y, color, {"opacity": 0.08}, detail={"field": "side"})
    layers.append(
        {
            "data": {"values": mine},
            "mark": {"type": "line", "strokeWidth": 2, "point": True},
            "encoding": {
                "x": x_enc,
                "y": y,
                "color": color,
                "strokeDash": dash,
                "detail": {"field": "side"},
                "tooltip": tooltip,
            },
        }
    )
    if expected:
        layers.append(
            {
                "data": {"values": expected},
                "mark": {"type": "line", "color": "#7f7f7f", "strokeDash": [2, 2], "strokeWidth": 1},
                "encoding": {
                    "x": x_enc,
                    "y": y,
                    "detail": {"field": "series"},
                    "tooltip": [
                        {"field": "series", "title": "null rate of"},
                        {"field": "value", "format": ".3f", "title": "expected non-member rate"},
                    ],
                },
            }
        )
    return layers


def roc_spec(curves: dict[str, list[dict[str, Any]]], floor: float) -> dict[str, Any] | None:
    """ROC curves (FPR on a log axis from `floor` to 1) for each titled checkpoint, side by side.
    curves: title -> [{"column", "fpr", "tpr"}]. FPR 0 is drawn at `floor` (the axis cannot show 0)."""
    if not any(curves.values()):
        return None
    columns = ordered(p["column"] for points in curves.values() for p in points)
    styles = series_styles(columns)
    enc = _scale(styles, columns)
    diagonal = [
        {"fpr": floor * (1 / floor) ** (i / 40), "tpr": floor * (1 / floor) ** (i / 40)} for i in range(41)
    ]
    x = {
        "field": "fpr",
        "type": "quantitative",
        "scale": {"type": "log", "domain": [floor, 1], "nice": False},
        "title": "false positive rate (log)",
    }
    y = {"field": "tpr", "type": "quantitative", "scale": {"domain": [0, 1]}, "title": "true positive rate"}
    views = []
    for title, points in curves.items():
        if not points:
            continue
        values = [{**p, "series": display_name(p["column"]), "fpr": max(p["fpr"], floor)} for p in points]
        views.append(
            {
                "title": title,
                "width": 250,
                "height": 250,
                "layer": [
                    {
                        "data": {"values": diagonal},
                        "mark": {"type": "line", "color": "#999", "strokeDash": [3, 3]},
                        "encoding": {"x": x, "y": y},
                    },
                    {
                        "data": {"values": values},
                        "mark": {"type": "line", "interpolate": "step-after", "strokeWidth": 1.8},
                        "encoding": {
                            "x": x,
                            "y": y,
                            "color": enc["color"],
                            "strokeDash": enc["strokeDash"],
                            "order": {"field": "i", "type": "quantitative"},
                            "tooltip": [
                                {"field": "series", "title": "detector"},
                                {"field": "fpr", "format": ".3f"},
                                {"field": "tpr", "format": ".3f"},
                            ],
                        },
                    },
                ],
            }
        )
    return {"$schema": SCHEMA, "hconcat": views, "resolve": {"scale": {"color": "shared"}}}


def histogram_spec(
    values: list[dict[str, Any]], steps: list[int], default_step: int
) -> dict[str, Any] | None:
    """Member vs non-member score histograms, one small chart per series, for the checkpoint picked in
    the drop-down. values: [{"series", "step", "label", "bin0", "bin1", "count"}] (binned already)."""
    if not values:
        return None
    series = list(dict.fromkeys(v["series"] for v in values))
    return {
        "$schema": SCHEMA,
        "data": {"values": values},
        "params": [
            {
                "name": "checkpoint",
                "value": default_step,
                "bind": {"input": "select", "options": steps, "name": "checkpoint (step): "},
            }
        ],
        "transform": [{"filter": "datum.step == checkpoint"}],
        "facet": {"field": "series", "type": "nominal", "sort": series, "title": None},
        "columns": 4,
        "spec": {
            "width": 170,
            "height": 110,
            "mark": {"type": "bar", "opacity": 0.55, "binSpacing": 0},
            "encoding": {
                "x": {
                    "field": "bin0",
                    "type": "quantitative",
                    "title": "score",
                    "bin": {"binned": True},
                    "axis": {"tickCount": 4, "format": ".3~g", "labelOverlap": True},
                },
                "x2": {"field": "bin1"},
                "y": {"field": "count", "type": "quantitative", "stack": None, "title": "samples"},
                "color": {
                    "field": "label",
                    "type": "nominal",
                    "scale": {"domain": ["member", "non-member"], "range": ["#d62728", "#1f77b4"]},
                    "legend": {"title": None, "orient": "top"},
                },
                "tooltip": [
                    {"field": "series", "title": "detector"},
                    {"field": "label"},
                    {"field": "bin0", "format": ".3g", "title": "from"},
                    {"field": "bin1", "format": ".3g", "title": "to"},
                    {"field": "count"},
                ],
            },
        },
        "resolve": {"scale": {"x": "independent", "y": "independent"}},
    }


def step_lines_spec(
    panels: list[tuple[str, list[dict[str, Any]]]], markers: list[int]
) -> dict[str, Any] | None:
    """Training curves side by side: (title, [{"step", "value"}]) each, checkpoints as vertical rules."""
    views = []
    for title, points in panels:
        if not points:
            continue
        layers: list[dict[str, Any]] = [
            {
                "data": {"values": points},
                "mark": {"type": "line", "point": len(points) < 60, "color": "#4e79a7"},
                "encoding": {
                    "x": {"field": "step", "type": "quantitative", "title": "optimizer step"},
                    "y": {
                        "field": "value",
                        "type": "quantitative",
                        "title": title,
                        "scale": {"zero": False},
                        "axis": {"format": "~g"},  # a learning rate of 3e-3 is not "0"
                    },
                    "tooltip": [{"field": "step"}, {"field": "value", "format": ".4g", "title": title}],
                },
            }
        ]
        if markers:
            layers.append(
                {
                    "data": {"values": [{"step": s, "what": "checkpoint"} for s in markers]},
                    "mark": {"type": "rule", "color": "#bbb", "strokeDash": [2, 3]},
                    "encoding": {
                        "x": {"field": "step", "type": "quantitative"},
                        "tooltip": [{"field": "what"}, {"field": "step"}],
                    },
                }
            )
        views.append({"title": title, "width": 380, "height": 220, "layer": layers})
    if not views:
        return None
    return {"$schema": SCHEMA, "hconcat": views}
