"""Golden tests of PAC, Con-ReCall, SaMIA and GradNorm. Values are computed by hand on the bigram model
of test_detectors.py (p(next | current) from TARGET_TABLE), or by a plain word-level computation
written here from the same table, independent of the signal engine."""

from __future__ import annotations

import json
import math
import random
import zlib

import numpy as np
import pytest
from test_detectors import TARGET_TABLE
from test_model_detectors import ScriptedGenerator, bigram
from test_signals import tiny_model, tiny_tokenizer

from leaklab.detectors import build_detector, score_detectors
from leaklab.detectors.conrecall import cross_fitted_shots, fitting_shots
from leaklab.detectors.gradnorm import gradnorm_score
from leaklab.detectors.inputs import ModelInputs
from leaklab.detectors.likelihood import neighbour_gap, nll_ratio
from leaklab.detectors.pac import augmented_copies, polarized_distance, swap_words
from leaklab.detectors.samia import rouge_recall, samia_score, split_prompt
from leaklab.errors import InputError
from leaklab.recipe import EvaluateConfig
from leaklab.signals.continuations import GenerationCache
from leaklab.signals.logprobs import SignalCache


def word_probs(text: str) -> list[float]:
    """p(word | previous word) of every word of a text under TARGET_TABLE, BOS first."""
    out, previous = [], "<bos>"
    for word in text.split():
        out.append(TARGET_TABLE[previous]["abc".index(word)])
        previous = word
    return out


def jsonl(tmp_path, name, texts):
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return str(path)


# --------------------------------------------------------------------------- PAC


def test_polarized_distance_by_hand():
    """Far 0.2 of five values: the top one (0.9); local 0.4: the lowest two (0.1, 0.3), mean 0.2."""
    assert polarized_distance(np.array([0.9, 0.1, 0.5, 0.3, 0.7]), 0.2, 0.4) == pytest.approx(0.7)
    # A tiny share still takes one value on each side: 0.9 - 0.1.
    assert polarized_distance(np.array([0.9, 0.1, 0.5]), 0.01, 0.01) == pytest.approx(0.8)
    assert math.isnan(polarized_distance(np.array([]), 0.2, 0.4))


def test_pac_scores_by_hand():
    """Mean of the copies' distances minus the original's; NaN copies are left out, none at all is NaN."""
    got = neighbour_gap(np.array([0.7, 0.2, 0.1]), np.array([[0.9, 0.8], [np.nan, 0.4], [np.nan, np.nan]]))
    np.testing.assert_allclose(got[:2], [0.15, 0.2])
    assert np.isnan(got[2])


def test_swap_words_by_hand():
    """Two words: the one possible swap. alpha 0.5 of six words: three swaps, so the multiset of words
    stays and the spaces (indentation) survive."""
    assert swap_words("a b", 0.3, random.Random(0)) == "b a"
    assert swap_words("alone", 0.3, random.Random(0)) == "alone"
    text = "    return x + y"  # four spaces: three empty words, then return, x, +, y
    swapped = swap_words(text, 0.5, random.Random(1))
    assert sorted(swapped.split(" ")) == sorted(text.split(" ")) and len(swapped) == len(text)
    # Copies are seeded by the text, not by the order texts come in.
    assert augmented_copies("a b c a", 0.3, 3, 0) == augmented_copies("a b c a", 0.3, 3, 0)
    assert augmented_copies("a b c a", 0.3, 3, 0) != augmented_copies("a b c a", 0.3, 3, 1)


@pytest.mark.parametrize("space", ["prob", "logprob"])
def test_pac_through_the_engine_matches_a_word_level_computation(space):
    """PAC of "a a b b" and "c a b c": the engine's token statistics against p(word | previous) read
    from the table, for the same seeded copies. By hand for the original "a a b b" in probability
    space: probabilities (1/2, 1/4, 1/2, 1/4); far 0.25 = the top one (1/2), local 0.5 = the lowest two
    (1/4, 1/4): PD = 1/4."""
    model, tok = bigram()
    spec = f"pac:far=0.25,local=0.5,alpha=0.3,copies=4,space={space}"
    texts = ["a a b b", "c a b c"]
    column = "pac" if space == "prob" else "pac_log"
    got = score_detectors(
        [spec], ModelInputs(model, tok, texts, settings=EvaluateConfig(), cache=SignalCache())
    ).columns[column]

    def pd(text):
        values = np.array(word_probs(text))
        return polarized_distance(values if space == "prob" else np.log(values), 0.25, 0.5)

    if space == "prob":
        assert pd("a a b b") == pytest.approx(0.25)
    for text, value in zip(texts, got):
        copies = augmented_copies(text, 0.3, 4, 0)
        assert value == pytest.approx(np.mean([pd(c) for c in copies]) - pd(text), abs=1e-6)


