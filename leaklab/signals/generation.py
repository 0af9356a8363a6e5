"""Batched text generation behind one interface (`Generator.generate`: `n` completions per prompt; greedy
decoding computes its n copies once). Back-ends: HFGenerator (a transformers causal LM in this process;
greedy outputs equal per-sample `model.generate` in fp32), VLLMGenerator (the `vllm` extra, not tested
here) and OpenAIGenerator (an OpenAI-compatible `/v1/completions` server). `prepare_prompt` alone decides
where a prompt ends (docs/evaluations.md#where-a-prompt-ends); only HFGenerator heals or cuts prompts.
Stop sequences, EOS and HFGenerator's speed levers: docs/detectors.md#the-generation-engine.
"""

from __future__ import annotations

import bisect
import inspect
import json
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from leaklab.progress import Progress


def _cache_kwarg(model: Any) -> str:
    """The name the model's forward takes its KV cache by: `cache` in recent transformers (5.24 here, which
    warns that `past_key_values` is removed in 5.40), `past_key_values` in earlier 5.x releases. Read
    from the model under any PEFT wrapper, whose own forward passes keyword arguments through."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


@dataclass(frozen=True)
class Completion:
    text: str  # the text after the prompt
    token_ids: tuple[int, ...] | None  # None where the back-end does not return ids
    finish_reason: str  # "stop" or "length"
    # The prompt's last characters that the first token id re-generated ("" : none; see prepare_prompt).
    healed: str = ""
    prompt_boundary: str = "none"  # what prepared the prompt: "cut" | "heal" | "none"


class Generator(Protocol):
    def generate(
        self,
        prompts: Sequence[str],
        max_new_tokens: int = 256,
        stop: Sequence[str] = (),
        temperature: float = 0.0,
        n: int = 1,
        seed: int = 0,
        sources: Sequence[str | None] | None = None,
    ) -> list[list[Completion]]: ...


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """`text` up to the earliest stop sequence, and whether one was found."""
    cuts = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)


# --------------------------------------------------------------------------- where a prompt ends

PROMPT_BOUNDARIES = ("heal", "none")
# What `evaluate.prompt_boundary` may say: "auto" picks "heal" or "none" from how the model learned its
# prompts (`resolve_prompt_boundary`). recipe.CHOICES says the same (a test holds them equal): importing
# the recipe here would close an import cycle (recipe -> detectors -> ... -> generation).
PROMPT_BOUNDARY_SETTINGS = ("auto", *PROMPT_BOUNDARIES)


def resolve_prompt_boundary(setting: str, learned: str | None = None) -> str:
    """`setting`, or under "auto" how the model learned its prompts (`learned`, from
    `training.stages.learned_prompt_boundary`), "heal" when unknown: see
    docs/evaluations.md#where-a-prompt-ends."""
    if setting not in PROMPT_BOUNDARY_SETTINGS:
        raise ValueError(
            f"unknown prompt_boundary {setting!r}; choose one of {', '.join(PROMPT_BOUNDARY_SETTINGS)}"
        )
    if setting != "auto":
        return setting
    return learned if learned in PROMPT_BOUNDARIES else "heal"


@dataclass(frozen=True)
class PreparedPrompt:
    """A prompt as the model reads it: its token ids; `healed`, the prompt's last characters the ids
    leave out (the first generated token must begin with them); `boundary`, "cut", "heal" or "none"."""

    ids: tuple[int, ...]
    healed: str = ""
    boundary: str = "none"


class TokenTexts:
    """Every ordinary token's text, sorted, so the tokens whose text begins with a string are found by
    bisection. Built once per tokenizer (`token_texts`). Special tokens and tokens that are a part of a
    UTF-8 character (they decode to U+FFFD alone) are left out: no healing produces them."""

    def __init__(self, tokenizer: Any):
        special = set(tokenizer.all_special_ids)
        decoded = tokenizer.batch_decode(
            [[i] for i in range(len(tokenizer))], clean_up_tokenization_spaces=False
        )
        self.text_of = {i: t for i, t in enumerate(decoded) if i not in special and t and "\ufffd" not in t}
        pairs = sorted((t, i) for i, t in self.text_of.items())
        self.texts = [t for t, _ in pairs]
        self.ids = [i for _, i in pairs]

    def extending(self, prefix: str) -> list[int]:
        """Ids of the tokens whose text begins with `prefix` (the sorted texts that do are adjacent)."""
        lo = bisect.bisect_left(self.texts, prefix)
        hi = lo
        while hi < len(self.texts) and self.texts[hi].startswith(prefix):
            hi += 1
        return self.ids[lo:hi]


