"""Extraction audit: Type-1 clone index, ranking metrics, secrets, taxonomy, the evaluation plug-in."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from leaklab.memorization.clones import build_index, code_lines, find_clones, naive_clones, unique_snippets
from leaklab.memorization.extraction import RANKINGS
from leaklab.metrics import pearson, precision_at_k, resample_weights, spearman

REPO = Path(__file__).resolve().parents[2]
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


# --------------------------------------------------------------------------- sampling


@pytest.fixture(scope="module")
def small_lm():
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    texts = [DOC_A, DOC_B, "def f(x):\n    return x + 1\n", "import os\nimport sys\n"] * 4
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<bos>", "<eos>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 0)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>"
    )
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
    )
    return LlamaForCausalLM(config).eval(), tokenizer


def test_top_k_samples_only_among_the_k_most_likely_tokens(small_lm):
    import torch

    from leaklab.signals.generation import HFGenerator

    model, tokenizer = small_lm
    prompts = ["def f(x):", "import os"]
    # The prompts as they are (no token healing), so that the ids below continue tokenizer(prompt).
    greedy = HFGenerator(model, tokenizer, prompt_boundary="none").generate(prompts, max_new_tokens=10)
    top1 = HFGenerator(model, tokenizer, top_k=1, prompt_boundary="none").generate(
        prompts, max_new_tokens=10, temperature=1.0, n=2
    )
    assert [[c.token_ids for c in g] * 2 for g in greedy] == [[c.token_ids for c in t] for t in top1]
    sampled = HFGenerator(model, tokenizer, top_k=3, prompt_boundary="none").generate(
        prompts, 12, temperature=1.0, n=4, seed=1
    )
    for prompt, completions in zip(prompts, sampled):
        start = tokenizer(prompt)["input_ids"]
        for c in completions:
            ids = torch.tensor([start + list(c.token_ids)])
            logits = model(input_ids=ids).logits[0, len(start) - 1 : -1]
            top3 = logits.topk(3, dim=-1).indices
            assert all(t in row for t, row in zip(c.token_ids, top3.tolist()))
    assert len({c.token_ids for c in sampled[0]}) > 1  # top-3 still samples


def test_temperature_decay_schedule_and_processor_steps(small_lm):
    import torch

    from leaklab.memorization.extraction import temperature_decay
    from leaklab.signals.generation import HFGenerator

    # Unveiling §4.3: start at 20 and lower by 1.0 per generated token until 1.0, i.e. max(1, 20 - t).
    scaled = [temperature_decay(t, torch.tensor([380.0])).item() for t in (0, 1, 10, 18, 19, 20, 25)]
    assert scaled == [380 / 20, 380 / 19, 380 / 10, 380 / 2, 380, 380, 380]
    assert torch.equal(temperature_decay(0, torch.tensor([[20.0, 40.0]])), torch.tensor([[1.0, 2.0]]))
    seen = []
    model, tokenizer = small_lm

    def record(step, logits):
        seen.append(step)
        return logits

    HFGenerator(model, tokenizer, logits_processor=record).generate(["x"], max_new_tokens=5, temperature=1.0)
    assert seen[:5] == [0, 1, 2, 3, 4]


def test_every_strategy_samples_n_outputs(small_lm):
    from leaklab.memorization.extraction import function_definitions, sample, start_prompt
    from leaklab.signals.continuations import Decoding

    model, tokenizer = small_lm
    decoding = Decoding(model, tokenizer, batch_size=32)
    assert start_prompt(tokenizer) == ""  # the tokenizer adds <bos> itself
    source = "@wrap\ndef f(x,\n      y):\n    return 1\nclass C:\n    def g(self):\n        pass\n    def h(self): pass\n"
    defs = function_definitions([("a.py", source), ("bad.py", "def (")], 10)
    assert defs == ["@wrap\ndef f(x,\n      y):\n", "    def g(self):\n"]  # a one-line def has no header
    for strategy, prompts in (
        ("non_prompt", []),
        ("temperature_decay", []),
        ("prompt_conditioned", defs),
        ("two_step", ["x = 1\n"]),
    ):
        out = sample(decoding, strategy, 5, 3, 6, prompts=prompts)
        assert len(out) == 3 and all(s.strategy == strategy and s.top_k == 5 for s in out)
    assert sample(decoding, "two_step", 5, 3, 6, prompts=[]) == []
    # Discoverable: one sample from each task's own first lines, whatever n.
    out = sample(decoding, "discoverable", 5, 3, 6, prompts=["a = 1\n", "b = 2\n"])
    assert [s.prompt for s in out] == ["a = 1\n", "b = 2\n"]


def test_first_lines_counts_non_blank_lines_and_keeps_the_text_as_written():
    from leaklab.memorization.extraction import first_lines

    text = "from x import y\n\n\ndef f(a):\n    # doc\n    return a\n"
    assert first_lines(text, 2) == "from x import y\n\n\ndef f(a):\n"
    assert first_lines(text, 9) == text


# --------------------------------------------------------------------------- ranking, secrets, taxonomy, corpora


def test_window_ppl_by_hand():
    from leaklab.memorization.extraction import window_ppl

    newlines = np.array([0, 1, 0])  # token 1 is a newline
    ids, lp = np.array([2, 1, 2, 1, 2]), np.array([-1.0, -2.0, -3.0, -4.0, -5.0])
    # lines: {-1, -2}, {-3, -4}, {-5}; windows of 2 lines: mean NLL 2.5 and 4
    assert window_ppl(lp, ids, newlines, lines=2) == pytest.approx((np.exp(2.5) + np.exp(4.0)) / 2)
    assert window_ppl(lp, ids, newlines, lines=6) == pytest.approx(np.exp(3.0))  # fewer lines: one window
    assert np.isnan(window_ppl(np.zeros(0), np.zeros(0, int), newlines))


def test_ranking_scores_orientation():
    from leaklab.memorization.extraction import ranking_scores
    from leaklab.signals.logprobs import TokenStats

    def stats(lp):
        return TokenStats(
            token_ids=np.zeros(len(lp), dtype=np.int64), logprob=np.asarray(lp, dtype=np.float32)
        )

    texts = ["a = 1\n" * 5, "zq9 = 7\n", ""]
    target, ref = [stats([-0.1, -0.1]), stats([-3.0]), stats([])], [stats([-1.0]), stats([-3.0]), stats([])]
    s = ranking_scores(target, texts, np.zeros(1, dtype=np.int64), ref)
    assert s["ppl"][0] > s["ppl"][1] and s["ppl_zlib"][0] > s["ppl_zlib"][1]
    # the reference model (never trained on the data) divides ppl_reference_ratio, not the paper's ratio
    assert s["ppl_reference_ratio"][0] == pytest.approx(-0.1) and s["ppl_reference_ratio"][
        1
    ] == pytest.approx(-1.0)
    assert np.isnan(s["ppl_ratio"]).all()
    assert all(np.isnan(s[m][2]) for m in s)  # an empty output is NaN, ranked last
    assert np.isnan(ranking_scores(target, texts, np.zeros(1, dtype=np.int64))["ppl_reference_ratio"]).all()


def test_the_papers_ppl_ratio_divides_by_a_smaller_model_trained_on_the_same_data():
    from leaklab.memorization.extraction import ranking_scores
    from leaklab.signals.logprobs import TokenStats

    def stats(lp):
        return TokenStats(
            token_ids=np.zeros(len(lp), dtype=np.int64), logprob=np.asarray(lp, dtype=np.float32)
        )

    # Unveiling §3.3: log PPL(large) / log PPL(small). A licence both models know (0.2 / 0.25 = 0.8) vs
    # code logic only the larger one learnt (0.2 / 2.0 = 0.1): the smaller ratio ranks higher.
    texts = ["# licence\n", "def f(x):\n    return x * 7\n"]
    large, small = [stats([-0.2, -0.2]), stats([-0.2])], [stats([-0.25]), stats([-2.0, -2.0])]
    s = ranking_scores(large, texts, np.zeros(1, dtype=np.int64), small_stats=small)
    assert s["ppl_ratio"] == pytest.approx([-0.8, -0.1]) and s["ppl_ratio"][1] > s["ppl_ratio"][0]
    assert np.isnan(s["ppl_reference_ratio"]).all()  # no reference model given


def test_small_model_is_loaded_once_and_divides_ppl_ratio(tmp_path, monkeypatch):
    """evaluate.extraction.small_model names the paper's second model (trained on the same data): it is
    loaded once, scores the same outputs, and only ppl_ratio divides by it."""
    import leaklab.evaluations.extraction as extraction_module
    import leaklab.signals.logprobs as logprobs
    from leaklab.evaluations.extraction import Extraction
    from leaklab.signals.logprobs import TokenStats

    nll = {"target": 0.2, "small": 0.5, "reference": 2.0}

    def fake_stats(model, tok, texts, **kwargs):
        return [
            TokenStats(token_ids=np.zeros(2, dtype=np.int64), logprob=np.full(2, -nll[model], np.float32))
            for _ in texts
        ]

    loads = []
    monkeypatch.setattr(logprobs, "compute_token_stats", fake_stats)
    monkeypatch.setattr(extraction_module, "_load_small", lambda recipe: loads.append(1) or ("small", None))
    monkeypatch.setattr(extraction_module, "newline_counts", lambda tok: np.zeros(1, dtype=np.int64))
    ctx = _context(tmp_path, "evaluate.extraction.small_model=/models/small")
    ctx.reference = lambda: ("reference", None)
    ext = Extraction()
    for step in (1, 2):
        s = ext._scores(ctx, "target", None, ["a = 1\n"], step)
        assert s["ppl_ratio"][0] == pytest.approx(-0.2 / 0.5)
        assert s["ppl_reference_ratio"][0] == pytest.approx(-0.2 / 2.0)
    assert loads == [1]
    assert "small_model=/models/small" in ext.specs(ctx.recipe)


def test_secrets_are_found_and_masked():
    from leaklab.memorization.extraction import find_secrets, mask, mask_text

    text = (
        "AUTHOR = 'guido@python.org'\nHOST = '192.168.0.1'  # not 999.1.1.1 nor 1.2.3.4.5\n"
        "api_key = 'abcd1234efgh5678'\nkey = 'AKIAABCDEFGHIJKLMNOP'\n"
    )
    found = sorted(find_secrets(text))
    assert found == [
        ("assigned_secret", "abcd1234efgh5678"),
        ("aws_key", "AKIAABCDEFGHIJKLMNOP"),
        ("email", "guido@python.org"),
        ("ipv4", "192.168.0.1"),
    ]
    masked = mask_text(text)
    assert all(value not in masked for _, value in found)
    assert mask("email", "guido@python.org") in masked and mask("email", "x@y.org") != mask(
        "email", "z@y.org"
    )


def test_taxonomy_rules():
    from leaklab.memorization.extraction import taxonomy

    assert taxonomy("# Copyright 2001 Python Software Foundation\n# Licensed under the PSF licence") == [
        "licence"
    ]
    assert taxonomy("import os\nimport sys\nfrom a import b\nx = 1") == ["import"]
    assert taxonomy('def f(x):\n"""Doc."""\nreturn x') == ["definition", "docstring"]
    assert taxonomy("A = 1\nB = 'two'\n'key': 3,\nfoo(x)") == ["configuration"]
    assert taxonomy("foo(x)\nbar(y)") == ["other"]


def test_corpus_errors_and_skipped_files(tmp_path):
    from leaklab.errors import InputError
    from leaklab.memorization.extraction import load_corpus

    with pytest.raises(InputError, match="does not exist"):
        load_corpus(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "x.bin").write_bytes(b"\x00")
    with pytest.raises(InputError, match="holds no text"):
        load_corpus(str(tmp_path / "empty"))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.py").write_text(DOC_A)
    (tmp_path / "c" / "latin.py").write_bytes("caf\xe9 = 1\n".encode("latin-1"))
    (tmp_path / "c" / "d.jsonl").write_text('{"text": "x = 1"}\nnot json\n{"id": 3}\n')
    corpus = load_corpus(str(tmp_path / "c"))
    assert [n for n, _ in corpus.documents] == ["a.py", "d.jsonl:1"]
    assert corpus.skipped == {"not utf-8": 1, "jsonl line without text": 2}


# --------------------------------------------------------------------------- the evaluation plug-in


def _context(tmp_path, *overrides):
    from leaklab.evaluations.base import EvalContext, EvalSet
    from leaklab.recipe import load_recipe

    corpus = tmp_path / "corpus"
    corpus.mkdir(exist_ok=True)
    (corpus / "a.py").write_text("AUTHOR = 'alice@example.org'\n" + DOC_A)
    held = tmp_path / "held"
    held.mkdir(exist_ok=True)
    (held / "h.py").write_text("def held_out(x):\n    return x\n")
    recipe = load_recipe(
        "tiny_extraction",
        [
            f"evaluate.extraction.corpus={corpus}",
            f"evaluate.extraction.held_out={held}",
            "evaluate.extraction.n_outputs=3",
            "evaluate.extraction.top_k=[5,40]",
            "evaluate.extraction.max_new_tokens=8",
            "evaluate.extraction.precision_k=4",
            "evaluate.n_bootstrap=20",
            *overrides,
        ],
    )
    # Task "m" is in the corpus (a member), task "n" is not.
    eval_set = EvalSet(["m", "n"], np.array([1, 0]), [DOC_A, DOC_B], ["", ""])
    return EvalContext(recipe=recipe, run=None, eval_set=eval_set, log=lambda *a, **k: None)


def test_evaluation_rows_for_crafted_outputs(tmp_path):
    from leaklab.evaluations.extraction import Extraction
    from leaklab.memorization.clones import find_clones
    from leaklab.memorization.extraction import Sample

    ctx = _context(tmp_path)
    ext = Extraction()
    ext.prepare(ctx)
    texts = [
        "AUTHOR = 'alice@example.org'\n" + "\n".join(DOC_A.splitlines()[:7]),  # memorised + a corpus secret
        "contact = 'bob@example.org'\n\n"
        + DOC_B,  # a non-member's text, not in the corpus; not a corpus secret
        "",  # empty
        "\xff\xfe not code ((",
    ]
    samples = [Sample("non_prompt", 5, "", t) for t in texts]
    scores = {m: np.array([3.0, 2.0, 1.0, 0.0]) for m in RANKINGS}
    scores["ppl_ratio"][:] = np.nan
    out = ext._output(
        ctx.recipe, samples, find_clones(ext.index, texts), scores, find_clones(ext.tasks, texts)
    )
    got = {(r["column"], r["metric"]): r["value"] for r in out.rows}
    assert got[("non_prompt/k=5", "n_outputs")] == 4 and got[("all", "n_outputs")] == 4
    assert got[("all", "memorised_fraction")] == 0.25 and got[("all", "n_unique_snippets")] == 1
    assert got[("all", "n_empty")] == 1 and got[("all", "n_not_python")] == 1  # the empty text parses
    # 4 outputs and k = 4: the "top 4" is every output, so there is no ranking to measure.
    assert got[("all", "precision_at_4.ppl")] is None and got[("all", "precision_at_4.ppl_ratio")] is None
    assert got[("all", "secrets.email")] == 1 and got[("all", "secrets_not_in_corpus")] == 1
    assert got[("all", "taxonomy.configuration")] == 1
    assert (got[("members", "n_extracted")], got[("non_members", "n_extracted")]) == (1, 1)
    # The non-member's match is not in the corpus: the check says so (here by construction).
    assert got[("non_members", "n_unexplained")] == 1
    written = str(out.records)
    assert "alice@example.org" not in written and "bob@example.org" not in written
    assert Extraction().summary(out.rows).startswith("extraction: 25.0% of 4 outputs memorised")


def test_precision_at_k_only_where_there_are_more_than_k_outputs(tmp_path):
    """Unveiling §5.3 / Table 4 rank many outputs and count the memorised among the top k: a cell of k
    or fewer outputs would just give its memorised fraction, whatever the ranking, so it gets NaN; a
    strategy over its top-k values (8 > k = 4) and all outputs (9) are ranked, and different rankings
    then give different precisions."""
    from leaklab.evaluations.extraction import Extraction
    from leaklab.memorization.clones import find_clones
    from leaklab.memorization.extraction import Sample

    ctx = _context(tmp_path)
    ext = Extraction()
    ext.prepare(ctx)
    m, f = "\n".join(DOC_A.splitlines()[:7]), "def fresh():\n    return 0\n"  # memorised, fresh
    cells = [("non_prompt", 5, [m, f, f, f]), ("non_prompt", 40, [m, m, f, f]), ("temperature_decay", 5, [m])]
    samples = [Sample(strategy, k, "", t) for strategy, k, texts in cells for t in texts]
    texts = [s.text for s in samples]
    ppl = np.array([8.0, 1.0, 2.0, 3.0, 7.0, 6.0, 4.0, 0.0, 9.0])
    scores = {"ppl": ppl, "ppl_zlib": ppl, "window_ppl": -ppl, "ppl_ratio": np.full(9, np.nan),
              "ppl_reference_ratio": np.full(9, np.nan)}  # fmt: skip
    out = ext._output(ctx.recipe, samples, find_clones(ext.index, texts), scores, None)
    got = {(r["column"], r["metric"]): r["value"] for r in out.rows}

    # non_prompt's 8 outputs: ppl's top 4 are outputs 0, 4, 5 (memorised) and 6; window_ppl (reversed)
    # picks 7, 1, 2, 3, none memorised. All 9: ppl's top 4 are 8, 0, 4, 5, all memorised.
    for column, n, fraction, by_ppl in (("non_prompt/all", 8, 3 / 8, 0.75), ("all", 9, 4 / 9, 1.0)):
        assert got[(column, "n_outputs")] == n and got[(column, "memorised_fraction")] == fraction
        assert got[(column, "precision_at_4.ppl")] == by_ppl == got[(column, "precision_at_4.ppl_zlib")]
        assert got[(column, "precision_at_4.window_ppl")] == 0.0
        assert got[(column, "precision_at_4.ppl_ratio")] is None  # no smaller model: no scores
        assert got[(column, "precision_at_4.ppl_reference_ratio")] is None  # nor a reference
    assert ("temperature_decay/all", "n_outputs") not in got  # one top-k: the same as its cell
    for column, n, fraction in (
        ("non_prompt/k=5", 4, 0.25),
        ("non_prompt/k=40", 4, 0.5),
        ("temperature_decay/k=5", 1, 1.0),
    ):
        assert got[(column, "n_outputs")] == n and got[(column, "memorised_fraction")] == fraction
        for metric in RANKINGS:
            for suffix in ("", "_ci_low", "_ci_high"):
                assert got[(column, f"precision_at_4.{metric}{suffix}")] is None, (column, metric)
    values = [r for r in out.rows if r["metric"].startswith("precision_at_4.") and "_ci_" not in r["metric"]]
    assert {r["params"]["k"] for r in values} == {4}  # the k asked for, also where there were fewer
    params = {r["column"]: {k: v for k, v in r["params"].items() if k != "k"} for r in out.rows}
    assert params["non_prompt/all"] == {"split": "non_prompt/all", "strategy": "non_prompt"}
    assert params["non_prompt/k=40"] == {"split": "non_prompt/k=40", "strategy": "non_prompt", "top_k": 40}


INDENTED = """class Store:
    def load(self, path):
        with open(path) as f:
            data = f.read()

        rows = data.splitlines()
        return [r.strip() for r in rows]