def test_pac_swaps_only_the_solution():
    """Under scoring_span: solution the prompt "c " stays first in every copy and is never scored. By
    hand, solution "a b b": p(a | c) = 1/2, p(b | a) = 1/2, p(b | b) = 1/4, far 0.3 (top one) 1/2 minus
    local 0.3 (lowest one) 1/4: PD = 1/4. A copy "b b a" reads p(b | c), p(b | b), p(a | b) = 1/4 each:
    PD = 0; "b a b": 1/4, 1/4, 1/2: PD = 1/4."""
    model, tok = bigram()
    settings = EvaluateConfig(scoring_span="solution")
    spec = "pac:far=0.3,local=0.3"
    scores = score_detectors([spec], ModelInputs(model, tok, ["c a b b"], prompts=["c "], settings=settings))

    def pd(solution):
        return polarized_distance(np.array(word_probs("c " + solution)[1:]), 0.3, 0.3)

    assert pd("a b b") == pytest.approx(0.25) and pd("b b a") == 0 and pd("b a b") == pytest.approx(0.25)
    copies = augmented_copies("a b b", 0.3, 5, 0)
    assert scores.columns["pac"][0] == pytest.approx(np.mean([pd(c) for c in copies]) - 0.25, abs=1e-6)


# --------------------------------------------------------------------------- SaMIA


def test_rouge_recall_by_hand():
    assert rouge_recall(["c", "a"], ["c", "a"], 1) == 1.0
    assert rouge_recall(["c", "c"], ["c", "a"], 1) == 0.5  # c counted once: the reference has one c
    assert rouge_recall(["a", "c", "a"], ["c", "a"], 2) == 1.0
    assert rouge_recall(["c", "c"], ["c", "a"], 2) == 0.0
    assert math.isnan(rouge_recall(["c"], ["c"], 2))  # no reference bigram


def test_split_prompt_by_hand():
    assert split_prompt("a b c a", 0.5) == ("a b", ["c", "a"])
    assert split_prompt("def f(x):\n    return x\n", 0.5) == ("def f(x):", ["return", "x"])
    assert split_prompt("a b", 0.1) == ("a", ["b"])  # at least one word on each side
    assert split_prompt("a b", 0.99) == ("a", ["b"])
    assert split_prompt("alone", 0.5) is None


def test_samia_through_the_generation_services():
    """Text "a b c a": prompt "a b", reference [c, a]. Samples "c a b b" (cut to "c a"), "c c", "b b":
    ROUGE-1 1, 1/2, 0 -> 1/2; ROUGE-2 1, 0, 0 -> 1/3; the zlib form weighs each by its compressed
    size. "alone" has no words to split: NaN."""
    model, tok = bigram()
    ids = {"a": 0, "b": 1, "c": 2}
    samples = [[ids[w] for w in s.split()] for s in ("c a b b", "c c", "b b")]
    generator = ScriptedGenerator({"a b": [None, *samples]})
    inputs = ModelInputs(
        model,
        tok,
        ["a b c a", "a"],
        settings=EvaluateConfig(),
        generator=generator,
        generation_cache=GenerationCache(),
    )
    scores = build_detector("samia:n=1,2,samples=3,max_new_tokens=8").run(inputs)
    np.testing.assert_allclose(scores["samia@n=1"], [0.5, np.nan])
    np.testing.assert_allclose(scores["samia@n=2"], [1 / 3, np.nan])
    size = {t: len(zlib.compress(t.encode())) for t in ("c a", "c c", "b b")}
    np.testing.assert_allclose(scores["samia_zlib@n=1"][0], (size["c a"] + 0.5 * size["c c"]) / 3)
    assert inputs.info["samia"] == {"too_short": 1}
    assert generator.calls == [(1, 1.0, 3)]  # one sampling call for all prompts
    assert samia_score([], ["a"], 1, False) != samia_score([], ["a"], 1, False)  # NaN without samples


# --------------------------------------------------------------------------- GradNorm