_TOKEN_TEXTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def token_texts(tokenizer: Any) -> TokenTexts:
    """The tokenizer's `TokenTexts`, built on first use and kept while the tokenizer lives."""
    table = _TOKEN_TEXTS.get(tokenizer)
    if table is None:
        table = _TOKEN_TEXTS[tokenizer] = TokenTexts(tokenizer)
    return table


def prepare_prompt(
    tokenizer: Any, prompt: str, boundary: str = "heal", source: str | None = None
) -> PreparedPrompt:
    """Where a prompt ends for the model. "none": `tokenizer(prompt)` as it is. "heal": cut at the last
    token boundary of `source` (the text the prompt is a prefix of) within the prompt, else back off the
    prompt's last token; `healed` holds the characters left out. A prompt that cannot be prepared so is
    tokenized as it is, and says "none"."""
    boundary = resolve_prompt_boundary(boundary)
    if boundary == "heal":
        table = token_texts(tokenizer)
        if source is not None and len(source) > len(prompt) and source.startswith(prompt):
            cut = _cut_at_source(tokenizer, table, prompt, source)
            if cut is not None:
                return cut
        ids = tokenizer(prompt)["input_ids"]
        last = table.text_of.get(ids[-1]) if len(ids) > 1 else None
        if last and prompt.endswith(last):
            return PreparedPrompt(tuple(ids[:-1]), last, "heal")
        return PreparedPrompt(tuple(ids))
    return PreparedPrompt(tuple(tokenizer(prompt)["input_ids"]))


def _cut_at_source(tokenizer: Any, table: TokenTexts, prompt: str, source: str) -> PreparedPrompt | None:
    """The source's own tokens that end within the prompt, and the prompt characters after them (None
    when none end there or no token begins with what is left, e.g. without character offsets)."""
    try:
        encoded = tokenizer(source, return_offsets_mapping=True)
    except (NotImplementedError, ValueError):  # a slow tokenizer has no offsets
        return None
    kept, end = 0, 0
    for k, (_, stop) in enumerate(encoded["offset_mapping"]):
        if stop > len(prompt):
            break
        kept, end = k + 1, max(end, stop)
    left_out = prompt[end:]
    if kept == 0 or (left_out and not table.extending(left_out)):
        return None
    return PreparedPrompt(tuple(encoded["input_ids"][:kept]), left_out, "cut")


def prompt_boundaries(
    tokenizer: Any, prompts: Sequence[str], boundary: str, sources: Sequence[str | None] | None = None
) -> list[str]:
    """What `prepare_prompt` does to each prompt ("cut" | "heal" | "none"): for the records."""
    sources = [None] * len(prompts) if sources is None else sources
    if boundary == "none":
        return ["none"] * len(prompts)
    return [prepare_prompt(tokenizer, p, boundary, s).boundary for p, s in zip(prompts, sources)]


def after_healed(text: str, healed: str) -> str:
    """A generated text less the healed characters it begins with: the text after the original prompt."""
    return text[len(healed) :] if healed and text.startswith(healed) else text


# --------------------------------------------------------------------------- HF, in process


