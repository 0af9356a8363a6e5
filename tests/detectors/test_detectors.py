"""Golden tests: every detector against values worked out by hand on a bigram model with fixed logits.

The stub model predicts the next token from the current one only, with hand-picked probabilities; every
next-token distribution is a permutation of (1/2, 1/4, 1/4) over the tokens a, b, c, so

    log p = -ln 2 (p = 1/2) or -2 ln 2 (p = 1/4);  mu = -1.5 ln 2;  sigma = 0.5 ln 2;  z = +1 or -1.

Text "a a b b" (after BOS) scores a|BOS (1/2), a|a (1/4), b|a (1/2), b|b (1/4).
"""

from __future__ import annotations

import dataclasses
import math
import types
import zlib

import numpy as np
import pytest
import torch

from leaklab.detectors import DETECTORS, build_detector, parse_spec, run_detectors
from leaklab.detectors.inputs import ModelInputs
from leaklab.detectors.likelihood import (
    SIGMA_FLOOR,
    Signals,
    dcpdd_score,
    minkpp_z,
    region_mean,
)
from leaklab.recipe import EvaluateConfig
from leaklab.signals.logprobs import SignalCache, TokenFrequencies, TokenStats

LN2 = math.log(2)
NEG = -1e4  # "impossible" next token (BOS)

# Next-token probabilities over (a, b, c) after each current token.
TARGET_TABLE = {
    "<bos>": (0.5, 0.25, 0.25),
    "a": (0.25, 0.5, 0.25),
    "b": (0.25, 0.25, 0.5),
    "c": (0.5, 0.25, 0.25),
}
# The reference gives every token of "a a b b" probability 1/4.
REFERENCE_TABLE = {
    "<bos>": (0.25, 0.25, 0.5),
    "a": (0.25, 0.25, 0.5),
    "b": (0.25, 0.25, 0.5),
    "c": (1 / 3,) * 3,
}


