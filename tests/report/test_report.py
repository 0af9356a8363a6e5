"""The report package on synthetic run directories: bad input never raises, panels carry data, rates
are drawn honestly, styles stay distinct, the section interface for other evaluations, detection
delays by hand. The browser test is in test_report_browser.py."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pytest

from leaklab.plugins import Record
from leaklab.report import build_report, charts
from leaklab.report.rundata import load_run
from leaklab.report.section import Panel, Section, Table, panel_values
from leaklab.report.sections import build_sections, detection_delays

COLUMNS = ["ppl", "zlib", "mink@0.2", "srdetection_gray@n=1", "srdetection_gray@n=10"]


def _rows(step: int, epoch: float, auroc: dict[str, tuple[float, float, float]], bare: bool = False):
    rows = []
    for column, (value, low, high) in auroc.items():
        head = {"step": step, "epoch": epoch, "evaluation": "detection"}
        head |= {"detector": column.partition("@")[0], "params": {}, "column": column}
        if bare:  # evaluated with n_bootstrap = 0 and no timings: no intervals, no wall times
            rows.append({**head, "metric": "auroc", "value": value})
            continue
        for metric, v in (("auroc", value), ("auroc_ci_low", low), ("auroc_ci_high", high)):
            rows.append({**head, "metric": metric, "value": v})
        for metric in ("f1", "tpr@1%fpr"):
            rows += [
                {**head, "metric": metric, "value": value - 0.1},
                {**head, "metric": f"{metric}_ci_low", "value": low - 0.1},
                {**head, "metric": f"{metric}_ci_high", "value": high - 0.1},
            ]
    rows.append(
        {"step": step, "epoch": epoch, "evaluation": "detection", "detector": None, "column": None,
         "metric": "done", "value": 20.0, "n_members": 10, "n_non_members": 10}
        | ({} if bare else {"seconds": 1.5})
    )  # fmt: skip
    return rows


def make_run(
    root: Path,
    steps=(0, 8, 16),
    *,
    bare=False,
    scores=True,
    files=True,
    training=True,
    ratio="1:5",
    lift=0.0,
) -> Path:
    """A run directory as leaklab writes it: AUROC rising with the step, per-sample scores."""
    root.mkdir(parents=True, exist_ok=True)
    if files:
        (root / "recipe.yaml").write_text(
            "model:\n  name_or_path: builtin:tiny\ntrain:\n  stage: cpt\nevaluate:\n  n_bootstrap: 1000\nseed: 0\n"
            f"mix:\n  ratio: '{ratio}'\n"
        )
        ids = [f"T/{i}" for i in range(20)]
        manifest = {"benchmark": "humaneval", "seed": 0, "n_members": 10, "n_non_members": 10,
                    "member_ids": ids[:10], "non_member_ids": ids[10:]}  # fmt: skip
        (root / "manifest.json").write_text(json.dumps(manifest))
        (root / "mixture.json").write_text(
            json.dumps(
                {"requested_ratio": "1:5", "achieved_ratio": 5.02, "member_tokens": 100, "web_tokens": 502}
            )
        )
        (root / "environment.json").write_text(
            json.dumps({"python": "3.11", "versions": {"leaklab": "0.1.0"}, "git": "abc123"})
        )
    rows = []
    rng = np.random.default_rng(0)
    for i, step in enumerate(steps):
        level = 0.5 + 0.2 * i + lift
        rows += _rows(
            step, float(i), {c: (level, level - 0.15, min(1.0, level + 0.15)) for c in COLUMNS}, bare
        )
        if scores:
            records = []
            for k in range(20):
                label = int(k < 10)
                rec = {"task_id": f"T/{k}", "label": label}
                for c in COLUMNS:
                    rec[c] = float(rng.normal() + label * i)
                records.append(rec)
            out = root / "scores" / f"step-{step}"
            out.mkdir(parents=True, exist_ok=True)
            (out / "detection.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if training:
        for s in range(1, max(steps) + 1):
            base = {"step": s, "epoch": s / 8, "evaluation": "training", "detector": None, "column": None}
            rows += [
                {**base, "metric": "loss", "value": 3.0 / s},
                {**base, "metric": "learning_rate", "value": 1e-3},
            ]
    if rows:
        (root / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def _page_specs(index: Path) -> dict[str, dict]:
    text = index.read_text()
    start = text.index('<script type="application/json" id="specs">') + len(
        '<script type="application/json" id="specs">'
    )
    return json.loads(text[start : text.index("</script>", start)])


def _check_page(run: Path) -> str:
    index = build_report(run)
    assert index == run / "report" / "index.html" and index.exists()
    for pid, spec in _page_specs(index).items():
        assert panel_values(Panel(pid, spec)) > 0, f"{pid} has no data"
    return index.read_text()


def _half_written(root: Path) -> Path:
    run = make_run(root)
    rows = [r for r in _rows(24, 3.0, {"ppl": (0.9, 0.8, 0.95)}) if r["metric"] != "done"]
    with (run / "results.jsonl").open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows[:2]))  # step 24 begun, never finished
        f.write('{"step": 24, "epoch": 3.0, "evaluation": "detection", "col')  # killed mid-append
    (run / "scores" / "step-16" / "detection.jsonl").unlink()
    (run / "mixture.json").write_text("{not json")
    return run


BAD_INPUT = {
    # name: (builder, phrases the page must say)
    "empty directory": (lambda p: (p.mkdir(), p)[1], ["no results.jsonl yet", "no recipe.yaml"]),
    "not evaluated yet": (lambda p: make_run(p, steps=(), training=False), ["no results.jsonl yet"]),
    "half-written": (
        _half_written,
        [
            "no per-sample scores at step 16, 24",
            "mixture.json is unreadable",
            "step 24: evaluation unfinished",
        ],
    ),
    "rows without intervals or timings": (
        lambda p: make_run(p, bare=True, scores=False, training=False),
        ["no AUROC intervals", "no wall times"],
    ),
    "one checkpoint": (lambda p: make_run(p, steps=(0,)), ["one checkpoint only"]),
    "rows but no run files": (lambda p: make_run(p, files=False), ["no manifest.json", "no recipe.yaml"]),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_renders_what_exists_and_says_what_is_missing(tmp_path, case):
    build, phrases = BAD_INPUT[case]
    run = build(tmp_path / "run")
    page = _check_page(run)
    for phrase in phrases:
        assert phrase in page, f"{case}: the page does not say {phrase!r}"
    assert (run / "report" / "report.md").exists() and (run / "report" / "results.csv").exists()


def test_full_run_has_every_panel_with_honest_axes(tmp_path):
    run = make_run(tmp_path / "run")
    page = _check_page(run)
    specs = _page_specs(run / "report" / "index.html")
    titles = [s.title for s in build_sections(load_run(run)) for s in [s]]
    assert titles[:3] == ["Run run", "Detection: members vs non-members", "Training"]
    items = [i for s in build_sections(load_run(run)) for i in s.items]
    names = [i.title for i in items]
    for expected in ("AUROC per checkpoint", "TPR at 1% FPR per checkpoint", "macro-F1 (CV threshold) per checkpoint",
                     "Detection delay", "Loss and learning rate per optimizer step"):  # fmt: skip
        assert expected in names
    assert any(n.startswith("ROC curves") for n in names) and any(
        n.startswith("Member vs non-member") for n in names
    )
    for item in items:
        if isinstance(item, Panel) and "per checkpoint" in item.title:
            # Rates: 0..1 axis, chance marked, intervals drawn, sample counts in the caption.
            y = item.spec["layer"][1]["encoding"]["y"]
            assert y["scale"]["domain"] == [0, 1]
            assert any("chance" in json.dumps(layer) for layer in item.spec["layer"])
            assert item.spec["layer"][0]["mark"]["type"] == "area"
            assert "n = 10 members + 10 non-members" in item.caption
    assert len(specs) == sum(isinstance(i, Panel) for i in items)
    assert (
        "abc123" in page
        and "requested 1:5, achieved 1:5.02" in page
        and "detection (all checkpoints)" in page
    )


def test_roc_points_match_the_records(tmp_path):
    """The ROC panel's last point of each curve is (1, 1) and its area is the AUROC of the scores."""
    from leaklab.metrics import auroc

    run = make_run(tmp_path / "run", steps=(0, 8))
    data = load_run(run)
    detection = next(s for s in build_sections(data) if s.key == "detection")
    roc = next(i for i in detection.items if i.title.startswith("ROC"))
    last_view = roc.spec["hconcat"][-1]
    points = last_view["layer"][1]["data"]["values"]
    ppl = sorted((p for p in points if p["column"] == "ppl"), key=lambda p: p["i"])
    records = data.scores(8)
    expected = auroc([r["ppl"] for r in records], [r["label"] for r in records])
    floor = 1 / 20  # FPR 0 is drawn at half of one of the 10 non-members
    fpr = [0.0 if p["fpr"] == floor else p["fpr"] for p in ppl]
    area = float(np.trapezoid([p["tpr"] for p in ppl], fpr))
    assert (ppl[-1]["fpr"], ppl[-1]["tpr"]) == (1.0, 1.0)
    assert area == pytest.approx(expected)


