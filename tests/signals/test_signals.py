"""The token-statistics engine against an independent per-text computation from full log-softmax."""

from __future__ import annotations

import functools
import logging

import numpy as np
import pytest
import torch

from leaklab.signals.logprobs import (
    ScoringSettings,
    SignalCache,
    TokenStats,
    _VocabMoments,
    compute_token_stats,
    lowercase_inputs,
    model_fingerprint,
    token_frequencies,
)

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i)\n",
    "class Foo:\n    def __init__(self):\n        self.x = None\n",
    "import os\nprint(os.path.join('a', 'b'))\n",
    "Return The Sum Of Two Numbers.\n",
]


@functools.cache
def tiny_tokenizer(vocab_size: int = 320, bos: bool = True, seed_text: str = ""):
    """A byte-level BPE trained on a few strings (optionally prepending BOS)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<bos>", "<eos>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([*CORPUS, seed_text] * 4, trainer=trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<bos> $A", special_tokens=[("<bos>", tok.token_to_id("<bos>"))]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>"
    )


def tiny_model(tokenizer, context: int = 64, seed: int = 0, hidden: int = 32):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=context,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # sharper, less uniform distributions than the default init
        model.lm_head.weight.mul_(20)
    return model.eval()


def reference_stats(model, tokenizer, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Independent: one text, one forward, full log-softmax, moments from explicit probabilities."""
    ids = tokenizer(text)["input_ids"]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), dim=-1)[:-1]
    targets = torch.tensor(ids[1:])
    p = logp.exp()
    mean = (p * logp).sum(-1)
    var = (p * logp * logp).sum(-1) - mean**2
    special = torch.tensor([t in tokenizer.all_special_ids for t in ids[1:]])
    keep = ~special
    tl = logp.gather(1, targets[:, None]).squeeze(1)
    return (targets[keep].numpy(), tl[keep].numpy(), mean[keep].numpy(), var[keep].numpy())


TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i)\n" * 2,
    "x",
    "class Foo:\n    pass\n",
    "import os\n",
]


@pytest.fixture(scope="module")
def lm():
    tok = tiny_tokenizer()
    return tiny_model(tok), tok


def test_engine_matches_full_softmax_reference(lm):
    model, tok = lm
    # Small blocks so that rows and vocabulary are both split, and batches hold several texts.
    settings = ScoringSettings(batch_tokens=64, row_chunk=5, logit_chunk=5 * 37)
    stats = compute_token_stats(model, tok, TEXTS, settings=settings, cache=SignalCache())
    for text, s in zip(TEXTS, stats):
        ids, lp, mean, var = reference_stats(model, tok, text)
        np.testing.assert_array_equal(s.token_ids, ids)
        np.testing.assert_allclose(s.logprob, lp, atol=2e-5)
        np.testing.assert_allclose(s.mean, mean, atol=2e-5)
        np.testing.assert_allclose(s.var, var, atol=2e-4, rtol=1e-4)
        assert (s.logprob <= 0).all() and (s.var >= 0).all()


def test_results_do_not_depend_on_batching_or_blocks(lm):
    model, tok = lm
    a = compute_token_stats(
        model, tok, TEXTS, settings=ScoringSettings(batch_tokens=10_000), cache=SignalCache()
    )
    b = compute_token_stats(
        model,
        tok,
        TEXTS,
        settings=ScoringSettings(batch_tokens=1, row_chunk=3, logit_chunk=3 * 50),
        cache=SignalCache(),
    )
    for x, y in zip(a, b):
        np.testing.assert_allclose(x.logprob, y.logprob, atol=1e-5)
        np.testing.assert_allclose(x.var, y.var, atol=1e-4)


def test_vocab_moments_merge_matches_one_block():
    torch.manual_seed(1)
    z = torch.randn(6, 50) * 4
    targets = torch.tensor([0, 49, 10, 25, 26, 3])
    one = _VocabMoments(targets, True)
    one.add(0, z.clone())
    many = _VocabMoments(targets, True)
    for v0 in range(0, 50, 7):
        many.add(v0, z[:, v0 : v0 + 7].clone())
    for x, y in zip(one.result(), many.result()):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)
    logp = torch.log_softmax(z.double(), -1)
    torch.testing.assert_close(one.result()[0].double(), logp[range(6), targets], atol=1e-5, rtol=0)


