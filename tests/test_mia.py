"""`leaklab mia`: membership inference on labelled text (leaklab/mia.py, leaklab/data/labelled.py).

The parsing tests load no model; the end-to-end test scores texts the builtin (smoke) tiny model was
pretrained on against code it never saw."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from leaklab.cli import main as cli_main
from leaklab.data.labelled import DataSpec, load_labelled
from leaklab.mia import parse_mia_args

ROWS = [
    {"text": "def a():\n    return 1\n", "label": 1},
    {"text": "def b():\n    return 2\n", "label": 0},
    {"text": "x = [i * i for i in range(9)]\n", "label": 1},
    {"text": "print('hello, world')\n", "label": 0},
    {"text": "class C:\n    pass\n", "label": 1},
]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _csv(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _json(path: Path, rows: list[dict]) -> Path:
    path.write_text(json.dumps(rows))
    return path


@pytest.mark.parametrize(
    "write,suffix", [(_jsonl, "jsonl"), (_csv, "csv"), (_parquet, "parquet"), (_json, "json")]
)
def test_every_file_format_reads_the_same_texts_and_labels(tmp_path, write, suffix):
    path = write(tmp_path / f"mine.{suffix}", ROWS)
    data = load_labelled(DataSpec(data=str(path)))
    assert data.texts == [r["text"] for r in ROWS]  # CSV keeps the newlines inside quoted cells
    assert data.labels.tolist() == [1, 0, 1, 0, 1]  # CSV's "1" / "0" cells read as numbers
    assert data.name == "mine" and data.ids == [f"mine/{i}" for i in range(5)]


def test_named_columns_and_word_labels(tmp_path):
    rows = [{"input": r["text"], "member": bool(r["label"])} for r in ROWS]
    path = _jsonl(tmp_path / "wiki.jsonl", rows)
    data = load_labelled(DataSpec(data=str(path), text_column="input", label_column="member"))
    assert data.labels.tolist() == [1, 0, 1, 0, 1]


def test_members_and_non_members_files(tmp_path):
    members = _jsonl(tmp_path / "seen.jsonl", [{"text": "a = 1\n"}, {"text": "b = 2\n"}])
    non_members = _csv(tmp_path / "unseen.csv", [{"text": "c = 3\n"}])
    data = load_labelled(DataSpec(members=str(members), non_members=str(non_members)))
    assert data.texts == ["a = 1\n", "b = 2\n", "c = 3\n"]
    assert data.labels.tolist() == [1, 1, 0]
    assert data.ids == ["members/0", "members/1", "non_members/0"]
    assert data.name == "seen-vs-unseen"


def test_limit_keeps_the_first_n_of_each_label(tmp_path):
    # Sorted by label, as MIMIR-style files often are: a plain head would hold one class only.
    rows = sorted(ROWS, key=lambda r: -r["label"])
    data = load_labelled(DataSpec(data=str(_jsonl(tmp_path / "d.jsonl", rows))), limit=1)
    assert data.labels.tolist() == [1, 0]
    assert data.texts == [rows[0]["text"], rows[3]["text"]]


def test_hub_dataset_with_named_columns(monkeypatch):
    import datasets

    calls = []

    def fake_load(name, split):
        calls.append((name, split))
        return [{"input": r["text"], "label": r["label"]} for r in ROWS]

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    data = load_labelled(DataSpec(data="hub:org/wiki", split="length32", text_column="input"))
    assert calls == [("org/wiki", "length32")]
    assert data.labels.tolist() == [1, 0, 1, 0, 1] and data.name == "org--wiki-length32"


def test_hub_dataset_offline_says_what_to_download(tmp_path, capsys):
    # HF_DATASETS_OFFLINE=1 (conftest) and no cached copy.
    rc = cli_main(["mia", "model=builtin:tiny", "data=hub:nobody/no-such-set", f"output_dir={tmp_path}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1, err
    assert "hf download nobody/no-such-set" in err[0] and "give data= that local path" in err[0]


def test_parse_mia_args():
    overrides, spec, limit = parse_mia_args(
        ["model=m", "data=f.jsonl", "text_column=input", "detectors=[ppl]", "--limit", "7", "seed=3"]
    )
    assert overrides == ["model.name_or_path=m", "evaluate.detectors=[ppl]", "seed=3"]
    assert spec == DataSpec(data="f.jsonl", text_column="input") and limit == 7
    assert parse_mia_args(["--limit=3"])[2] == 3


def test_default_detectors_skip_what_plain_text_cannot_feed_with_a_reason():
    from leaklab.mia import applicable_detectors
    from leaklab.recipe import load_recipe

    recipe = load_recipe("tiny_cpt")  # ppl ... dcpdd, ref, srdetection_gray, neighbourhood, recall
    said = []
    kept = applicable_detectors(recipe, named=False, log=said.append)
    assert kept == [
        s for s in recipe.evaluate.detectors if s not in ("ref", "srdetection_gray", "neighbourhood")
    ]
    assert len(said) == 3 and all(line.startswith("[leaklab] mia: skipping '") for line in said)
    assert "variants verified by a benchmark's tests" in said[1] and "evaluate.reference_model" in said[0]
    # With a reference model `ref` applies.
    with_reference = load_recipe("tiny_cpt", ["evaluate.reference_model=some/model"])
    assert "ref" in applicable_detectors(with_reference, named=False, log=said.append)


def _bad(tmp_path, rows=None, name="d.jsonl", extra=()):
    args = ["mia", "model=builtin:tiny", f"output_dir={tmp_path / 'out'}", *extra]
    if rows is not None:
        args.append(f"data={_jsonl(tmp_path / name, rows)}")
    return args


@pytest.mark.parametrize(
    "case,expected",
    [
        ("no label column", "d.jsonl:1: no 'label' column (columns found: 'text', 'y'); label_column="),
        ("no text column", "d.jsonl:1: no 'text' column (columns found: 'body', 'label'); text_column="),
        ("label 2", "d.jsonl:3: label is 2, expected 0 or 1"),
        ("one class", "every label is 1; membership inference needs members (1) and non-members (0)"),
        ("unknown extension", "data="),
        ("members missing", "members="),
        ("both labels", "labelled both member and non-member (first: d/0)"),
        ("null text", "d.jsonl:2: text is null, expected text"),
        ("no model", "mia: model= is required"),
        ("variants named", "'srdetection_gray' needs variants verified by a benchmark's tests"),
        ("ref without reference", "'ref' needs a reference model (evaluate.reference_model="),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, case, expected):
    ok = [{"text": "a", "label": 1}, {"text": "b", "label": 0}]
    if case == "no label column":
        args = _bad(tmp_path, [{"text": "a", "y": 1}])
    elif case == "no text column":
        args = _bad(tmp_path, [{"body": "a", "label": 1}])
    elif case == "label 2":
        args = _bad(tmp_path, [*ok, {"text": "c", "label": 2}])
    elif case == "one class":
        args = _bad(tmp_path, [{"text": "a", "label": 1}, {"text": "b", "label": "1"}])
    elif case == "unknown extension":
        (tmp_path / "d.xlsx").write_text("x")
        args = _bad(tmp_path, extra=[f"data={tmp_path / 'd.xlsx'}"])
        expected = f"data={tmp_path / 'd.xlsx'}: unknown file extension '.xlsx'; use one of .jsonl"
    elif case == "members missing":
        other = _jsonl(tmp_path / "n.jsonl", [{"text": "b"}])
        args = _bad(tmp_path, extra=[f"members={tmp_path / 'm.jsonl'}", f"non_members={other}"])
        expected = f"members={tmp_path / 'm.jsonl'}: no such file"
    elif case == "both labels":
        args = _bad(tmp_path, [*ok, {"text": "a", "label": 0}])
    elif case == "null text":
        args = _bad(tmp_path, [ok[0], {"text": None, "label": 0}])
    elif case == "no model":
        args = [a for a in _bad(tmp_path, ok) if not a.startswith("model=")]
    elif case == "variants named":
        args = _bad(tmp_path, ok, extra=["detectors=[ppl,srdetection_gray]"])
    else:
        args = _bad(tmp_path, ok, extra=["detectors=[ppl,ref]"])
    assert cli_main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert expected in err[0], err[0]
    assert not (tmp_path / "out").exists()  # refused before anything is loaded or written


# --------------------------------------------------------------------------- end to end

N_PER_SIDE = 24
CHARS = 800  # about the length of a HumanEval task


def _members_and_non_members(tmp_path: Path) -> tuple[Path, Path]:
    """Members: CHARS characters from the middle of stdlib files, the corpus the builtin tiny model is
    pretrained on (`corpora.stdlib_source_files`; the middle is code, the start mostly a licence and a
    docstring). Non-members: HumanEval tasks (prompt + canonical solution), code it never saw.

    The smoke model (20 pretraining steps) has not memorised any one text, so what separates the sets
    is its training distribution against text outside it (the blind baseline sees the sets differ too):
    enough to check that labels, the score sign and the rows come through, not a detector's power."""
    from leaklab.data.benchmarks import load_humaneval
    from leaklab.data.corpora import stdlib_source_files

    files = stdlib_source_files()
    seen = []
    for path in files[:: max(1, len(files) // (3 * N_PER_SIDE))]:
        text = path.read_text(encoding="utf-8", errors="replace")
        chunk = text[len(text) // 2 :][:CHARS]
        if len(chunk) == CHARS:
            seen.append({"text": chunk})
    unseen = [{"text": (t.prompt + t.solution)[:CHARS]} for t in load_humaneval()[:N_PER_SIDE]]
    return _jsonl(tmp_path / "stdlib.jsonl", seen[:N_PER_SIDE]), _jsonl(tmp_path / "humaneval.jsonl", unseen)


@pytest.mark.slow  # builds the smoke tiny model when the session has none (about a minute)
def test_mia_end_to_end_on_the_tiny_model(leaklab_cache, tmp_path, capsys, monkeypatch):
    import functools

    from conftest import SMALL_TINY
    from leaklab.detectors import blind
    from leaklab.evaluations import detection
    from leaklab.metrics import detection_metrics
    from leaklab.rundir import RunDir

    # These sets differ in their text, so the blind baseline's shift test would draw all its 50
    # permutations (a minute of refits here); 9 keep its row and the test fast.
    monkeypatch.setattr(detection, "shift_pvalue", functools.partial(blind.shift_pvalue, max_permutations=9))

    members, non_members = _members_and_non_members(tmp_path)
    args = ["mia", "model=builtin:tiny", f"members={members}", f"non_members={non_members}",
            "detectors=[ppl,zlib,mink]", f"output_dir={tmp_path / 'out'}", "evaluate.n_bootstrap=50",
            "tracking.wandb.enabled=false", *SMALL_TINY]  # fmt: skip
    assert cli_main(args) == 0
    (folder,) = (tmp_path / "out").iterdir()
    assert folder.name.startswith("mia-") and "-stdlib-vs-humaneval-" in folder.name
    run = RunDir(folder)
    rows = [r for r in run.results_rows() if r["evaluation"] == "detection"]
    value = {(r["column"], r["metric"]): r["value"] for r in rows}
    assert value[("ppl", "auroc")] > 0.5, value[("ppl", "auroc")]

    # The rows of a run's step: step 0, every metric `detection_metrics` gives for each score column,
    # the blind baseline, dataset inference and the done row with the class counts.
    assert {r["step"] for r in rows} == {0}
    expected = set(detection_metrics(np.r_[0.0, 1, 2, 3], np.r_[0, 1, 0, 1], cv_folds=2, n_bootstrap=5))
    for column in ("ppl", "zlib", "mink@0.2", "blind"):
        assert {m for c, m in value if c == column} >= expected, column
    assert ("dataset_inference", "p_value") in value
    (done,) = [r for r in rows if r["metric"] == "done"]
    assert (done["n_members"], done["n_non_members"]) == (N_PER_SIDE, N_PER_SIDE)
    scores = [json.loads(line) for line in run.scores(0, "detection").read_text().splitlines()]
    assert len(scores) == 2 * N_PER_SIDE and {"task_id", "label", "ppl", "blind"} <= set(scores[0])
    assert "no training: leaklab mia" in (run.report / "index.html").read_text()
    assert "mixture" not in (run.report / "report.md").read_text()  # nothing trained, nothing missing

    # The same command again computes nothing; `compare` reads the folder like a run.
    assert cli_main(args) == 0
    assert "already holds the results of ppl, zlib, mink" in capsys.readouterr().out
    assert len([r for r in run.results_rows() if r["evaluation"] == "detection"]) == len(rows)
    # More detectors: the same folder, their columns added, the rows already there kept.
    more = [a.replace("detectors=[ppl,zlib,mink]", "detectors=[ppl,zlib,mink,minkpp]") for a in args]
    assert cli_main(more) == 0
    assert [p.name for p in (tmp_path / "out").iterdir()] == [folder.name]
    after = [r for r in run.results_rows() if r["evaluation"] == "detection"]
    assert after[: len(rows)] == rows and ("minkpp@0.2", "auroc") in {
        (r["column"], r["metric"]) for r in after
    }
    assert cli_main(["compare", str(folder), "--out", str(tmp_path / "cmp")]) == 0
    table = (tmp_path / "cmp" / "compare.md").read_text()
    ppl_line = next(line for line in table.splitlines() if line.startswith("| PPL"))
    assert f"{value[('ppl', 'auroc')]:.3f}" in ppl_line, ppl_line
    assert "– (mia)" in (tmp_path / "cmp" / "index.html").read_text()
