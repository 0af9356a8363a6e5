"""`leaklab sweep`: grid expansion, validation before any run, one sweep per directory, the Slurm array
script line by line, and a 2 x 2 tiny sweep run here end to end and compared over seeds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SMALL_RUN
from leaklab import sweep
from leaklab.errors import InputError
from leaklab.recipe import SPREAD_SEEDS

REPO = Path(__file__).resolve().parents[1]


def _spec(*args: str) -> dict:
    return sweep.parse_sweep_args([*args])


def test_axes_seeds_and_fixed_overrides_are_told_apart():
    spec = _spec(
        "recipe=tiny_cpt", "mix.ratio=1:1,1:5,1:10", "train.epochs=1,3", "seeds=0,1", "evaluate.detectors=[ppl,zlib]",
        "train.learning_rate=1e-3", "--local",
    )  # fmt: skip
    assert spec["axes"] == {
        "mix.ratio": ["1:1", "1:5", "1:10"],
        "train.epochs": ["1", "3"],
        "seeds": ["0", "1"],
    }
    assert spec["fixed"] == ["evaluate.detectors=[ppl,zlib]", "train.learning_rate=1e-3"]
    points = sweep.expand(spec)
    assert len(points) == 12 and points[0] == {"mix.ratio": "1:1", "train.epochs": "1", "seeds": "0"}
    assert sweep.point_overrides({"seeds": "2"}) == ["seed=2", "train.seed=2", "mix.seed=2"]
    assert sweep.run_name("tiny_cpt", points[0]) == "tiny_cpt-mix.ratio=1_1-train.epochs=1-seed=0"


def test_a_seeds_axis_varies_training_but_not_the_split_or_the_evaluation(tmp_path):
    """`seed` sets every section seed a recipe does not give; a sweep's seeds axis pins the others at
    their values without it, so its runs resolve (and hash) as before."""
    from leaklab.recipe import get_key, load_recipe

    path = tmp_path / "noseed.yaml"  # gives no section seed at all
    path.write_text("base: tiny_cpt\ndata:\n  benchmark: humaneval\n")
    spec = _spec(f"recipe={path}", "seeds=0,2", "--local", "--out", str(tmp_path / "s"))
    for run in sweep.plan_sweep(spec)["runs"]:
        recipe = load_recipe(str(path), run["overrides"])
        seed = int(run["point"]["seeds"])
        for key in SPREAD_SEEDS:
            assert get_key(recipe, key) == (seed if key in sweep.SEED_KEYS else 0), key
        assert recipe.seed == seed


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["mix.ratio=1:1,1:x"], "mix.ratio=1:x: mix.ratio: expected code:web"),
        (["train.epoch=1,2"], "train.epoch=1: train.epoch: unknown key; did you mean 'train.epochs'?"),
        (["train.epochs=1,0"], "train.epochs=0: train.epochs: must be at least 1"),
    ],
)
def test_a_bad_value_names_the_key_and_value_before_any_run(tmp_path, args, expected):
    with pytest.raises(InputError) as err:
        sweep.command(
            ["recipe=tiny_cpt", *args, "--local", "--out", str(tmp_path / "s")], log=lambda *_: None
        )
    assert expected in str(err.value)
    assert not (tmp_path / "s").exists()  # nothing was written, nothing ran


def test_the_cli_exits_2_on_a_bad_value(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "leaklab.cli", "sweep", "recipe=tiny_cpt", "mix.ratio=1:1,1:x", "--local"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert "mix.ratio=1:x" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_directory_holding_another_sweep_is_refused(tmp_path):
    out = str(tmp_path / "s")
    assert sweep.command(["mix.ratio=1:1,1:5", "--slurm", "--out", out], log=lambda *_: None) == 0
    # The same sweep again is a resume, allowed; another grid in the same directory is not.
    assert sweep.command(["mix.ratio=1:1,1:5", "--slurm", "--out", out], log=lambda *_: None) == 0
    with pytest.raises(InputError, match="already holds another sweep"):
        sweep.command(["mix.ratio=1:1,1:10", "--slurm", "--out", out], log=lambda *_: None)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "results.jsonl").write_text("")
    with pytest.raises(InputError, match="not empty"):
        sweep.command(["mix.ratio=1:1,1:5", "--slurm", "--out", str(tmp_path / "other")], log=lambda *_: None)


def test_a_second_local_process_on_a_running_sweep_is_refused(tmp_path):
    import fcntl

    spec = _spec("mix.ratio=1:1,1:5", "--local", "--out", str(tmp_path / "s"))
    plan = sweep.plan_sweep(spec)
    root = sweep.claim_directory(plan)
    fd = os.open(root / ".running.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a first `--local` process holds it
    try:
        with pytest.raises(InputError, match="another sweep process is running"):
            sweep.run_local(plan, log=lambda *_: None)
    finally:
        os.close(fd)


def test_the_slurm_script_line_by_line(tmp_path):
    lines_out: list[str] = []
    out = tmp_path / "s"
    assert (
        sweep.command(
            ["recipe=tiny_cpt", "mix.ratio=1:1,1:5", "seeds=0,1", "evaluate.detectors=[ppl]", "--slurm"]
            + ["--out", str(out), "--gpus", "4", "--time", "02:00:00", "--partition", "gpu"],
            log=lines_out.append,
        )
        == 0
    )
    script = out / "slurm" / "sweep.sbatch"
    assert lines_out[-1] == f"sbatch {script}"
    assert os.access(script, os.X_OK)
    plan = json.loads((out / "sweep.json").read_text())
    name = plan["sweep"]
    lines = script.read_text().splitlines()
    expected_head = [
        "#!/usr/bin/env bash",
        f"# leaklab sweep {name}: 4 runs, one array task each.",
        f"#   sbatch {script}",
        f"#SBATCH --job-name={name}",
        "#SBATCH --array=0-3",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --cpus-per-task=32",
        "#SBATCH --time=02:00:00",
        "#SBATCH --partition=gpu",
        f"#SBATCH --output={out / 'slurm'}/%x-%A_%a.out",
        "set -euo pipefail",
    ]
    assert lines[: len(expected_head)] == expected_head
    rest = [line for line in lines[len(expected_head) :] if not line.startswith("#")]
    assert rest[0] == f"cd {Path.cwd().absolute()}"
    assert rest[1] == 'case "$SLURM_ARRAY_TASK_ID" in'
    # seed 1 keeps the split and the evaluation's seeds at the recipe's 0; seed 0 needs no pin
    pins = {"0": "", "1": "".join(f"{k}=0 " for k in SPREAD_SEEDS if k not in sweep.SEED_KEYS)}
    for i, (line, run) in enumerate(zip(rest[2:6], plan["runs"], strict=True)):
        point = run["point"]
        assert line == (
            f"  {i}) ARGS=(recipe=tiny_cpt 'evaluate.detectors=[ppl]' mix.ratio={point['mix.ratio']} "
            f"seed={point['seeds']} train.seed={point['seeds']} mix.seed={point['seeds']} {pins[point['seeds']]}"
            f"output_dir={out / 'runs'} run_name={run['name']} tracking.wandb.group={name}) ;;"
        )
    assert rest[6] == '  *) echo "no run for array task $SLURM_ARRAY_TASK_ID" >&2; exit 2 ;;'
    assert rest[7] == "esac"
    assert rest[8] == (
        f"accelerate launch --config_file {REPO / 'launch' / 'ddp.yaml'} --num_processes 4 "
        f'{REPO / "leaklab" / "train.py"} "${{ARGS[@]}}"'
    )
    assert len(rest) == 9
    assert (
        subprocess.run(["bash", "-n", str(script)]).returncode == 0
    )  # valid bash (the [..] value is quoted)
    assert len({r["run_dir"] for r in plan["runs"]}) == 4


@pytest.mark.slow
def test_a_two_by_two_sweep_runs_here_and_compares_over_seeds(leaklab_cache, tmp_path):
    env = {**os.environ, "LEAKLAB_CACHE": leaklab_cache, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    env.pop("WORLD_SIZE", None)
    out = tmp_path / "sweep"
    small = [a for a in SMALL_RUN if not a.startswith(("train.epochs", "mix.ratio"))]
    cmd = [sys.executable, "-m", "leaklab.cli", "sweep", "recipe=tiny_cpt", "mix.ratio=1:1,1:3", "seeds=0,1"]
    cmd += [
        *small,
        "train.epochs=1",
        "evaluate.detectors=[ppl]",
        "evaluate.n_bootstrap=50",
        "--local",
        "--out",
        str(out),
    ]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    plan = json.loads((out / "sweep.json").read_text())
    assert len(plan["runs"]) == 4
    for run in plan["runs"]:
        rows = [
            json.loads(line) for line in (Path(run["run_dir"]) / "results.jsonl").read_text().splitlines()
        ]
        assert any(r["evaluation"] == "detection" and r["metric"] == "auroc" for r in rows)
        recipe = (Path(run["run_dir"]) / "recipe.yaml").read_text()
        assert f"group: {plan['sweep']}" in recipe  # one W&B group for the sweep

    compared = subprocess.run(
        [sys.executable, "-m", "leaklab.cli", "compare", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert compared.returncode == 0, compared.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    auroc = [r for r in summary if r["metric"] == "auroc" and r["column"] == "ppl"]
    assert sorted(r["mix.ratio"] for r in auroc) == ["1:1", "1:3"]
    for r in auroc:
        assert r["seeds"] == 2 and r["ci_low"] <= r["mean"] <= r["ci_high"]
    assert "| mix.ratio | detector | metric | mean | 95% t-interval | seeds |" in compared.stdout