def test_detection_delay_by_hand():
    rows = []
    lows = {"a": [0.40, 0.55, 0.81], "b": [0.30, 0.45, 0.50], "c": [0.51, 0.79, 0.80]}
    for column, values in lows.items():
        for step, low in zip((0, 10, 20), values):
            rows.append(
                {
                    "step": step,
                    "evaluation": "detection",
                    "column": column,
                    "metric": "auroc_ci_low",
                    "value": low,
                }
            )
    # "b" never lies above 0.5 (0.50 is not above); "c" reaches 0.8 only strictly, so never.
    assert detection_delays(rows) == {"a": [10, 20], "b": [None, None], "c": [0, None]}


def test_detection_delay_counts_only_threshold_free_evidence():
    """A rule whose flags separate the sets (F1 and flag-rate intervals far apart) but whose margin's AUROC
    interval covers 0.5 is not detected; an interval already above the level at step 0 is "before
    training" in the table, never a delay of 0."""
    rows = []
    for step in (0, 8):
        head = {"step": step, "epoch": step / 8, "evaluation": "detection"}
        rule = {**head, "detector": "srdetection_gray", "params": {"n": 5}, "column": "srdetection_gray@n=5"}
        rows += [
            {**rule, "metric": "auroc", "value": 0.55},
            {**rule, "metric": "auroc_ci_low", "value": 0.45},
            {**rule, "metric": "auroc_ci_high", "value": 0.65},
            {**rule, "metric": "f1", "value": 0.9},
            {**rule, "metric": "f1_ci_low", "value": 0.85},
            {**rule, "metric": "flag_rate_members", "value": 0.95},
            {**rule, "metric": "flag_rate_members_ci_low", "value": 0.9},
            {**rule, "metric": "flag_rate_non_members", "value": 0.1},
            {**rule, "metric": "flag_rate_non_members_ci_high", "value": 0.2},
        ]
        shifted = {**head, "detector": "ppl", "params": {}, "column": "ppl"}
        rows += [{**shifted, "metric": "auroc_ci_low", "value": 0.6}]
    assert detection_delays(rows) == {"srdetection_gray@n=5": [None, None], "ppl": [0, None]}


