"""A researcher's first day on one small finished run: the outputs of compare, sweep summaries, evaluate,
mia and the discovery commands say what is stored, in one line where something is wrong."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SMALL_RUN
from leaklab.cli import main as cli_main
from leaklab.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]
# Small and quick, but with a rule detector (its margin twins) and two score detectors.
FIRST_DAY_RUN = [
    *[a for a in SMALL_RUN if not a.startswith("train.epochs")],
    "train.epochs=1",
    "evaluate.detectors=[ppl,zlib,mink,srdetection_gray:n=1,3]",
    "evaluate.n_bootstrap=50",
]


def _env(cache: str) -> dict[str, str]:
    env = {**os.environ, "LEAKLAB_CACHE": cache, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    env.pop("WORLD_SIZE", None)
    return env


def leaklab(args: list[str], cache: str, cwd: Path = REPO, timeout: int = 900):
    """The installed command, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "leaklab.cli", *args],
        cwd=cwd,
        env=_env(cache),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def small_run(leaklab_cache, tmp_path_factory):
    """(run directory, the training's console output): one finished run for the whole module; tests
    that change a run work on a copy (`run_copy`)."""
    out = tmp_path_factory.mktemp("first-day")
    done = leaklab(["train", "recipe=tiny_cpt", *FIRST_DAY_RUN, f"output_dir={out}"], leaklab_cache)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run, done.stdout + done.stderr


def run_copy(run: Path, where: Path) -> Path:
    target = where / run.name
    shutil.copytree(run, target)
    return target


def fake_sweep(run: Path, where: Path, seeds=("0", "1")) -> Path:
    """A sweep directory whose seed runs are copies of `run` (what `leaklab sweep` writes: sweep.json and
    runs/<name>/), so compare reads real rows without training a grid."""
    root = where / "sweep"
    runs = []
    for seed in seeds:
        name = f"tiny_cpt-seed={seed}"
        shutil.copytree(run, root / "runs" / name)
        runs.append(
            {"name": name, "point": {"seeds": seed}, "overrides": [], "run_dir": str(root / "runs" / name)}
        )
    plan = {"sweep": "tiny_cpt-test", "id": "test", "recipe": "tiny_cpt", "axes": {"seeds": list(seeds)},
            "fixed": [], "root": str(root), "runs": runs}  # fmt: skip
    (root / "sweep.json").write_text(json.dumps(plan))
    return root


# --------------------------------------------------------------------------- 1. compare SWEEP --out


@pytest.mark.slow
def test_compare_of_a_sweep_with_out_writes_the_seed_table(small_run, leaklab_cache, tmp_path):
    sweep = fake_sweep(small_run[0], tmp_path)
    done = leaklab(["compare", str(sweep), "--out", str(tmp_path / "cmp")], leaklab_cache)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| detector | metric | mean | 95% t-interval | seeds |" in done.stdout
    summary = json.loads((sweep / "summary.json").read_text())
    assert any(r["column"] == "ppl" and r["metric"] == "auroc" and r["seeds"] == 2 for r in summary)
    # The runs side by side go to --out, one column per seed run, every detector a row.
    table = (tmp_path / "cmp" / "compare.md").read_text()
    ppl = next(line for line in table.splitlines() if line.startswith("| PPL"))
    assert ppl.count("|") == 4 and "–" not in ppl, ppl


# --------------------------------------------------------------------------- 3. sweep intervals


def test_the_sweep_interval_is_a_t_interval_cut_to_the_metric_range():
    from leaklab.sweep import mean_interval

    # Hand-computed: two seeds, mean 0.7, sd 0.1414, t(1) = 12.706 -> 0.7 -/+ 1.2706 = [-0.571, 1.971].
    mean, low, high = mean_interval([0.6, 0.8])
    assert (mean, round(low, 3), round(high, 3)) == (pytest.approx(0.7), -0.571, 1.971)
    assert mean_interval([0.6, 0.8], (0.0, 1.0))[1:] == (0.0, 1.0)
    # Three seeds: sd 0.05, t(2) = 4.3027 -> 0.75 -/+ 0.1242, inside [0, 1] and so not cut.
    mean, low, high = mean_interval([0.7, 0.75, 0.8], (0.0, 1.0))
    assert (round(low, 4), round(high, 4)) == (0.6258, 0.8742)


