"""Continuations, cached: the generation service detectors and evaluations share. Each function decodes
only the prompts the cache does not hold (`leaklab.signals.generation`), split over ranks under several
processes. `prompt_boundary` (a generator passed in: its own) and `sources`, the text each prompt is a
prefix of, decide where a prompt ends; under "heal" both are in the cache keys, so generations made
either way never mix. `info["prompt_boundary"]` counts what each prompt got.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leaklab.distributed import world
from leaklab.rundir import append_rows, read_rows
from leaklab.signals.generation import after_healed, cut_at_stop, prepare_prompt, resolve_prompt_boundary
from leaklab.signals.logprobs import all_gather, model_fingerprint, tokenizer_fingerprint

if TYPE_CHECKING:
    from accelerate import Accelerator
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from leaklab.signals.generation import Generator


class GenerationCache:
    """Continuations by (model fingerprint, tokenizer, prompt, length), in memory and, with `directory`,
    in one JSONL file per model fingerprint, so evaluating a checkpoint again generates nothing."""

    def __init__(self, directory: str | Path | None = None):
        self.directory = Path(directory) if directory is not None else None
        self._memory: dict[tuple[str, str], tuple[int, ...]] = {}
        self._loaded: set[str] = set()
        self.misses = 0

    @staticmethod
    def key(tokenizer_fp: str, prompt: str, max_new_tokens: int) -> str:
        payload = json.dumps([tokenizer_fp, prompt, max_new_tokens])
        return hashlib.sha256(payload.encode()).hexdigest()

    def _file(self, model_fp: str) -> Path | None:
        return None if self.directory is None else self.directory / f"{model_fp}.jsonl"

    def _load(self, model_fp: str) -> None:
        path = self._file(model_fp)
        if model_fp in self._loaded or path is None:
            return
        for row in read_rows(path):
            self._memory[(model_fp, row["key"])] = tuple(row["ids"])
        self._loaded.add(model_fp)

    def get(self, model_fp: str, key: str) -> tuple[int, ...] | None:
        self._load(model_fp)
        ids = self._memory.get((model_fp, key))
        self.misses += ids is None
        return ids

    def put_many(self, model_fp: str, entries: dict[str, tuple[int, ...]], write: bool = True) -> None:
        for key, ids in entries.items():
            self._memory[(model_fp, key)] = tuple(ids)
        path = self._file(model_fp)
        if write and path is not None and entries:
            rows = [{"key": k, "ids": list(v)} for k, v in entries.items()]
            append_rows(path, rows, key=lambda r: r["key"])


_GENERATIONS = GenerationCache()


def boundary_setting(generator, prompt_boundary: str) -> str:
    """What the prompts get: the generator's own setting when one is given (vLLM and OpenAI: "none");
    "auto" that nothing resolved (no training known) is "heal", so its cache keys are heal's."""
    if generator is not None:
        return getattr(generator, "prompt_boundary", "none")
    return resolve_prompt_boundary(prompt_boundary)


def _sources(prompts: Sequence[str], sources: Sequence[str | None] | None) -> list[str | None]:
    if sources is None:
        return [None] * len(prompts)
    if len(sources) != len(prompts):
        raise ValueError(f"got {len(sources)} sources for {len(prompts)} prompts")
    return list(sources)


def _generate(generator, boundary: str, prompts: list[str], sources: list[str | None], *args, **kwargs):
    """`generator.generate`, given the sources only where it prepares prompts (a generator without a
    `prompt_boundary`, such as one written before it existed, is called as before)."""
    if boundary == "none":
        return generator.generate(prompts, *args, **kwargs)
    return generator.generate(prompts, *args, sources=sources, **kwargs)


def _prompt_key(prompt: str, boundary: str, source: str | None) -> str:
    """The prompt part of a cache key: the prompt alone under "none" (the keys written before healing
    existed), else the setting and the source too."""
    return prompt if boundary == "none" else json.dumps(["prompt_boundary", boundary, prompt, source])


def _count(
    info: dict | None, tokenizer, prompts, boundary: str, sources, missing: int, **counts: int
) -> None:
    """Fill `info`: the prompts, how many were cached, `counts`, and what each prompt boundary got."""
    if info is not None:
        from leaklab.signals.generation import prompt_boundaries

        info.update(prompts=len(prompts), cached=len(prompts) - missing, **counts)
        info["prompt_boundary"] = dict(Counter(prompt_boundaries(tokenizer, prompts, boundary, sources)))


def _ids(tokenizer, completion, limit: int) -> tuple[int, ...]:
    """A completion's token ids, at most `limit` (a back-end that returns text only: its text's ids)."""
    ids = completion.token_ids
    if ids is None:
        ids = tokenizer(completion.text, add_special_tokens=False)["input_ids"]
    return tuple(int(t) for t in ids[:limit])