def add_flag_rates(run: Path) -> Path:
    """Rule flag-rate rows (members rising faster than non-members) appended to a `make_run` run."""
    rows = []
    for i, step in enumerate((0, 8, 16)):
        for column in ("srdetection_gray@n=1", "srdetection_gray@n=10"):
            head = {
                "step": step,
                "epoch": float(i),
                "evaluation": "detection",
                "detector": "srdetection_gray",
            }
            head |= {"params": {"n": int(column.rpartition("=")[2])}, "column": column}
            for metric, value in (
                ("flag_rate_members", 0.3 + 0.2 * i),
                ("flag_rate_non_members", 0.2 + 0.1 * i),
            ):
                rows += [
                    {**head, "metric": metric, "value": value},
                    {**head, "metric": f"{metric}_ci_low", "value": value - 0.1},
                    {**head, "metric": f"{metric}_ci_high", "value": value + 0.1},
                ]
            rows.append({**head, "metric": "null_flag_rate", "value": 1 / 11})
    with (run / "results.jsonl").open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_rule_flag_rates_are_plotted_and_tabled(tmp_path):
    run = add_flag_rates(make_run(tmp_path / "run"))
    detection = next(s for s in build_sections(load_run(run)) if s.key == "detection")
    panel = next(i for i in detection.items if isinstance(i, Panel) and "flagged" in i.title)
    (view,) = panel.spec["hconcat"]  # one panel per rule family
    assert view["title"]["text"] == "SrDetection gray box"
    lines = next(
        layer for layer in view["layer"] if layer["mark"]["type"] == "line" and "color" in layer["encoding"]
    )
    points = {(p["column"], p["side"], p["step"]): p for p in lines["data"]["values"]}
    assert len(points) == 12 and points[("srdetection_gray@n=10", "non-members", 16)][
        "value"
    ] == pytest.approx(0.4)
    assert points[("srdetection_gray@n=1", "members", 8)]["low"] == pytest.approx(0.4)
    table = next(i for i in detection.items if isinstance(i, Table) and "flag rates" in i.title)
    assert table.header[1:3] == ["members flagged", "non-members flagged"]
    assert table.rows[1][1:] == ["70.0% [60.0, 80.0]", "40.0% [30.0, 50.0]", "9.1%"]
    assert "flagged" in _check_page(run)
    markdown = (run / "report" / "report.md").read_text()
    assert "## flag_rate_members" in markdown and "## flag_rate_non_members" in markdown


