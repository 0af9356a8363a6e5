"""The accuracy evaluation's rows (pass@ per side and the gap, with bootstrap intervals) from judged
replies, worked by hand, and its report section."""

from __future__ import annotations

import json

import pytest

from leaklab.evaluations.accuracy import AccuracyConfig, accuracy_rows
from leaklab.metrics import group_mean_intervals
from leaklab.report import build_report
from leaklab.report.rundata import load_run
from leaklab.report.sections import build_sections


def _judged(greedy: list[bool], sampled: list[list[bool]] | None = None) -> list[list[dict]]:
    verdict = {True: "passed", False: "failed"}
    sampled = sampled or [[] for _ in greedy]
    return [
        [{"verdict": verdict[g], "extraction": ""}, *({"verdict": verdict[s]} for s in samples)]
        for g, samples in zip(greedy, sampled)
    ]


# members 3 of 4 solved, non-members 1 of 4
GREEDY = [True, True, False, True, False, True, False, False]
LABELS = [1, 1, 1, 1, 0, 0, 0, 0]


def test_pass_at_1_rows_and_their_intervals():
    rows = accuracy_rows(_judged(GREEDY), LABELS, AccuracyConfig(), n_bootstrap=300, seed=5)
    got = {(r["column"], r["metric"]): r["value"] for r in rows}
    assert got[("members", "pass@1")] == 0.75 and got[("non_members", "pass@1")] == 0.25
    assert got[("all", "pass@1")] == 0.5 and got[("gap", "pass@1")] == pytest.approx(0.5)
    # The rows hold the intervals of `group_mean_intervals` over the per-task 0/1 verdicts (golden-tested
    # against a plain resampling loop in tests/test_metrics_mri.py), with the same seed.
    expected = group_mean_intervals([float(g) for g in GREEDY], LABELS, n_bootstrap=300, seed=5)
    for side in ("members", "non_members", "all", "gap"):
        for tail in ("_ci_low", "_ci_high"):
            assert got[(side, "pass@1" + tail)] == expected[side + tail]
        assert got[(side, "pass@1_ci_low")] <= got[(side, "pass@1")] <= got[(side, "pass@1_ci_high")]
    # members 3 of 4: a resample draws 0..4 solved tasks, so the interval lies within [0.25, 1]
    assert 0.25 <= got[("members", "pass@1_ci_low")] < 0.75 < got[("members", "pass@1_ci_high")] <= 1.0
    # the interval rows carry the params of their value row
    by_metric = {(r["column"], r["metric"]): r for r in rows}
    assert by_metric[("gap", "pass@1_ci_low")]["params"] == by_metric[("gap", "pass@1")]["params"]
    without = accuracy_rows(_judged(GREEDY), LABELS, AccuracyConfig(), n_bootstrap=0)
    assert not any(r["metric"].endswith(("_ci_low", "_ci_high")) for r in without)


def test_pass_at_k_rows_get_intervals_too():
    # two samples per task; pass@2 per task = 1 if either passed; pass@1_sampled = c / n
    sampled = [[True, False], [True, True], [False, False], [False, True]] * 2
    cfg = AccuracyConfig(n_samples=2, ks=[1, 2])
    rows = accuracy_rows(_judged(GREEDY, sampled), LABELS, cfg, n_bootstrap=100, seed=0)
    got = {(r["column"], r["metric"]): r["value"] for r in rows}
    assert got[("members", "pass@2")] == pytest.approx(0.75)  # 1, 1, 0, 1
    assert got[("members", "pass@1_sampled")] == pytest.approx((0.5 + 1 + 0 + 0.5) / 4)
    for metric in ("pass@2", "pass@1_sampled"):
        assert ("gap", metric + "_ci_low") in got and ("non_members", metric + "_ci_high") in got


def _accuracy_run(root, n_bootstrap: int):
    root.mkdir()
    (root / "recipe.yaml").write_text(f"evaluate:\n  n_bootstrap: {n_bootstrap}\n")
    lines = []
    for step, greedy in ((0, [False] * 8), (10, GREEDY)):
        for r in accuracy_rows(_judged(greedy), LABELS, AccuracyConfig(), n_bootstrap=n_bootstrap, seed=0):
            lines.append(json.dumps({"step": step, "epoch": step / 10, "evaluation": "accuracy", **r}))
    (root / "results.jsonl").write_text("\n".join(lines) + "\n")
    return load_run(root)


def test_accuracy_has_its_own_report_section_with_intervals(tmp_path):
    run = _accuracy_run(tmp_path / "run", 200)
    sections = {s.key: s for s in build_sections(run)}
    section = sections["accuracy"]
    assert section.title == "Accuracy: members vs non-members" and not section.notes
    panels = [item for item in section.items if hasattr(item, "spec")]
    assert [p.title for p in panels] == ["pass@1: members vs non-members", "pass@1: members - non-members"]
    # the members / non-members panel draws a band (an area layer) for each side
    band = next(layer for layer in panels[0].spec["layer"] if layer.get("mark", {}).get("type") == "area")
    assert {v["series"] for v in band["data"]["values"]} == {"members", "non-members"}
    (table,) = [item for item in section.items if hasattr(item, "header")]
    last = table.rows[-1]
    assert last[:2] == ["10", "pass@1"] and last[-1] == "4 / 4"
    assert last[2].startswith("0.750 [") and last[3].startswith("0.250 [") and last[4].startswith("+0.500 [")
    # step 0: nothing solved anywhere, so every interval is a point
    assert table.rows[0][2:5] == ["0.000 [0.00, 0.00]", "0.000 [0.00, 0.00]", "+0.000 [+0.00, +0.00]"]
    page = build_report(run.run.root).read_text()
    assert "Accuracy: members vs non-members" in page and "generic view" not in page


def test_accuracy_section_says_when_rows_have_no_intervals(tmp_path):
    section = {s.key: s for s in build_sections(_accuracy_run(tmp_path / "run", 0))}["accuracy"]
    assert "no intervals in the rows" in section.notes[0]
    (table,) = [item for item in section.items if hasattr(item, "header")]
    assert table.rows[-1][2] == "0.750"
