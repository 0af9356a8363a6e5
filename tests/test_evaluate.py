"""Re-evaluating a trained run without retraining: `leaklab evaluate RUN_DIR` with
evaluate.* keys adds what the checkpoints lack and rewrites nothing; settings that would change rows
already written are refused, with `--into NAME` as the way to a fresh evaluation folder; `leaklab
train` with other evaluate.* keys on a trained run trains nothing."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import SMALL_RUN
from leaklab import cli
from leaklab.rundir import RunDir

pytestmark = pytest.mark.slow  # they train a tiny run (about a minute on two loaded cores)

TRAIN = ["train", "recipe=tiny_cpt", *SMALL_RUN, "data.max_samples=8", "train.epochs=1"]
TRAIN += ["evaluate.detectors=[ppl]", "evaluate.evaluations=[detection]", "evaluate.n_bootstrap=20"]


@pytest.fixture(scope="module")
def trained(leaklab_cache, tmp_path_factory) -> RunDir:
    """One tiny run (step 0 and one checkpoint, evaluated with ppl); tests work on copies of it."""
    out = tmp_path_factory.mktemp("runs")
    assert cli.main([*TRAIN, f"output_dir={out}"]) == 0
    (root,) = [p for p in out.iterdir() if p.is_dir()]
    return RunDir(root)


@pytest.fixture
def run(trained, tmp_path) -> RunDir:
    copy = RunDir(tmp_path / trained.root.name)
    shutil.copytree(trained.root, copy.root)
    return copy


def _leaklab_lines(text: str) -> list[str]:
    """leaklab's own lines on stderr (transformers may add progress bars)."""
    return [line for line in text.splitlines() if line.startswith("leaklab:")]


def _columns(run: RunDir, step: int) -> set[str]:
    return {r["column"] for r in run.results_rows() if r["step"] == step and r["evaluation"] == "detection"}


def test_evaluate_adds_detectors_to_every_checkpoint_and_rewrites_nothing(run, capsys):
    steps = [0, *(s for s, _ in run.checkpoint_dirs())]
    before = run.results.read_bytes()
    args = ["evaluate", str(run.root), "evaluate.detectors=[ppl,zlib,'mink:k=0.2']"]
    assert cli.main(args) == 0
    after = run.results.read_bytes()
    assert after.startswith(before) and len(after) > len(before)  # appended, nothing rewritten
    for step in steps:
        assert {"ppl", "zlib", "mink@0.2"} <= _columns(run, step)
        record = json.loads(run.scores(step, "detection").read_text().splitlines()[0])
        assert {"ppl", "zlib", "mink@0.2"} <= set(record)
    # Only what the steps lacked was computed: the new done markers close the new specs alone.
    new_done = [json.loads(line) for line in after[len(before) :].decode().splitlines()]
    new_done = [r["specs"] for r in new_done if r["metric"] == "done"]
    assert new_done == [["mink:k=0.2", "zlib"]] * len(steps)
    settings = json.loads(run.evaluation_settings.read_text())
    assert settings["detection"]["evaluate.cv_folds"] == 5
    # Done: the same again evaluates nothing and writes nothing.
    capsys.readouterr()
    assert cli.main(args) == 0
    assert "already evaluated" in capsys.readouterr().out
    assert run.results.read_bytes() == after
    # Another value of a detector's parameter is another column, not a conflict; the old ones stay.
    only_new = ["evaluate", str(run.root), "evaluate.detectors=['mink:k=0.5']"]
    assert cli.main(only_new) == 0
    assert run.results.read_bytes().startswith(after)
    for step in steps:
        assert {"ppl", "zlib", "mink@0.2", "mink@0.5"} <= _columns(run, step)
        record = json.loads(run.scores(step, "detection").read_text().splitlines()[0])
        assert {"ppl", "zlib", "mink@0.2", "mink@0.5"} <= set(record)  # per-sample scores kept


