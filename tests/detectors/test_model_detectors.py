"""Golden tests of the detectors beyond the seeds: ReCaLL, CDD, n-gram accuracy and
the neighbourhood attack. Values are computed by hand on the bigram model of test_detectors.py, or by
a plain per-sample implementation written here, independent of the batched engines."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from test_detectors import bigram
from test_signals import tiny_model, tiny_tokenizer

from conftest import SMALL_RUN, SMALL_TINY
from leaklab.detectors import build_detector, run_detectors, score_detectors
from leaklab.detectors.cdd import edit_distances, peakedness
from leaklab.detectors.inputs import ModelInputs
from leaklab.detectors.likelihood import neighbour_gap
from leaklab.detectors.ngram import probes, start_points
from leaklab.detectors.recall import join_prefix, prefix_texts
from leaklab.detectors.srdetection import SrInputs, first_n_scores
from leaklab.recipe import EvaluateConfig
from leaklab.rundir import RunDir
from leaklab.signals.continuations import GenerationCache
from leaklab.signals.generation import Completion
from leaklab.signals.logprobs import SignalCache

LN2 = math.log(2)


def prefix_file(tmp_path, texts):
    path = tmp_path / "prefix.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return str(path)


# --------------------------------------------------------------------------- ReCaLL


def test_recall_golden_by_hand(tmp_path):
    """NLL("a a b b") = 1.5 ln 2 alone. After the prefix "b" only the first token's prediction changes:
    p(a | b) = 1/4 instead of p(a | <bos>) = 1/2, so NLL = (2 + 2 + 1 + 2) ln 2 / 4 = 1.75 ln 2 and the
    ratio is 7/6. After "c" it is p(a | c) = 1/2 again: ratio 1. An empty text is NaN."""
    model, tok = bigram()
    specs = [f"recall:shots=1,prefix={prefix_file(tmp_path, ['b'])}"]
    scores = score_detectors(
        specs, ModelInputs(model, tok, ["a a b b", ""], settings=EvaluateConfig(), cache=SignalCache())
    )
    values = scores.columns["recall@shots=1"]
    assert values[0] == pytest.approx(7 / 6, abs=1e-6)
    assert np.isnan(values[1])
    same = f"recall:shots=1,prefix={prefix_file(tmp_path, ['c'])}"
    assert score_detectors([same], ModelInputs(model, tok, ["a a b b"], settings=EvaluateConfig())).columns[
        "recall@shots=1"
    ][0] == pytest.approx(1.0)
    assert scores.params["recall@shots=1"][0] == "recall"


def test_recall_prefix_and_prompt_are_never_scored(tmp_path):
    """Solution span: "c a b b" with prompt "c " scores a|c, b|a, b|b alone and after the prefix "b"
    alike (the bigram only looks one token back): ratio exactly 1 whatever the prefix."""
    model, tok = bigram()
    settings = EvaluateConfig(scoring_span="solution")
    spec = f"recall:shots=1,prefix={prefix_file(tmp_path, ['b b b'])}"
    scores = score_detectors(
        [spec, "ppl"], ModelInputs(model, tok, ["c a b b"], prompts=["c "], settings=settings)
    )
    assert scores.columns["recall@shots=1"][0] == pytest.approx(1.0, abs=1e-9)
    assert scores.columns["ppl"][0] == pytest.approx(-math.exp(4 / 3 * LN2), abs=1e-6)


def _plain_nll(model, tok, text: str, scored_after: int) -> float:
    """Per-sample reference: one forward over the whole text, log-softmax, the tokens that end after
    character `scored_after` (the first token after BOS onwards)."""
    enc = tok(text, return_offsets_mapping=True)
    ids = torch.tensor([enc["input_ids"]])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
    picked = [
        float(logprobs[t - 1, ids[0, t]])
        for t in range(1, ids.shape[1])
        if enc["offset_mapping"][t][1] > scored_after
    ]
    return -sum(picked) / len(picked)


def test_recall_matches_a_per_sample_implementation(tmp_path):
    tok = tiny_tokenizer()
    model = tiny_model(tok, context=512).eval()
    texts = ["def add(a, b):\n    return a + b\n", "x = [i * i for i in range(10)]\n", "print('hi')\n"]
    shots = ["def one():\n    return 1\n", "y = 2\n"]
    spec = f"recall:shots=1,2,prefix={prefix_file(tmp_path, shots)}"
    columns = score_detectors(
        [spec], ModelInputs(model, tok, texts, settings=EvaluateConfig(), cache=SignalCache())
    ).columns
    for k in (1, 2):
        head = join_prefix(shots[:k])
        expected = [_plain_nll(model, tok, head + t, len(head)) / _plain_nll(model, tok, t, 0) for t in texts]
        np.testing.assert_allclose(columns[f"recall@shots={k}"], expected, rtol=1e-4)


def test_recall_prefix_errors(tmp_path):
    assert len(prefix_texts("builtin")) >= 3
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"txt": 1}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:1 has no \"text\""):
        build_detector(f"recall:prefix={bad}")
    with pytest.raises(ValueError, match="no such file"):
        build_detector(f"recall:prefix={tmp_path / 'missing.jsonl'}")
    with pytest.raises(ValueError, match="shots must be in 1..5"):
        build_detector("recall:shots=6")
    with pytest.raises(ValueError, match="score it with score_detectors"):
        run_detectors(["recall"], ModelInputs(*reversed(bigram()), ["a"], settings=EvaluateConfig()))


# --------------------------------------------------------------------------- CDD


def _levenshtein(a, b) -> int:
    """Textbook full-table dynamic programme."""
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        for j in range(len(b) + 1):
            if i == 0 or j == 0:
                table[i][j] = i + j
            else:
                table[i][j] = min(
                    table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + (a[i - 1] != b[j - 1])
                )
    return table[len(a)][len(b)]


def test_edit_distances_match_the_textbook_programme():
    rng = random.Random(0)
    for _ in range(40):
        ref = [rng.randrange(4) for _ in range(rng.randrange(0, 12))]
        cands = [[rng.randrange(4) for _ in range(rng.randrange(0, 12))] for _ in range(5)]
        assert edit_distances(ref, cands).tolist() == [_levenshtein(c, ref) for c in cands]
    assert edit_distances([1, 2, 3], [[1, 2, 3], [], [3, 2, 1], [1, 2, 3, 4]]).tolist() == [0, 3, 2, 1]


def test_peakedness_by_hand():
    greedy = list(range(20))
    samples = [list(range(20)), list(range(19)) + [99], list(range(18)), [5] * 25]
    # distances 0, 1, 2, 24 (at most 19 substitutions + 5 insertions; 5 matches one token);
    # l = 25 (the longest output).
    assert edit_distances(greedy, samples).tolist() == [0, 1, 2, 24]
    assert peakedness(greedy, samples, 0.05) == pytest.approx(2 / 4)  # d <= 1.25
    assert peakedness(greedy, samples, 0.0) == pytest.approx(1 / 4)
    assert peakedness(greedy, samples, 0.08) == pytest.approx(3 / 4)  # d <= 2
    assert peakedness(greedy, samples, 1.0) == pytest.approx(1.0)
    assert peakedness([], [[], []], 0.05) == 1.0  # all empty: every sample is the greedy output
    assert math.isnan(peakedness([1], [], 0.05))


class ScriptedGenerator:
    """A generator whose answers are fixed per prompt: greedy -> script[prompt][0], samples -> the rest."""

    def __init__(self, script):
        self.script = script
        self.calls = []

    def generate(self, prompts, max_new_tokens=256, stop=(), temperature=0.0, n=1, seed=0):
        self.calls.append((len(prompts), temperature, n))
        out = []
        for p in prompts:
            rows = [self.script[p][0]] if temperature == 0 else self.script[p][1 : 1 + n]
            out.append([Completion("", tuple(r[:max_new_tokens]), "length") for r in rows])
        return out


def test_cdd_through_the_generation_services():
    """Prompt "c " samples exactly its greedy output twice in three: 2/3. Prompt "a " samples only far
    outputs: 0. A text without a context is cut at half its tokens ("b b " of "b b b b")."""
    model, tok = bigram()
    script = {
        "c ": [[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4], [4, 3, 2, 1]],
        "a ": [[1, 1, 1, 1], [1, 1], [3, 3, 3, 3], [2, 2, 2, 2, 2]],
        "b b ": [[1], [1], [2], [1]],
    }
    generator = ScriptedGenerator(script)
    cache = GenerationCache()
    inputs = ModelInputs(
        model,
        tok,
        ["c a b", "a b c", "b b b b"],
        settings=EvaluateConfig(),
        prompts=["c ", "a ", ""],
        generator=generator,
        generation_cache=cache,
    )
    detector = build_detector("cdd:samples=3,alpha=0.05,0.5,max_new_tokens=8")
    scores = detector.run(inputs)
    np.testing.assert_allclose(scores["cdd@alpha=0.05"], [2 / 3, 0.0, 2 / 3])
    # alpha 0.5: "a " has l = 5, so d <= 2.5: [1, 1] is at distance 2 from [1, 1, 1, 1] -> 1/3;
    # "c " reaches [4, 3, 2, 1] (distance 4 > 2): still 2/3.
    np.testing.assert_allclose(scores["cdd@alpha=0.5"], [2 / 3, 1 / 3, 2 / 3])
    assert generator.calls == [(3, 0.0, 1), (3, 0.8, 3)]  # one greedy call, one sampling call
    detector.run(inputs)  # again: everything comes from the cache
    assert len(generator.calls) == 2


# --------------------------------------------------------------------------- n-gram accuracy


def test_start_points_spread_evenly():
    assert start_points(list(range(1, 7)), 3) == [1, 4, 6]  # indices 0, 2.5 -> 3, 5
    assert start_points([3, 4], 5) == [3, 4]
    assert start_points([7, 8, 9], 1) == [7]


class MemorisingGenerator:
    """Greedy continuation of a prompt that starts the memorised text: its true next words; any other
    prompt: "c c c ..." (never right for the texts below where it is asked)."""

    def __init__(self, tokenizer, memorised: str):
        self.tok, self.memorised = tokenizer, memorised
        self.calls = 0

    def generate(self, prompts, max_new_tokens=256, stop=(), temperature=0.0, n=1, seed=0):
        self.calls += 1
        out = []
        for p in prompts:
            rest = self.memorised[len(p) :] if self.memorised.startswith(p) else "a " * max_new_tokens
            ids = self.tok(rest, add_special_tokens=False)["input_ids"][:max_new_tokens]
            out.append([Completion(rest, tuple(ids), "length")])
        return out


def test_ngram_accuracy_by_hand():
    """8 words, n = 2, 3 starts: candidates 1..6, starts 1, 4, 6. The memorised text hits all three;
    "a b c c c c c c" hits only at 1 (its prefix "a " starts the memorised text and "b c" follows);
    "c c c c c c c c" hits none; a 2-word text has no start with 2 words after a non-empty prefix."""
    model, tok = bigram()
    memorised = "a b c a b c a b"
    texts = [memorised, "a b c c c c c c", "c c c c c c c c", "a b"]
    found = probes(tok, texts, [""] * 4, n=2, k=3, solution=False)
    assert [(p.sample, p.prefix) for p in found if p.sample == 1] == [
        (1, "a "),
        (1, "a b c c "),
        (1, "a b c c c c "),
    ]
    generator = MemorisingGenerator(tok, memorised)
    inputs = ModelInputs(
        model, tok, texts, settings=EvaluateConfig(), generator=generator, generation_cache=GenerationCache()
    )
    scores = build_detector("ngram_acc:n=2,1,starts=3").run(inputs)
    np.testing.assert_allclose(scores["ngram_acc@n=2"], [1.0, 1 / 3, 0.0, np.nan])
    assert generator.calls == 1  # every start of every sample in one generation call
    assert inputs.info["ngram_acc"] == {"probes": 9, "no_start": 1}
    # n = 1 reads the first token of the same continuations: at 4 and 6 "a" != "c" still misses.
    np.testing.assert_allclose(scores["ngram_acc@n=1"], [1.0, 1 / 3, 0.0, np.nan])


def test_ngram_solution_span_starts_inside_the_solution():
    _, tok = bigram()
    found = probes(tok, ["a b c a b c"], ["a b c a "], n=1, k=5, solution=True)
    assert [p.prefix for p in found] == ["a b c a ", "a b c a b "]


# --------------------------------------------------------------------------- neighbourhood


def test_neighbourhood_by_hand():
    """NLL("a a b b") = 1.5 ln 2; "b b b b": 2 ln 2; "a b a b": (1 + 1 + 2 + 1) ln 2 / 4 = 1.25 ln 2.
    n = 10: mean 1.625 ln 2 - 1.5 ln 2 = 0.125 ln 2; n = 1: the first variant only, 0.5 ln 2. A sample
    without verified variants is NaN."""
    model, tok = bigram()
    inputs = SrInputs(
        texts=["a a b b", "a b"],
        contexts=["", ""],
        variant_texts=[["b b b b", "a b a b"], []],
        variant_contexts=[["", ""], []],
    )
    for spec, expected in [("neighbourhood", 0.125 * LN2), ("neighbourhood:n=1", 0.5 * LN2)]:
        scores = score_detectors(
            [spec],
            ModelInputs(
                model, tok, inputs.texts, settings=EvaluateConfig(), rule_inputs=inputs, cache=SignalCache()
            ),
        )
        assert scores.columns["neighbourhood"][0] == pytest.approx(expected, abs=1e-6)
        assert np.isnan(scores.columns["neighbourhood"][1])
    with pytest.raises(ValueError, match="rule_inputs"):
        score_detectors(["neighbourhood"], ModelInputs(model, tok, ["a"], settings=EvaluateConfig()))
    variants = np.array([[2.0, np.nan, 4.0], [1.0, 1.0, 1.0]])
    got = neighbour_gap(np.array([1.0, np.nan]), first_n_scores(variants, 2))
    assert got[0] == pytest.approx(2.0) and np.isnan(got[1])


def test_check_against_the_variants_built():
    from leaklab.detectors import validate_specs
    from leaklab.recipe import EvaluateConfig

    assert validate_specs(["neighbourhood:n=10"], EvaluateConfig()) == []
    settings = EvaluateConfig()
    settings.srdetection.n_variants = 3
    assert "n_variants is 3" in validate_specs(["neighbourhood:n=5"], settings)[0]


# --------------------------------------------------------------------------- all of them on a real model


def test_all_four_on_a_tiny_llama_share_the_caches():
    tok = tiny_tokenizer()
    model = tiny_model(tok, context=512).eval()
    texts = ["def add(a, b):\n    return a + b\n", "x = [i * i for i in range(10)]\n", "print('hi')\n"]
    prompts = ["def add(a, b):\n", "x = ", ""]
    inputs = SrInputs(
        texts, prompts, [[t.replace("a", "q")] for t in texts], [[p.replace("a", "q")] for p in prompts]
    )
    specs = ["ppl", "recall:shots=2", "cdd:samples=3,max_new_tokens=6", "ngram_acc:n=3", "neighbourhood"]
    generations = GenerationCache()
    info = {}
    scores = score_detectors(
        specs,
        ModelInputs(
            model,
            tok,
            texts,
            settings=EvaluateConfig(),
            prompts=prompts,
            rule_inputs=inputs,
            generation_cache=generations,
        ),
        info=info,
    )
    assert list(scores.columns) == [c for spec in specs for c in build_detector(spec).columns()]
    for column, values in scores.columns.items():
        assert values.shape == (3,) and np.isfinite(values).all(), column
    assert {"cdd", "ngram_acc", "neighbourhood"} <= set(info["model_level"])
    misses = generations.misses
    again = score_detectors(
        specs,
        ModelInputs(
            model,
            tok,
            texts,
            settings=EvaluateConfig(),
            prompts=prompts,
            rule_inputs=inputs,
            generation_cache=generations,
        ),
    )
    assert generations.misses == misses  # the second evaluation of the checkpoint generates nothing
    for column in scores.columns:
        np.testing.assert_array_equal(again.columns[column], scores.columns[column])


# --------------------------------------------------------------------------- in a run and an audit

# Small settings: a CI test, not a measurement (the bench times the defaults).
RECENT = 'evaluate.detectors=[ppl,recall,"ngram_acc:starts=2","cdd:samples=2,max_new_tokens=8"]'


@pytest.mark.slow
def test_recent_detectors_in_a_run_and_an_audit(leaklab_cache, tmp_path):
    """Through the detection evaluation (rows, per-sample records, the results table) and `leaklab audit`
    with no special case: each new column gets the metrics of every score column."""
    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}
    env.update(LEAKLAB_CACHE=leaklab_cache, HF_HUB_OFFLINE="1", WANDB_MODE="disabled")
    columns = ["ppl", "recall@shots=1", "ngram_acc@n=5", "cdd@alpha=0.05"]

    out = subprocess.run(
        [
            sys.executable,
            "leaklab/train.py",
            "recipe=tiny_cpt",
            *SMALL_RUN,
            "train.epochs=1",
            "data.max_samples=12",
            RECENT,
            f"output_dir={tmp_path / 'run'}",
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (root,) = (tmp_path / "run").iterdir()
    run = RunDir(root)
    rows = [r for r in run.results_rows() if r["evaluation"] == "detection"]
    for step in {r["step"] for r in rows}:
        auroc = {r["column"]: r["value"] for r in rows if r["step"] == step and r["metric"] == "auroc"}
        assert set(columns) <= set(auroc) and all(0 <= auroc[c] <= 1 for c in columns), auroc
        records = [json.loads(line) for line in run.scores(step, "detection").read_text().splitlines()]
        assert len(records) == 12 and all(c in records[0] for c in columns)
    assert "recall@shots=1" in out.stdout  # the results table and the summary name the new columns
    assert "cdd@alpha=0.05" in (run.report / "report.md").read_text()

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "leaklab.cli",
            "audit",
            "model=builtin:tiny",
            "benchmark=humaneval",
            RECENT.split(".", 1)[1],
            "data.max_samples=6",
            f"output_dir={tmp_path / 'audit'}",
            *SMALL_TINY,
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (root,) = (tmp_path / "audit").iterdir()
    summary = {(r["column"], r["metric"]): r["value"] for r in RunDir(root).results_rows()}
    for column in columns:
        assert summary[(column, "n")] == 6 and summary[(column, "n_undefined")] == 0, column