"""


def test_index_source_gives_the_corpus_lines_as_written():
    index = _index(DOC_B, "# header\n\n" + INDENTED)
    [[clone]] = find_clones(index, ["x = 0\n" + "\n".join(code_lines(INDENTED))])  # flattened copy
    assert (clone.doc, clone.doc_line, clone.n_lines) == (1, 1, 6)
    assert index.source(clone.doc, clone.doc_line, clone.n_lines) == INDENTED.rstrip("\n")
    assert index.source(1, 2, 2) == "    def load(self, path):\n        with open(path) as f:"


def test_two_step_prompts_with_the_snippet_as_the_corpus_writes_it(tmp_path, monkeypatch):
    """Unveiling §3.1: two-step generation prompts with the memorised snippet found most often; the
    prompt is the training corpus's text (indentation, blank lines), not the normalised lines."""
    from leaklab.evaluations import extraction as ev
    from leaklab.memorization.extraction import Sample

    corpus = tmp_path / "indented"
    corpus.mkdir()
    (corpus / "store.py").write_text("import os\n\n" + INDENTED)
    ctx = _context(tmp_path, f"evaluate.extraction.corpus={corpus}", "evaluate.extraction.top_k=[5]")
    ext = ev.Extraction()
    ext.prepare(ctx)
    flattened = "\n".join(code_lines(INDENTED))  # what the model sampled: the lines, indentation lost
    two_step_prompts = []

    def fake_sample(decoding, strategy, k, n, max_new_tokens, *, prompts=(), **kw):
        if strategy == "two_step":
            two_step_prompts.extend(prompts)
            return [Sample(strategy, k, prompts[0], "") for _ in range(n)]
        return [Sample(strategy, k, "", flattened if strategy == "non_prompt" else "") for _ in range(n)]

    monkeypatch.setattr(ev, "sample", fake_sample)
    samples = ext._generate(ctx, None, None)
    assert [s.strategy for s in samples].count("two_step") == 3
    assert two_step_prompts == [INDENTED]  # the 6 corpus lines as written, the blank one between them kept


