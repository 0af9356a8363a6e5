"""Extraction audit: Type-1 clone index, ranking metrics, secrets, taxonomy, the evaluation plug-in."""

from __future__ import annotations

import random

import numpy as np
import pytest

from leaklab.memorization.clones import build_index, code_lines, find_clones, naive_clones, unique_snippets
from leaklab.metrics import pearson, precision_at_k, resample_weights, spearman

DOC_A = "\n".join(f"value_{i} = compute({i}, 'a')" for i in range(10))
DOC_B = "\n".join(f"other_{i} = compute({i}, 'b')" for i in range(10))


def _index(*docs: str, **kw):
    return build_index([(f"doc{i}", d) for i, d in enumerate(docs)], **kw)


# --------------------------------------------------------------------------- clone detection


def test_reindented_run_with_blank_lines_is_one_clone():
    lines = DOC_A.splitlines()[2:9]  # 7 lines
    output = (
        "print('hi')\n" + "\n\n".join("    " + line.replace(" = ", "  =   ") for line in lines) + "\nx = 1"
    )
    index = _index(DOC_A, DOC_B)
    [clones] = find_clones(index, [output])
    assert len(clones) == 1
    c = clones[0]
    assert (c.start, c.n_lines, c.doc, c.doc_line, c.corpus_frequency) == (1, 7, 0, 2, 1)
    assert c.text == "\n".join(code_lines("\n".join(lines)))


def test_five_lines_trivial_lines_and_document_boundaries_are_not_clones():
    index = _index(DOC_A, DOC_B, ")\n]\n}\npass\n)\n)\n)\nelse:\nvalue = 1")
    five = "\n".join(DOC_A.splitlines()[:5])
    across = "\n".join(DOC_A.splitlines()[-3:] + DOC_B.splitlines()[:3])  # 6 lines, two documents
    brackets = ")\n]\n}\npass\n)\n)\n)"  # 7 corpus lines, all trivial
    assert find_clones(index, [five, across, brackets, "", "\x00\x01 not code"]) == [[], [], [], [], []]


def test_corpus_frequency_counts_every_copy_and_snippets_count_outputs():
    index = _index(DOC_A, DOC_A + "\ntrailer = 1", DOC_B)
    run = "\n".join(DOC_A.splitlines()[:6])
    clones = find_clones(index, [run, run + "\n" + DOC_B, "nothing"])
    assert [len(c) for c in clones] == [1, 2, 0]
    assert clones[0][0].corpus_frequency == 2
    snippets = unique_snippets(index, clones)
    assert [(s.n_lines, s.output_frequency, s.corpus_frequency) for s in snippets] == [(6, 2, 2), (10, 1, 1)]


def test_index_agrees_with_the_naive_scan_on_random_splices():
    rng = random.Random(3)
    vocab = [f"x{i} = f({i % 7})" for i in range(40)] + ["pass", ")", "return x"]
    docs = ["\n".join(rng.choice(vocab) for _ in range(60)) for _ in range(8)]
    outputs = []
    for _ in range(40):
        parts = []
        for _ in range(3):
            d = rng.choice(docs).splitlines()
            s = rng.randrange(len(d))
            parts += d[s : s + rng.randrange(2, 12)]
        outputs.append("\n".join(parts))
    index = _index(*docs)
    found = find_clones(index, outputs)
    corpus = [code_lines(d) for d in docs]
    for output, clones in zip(outputs, found):
        assert [(c.start, c.n_lines) for c in clones] == naive_clones(corpus, output)
    assert sum(map(len, found)) > 5  # the check compared real matches, not only empty lists


# --------------------------------------------------------------------------- metrics


def test_precision_at_k_by_hand_and_its_bootstrap_against_a_plain_loop():
    scores, rel = [3.0, 2.0, float("nan"), 1.0, 0.0], [1, 0, 1, 1, 0]
    assert precision_at_k(scores, rel, k=2)["precision_at_k"] == 0.5
    assert precision_at_k(scores, rel, k=4)["precision_at_k"] == 0.5  # ranked 1,0,1,0: NaN ranks last
    assert precision_at_k(scores, rel, k=100)["k"] == 5.0
    got = precision_at_k(scores, rel, k=3, n_bootstrap=200, seed=4)
    # The same draws, one resample at a time: expand each into its items, rank, count the top 3.
    weights = resample_weights([np.arange(5)], 5, n=200, seed=4)
    s = np.array([3.0, 2.0, -np.inf, 1.0, 0.0])
    values = []
    for w in weights:
        items = [i for i in np.argsort(-s, kind="stable") for _ in range(int(w[i]))]
        values.append(np.mean([rel[i] for i in items[:3]]))
    low, high = np.percentile(values, [2.5, 97.5])
    assert got["precision_at_k_ci_low"] == pytest.approx(low)
    assert got["precision_at_k_ci_high"] == pytest.approx(high)


def test_correlations_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    x = rng.integers(1, 6, 30)  # many ties
    y = x + rng.integers(0, 4, 30)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic)
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y).statistic)
    assert np.isnan(pearson([1, 1, 1], [1, 2, 3]))
