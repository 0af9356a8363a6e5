"""Greedy continuations, cached: the generation service that evaluations share.

SrDetection's black box asks for them now; MRI, counterfactual similarity and extraction will too.
`greedy_continuations` decodes only the prompts the cache does not hold, sorted by length and batched
through the generation engine (`leaklab.signals.generation`), split over ranks under several processes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from leaklab.rundir import append_rows, read_rows


class GenerationCache:
    """Greedy continuations by (model fingerprint, tokenizer, prompt, length).

    In memory always; with `directory`, also one JSONL file per model fingerprint, so evaluating the same
    checkpoint again (`leaklab evaluate`, a resumed run) generates nothing. Greedy decoding is
    deterministic, which is what makes a cached continuation valid.
    """

    def __init__(self, directory: str | Path | None = None):
        self.directory = Path(directory) if directory is not None else None
        self._memory: dict[tuple[str, str], tuple[int, ...]] = {}
        self._loaded: set[str] = set()
        self.hits = 0
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
        if ids is None:
            self.misses += 1
        else:
            self.hits += 1
        return ids

    def put_many(self, model_fp: str, entries: dict[str, tuple[int, ...]], write: bool = True) -> None:
        for key, ids in entries.items():
            self._memory[(model_fp, key)] = tuple(ids)
        path = self._file(model_fp)
        if write and path is not None and entries:
            rows = [{"key": k, "ids": list(v)} for k, v in entries.items()]
            append_rows(path, rows, key=lambda r: r["key"])


_GENERATIONS = GenerationCache()


def _world(accelerator) -> tuple[int, int]:
    if accelerator is None or getattr(accelerator, "num_processes", 1) <= 1:
        return 0, 1
    return int(accelerator.process_index), int(accelerator.num_processes)


def greedy_continuations(
    model,
    tokenizer,
    prompts: Sequence[str],
    lengths: Sequence[int],
    *,
    batch_size: int = 64,
    generator=None,
    cache: GenerationCache | None = None,
    accelerator=None,
    info: dict[str, Any] | None = None,
) -> list[tuple[int, ...]]:
    """The greedy continuation (token ids, at most lengths[i]) of every prompt, cached.

    Missing rows are sorted by length and decoded in groups of `batch_size` (a group decodes as many
    steps as its longest row needs, so similar lengths waste little). Under several processes the
    groups are spread over the ranks and gathered; call it on every rank.
    """
    from leaklab.signals.logprobs import model_fingerprint, tokenizer_fingerprint

    if accelerator is not None:
        model = accelerator.unwrap_model(model)
    cache = _GENERATIONS if cache is None else cache
    model_fp, tok_fp = model_fingerprint(model), tokenizer_fingerprint(tokenizer)
    keys = [GenerationCache.key(tok_fp, p, n) for p, n in zip(prompts, lengths)]
    out: list[tuple[int, ...] | None] = [cache.get(model_fp, k) for k in keys]
    missing = sorted((i for i, r in enumerate(out) if r is None), key=lambda i: (lengths[i], i))
    groups = [missing[s : s + batch_size] for s in range(0, len(missing), batch_size)]
    rank, world = _world(accelerator)
    fresh: dict[int, tuple[int, ...]] = {}
    if groups:
        if generator is None:
            from leaklab.signals.generation import HFGenerator

            generator = HFGenerator(model, tokenizer, batch_size=batch_size)
        for group in groups[rank::world]:
            completions = generator.generate(
                [prompts[i] for i in group], max_new_tokens=max(lengths[i] for i in group), temperature=0.0
            )
            for i, (completion, *_) in zip(group, completions):
                ids = completion.token_ids
                if ids is None:  # a back-end that returns text only
                    ids = tokenizer(completion.text, add_special_tokens=False)["input_ids"]
                fresh[i] = tuple(int(t) for t in ids[: lengths[i]])
        if world > 1:
            _gather_ranks(fresh)
        cache.put_many(model_fp, {keys[i]: ids for i, ids in fresh.items()}, write=rank == 0)
        for i, ids in fresh.items():
            out[i] = ids
    if info is not None:
        info.update(prompts=len(prompts), cached=len(prompts) - len(missing), generated=len(missing))
    return [tuple(r) for r in out]


def _gather_ranks(fresh: dict) -> None:
    """Merge every rank's freshly generated entries into `fresh` (call on every rank)."""
    from accelerate.utils import gather_object

    for part in gather_object([fresh]):
        fresh.update(part)


