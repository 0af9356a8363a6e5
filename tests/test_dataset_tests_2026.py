"""Golden tests of CoDeC and PaCoST (dataset-level tests): the statistics by hand, and CoDeC's model pass
against log-likelihoods read from the bigram table of test_detectors.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_detectors_2026 import word_probs
from test_model_detectors import bigram

from leaklab.dataset_tests.codec import codec_score, codec_vs_clean, context_nlls, context_shots
from leaklab.dataset_tests.pacost import confidence_gaps, gap_null_rate, gap_test
from leaklab.detectors.inputs import ModelInputs
from leaklab.metrics import two_rate_pvalue
from leaklab.recipe import EvaluateConfig
from leaklab.signals.logprobs import SignalCache


def test_codec_score_by_hand():
    """Drops where the NLL with context is higher: 1.5 > 1 yes, 1 > 2 no, 3 > 3 no; the NaN row is out."""
    assert codec_score([1.0, 2.0, 3.0, np.nan], [1.5, 1.0, 3.0, 1.0]) == (pytest.approx(1 / 3), 1, 3)
    assert math.isnan(codec_score([np.nan], [1.0])[0])


def test_codec_vs_clean_by_hand():
    """3 drops of 3 against 0 of 3: of the C(6, 3) = 20 ways to place the 3 drops among 6 samples one puts
    all of them in the suspect set: p = 1/20."""
    rows = codec_vs_clean((1.0, 3, 3), (0.0, 0, 3))
    assert rows == {
        "codec": 1.0,
        "codec_clean": 0.0,
        "p_value": pytest.approx(0.05),
        "n": 3.0,
        "n_clean": 3.0,
    }


def test_codec_context_is_other_samples_and_never_scored():
    """Each sample's context is k others of its set; its NLL with context is the mean of -log p(word |
    previous) over its own words, the first conditioned on the context's last word."""
    texts = ["a a b b", "c", "b c", "a"]
    order = context_shots(texts, seed=3)
    assert all(sorted(o) == sorted(texts[:i] + texts[i + 1 :]) for i, o in enumerate(order))
    shots = [o[:2] for o in order]  # everything fits the bigram's 32 tokens: the first k = 2 are taken
    model, tok = bigram()
    plain, context = context_nlls(ModelInputs(model, tok, texts, None, cache=SignalCache()), k=2, seed=3)
    for i, text in enumerate(texts):
        words = len(text.split())
        assert plain[i] == pytest.approx(-np.mean(np.log(word_probs(text))), abs=1e-6)
        joined = " ".join([*shots[i], text])
        assert context[i] == pytest.approx(-np.mean(np.log(word_probs(joined)[-words:])), abs=1e-6)


def test_pacost_by_hand():
    """Confidences 0.5, 0.4, 0.3 against variant means (0.25 + 0.35) / 2 = 0.3, 0.4 (its NaN variant
    left out) and none (the sample is left out): d = (0.2, 0). Mean 0.1, sd 0.1 sqrt 2: t = 1, and with
    one degree of freedom p = 1/2 - atan(1) / pi = 1/4."""
    original = -np.log([0.5, 0.4, 0.3])
    variants = -np.log(np.array([[0.25, 0.35], [0.4, np.nan], [np.nan, np.nan]]))
    gaps = confidence_gaps(original, variants)
    np.testing.assert_allclose(gaps, [0.2, 0.0, np.nan], atol=1e-12)
    got = gap_test(gaps)
    assert got["t"] == pytest.approx(1.0) and got["p_value"] == pytest.approx(0.25)
    assert got["n"] == 2.0 and got["mean_difference"] == pytest.approx(0.1)


def test_pacost_null_rate_sees_a_variant_bias():
    """Clean samples whose variants are all less likely by the same amount: every half rejects (the rate
    is 1, far above alpha: the bias the measured rate exists to show); fewer than 4 samples: NaN."""
    original = -np.log(np.full(8, 0.5))
    variants = -np.log(np.full((8, 2), 0.4))
    variants[::2] = -np.log(0.3)  # two spreads so a half has a non-zero spread when it mixes them
    gaps = confidence_gaps(original, variants)
    got = gap_null_rate(gaps, halvings=20, alpha=0.05)
    assert got["null_rejection_rate"] == 1.0 and got["null_halvings"] == 20.0
    assert math.isnan(gap_null_rate(gaps[:3])["null_rejection_rate"])


def test_rows_say_which_set_and_carry_the_tests_metrics():
    from leaklab.dataset_tests import rows
    from leaklab.dataset_tests.sharded_likelihood import run_sharded_test

    model, tok = bigram()
    texts = ["a b", "c", "b b a", "c a", "a", "b c c", "a c", "b", "c c", "a a"]
    labels = np.array([1, 0] * 5)
    got = rows.sharded_likelihood_rows(
        model, tok, texts, labels, shards=2, permutations=3, cache=SignalCache()
    )
    members = {r["metric"]: r["value"] for r in got if r["params"]["set"] == "members"}
    direct = run_sharded_test(model, tok, texts[::2], shards=2, permutations=3, cache=SignalCache())
    assert members == pytest.approx(direct, nan_ok=True)
    assert {r["params"]["set"] for r in got} == {"members", "non_members"}
    assert all(r["detector"] == r["column"] == "sharded_likelihood" for r in got)

    pacost_rows = {r["metric"]: r["value"] for r in rows.pacost_rows(np.full(10, 0.25), labels)}
    assert pacost_rows["mean_difference"] == pytest.approx(0.25) and pacost_rows["null_rejection_rate"] == 1.0
    # The codec column: drops (> 0) in 4 of 5 members, 1 of 5 non-members; NaN rows left out.
    drop = np.array([1.0, -1, 2, 0.5, 3, -2, 0.1, -3, 0.0, np.nan])  # members at even positions
    from_column = {r["metric"]: r["value"] for r in rows.codec_column_rows(drop, labels)}
    assert from_column["codec"] == pytest.approx(0.8) and from_column["codec_clean"] == pytest.approx(0.25)
    assert from_column["p_value"] == pytest.approx(two_rate_pvalue(4, 5, 1, 4))


