"""The report page in a real browser: headless Chromium (Debian's `chromium`) loads index.html from
disk, and the page's own render status (<pre id="render-status">) must show no JavaScript error, no
Vega warning, and marks drawn in every panel. Without a browser the test is skipped with the reason
(CI installs it: see .ci/run)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_report import add_flag_rates, make_run

from leaklab.report import build_report
from leaklab.report.html import render_page, write_bundle
from leaklab.report.section import Panel, Section

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip(f"no headless browser on PATH ({', '.join(BROWSERS)}); `apt-get install chromium` to run it")


def _render(page: Path, tmp_path: Path) -> tuple[dict, str, str]:
    """(render status, dumped DOM, browser log) of a page loaded from disk."""
    out = subprocess.run(
        [
            _browser(),
            "--headless",
            "--no-sandbox",  # CI runs as root
            "--disable-gpu",
            "--disable-background-networking",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--virtual-time-budget=30000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    match = re.search(r'<pre id="render-status"[^>]*>(.*?)</pre>', out.stdout, re.S)
    assert match, f"no render status in the page (browser exit {out.returncode}): {out.stderr[-2000:]}"
    text = (
        match.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    )
    return (json.loads(text) if text.strip() else {}), out.stdout, out.stderr


def test_report_renders_in_chromium_without_errors(tmp_path):
    run = add_flag_rates(make_run(tmp_path / "run"))
    index = build_report(run)
    status, dom, log = _render(index, tmp_path)
    assert status.get("done"), "the page never finished drawing"
    assert status["errors"] == [], status["errors"]
    assert status["warnings"] == [], status["warnings"]
    assert "Uncaught" not in log
    specs = re.findall(r'id="(panel-\d+)" class="chart"', index.read_text())
    assert len(specs) >= 6
    empty = [p for p in specs if status["panels"].get(p, 0) == 0]
    assert not empty, f"panels drawn without data: {empty}"
    assert dom.count("<svg") >= len(specs)  # not a blank page: every panel became a chart
    assert "Detection delay" in dom and "members / non-members" in dom
    assert "Rule detectors: members vs non-members flagged" in dom


def test_the_browser_check_catches_a_broken_panel_and_a_missing_library(tmp_path):
    """The status the test reads is not vacuous: a spec Vega rejects and a page whose script is
    missing are both reported."""
    out = tmp_path / "report"
    out.mkdir()
    write_bundle(out)
    bad = Section("x", "x", items=[Panel("bad", {"mark": "no-such-mark", "data": {"values": [{"a": 1}]}})])
    page = render_page("broken", [bad])
    (out / "index.html").write_text(page)
    status, _, _ = _render(out / "index.html", tmp_path)
    assert status["done"] and status["errors"] and status["panels"] == {}
    (out / "vega-bundle.js").unlink()
    status, _, _ = _render(out / "index.html", tmp_path)
    assert any("did not load" in e for e in status["errors"])


def test_the_study_leaderboard_page_renders_its_heatmap_in_chromium(tmp_path):
    """The study's index.html (leaklab.leaderboard): the detectors x cells heatmap, with a fixed size per
    cell and a text colour per cell, draws without a Vega warning."""
    from leaklab import leaderboard

    run = tmp_path / "dose"
    (run / "scores" / "step-3").mkdir(parents=True)
    records = [{"task_id": f"t{i}", "label": i % 2, "ppl": i * 0.1, "zlib": -i * 0.1} for i in range(12)]
    (run / "scores" / "step-3" / "detection.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "manifest.json").write_text(json.dumps({"member_ids": [], "non_member_ids": []}))
    plan = {
        "study": "hand",
        "root": str(tmp_path / "board"),
        "conditions": {
            "dose": {"recipe": "tiny_dose", "runs": [{"name": "dose", "run_dir": str(run)}], "after": None}
        },
        "fixed": ["tracking.wandb.enabled=false"],
    }
    leaderboard.write_leaderboard(plan, {"findings": []}, {"dose": {"state": "done"}})
    status, dom, log = _render(tmp_path / "board" / "index.html", tmp_path)
    assert status.get("done") and status["errors"] == [] and status["warnings"] == [], status
    assert "Uncaught" not in log
    assert list(status["panels"].values()) and all(n > 0 for n in status["panels"].values())
    assert "AUROC, detectors x cells" in dom and dom.count("<svg") >= 1