def test_rule_tpr_fpr_and_margin_f1_per_checkpoint_table(tmp_path):
    """Every checkpoint, each rule family at its largest n: TPR / FPR, and the rule's F1 beside its
    margin's F1 as a score (`srdetection_gray_margin@n=10`, a score column like ppl's)."""
    run = add_flag_rates(make_run(tmp_path / "run"))
    rows = []
    for i, step in enumerate((0, 8, 16)):
        head = {"step": step, "epoch": float(i), "evaluation": "detection", "params": {"n": 10}}
        rows += [
            {**head, "detector": "srdetection_gray", "column": "srdetection_gray@n=10", "metric": "f1",
             "value": 0.5 + 0.05 * i},
            {**head, "detector": "srdetection_gray_margin", "column": "srdetection_gray_margin@n=10",
             "metric": "f1", "value": 0.6 + 0.1 * i},
            {**head, "detector": "srdetection_gray_margin", "column": "srdetection_gray_margin@n=10",
             "metric": "auroc", "value": 0.7},
        ]  # fmt: skip
    with (run / "results.jsonl").open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    detection = next(s for s in build_sections(load_run(run)) if s.key == "detection")
    table = next(i for i in detection.items if isinstance(i, Table) and "per checkpoint" in i.title)
    assert table.header == [
        "step",
        "SrDetection gray box (n=10): TPR / FPR",
        "SrDetection gray box (n=10): F1 rule / margin as a score",
    ]
    # add_flag_rates: members 0.3 + 0.2 i, non-members 0.2 + 0.1 i at n = 10 (n = 1 is not shown).
    assert table.rows == [
        ["0 (epoch 0)", "30.0% / 20.0%", "0.500 / 0.600"],
        ["8 (epoch 1)", "50.0% / 30.0%", "0.550 / 0.700"],
        ["16 (epoch 2)", "70.0% / 40.0%", "0.600 / 0.800"],
    ]

    # The margin's F1 is drawn beside the others'; its AUROC is the rule's own line, not drawn twice.
    def series(title: str) -> set[str]:
        panel = next(i for i in detection.items if isinstance(i, Panel) and i.title.startswith(title))
        return {v.get("column") for v in _values(panel.spec)}

    assert "srdetection_gray_margin@n=10" in series("macro-F1")
    assert "srdetection_gray_margin@n=10" not in series("AUROC")
    from leaklab.results import display_name, is_rule

    assert not is_rule("srdetection_gray_margin@n=10")  # compared like ppl: CV / oracle threshold
    assert display_name("srdetection_gray_margin@n=10") == "SrDetection gray box (n=10): margin as a score"


def _values(node) -> list[dict]:
    """Every inline data value of a Vega-Lite spec."""
    out, stack = [], [node]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            data = node.get("data")
            if isinstance(data, dict) and isinstance(data.get("values"), list):
                out += [v for v in data["values"] if isinstance(v, dict)]
            stack.extend(v for k, v in node.items() if k != "data")
        elif isinstance(node, list):
            stack.extend(node)
    return out