def _decode_missing(decoding: Decoding, model, boundary: str, prompts, sources, missing, convert, **kwargs):
    """This rank's share of the `missing` prompts decoded (`_generate` with `kwargs`), each prompt's
    completions as `convert(completions)`, merged with the other ranks' (call it on every rank)."""
    rank, n_ranks = world(decoding.accelerator)
    mine = missing[rank::n_ranks]
    fresh = {}
    if mine:
        chosen, chosen_sources = [prompts[i] for i in mine], [sources[i] for i in mine]
        generator = decoding.generator_for(model, boundary)
        completions = _generate(generator, boundary, chosen, chosen_sources, **kwargs)
        fresh = {i: convert(row) for i, row in zip(mine, completions)}
    if missing and n_ranks > 1:
        for part in all_gather(fresh, decoding.accelerator):  # every rank's fresh entries
            fresh.update(part)
    return fresh


@dataclass(frozen=True)
class Decoding:
    """Who decodes, and how, within one evaluation. None means: an HFGenerator on `model` (`batch_size`
    rows at a time), the process-wide cache, this process alone."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    generator: Generator | None = None
    cache: GenerationCache | None = None
    accelerator: Accelerator | None = None
    prompt_boundary: str = "heal"
    batch_size: int = 64

    @classmethod
    def of(cls, inputs: Any, batch_size: int = 64) -> Decoding:
        """The decoding of a detector's `ModelInputs` (its generator, generation cache and settings)."""
        return cls(
            inputs.model,
            inputs.tokenizer,
            inputs.generator,
            inputs.generation_cache,
            inputs.accelerator,
            inputs.settings.prompt_boundary,
            batch_size,
        )

    def unpacked(self) -> tuple[Any, Any, GenerationCache, str]:
        """(the model without its distributed wrapper, its fingerprint, the cache, the prompt boundary)."""
        model = self.model if self.accelerator is None else self.accelerator.unwrap_model(self.model)
        cache = _GENERATIONS if self.cache is None else self.cache
        return model, model_fingerprint(model), cache, boundary_setting(self.generator, self.prompt_boundary)

    def generator_for(self, model: Any, boundary: str) -> Generator:
        if self.generator is not None:
            return self.generator
        from leaklab.signals.generation import HFGenerator

        return HFGenerator(model, self.tokenizer, batch_size=self.batch_size, prompt_boundary=boundary)


def greedy_continuations(
    decoding: Decoding,
    prompts: Sequence[str],
    lengths: Sequence[int],
    *,
    info: dict[str, Any] | None = None,
    sources: Sequence[str | None] | None = None,
) -> list[tuple[int, ...]]:
    """The greedy continuation (token ids, at most lengths[i]) of every prompt, cached; callers that
    compare ids with a text's own tokens pass the text as the source. Missing rows are decoded in groups
    of similar length, spread over the ranks (call it on every rank)."""
    model, model_fp, cache, boundary = decoding.unpacked()
    tokenizer, batch_size = decoding.tokenizer, decoding.batch_size
    tok_fp = tokenizer_fingerprint(tokenizer)
    sources = _sources(prompts, sources)
    keys = [
        GenerationCache.key(tok_fp, _prompt_key(p, boundary, s), n)
        for p, s, n in zip(prompts, sources, lengths)
    ]
    out: list[tuple[int, ...] | None] = [cache.get(model_fp, k) for k in keys]
    missing = sorted((i for i, r in enumerate(out) if r is None), key=lambda i: (lengths[i], i))
    groups = [missing[s : s + batch_size] for s in range(0, len(missing), batch_size)]
    rank, n_ranks = world(decoding.accelerator)
    fresh: dict[int, tuple[int, ...]] = {}
    if groups:
        generator = decoding.generator_for(model, boundary)
        for group in groups[rank::n_ranks]:
            completions = _generate(
                generator,
                boundary,
                [prompts[i] for i in group],
                [sources[i] for i in group],
                max_new_tokens=max(lengths[i] for i in group),
                temperature=0.0,
            )
            for i, (completion, *_) in zip(group, completions):
                fresh[i] = _ids(tokenizer, completion, lengths[i])
        for part in all_gather(fresh, decoding.accelerator):  # [fresh] alone in a single process
            fresh.update(part)
        cache.put_many(model_fp, {keys[i]: ids for i, ids in fresh.items()}, write=rank == 0)
        for i, ids in fresh.items():
            out[i] = ids
    _count(info, tokenizer, prompts, boundary, sources, len(missing), generated=len(missing))
    return [tuple(r) for r in out]