class PreallocatedLayer(DynamicLayer):
    """One layer's key/value cache in buffers sized for the whole generation: a transformers DynamicLayer
    whose `update` writes the new positions into the buffer and returns views, instead of concatenating
    a new copy of the whole cache each step."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int):
        super().__init__()
        self.key_buffer, self.value_buffer = keys, values
        self.length = length
        self.is_initialized = True
        self.dtype, self.device = keys.dtype, keys.device
        self._refresh_views()

    def _refresh_views(self) -> None:
        self.keys = self.key_buffer[:, :, : self.length]
        self.values = self.value_buffer[:, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        end = self.length + key_states.shape[-2]  # the buffers hold prompt + max_new_tokens: it fits
        self.key_buffer[:, :, self.length : end] = key_states
        self.value_buffer[:, :, self.length : end] = value_states
        self.length = end
        self._refresh_views()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.key_buffer = self.key_buffer[indices]
        self.value_buffer = self.value_buffer[indices]
        self._refresh_views()

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("PreallocatedLayer is only used for plain decoding")


def _merged_cache(
    chunks: list[tuple[list[int], Any]], batch: int, width: int, capacity: int, preallocate: bool
):
    """One left-padded cache for the whole decode batch from the prefill chunks' (rows, cache): each
    chunk's keys/values right-aligned at `width`, so every row's last prompt token sits at width - 1; the
    positions to the left hold zeros and are masked out."""
    first = chunks[0][1]
    layers = []
    for layer_idx in range(len(first.layers)):
        k0 = first.layers[layer_idx].keys
        shape = (batch, k0.shape[1], capacity if preallocate else width, k0.shape[3])
        # Only the prompt part needs zeros (masked pads must not hold NaN bits: 0 * NaN is NaN); the
        # positions after it are written before they are ever read.
        keys = torch.empty(shape, dtype=k0.dtype, device=k0.device)
        values = torch.empty(shape, dtype=k0.dtype, device=k0.device)
        keys[:, :, :width].zero_()
        values[:, :, :width].zero_()
        for rows, cache in chunks:
            k, v = cache.layers[layer_idx].keys, cache.layers[layer_idx].values
            index = torch.tensor(rows, device=k.device)
            keys[index, :, width - k.shape[2] : width] = k
            values[index, :, width - v.shape[2] : width] = v
        layers.append((keys, values))
    if preallocate:
        return Cache(layers=[PreallocatedLayer(k, v, width) for k, v in layers])
    return DynamicCache(ddp_cache_data=layers)


@dataclass(eq=False)
class HFGenerator:
    """Batched greedy / sampled decoding with a transformers causal LM (any device, any dtype).

    batch_size: rows decoded together (on a CPU a decode step costs about the same for 1 or 32 rows);
    prefill_tokens: padded tokens per prefill chunk; preallocate, drop_finished, sort_by_length: the
    speed levers (docs/detectors.md#the-generation-engine), switchable for the benchmark; top_p / top_k:
    nucleus / top-k sampling (1.0 / 0: off); logits_processor: `f(step, logits) -> logits` before each
    sampling step; prompt_boundary: where a prompt ends (`prepare_prompt`).
    """

    model: Any
    tokenizer: Any
    batch_size: int = 32
    prefill_tokens: int = 2048
    top_p: float = 1.0
    preallocate: bool = True
    drop_finished: bool = True
    sort_by_length: bool = True
    top_k: int = 0
    logits_processor: Callable[[int, torch.Tensor], torch.Tensor] | None = None
    prompt_boundary: str = "heal"

    def __post_init__(self) -> None:
        self.prompt_boundary = resolve_prompt_boundary(self.prompt_boundary)
        self.model.eval()
        self._cache_kwarg = _cache_kwarg(self.model)
        self.device = next(self.model.parameters()).device
        self.eos_ids = _eos_ids(self.model, self.tokenizer)
        pad_id = self.tokenizer.pad_token_id
        self.pad_id = pad_id if pad_id is not None else (self.eos_ids or [0])[0]
        self.max_length = getattr(self.model.config, "max_position_embeddings", None)

    def prepare(self, prompt: str, max_new_tokens: int, source: str | None = None) -> PreparedPrompt:
        """The prompt as the model reads it (`prepare_prompt`, special tokens included); prompts too long
        for the model's context keep their last tokens."""
        prepared = prepare_prompt(self.tokenizer, prompt, self.prompt_boundary, source)
        if self.max_length and len(prepared.ids) + max_new_tokens > self.max_length:
            return replace(prepared, ids=prepared.ids[-max(1, self.max_length - max_new_tokens) :])
        return prepared

    @torch.inference_mode()
    def generate(
        self,
        prompts: Sequence[str],
        max_new_tokens: int = 256,
        stop: Sequence[str] = (),
        temperature: float = 0.0,
        n: int = 1,
        seed: int = 0,
        sources: Sequence[str | None] | None = None,
    ) -> list[list[Completion]]:
        """`sources[i]`: the text prompts[i] is a prefix of, where the caller knows it (None: unknown)."""
        samples = 1 if temperature == 0 else n
        sources = [None] * len(prompts) if sources is None else list(sources)
        encoded = [self.prepare(p, max_new_tokens, s) for p, s in zip(prompts, sources, strict=True)]
        rows = [(i, j) for i in range(len(prompts)) for j in range(samples)]
        order = list(range(len(rows)))
        if self.sort_by_length:
            order.sort(key=lambda r: len(encoded[rows[r][0]].ids))
        generator = torch.Generator(device=self.device).manual_seed(seed)
        done: dict[int, Completion] = {}
        with Progress(len(order), "generation", unit="row", leave=False) as progress:
            for start in range(0, len(order), self.batch_size):
                group = order[start : start + self.batch_size]
                outs = self._decode_group(
                    [encoded[rows[r][0]] for r in group], max_new_tokens, stop, temperature, generator
                )
                done.update(zip(group, outs))
                progress.update(len(group))
        results: list[list[Completion]] = [[] for _ in prompts]
        for r, (i, _) in enumerate(rows):
            results[i].append(done[r])
        return [completions * (n // samples) for completions in results]

    def _prefill(self, prompts: list[list[int]], capacity: int) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """Run the prompts in chunks of similar length; return the merged cache, the attention mask and
        the last-position logits of every row."""
        width = max(len(p) for p in prompts)
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        chunks, chunk = [], []
        for i in order:  # grow a chunk while its padded size stays within the token budget
            if chunk and (len(chunk) + 1) * len(prompts[i]) > self.prefill_tokens:
                chunks.append(chunk)
                chunk = []
            chunk.append(i)
        chunks.append(chunk)

        logits = None
        caches = []
        for rows in chunks:
            ids, mask = self._left_pad([prompts[i] for i in rows])
            out = self.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                use_cache=True,
                logits_to_keep=1,
            )
            last = out.logits[:, -1, :].float()
            if logits is None:
                logits = torch.empty(len(prompts), last.shape[-1], device=self.device)
            logits[torch.tensor(rows, device=self.device)] = last
            caches.append((rows, out.past_key_values))
        lengths = torch.tensor([len(p) for p in prompts], device=self.device)
        mask = (torch.arange(width, device=self.device)[None, :] >= (width - lengths)[:, None]).long()
        cache = _merged_cache(caches, len(prompts), width, capacity, self.preallocate)
        return cache, mask, logits

    def _left_pad(self, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, p in enumerate(prompts):
            ids[row, width - len(p) :] = torch.tensor(p)
            mask[row, width - len(p) :] = 1
        return ids.to(self.device), mask.to(self.device)

    def _next_tokens(
        self, logits: torch.Tensor, temperature: float, generator: torch.Generator
    ) -> torch.Tensor:
        if temperature == 0:
            return logits.argmax(dim=-1)
        if 0 < self.top_k < logits.shape[-1]:
            kth = logits.topk(self.top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits / temperature, dim=-1)
        if self.top_p < 1.0:
            sorted_probs, sorted_idx = probs.sort(dim=-1, descending=True)
            outside = sorted_probs.cumsum(dim=-1) - sorted_probs > self.top_p  # keep the first token always
            sorted_probs[outside] = 0.0
            probs = torch.zeros_like(probs).scatter_(-1, sorted_idx, sorted_probs)
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)

    def _heal_first_step(self, logits: torch.Tensor, prepared: list[PreparedPrompt]) -> torch.Tensor:
        """Step 0: each healed row may only pick a token whose text begins with its left-out characters."""
        if not any(p.healed for p in prepared):
            return logits
        table = token_texts(self.tokenizer)
        logits = logits.clone()
        for row, p in enumerate(prepared):
            if p.healed:
                ids = [i for i in table.extending(p.healed) if i < logits.shape[-1]]
                allowed = torch.tensor(ids, dtype=torch.long, device=logits.device)
                kept = logits[row, allowed]
                logits[row] = float("-inf")
                logits[row, allowed] = kept
        return logits

    def _decode_group(
        self,
        prepared: list[PreparedPrompt],
        max_new_tokens: int,
        stop: Sequence[str],
        temperature: float,
        generator: torch.Generator,
    ) -> list[Completion]:
        prompts = [list(p.ids) for p in prepared]
        batch = len(prompts)
        if max_new_tokens <= 0:
            return [Completion("", (), "length", "", p.boundary) for p in prepared]
        width = max(len(p) for p in prompts)
        cache, mask, logits = self._prefill(prompts, capacity=width + max_new_tokens)
        positions = torch.tensor([len(p) for p in prompts], device=self.device)
        generated: list[list[int]] = [[] for _ in range(batch)]
        texts_so_far = [""] * batch
        finished: list[str | None] = [None] * batch
        active = list(range(batch))  # which original rows the current batch rows are

        for step in range(max_new_tokens):
            if self.logits_processor is not None:
                logits = self.logits_processor(step, logits)
            if step == 0:
                logits = self._heal_first_step(logits, prepared)
            next_tokens = self._next_tokens(logits, temperature, generator)
            # One device-to-host copy per step, not one per row.
            for row, token in zip(active, next_tokens.tolist(), strict=True):
                if finished[row] is not None:
                    continue  # kept in the batch only when drop_finished is off
                if token in self.eos_ids:
                    finished[row] = "stop"
                    continue
                generated[row].append(token)
                if stop:
                    texts_so_far[row] = self._text(generated[row], prepared[row].healed)
                    if cut_at_stop(texts_so_far[row], stop)[1]:
                        finished[row] = "stop"
            live = [k for k, row in enumerate(active) if finished[row] is None]
            if not live or step == max_new_tokens - 1:
                break
            if self.drop_finished and len(live) < len(active):
                keep = torch.tensor(live, device=self.device)
                cache.batch_select_indices(keep)
                mask, positions, next_tokens = mask[keep], positions[keep], next_tokens[keep]
                active = [active[k] for k in live]
            mask = torch.cat([mask, mask.new_ones(len(active), 1)], dim=1)
            out = self.model(
                input_ids=next_tokens[:, None],
                attention_mask=mask,
                position_ids=positions[:, None],
                **{self._cache_kwarg: cache},
                use_cache=True,
            )
            positions = positions + 1
            logits = out.logits[:, -1, :].float()

        completions = []
        for row, p in enumerate(prepared):
            text = texts_so_far[row] if stop else self._text(generated[row], p.healed)
            text, _ = cut_at_stop(text, stop)
            completions.append(
                Completion(text, tuple(generated[row]), finished[row] or "length", p.healed, p.boundary)
            )
        return completions

    def _text(self, ids: list[int], healed: str) -> str:
        return after_healed(self.tokenizer.decode(ids, skip_special_tokens=True), healed)


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    """The EOS id(s) of the first that sets one: the generation config, the model config, the tokenizer."""
    for owner in (getattr(model, "generation_config", None), model.config, tokenizer):
        eos = getattr(owner, "eos_token_id", None)
        if eos is not None:
            return list(eos) if isinstance(eos, (list, tuple)) else [int(eos)]
    return []


# --------------------------------------------------------------------------- vLLM (optional extra)


class VLLMGenerator:
    """vLLM back-end. Needs `pip install leaklab[vllm]` and a GPU; not exercised by leaklab's CPU tests.

    Prompts go to vLLM as text, tokenized as they are: no token healing here (`prompt_boundary` "none").
    """

    prompt_boundary = "none"

    def __init__(self, model: str, **llm_kwargs: Any):
        try:
            from vllm import LLM
        except ImportError as err:
            raise ImportError("the vllm back-end needs the vllm extra: pip install 'leaklab[vllm]'") from err
        self.llm = LLM(model=model, **llm_kwargs)

    def generate(
        self,
        prompts: Sequence[str],
        max_new_tokens: int = 256,
        stop: Sequence[str] = (),
        temperature: float = 0.0,
        n: int = 1,
        seed: int = 0,
        sources: Sequence[str | None] | None = None,  # not used: prompts are sent as they are
    ) -> list[list[Completion]]:
        from vllm import SamplingParams

        params = SamplingParams(
            n=n, temperature=temperature, max_tokens=max_new_tokens, stop=list(stop) or None, seed=seed
        )
        outputs = self.llm.generate(list(prompts), params)
        return [
            [
                Completion(c.text, tuple(c.token_ids), "length" if c.finish_reason == "length" else "stop")
                for c in out.outputs
            ]
            for out in outputs
        ]


# --------------------------------------------------------------------------- OpenAI-compatible HTTP


@dataclass(eq=False)
class OpenAIGenerator:
    """Completions from a server speaking the OpenAI `/v1/completions` API (vLLM serve, TGI, llama.cpp,
    OpenAI). Prompts are sent `batch_size` at a time; transient failures (HTTP 429 / 5xx, refused
    connections) are retried with back-off. Token ids are not returned (None). The server tokenizes the
    prompt text and the API has no constraint on the first token's text: no token healing here
    (`prompt_boundary` "none")."""

    prompt_boundary = "none"

    base_url: str
    model: str
    api_key: str | None = None
    batch_size: int = 16
    timeout: float = 300.0
    max_retries: int = 3

    def generate(
        self,
        prompts: Sequence[str],
        max_new_tokens: int = 256,
        stop: Sequence[str] = (),
        temperature: float = 0.0,
        n: int = 1,
        seed: int = 0,
        sources: Sequence[str | None] | None = None,  # not used: prompts are sent as they are
    ) -> list[list[Completion]]:
        results: list[list[Completion]] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = list(prompts[start : start + self.batch_size])
            body = {
                "model": self.model,
                "prompt": chunk,
                "max_tokens": max_new_tokens,
                "temperature": temperature,
                "n": n,
                "seed": seed,
            }
            if stop:
                body["stop"] = list(stop)[:4]  # the API takes at most four; the rest are applied here
            choices = self._post(body)["choices"]
            per_prompt: list[list[tuple[int, Completion]]] = [[] for _ in chunk]
            for position, choice in enumerate(choices):
                index = choice.get("index", position)
                text, hit = cut_at_stop(choice.get("text", ""), stop)
                reason = "stop" if hit or choice.get("finish_reason") != "length" else "length"
                per_prompt[index // n].append((index, Completion(text, None, reason)))
            results.extend([c for _, c in sorted(group, key=lambda x: x[0])] for group in per_prompt)
        return results

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        url = self.base_url.rstrip("/") + "/completions"
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode()
        for attempt in range(self.max_retries + 1):
            request = urllib.request.Request(url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as err:
                retry = err.code == 429 or err.code >= 500
                if not retry or attempt == self.max_retries:
                    detail = err.read().decode(errors="replace")[:500]
                    raise RuntimeError(f"{url} answered HTTP {err.code}: {detail}") from err
            except urllib.error.URLError as err:
                if attempt == self.max_retries:
                    raise RuntimeError(
                        f"cannot reach {url}: {err.reason}. Is the server running? The recipe key "
                        "for the endpoint takes its base URL (e.g. http://127.0.0.1:8000/v1)."
                    ) from err
            time.sleep(min(2**attempt, 30))
        raise AssertionError("unreachable")


# --------------------------------------------------------------------------- choosing a back-end

BACKENDS = {"hf": HFGenerator, "vllm": VLLMGenerator, "openai": OpenAIGenerator}


def make_generator(backend: str, *args: Any, **kwargs: Any) -> Generator:
    """`make_generator("hf", model, tokenizer)`, `make_generator("vllm", "path/or/name")`,
    `make_generator("openai", "http://127.0.0.1:8000/v1", "model-name")`."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown generation backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    return BACKENDS[backend](*args, **kwargs)
