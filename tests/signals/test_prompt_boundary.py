"""Where a prompt ends for the model (`generation.prepare_prompt`): token healing and cutting at the
source text's token boundaries, on the builtin byte-level BPE tokenizer, and what it changes on a tiny
model trained on a few functions: a prompt that ends in a bare "\\n" (as HumanEval's do) stops inside the
newline-plus-indentation token the model was trained on."""

from __future__ import annotations

import pytest
import torch

from leaklab.signals.generation import HFGenerator, prepare_prompt, prompt_boundaries, token_texts
from leaklab.similarity.text import edit_similarity_truth_len as edit_similarity

DOCS = [
    'def add(a, b):\n    """Return the sum of a and b."""\n    total = a + b\n    return total\n',
    'def is_even(n):\n    """True when n is even."""\n    if n % 2 == 0:\n        return True\n    return False\n',
    'def first_word(text):\n    """The first word of text."""\n    words = text.split()\n    return words[0]\n',
    'def count_vowels(s):\n    """How many vowels s holds."""\n    found = [c for c in s if c in "aeiou"]\n'
    "    return len(found)\n",
]


def prompt_of(doc: str) -> str:
    """The signature and docstring, ending in "\\n" like a HumanEval prompt."""
    return doc[: doc.index('"""\n') + 4]


@pytest.fixture(scope="module")
def tokenizer(leaklab_cache):
    from leaklab.models.tiny import build_tokenizer

    return build_tokenizer(1024, cache_dir=leaklab_cache)  # the small builtin tokenizer (SMOKE_TINY)


def texts_of(tokenizer, ids) -> list[str]:
    return [tokenizer.decode([i]) for i in ids]


def test_constraint_allows_exactly_the_tokens_extending_the_left_out_text(tokenizer):
    special = set(tokenizer.all_special_ids)
    every = {i: tokenizer.decode([i]) for i in range(len(tokenizer)) if i not in special}
    for left_out in ("\n", "\n   ", " re", "):", "x"):
        expected = {i for i, text in every.items() if text.startswith(left_out)}
        assert set(token_texts(tokenizer).extending(left_out)) == expected
    newline = {every[i] for i in token_texts(tokenizer).extending("\n")}
    assert "\n   " in newline and "\n       " in newline  # the merged newline + indentation tokens


def test_a_prompt_ending_in_a_newline_is_healed_or_cut(tokenizer):
    doc = DOCS[0]
    prompt = prompt_of(doc)
    plain = tokenizer(prompt)["input_ids"]
    assert texts_of(tokenizer, plain)[-1] == "\n"  # the bare newline the model never saw at a line end
    # In the text itself the newline is merged with the next line's indentation.
    assert "\n   " in texts_of(tokenizer, tokenizer(doc)["input_ids"])

    healed = prepare_prompt(tokenizer, prompt, "heal")
    assert (healed.boundary, healed.healed, list(healed.ids)) == ("heal", "\n", plain[:-1])
    cut = prepare_prompt(tokenizer, prompt, "heal", source=doc)
    source_ids = tokenizer(doc)["input_ids"]
    assert (cut.boundary, cut.healed) == ("cut", "\n")
    assert list(cut.ids) == source_ids[: len(cut.ids)] and texts_of(
        tokenizer, [source_ids[len(cut.ids)]]
    ) == ["\n   "]
    as_is = prepare_prompt(tokenizer, prompt, "none")
    assert (as_is.boundary, as_is.healed, list(as_is.ids)) == ("none", "", plain)
    # A prompt that ends on a token boundary of its source keeps the source's own tokens, nothing left out.
    exact = doc[: doc.index(" total")]  # the text's tokens there: '"""', "\n   ", " total"
    at_edge = prepare_prompt(tokenizer, exact, "heal", source=doc)
    assert (at_edge.boundary, at_edge.healed) == ("cut", "")
    assert list(at_edge.ids) == source_ids[: len(at_edge.ids)]
    # Nothing to back off: the prompt is only its BOS; a prompt not a prefix of its source is healed.
    assert prepare_prompt(tokenizer, "", "heal").boundary == "none"
    assert prepare_prompt(tokenizer, prompt, "heal", source="other text").boundary == "heal"
    assert prompt_boundaries(tokenizer, [prompt, prompt], "heal", [doc, None]) == ["cut", "heal"]
    assert prompt_boundaries(tokenizer, [prompt], "none") == ["none"]
    with pytest.raises(ValueError, match="prompt_boundary"):
        prepare_prompt(tokenizer, prompt, "cut")


