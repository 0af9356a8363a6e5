"""Generation engine: batched greedy decoding equals per-sample `model.generate` (padding, chunked
prefill, cache merging and row dropping change nothing), stop sequences, EOS, sampling, and the
OpenAI-compatible back-end against a local HTTP server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from leaklab.signals.generation import (
    Completion,
    HFGenerator,
    OpenAIGenerator,
    VLLMGenerator,
    cut_at_stop,
    make_generator,
)

PROMPTS = [
    "def add(a, b):\n    return",
    "x",  # one token: the longest left padding in the batch
    'def is_palindrome(text: str) -> bool:\n    """True if text reads the same backwards."""\n',
    "for i in range(10):\n    print(i",
    "import os\nimport sys\n\n\ndef main():\n    path = sys.argv[1]\n    for name in os.listdir(path):\n",
]


@pytest.fixture(scope="module")
def tiny():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<pad>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(PROMPTS * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.3,  # peaky attention: a wrong position or mask changes the argmax
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    # One thread: the model is tiny, and on a shared CPU two threads stall each other on every small op.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield LlamaForCausalLM(config).eval(), tokenizer
    torch.set_num_threads(threads)


@torch.inference_mode()
def reference(model, tokenizer, prompts, max_new_tokens, eos_token_id=None):
    """Per-sample greedy `model.generate`, new tokens up to (not including) EOS."""
    eos = tokenizer.eos_token_id if eos_token_id is None else eos_token_id
    outputs = []
    for prompt in prompts:
        enc = tokenizer(prompt, return_tensors="pt")
        out = model.generate(
            **enc,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=tokenizer.pad_token_id,
        )
        ids = out[0, enc["input_ids"].shape[1] :].tolist()
        outputs.append(ids[: ids.index(eos)] if eos in ids else ids)
    return outputs


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"batch_size": 2},
        {"prefill_tokens": 30},  # several prefill chunks merged into one cache
        {"preallocate": False},
        {"sort_by_length": False, "drop_finished": False},
    ],
)
def test_greedy_equals_per_sample_generate(tiny, settings):
    model, tokenizer = tiny
    expected = reference(model, tokenizer, PROMPTS, 12)
    # The prompts as they are: model.generate has no token healing.
    results = HFGenerator(model, tokenizer, prompt_boundary="none", **settings).generate(
        PROMPTS, max_new_tokens=12
    )
    assert [list(r[0].token_ids) for r in results] == expected
    assert [r[0].text for r in results] == [tokenizer.decode(ids) for ids in expected]
    assert all(r[0].finish_reason == "length" for r in results if len(r[0].token_ids) == 12)


def test_the_kv_cache_goes_by_the_name_this_transformers_takes(tiny):
    """Recent transformers (5.24 here) take forward's KV cache as `cache` and warn that `past_key_values`
    goes in 5.40: decoding passes the cache by the name the installed version takes, and warns nothing."""
    import inspect
    import warnings

    model, tokenizer = tiny
    takes_cache = "cache" in inspect.signature(model.forward).parameters
    generator = HFGenerator(model, tokenizer, prompt_boundary="none")
    assert generator._cache_kwarg == ("cache" if takes_cache else "past_key_values")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        generator.generate(PROMPTS[:2], max_new_tokens=4)
    assert not [w for w in caught if "past_key_values" in str(w.message)]


def test_eos_ends_a_row_and_the_others_are_unchanged(tiny):
    model, tokenizer = tiny
    plain = reference(model, tokenizer, PROMPTS, 10)
    eos = plain[0][3]  # make the 4th token of the first prompt's greedy output the end of text
    expected = reference(model, tokenizer, PROMPTS, 10, eos_token_id=eos)
    assert len(expected[0]) == 3 and any(len(ids) == 10 for ids in expected)  # rows end at different steps
    generator = HFGenerator(model, tokenizer, batch_size=8, prompt_boundary="none")
    generator.eos_ids = [eos]
    results = generator.generate(PROMPTS, max_new_tokens=10)
    assert [list(r[0].token_ids) for r in results] == expected
    assert results[0][0].finish_reason == "stop"


def test_stop_sequences_cut_the_text(tiny):
    model, tokenizer = tiny
    full = HFGenerator(model, tokenizer).generate(PROMPTS, max_new_tokens=16)
    text = full[2][0].text
    assert len(text) > 6
    stop = text[3:6]  # a stop sequence that the greedy continuation of prompt 2 contains
    cut = HFGenerator(model, tokenizer).generate(PROMPTS, max_new_tokens=16, stop=[stop, "\x00never"])
    completion = cut[2][0]
    assert completion.text == text[: text.index(stop)] and completion.finish_reason == "stop"
    # Ids run up to the token that completed the stop sequence, and are a prefix of the full ids.
    ids = completion.token_ids
    assert full[2][0].token_ids[: len(ids)] == ids and stop in tokenizer.decode(list(ids))
    assert stop not in tokenizer.decode(list(ids[:-1]))
    for before, after in zip(full, cut):  # rows whose text has no stop sequence are unchanged
        if stop not in before[0].text:
            assert after[0] == before[0]


def test_sampling_is_seeded_and_top_p_tiny_is_greedy(tiny):
    model, tokenizer = tiny
    generator = HFGenerator(model, tokenizer)
    a = generator.generate(PROMPTS[:2], max_new_tokens=8, temperature=1.0, n=3, seed=1)
    b = generator.generate(PROMPTS[:2], max_new_tokens=8, temperature=1.0, n=3, seed=1)
    c = generator.generate(PROMPTS[:2], max_new_tokens=8, temperature=1.0, n=3, seed=2)
    assert a == b and a != c
    assert [len(x) for x in a] == [3, 3]
    assert len({x.token_ids for x in a[0]}) > 1  # three samples of one prompt differ
    greedy = generator.generate(PROMPTS, max_new_tokens=8)
    nucleus = HFGenerator(model, tokenizer, top_p=1e-9).generate(PROMPTS, max_new_tokens=8, temperature=0.7)
    assert nucleus == greedy


def test_greedy_n_copies_and_zero_tokens(tiny):
    model, tokenizer = tiny
    results = HFGenerator(model, tokenizer).generate(PROMPTS[:2], max_new_tokens=5, n=2)
    assert [len(r) for r in results] == [2, 2] and results[0][0] == results[0][1]
    assert [c.text for c in results[1]] == [results[1][0].text] * 2
    empty = HFGenerator(model, tokenizer, prompt_boundary="none").generate(PROMPTS[:2], max_new_tokens=0)
    assert empty == [[Completion("", (), "length")], [Completion("", (), "length")]]


def test_cut_at_stop():
    assert cut_at_stop("abc\ndef\nclass X", ["\nclass", "\ndef"]) == ("abc", True)
    assert cut_at_stop("abc", ["x", ""]) == ("abc", False)


def test_unknown_backend_and_missing_vllm():
    with pytest.raises(ValueError, match="unknown generation backend"):
        make_generator("tgi")
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="leaklab\\[vllm\\]"):
            VLLMGenerator("some/model")
    else:
        pytest.skip("vllm is installed here; its back-end is exercised elsewhere")


# --------------------------------------------------------------------------- OpenAI-compatible


class FakeCompletions(BaseHTTPRequestHandler):
    """Answers /v1/completions like an OpenAI-compatible server; fails as told by `fail_next`."""

    requests: list = []
    fail_next: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
        )
        if type(self).fail_next:
            code = type(self).fail_next.pop(0)
            self.send_response(code)
            self.end_headers()
            self.wfile.write(b'{"error": "try again"}')
            return
        choices = []
        for i, prompt in enumerate(body["prompt"]):
            for j in range(body["n"]):
                # Server-side stop handling is not trusted: the client cuts at "STOP" itself too.
                choices.append(
                    {
                        "index": i * body["n"] + j,
                        "text": f"<{prompt}:{j}> STOP tail",
                        "finish_reason": "length",
                    }
                )
        choices.reverse()  # order is given by `index`, not by position
        payload = json.dumps({"choices": choices}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture()
def server():
    FakeCompletions.requests, FakeCompletions.fail_next = [], []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeCompletions)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_openai_backend_batches_and_cuts_at_stop(server):
    generator = OpenAIGenerator(server, "tiny-model", api_key="k", batch_size=2)
    results = generator.generate(
        ["p0", "p1", "p2"], max_new_tokens=7, stop=["STOP"], temperature=0.5, n=2, seed=3
    )
    assert [[c.text for c in row] for row in results] == [
        ["<p0:0> ", "<p0:1> "],
        ["<p1:0> ", "<p1:1> "],
        ["<p2:0> ", "<p2:1> "],
    ]
    assert all(c.finish_reason == "stop" and c.token_ids is None for r in results for c in r)
    assert [r["body"]["prompt"] for r in FakeCompletions.requests] == [["p0", "p1"], ["p2"]]
    first = FakeCompletions.requests[0]
    assert first["path"] == "/v1/completions" and first["auth"] == "Bearer k"
    body = first["body"]
    assert (
        body["model"],
        body["max_tokens"],
        body["temperature"],
        body["n"],
        body["stop"],
        body["seed"],
    ) == (
        "tiny-model",
        7,
        0.5,
        2,
        ["STOP"],
        3,
    )


def test_openai_backend_retries_then_reports(server):
    FakeCompletions.fail_next = [503]
    generator = OpenAIGenerator(server, "m", max_retries=2)
    generator_result = generator.generate(["p"], max_new_tokens=3)
    assert (
        generator_result[0][0].text == "<p:0> STOP tail" and generator_result[0][0].finish_reason == "length"
    )
    assert len(FakeCompletions.requests) == 2
    FakeCompletions.fail_next = [400]
    with pytest.raises(RuntimeError, match="HTTP 400"):
        generator.generate(["p"], max_new_tokens=3)


def test_openai_backend_unreachable_says_so():
    generator = OpenAIGenerator("http://127.0.0.1:9/v1", "m", max_retries=0, timeout=2)
    with pytest.raises(RuntimeError, match="cannot reach"):
        generator.generate(["p"], max_new_tokens=1)
