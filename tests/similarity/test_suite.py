"""The batched similarity suite: bad input never crashes, structural metrics say why they are missing."""

import math

import pytest

from leaklab.similarity.suite import METRICS, STRUCTURE_METRICS, TEXT_METRICS, Pair, provenance, score_pairs

GOOD = "def add(a, b):\n    total = a + b\n    return total\n"
OTHER = "def add(a, b):\n    return b + a\n"


def test_identical_pair_scores_one_everywhere():
    (row,) = score_pairs([Pair(GOOD, GOOD)], workers=1)
    for metric in METRICS:
        assert row[metric] == pytest.approx(1.0), metric
    assert row["missing"] == {} and row["lossy"] is False


def test_unparseable_candidate_keeps_text_metrics_and_gives_the_reason():
    (row,) = score_pairs([Pair("def add(a, b:\n    return a +\n", GOOD)], workers=1)
    assert all(not math.isnan(row[m]) for m in TEXT_METRICS)
    for metric in STRUCTURE_METRICS:
        assert math.isnan(row[metric])
        assert row["missing"][metric].startswith("candidate: SyntaxError")


def test_empty_and_non_utf8_inputs():
    empty, bad_bytes, both_empty = score_pairs(
        [Pair("", GOOD), Pair(GOOD.encode() + b"\xff\xfe", GOOD), Pair("", "")], workers=1
    )
    assert empty["exact_match"] == 0.0 and empty["bleu"] == 0.0
    assert empty["missing"]["tsed"] == "candidate: empty"
    assert bad_bytes["lossy"] is True and bad_bytes["edit_similarity"] > 0.9
    assert "candidate" in bad_bytes["missing"]["tsed"]  # U+FFFD is not Python
    assert (
        math.isnan(both_empty["ngram_overlap_7"])
        and both_empty["missing"]["ngram_overlap_7"] == "empty reference"
    )


def test_prefix_lets_bodies_parse_for_structure_but_not_count_as_text():
    signature = "def add(a, b):\n"
    body_a, body_b = "    total = a + b\n    return total\n", "    return b + a\n"
    (row,) = score_pairs([Pair(body_b, body_a, prefix=signature)], workers=1)
    (whole,) = score_pairs([Pair(signature + body_b, signature + body_a)], workers=1)
    assert row["tsed"] == pytest.approx(whole["tsed"])
    assert row["edit_similarity"] < whole["edit_similarity"]  # the shared signature is not counted


def test_edit_similarity_is_normalised_by_the_ground_truth():
    truth = "    return " + "x" * 88 + "\n"  # 100 characters
    (row,) = score_pairs([Pair(truth + "    y = 1\n" * 10, truth)], workers=1)  # 100 characters appended
    assert row["edit_similarity"] == 0.0  # 1 - 100 / 100; the longer string would give 1 - 100 / 200
    assert "ground truth" in provenance()["edit_similarity"]


def test_process_pool_gives_the_same_rows():
    pairs = [Pair(OTHER, GOOD), Pair(GOOD, OTHER), Pair("x = (", GOOD), Pair(GOOD, GOOD)]
    serial = score_pairs(pairs, workers=1)
    pooled = score_pairs(pairs, workers=2)
    for a, b in zip(serial, pooled):
        assert a["missing"] == b["missing"]
        for metric in METRICS:
            assert a[metric] == pytest.approx(b[metric], nan_ok=True)


def test_provenance_names_the_grammar():
    assert "tree-sitter-python" in provenance()["grammar"]


def test_pathological_code_costs_its_structural_scores_only():
    deep = "x = " + "+".join(["a"] * 3000) + "\n"  # deeper than Python's parser goes
    nested = "x = " + "(" * 200 + "1" + ")" * 200 + "\n"
    too_deep, fine, null = score_pairs(
        [Pair(deep, "x = a + a\n"), Pair(nested, "x = 1\n"), Pair("\x00def f(): pass", "x = 1\n")], workers=1
    )
    assert "RecursionError" in too_deep["missing"]["tsed"] and not math.isnan(too_deep["bleu"])
    assert fine["missing"] == {} and 0 < fine["tsed"] < 1
    assert null["missing"]["tsed"] == "candidate: SyntaxError: source code string cannot contain null bytes"