def test_evaluation_runs_on_a_model_with_every_strategy(tmp_path, small_lm):
    from leaklab.evaluations.extraction import Extraction

    model, tokenizer = small_lm
    ctx = _context(tmp_path)
    ext = Extraction()
    ext.prepare(ctx)
    assert ext.prompts == ["def held_out(x):\n"]
    out = ext.evaluate(ctx, model, tokenizer, step=1)
    got = {(r["column"], r["metric"]): r["value"] for r in out.rows}
    for strategy in ("non_prompt", "temperature_decay", "prompt_conditioned"):
        for k in (5, 40):
            assert got[(f"{strategy}/k={k}", "n_outputs")] == 3
    # A random model memorises nothing, so two_step has no snippet to prompt with and is left out.
    assert ("two_step/k=5", "n_outputs") not in got and got[("all", "n_outputs")] == 18
    assert len([r for r in out.records if r["record"] == "output"]) == 18
    # Every output record says how its prompt ended: the bare start token cannot be backed off; the
    # held-out definition, ending in "\n", is healed.
    how = {(r["strategy"], r["prompt_boundary"]) for r in out.records if r["record"] == "output"}
    assert how == {("non_prompt", "none"), ("temperature_decay", "none"), ("prompt_conditioned", "heal")}


def test_bad_corpus_settings_are_one_clear_error(tmp_path):
    from leaklab.errors import InputError
    from leaklab.evaluations.extraction import Extraction

    ctx = _context(tmp_path, f"evaluate.extraction.corpus={tmp_path / 'missing'}")
    with pytest.raises(InputError, match="evaluate.extraction.corpus: .*missing does not exist"):
        Extraction().prepare(ctx)