@pytest.mark.slow
def test_a_two_seed_sweep_says_which_interval_and_warns(small_run, leaklab_cache, tmp_path):
    sweep = fake_sweep(small_run[0], tmp_path)
    # Two seeds that differ: the second run's ppl AUROC moved, as another seed's would.
    results = sweep / "runs" / "tiny_cpt-seed=1" / "results.jsonl"
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    for r in rows:
        if r.get("column") == "ppl" and r.get("metric") == "auroc":
            r["value"] = 1.0 - r["value"] if r["value"] != 0.5 else 0.9
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = leaklab(["compare", str(sweep)], leaklab_cache)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Student-t interval of the mean over seeds" in done.stdout
    assert "2 seeds" in done.stdout and "run at least 3 seeds" in done.stdout
    for r in json.loads((sweep / "summary.json").read_text()):
        assert 0.0 <= r["ci_low"] <= r["mean"] <= r["ci_high"] <= 1.0, r


# --------------------------------------------------------------------------- 2. one number per quantity


@pytest.mark.slow
def test_evaluate_with_fewer_detectors_logs_the_stored_dataset_inference_p(
    small_run, leaklab_cache, tmp_path
):
    run = run_copy(small_run[0], tmp_path)
    done = leaklab(["evaluate", str(run), 'evaluate.detectors=[ppl,"mink:k=0.05"]'], leaklab_cache)
    assert done.returncode == 0, done.stderr[-2000:]
    stored = {
        r["step"]: r["value"]
        for r in RunDir(run).results_rows()
        if r.get("column") == "dataset_inference" and r.get("metric") == "p_value"
    }
    logged = [line for line in done.stdout.splitlines() if "dataset inference p" in line]
    assert logged, done.stdout[-2000:]
    for line in logged:
        step = int(line.split("step ")[1].split()[0])
        shown = float(line.split("dataset inference p ")[1].split(",")[0].split(";")[0])
        assert math.isclose(shown, float(f"{stored[step]:.2g}")), (line, stored[step])


# --------------------------------------------------------------------------- 4. GPU-only options


def test_gpu_only_options_are_refused_in_one_line_without_the_hardware():
    from leaklab.errors import InputError
    from leaklab.hardware import check_gpu_options
    from leaklab.recipe import load_recipe

    bf16 = load_recipe("tiny_cpt", ["train.bf16=true"])
    with pytest.raises(InputError, match=r"train.bf16: .*no GPU here.*set train.bf16=false"):
        check_gpu_options(bf16, state=(False, False))
    with pytest.raises(InputError, match="no bfloat16 support"):
        check_gpu_options(bf16, state=(True, False))
    check_gpu_options(bf16, state=(True, True))  # a bfloat16 GPU: fine
    vllm = load_recipe("tiny_grpo", ["train.rl.use_vllm=true"])
    with pytest.raises(InputError, match="train.rl.use_vllm: true needs a GPU"):
        check_gpu_options(vllm, state=(False, False))


# --------------------------------------------------------------------------- 5. use_vllm=true, init_from


def test_use_vllm_true_as_documented_is_the_switch_true():
    from leaklab.recipe import load_recipe

    for given, expected in (("true", "true"), ("false", "false"), ('"true"', "true"), ("auto", "auto")):
        assert load_recipe("tiny_grpo", [f"train.rl.use_vllm={given}"]).train.rl.use_vllm == expected
    with pytest.raises(Exception, match="use_vllm"):
        load_recipe("tiny_grpo", ["train.rl.use_vllm=maybe"])


def test_init_from_a_recipe_looks_under_the_output_dir_given(tmp_path, monkeypatch):
    from leaklab.recipe import load_recipe, run_dir_of
    from leaklab.training import rl

    monkeypatch.chdir(tmp_path)  # ./runs is empty: the earlier stage ran with output_dir=elsewhere
    earlier = run_dir_of(load_recipe("tiny_cpt", [f"output_dir={tmp_path / 'elsewhere'}"]))
    checkpoint = RunDir(earlier).checkpoints / "checkpoint-4"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text("{}")
    assert rl.find_init_checkpoint("recipe:tiny_cpt", str(tmp_path / "elsewhere")) == checkpoint
    recipe = load_recipe(
        "tiny_grpo", ["train.rl.init_from=recipe:tiny_cpt", f"output_dir={tmp_path / 'elsewhere'}"]
    )
    assert rl.resolve_base(recipe, RunDir(tmp_path / "rl"), log=lambda *a: None) == str(checkpoint)


