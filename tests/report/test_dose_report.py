"""Dose–response on synthetic run directories: analysis/dose_tables.py and the report."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

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


@pytest.fixture
def run_dir(tmp_path):
    """The run directories of these tests, built one way: make_run's run in tmp_path/<name>, `rows`
    appended to its results.jsonl, then (doses=True) its members in three dose groups (`add_doses`)."""

    def build(name: str = "run", *, doses: bool = True, rows: list[dict] = ()) -> Path:
        root = make_run(tmp_path / name)
        with (root / "results.jsonl").open("a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
        return add_doses(root) if doses else root

    return build


def dose_response(run: Path):
    return next(s for s in build_sections(load_run(run)) if s.key == "dose-response")


def line_points(panel) -> dict:
    """(series, dose) -> (value, low, high) of a panel's line layer."""
    line = next(layer for layer in panel.spec["layer"] if layer["mark"]["type"] == "line")
    return {(p["series"], p["x"]): (p["value"], p.get("low"), p.get("high")) for p in line["data"]["values"]}


def test_dose_tables_prints_auroc_per_dose_and_the_exposures(run_dir, capsys):
    run = run_dir()
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


def test_dose_tables_refuses_a_run_without_doses_and_an_unknown_step(run_dir, capsys):
    plain = run_dir("plain", doses=False)
    assert dose_tables.main([str(plain)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no exposure doses" in err and "inject.doses" in err and "\n" not in err
    dosed = run_dir("dosed")
    assert dose_tables.main([str(dosed), "--step", "9"]) == 2
    assert "closest evaluated step: 8" in capsys.readouterr().err


def test_report_has_a_dose_response_section_only_for_a_run_with_doses(run_dir):
    plain = run_dir("plain", doses=False)
    assert "dose-response" not in [s.key for s in build_sections(load_run(plain))]
    run = run_dir()
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


def test_report_draws_extraction_against_dose_and_the_exposure_correlation(run_dir, capsys):
    head = {"step": 16, "epoch": 2.0, "evaluation": "extraction", "detector": None, "column": "members"}
    rows = [{**head, "metric": "extracted_fraction", "value": v, "dose": d} for d, v in ((1, 0.0), (4, 0.5))]
    rows += [
        {**head, "metric": "exposure_spearman", "value": 0.62},
        {**head, "metric": "exposure_spearman_ci_low", "value": 0.3},
        {**head, "metric": "exposure_spearman_ci_high", "value": 0.8},
        {**head, "metric": "exposure_n_members", "value": 10},
    ]
    run = run_dir(rows=rows)
    section = dose_response(run)
    panel = next(i for i in section.items if i.title.startswith("Members extracted verbatim"))
    assert {(x, v[0]) for (_, x), v in line_points(panel).items()} == {(1, 0.0), (4, 0.5)}
    table = next(i for i in section.items if i.title.startswith("Exposures vs outputs"))
    assert table.rows == [["16", "0.620 [0.30, 0.80]", "10"]]
    assert dose_tables.main([str(run)]) == 0
    out = capsys.readouterr().out
    assert (
        "| 4 | –/– | 0.500 |" in out
        and "Spearman (exposures vs outputs reproducing each member): 0.620 [0.300, 0.800]" in out
    )


def test_report_draws_members_pass_at_1_against_dose(run_dir):
    head = {"step": 16, "epoch": 2.0, "evaluation": "accuracy", "detector": None, "metric": "pass@1"}
    rows = [{**head, "column": "members", "value": v, "dose": d} for d, v in ((1, 0.2), (8, 0.6))]
    rows += [{**head, "column": "gap", "value": 0.4, "dose": 8}, {**head, "column": "members", "value": 0.4}]
    panel = next(i for i in dose_response(run_dir(rows=rows)).items if i.title.startswith("Members' pass@1"))
    assert {(x, v[0]) for (_, x), v in line_points(panel).items()} == {(1, 0.2), (8, 0.6)}


def test_dose_tables_keep_discoverable_apart_and_print_false_discoveries_and_canaries(run_dir, capsys):
    """members (untargeted) and members/discoverable rows carry the same metrics and doses: each gets
    its own table, not one overwriting the other; the non-members discoverable extraction reproduced
    (false discoveries) and the canaries' exposure per dose are printed with them."""
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
    run = run_dir(rows=rows)
    assert dose_tables.main([str(run)]) == 0
    out = capsys.readouterr().out
    untargeted, discoverable = out.split("discoverable extraction (greedy")
    assert "| 4 | –/– | 0.000 |" in untargeted and "| 4 | –/– | 0.750 |" in discoverable
    assert "Non-members matched by >= 6 lines (false discoveries): 2/8" in discoverable
    # The canaries evaluation's targeted share stays out of the untargeted line, in its own columns.
    assert "Canaries extracted by the untargeted outputs: dose 1: 0%, dose 4: 50%" in untargeted
    assert "| 4 | 2 | 7.500 [5.000, 9.970] | 50% | 9.97 | 100% | 50% |" in out


def test_report_draws_mri_and_its_instance_auroc_against_dose(run_dir):
    head = {"step": 16, "epoch": 2.0, "evaluation": "mri", "detector": None}
    rows = [
        {**head, "column": "members", "metric": m, "value": v, "dose": d}
        for d, values in ((1, (0.05, 0.0, 0.1)), (4, (0.3, 0.2, 0.4)))
        for m, v in zip(("mri", "mri_ci_low", "mri_ci_high"), values)
    ]
    rows += [
        {**head, "column": "all", "metric": "score_auroc", "value": v, "dose": d}
        for d, v in ((1, 0.5), (4, 0.8))
    ]
    rows += [{**head, "step": 8, "epoch": 1.0, "column": "members", "metric": "mri", "value": 0.9, "dose": 4}]
    section = dose_response(run_dir(rows=rows))
    mri = next(i for i in section.items if i.title.startswith("MRI of the members"))
    assert "step 16" in mri.title and "competence" not in mri.caption
    assert {x: v for (_, x), v in line_points(mri).items()} == {1: (0.05, 0.0, 0.1), 4: (0.3, 0.2, 0.4)}
    score = next(i for i in section.items if i.title.startswith("MRI instance score AUROC"))
    assert {x: v[0] for (_, x), v in line_points(score).items()} == {1: 0.5, 4: 0.8}


def test_report_draws_mri_unchecked_when_the_competence_check_left_mri_undefined(run_dir):
    head = {"step": 16, "epoch": 2.0, "evaluation": "mri", "detector": None, "column": "members"}
    rows = [{**head, "metric": "mri", "value": None, "dose": d} for d in (1, 4)]
    rows += [{**head, "metric": "mri_unchecked", "value": v, "dose": d} for d, v in ((1, 0.1), (4, 0.2))]
    mri = next(i for i in dose_response(run_dir(rows=rows)).items if i.title.startswith("MRI of the members"))
    assert "without the competence check" in mri.caption
    assert {x: v[0] for (_, x), v in line_points(mri).items()} == {1: 0.1, 4: 0.2}


def test_report_draws_the_counterfactual_flag_rate_against_dose_beside_the_non_members(run_dir):
    """Flag rate = memorized_any / n_samples: dose 1 flags 0 of 4 members, dose 8 flags 3 of 4; the
    non-members' rate (1 of 10) from the all-members rows is drawn at every dose."""
    head = {"step": 16, "epoch": 2.0, "evaluation": "counterfactual", "detector": None}
    rows = [
        {**head, "column": "members", "metric": m, "value": v, "dose": d}
        for d, flagged in ((1, 0.0), (8, 3.0))
        for m, v in (("memorized_any", flagged), ("n_samples", 4.0))
    ]
    rows += [
        {**head, "column": "non_members", "metric": m, "value": v}
        for m, v in (("memorized_any", 1.0), ("n_samples", 10.0))
    ]
    rows += [
        {**head, "column": "members", "metric": "memorized_any", "value": 5.0}
    ]  # all members: not a dose
    panel = next(i for i in dose_response(run_dir(rows=rows)).items if i.title.startswith("Counterfactual"))
    rates = {(series, x): v[0] for (series, x), v in line_points(panel).items()}
    assert rates == pytest.approx(
        {("members", 1): 0.0, ("members", 8): 0.75, ("non_members", 1): 0.1, ("non_members", 8): 0.1}
    )


def test_wandb_draws_auroc_against_dose_at_every_evaluated_step(monkeypatch):
    """One chart per step with per-dose detection rows: (detector, dose, log2 dose, AUROC, interval),
    detectors in registry order, a missing interval as NaN; all-members rows and other evaluations'
    per-dose rows stay out of it."""
    import math

    from leaklab import tracking

    logged = []
    monkeypatch.setattr(tracking, "_run", SimpleNamespace(log=logged.append))
    monkeypatch.setattr(tracking, "log_metrics", lambda metrics, step: None)
    rows = []
    for step, shift in ((8, 0.0), (16, 0.1)):
        head = {"step": step, "evaluation": "detection"}
        for dose, value in ((1, 0.5), (4, 0.7)):
            rows += [{**head, "column": "ppl", "metric": m, "value": value + shift + d, "dose": dose}
                     for m, d in (("auroc", 0.0), ("auroc_ci_low", -0.1), ("auroc_ci_high", 0.1))]  # fmt: skip
        rows.append({**head, "column": "zlib", "metric": "auroc", "value": 0.6, "dose": 4})
        rows.append({**head, "column": "ppl", "metric": "auroc", "value": 0.9})  # all members
    rows.append(
        {"step": 16, "evaluation": "mri", "column": "all", "metric": "score_auroc", "value": 0.8, "dose": 4}
    )
    tracking.log_rows(rows)
    assert [entry["train/global_step"] for entry in logged] == [8, 16]
    chart = logged[1]["detection/dose_response"]
    assert chart.table.columns == ["detector", "dose", "log2_dose", "auroc", "auroc_ci_low", "auroc_ci_high"]
    data = [
        [x if not (isinstance(x, float) and math.isnan(x)) else "nan" for x in row]
        for row in chart.table.data
    ]
    assert data == [
        ["ppl", 1, 0.0, pytest.approx(0.6), pytest.approx(0.5), pytest.approx(0.7)],
        ["ppl", 4, 2.0, pytest.approx(0.8), pytest.approx(0.7), pytest.approx(0.9)],
        ["zlib", 4, 2.0, 0.6, "nan", "nan"],
    ]
    tracking.log_rows([r for r in rows if "dose" not in r])  # a run without doses: no chart
    assert len(logged) == 2


def fake_dose_panels(rows, run):
    """A plug-in's dose panel for the test below: one table of the rows it was given."""
    from leaklab.report.section import Table

    return [
        Table(
            "fake evaluation per dose", ["dose", "value"], [[str(r["dose"]), str(r["value"])] for r in rows]
        )
    ]


def test_an_evaluation_record_declares_its_dose_panels(run_dir, monkeypatch):
    from leaklab import evaluations
    from leaklab.plugins import Record

    record = Record(
        "fake",
        "leaklab.evaluations.detection:Detection",
        "evaluation",
        dose_panels=f"{__name__}:fake_dose_panels",
    )
    monkeypatch.setitem(evaluations.EVALUATIONS, "fake", record)
    head = {
        "step": 16,
        "epoch": 2.0,
        "evaluation": "fake",
        "detector": None,
        "params": {},
        "column": "members",
    }
    run = run_dir(rows=[{**head, "metric": "share", "value": 0.25, "dose": 4}])
    section = next(s for s in build_sections(load_run(run)) if s.key == "dose-response")
    table = next(i for i in section.items if i.title == "fake evaluation per dose")
    assert table.rows == [["4", "0.25"]]  # its own dose rows only, none of detection's


def test_the_report_names_no_evaluation_but_detection():
    # What the report shows of an evaluation comes from its record (section, dose panels), not from report/.
    from leaklab.evaluations import EVALUATIONS

    report = Path(__file__).resolve().parents[2] / "leaklab" / "report"
    for path in report.glob("*.py"):
        text = path.read_text()
        for name in set(EVALUATIONS) - {"detection"}:
            # rows picked by their evaluation's name ("accuracy" alone is also a metric's name)
            for picked in (f'== "{name}"', f'rows_of("{name}")', f'"evaluation": "{name}"'):
                assert picked not in text, f"{path.name} names the {name} evaluation: {picked}"
