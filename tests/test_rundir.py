import json

import pytest

from leaklab.rundir import append_rows, read_rows, write_atomic


def row(step, metric="auroc", value=0.5):
    return {"step": step, "evaluation": "detection", "detector": "ppl", "metric": metric, "value": value}


def test_append_skips_rows_already_present(tmp_path):
    path = tmp_path / "results.jsonl"
    assert append_rows(path, [row(0), row(1)]) == 2
    assert append_rows(path, [row(1), row(2)]) == 1
    assert [r["step"] for r in read_rows(path)] == [0, 1, 2]


def test_torn_tail_is_ignored_and_cut_before_the_next_append(tmp_path):
    path = tmp_path / "results.jsonl"
    append_rows(path, [row(0)])
    with path.open("ab") as f:
        f.write(b'{"step": 1, "evaluation": "detec')  # a crash in the middle of a write
    assert [r["step"] for r in read_rows(path)] == [0]
    append_rows(path, [row(1)])
    lines = path.read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1]


def test_write_atomic_leaves_no_temporary_files(tmp_path):
    write_atomic(tmp_path / "a" / "f.txt", "hello")
    assert (tmp_path / "a" / "f.txt").read_text() == "hello"
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["f.txt"]


def test_an_existing_run_with_other_training_is_refused_in_one_line_and_other_evaluation_is_not(tmp_path):
    """The run directory check compares the training (not evaluate.*), and a mismatch is bad
    input (exit 2, one line naming what differs), not a traceback."""
    from leaklab.errors import InputError
    from leaklab.recipe import identity_changes, load_recipe, run_hash, to_yaml
    from leaklab.rundir import RunDir, check_or_write_run_files

    run = RunDir(tmp_path / "run")
    manifest = {"member_ids": ["a"], "non_member_ids": ["b"]}

    def write(recipe):
        check_or_write_run_files(
            run,
            to_yaml(recipe),
            run_hash(recipe),
            manifest,
            lambda old: identity_changes(load_recipe(str(old)), recipe),
        )

    write(load_recipe("tiny_cpt"))
    write(load_recipe("tiny_cpt", ["evaluate.detectors=[ppl,zlib]", "evaluate.batch_tokens=512"]))
    assert load_recipe(str(run.recipe)).evaluate.detectors == ["ppl", "zlib"]
    try:
        write(load_recipe("tiny_cpt", ["train.epochs=7"]))
    except InputError as err:
        assert len(err.lines()) == 1
        assert "train.epochs: 8 -> 7" in str(err)
    else:
        raise AssertionError("a run trained differently was accepted")


def test_done_markers_of_a_step_are_told_apart_by_their_specs(tmp_path):
    """Detectors added to an evaluated step close it with a second "done" row (it was dropped as a
    duplicate, so the step stayed pending for ever)."""
    path = tmp_path / "results.jsonl"
    done = {"step": 0, "evaluation": "detection", "column": None, "metric": "done", "value": 4.0}
    assert append_rows(path, [{**done, "specs": ["ppl"]}]) == 1
    assert append_rows(path, [{**done, "specs": ["zlib"]}]) == 1
    assert append_rows(path, [{**done, "specs": ["zlib"]}]) == 0


def test_the_manifest_records_threads_and_versions_and_a_resume_may_differ_there(tmp_path):
    """The manifest's provenance (thread count, library versions) is outside the run's identity: a run
    resumed with another thread count is the same run, and its manifest lists both processes."""
    import torch

    from leaklab.errors import InputError
    from leaklab.recipe import load_recipe, run_hash, to_yaml
    from leaklab.rundir import RunDir, check_or_write_run_files, read_json

    run = RunDir(tmp_path / "run")
    recipe = load_recipe("tiny_cpt")
    manifest = {"member_ids": ["a"], "non_member_ids": ["b"]}
    threads = torch.get_num_threads()
    try:
        for count in (1, 1, 2):
            torch.set_num_threads(count)
            check_or_write_run_files(run, to_yaml(recipe), run_hash(recipe), dict(manifest))
    finally:
        torch.set_num_threads(threads)
    written = read_json(run.manifest)
    assert {k: v for k, v in written.items() if k != "provenance"} == manifest
    assert [p["cpu_threads"] for p in written["provenance"]] == [1, 2]
    versions = written["provenance"][0]["versions"]
    assert set(versions) == {"torch", "transformers", "trl", "peft", "accelerate", "numpy"}
    assert versions["torch"] == torch.__version__.split("+")[0] or versions["torch"] == torch.__version__
    assert written["provenance"][0]["python"].count(".") == 2
    with pytest.raises(InputError):  # the split is still the run's
        check_or_write_run_files(run, to_yaml(recipe), run_hash(recipe), {**manifest, "member_ids": ["c"]})
