"""Canary exposure and extraction (leaklab/memorization/canaries.py, leaklab/evaluations/canaries.py),
against values computed by hand with a stub model whose next-character distribution ignores context."""

import json
import math
import re
import string
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from leaklab.data.canaries import FORMATS, Canary, generate_canaries, plant
from leaklab.data.tasks import Task
from leaklab.evaluations.base import EvalContext
from leaklab.evaluations.canaries import Canaries, extraction_rows, training_documents
from leaklab.memorization.canaries import (
    Exposure,
    canaries_in_outputs,
    canary_exposure,
    canary_prompt,
    candidates_for,
    extract_canaries,
)
from leaklab.recipe import load_recipe

CHARS = [c for c in string.printable if c not in "\t\n\r\x0b\x0c"]


def char_tokenizer():
    """One token per printable character, no special tokens added."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, **{c: i + 1 for i, c in enumerate(CHARS)}}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<unk>")


class Unigram(torch.nn.Module):
    """log p(next = c) = bias[c] - logsumexp(bias), whatever came before."""

    def __init__(self, tokenizer, bias: dict[str, float]):
        super().__init__()
        values = torch.zeros(len(tokenizer))
        for c, b in bias.items():
            values[tokenizer.convert_tokens_to_ids(c)] = b
        self.bias = torch.nn.Parameter(values)

    def forward(self, input_ids, use_cache=False, **_):
        return SimpleNamespace(logits=self.bias.expand(*input_ids.shape, -1))


BIAS = {"a": 3.0, "b": 2.0, "c": 1.0}


@pytest.fixture(scope="module")
def stub():
    tokenizer = char_tokenizer()
    return Unigram(tokenizer, BIAS), tokenizer


def log_p(c: str, vocab_size: int) -> float:
    lse = math.log(sum(math.exp(b) for b in BIAS.values()) + (vocab_size - len(BIAS)))
    return BIAS.get(c, 0.0) - lse


def test_secret_logprob_is_the_sum_over_the_secret_and_its_closing_quote(stub):
    model, tokenizer = stub
    v = len(tokenizer)
    got = canary_exposure(model, tokenizer, Canary("c", "password", 'P = "', "aaaa"), ["abcz"], cache=None)
    assert got.logprob == pytest.approx(4 * log_p("a", v) + log_p('"', v), rel=1e-5)
    got = canary_exposure(model, tokenizer, Canary("c", "password", 'P = "', "abcz"), ["aaaa"], cache=None)
    assert got.logprob == pytest.approx(sum(log_p(c, v) for c in 'abcz"'), rel=1e-5)


def test_exposure_of_the_most_likely_secret_is_log2_m_plus_1(stub):
    model, tokenizer = stub
    canary = Canary("canary-000", "password", 'P = "', "aaaa")
    e = canary_exposure(model, tokenizer, canary, ["bbbb", "cccc", "dddd"])
    assert (e.rank, e.n_candidates) == (1, 3)
    assert e.exposure == pytest.approx(2.0)  # log2(3 + 1) - log2(1)


def test_exposure_of_a_secret_in_the_middle(stub):
    model, tokenizer = stub
    # Sums of biases: aaaa 12, abab 10, bbbb 8, cccc 4, dddd 0 (every string 4 characters + the quote),
    # so bbbb is third of the five: rank 3 among M = 4 candidates.
    canary = Canary("canary-001", "password", 'P = "', "bbbb")
    e = canary_exposure(model, tokenizer, canary, ["cccc", "aaaa", "dddd", "abab"])
    assert e.rank == 3
    assert e.exposure == pytest.approx(math.log2(5) - math.log2(3))
    # Less likely than every candidate: exposure 0.
    last = canary_exposure(model, tokenizer, Canary("c", "password", 'P = "', "dddd"), ["aaaa", "cccc"])
    assert (last.rank, last.exposure) == (3, 0.0)


def test_candidates_are_seeded_of_the_format_and_never_the_secret():
    canary = generate_canaries(2, ["email", "api_key"], seed=0)[1]
    got = candidates_for(canary, 200, seed=7)
    assert got == candidates_for(canary, 200, seed=7) != candidates_for(canary, 200, seed=8)
    assert len(got) == 200 and canary.secret not in got
    assert all(re.fullmatch(FORMATS["api_key"].pattern, s) for s in got)


def test_canaries_in_outputs_by_hand():
    a = Canary("a", "api_key", 'API_KEY = "sk-', "AbC123")
    b = Canary("b", "email", 'CONTACT_EMAIL = "', "x.y01@mail.test")
    outputs = ['key = "sk-AbC123"\n', "contact: x.y02@mail.test", ""]
    assert canaries_in_outputs(outputs, [a, b]) == {"a": True, "b": False}
    assert canaries_in_outputs([], [a]) == {"a": False}


def _canaries():
    return [
        Canary("canary-000", "api_key", 'API_KEY = "sk-', "S0", "t/0", 1),
        Canary("canary-001", "email", 'CONTACT_EMAIL = "', "S1", "t/1", 4),
        Canary("canary-002", "password", 'DB_PASSWORD = "', "S2", "t/2", 1),
    ]


def _value(rows, dose, metric):
    (row,) = [r for r in rows if r["dose"] == dose and r["metric"] == metric]
    return row["value"]


def test_rows_per_dose_by_hand():
    evaluation = Canaries()
    evaluation.canaries = _canaries()
    exposures = [
        Exposure("canary-000", -1.0, 1, 7, 3.0),
        Exposure("canary-001", -2.0, 2, 7, 2.0),
        Exposure("canary-002", -3.0, 8, 7, 0.0),
    ]
    out = evaluation.output(exposures, n_bootstrap=0, seed=0)
    assert _value(out.rows, 1, "canary_exposure_mean") == 1.5
    assert _value(out.rows, 4, "canary_exposure_mean") == 2.0
    assert _value(out.rows, 1, "n_canaries") == 2
    assert _value(out.rows, 1, "canary_rank1_fraction") == 0.5
    assert _value(out.rows, 4, "canary_exposure_max") == 3.0  # log2(7 + 1)
    assert _value(out.rows, 1, "canary_exposure_mean_ci_low") is None  # no resamples asked
    assert [r["member"] for r in out.records] == ["t/0", "t/1", "t/2"]
    with_ci = evaluation.output(exposures, n_bootstrap=200, seed=0).rows
    assert 0.0 <= _value(with_ci, 1, "canary_exposure_mean_ci_low") <= 1.5
    assert 1.5 <= _value(with_ci, 1, "canary_exposure_mean_ci_high") <= 3.0


def _context(tmp_path, recipe, canaries):
    manifest = {"member_ids": [], "non_member_ids": []}
    if canaries:
        manifest["canaries"] = [c.as_dict() for c in canaries]
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    run = SimpleNamespace(manifest=tmp_path / "manifest.json")
    return EvalContext(recipe=recipe, run=run, eval_set=None, log=lambda *a: None)


def test_extraction_rows_share_of_each_doses_canaries_found(tmp_path):
    ctx = _context(tmp_path, load_recipe("tiny_cpt"), _canaries())
    rows = extraction_rows(ctx, ["nothing", 'API_KEY = "sk-S0"', "S1 and again S1"])
    assert _value(rows, 1, "canary_extracted_untargeted_rate") == 0.5  # S0 of S0, S2
    assert _value(rows, 4, "canary_extracted_untargeted_rate") == 1.0
    assert extraction_rows(_context(tmp_path, load_recipe("tiny_cpt"), []), ["S0"]) == []


def test_the_evaluation_ranks_every_canary_of_the_manifest(tmp_path, stub):
    model, tokenizer = stub
    recipe = load_recipe(
        "tiny_cpt", ["inject.canaries=3", "inject.canary_candidates=9", "evaluate.n_bootstrap=0"]
    )
    canaries = [
        Canary("canary-000", "password", 'P = "', "aaaaaaaaaaaa", "t/0", 1),  # more likely than any draw
        Canary("canary-001", "password", 'P = "', "zzzzzzzzzzzz", "t/1", 2),
    ]
    evaluation = Canaries()
    evaluation.generator = lambda ctx, model, tokenizer: FakeGenerator({})
    evaluation.prepare(_context(tmp_path, recipe, canaries))
    out = evaluation.evaluate(_context(tmp_path, recipe, canaries), model, tokenizer, step=0)
    assert _value(out.rows, 1, "canary_exposure_mean") == pytest.approx(math.log2(10))
    ranks = [r["rank"] for r in out.records]
    assert ranks[0] == 1 and 1 <= ranks[1] <= 10
    assert np.isfinite([r["logprob"] for r in out.records]).all()
    with pytest.raises(Exception, match="needs a run trained with inject.canaries"):
        Canaries().prepare(_context(tmp_path, recipe, []))


# --------------------------------------------------------------------------- targeted extraction


class FakeGenerator:
    """generate(prompts, temperature=, n=, seed=) from a table: prompt -> (greedy output, samples);
    records every call."""

    def __init__(self, table: dict[str, tuple[str, list[str]]]):
        self.table = table
        self.calls: list[tuple[list[str], float, int]] = []

    def __call__(self, prompts, *, temperature, n, seed):
        self.calls.append((list(prompts), temperature, n))
        greedy_or_samples = [self.table.get(p, ("", [""] * n)) for p in prompts]
        if temperature == 0:
            return [[greedy] for greedy, _ in greedy_or_samples]
        return [samples[:n] for _, samples in greedy_or_samples]


def test_the_canary_prompt_is_its_document_up_to_the_secret_and_holds_none_of_it():
    first = Canary("canary-000", "api_key", FORMATS["api_key"].prefix, "AbCdEf123456GhIjKl789012", "t/0", 4)
    second = Canary("canary-001", "email", FORMATS["email"].prefix, "amber.pine07@mail.test", "t/0", 4)
    document = plant("\ndef f(x):\n    return x\n", [first.line, second.line])
    assert canary_prompt(first, document) == '\nAPI_KEY = "sk-'
    # The second canary's context is the line before it (the first canary) and its own prefix.
    assert canary_prompt(second, document) == '\nAPI_KEY = "sk-AbCdEf123456GhIjKl789012"\nCONTACT_EMAIL = "'
    for canary in (first, second):
        prompt = canary_prompt(canary, document)
        assert document.startswith(prompt) and document[len(prompt) :].startswith(canary.secret + '"')
        # No character of the secret: the prompt ends right before its first one.
        assert canary.secret not in prompt and canary.secret[:1] != prompt[-1:]
    with pytest.raises(ValueError, match="not in the member's document"):
        canary_prompt(first, "def f(x):\n    return x\n")


def test_extract_canaries_records_the_first_strategy_whose_output_holds_the_secret():
    a = Canary("a", "api_key", 'API_KEY = "sk-', "AAAA", "t/0", 4)
    b = Canary("b", "api_key", 'API_KEY = "sk-', "BBBB", "t/1", 1)  # the same prompt as a
    c = Canary("c", "email", 'CONTACT_EMAIL = "', "c.c01@mail.test", "t/2", 4)
    d = Canary("d", "password", 'DB_PASSWORD = "', "DDDD", "t/3", 1)
    prompts = {"a": a.prefix, "b": b.prefix, "c": c.prefix, "d": d.prefix}
    fake = FakeGenerator({
        a.prefix: ('AAAA"', ["BBBB", "xxxx", "AAAA"]),  # a greedy (first strategy wins), b sampled
        c.prefix: ("c.c02@mail.test", ["c.c01@mail.test\"", "DDDD"]),  # c sampled; DDDD not d's prompt
        d.prefix: ("DDD", ["DDxD", "dddd", "DD"]),  # d never
    })  # fmt: skip
    found = extract_canaries([a, b, c, d], prompts, fake, n_samples=3, seed=0)
    assert found == {"a": "greedy", "b": "sampled", "c": "sampled", "d": None}
    # Identical prompts are decoded once: one greedy and one sampling call over the three prompts.
    assert [(sorted(p), t, n) for p, t, n in fake.calls] == [
        (sorted(set(prompts.values())), 0.0, 1),
        (sorted(set(prompts.values())), 1.0, 3),
    ]
    greedy_only = FakeGenerator(fake.table)
    assert extract_canaries([a, b], prompts, greedy_only, n_samples=0, seed=0) == {"a": "greedy", "b": None}
    assert [t for _, t, _ in greedy_only.calls] == [0.0]


def test_the_evaluation_reports_targeted_extraction_per_dose_from_the_trained_documents(tmp_path, stub):
    """Prompts are the members' documents as continued pretraining planted them (prompt+solution, the
    canary before the first line), and the rows give the share extracted and by greedy per dose."""
    from leaklab.evaluations.base import build_eval_set

    model, tokenizer = stub
    recipe = load_recipe("tiny_cpt", ["inject.canaries=3", "inject.canary_candidates=4",
                                      "inject.canary_samples=2", "evaluate.n_bootstrap=0"])  # fmt: skip
    tasks = [Task(f"t/{i}", "humaneval", f"def f{i}(x):\n", "    return x\n") for i in range(3)]
    canaries = [
        Canary("canary-000", "password", 'P = "', "aaaa", "t/0", 1),
        Canary("canary-001", "password", 'Q = "', "bbbb", "t/1", 4),
        Canary("canary-002", "password", 'R = "', "cccc", "t/2", 4),
    ]
    ctx = _context(tmp_path, recipe, canaries)
    manifest = {"member_ids": ["t/0", "t/1", "t/2"], "non_member_ids": []}
    ctx.eval_set = build_eval_set(tasks, manifest, recipe.data.text_format)
    fake = FakeGenerator({'P = "': ('aaaa"', ["zz", "zz"]), 'Q = "': ("b", ["q", 'bbbb"'])})
    evaluation = Canaries()
    evaluation.generator = lambda ctx, model, tokenizer: fake
    evaluation.prepare(ctx)
    out = evaluation.evaluate(ctx, model, tokenizer, step=0)
    assert sorted(fake.calls[0][0]) == ['P = "', 'Q = "', 'R = "']  # the canary sits at the top
    assert _value(out.rows, 1, "canary_extracted_rate") == 1.0
    assert _value(out.rows, 1, "canary_extracted_greedy_rate") == 1.0
    assert _value(out.rows, 4, "canary_extracted_rate") == 0.5  # bbbb sampled, cccc not
    assert _value(out.rows, 4, "canary_extracted_greedy_rate") == 0.0
    by_id = {r["canary"]: r for r in out.records}
    assert [by_id[i]["extracted_by"] for i in sorted(by_id)] == ["greedy", "sampled", None]
    assert by_id["canary-000"]["greedy_output"] == 'aaaa"' and by_id["canary-000"]["prompt"] == 'P = "'
    # The documents are what training planted: the canary line before the task's first line.
    documents = training_documents(ctx, canaries, tokenizer)
    assert documents["t/1"] == 'Q = "bbbb"\ndef f1(x):\n    return x\n'
    assert "extracted dose=1 100%, dose=4 50%" in evaluation.summary(out.rows)