def test_settings_that_change_written_rows_are_refused_and_go_to_a_fresh_folder(run, capsys):
    before = run.results.read_bytes()
    assert cli.main(["evaluate", str(run.root), "evaluate.cv_folds=3"]) == 2
    err = _leaklab_lines(capsys.readouterr().err)
    assert len(err) == 1 and "evaluate.cv_folds 5 -> 3" in err[0] and "--into NAME" in err[0]
    assert cli.main(["evaluate", str(run.root), "train.epochs=5"]) == 2
    err = _leaklab_lines(capsys.readouterr().err)
    assert len(err) == 1 and "train.epochs changes the trained weights" in err[0]
    assert run.results.read_bytes() == before

    assert cli.main(["evaluate", str(run.root), "--into", "cv3", "evaluate.cv_folds=3"]) == 0
    folder = RunDir(run.evaluation_folder("cv3"))
    assert run.results.read_bytes() == before
    steps = [0, *(s for s, _ in run.checkpoint_dirs())]
    assert {r["step"] for r in folder.results_rows() if r["evaluation"] == "detection"} == set(steps)
    assert json.loads(folder.evaluation_settings.read_text())["detection"]["evaluate.cv_folds"] == 3
    assert (folder.report / "report.md").exists()


def test_the_same_recipe_on_its_finished_run_loads_nothing(trained, run, capsys, monkeypatch):
    """A sweep, a study or `make reproduce` run again starts `leaklab train` on every finished run: it
    must not load the tasks (the canonical-solution check runs every task's tests in the sandbox) or the
    model to learn that nothing is left. With one more detector it takes the full path again."""
    import leaklab.evaluate
    import leaklab.train

    def must_not_load(*args, **kwargs):
        raise AssertionError("loaded the tasks of a finished run")

    monkeypatch.setattr(leaklab.evaluate, "load_tasks", must_not_load)
    monkeypatch.setattr(leaklab.train, "load_base_model", must_not_load)
    results = run.results.read_bytes()
    capsys.readouterr()
    assert cli.main([*TRAIN, f"output_dir={run.root.parent}"]) == 0
    assert f"{run.root} is trained and every checkpoint evaluated: nothing to do" in capsys.readouterr().out
    assert run.results.read_bytes() == results
    with pytest.raises(AssertionError, match="loaded the tasks"):
        cli.main([*TRAIN, f"output_dir={run.root.parent}", "evaluate.detectors=[ppl,zlib]"])


def test_train_with_other_evaluation_settings_trains_nothing_and_evaluates_what_is_missing(
    trained, run, capsys
):
    output_dir = f"output_dir={run.root.parent}"
    checkpoints = [p.name for _, p in run.checkpoint_dirs()]
    capsys.readouterr()
    code = cli.main([*TRAIN, output_dir, "evaluate.detectors=[ppl,zlib]", "evaluate.batch_tokens=2048"])
    assert code == 0
    out = capsys.readouterr().out
    assert f"run directory: {run.root}" in out and "nothing to train" in out
    assert [p.name for _, p in run.checkpoint_dirs()] == checkpoints
    assert "zlib" in _columns(run, int(checkpoints[-1].split("-")[-1]))
    # A setting that would change the rows written is refused before anything is written.
    recipe = run.recipe.read_text()
    assert cli.main([*TRAIN, output_dir, "evaluate.n_bootstrap=50"]) == 2
    assert "--into NAME" in capsys.readouterr().err
    assert run.recipe.read_text() == recipe
    # A forced run name with other training: one line, exit 2 (was a RunMismatchError traceback).
    assert cli.main([*TRAIN, output_dir, f"run_name={run.root.name}", "train.learning_rate=0.01"]) == 2
    err = _leaklab_lines(capsys.readouterr().err)
    assert len(err) == 1 and "train.learning_rate: 0.003 -> 0.01" in err[0]


def test_a_cpt_run_recorded_under_heal_is_evaluated_under_auto_as_the_same_rows(run, capsys):
    """Runs written before `auto` became the default recorded prompt_boundary "heal"; on a cpt run auto
    resolves to heal at every step, so the rows mean the same and evaluating it is no conflict, while
    "none" is one."""
    settings = json.loads(run.evaluation_settings.read_text())
    assert settings["detection"]["evaluate.prompt_boundary"] == "auto"
    settings["detection"]["evaluate.prompt_boundary"] = "heal"
    run.evaluation_settings.write_text(json.dumps(settings))
    assert cli.main(["evaluate", str(run.root), "evaluate.detectors=[ppl,zlib]"]) == 0
    assert cli.main(["evaluate", str(run.root), "evaluate.prompt_boundary=none"]) == 2
    err = _leaklab_lines(capsys.readouterr().err)
    assert len(err) == 1 and "evaluate.prompt_boundary 'heal' -> 'none'" in err[0]