def word_tokenizer(order: list[str]):
    """Whitespace-separated words a, b, c with BOS; `order` fixes the ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(order)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<bos>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", pad_token="<bos>")


class _OneHot(torch.nn.Module):
    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def forward(self, input_ids, attention_mask=None, use_cache=False):
        hidden = torch.nn.functional.one_hot(input_ids, self.size).float()
        return types.SimpleNamespace(last_hidden_state=hidden)


class BigramLM(torch.nn.Module):
    """logits(next | current) = log of the table row: a body (one-hot) and a Linear head, like an HF LM."""

    def __init__(self, tokenizer, table: dict[str, tuple[float, ...]], split: bool = True):
        super().__init__()
        vocab = tokenizer.get_vocab()
        size = len(vocab)
        self.config = types.SimpleNamespace(max_position_embeddings=32)
        self.body = _OneHot(size)
        self.head = torch.nn.Linear(size, size, bias=False)
        weight = torch.full((size, size), NEG)
        for current, probs in table.items():
            for word, p in zip("abc", probs):
                weight[vocab[word], vocab[current]] = math.log(p)
        self.head.weight.data.copy_(weight)
        self.split = split

    def get_decoder(self):
        if not self.split:
            raise AttributeError("no decoder")
        return self.body

    def get_output_embeddings(self):
        return self.head

    def forward(self, input_ids, attention_mask=None, use_cache=False):
        return types.SimpleNamespace(logits=self.head(self.body(input_ids).last_hidden_state))


def bigram():
    """The bigram model of TARGET_TABLE over the words a, b, c with its word tokenizer."""
    tok = word_tokenizer(["a", "b", "c", "<bos>"])
    return BigramLM(tok, TARGET_TABLE), tok


TEXTS = ["a a b b", ""]
CORPUS = ["a", "b b b"]  # counts a:1 b:3 c:0 <bos>:0 -> Laplace f(a) = 2/8, f(b) = 4/8

# Hand-computed scores for "a a b b" (NLL = 1.5 ln 2) and NaN for the empty text.
NLL = 1.5 * LN2
GOLDEN: dict[str, float] = {
    "ppl": -(2**1.5),  # -exp(1.5 ln 2)
    "zlib": -NLL / len(zlib.compress(b"a a b b")),
    "mink@0.5": -2 * LN2,  # the two 1/4 tokens
    "mink@0.2": -2 * LN2,  # ceil(0.8) = 1 token
    "mink@1": -NLL,
    "minkpp@0.5": -1.0,  # z = -1, -1 are the lowest two of (+1, -1, +1, -1)
    "minkpp@1": 0.0,
    # alpha of the first a: p 1/2 * ln(1 / f(a) = 4) = 0.693; of the first b: 1/2 * ln 2 = 0.347; then clip.
    "dcpdd:a=0.4": (0.4 + 0.5 * math.log(2)) / 2,  # a clipped, b not
    "dcpdd:a=1": (0.5 * math.log(4) + 0.5 * math.log(2)) / 2,
    "dcpdd:a=0.5": (0.5 + 0.5 * math.log(2)) / 2,
    "ref": -NLL / (2 * LN2),  # -0.75: the reference gives each token 1/4
    "ref_diff": 2 * LN2 - NLL,
    "lowercase": -0.5,  # NLL(text) = 1, NLL(text.lower()) = 2 (test_lowercase_golden_and_sign)
}


def golden_run(specs, split: bool = True, ref_order=None):
    tok = word_tokenizer(["a", "b", "c", "<bos>"])
    ref_tok = word_tokenizer(ref_order or ["<bos>", "c", "b", "a"])  # other ids: must be re-tokenised
    return run_detectors(
        specs,
        ModelInputs(
            BigramLM(tok, TARGET_TABLE, split=split),
            tok,
            TEXTS,
            settings=EvaluateConfig(),
            reference=(BigramLM(ref_tok, REFERENCE_TABLE), ref_tok),
            cache=SignalCache(),
            corpus_texts=CORPUS,
        ),
    )


@pytest.mark.parametrize("split", [True, False], ids=["head-blocks", "full-logits"])
def test_golden_values_through_the_engine(split):
    # DC-PDD at a = 0.4 clips one token and not the other (the default 0.01 clips both: any alpha passes).
    specs = ["ppl", "zlib", "mink:k=0.5,0.2,1", "minkpp:k=0.5,1", "dcpdd:a=0.4", "ref"]
    scores = golden_run(specs, split=split)
    golden = {**GOLDEN, "dcpdd": GOLDEN["dcpdd:a=0.4"]}
    for name in [
        "ppl",
        "zlib",
        "mink@0.5",
        "mink@0.2",
        "mink@1",
        "minkpp@0.5",
        "minkpp@1",
        "dcpdd",
        "ref",
        "ref_diff",
    ]:
        assert scores[name][0] == pytest.approx(golden[name], abs=1e-5), name
        assert np.isnan(scores[name][1]), f"{name}: an empty text must score NaN"


def dcpdd_from_the_tables(text: str, a: float) -> float:
    """DC-PDD (Zhang et al. 2024) written out again over words, from TARGET_TABLE and CORPUS alone:
    mean over each word's first occurrence of min(p(word | previous) * ln(1 / f(word)), a), with f the
    Laplace-smoothed corpus frequency over the 4-word vocabulary (a, b, c, <bos>)."""
    counts = {w: sum(t.split().count(w) for t in CORPUS) for w in ("a", "b", "c", "<bos>")}
    total = sum(counts.values())
    alphas, seen, previous = [], set(), "<bos>"
    for word in text.split():
        p = TARGET_TABLE[previous]["abc".index(word)]
        if word not in seen:
            seen.add(word)
            f = (counts[word] + 1) / (total + len(counts))
            alphas.append(min(p * math.log(1 / f), a))
        previous = word
    return sum(alphas) / len(alphas)


@pytest.mark.parametrize("a", [1, 0.5, 0.4, 0.01])
def test_golden_dcpdd_clip(a):
    """Above both alphas (1), between them (0.5, 0.4: the first a clipped, the first b not), below both."""
    got = golden_run([f"dcpdd:a={a}"])["dcpdd"][0]
    assert got == pytest.approx(dcpdd_from_the_tables(TEXTS[0], a), abs=1e-6)
    if f"dcpdd:a={a}" in GOLDEN:
        assert got == pytest.approx(GOLDEN[f"dcpdd:a={a}"], abs=1e-6)


def test_minkpp_statistics_by_hand():
    """mu and sigma of the (1/2, 1/4, 1/4) distribution straight from the engine."""
    from leaklab.signals.logprobs import compute_token_stats

    tok = word_tokenizer(["a", "b", "c", "<bos>"])
    (s,) = compute_token_stats(BigramLM(tok, TARGET_TABLE), tok, ["a a b b"], cache=SignalCache())
    np.testing.assert_allclose(s.logprob, [-LN2, -2 * LN2, -LN2, -2 * LN2], atol=1e-6)
    np.testing.assert_allclose(s.mean, [-1.5 * LN2] * 4, atol=1e-6)
    np.testing.assert_allclose(s.var, [(0.5 * LN2) ** 2] * 4, atol=1e-6)
    np.testing.assert_allclose(minkpp_z(s.logprob, s.mean, s.var), [1, -1, 1, -1], atol=1e-5)


# --------------------------------------------------------------------------- formulas on hand-made stats


def stats(logprob, mean=None, var=None, ids=None) -> TokenStats:
    logprob = np.asarray(logprob, dtype=np.float32)
    return TokenStats(
        token_ids=np.asarray(ids if ids is not None else range(len(logprob)), dtype=np.int64),
        logprob=logprob,
        mean=None if mean is None else np.asarray(mean, dtype=np.float32),
        var=None if var is None else np.asarray(var, dtype=np.float32),
    )


def test_lowercase_golden_and_sign():
    # Original NLL 1, lowercased NLL 2: the original is much easier, as for a memorised text.
    member = Signals(spans=["x"], target=[stats([-1.0, -1.0])], lowercase=[stats([-2.0, -2.0])])
    nonmember = Signals(spans=["x"], target=[stats([-2.0, -2.0])], lowercase=[stats([-2.0, -2.0])])
    detector = build_detector("lowercase")
    assert detector.score(member)["lowercase"][0] == pytest.approx(GOLDEN["lowercase"])
    assert detector.score(nonmember)["lowercase"][0] == pytest.approx(-1.0)
    perfect = Signals(spans=["x"], target=[stats([-1.0])], lowercase=[stats([0.0])])
    assert np.isnan(detector.score(perfect)["lowercase"][0])  # NLL(lower) = 0: undefined ratio


def test_lowercase_signal_is_the_lowercased_text():
    model, tok = bigram()
    upper = run_detectors(
        ["lowercase"], ModelInputs(model, tok, ["A A B B"], settings=EvaluateConfig(), cache=SignalCache())
    )
    # "A" is unknown to the word tokenizer (-> <bos> id, never predicted: log p ~ -1e4); lower is "a a b b".
    assert upper["lowercase"][0] < -100


def test_min_k_counts_and_guard():
    values = np.array([-5.0, -1.0, -3.0, -2.0, -4.0])
    assert region_mean(values, 0.2) == -5.0
    assert region_mean(values, 0.4) == -4.5
    assert region_mean(values, 0.5) == -4.0  # ceil(2.5) = 3 tokens
    assert region_mean(values, 0.1) == -5.0  # k n = 0.5 < 1: the single lowest token
    assert region_mean(values, 1.0) == -3.0
    assert region_mean(np.arange(100.0), 0.07) == 3.0  # exactly 7 tokens, although 0.07 * 100 > 7 in floats
    assert np.isnan(region_mean(np.array([]), 0.2))


def test_minkpp_sigma_floor_gives_finite_z():
    z = minkpp_z(np.array([-1.0986]), np.array([-1.0986]), np.array([0.0]))
    assert z[0] == 0.0
    z = minkpp_z(np.array([-2.0]), np.array([-1.0]), np.array([0.0]))
    assert z[0] == pytest.approx(-1.0 / SIGMA_FLOOR)


def test_dcpdd_first_occurrence_only():
    ids = np.array([7, 7, 8])
    logprob = np.log(np.array([0.5, 0.9, 0.25]))
    freq = np.array([0.1, 0.1, 0.5])
    expected = (0.5 * math.log(10) + 0.25 * math.log(2)) / 2  # the second 7 is ignored
    assert dcpdd_score(ids, logprob, freq, a=10.0) == pytest.approx(expected)
    assert np.isnan(dcpdd_score(ids[:0], logprob[:0], freq[:0], a=0.01))


def test_ppl_and_mink_signs_prefer_likely_texts():
    likely = Signals(spans=["aaaa"], target=[stats([-0.1, -0.2, -0.1])])
    unlikely = Signals(spans=["aaaa"], target=[stats([-3.0, -2.0, -4.0])])
    for spec in ["ppl", "zlib", "mink", "ref"]:
        if spec == "ref":
            likely.reference = unlikely.reference = [stats([-2.0, -2.0])]
        detector = build_detector(spec)
        for column in detector.columns():
            assert detector.score(likely)[column][0] > detector.score(unlikely)[column][0], column


def test_minkpp_sign_prefers_targets_above_the_mean():
    member = Signals(spans=["x"], target=[stats([-0.5, -0.5], mean=[-2.0, -2.0], var=[1.0, 1.0])])
    nonmember = Signals(spans=["x"], target=[stats([-3.0, -3.0], mean=[-2.0, -2.0], var=[1.0, 1.0])])
    detector = build_detector("minkpp")
    assert detector.score(member)["minkpp@0.2"][0] == pytest.approx(1.5)
    assert detector.score(nonmember)["minkpp@0.2"][0] == pytest.approx(-1.0)


# --------------------------------------------------------------------------- registry and specs


def generic_signals() -> Signals:
    """A bundle that satisfies every signal kind: one scored text and one empty one."""
    full = stats([-1.0, -2.0, -0.5], mean=[-1.5, -1.5, -1.5], var=[0.25, 0.25, 0.25], ids=[1, 2, 1])
    empty = stats([], mean=[], var=[], ids=[])
    return Signals(
        spans=["abc", ""],
        target=[full, empty],
        lowercase=[full, empty],
        reference=[full, empty],
        frequencies=TokenFrequencies(np.array([0, 3, 1], dtype=np.int64)),
    )


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_registry_walk(name):
    """Every registered detector: a kind, known needs, typed columns, and (score kind) finite scores.
    (Its interface against its kind's Protocol: test_plugins.py.)"""
    from leaklab.detectors import KINDS
    from leaklab.detectors.signals import SOURCES
    from leaklab.detectors.srdetection import GENERATIONS, VARIANTS

    known = set(SOURCES)  # every signal a detector may need has its row in the signal table
    detector, kind = build_detector(name), DETECTORS[name].kind
    assert detector.name == name and kind in KINDS
    assert detector.needs and detector.needs <= known
    columns = detector.columns()
    assert columns and all(isinstance(params, dict) for params in columns.values())
    if DETECTORS[name].config:
        assert dataclasses.is_dataclass(DETECTORS[name].settings_class())
    if kind == "rule":
        # Rules read variants, not token statistics; their golden decisions are in test_srdetection.py.
        assert VARIANTS in detector.needs
        return
    if kind == "model":
        # Reads the model itself (a prefix pass, generations, variants); golden: test_model_detectors.py.
        return
    assert not detector.needs & {VARIANTS, GENERATIONS}
    scores = detector.score(generic_signals())
    assert list(scores) == list(columns)
    for column, values in scores.items():
        assert values.shape == (2,) and np.isfinite(values[0]) and np.isnan(values[1]), column
    # Every registered score detector has a hand-computed golden value above.
    assert any(key.split("@")[0].split(":")[0] == name for key in GOLDEN), f"add a golden value for {name}"


def test_spec_parsing_and_errors():
    assert parse_spec("mink:k=0.05,0.1,0.2") == ("mink", {"k": ["0.05", "0.1", "0.2"]})
    assert parse_spec("ppl") == ("ppl", {})
    assert build_detector("mink:k=0.05,0.1").columns() == {"mink@0.05": {"k": 0.05}, "mink@0.1": {"k": 0.1}}
    assert build_detector("ref:forms=diff").columns() == {"ref_diff": {"form": "diff"}}
    with pytest.raises(ValueError, match="did you mean 'mink'"):
        build_detector("minkk")
    with pytest.raises(ValueError, match="did you mean 'k'"):
        build_detector("mink:kk=0.1")
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        build_detector("minkpp:k=0")
    with pytest.raises(ValueError, match="cannot use"):
        build_detector("dcpdd:a=x")
    with pytest.raises(ValueError, match="key=value"):
        build_detector("mink:0.1")


def test_ref_without_reference_model_is_a_clear_error():
    tok = word_tokenizer(["a", "b", "c", "<bos>"])
    with pytest.raises(ValueError, match="reference model"):
        run_detectors(
            ["ppl", "ref"],
            ModelInputs(
                BigramLM(tok, TARGET_TABLE), tok, TEXTS, settings=EvaluateConfig(), cache=SignalCache()
            ),
        )


def test_solution_span_scores_the_solution_only():
    model, tok = bigram()
    from leaklab.recipe import EvaluateConfig

    scores = run_detectors(
        ["ppl", "zlib"],
        ModelInputs(
            model,
            tok,
            ["c a a b b"],
            prompts=["c "],
            settings=EvaluateConfig(scoring_span="solution"),
            cache=SignalCache(),
        ),
    )
    # a|c has p = 1/2 like a|BOS, so the solution scores exactly like "a a b b" alone.
    assert scores["ppl"][0] == pytest.approx(GOLDEN["ppl"], abs=1e-5)
    assert scores["zlib"][0] == pytest.approx(GOLDEN["zlib"], abs=1e-6)  # zlib of the solution span


def test_run_detectors_on_no_texts():
    tok = word_tokenizer(["a", "b", "c", "<bos>"])
    scores = run_detectors(
        ["ppl", "mink:k=0.1,0.2"],
        ModelInputs(BigramLM(tok, TARGET_TABLE), tok, [], settings=EvaluateConfig(), cache=SignalCache()),
    )
    assert {k: v.shape for k, v in scores.items()} == {"ppl": (0,), "mink@0.1": (0,), "mink@0.2": (0,)}


def test_evaluate_config_defaults_are_valid_specs():
    """A recipe that names no detectors and no evaluations gets the detection evaluation with PPL at its
    own defaults, which scores as the golden PPL."""
    from leaklab.detectors.likelihood import Ppl
    from leaklab.evaluations import EVALUATIONS
    from leaklab.recipe import EvaluateConfig

    defaults = EvaluateConfig()
    assert [parse_spec(s) for s in defaults.detectors] == [("ppl", {})]
    assert [build_detector(s) for s in defaults.detectors] == [Ppl()]
    scores = golden_run(defaults.detectors)
    assert list(scores) == ["ppl"] and scores["ppl"][0] == pytest.approx(GOLDEN["ppl"], abs=1e-5)
    assert defaults.evaluations == ["detection"] and "detection" in EVALUATIONS


def test_dcpdd_corpus_from_settings_and_info(tmp_path):
    """evaluate.dcpdd_corpus names a local corpus; run_detectors reports what it computed."""
    from leaklab.recipe import EvaluateConfig

    (tmp_path / "corpus.txt").write_text(" ".join(CORPUS))  # the same counts as CORPUS: a 1, b 3
    tok = word_tokenizer(["a", "b", "c", "<bos>"])
    info = {}
    scores = run_detectors(
        ["dcpdd:a=1"],
        ModelInputs(
            BigramLM(tok, TARGET_TABLE),
            tok,
            TEXTS,
            settings=EvaluateConfig(dcpdd_corpus=str(tmp_path / "corpus.txt")),
            cache=SignalCache(),
        ),
        info=info,
    )
    assert scores["dcpdd"][0] == pytest.approx(GOLDEN["dcpdd:a=1"], abs=1e-6)
    assert info["target"]["texts"] == 2 and info["target"]["empty"] == 1