# --------------------------------------------------------------------------- 6. mia is not a training run


@pytest.mark.slow
def test_mia_keys_scores_by_the_users_ids_and_talks_of_one_scoring(leaklab_cache, tmp_path, monkeypatch):
    import functools

    from conftest import SMALL_TINY
    from leaklab.data.benchmarks import load_humaneval
    from leaklab.detectors import blind
    from leaklab.evaluations import detection

    # The sets differ in their text: 9 permutations keep the shift test's row and the test quick.
    monkeypatch.setattr(detection, "shift_pvalue", functools.partial(blind.shift_pvalue, max_permutations=9))
    tasks = load_humaneval()[:16]
    rows = [{"id": f"he-{i}", "text": t.prompt + t.solution, "label": i % 2} for i, t in enumerate(tasks)]
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["mia", "model=builtin:tiny", f"data={data}", "detectors=[ppl,zlib]", f"output_dir={tmp_path / 'out'}",
            "evaluate.n_bootstrap=50", "tracking.wandb.enabled=false", *SMALL_TINY]  # fmt: skip
    assert cli_main(args) == 0
    (folder,) = (tmp_path / "out").iterdir()
    run = RunDir(folder)
    scores = [json.loads(line) for line in run.scores(0, "detection").read_text().splitlines()]
    assert sorted(s["task_id"] for s in scores) == sorted(r["id"] for r in rows)
    report = (run.report / "report.md").read_text()
    page = (run.report / "index.html").read_text()
    for text in (report, page):
        assert "untrained model" not in text and "one checkpoint only" not in text
        assert "first clears 0.5 at step 0" not in text and "at the last checkpoint" not in text
    assert "scored once with the model as given" in report
    assert not list(run.report.glob("detection_*.png"))  # no per-epoch figure of one dot

    import leaklab

    results = leaklab.load_run(folder)
    assert results.kind == "mia" and set(results.rows()["step"]) == {0}
    check_schema(results.rows())
    assert sorted(results.scores(0)["task_id"]) == sorted(r["id"] for r in rows)


def test_mia_ids_must_be_unique(tmp_path):
    from leaklab.data.labelled import DataSpec, load_labelled
    from leaklab.errors import InputError

    path = tmp_path / "d.jsonl"
    path.write_text(
        "".join(json.dumps({"id": "a", "text": f"t{i}", "label": i % 2}) + "\n" for i in range(4))
    )
    with pytest.raises(InputError, match=r"the id 'a' \(id column\) names two rows"):
        load_labelled(DataSpec(data=str(path)))
    # Two files: each file's ids are its own (both may start at 0).
    for name in ("m", "n"):
        (tmp_path / f"{name}.jsonl").write_text(
            "".join(json.dumps({"id": i, "text": f"{name}{i}"}) + "\n" for i in range(2))
        )
    both = load_labelled(DataSpec(members=str(tmp_path / "m.jsonl"), non_members=str(tmp_path / "n.jsonl")))
    assert both.ids == ["members/0", "members/1", "non_members/0", "non_members/1"]


# --------------------------------------------------------------------------- 7. discovery commands


def test_keys_prints_each_meaning_whole(capsys):
    from leaklab.keys import describe_keys

    long = [(key, meaning) for key, _, _, meaning in describe_keys() if len(meaning) > 100]
    assert long, "no meaning is longer than 100 characters: each was cut"
    key, meaning = long[0]
    assert cli_main(["keys", key]) == 0
    assert meaning in capsys.readouterr().out


def test_detectors_takes_a_name_and_refuses_an_unknown_one(capsys):
    assert cli_main(["detectors", "mink"]) == 0
    heads = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line[:1].isalpha()]
    assert heads[:2] == ["mink", "minkpp"] and "ppl" not in heads
    assert cli_main(["detectors", "minkk"]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "leaklab: detectors: no detector matches 'minkk'; did you mean 'mink'?"
    )


@pytest.mark.slow
def test_compare_writes_beside_the_runs_and_select_writes_nothing_to_recommend(
    small_run, tmp_path, monkeypatch
):
    runs = tmp_path / "runs"
    runs.mkdir()
    run = run_copy(small_run[0], runs)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # the user's checkout
    assert cli_main(["compare", str(run)]) == 0
    assert not any(work.iterdir()) and (runs / "compare" / "compare.md").exists()
    # No dataset-inference row of dashes: only columns that have the compared metric.
    assert "dataset_inference" not in (runs / "compare" / "compare.md").read_text()
    assert cli_main(["select", str(run)]) == 1  # a cpt run without accuracy or mri rows
    assert not (run / "selection.json").exists()