def test_sixteen_series_keep_distinct_styles():
    columns = [
        "ppl", "zlib", "lowercase", "mink@0.1", "mink@0.2", "minkpp@0.2", "dcpdd", "ref", "ref_diff",
        "srdetection_gray@n=1", "srdetection_gray@n=3", "srdetection_gray@n=5", "srdetection_gray@n=10",
        "srdetection_black@n=1", "srdetection_black@n=10", "recall", "blind",
    ]  # fmt: skip
    styles = charts.series_styles(columns)
    contenders = [c for c in columns if styles[c].group != "blind baseline"]
    assert len({(styles[c].color, styles[c].dash, styles[c].shape) for c in contenders}) == len(contenders)
    assert len({styles[c].color for c in contenders}) == len(contenders)  # colour alone already differs
    assert styles["blind"].group == "blind baseline" and styles["recall"].group == "other detectors"


def test_blind_baseline_is_a_reference_line_not_a_contender():
    rows = [
        {"step": s, "epoch": float(s), "evaluation": "detection", "column": c, "metric": "auroc", "value": v}
        for s in (0, 1)
        for c, v in (("ppl", 0.6), ("blind", 0.55))
    ]
    spec = charts.metric_panel_spec(rows, "auroc")
    line = spec["layer"][0]  # no intervals: the line layer comes first
    assert {p["column"] for p in line["data"]["values"]} == {"ppl"}
    grey = [layer for layer in spec["layer"] if layer.get("mark", {}).get("color") == "#7f7f7f"]
    blind = [layer for layer in grey if layer["mark"]["type"] == "line"]
    assert len(blind) == 1 and {p["column"] for p in blind[0]["data"]["values"]} == {"blind"}
    # Not in the colour legend, so labelled where it ends.
    (label,) = [layer for layer in grey if layer["mark"]["type"] == "text"]
    assert [(p["label"], p["x"]) for p in label["data"]["values"]] == [(charts.BLIND, 1.0)]


class _WithSection:
    name = "toy"

    def report_section(self, rows, run):
        spec = charts.metric_panel_spec(rows, "accuracy")
        return Section("toy", "Toy accuracy", items=[Panel("accuracy", spec), Table("t", ["a"], [["1"]])])


class _Broken:
    name = "broken"

    def report_section(self, rows, run):
        raise KeyError("members")


class _NoSection:
    name = "plain"


def test_evaluations_supply_their_sections(tmp_path, monkeypatch):
    import leaklab.evaluations as evaluations

    for name, cls in [
        ("toy", _WithSection),
        ("broken", _Broken),
        ("plain", _NoSection),
        ("silent", _WithSection),
    ]:
        # "silent" is registered but has no rows
        monkeypatch.setitem(
            evaluations.EVALUATIONS, name, Record(name, f"{__name__}:{cls.__name__}", "evaluation")
        )
    run = make_run(tmp_path / "run", steps=(0, 8))
    extra = []
    for name in ("toy", "broken", "plain"):
        for step in (0, 8):
            extra.append({"step": step, "epoch": step / 8, "evaluation": name, "detector": None, "column": None,
                          "metric": "accuracy", "value": 0.3 + step / 80})  # fmt: skip
    with (run / "results.jsonl").open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in extra))
    sections = {s.key: s for s in build_sections(load_run(run))}
    assert sections["toy"].title == "Toy accuracy" and len(sections["toy"].items) == 2
    assert "could not be drawn: KeyError" in sections["broken"].notes[0]
    assert sections["plain"].title == "plain (generic view)" and len(sections["plain"].items) == 1
    assert "silent" not in sections
    page = _check_page(run)
    assert "Toy accuracy" in page and "could not be drawn" in page


def test_roc_curve_by_hand_and_against_sklearn():
    from sklearn.metrics import roc_curve as sk_roc

    from leaklab.metrics import roc_curve

    fpr, tpr = roc_curve([0.9, 0.8, 0.7, 0.1], [1, 0, 1, 0])
    assert set(zip(fpr.tolist(), tpr.tolist())) == {(0, 0), (0, 0.5), (0.5, 0.5), (0.5, 1), (1, 1)}
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0, 0, 1, 1) and (np.diff(fpr) >= 0).all()
    rng = np.random.default_rng(1)
    labels = (rng.random(200) < 0.4).astype(int)
    scores = np.round(rng.normal(size=200) + labels, 1)  # ties on purpose
    ours = set(zip(*roc_curve(scores, labels)))
    theirs = set(zip(*sk_roc(labels, scores, drop_intermediate=False)[:2]))
    assert {(round(a, 12), round(b, 12)) for a, b in theirs} <= {
        (round(a, 12), round(b, 12)) for a, b in ours
    }
    assert roc_curve([1.0, 2.0], [1, 1])[0].size == 0  # one class: no curve