def test_gradnorm_by_hand():
    """The bigram's only parameters are its head W (one-hot body), so d(mean NLL)/dW has one column per
    predicting word: (p(. | word) - onehot(next)) / n summed over its positions. "a a b b", n = 4:
    column <bos> (-1/2, 1/4, 1/4), column a (1/4 - 1, 1/2, 1/4) + (1/4, 1/2 - 1, 1/4) = (-1/2, 0, 1/2),
    column b (1/4, 1/4 - 1, 1/2); squared norm (3/8 + 1/2 + 7/8) / 16 = 7/64. Solution "a b" after
    prompt "c ": columns c (-1/2, 1/4, 1/4) and a (1/4, -1/2, 1/4) over n = 2: (3/8 + 3/8) / 4 = 3/16."""
    model, tok = bigram()
    scores = score_detectors(
        ["gradnorm"], ModelInputs(model, tok, ["a a b b", ""], settings=EvaluateConfig())
    )
    assert scores.columns["gradnorm"][0] == pytest.approx(-math.sqrt(7 / 64), abs=1e-6)
    assert np.isnan(scores.columns["gradnorm"][1])
    settings = EvaluateConfig(scoring_span="solution")
    solution = score_detectors(
        ["gradnorm"], ModelInputs(model, tok, ["c a b"], prompts=["c "], settings=settings)
    )
    assert solution.columns["gradnorm"][0] == pytest.approx(-math.sqrt(3 / 16), abs=1e-6)
    assert model.head.weight.grad is None  # the model's own gradient buffers are never written
    assert gradnorm_score([3.0, 1.0]) == -2.0 and math.isnan(gradnorm_score([]))


def test_gradnorm_without_trainable_parameters_is_nan_with_a_reason():
    model, tok = bigram()
    model.head.weight.requires_grad_(False)
    info = {}
    scores = score_detectors(
        ["gradnorm"], ModelInputs(model, tok, ["a a b b"], settings=EvaluateConfig()), info=info
    )
    assert np.isnan(scores.columns["gradnorm"][0])
    assert info["model_level"]["gradnorm"]["no_trainable_parameters"] == 1


# --------------------------------------------------------------------------- Con-ReCall


def test_conrecall_by_hand(tmp_path):
    """NLL("a a b b") = 1.5 ln 2 alone; after the member prefix "b": p(a | b) = 1/4 replaces p(a | <bos>)
    = 1/2, NLL = 1.75 ln 2; after the non-member prefix "c": p(a | c) = 1/2, NLL = 1.5 ln 2.
    gamma 0.5: (1.5 - 0.5 * 1.75) / 1.5 = 5/12; gamma 1: (1.5 - 1.75) / 1.5 = -1/6."""
    model, tok = bigram()
    members, clean = jsonl(tmp_path, "m", ["b"]), jsonl(tmp_path, "n", ["c"])
    spec = f"conrecall:gamma=0.5,1,shots=1,members={members},non_members={clean}"
    scores = score_detectors(
        [spec], ModelInputs(model, tok, ["a a b b", ""], settings=EvaluateConfig(), cache=SignalCache())
    )
    np.testing.assert_allclose(scores.columns["conrecall@gamma=0.5"], [5 / 12, np.nan], atol=1e-6)
    np.testing.assert_allclose(scores.columns["conrecall@gamma=1"], [-1 / 6, np.nan], atol=1e-6)
    assert np.isnan(nll_ratio(np.array([1.0]), np.array([0.0]))[0])  # NLL(x) = 0: no ratio


def test_conrecall_keeps_prefix_and_text_inside_the_context(tmp_path):
    """The bigram's context is 32 tokens. A 28-word text with a 4-word shot needs 1 + 4 + 28 = 33: no
    shot fits and it scores NaN (never a prefix the context cannot hold); a 20-word text fits (25)."""
    model, tok = bigram()
    members, clean = jsonl(tmp_path, "m", ["b b b b"]), jsonl(tmp_path, "n", ["c c c c"])
    spec = f"conrecall:shots=1,members={members},non_members={clean}"
    info = {}
    texts = [" ".join("ab"[i % 2] for i in range(28)), " ".join("ab"[i % 2] for i in range(20))]
    scores = score_detectors(
        [spec], ModelInputs(model, tok, texts, settings=EvaluateConfig(), cache=SignalCache()), info=info
    )
    values = scores.columns["conrecall@gamma=0.5"]
    assert np.isnan(values[0]) and np.isfinite(values[1])
    assert info["model_level"]["conrecall"] == {"no_room": 1}
    # BOS + shots + the text's 20 words: both (1 + 4 + 1 + 20 = 26) fit 32; at 25 only the first (25);
    # at 24 the first is skipped (too long) and the second kept (1 + 1 + 20 = 22).
    assert fitting_shots(tok, ["b b b b", "b"], "", texts[1], 32, k=2) == ["b b b b", "b"]
    assert fitting_shots(tok, ["b b b b", "b"], "", texts[1], 25, k=2) == ["b b b b"]
    assert fitting_shots(tok, ["b b b b", "b"], "", texts[1], 24, k=2) == ["b"]
    assert fitting_shots(tok, ["b b b b", "b"], "", texts[1], 32, k=1) == ["b b b b"]


