"""`leaklab counterfactual`: corpus reading, bad input, and one run with the small tiny model."""

import json

import pytest

from leaklab.cli import main
from leaklab.errors import InputError
from leaklab.memorization.standalone import corpus_sources, format_tables

FUNCTIONS = "import math\n\n" + "".join(
    f"def f{i}(xs, k={i}):\n"
    + "".join(f"    y{j} = xs[{j}] * k + math.sqrt({j})\n" for j in range(6))
    + "    return y5\n\n"
    for i in range(3)
)


def test_corpus_sources_read_files_directories_and_jsonl(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(FUNCTIONS)
    assert corpus_sources(tmp_path / "pkg") == [("a.py", FUNCTIONS)]
    rows = tmp_path / "c.jsonl"
    rows.write_text(json.dumps({"id": "x", "content": FUNCTIONS}) + "\n\n")
    assert corpus_sources(rows) == [("x", FUNCTIONS)]
    rows.write_text('{"id": 1, "nothing": 2}\n')
    with pytest.raises(InputError, match="line 1 has no 'code'"):
        corpus_sources(rows)
    with pytest.raises(InputError, match="no such file"):
        corpus_sources(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no Python sources"):
        corpus_sources(tmp_path / "empty")


def test_format_tables_shows_mean_std_delta_and_counts():
    t1 = [{"metric": "tsed", "n": 2, "target_mean": 0.5, "target_std": 0.1, "reference_mean": 0.25,
           "reference_std": 0.05, "delta": 0.25}, {"metric": "bleu", "n": 0}]  # fmt: skip
    text = format_tables(
        t1, {"n": 4, "counts": {"tsed": 1}, "unique_over_metrics": 1, "near_verbatim_bleu": 0}
    )
    assert "0.500 ± 0.100" in text and "+0.250" in text and "25.0%" in text


@pytest.mark.slow
def test_counterfactual_command_with_one_model_on_both_sides_flags_nothing(tmp_path, leaklab_cache, capsys):
    from conftest import SMALL_TINY
    from leaklab.models.tiny import build_tiny_model
    from leaklab.recipe import load_recipe

    model = str(build_tiny_model(load_recipe("tiny_cpt", SMALL_TINY).model.tiny))
    corpus = tmp_path / "corpus.py"
    corpus.write_text(FUNCTIONS)
    out = tmp_path / "out"
    args = ["counterfactual", "--target", model, "--reference", model, "--corpus", str(corpus), "--out", str(out),
            "--min-body-lines", "2", "--min-chars", "0", "--max-new-tokens", "24", "--workers", "1"]  # fmt: skip
    assert main(args) == 0
    tables = json.loads((out / "tables.json").read_text())
    assert tables["n_functions"] == 3 and tables["similarity"]["grammar"]["tree-sitter-python"]
    # The same model on both sides: every delta is 0 and the criterion cannot hold.
    assert all(row.get("delta", 0.0) == pytest.approx(0.0) for row in tables["table1"])
    assert tables["table2"]["unique_over_metrics"] == 0
    pairs = [json.loads(line) for line in (out / "pairs.jsonl").read_text().splitlines()]
    assert len(pairs) == 3 and all(p["target"] == p["reference"] for p in pairs)
    # Each prompt (signature, ending in "\n") was cut at a token boundary of signature + true body.
    assert [p["prompt_boundary"] for p in pairs] == ["cut"] * 3
    assert "counterfactually memorized" in capsys.readouterr().out
    assert main([*args[:-6], "--min-body-lines", "40"]) == 2  # nothing passes the filter: one-line error