def test_codec_and_pacost_detectors_on_the_bigram():
    """pacost_gap of "a a b b" with the variant "a b a b": confidences 2^-1.5 (NLL 1.5 ln 2) and 2^-1.25
    (p = 1/2, 1/2, 1/4, 1/2: NLL 1.25 ln 2), gap 2^-1.5 - 2^-1.25. codec_drop is NLL(x | C_x) - NLL(x)
    with the word-level values of test_codec_context_is_other_samples_and_never_scored."""
    from leaklab.detectors import score_detectors
    from leaklab.detectors.srdetection import SrInputs

    model, tok = bigram()
    texts = ["a a b b", "c", "b c", "a"]
    inputs = SrInputs(texts, [""] * 4, [["a b a b"], [], ["c b"], []], [[""], [], [""], []])
    scores = score_detectors(
        ["pacost", "codec:k=2,seed=3"],
        ModelInputs(model, tok, texts, settings=EvaluateConfig(), rule_inputs=inputs),
    )
    gap = scores.columns["pacost_gap"]
    assert gap[0] == pytest.approx(2**-1.5 - 2**-1.25, abs=1e-6) and np.isnan(gap[1])
    plain, context = context_nlls(ModelInputs(model, tok, texts, None, cache=SignalCache()), k=2, seed=3)
    np.testing.assert_allclose(scores.columns["codec_drop"], context - plain, atol=1e-9)


def test_audit_verdict_names_each_dataset_test_with_its_false_positive_baseline():
    """An audit's rows against its clean set: the verdict gives CoDeC's two shares and p, and PaCoST's p
    with the null rate measured on halves of the clean set."""
    from leaklab.audit import verdict
    from leaklab.dataset_tests.rows import dataset_test_rows_vs_clean

    suspect = {
        "codec_drop": np.array([1.0, 2, 3, 4, -1, 1]),
        "pacost_gap": np.array([0.2, 0.3, 0.1, 0.2, 0.4, 0.3]),
    }
    clean = {
        "codec_drop": np.array([-1.0, -2, 1, -1, -3, -2]),
        "pacost_gap": np.array([0.1, -0.1, 0, 0.2, -0.2, 0.05]),
    }
    rows = dataset_test_rows_vs_clean(suspect, clean)
    value = {(r["column"], r["metric"]): r["value"] for r in rows}
    assert value[("codec_test", "p_value")] == pytest.approx(two_rate_pvalue(5, 6, 1, 6))
    tested = {
        "model": "m",
        "n_tasks": 6,
        "benchmark": "b",
        "detectors": ["codec", "pacost"],
        "clean": "c",
        "n_clean": 6,
    }
    text = verdict(rows, tested)
    assert "CoDeC" in text and "0.83 of the benchmark's samples drop against 0.17 of the clean set's" in text
    rate = value[("pacost_test", "null_rejection_rate")]
    assert "PaCoST" in text and f"false-positive rate of {rate:.2f}" in text


@pytest.mark.slow  # trains the small run (minutes on a loaded machine)
def test_a_run_writes_the_dataset_test_rows_beside_dataset_inference(leaklab_cache, tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from conftest import SMALL_RUN
    from leaklab.rundir import RunDir

    repo = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}
    env.update(LEAKLAB_CACHE=leaklab_cache, HF_HUB_OFFLINE="1", WANDB_MODE="disabled")
    args = [sys.executable, "leaklab/train.py", "recipe=tiny_cpt", *SMALL_RUN, "train.epochs=1"]
    args += ["evaluate.detectors=[ppl,codec,pacost]", f"output_dir={tmp_path}"]
    out = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    (root,) = tmp_path.iterdir()
    rows = [r for r in RunDir(root).results_rows() if r["evaluation"] == "detection"]
    for step in {r["step"] for r in rows}:
        value = {(r["column"], r["metric"]): r["value"] for r in rows if r["step"] == step}
        assert ("dataset_inference", "p_value") in value
        assert 0 <= value[("codec_test", "p_value")] <= 1 and 0 <= value[("codec_test", "codec_clean")] <= 1
        assert 0 <= value[("pacost_test", "p_value")] <= 1
        assert 0 <= value[("pacost_test", "null_rejection_rate")] <= 1
        records = [
            json.loads(line) for line in RunDir(root).scores(step, "detection").read_text().splitlines()
        ]
        assert {"codec_drop", "pacost_gap"} <= set(records[0])