def test_no_distribution_requested(lm):
    model, tok = lm
    (s,) = compute_token_stats(model, tok, TEXTS[:1], distribution=False, cache=SignalCache())
    assert s.mean is None and s.var is None and s.n > 0


def test_empty_and_whitespace_texts(lm):
    model, tok = lm
    info = {}
    empty, spaces, newline = compute_token_stats(
        model, tok, ["", "   ", "\n\n"], cache=SignalCache(), info=info
    )
    assert empty.n == 0 and empty.logprob.dtype == np.float32 and np.isnan(empty.nll())
    # Whitespace is text like any other: with a BOS every token of it is scored.
    assert spaces.n == len(tok("   ", add_special_tokens=False)["input_ids"]) and np.isfinite(spaces.nll())
    assert newline.n > 0
    assert info["empty"] == 1


def test_first_token_unscored_without_bos():
    tok = tiny_tokenizer(bos=False)
    model = tiny_model(tok)
    (one, many) = compute_token_stats(model, tok, ["x", "def add(a, b):"], cache=SignalCache())
    assert one.n == 0  # nothing predicts a lone first token
    assert many.n == len(tok("def add(a, b):")["input_ids"]) - 1


def test_long_texts_windowed_score_every_token_once(lm, caplog):
    model, tok = lm
    text = "for i in range(10):\n    print(i)\n" * 12  # longer than the 64-token context
    n_tokens = len(tok(text)["input_ids"])
    assert n_tokens > 64
    info = {}
    with caplog.at_level(logging.WARNING):
        (s,) = compute_token_stats(model, tok, [text], cache=SignalCache(), info=info)
    assert s.n == n_tokens - 1 and s.n_windows > 1 and s.n_dropped == 0
    assert info["windowed"] == 1 and "longer than the context" in caplog.text
    # The first window is exactly the text's first 64 tokens scored alone.
    head = tok.decode(tok(text)["input_ids"][1:64])
    (first,) = compute_token_stats(model, tok, [head], cache=SignalCache())
    np.testing.assert_allclose(s.logprob[: first.n], first.logprob, atol=1e-5)


def test_long_texts_truncated_are_counted(lm):
    model, tok = lm
    text = "for i in range(10):\n    print(i)\n" * 12
    n_tokens = len(tok(text)["input_ids"])
    info = {}
    (s,) = compute_token_stats(
        model, tok, [text], settings=ScoringSettings(long_texts="truncate"), cache=SignalCache(), info=info
    )
    assert s.n == 63 and s.n_dropped == n_tokens - 64 and info["truncated"] == 1


def test_solution_span_scores_the_solution_tokenised_after_its_prompt(lm):
    import torch

    model, tok = lm
    prompt, solution = "def add(a, b):\n", "    return a + b\n"
    prompt_ids = tok(prompt)["input_ids"]
    solution_ids = tok(solution, add_special_tokens=False)["input_ids"]
    # The case that matters: tokenising the whole text at once merges tokens across the boundary.
    assert tok(prompt + solution)["input_ids"] != prompt_ids + solution_ids
    settings = ScoringSettings(scoring_span="solution")
    (sol,) = compute_token_stats(
        model, tok, [prompt + solution], prompts=[prompt], settings=settings, cache=SignalCache()
    )
    # By hand: one forward over prompt + solution tokens, log-probabilities of the solution's tokens.
    ids = torch.tensor([prompt_ids + solution_ids])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
    targets = torch.tensor(solution_ids)
    expected = logprobs[torch.arange(len(prompt_ids) - 1, ids.shape[1] - 1), targets].numpy()
    np.testing.assert_array_equal(sol.token_ids, solution_ids)
    np.testing.assert_allclose(sol.logprob, expected, atol=1e-5)
    with pytest.raises(ValueError, match="prefix"):
        compute_token_stats(model, tok, ["abc"], prompts=["xyz"], settings=settings, cache=SignalCache())
    with pytest.raises(ValueError, match="needs prompts"):
        compute_token_stats(model, tok, ["abc"], settings=settings, cache=SignalCache())