# --------------------------------------------------------------------------- 8. noise


@pytest.mark.slow
def test_a_runs_console_end_is_narrow_and_says_each_number_once(small_run):
    run, console = small_run
    assert "every checkpoint is already evaluated" not in console
    tables = [line for line in console.splitlines() if line.startswith("|")]
    assert tables and max(len(line) for line in tables) < 120, max(tables, key=len)
    auroc = console.split("AUROC, members vs non-members")[1].split("macro-F1")[0]
    assert "srdetection_gray@n=1 |" in auroc and "_margin" not in auroc
    macro_f1 = console.split("macro-F1 at a cross-validated threshold")[1]
    assert "srdetection_gray_margin@n=1 |" in macro_f1  # a different number: the margin's CV threshold


def test_labels_name_a_parameter_once_and_before_the_margin():
    from leaklab.results import display_name

    assert display_name("recall@shots=1") == "recall (shots=1)"
    assert display_name("mink@0.2") == "Min-K% Prob (k=0.2)"
    labels = [display_name(f"srdetection_gray_margin@n={n}") for n in (1, 3, 5, 10)]
    assert len({label[:28] for label in labels}) == 4, labels  # told apart even when a legend cuts them


# --------------------------------------------------------------------------- plug-ins from outside leaklab


def plugin_site(where: Path, entry_point: bool) -> Path:
    """A folder holding the package my_lab, whose detectors.py is the example of docs/plugins.md as printed
    there; with `entry_point`, also the dist-info folder `pip install` writes for a package declaring
    it under the leaklab.plugins group (this test environment has no `wheel` to build one with pip, so
    the metadata is written as pip would write it; importlib.metadata reads it the same way)."""
    site = where / "site"
    (site / "my_lab").mkdir(parents=True)
    (site / "my_lab" / "__init__.py").write_text("")
    example = (REPO / "docs" / "plugins.md").read_text().split("```python\n")[1].split("```")[0]
    assert len([line for line in example.splitlines() if line.strip()]) <= 22  # "a detector in 20 lines"
    (site / "my_lab" / "detectors.py").write_text(example)
    if entry_point:
        info = site / "my_lab-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-lab\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text("[leaklab.plugins]\nmy_lab = my_lab.detectors\n")
    return site


def with_path(site: Path, args: list[str], cache: str, timeout: int = 900):
    env = {**_env(cache), "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-m", "leaklab.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_an_installed_plugin_detector_is_listed_scored_and_reported(small_run, leaklab_cache, tmp_path):
    site = plugin_site(tmp_path, entry_point=True)
    listed = with_path(site, ["detectors", "lpq"], leaklab_cache)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert listed.stdout.startswith("lpq  (score, cheap)  Log-prob quantile [my lab]"), listed.stdout
    assert "    parameters: q=0.1" in listed.stdout

    run = run_copy(small_run[0], tmp_path)
    done = with_path(site, ["evaluate", str(run), 'evaluate.detectors=[ppl,"lpq:q=0.05"]'], leaklab_cache)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = RunDir(run).results_rows()
    auroc = [r for r in rows if r.get("column") == "lpq@q=0.05" and r.get("metric") == "auroc"]
    assert {r["step"] for r in auroc} == {r["step"] for r in rows if r.get("column") == "ppl"}
    assert all(r["params"] == {"q": 0.05} and 0.0 <= r["value"] <= 1.0 for r in auroc)
    scores = [json.loads(line) for line in RunDir(run).scores(0, "detection").read_text().splitlines()]
    assert all(isinstance(s["lpq@q=0.05"], float) for s in scores)
    assert "lpq@q=0.05" in (run / "report" / "report.md").read_text()
    assert "Log-prob quantile (q=0.05)" in (run / "report" / "index.html").read_text()


@pytest.mark.slow
def test_the_plugins_key_imports_a_module_and_refuses_an_unknown_one(leaklab_cache, tmp_path):
    site = plugin_site(tmp_path, entry_point=False)
    base = ["train", "recipe=tiny_cpt", f"output_dir={tmp_path / 'runs'}"]
    unknown = with_path(site, [*base, "evaluate.detectors=[ppl,lpq]", "print_config=true"], leaklab_cache)
    assert unknown.returncode == 2 and "unknown detector 'lpq'" in unknown.stderr
    named = ["plugins=[my_lab.detectors]", "evaluate.detectors=[ppl,lpq]", "print_config=true"]
    loaded = with_path(site, [*base, *named], leaklab_cache)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert "- my_lab.detectors" in loaded.stdout and "- lpq" in loaded.stdout
    missing = with_path(site, [*base, "plugins=[my_lab.nosuch]"], leaklab_cache)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        "leaklab: plugins: no module named 'my_lab.nosuch' (an importable module: install its package, "
        "or put its folder on PYTHONPATH)"
    ]
    assert not (tmp_path / "runs").exists()


