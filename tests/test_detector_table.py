"""analysis/detector_table.py on run directories written the way the evaluator writes them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from leaklab.metrics import detection_metrics
from leaklab.rundir import append_rows

SCRIPT = Path(__file__).resolve().parents[1] / "analysis" / "detector_table.py"


def load_script():
    spec = importlib.util.spec_from_file_location("detector_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_run(root: Path, shifts: dict[str, float], epochs=(0.0, 1.0)) -> Path:
    """Detection rows for each detector; `shift` separates members from non-members (0 = chance)."""
    rng = np.random.default_rng(0)
    labels = np.r_[np.ones(40), np.zeros(40)].astype(int)
    rows = []
    for step, epoch in enumerate(epochs):
        for detector, shift in shifts.items():
            scores = rng.normal(size=80) + shift * epoch * labels
            base = {"step": step * 10, "epoch": epoch, "evaluation": "detection", "detector": detector,
                    "column": detector}  # fmt: skip
            rows += [{**base, "metric": k, "value": v} for k, v in detection_metrics(scores, labels).items()]
        rows.append(
            {
                "step": step * 10,
                "epoch": epoch,
                "evaluation": "training",
                "detector": None,
                "metric": "loss",
                "value": 1.0,
            }
        )
    append_rows(root / "results.jsonl", rows)
    return root


def test_table_from_two_runs(tmp_path, capsys):
    table = load_script()
    a = write_run(tmp_path / "qwen", {"ppl": 0.2, "minkpp@0.2": 3.0, "mink@0.2": 0.5})
    b = write_run(tmp_path / "llama", {"ppl": 3.0, "zlib": 0.0})
    assert table.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("|")]
    assert lines[0] == (
        "| Epoch | Method | qwen Acc. | qwen Prec. | qwen Rec. | qwen F1 | llama Acc. | llama Prec. | llama Rec. | llama F1 |"
    )
    body = lines[2:]
    # Epoch 0 first, detectors in the paper's order, then epoch 1.
    methods = [row.split("|")[2].strip() for row in body]
    assert methods == ["PPL", "Zlib", "Min-K% Prob (k=0.2)", "Min-K%++ Prob (k=0.2)"] * 2
    assert body[0].split("|")[1].strip() == "0 (base)" and body[4].split("|")[1].strip() == "1"
    epoch1 = {row.split("|")[2].strip(): [c.strip() for c in row.split("|")[3:-1]] for row in body[4:]}
    # Min-K%++ separates best in the first run, PPL in the second; missing cells are dashes.
    assert epoch1["Min-K%++ Prob (k=0.2)"][3].startswith("**") and not epoch1["PPL"][3].startswith("**")
    assert epoch1["PPL"][7].startswith("**") and epoch1["Min-K%++ Prob (k=0.2)"][7] == "–"
    assert "cross-validation" in out


def test_oracle_flag_and_values(tmp_path, capsys):
    table = load_script()
    run = write_run(tmp_path / "run", {"ppl": 3.0})
    rows = table.load_detection(run)
    assert table.main([str(run), "--oracle"]) == 0
    out = capsys.readouterr().out
    f1 = rows[(1.0, "ppl")]["f1_oracle"]
    assert f"**{100 * f1:.2f}**" in out and "oracle threshold" in out


def test_missing_run_dir(tmp_path, capsys):
    table = load_script()
    assert table.main([str(tmp_path / "nope")]) == 2
    assert "no results.jsonl" in capsys.readouterr().err