def test_compare_runs_of_a_ratio_sweep(tmp_path, capsys):
    from leaklab.cli import main as cli_main
    from leaklab.report.compare import compare_runs

    a = make_run(tmp_path / "a", ratio="1:1", lift=0.05)
    b = make_run(tmp_path / "b", ratio="1:10")
    empty = make_run(tmp_path / "empty", steps=(), training=False)
    text, index = compare_runs([a, b, empty], out_dir=tmp_path / "cmp")
    # AUROC of ppl at each run's last checkpoint (step 16): 0.9 + lift, with its interval.
    row = next(line for line in text.splitlines() if line.startswith("| PPL |"))
    assert (
        row.split("|")[2].strip() == "0.950 [0.80, 1.00]"
        and row.split("|")[3].strip() == "0.900 [0.75, 1.00]"
    )
    assert row.split("|")[4].strip() == "–"
    page = index.read_text()
    # The empty run has no F1 to plot, so no sweep figure.
    assert "empty: no detection results" in page and "Mixing-ratio sweep" not in page
    for pid, spec in _page_specs(index).items():
        assert panel_values(Panel(pid, spec)) > 0
    text, index = compare_runs([b, a], out_dir=tmp_path / "cmp2")
    assert "Mixing-ratio sweep" in index.read_text() and (tmp_path / "cmp2" / "ratio_f1.pdf").exists()
    sweep = text[text.index("## macro-F1 (%) by code:web ratio") :]
    assert "| Method | 1:1 | 1:10 |" in sweep  # ordered by the share of web text
    assert cli_main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp3"), "--step", "8"]) == 0
    assert "step 8 (epoch 1)" in (tmp_path / "cmp3" / "index.html").read_text()
    assert cli_main(["compare", str(a), "--step", "soon"]) == 2
    assert "--step takes a step number" in capsys.readouterr().err


def test_a_separation_already_at_step_0_is_not_a_detection_delay(tmp_path):
    run = make_run(tmp_path / "run", lift=0.2)  # step 0: AUROC 0.7 [0.55, 0.85] before any training
    detection = next(s for s in build_sections(load_run(run)) if s.key == "detection")
    delay = next(i for i in detection.items if isinstance(i, Table) and i.title == "Detection delay")
    assert {row[1] for row in delay.rows} == {"before training (step 0)"}
    assert "threshold-free" in delay.caption and "never do" in delay.caption


def test_the_report_opens_with_a_headline_sentence(tmp_path):
    from leaklab.report.sections import headline

    root = make_run(tmp_path / "run")
    rows = [json.loads(line) for line in (root / "results.jsonl").read_text().splitlines()]
    # Every column rises alike (0.5, 0.7, 0.9); ppl leads by 0.01 at the last step.
    for r in rows:
        if r.get("column") == "ppl" and r["step"] == 16 and r["metric"] == "auroc":
            r["value"] = 0.91
    blind = {"step": 16, "epoch": 2.0, "evaluation": "detection", "detector": "blind", "column": "blind"}
    rows += [{**blind, "metric": "shift_p_value", "value": 0.42}, {**blind, "metric": "distribution_shift", "value": 0.0}]  # fmt: skip
    (root / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = load_run(root)
    text = headline(run.rows_of("detection"), run)
    assert text.startswith(
        "Best detector at the last checkpoint (step 16, epoch 2): PPL, AUROC 0.910 [0.75, 1.00]."
    )
    # step 0's interval [0.35, 0.65] includes 0.5, step 8's [0.55, 0.85] clears it
    assert "Its interval first clears 0.5 at step 8 (epoch 1)." in text
    assert text.endswith("The blind baseline (text only) does not separate them (permutation p = 0.42).")
    index = build_report(root)
    assert text in (index.parent / "report.md").read_text()
    assert html.escape(text) in index.read_text() or text in index.read_text()
    shifted = [r | {"value": 1.0} if r.get("metric") == "distribution_shift" else r for r in rows]
    assert "separates members from non-members by their text alone" in headline(
        [r for r in shifted if r.get("evaluation") == "detection"], run
    )
