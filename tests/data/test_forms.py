"""`inject.form`: the benchmark file in its order (file), half of each dose group as a verified variant
(rephrased), and the default (document) that keeps every run as it was."""

from __future__ import annotations

import json

import numpy as np
import pytest

from leaklab.cli import main as cli_main
from leaklab.data import forms
from leaklab.data.doses import count_in_stream
from leaklab.data.splits import Split
from leaklab.data.tasks import Task
from leaklab.evaluations.base import build_eval_set
from leaklab.recipe import RecipeError, load_recipe, run_hash
from leaklab.rundir import make_manifest
from leaklab.training.stages import get_stage


class CharTokenizer:
    """One token per character (ids 1..200, EOS 0)."""

    eos_token_id = 0

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [1 + (ord(c) % 200) for c in text]}


def ids_of(text: str) -> list[int]:
    return [*CharTokenizer()(text)["input_ids"], 0]


# The benchmark's own order is not the sorted order of its ids: the file must follow the loader.
LOADER_ORDER = [3, 0, 5, 1, 7, 2, 6, 4]


def _tasks():
    return [
        Task(
            task_id=f"t/{i}",
            benchmark="toy",
            prompt=f'def f{i}(x):\n    """Add {i}."""\n',
            solution=f"    return x + {i}\n",
            entry_point=f"f{i}",
            tests=f"def check(c):\n    assert c(1) == {1 + i}\n",
        )
        for i in LOADER_ORDER
    ]


SPLIT = Split(member_ids=[f"t/{i}" for i in range(4)], non_member_ids=[f"t/{i}" for i in range(4, 8)])


def _silent(*_):
    return None


# --------------------------------------------------------------------------- the default keeps every run


def test_the_default_form_keeps_every_run_hash_and_manifest():
    # Hashes computed on main before inject.form existed.
    assert run_hash(load_recipe("tiny_dose")) == "32853fc5"
    assert run_hash(load_recipe("tiny_dose", ["inject.withhold=true"])) == "c29e109a"
    assert run_hash(load_recipe("tiny_cpt")) == "a53aef49"
    assert run_hash(load_recipe("tiny_dose", ["inject.form=document"])) == "32853fc5"
    assert run_hash(load_recipe("tiny_dose", ["inject.form=rephrased"])) != "32853fc5"
    file_form = load_recipe("tiny_cpt", ["inject.form=file", "inject.doses=[4]"])
    assert run_hash(file_form) != run_hash(load_recipe("tiny_cpt", ["inject.doses=[4]"]))
    manifest = make_manifest(load_recipe("tiny_cpt", ["inject.doses=[1,2]"]), _tasks(), SPLIT)
    assert "form" not in manifest["inject"] and "forms" not in manifest and "file_order" not in manifest
    # A form alone sets `inject` going (a planned order), as doses do.
    assert load_recipe("tiny_cpt", ["inject.form=file"]).inject.active


@pytest.mark.parametrize(
    "overrides, says",
    [
        (
            ["inject.form=rephrase"],
            "inject.form: 'rephrase' is not one of document, file, rephrased; did you mean 'rephrased'?",
        ),
        (
            ["inject.form=files"],
            "inject.form: 'files' is not one of document, file, rephrased; did you mean 'file'?",
        ),
        (
            ["inject.form=file", "inject.doses=[2,8]"],
            "inject.doses: form file trains the members as one file",
        ),
        (["inject.form=file", "inject.canaries=4"], "inject.canaries: form file writes the benchmark's own"),
        (
            ["inject.form=rephrased", "train.stage=sft"],
            "inject.form: rephrased is a form of continued pretraining",
        ),
    ],
)
def test_a_bad_form_exits_2_with_one_line_and_the_closest_value(overrides, says, capsys):
    with pytest.raises(RecipeError) as err:
        load_recipe("tiny_cpt", overrides)
    assert says in str(err.value)
    assert cli_main(["train", "recipe=tiny_cpt", *overrides]) == 2
    assert says in capsys.readouterr().err


# --------------------------------------------------------------------------- file