@pytest.fixture(scope="module")
def trained(tokenizer):
    """The builtin tiny architecture (SMOKE_TINY sizes) trained on DOCS until it reproduces them:
    each document is one sequence, BOS + text + EOS, as CPT packs documents."""
    from leaklab.models.tiny import init_llama

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model = init_llama(tokenizer, hidden_size=64, num_layers=1, num_heads=2, intermediate_size=128)
    rows = [tokenizer(d)["input_ids"] + [tokenizer.eos_token_id] for d in DOCS]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    for r, row in enumerate(rows):
        ids[r, : len(row)] = torch.tensor(row)
        labels[r, : len(row)] = torch.tensor(row)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(100):  # about a CPU second; the loss is ~0.04 by then
        loss = model(input_ids=ids, attention_mask=(labels != -100).long(), labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    yield model.eval()
    torch.set_num_threads(threads)


def similarities(model, tokenizer, boundary: str, sources=None) -> list[float]:
    prompts = [prompt_of(d) for d in DOCS]
    completions = HFGenerator(model, tokenizer, prompt_boundary=boundary).generate(
        prompts, max_new_tokens=40, sources=sources
    )
    return [edit_similarity(c[0].text, d[len(p) :]) for c, d, p in zip(completions, DOCS, prompts)]


@pytest.mark.slow
def test_healing_recovers_what_a_bare_newline_prompt_hides(trained, tokenizer):
    """Greedy continuation of each document's prompt (ending in "\\n"): as it is, the model is past a
    token it never saw at a line end; healed, its first token re-writes the newline with the
    indentation and the document comes back. Measured: none 0.0x-0.3, heal and cut ~1.0 (see report)."""
    as_is = similarities(trained, tokenizer, "none")
    healed = similarities(trained, tokenizer, "heal")
    cut = similarities(trained, tokenizer, "heal", sources=DOCS)
    print(f"edit similarity  none {as_is}  heal {healed}  cut {cut}")
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    assert mean(healed) > mean(as_is) + 0.3 and mean(cut) > mean(as_is) + 0.3
    assert mean(healed) > 0.9

    prompts = [prompt_of(d) for d in DOCS]
    for c, doc, prompt in zip(HFGenerator(trained, tokenizer).generate(prompts, 40), DOCS, prompts):
        completion = c[0]
        assert completion.prompt_boundary == "heal" and completion.healed == "\n"
        # The first generated token is a merged newline + indentation token ...
        assert tokenizer.decode([completion.token_ids[0]]).startswith("\n ")
        # ... and the completion's text starts right after the original prompt.
        assert tokenizer.decode(list(completion.token_ids)) == "\n" + completion.text
        assert doc.startswith(prompt + completion.text[:20])


@pytest.mark.slow
def test_healing_is_batched_and_applies_to_sampling_only_at_the_first_step(trained, tokenizer):
    prompts = [prompt_of(d) for d in DOCS]
    one_by_one = [HFGenerator(trained, tokenizer).generate([p], 12)[0][0] for p in prompts]
    batched = HFGenerator(trained, tokenizer, batch_size=3, prefill_tokens=40).generate(prompts, 12)
    assert [b[0] for b in batched] == one_by_one
    # Sampling at a high temperature: every sample's first token still extends "\n".
    sampled = HFGenerator(trained, tokenizer).generate(prompts, 4, temperature=5.0, n=6, seed=3)
    firsts = {tokenizer.decode([c.token_ids[0]]) for row in sampled for c in row}
    assert all(text.startswith("\n") for text in firsts) and len(firsts) > 1
    none = HFGenerator(trained, tokenizer, prompt_boundary="none").generate(prompts, 4, temperature=5.0, n=6)
    assert any(not tokenizer.decode([c.token_ids[0]]).startswith("\n") for row in none for c in row)
