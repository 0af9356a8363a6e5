"""The command line's contract: exit codes and one-line errors."""

import subprocess
import sys
from pathlib import Path

import pytest

from leaklab.cli import main as cli_main
from leaklab.train import main as train_main


def test_unknown_recipe_key_exits_2_naming_the_closest_key(capsys):
    assert train_main(["recipe=tiny_cpt", "train.lerning_rate=1e-3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["leaklab: train.lerning_rate: unknown key; did you mean 'train.learning_rate'?"]


def test_bad_value_exits_2(capsys):
    assert train_main(["recipe=tiny_cpt", "evaluate.scoring_span=prompt"]) == 2
    assert "evaluate.scoring_span" in capsys.readouterr().err


def test_print_config_prints_the_resolved_recipe_and_exits(capsys):
    assert train_main(["recipe=tiny_cpt", "print_config=true", "train.epochs=2"]) == 0
    out = capsys.readouterr().out
    assert "epochs: 2" in out and "name: tiny_cpt" in out


def test_recipes_lists_names_with_descriptions(capsys):
    assert cli_main(["recipes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("tiny_cpt ") and len(line.split()) > 2 for line in lines)


def test_unknown_command_and_bad_run_dir_exit_2(tmp_path, capsys):
    assert cli_main(["evalute", "x"]) == 2
    assert "did you mean 'evaluate'" in capsys.readouterr().err
    assert cli_main(["report", str(tmp_path)]) == 2


def test_offline_apps_exits_1_with_what_to_download(tmp_path, capsys):
    # train.bf16=false: the recipe's GPU setting would be refused first on a CPU-only machine.
    args = ["recipe=apps_cpt", f"output_dir={tmp_path}", "tracking.wandb.enabled=false", "train.bf16=false"]
    rc = train_main(args)
    assert rc == 1
    assert "data.path=" in capsys.readouterr().err


@pytest.mark.slow
def test_train_script_runs_as_a_file_under_its_own_path():
    """`accelerate launch leaklab/train.py` executes the file, not the module: absolute imports must work."""
    out = subprocess.run(
        [sys.executable, "leaklab/train.py", "recipe=tiny_cpt", "print_config=true"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "name: tiny_cpt" in out.stdout


def test_a_closed_pipe_ends_quietly():
    # `leaklab keys | head -1`: the reader leaves after one line; no traceback, no error, exit 0.
    out = subprocess.run(
        f"{sys.executable} -m leaklab.cli keys | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.count("\n") == 1
    assert out.stderr == "", out.stderr


def test_srdetection_tables_rejects_an_unknown_metric(tmp_path, capsys):
    import json

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
    import srdetection_tables

    head = {"step": 1, "epoch": 1.0, "evaluation": "detection", "detector": "srdetection_gray"}
    rows = [{**head, "params": {"n": 3}, "column": "srdetection_gray@n=3", "metric": m, "value": 0.5}
            for m in ("f1", "accuracy")]  # fmt: skip
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert srdetection_tables.main([str(tmp_path), "--metric", "f1"]) == 0
    assert srdetection_tables.main([str(tmp_path), "--metric", "acuracy"]) == 2
    assert "did you mean 'accuracy'" in capsys.readouterr().err


def test_keys_filter_and_full_values(capsys):
    assert cli_main(["keys", "recipe=apps_cpt", "evaluate.detectors"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("evaluate.detectors") and "(below)" in out[0]
    # The whole list, not cut at the column's width.
    assert out[1].strip().startswith("= [ppl,") and out[1].rstrip().endswith("srdetection_black]")
    assert cli_main(["keys", "evaluate.*.seed"]) == 0
    keys = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert "evaluate.srdetection.seed" in keys and "evaluate.seed" not in keys and "seed" not in keys
    assert cli_main(["keys", "detectr"]) == 2
    assert "did you mean 'evaluate.detectors'" in capsys.readouterr().err


def test_detectors_lists_every_registered_detector(capsys):
    from leaklab.detectors import DETECTORS, describe_detectors
    from leaklab.plugins import COSTS

    assert cli_main(["detectors"]) == 0
    out = capsys.readouterr().out
    heads = [
        line.split()[0] for line in out.splitlines() if line and not line.startswith((" ", "cost", "spec"))
    ]
    assert heads == list(DETECTORS)
    described = {d["name"]: d for d in describe_detectors()}
    assert all(d["cost"] in COSTS and d["kind"] in ("score", "model", "rule") for d in described.values())
    gray = described["srdetection_gray"]
    assert gray["params"] == {"n": "1,3,5,10"} and gray["section"] == "evaluate.srdetection"
    assert any("variants" in n for n in gray["needs"]) and gray["display"] == "SrDetection gray box"
    assert any("reference model" in n for n in described["ref"]["needs"])
    assert any("generations" in n for n in described["srdetection_black"]["needs"])
    assert described["ppl"]["cost"] == "cheap" and described["srdetection_black"]["cost"] == "costly"
    assert "srdetection_gray  (rule, moderate)  SrDetection gray box [SrDetection]" in out
    assert "    parameters: n=1,3,5,10; settings: evaluate.srdetection.*" in out
    assert cli_main(["detectors", "--help"]) == 0 and "usage: leaklab detectors" in capsys.readouterr().out
    assert cli_main(["--help"]) == 0 and "  detectors [NAME]  " in capsys.readouterr().out