@pytest.mark.slow
def test_tiny_extraction_run_writes_rows_per_checkpoint_and_a_report(leaklab_cache, tmp_path):
    from conftest import SMALL_RUN
    from leaklab.rundir import RunDir

    overrides = [
        *SMALL_RUN,
        "data.max_samples=12",
        "train.epochs=1",
        "evaluate.n_bootstrap=10",
        "evaluate.extraction.n_outputs=2",
        "evaluate.extraction.top_k=[5]",
        "evaluate.extraction.max_new_tokens=12",
        "evaluate.extraction.n_prompts=4",
        f"output_dir={tmp_path}",
    ]
    env = {**os.environ, "LEAKLAB_CACHE": leaklab_cache, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    env.pop("WORLD_SIZE", None)
    train = [sys.executable, "leaklab/train.py", "recipe=tiny_extraction", *overrides]
    out = subprocess.run(train, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    (root,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    run = RunDir(root)
    rows = [r for r in run.results_rows() if r["evaluation"] == "extraction"]
    assert sorted({r["step"] for r in rows}) == [0, *[s for s, _ in run.checkpoint_dirs()]]
    for step in {r["step"] for r in rows}:
        got = {(r["column"], r["metric"]): r["value"] for r in rows if r["step"] == step}
        assert got[("members", "n_tasks")] == 6 and got[("non_members", "n_tasks")] == 6
        assert got[("non_members", "n_unexplained")] == 0
        assert got[("non_prompt/k=5", "n_outputs")] == 2 and 0 <= got[("all", "memorised_fraction")] <= 1
        records = [json.loads(x) for x in run.scores(step, "extraction").read_text().splitlines()]
        assert sum(r["record"] == "output" for r in records) == got[("all", "n_outputs")]
    report = subprocess.run(
        [sys.executable, "-m", "leaklab.cli", "report", str(root)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert report.returncode == 0, report.stderr[-2000:]
    html = next(root.rglob("*.html")).read_text()
    assert "Extraction audit" in html


def test_extraction_per_dose_and_the_exposure_correlation_by_hand(tmp_path):
    from leaklab.evaluations.base import EvalSet
    from leaklab.evaluations.extraction import Extraction
    from leaklab.memorization.clones import find_clones
    from leaklab.memorization.extraction import Sample

    ctx = _context(tmp_path)
    doc_c, doc_d = DOC_A.replace("'a'", "'c'"), DOC_A.replace("'a'", "'d'")
    # Members "m1" (dose 1), "m4" and "m4b" (dose 4); "n" a non-member. No run directory: the
    # exposures are the manifest's doses.
    ctx.eval_set = EvalSet(
        ["m1", "m4", "m4b", "n"], np.array([1, 1, 1, 0]), [DOC_A, doc_c, doc_d, DOC_B], [""] * 4,
        doses=np.array([1, 4, 4, 0]),
    )  # fmt: skip
    ext = Extraction()
    ext.prepare(ctx)
    texts = [doc_c, doc_c, doc_d, "x = 1"]  # m4 in two outputs, m4b in one, m1 in none
    samples = [Sample("non_prompt", 5, "", t) for t in texts]
    scores = {m: np.arange(4.0) for m in RANKINGS}
    out = ext._output(
        ctx.recipe, samples, find_clones(ext.index, texts), scores, find_clones(ext.tasks, texts)
    )
    per_dose = {(r["dose"], r["metric"]): r["value"] for r in out.rows if "dose" in r}
    assert per_dose[1, "n_tasks"] == 1 and per_dose[1, "extracted_fraction"] == 0.0
    assert per_dose[4, "n_extracted"] == 2 and per_dose[4, "extracted_fraction"] == 1.0
    got = {(r["column"], r["metric"]): r["value"] for r in out.rows if "dose" not in r}
    # Exposures 1, 4, 4 vs outputs 0, 2, 1: ranks (1, 2.5, 2.5) and (1, 3, 2), r = 1.5 / sqrt(1.5 * 2).
    assert got["members", "exposure_spearman"] == pytest.approx(1.5 / np.sqrt(3.0))
    assert got["members", "exposure_n_members"] == 3
    low, high = got["members", "exposure_spearman_ci_low"], got["members", "exposure_spearman_ci_high"]
    assert -1.0 <= low <= high <= 1.0
    # The all-members rows are what a run without doses writes.
    assert got["members", "n_extracted"] == 2 and got["members", "n_tasks"] == 3
    assert "members extracted 2/3" in Extraction().summary(out.rows)
    ctx.eval_set.doses = None
    plain = Extraction()
    plain.prepare(ctx)
    again = plain._output(
        ctx.recipe, samples, find_clones(plain.index, texts), scores, find_clones(plain.tasks, texts)
    )
    assert again.rows == [r for r in out.rows if "dose" not in r and not r["metric"].startswith("exposure_")]


def test_training_exposures_are_the_counted_ones_where_mixture_json_has_them(tmp_path):
    from leaklab.evaluations.extraction import training_exposures
    from leaklab.rundir import RunDir

    doses = {"a": 1, "b": 4, "n": 0}
    assert training_exposures(None, doses) == {"a": 1, "b": 4}
    (tmp_path / "mixture.json").write_text(json.dumps({"exposures": {"a": 1, "b": 3}}))
    assert training_exposures(RunDir(tmp_path), doses) == {"a": 1, "b": 3}


def test_discoverable_outputs_are_counted_apart_and_a_non_member_match_is_a_false_discovery(tmp_path):
    """Discoverable extraction prompts with the task's own first lines, so its matches are not the
    untargeted audit's: members/non_members keep the untargeted outputs only, members/discoverable and
    non_members/discoverable (per dose too) the targeted ones, and a non-member reproduced from its
    start is a counted false discovery, not the clone-detector bug the report warns about."""
    from leaklab.evaluations.base import EvalSet
    from leaklab.evaluations.extraction import Extraction, extraction_section
    from leaklab.memorization.clones import find_clones
    from leaklab.memorization.extraction import Sample

    ctx = _context(tmp_path, "evaluate.extraction.strategies=[non_prompt,discoverable]")
    doc_c = DOC_A.replace("'a'", "'c'")
    ctx.eval_set = EvalSet(
        ["m1", "m4", "n"], np.array([1, 1, 0]), [DOC_A, doc_c, DOC_B], [""] * 3, doses=np.array([1, 4, 0])
    )
    ext = Extraction()
    ext.prepare(ctx)
    assert len(ext.prefixes) == 3 and ext.prefixes[0] == "\n".join(DOC_A.splitlines()[:4]) + "\n"
    # Untargeted: m1 once. Discoverable: m4 and the non-member n.
    texts = [DOC_A, "x = 1", doc_c, DOC_B]
    strategies = ["non_prompt", "non_prompt", "discoverable", "discoverable"]
    samples = [Sample(s, 5, "", t) for s, t in zip(strategies, texts, strict=True)]
    scores = {m: np.arange(4.0) for m in RANKINGS}
    out = ext._output(
        ctx.recipe, samples, find_clones(ext.index, texts), scores, find_clones(ext.tasks, texts)
    )
    got = {(r["column"], r["metric"]): r["value"] for r in out.rows if "dose" not in r}
    assert got["members", "n_extracted"] == 1 and got["non_members", "n_extracted"] == 0
    assert got["members/discoverable", "n_extracted"] == 1
    assert got["non_members/discoverable", "n_extracted"] == 1
    assert got["non_members/discoverable", "n_unexplained"] == 1  # DOC_B is in no corpus
    per_dose = {(r["column"], r["dose"], r["metric"]): r["value"] for r in out.rows if "dose" in r}
    assert per_dose["members", 1, "n_extracted"] == 1 and per_dose["members", 4, "n_extracted"] == 0
    assert per_dose["members/discoverable", 4, "n_extracted"] == 1
    assert per_dose["members/discoverable", 1, "n_extracted"] == 0
    rows = [{**r, "step": 1} for r in out.rows]
    assert extraction_section(rows, None).notes == []


def test_discoverable_is_greedy_once_from_each_tasks_first_lines(tmp_path, monkeypatch):
    """Discoverable extraction (Carlini et al.): the greedy continuation of each task's own first lines,
    one sample per task, not one cell per top_k like the untargeted strategies."""
    from leaklab.evaluations import extraction as ev
    from leaklab.memorization.extraction import Sample

    ctx = _context(tmp_path, "evaluate.extraction.strategies=[non_prompt,discoverable]")
    ext = ev.Extraction()
    ext.prepare(ctx)
    calls = []

    def fake_sample(decoding, strategy, k, n, max_new_tokens, *, prompts=(), **kw):
        calls.append((strategy, k, list(prompts)))
        return [Sample(strategy, k, p, "") for p in prompts] if strategy == "discoverable" else []

    monkeypatch.setattr(ev, "sample", fake_sample)
    ext._generate(ctx, None, None)
    first_four = "\n".join(DOC_A.splitlines()[:4]) + "\n"
    assert [c for c in calls if c[0] == "discoverable"] == [
        ("discoverable", 1, [first_four, first_four.replace("value", "other").replace("'a'", "'b'")])
    ]
    assert [c[1] for c in calls if c[0] == "non_prompt"] == [5, 40]
