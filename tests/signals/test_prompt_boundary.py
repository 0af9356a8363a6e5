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


def fit(tokenizer, rows: list[tuple[list[int], list[int]]]):
    """The builtin tiny architecture (SMOKE_TINY sizes) trained on `rows` (ids, loss mask) until it
    reproduces them: 100 full-batch steps, about a CPU second; the loss is ~0.04 by then."""
    from leaklab.models.tiny import init_llama

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = init_llama(tokenizer, hidden_size=64, num_layers=1, num_heads=2, intermediate_size=128)
    width = max(len(row) for row, _ in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for r, (row, mask) in enumerate(rows):
        ids[r, : len(row)] = torch.tensor(row)
        labels[r, : len(row)] = torch.tensor([t if m else -100 for t, m in zip(row, mask)])
        attention[r, : len(row)] = 1
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(100):
        loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.set_num_threads(threads)
    return model.eval()


@pytest.fixture(scope="module")
def trained(tokenizer):
    """Trained on DOCS as CPT packs documents: each one sequence, BOS + text + EOS, loss everywhere."""
    rows = [tokenizer(d)["input_ids"] + [tokenizer.eos_token_id] for d in DOCS]
    return fit(tokenizer, [(row, [1] * len(row)) for row in rows])


@pytest.fixture(scope="module")
def trained_sft(tokenizer):
    """Trained on DOCS as the sft stage encodes an example (`sft._encode`): the prompt tokenized alone,
    then the answer's tokens and EOS, loss on the answer only."""
    from leaklab.training.sft import _encode

    return fit(tokenizer, [_encode(tokenizer, prompt_of(d), d[len(prompt_of(d)) :], True) for d in DOCS])


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


def auto_at(stage: str, step: int) -> str:
    """evaluate.prompt_boundary "auto" as the evaluator resolves it for a checkpoint of a `stage` run."""
    from leaklab.evaluate import with_prompt_boundary
    from leaklab.recipe import load_recipe

    recipe = load_recipe({"sft": "tiny_sft", "cpt": "tiny_cpt"}[stage])
    assert recipe.evaluate.prompt_boundary == "auto", "auto is the default"
    return with_prompt_boundary(recipe, step).evaluate.prompt_boundary


@pytest.mark.slow
def test_auto_boundary_follows_how_the_model_learned_its_prompts(trained, trained_sft, tokenizer):
    """A model fine-tuned on prompts tokenized apart learned to continue right at the prompt's last
    token: healing that token away breaks it, so "auto" must not heal its checkpoints; a model trained
    on packed text is the other way round (test above), so "auto" heals its checkpoints. Measured (see
    report): sft model none 1.0 on all four, heal 0.32-0.93 (mean 0.69); packed model heal ~1.0."""
    sft_auto = similarities(trained_sft, tokenizer, auto_at("sft", 250), sources=DOCS)
    sft_none = similarities(trained_sft, tokenizer, "none")
    sft_heal = similarities(trained_sft, tokenizer, "heal", sources=DOCS)
    print(f"sft model: auto {sft_auto}  none {sft_none}  heal {sft_heal}")
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    assert sft_auto == sft_none and mean(sft_none) > 0.9
    assert mean(sft_heal) < mean(sft_none) - 0.2, "the regression auto avoids: healing an sft model's prompts"
    cpt_auto = similarities(trained, tokenizer, auto_at("cpt", 250), sources=DOCS)
    assert cpt_auto == similarities(trained, tokenizer, "heal", sources=DOCS)
    # The base model (step 0) learned packed text whatever the run's stage: it is healed.
    assert auto_at("sft", 0) == "heal"


def test_the_recipe_and_the_generation_engine_accept_the_same_prompt_boundaries():
    from leaklab.recipe import CHOICES
    from leaklab.signals.generation import PROMPT_BOUNDARY_SETTINGS

    assert tuple(CHOICES["evaluate.prompt_boundary"]) == PROMPT_BOUNDARY_SETTINGS