def greedy_replies(
    model,
    tokenizer,
    prompts: Sequence[str],
    max_new_tokens: int,
    stop: Sequence[str] = (),
    *,
    model_fp: str | None = None,
    batch_size: int = 64,
    generator=None,
    cache: GenerationCache | None = None,
    accelerator=None,
    info: dict[str, Any] | None = None,
) -> list[str]:
    """The greedy reply (text, cut at the first `stop`) to every prompt, cached: the accuracy and MRI
    evaluations ask a checkpoint the same original tasks and share one decoding of them.

    The cache holds the reply's token ids (up to the stop, as the generator returns them) under the
    prompt and the stop sequences; a cached reply is read back exactly as the generator wrote it
    (decode without special tokens, then cut at the stop). `model_fp`: what identifies the weights
    (the caller's; default `model_fingerprint`). A back-end without token ids is not cached. Under
    several processes the missing prompts are spread over the ranks and gathered; call it on every rank.
    """
    from leaklab.signals.generation import cut_at_stop
    from leaklab.signals.logprobs import model_fingerprint, tokenizer_fingerprint

    if accelerator is not None:
        model = accelerator.unwrap_model(model)
    cache = _GENERATIONS if cache is None else cache
    model_fp = model_fp or model_fingerprint(model)
    tok_fp = tokenizer_fingerprint(tokenizer)
    keys = [
        GenerationCache.key(tok_fp, json.dumps(["reply", list(stop), p]), max_new_tokens) for p in prompts
    ]
    out: list[str | None] = []
    for key in keys:
        ids = cache.get(model_fp, key)
        out.append(
            None if ids is None else cut_at_stop(tokenizer.decode(ids, skip_special_tokens=True), stop)[0]
        )
    missing = [i for i, text in enumerate(out) if text is None]
    rank, world = _world(accelerator)
    fresh: dict[int, tuple[str, tuple[int, ...] | None]] = {}
    mine = missing[rank::world]
    if mine:
        if generator is None:
            from leaklab.signals.generation import HFGenerator

            generator = HFGenerator(model, tokenizer, batch_size=batch_size)
        completions = generator.generate([prompts[i] for i in mine], max_new_tokens, stop, 0.0)
        for i, (completion, *_) in zip(mine, completions):
            ids = None if completion.token_ids is None else tuple(int(t) for t in completion.token_ids)
            fresh[i] = (completion.text, ids)
    if missing and world > 1:
        _gather_ranks(fresh)
    entries = {keys[i]: ids for i, (_, ids) in fresh.items() if ids is not None}
    cache.put_many(model_fp, entries, write=rank == 0)
    for i, (text, _) in fresh.items():
        out[i] = text
    if info is not None:
        info.update(prompts=len(prompts), cached=len(prompts) - len(missing), generated=len(missing))
    return [str(text) for text in out]


def sampled_continuations(
    model,
    tokenizer,
    prompts: Sequence[str],
    *,
    n: int,
    max_new_tokens: int,
    temperature: float,
    seed: int = 0,
    batch_size: int = 64,
    generator=None,
    cache: GenerationCache | None = None,
    accelerator=None,
    info: dict[str, Any] | None = None,
) -> list[list[tuple[int, ...]]]:
    """`n` sampled continuations (token ids, at most `max_new_tokens`) of every prompt, cached.

    Sampling is not reproducible across batch layouts, so a cached sample is not what a fresh run would
    draw; it is an equally valid draw, and keeping it makes a re-evaluated checkpoint score the same.
    A prompt is decoded again only when one of its n samples is missing. All missing prompts go to the
    generator in one call (its batching decodes n x prompts rows `batch_size` at a time); under several
    processes the prompts are spread over the ranks and gathered.
    """
    from leaklab.signals.logprobs import model_fingerprint, tokenizer_fingerprint

    if n < 1 or temperature <= 0:
        raise ValueError(f"sampling needs n >= 1 and temperature > 0, got n={n}, temperature={temperature}")
    if accelerator is not None:
        model = accelerator.unwrap_model(model)
    cache = _GENERATIONS if cache is None else cache
    model_fp, tok_fp = model_fingerprint(model), tokenizer_fingerprint(tokenizer)
    # The sample index and the sampling settings are part of the key: greedy entries never collide.
    keys = [
        [
            GenerationCache.key(tok_fp, json.dumps(["sample", temperature, seed, j, p]), max_new_tokens)
            for j in range(n)
        ]
        for p in prompts
    ]
    out = [[cache.get(model_fp, k) for k in row] for row in keys]
    missing = [i for i, row in enumerate(out) if any(ids is None for ids in row)]
    rank, world = _world(accelerator)
    fresh: dict[int, list[tuple[int, ...]]] = {}
    mine = missing[rank::world]
    if mine:
        if generator is None:
            from leaklab.signals.generation import HFGenerator

            generator = HFGenerator(model, tokenizer, batch_size=batch_size)
        results = generator.generate(
            [prompts[i] for i in mine], max_new_tokens=max_new_tokens, temperature=temperature, n=n, seed=seed
        )
        for i, completions in zip(mine, results):
            rows = []
            for completion in completions:
                ids = completion.token_ids
                if ids is None:  # a back-end that returns text only
                    ids = tokenizer(completion.text, add_special_tokens=False)["input_ids"]
                rows.append(tuple(int(t) for t in ids[:max_new_tokens]))
            fresh[i] = rows
    if missing and world > 1:
        _gather_ranks(fresh)
    entries = {keys[i][j]: ids for i, rows in fresh.items() for j, ids in enumerate(rows)}
    cache.put_many(model_fp, entries, write=rank == 0)
    for i, rows in fresh.items():
        out[i] = rows
    if info is not None:
        info.update(prompts=len(prompts), cached=len(prompts) - len(missing), sampled=len(missing) * n)
    return [[tuple(ids) for ids in row] for row in out]