def test_cache_hits_in_memory_and_on_disk(lm, tmp_path, monkeypatch):
    model, tok = lm
    cache = SignalCache(tmp_path / "signals")
    first = compute_token_stats(model, tok, TEXTS, cache=cache)
    assert cache.misses == len(TEXTS)

    import leaklab.signals.logprobs as engine

    def fail(*args, **kwargs):
        raise AssertionError("recomputed a cached text")

    monkeypatch.setattr(engine, "_run_segments", fail)
    again = compute_token_stats(model, tok, TEXTS, cache=cache)
    from_disk = compute_token_stats(model, tok, TEXTS, cache=SignalCache(tmp_path / "signals"))
    for a, b, c in zip(first, again, from_disk):
        assert b is a
        np.testing.assert_array_equal(a.var, c.var)
    monkeypatch.undo()
    # A request without the distribution is served by an entry with it, not the other way round.
    cache2 = SignalCache()
    compute_token_stats(model, tok, TEXTS[:1], distribution=False, cache=cache2)
    (s,) = compute_token_stats(model, tok, TEXTS[:1], distribution=True, cache=cache2)
    assert s.has_distribution and cache2.misses == 2


def test_fingerprint_changes_with_weights_and_cache_misses(lm):
    model, tok = lm
    other = tiny_model(tok, seed=1)
    assert model_fingerprint(model) == model_fingerprint(tiny_model(tok))
    assert model_fingerprint(model) != model_fingerprint(other)
    cache = SignalCache()
    (a,) = compute_token_stats(model, tok, TEXTS[:1], cache=cache)
    (b,) = compute_token_stats(other, tok, TEXTS[:1], cache=cache)
    assert not np.allclose(a.logprob, b.logprob)
    with torch.no_grad():
        other.model.norm.weight.add_(1e-3)
    assert model_fingerprint(other) != model_fingerprint(tiny_model(tok, seed=1))


def test_train_mode_is_restored(lm):
    model, tok = lm
    model.train()
    try:
        compute_token_stats(model, tok, TEXTS[:1], cache=SignalCache())
        assert model.training
    finally:
        model.eval()