def greedy_replies(
    decoding: Decoding,
    prompts: Sequence[str],
    max_new_tokens: int,
    stop: Sequence[str] = (),
    *,
    model_fp: str | None = None,
    info: dict[str, Any] | None = None,
    sources: Sequence[str | None] | None = None,
) -> list[str]:
    """The greedy reply (text, cut at the first `stop`) to every prompt, cached by its token ids (a
    back-end without ids is not cached), so the accuracy and MRI evaluations share one decoding.
    `model_fp`: the caller's fingerprint of the weights (default `model_fingerprint`). Call it on every rank.
    """
    model, own_fp, cache, boundary = decoding.unpacked()
    model_fp, tokenizer = model_fp or own_fp, decoding.tokenizer
    tok_fp = tokenizer_fingerprint(tokenizer)
    sources = _sources(prompts, sources)
    keys = [
        GenerationCache.key(
            tok_fp, json.dumps(["reply", list(stop), _prompt_key(p, boundary, s)]), max_new_tokens
        )
        for p, s in zip(prompts, sources)
    ]
    out: list[str | None] = []
    for key, prompt, source in zip(keys, prompts, sources):
        ids = cache.get(model_fp, key)
        if ids is None:
            out.append(None)
            continue
        healed = prepare_prompt(tokenizer, prompt, boundary, source).healed
        out.append(
            cut_at_stop(after_healed(tokenizer.decode(ids, skip_special_tokens=True), healed), stop)[0]
        )
    missing = [i for i, text in enumerate(out) if text is None]

    def text_and_ids(completions) -> tuple[str, tuple[int, ...] | None]:
        ids = completions[0].token_ids
        return completions[0].text, None if ids is None else tuple(int(t) for t in ids)

    greedy = dict(max_new_tokens=max_new_tokens, stop=stop, temperature=0.0)
    fresh = _decode_missing(decoding, model, boundary, prompts, sources, missing, text_and_ids, **greedy)
    entries = {keys[i]: ids for i, (_, ids) in fresh.items() if ids is not None}
    cache.put_many(model_fp, entries, write=world(decoding.accelerator)[0] == 0)
    for i, (text, _) in fresh.items():
        out[i] = text
    _count(info, tokenizer, prompts, boundary, sources, len(missing), generated=len(missing))
    return [str(text) for text in out]


def sampled_continuations(
    decoding: Decoding,
    prompts: Sequence[str],
    *,
    n: int,
    max_new_tokens: int,
    temperature: float,
    seed: int = 0,
    info: dict[str, Any] | None = None,
    sources: Sequence[str | None] | None = None,
) -> list[list[tuple[int, ...]]]:
    """`n` sampled continuations (token ids, at most `max_new_tokens`) of every prompt, cached: a cached
    sample is an equally valid draw, not the one a fresh run would make (sampling depends on the batch
    layout), and a re-evaluated checkpoint scores the same. A prompt is decoded again only when one of its
    n samples is missing, all such prompts in one generator call, spread over the ranks."""
    if n < 1 or temperature <= 0:
        raise ValueError(f"sampling needs n >= 1 and temperature > 0, got n={n}, temperature={temperature}")
    model, model_fp, cache, boundary = decoding.unpacked()
    tokenizer = decoding.tokenizer
    tok_fp = tokenizer_fingerprint(tokenizer)
    sources = _sources(prompts, sources)
    # The sample index and the sampling settings are part of the key: greedy entries never collide.
    keys = [
        [
            GenerationCache.key(
                tok_fp,
                json.dumps(["sample", temperature, seed, j, _prompt_key(p, boundary, s)]),
                max_new_tokens,
            )
            for j in range(n)
        ]
        for p, s in zip(prompts, sources)
    ]
    out = [[cache.get(model_fp, k) for k in row] for row in keys]
    missing = [i for i, row in enumerate(out) if any(ids is None for ids in row)]
    sampling = dict(max_new_tokens=max_new_tokens, temperature=temperature, n=n, seed=seed)

    def all_ids(completions) -> list[tuple[int, ...]]:
        return [_ids(tokenizer, c, max_new_tokens) for c in completions]

    fresh = _decode_missing(decoding, model, boundary, prompts, sources, missing, all_ids, **sampling)
    entries = {keys[i][j]: ids for i, rows in fresh.items() for j, ids in enumerate(rows)}
    cache.put_many(model_fp, entries, write=world(decoding.accelerator)[0] == 0)
    for i, rows in fresh.items():
        out[i] = rows
    _count(info, tokenizer, prompts, boundary, sources, len(missing), sampled=len(missing) * n)
    return [[tuple(ids) for ids in row] for row in out]