def test_the_file_form_trains_one_copy_of_the_benchmark_file_in_its_order_per_exposure():
    recipe = load_recipe(
        "tiny_cpt", ["inject.form=file", "inject.doses=[3]", "mix.ratio=1:1", "mix.max_seq_len=64"]
    )
    tasks = _tasks()
    manifest = make_manifest(recipe, tasks, SPLIT)
    assert manifest["inject"]["form"] == "file"
    assert manifest["file_order"] == ["t/3", "t/0", "t/1", "t/2"]  # the members in the loader's order
    data = get_stage("cpt").build_dataset(recipe, CharTokenizer(), tasks, manifest, None, _silent)
    blocks = data.dataset.blocks.numpy()
    text = forms.file_text([t for t in tasks if t.task_id in manifest["file_order"]])
    lines = [json.loads(line) for line in text.splitlines()]
    assert [r["task_id"] for r in lines] == manifest["file_order"]
    assert lines[0] == {
        "task_id": "t/3",
        "prompt": tasks[0].prompt,
        "canonical_solution": tasks[0].solution,
        "test": tasks[0].tests,
        "entry_point": "f3",
    }
    # Three copies of the whole file, each one run of tokens across consecutive blocks.
    assert len(count_in_stream(blocks, {"file": ids_of(text)})["file"]) == 3
    assert data.info["exposures"] == {"t/0": 3, "t/1": 3, "t/2": 3, "t/3": 3, forms.FILE_ID: 3}
    assert data.info["member_docs"] == 1 and data.info["members_split_across_blocks"] == 1
    # No member is there as a document of its own (in the file its newlines are JSON escapes).
    own = count_in_stream(blocks, {t.task_id: ids_of(t.text())[:-1] for t in tasks})
    assert all(not at for at in own.values())


def test_the_sharded_test_reads_the_file_lines_in_the_file_order(monkeypatch):
    from leaklab.dataset_tests import rows
    from leaklab.evaluations import detection
    from leaklab.evaluations.base import EvalContext

    recipe = load_recipe("tiny_cpt", ["inject.form=file", "inject.doses=[2]"])
    tasks = _tasks()
    manifest = make_manifest(recipe, tasks, SPLIT)
    seen = {}

    def fake_rows(model, tokenizer, texts, labels, **kwargs):
        seen.update(texts=list(texts), labels=list(labels), **kwargs)
        return []

    monkeypatch.setattr(rows, "sharded_likelihood_rows", fake_rows)
    ctx = EvalContext(recipe=recipe, run=None, eval_set=build_eval_set(tasks, manifest, "prompt+solution"))
    detection.file_order_rows(ctx, None, None)
    members = [line for line, y in zip(seen["texts"], seen["labels"]) if y]
    by_id = {t.task_id: t for t in tasks}
    assert seen["separator"].join(members) + "\n" == forms.file_text(
        [by_id[i] for i in manifest["file_order"]]
    )
    non_members = [json.loads(line)["task_id"] for line, y in zip(seen["texts"], seen["labels"]) if not y]
    assert non_members == ["t/5", "t/7", "t/6", "t/4"]  # their own benchmark order too
    assert seen["shards"] == 2  # 4 examples a side: two shards of two


# --------------------------------------------------------------------------- rephrased


def test_each_dose_group_is_split_in_seeded_halves():
    doses = {f"t/{i}": (1 if i < 5 else 4) for i in range(10)}
    got = forms.assign_forms(doses, seed=0)
    assert list(got) == list(doses)
    for dose in (1, 4):
        group = [got[t] for t, d in doses.items() if d == dose]
        assert sorted(group) == ["rephrased", "rephrased", "verbatim", "verbatim", "verbatim"]
    assert forms.assign_forms(doses, seed=0) == got
    assert any(forms.assign_forms(doses, seed=s) != got for s in range(1, 5))


def _renamed(task: Task) -> Task:
    return Task(
        task_id=task.task_id,
        benchmark=task.benchmark,
        prompt=task.prompt.replace(f"f{task.task_id[-1]}", "renamed_fn"),
        solution=task.solution.replace("x", "value"),
    )