def test_full_logits_fallback_matches_split_path(lm):
    """A model whose logits are not head(hidden) (soft-capped here) is scored from its own logits."""
    model, tok = lm

    class SoftCapped(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner
            self.config = inner.config

        def get_decoder(self):
            return self.inner.get_decoder()

        def get_output_embeddings(self):
            return self.inner.get_output_embeddings()

        def forward(self, **kwargs):
            out = self.inner(**kwargs)
            out.logits = 5.0 * torch.tanh(out.logits / 5.0)
            return out

    capped = SoftCapped(model).eval()
    (s,) = compute_token_stats(capped, tok, TEXTS[:1], cache=SignalCache())
    ids = tok(TEXTS[0])["input_ids"]
    with torch.no_grad():
        logp = torch.log_softmax(capped(input_ids=torch.tensor([ids])).logits[0], -1)[:-1]
    np.testing.assert_allclose(s.logprob, logp[range(len(ids) - 1), ids[1:]].numpy(), atol=1e-5)


def test_bfloat16_autocast_close_to_float32(lm):
    model, tok = lm
    a = compute_token_stats(model, tok, TEXTS[:2], cache=SignalCache())
    b = compute_token_stats(
        model, tok, TEXTS[:2], settings=ScoringSettings(dtype="bfloat16"), cache=SignalCache()
    )
    for x, y in zip(a, b):
        assert y.logprob.dtype == np.float32
        assert abs(x.nll() - y.nll()) < 0.1 * max(1.0, x.nll())


def test_reference_model_with_another_tokenizer_is_retokenised(lm):
    model, tok = lm
    other_tok = tiny_tokenizer(vocab_size=290, seed_text="zzz qqq")
    other = tiny_model(other_tok, seed=3)
    text = "def add(a, b):\n    return a + b\n"
    (s,) = compute_token_stats(other, other_tok, [text], cache=SignalCache())
    ids, lp, _, _ = reference_stats(other, other_tok, text)
    np.testing.assert_array_equal(s.token_ids, ids)
    np.testing.assert_allclose(s.logprob, lp, atol=2e-5)


def test_lowercase_inputs_keep_prompts_as_prefixes():
    texts, prompts = lowercase_inputs(["ΑΣ Foo Bar", "Def X"], ["ΑΣ", "Def "])
    assert texts == ["ας foo bar", "def x"] and prompts == ["ας", "def "]
    assert all(t.startswith(p) for t, p in zip(texts, prompts))


def test_token_frequencies_count_corpus_tokens(tmp_path):
    tok = tiny_tokenizer()
    corpus = ["def add", "def add", "print"]
    table = token_frequencies(tok, corpus, cache_dir=tmp_path)
    expected = np.zeros(len(tok), dtype=np.int64)
    for text in corpus:
        for i in tok(text, add_special_tokens=False)["input_ids"]:
            expected[i] += 1
    np.testing.assert_array_equal(table.counts, expected)
    ids = np.array(tok("def", add_special_tokens=False)["input_ids"])
    np.testing.assert_allclose(table.probability(ids), (expected[ids] + 1) / (expected.sum() + len(tok)))
    assert list(tmp_path.glob("freq-*.npy"))


def test_token_frequencies_are_kept_in_the_leaklab_cache_for_later_runs(tmp_path, monkeypatch):
    """The table depends on the tokenizer and the corpus only: without a cache_dir it goes to the leaklab
    cache, and a later process (here: the in-memory table dropped) reads it instead of tokenizing again."""
    import leaklab.signals.logprobs as logprobs

    monkeypatch.setenv("LEAKLAB_CACHE", str(tmp_path))
    tok = tiny_tokenizer()
    corpus = ["def add", "print"]
    first = token_frequencies(tok, corpus)
    (saved,) = (tmp_path / "frequencies").glob("freq-*.npy")
    monkeypatch.setattr(logprobs, "_FREQUENCY_CACHE", {})
    np.save(saved, first.counts * 7)  # what is on disk is what a later process uses
    np.testing.assert_array_equal(token_frequencies(tok, corpus).counts, first.counts * 7)


def test_token_stats_nll():
    s = TokenStats(token_ids=np.array([1, 2]), logprob=np.array([-1.0, -3.0], dtype=np.float32))
    assert s.nll() == pytest.approx(2.0)


DISTRIBUTED_SCRIPT = """
import sys
import numpy as np
import torch
from accelerate import Accelerator
sys.path.insert(0, {tests!r})
from test_signals import TEXTS, tiny_model, tiny_tokenizer
from leaklab.detectors import run_detectors
from leaklab.detectors.inputs import ModelInputs
from leaklab.recipe import EvaluateConfig
from leaklab.signals.logprobs import ScoringSettings, SignalCache, compute_token_stats

import leaklab.signals.logprobs as engine

local = []
run_segments = engine._run_segments
engine._run_segments = lambda segments, *args: local.append(len(segments)) or run_segments(segments, *args)
torch.set_num_threads(1)
accelerator = Accelerator(cpu=True)
tok = tiny_tokenizer()
model = tiny_model(tok)
texts = TEXTS * 3
stats = compute_token_stats(model, tok, texts, settings=ScoringSettings(batch_tokens=64), accelerator=accelerator,
                            cache=SignalCache())
scores = run_detectors(["ppl", "minkpp"], ModelInputs(model, tok, texts, EvaluateConfig(), accelerator=accelerator, cache=SignalCache()))
out = {{f"lp{{i}}": s.logprob for i, s in enumerate(stats)}}
out.update({{f"var{{i}}": s.var for i, s in enumerate(stats)}})
out.update(scores)
np.savez({out!r} + f"/rank{{accelerator.process_index}}.npz", world=accelerator.num_processes, local=local, **out)
# Without this, gloo's worker threads may still drop their last reference to a gathered tensor while the
# interpreter is being torn down; that needs the GIL and aborts the process in C++ ("terminate called
# without an active exception", no traceback). A busy machine (pytest, CI) widens the window.
accelerator.wait_for_everyone()
accelerator.end_training()  # destroy_process_group(): joins those threads while Python is alive
"""


@pytest.mark.slow
def test_two_processes_split_and_gather(tmp_path):
    """Under torchrun with 2 CPU processes every rank returns the single-process results."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    # Imported here, not at the top: the launched ranks import this module without tests/ on their path.
    from conftest import free_port

    script = tmp_path / "score.py"
    script.write_text(DISTRIBUTED_SCRIPT.format(tests=str(Path(__file__).parent), out=str(tmp_path)))
    torchrun = Path(sys.executable).parent / "torchrun"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    port = free_port()
    proc = subprocess.run(
        [
            str(torchrun),
            "--nproc_per_node",
            "2",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(port),
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    from leaklab.detectors import run_detectors
    from leaklab.detectors.inputs import ModelInputs
    from leaklab.recipe import EvaluateConfig

    tok = tiny_tokenizer()
    model = tiny_model(tok)
    texts = TEXTS * 3
    single = compute_token_stats(model, tok, texts, cache=SignalCache())
    scores = run_detectors(
        ["ppl", "minkpp"], ModelInputs(model, tok, texts, settings=EvaluateConfig(), cache=SignalCache())
    )
    # Each rank forwarded about half of the segments (15 texts, one segment each, two signal passes).
    local = [np.load(tmp_path / f"rank{rank}.npz")["local"] for rank in (0, 1)]
    assert list(local[0] + local[1]) == [15, 15] and max(local[0]) <= 8
    for rank in (0, 1):
        got = np.load(tmp_path / f"rank{rank}.npz")
        assert int(got["world"]) == 2
        for i, s in enumerate(single):
            np.testing.assert_allclose(got[f"lp{i}"], s.logprob, atol=1e-5)
            np.testing.assert_allclose(got[f"var{i}"], s.var, atol=1e-4)
        for name, values in scores.items():
            np.testing.assert_allclose(got[name], values, rtol=1e-5)


def test_peft_wrapped_model_and_adapter_state(lm):
    from peft import LoraConfig, get_peft_model

    model, tok = lm
    peft_model = get_peft_model(tiny_model(tok), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():  # a trained adapter: B is no longer zero
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    cache = SignalCache()
    (adapted,) = compute_token_stats(peft_model, tok, TEXTS[:1], cache=cache)
    with peft_model.disable_adapter():
        (base,) = compute_token_stats(peft_model, tok, TEXTS[:1], cache=cache)
    (plain,) = compute_token_stats(model, tok, TEXTS[:1], cache=SignalCache())
    np.testing.assert_allclose(base.logprob, plain.logprob, atol=1e-5)  # adapters off = the base model
    assert not np.allclose(adapted.logprob, base.logprob, atol=1e-3)  # not a stale cache hit
    ids, lp, _, _ = reference_stats(peft_model, tok, TEXTS[0])
    np.testing.assert_allclose(adapted.logprob, lp, atol=2e-5)


def test_head_blocks_follow_the_device_unless_set():
    """CPU: small blocks that fit a cache; GPU: a 152k vocabulary in one slice (small blocks were
    launch-bound on an H200); set values win on either."""
    assert ScoringSettings().blocks(torch.device("cpu")) == (512, 1 << 20)
    rows, logits = ScoringSettings().blocks(torch.device("cuda"))
    assert logits // rows >= 152_064 and rows >= 1024
    assert ScoringSettings(row_chunk=7, logit_chunk=70).blocks(torch.device("cuda")) == (7, 70)
