"""Dose–response (issue 27) on synthetic run directories: analysis/dose_tables.py and the report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_report import _page_specs, make_run

from leaklab.report import build_report
from leaklab.report.rundata import load_run
from leaklab.report.sections import build_sections

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "analysis"))
import dose_tables  # noqa: E402, I001

DOSES = (1, 4, 16)


def add_doses(root: Path) -> Path:
    """make_run's run with members in three dose groups: the manifest's doses, mixture.json's counted
    exposures (one member of dose 16 seen 15 times), and per-dose rows whose AUROC rises with the dose
    (0.55 + 0.1 * log2(dose) / 2 at every step)."""
    manifest = json.loads((root / "manifest.json").read_text())
    doses = {t: DOSES[i % 3] for i, t in enumerate(manifest["member_ids"])}
    manifest |= {"doses": doses, "inject": {"doses": list(DOSES), "window": [0.0, 1.0]}}
    (root / "manifest.json").write_text(json.dumps(manifest))
    mixture = json.loads((root / "mixture.json").read_text())
    mixture["exposures"] = dict(doses) | {manifest["member_ids"][2]: 15}
    (root / "mixture.json").write_text(json.dumps(mixture))
    rows = [json.loads(line) for line in (root / "results.jsonl").read_text().splitlines()]
    extra = []
    for r in rows:
        if r.get("evaluation") == "detection" and r.get("column") and r["metric"].startswith("auroc"):
            for dose in DOSES:
                level = {1: 0.55, 4: 0.65, 16: 0.75}[dose]
                shift = {"auroc": 0.0, "auroc_ci_low": -0.1, "auroc_ci_high": 0.1}[r["metric"]]
                extra.append({**r, "value": level + shift, "dose": dose})
    (root / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + extra))
    return root


def test_dose_tables_prints_auroc_per_dose_and_the_exposures(tmp_path, capsys):
    run = add_doses(make_run(tmp_path / "run"))
    assert dose_tables.main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "auroc per dose at step 16" in out
    assert "| dose 1 | dose 4 | dose 16 | all members |" in out
    # ppl at step 16: doses from the dose rows, all members from the all-members row (0.9 [0.75, 1.0]).
    assert "| PPL | 0.550 [0.450, 0.650] | 0.650 [0.550, 0.750] | 0.750 [0.650, 0.850] | 0.900" in out
    # SrDetection at its largest n only.
    assert "n=10" in out and "(n=1)" not in out
    # Dose 16: members 3 (T/2, T/5, T/8), exposures 15, 16, 16.
    assert "| 16 | 3 | 3 | 15 | 15.6667 | 16 |" in out
    assert dose_tables.main([str(run), "--step", "8"]) == 0
    assert "at step 8" in capsys.readouterr().out


def test_dose_tables_refuses_a_run_without_doses_and_an_unknown_step(tmp_path, capsys):
    plain = make_run(tmp_path / "plain")
    assert dose_tables.main([str(plain)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no exposure doses" in err and "inject.doses" in err and "\n" not in err
    dosed = add_doses(make_run(tmp_path / "dosed"))
    assert dose_tables.main([str(dosed), "--step", "9"]) == 2
    assert "closest evaluated step: 8" in capsys.readouterr().err


def test_report_has_a_dose_response_section_only_for_a_run_with_doses(tmp_path):
    plain = make_run(tmp_path / "plain")
    assert "dose-response" not in [s.key for s in build_sections(load_run(plain))]
    run = add_doses(make_run(tmp_path / "run"))
    data = load_run(run)
    # The detection section reads the all-members rows only: its AUROC at step 16 is 0.9, not a dose's.
    assert all("dose" not in r for r in data.rows) and data.dose_rows
    keys = [s.key for s in build_sections(data)]
    assert keys.index("dose-response") == keys.index("detection") + 1
    section = next(s for s in build_sections(data) if s.key == "dose-response")
    first = section.items[0]
    assert "last checkpoint (step 16" in first.title
    layers = first.spec["layer"]
    line = next(layer for layer in layers if layer["mark"]["type"] == "line")
    assert line["encoding"]["x"]["scale"] == {"type": "log"}
    points = {(p["series"], p["x"]): (p["value"], p["low"], p["high"]) for p in line["data"]["values"]}
    assert points["PPL", 16] == pytest.approx((0.75, 0.65, 0.85)) and points["PPL", 1][0] == pytest.approx(
        0.55
    )
    assert {x for _, x in points} == {1, 4, 16}  # the last checkpoint only: one point per dose
    assert [i.title for i in section.items[1:4]] == [
        f"AUROC per checkpoint, members of dose {d}" for d in DOSES
    ]
    exposures = section.items[-1]
    assert exposures.rows[-1] == ["16", "3", "3", "15.00", "15.67", "16.00"]
    index = build_report(run)
    assert "Dose–response" in index.read_text() and len(_page_specs(index)) > len(
        _page_specs(build_report(plain))
    )


def test_wandb_names_dose_rows_apart_and_its_summary_reads_the_all_members_rows(monkeypatch):
    from leaklab import tracking

    head = {"step": 4, "evaluation": "detection", "column": "ppl"}
    rows = [{**head, "metric": "auroc", "value": 0.6}, {**head, "metric": "auroc", "value": 0.95, "dose": 16}]
    assert tracking.detection_summary(rows)["detection/best_auroc"] == 0.6
    logged = {}
    monkeypatch.setattr(tracking, "log_metrics", lambda metrics, step: logged.update(metrics))
    tracking.log_rows(rows)
    assert logged == {"detection/ppl/auroc": 0.6, "detection/dose=16/ppl/auroc": 0.95}


def test_report_draws_extraction_against_dose_and_the_exposure_correlation(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    head = {"step": 16, "epoch": 2.0, "evaluation": "extraction", "detector": None, "column": "members"}
    rows = [{**head, "metric": "extracted_fraction", "value": v, "dose": d} for d, v in ((1, 0.0), (4, 0.5))]
    rows += [
        {**head, "metric": "exposure_spearman", "value": 0.62},
        {**head, "metric": "exposure_spearman_ci_low", "value": 0.3},
        {**head, "metric": "exposure_spearman_ci_high", "value": 0.8},
        {**head, "metric": "exposure_n_members", "value": 10},
    ]
    with (run / "results.jsonl").open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    section = next(s for s in build_sections(load_run(run)) if s.key == "dose-response")
    panel = next(i for i in section.items if i.title.startswith("Members extracted verbatim"))
    line = next(layer for layer in panel.spec["layer"] if layer["mark"]["type"] == "line")
    assert {(p["x"], p["value"]) for p in line["data"]["values"]} == {(1, 0.0), (4, 0.5)}
    table = next(i for i in section.items if i.title.startswith("Exposures vs outputs"))
    assert table.rows == [["16", "0.620 [0.30, 0.80]", "10"]]
    add_doses(run)
    assert dose_tables.main([str(run)]) == 0
    out = capsys.readouterr().out
    assert (
        "| 4 | –/– | 0.500 |" in out
        and "Spearman (exposures vs outputs reproducing each member): 0.620 [0.300, 0.800]" in out
    )


def test_report_draws_members_pass_at_1_against_dose(tmp_path):
    run = make_run(tmp_path / "run")
    head = {"step": 16, "epoch": 2.0, "evaluation": "accuracy", "detector": None, "metric": "pass@1"}
    rows = [{**head, "column": "members", "value": v, "dose": d} for d, v in ((1, 0.2), (8, 0.6))]
    rows += [{**head, "column": "gap", "value": 0.4, "dose": 8}, {**head, "column": "members", "value": 0.4}]
    with (run / "results.jsonl").open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    section = next(s for s in build_sections(load_run(run)) if s.key == "dose-response")
    panel = next(i for i in section.items if i.title.startswith("Members' pass@1"))
    line = next(layer for layer in panel.spec["layer"] if layer["mark"]["type"] == "line")
    assert {(p["x"], p["value"]) for p in line["data"]["values"]} == {(1, 0.2), (8, 0.6)}


def test_dose_tables_keep_discoverable_apart_and_print_false_discoveries_and_canaries(tmp_path, capsys):
    """members (untargeted) and members/discoverable rows carry the same metrics and doses: each gets
    its own table, not one overwriting the other; the non-members discoverable extraction reproduced
    (false discoveries) and the canaries' exposure per dose are printed with them."""
    run = add_doses(make_run(tmp_path / "run"))
    head = {"step": 16, "epoch": 2.0, "evaluation": "extraction", "detector": None}
    rows = [{**head, "column": "members", "metric": "extracted_fraction", "value": 0.0, "dose": 4}]
    rows += [
        {**head, "column": "members/discoverable", "metric": "extracted_fraction", "value": 0.75, "dose": 4}
    ]
    rows += [
        {**head, "column": "non_members/discoverable", "metric": m, "value": v}
        for m, v in (("n_extracted", 2), ("n_tasks", 8))
    ]
    # The untargeted share under its name before targeted extraction (older runs) and today's.
    rows += [{**head, "column": "dose=4", "metric": "canary_extracted_rate", "value": 0.5, "dose": 4}]
    rows += [
        {**head, "column": "dose=1", "metric": "canary_extracted_untargeted_rate", "value": 0.0, "dose": 1}
    ]
    canary = {**head, "evaluation": "canaries", "column": "dose=4", "dose": 4}
    rows += [
        {**canary, "metric": m, "value": v}
        for m, v in (("n_canaries", 2), ("canary_exposure_mean", 7.5), ("canary_exposure_mean_ci_low", 5.0),
                     ("canary_exposure_mean_ci_high", 9.97), ("canary_rank1_fraction", 0.5), ("canary_exposure_max", 9.97),
                     ("canary_extracted_rate", 1.0), ("canary_extracted_greedy_rate", 0.5))
    ]  # fmt: skip
    with (run / "results.jsonl").open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    assert dose_tables.main([str(run)]) == 0
    out = capsys.readouterr().out
    untargeted, discoverable = out.split("discoverable extraction (greedy")
    assert "| 4 | –/– | 0.000 |" in untargeted and "| 4 | –/– | 0.750 |" in discoverable
    assert "Non-members matched by >= 6 lines (false discoveries): 2/8" in discoverable
    # The canaries evaluation's targeted share stays out of the untargeted line, in its own columns.
    assert "Canaries extracted by the untargeted outputs: dose 1: 0%, dose 4: 50%" in untargeted
    assert "| 4 | 2 | 7.500 [5.000, 9.970] | 50% | 9.97 | 100% | 50% |" in out