def test_rephrased_members_train_as_their_variant_or_fall_back_and_the_originals_are_scored(monkeypatch):
    recipe = load_recipe("tiny_cpt", ["inject.form=rephrased", "inject.doses=[2]", "mix.max_seq_len=64"])
    tasks = _tasks()
    manifest = make_manifest(recipe, tasks, SPLIT)
    planned = [t for t, f in manifest["forms"].items() if f == "rephrased"]
    assert len(planned) == 2 and set(manifest["forms"]) == set(SPLIT.member_ids)
    no_variant = planned[0]

    def fake_variants(chosen, log=print, cache_dir=None):
        return {t.task_id: _renamed(t) for t in chosen if t.task_id != no_variant}

    monkeypatch.setattr("leaklab.training.cpt.trained_variants", fake_variants)
    from leaklab.train import settle_rephrased

    settle_rephrased(manifest, tasks, _silent)
    assert manifest["inject"]["rephrased_fallback"] == [no_variant]
    assert manifest["forms"][no_variant] == "verbatim" and manifest["forms"][planned[1]] == "rephrased"

    data = get_stage("cpt").build_dataset(recipe, CharTokenizer(), tasks, manifest, None, _silent)
    blocks = data.dataset.blocks.numpy()
    by_id = {t.task_id: t for t in tasks}
    original = count_in_stream(blocks, {i: ids_of(by_id[i].text()) for i in SPLIT.member_ids})
    variant = count_in_stream(blocks, {planned[1]: ids_of(_renamed(by_id[planned[1]]).text())})
    assert len(variant[planned[1]]) == 2 and original[planned[1]] == []
    assert all(len(original[i]) == 2 for i in SPLIT.member_ids if i != planned[1])
    assert data.info["exposures"] == {i: 2 for i in SPLIT.member_ids}

    eval_set = build_eval_set(tasks, manifest, "prompt+solution")
    assert eval_set.texts[: len(SPLIT.member_ids)] == [by_id[i].text() for i in SPLIT.member_ids]
    assert eval_set.forms == [manifest["forms"][i] for i in SPLIT.member_ids] + [""] * 4


def test_settle_forms_counts_the_fallback():
    planned = {"a": "rephrased", "b": "verbatim", "c": "rephrased"}
    assert forms.settle_forms(planned, {"a"}) == ({"a": "rephrased", "b": "verbatim", "c": "verbatim"}, ["c"])


def test_form_rows_score_each_group_against_every_non_member():
    from leaklab.results import rows_per_form, without_dose
    from leaklab.rundir import row_key

    labels = np.array([1, 1, 1, 0, 0])
    got = rows_per_form(labels, ["verbatim", "rephrased", "verbatim", "", ""], lambda index: [{"n": index}])
    assert got == [{"n": [1, 3, 4], "form": "rephrased"}, {"n": [0, 2, 3, 4], "form": "verbatim"}]
    row = {"step": 1, "evaluation": "detection", "column": "ppl", "metric": "auroc"}
    assert (
        len({row_key(row), row_key({**row, "form": "verbatim"}), row_key({**row, "form": "rephrased"})}) == 3
    )
    assert without_dose([row, {**row, "form": "verbatim"}]) == [row]


def test_the_sharded_rows_of_both_sets_are_kept_in_a_run(tmp_path, monkeypatch):
    from leaklab.dataset_tests import sharded_likelihood
    from leaklab.dataset_tests.rows import sharded_likelihood_rows
    from leaklab.rundir import append_rows, read_rows

    def fake_test(model, tokenizer, examples, **_):
        return {"p_value": 0.01 if examples[0].startswith("m") else 0.7}

    monkeypatch.setattr(sharded_likelihood, "run_sharded_test", fake_test)
    texts = [f"m{i}" for i in range(4)] + [f"n{i}" for i in range(4)]
    rows = sharded_likelihood_rows(None, None, texts, [1] * 4 + [0] * 4)
    rows = [{**r, "step": 1, "evaluation": "detection"} for r in rows]
    assert append_rows(tmp_path / "results.jsonl", rows) == 2
    got = {r["params"]["set"]: r["value"] for r in read_rows(tmp_path / "results.jsonl")}
    assert got == {"members": 0.01, "non_members": 0.7}