# --------------------------------------------------------------------------- results in Python

TYPE_CHECKS = {
    "str": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, (int,)) or getattr(v, "dtype", None) is not None and v.dtype.kind == "i",
    "float": lambda v: isinstance(v, float),
    "dict": lambda v: isinstance(v, dict),
    "str or None": lambda v: v is None or isinstance(v, str),
}


def check_schema(rows) -> None:
    """The frame's first columns are the documented fields, each value of its documented type."""
    from leaklab.load import ROW_SCHEMA

    doc = (REPO / "docs" / "results-in-python.md").read_text()
    documented = {
        line.split("|")[1].strip(" `"): line.split("|")[2].strip()
        for line in doc.splitlines()
        if line.startswith("| `")
    }
    assert documented == {k: t for k, (t, _) in ROW_SCHEMA.items()}
    assert list(rows.columns[: len(ROW_SCHEMA)]) == list(ROW_SCHEMA) and len(rows)
    assert (
        rows["step"].dtype.kind == "i" and rows["value"].dtype.kind == "f" and rows["epoch"].dtype.kind == "f"
    )
    for field, (kind, _) in ROW_SCHEMA.items():
        if field in ("step", "epoch", "value"):
            continue
        bad = [v for v in rows[field] if not TYPE_CHECKS[kind](v)]
        assert not bad, (field, kind, bad[:3])


@pytest.mark.slow
def test_load_run_gives_the_documented_rows_scores_and_a_figure(small_run, tmp_path):
    import leaklab

    run = small_run[0]
    results = leaklab.load_run(run)
    rows = results.rows()
    assert results.kind == "run"
    check_schema(rows)
    stored = RunDir(run).results_rows()
    assert len(rows) == len([r for r in stored if r["evaluation"] == "detection" and r["metric"] != "done"])
    assert not rows["evaluation"].isin(["timing", "training"]).any() and "done" not in set(rows["metric"])
    kept = results.bookkeeping()
    assert "training" in set(kept["evaluation"]) and "done" in set(kept["metric"])
    last = max(r["step"] for r in stored if r.get("column") == "ppl")
    (ppl,) = [
        r["value"] for r in stored if (r["step"], r.get("column"), r["metric"]) == (last, "ppl", "auroc")
    ]
    picked = rows[(rows.step == last) & (rows.column == "ppl") & (rows.metric == "auroc")]
    assert picked["value"].tolist() == [ppl]
    scores = results.scores()
    assert results.steps()[-1] == last and len(scores) == 24 and set(scores["label"]) == {0, 1}
    assert {"task_id", "label", "ppl", "srdetection_gray@n=1:leak"} <= set(scores.columns)
    with pytest.raises(Exception, match=r"no per-sample detection scores at step 999 \(steps: 0, "):
        results.scores(999)

    # A sweep: every run's rows, with the seed as a column.
    sweep = leaklab.load_run(fake_sweep(run, tmp_path))
    check_schema(sweep.rows())
    assert sweep.kind == "sweep" and set(sweep.rows()["seed"]) == {"0", "1"}
    assert len(sweep.rows()) == 2 * len(rows) and len(sweep.scores()) == 48

    # The docs' three lines make the figure.
    doc = (REPO / "docs" / "results-in-python.md").read_text()
    three = doc.split("## Three lines to a figure")[1].split("```python\n")[1].split("```")[0]
    assert len([line for line in three.splitlines() if line.strip()]) == 3
    code = three.replace("runs/tiny_cpt-1a2b3c4d", str(run)).replace("auroc.png", str(tmp_path / "auroc.png"))
    exec(compile(code, "docs/results-in-python.md", "exec"), {})
    assert (tmp_path / "auroc.png").stat().st_size > 1000