def test_conrecall_cross_fitted_shots_never_come_from_the_samples_fold():
    texts = [f"t{i}" for i in range(10)]
    clean = np.array([i % 2 == 0 for i in range(10)])
    shots = cross_fitted_shots(texts, clean, folds=2, seed=0)
    for i, (members, non_members) in enumerate(shots):
        assert texts[i] not in members + non_members
        assert all(not clean[texts.index(t)] for t in members) and all(
            clean[texts.index(t)] for t in non_members
        )
        # The sample's own fold mates are never its shots either (their labels are decided with it).
        mates = {t for j, t in enumerate(texts) if shots[j] is shots[i]}
        assert not mates & set(members + non_members)
        others = [j for j in range(10) if shots[j] is not shots[i]]
        assert sorted(members) == sorted(texts[j] for j in others if not clean[j])
        assert sorted(non_members) == sorted(texts[j] for j in others if clean[j])


def test_conrecall_refuses_without_labels_or_files(tmp_path):
    model, tok = bigram()
    with pytest.raises(InputError, match="members=FILE.jsonl,non_members=FILE.jsonl"):
        score_detectors(["conrecall"], ModelInputs(model, tok, ["a a b b"], settings=EvaluateConfig()))
    with pytest.raises(ValueError, match="both members=FILE and non_members=FILE"):
        build_detector(f"conrecall:members={jsonl(tmp_path, 'm', ['b'])}")


# --------------------------------------------------------------------------- all four on a tiny Llama


def test_all_four_on_a_tiny_llama_reuse_their_caches():
    tok = tiny_tokenizer()
    model = tiny_model(tok, context=512).eval()
    texts = [
        "def add(a, b):\n    return a + b\n",
        "x = [i * i for i in range(10)]\n",
        "print('hi there')\n",
        "y = x + 1 if x else 0\n",
    ]
    known_clean = np.array([False, True, False, True])
    specs = ["ppl", "pac:copies=3", "conrecall:shots=1", "samia:samples=2,max_new_tokens=6", "gradnorm"]
    generations, signals = GenerationCache(), SignalCache()
    args = dict(generation_cache=generations, cache=signals, known_clean=known_clean)
    scores = score_detectors(specs, ModelInputs(model, tok, texts, settings=EvaluateConfig(), **args))
    assert list(scores.columns) == [c for spec in specs for c in build_detector(spec).columns()]
    for column, values in scores.columns.items():
        assert values.shape == (4,) and np.isfinite(values).all(), column
    misses = generations.misses
    again = score_detectors(specs, ModelInputs(model, tok, texts, settings=EvaluateConfig(), **args))
    assert generations.misses == misses
    for column in scores.columns:
        np.testing.assert_allclose(again.columns[column], scores.columns[column], rtol=1e-6)


# --------------------------------------------------------------------------- leaklab mia and audit

SMALL_2026 = "detectors=[pac:copies=2,conrecall:shots=1,samia:samples=2,max_new_tokens=8,gradnorm]"


@pytest.mark.slow  # builds the smoke tiny model when the session has none (about a minute)
def test_mia_runs_the_four_and_audit_refuses_conrecall_without_shot_files(leaklab_cache, tmp_path, capsys):
    from conftest import SMALL_TINY
    from leaklab.cli import main as cli_main
    from leaklab.data.benchmarks import load_humaneval
    from leaklab.rundir import RunDir

    tasks = load_humaneval()[:12]
    data = tmp_path / "labelled.jsonl"
    data.write_text(
        "".join(
            json.dumps({"text": t.text("prompt+solution"), "label": i % 2}) + "\n"
            for i, t in enumerate(tasks)
        )
    )
    common = ["tracking.wandb.enabled=false", "evaluate.n_bootstrap=10", *SMALL_TINY]
    args = [
        "mia",
        "model=builtin:tiny",
        f"data={data}",
        SMALL_2026,
        f"output_dir={tmp_path / 'mia'}",
        *common,
    ]
    assert cli_main(args) == 0
    (folder,) = (tmp_path / "mia").iterdir()
    auroc = {r["column"]: r["value"] for r in RunDir(folder).results_rows() if r["metric"] == "auroc"}
    for column in ("pac", "conrecall@gamma=0.5", "samia@n=1", "samia_zlib@n=1", "gradnorm"):
        assert 0 <= auroc[column] <= 1, (column, auroc)

    capsys.readouterr()
    audit = [
        "audit",
        "model=builtin:tiny",
        "benchmark=humaneval",
        "detectors=[conrecall]",
        "data.max_samples=6",
    ]
    assert cli_main([*audit, f"output_dir={tmp_path / 'audit'}", *common]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "conrecall:members=FILE.jsonl,non_members=FILE.jsonl" in err[0], err
