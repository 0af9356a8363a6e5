"""Token statistics of a causal LM over a list of texts: the one signal pass every gray-box detector reads.

For each scored token x_t: logprob_t = log p(x_t | x_<t) and, with `distribution=True`, mean_t and var_t,
the mean and variance of log p_t(v) under the model's next-token distribution p_t (Min-K%++'s mu_t and
sigma_t^2). Which tokens are scored, long texts, batches, head blocks (an online softmax over vocabulary
slices: no [tokens x vocab] array), the cache and precision: docs/detectors.md#the-signal-engine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import math
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from leaklab.distributed import world
from leaklab.progress import Progress, say_once
from leaklab.rundir import cache_root, write_atomic

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class ScoringSettings:
    """How the signal pass runs. Only the fields in `cache_key` change results; the rest change speed."""

    batch_tokens: int = 8192  # padded tokens per forward batch
    dtype: str = "float32"  # float32 | bfloat16 | float16 (autocast)
    scoring_span: str = "text"  # text | solution
    max_length: int | None = None  # tokens per forward; None: the model's context length
    long_texts: str = "window"  # window | truncate
    row_chunk: int | None = None  # hidden states per head block; None: by device (see `blocks`)
    logit_chunk: int | None = None  # logits per block (row_chunk x vocabulary slice); None: by device
    progress: bool | None = None  # False: silent; else a bar on a terminal, a line per 30 s / 10% in a log

    @classmethod
    def from_config(cls, config: Any = None) -> ScoringSettings:
        """Settings from an `EvaluateConfig` (or any object with same-named attributes); None = defaults."""
        values = {f.name: getattr(config, f.name) for f in dataclasses.fields(cls) if hasattr(config, f.name)}
        return cls(**values)

    def check(self) -> None:
        """The sizes; the recipe checks the choices (evaluate.scoring_span, dtype, long_texts)."""
        if self.batch_tokens < 1 or any(v is not None and v < 1 for v in (self.row_chunk, self.logit_chunk)):
            raise ValueError("batch_tokens, row_chunk and logit_chunk must be positive")
        if self.max_length is not None and self.max_length < 2:
            raise ValueError(f"max_length must be at least 2, got {self.max_length}")

    def blocks(self, device: torch.device) -> tuple[int, int]:
        """(rows, logits) per head block: the set values, else sized for the device (see the docs)."""
        on_cpu = device.type == "cpu"
        rows = self.row_chunk or (512 if on_cpu else 2048)
        logits = self.logit_chunk or (1 << 20 if on_cpu else 1 << 29)
        return rows, logits


_AUTOCAST = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class TokenStats:
    """Statistics of the scored tokens of one text, in text order. Arrays are read-only."""

    token_ids: np.ndarray  # int64 [n]
    logprob: np.ndarray  # float32 [n]: log p(x_t | x_<t)
    mean: np.ndarray | None = None  # float32 [n]: E_{v~p_t} log p_t(v)
    var: np.ndarray | None = None  # float32 [n]: Var_{v~p_t} log p_t(v), >= 0
    n_windows: int = 1  # forward windows the text needed (> 1: longer than the context)
    n_dropped: int = 0  # scorable tokens past the context that were not scored (long_texts="truncate")

    @property
    def n(self) -> int:
        return int(self.logprob.shape[0])

    @property
    def has_distribution(self) -> bool:
        return self.mean is not None and self.var is not None

    def nll(self) -> float:
        """Mean negative log-likelihood of the scored tokens (log perplexity); NaN when none was scored."""
        return float(-self.logprob.astype(np.float64).mean()) if self.n else math.nan

    def nbytes(self) -> int:
        arrays = [self.token_ids, self.logprob, self.mean, self.var]
        return sum(a.nbytes for a in arrays if a is not None)


def _freeze(stats: TokenStats) -> TokenStats:
    for a in (stats.token_ids, stats.logprob, stats.mean, stats.var):
        if a is not None:
            a.setflags(write=False)
    return stats


# --------------------------------------------------------------------------- fingerprints + cache


# Config fields that change no output of the forward pass (bookkeeping, provenance, switches the trainer
# flips; padding is never attended under right padding with causal attention).
OUTPUT_NEUTRAL_CONFIG = frozenset(
    {
        "_name_or_path",
        "_commit_hash",
        "transformers_version",
        "architectures",
        "torch_dtype",  # the parameters' own dtypes are hashed
        "dtype",
        "use_cache",
        "pad_token_id",
        "output_attentions",
        "output_hidden_states",
        "return_dict",
        "gradient_checkpointing",
        "_attn_implementation_autoset",
    }
)


def model_fingerprint(model: torch.nn.Module, sample: int = 4096) -> str:
    """The key of the signal, generation and verdict caches (docs/detectors.md#the-signal-engine): a
    model in training and its reloaded checkpoint share it. Unmaterialised (sharded) parameters give a
    fresh random value: no reuse."""
    if hasattr(model, "module"):  # a DDP / DeepSpeed wrapper
        model = model.module
    h = hashlib.sha256(type(model).__name__.encode())
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_dict"):
        fields = {k: v for k, v in config.to_dict().items() if k not in OUTPUT_NEUTRAL_CONFIG}
        h.update(json.dumps(fields, sort_keys=True, default=str).encode())
    samples = []
    for name, p in model.named_parameters():
        if p.numel() == 0:
            log.warning("parameter %s is not materialised (sharded?): no cache reuse for this model", name)
            return "unmaterialised-" + uuid.uuid4().hex
        h.update(f"{name}{tuple(p.shape)}{p.dtype}".encode())
        flat = p.detach().reshape(-1)
        step = max(1, flat.numel() // sample)
        samples.append(flat[::step][:sample].float())
    if samples:
        h.update(torch.cat(samples).cpu().numpy().tobytes())
    for name, module in model.named_modules():
        if hasattr(module, "disable_adapters") and hasattr(module, "active_adapters"):
            h.update(f"{name}:{module.disable_adapters}:{module.active_adapters}".encode())
    return h.hexdigest()[:32]


def tokenizer_fingerprint(tokenizer) -> str:
    """A hash of everything that decides token ids: the fast tokenizer's JSON, else its vocabulary."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        payload = backend.to_str()
    else:
        payload = json.dumps(sorted(tokenizer.get_vocab().items())) + type(tokenizer).__name__
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


class SignalCache:
    """Token statistics by key: an in-memory LRU (bounded by bytes) and, with `directory`, .npz files."""

    def __init__(self, directory: str | Path | None = None, max_bytes: int = 512 << 20):
        self.directory = Path(directory) if directory is not None else None
        self.max_bytes = max_bytes
        self._memory: OrderedDict[str, TokenStats] = OrderedDict()
        self._bytes = 0
        self.misses = 0

    def get(self, key: str, need_distribution: bool) -> TokenStats | None:
        stats = self._memory.get(key)
        if stats is None and self.directory is not None:
            stats = self._read(key)
            if stats is not None:
                self._remember(key, stats)
        if stats is None or (need_distribution and not stats.has_distribution):
            self.misses += 1
            return None
        self._memory.move_to_end(key)
        return stats

    def put(self, key: str, stats: TokenStats, write_disk: bool = True) -> None:
        self._remember(key, stats)
        if write_disk and self.directory is not None:
            self._write(key, stats)

    def _remember(self, key: str, stats: TokenStats) -> None:
        old = self._memory.pop(key, None)
        if old is not None:
            self._bytes -= old.nbytes()
        self._memory[key] = stats
        self._bytes += stats.nbytes()
        while self._bytes > self.max_bytes and len(self._memory) > 1:
            _, dropped = self._memory.popitem(last=False)
            self._bytes -= dropped.nbytes()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.npz"

    def _write(self, key: str, stats: TokenStats) -> None:
        arrays = {"token_ids": stats.token_ids, "logprob": stats.logprob}
        if stats.has_distribution:
            arrays.update(mean=stats.mean, var=stats.var)
        arrays["counts"] = np.array([stats.n_windows, stats.n_dropped], dtype=np.int64)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        write_atomic(self._path(key), buf.getvalue())

    def _read(self, key: str) -> TokenStats | None:
        try:
            with np.load(self._path(key)) as z:
                n_windows, n_dropped = (int(c) for c in z["counts"])
                return _freeze(
                    TokenStats(
                        token_ids=z["token_ids"],
                        logprob=z["logprob"],
                        mean=z.get("mean"),
                        var=z.get("var"),
                        n_windows=n_windows,
                        n_dropped=n_dropped,
                    )
                )
        except (OSError, ValueError, KeyError):  # a missing file, or a damaged one: recomputed, not trusted
            return None


_DEFAULT_CACHE = SignalCache()


def as_cache(cache: SignalCache | str | Path | None) -> SignalCache:
    if cache is None:
        return _DEFAULT_CACHE
    return cache if isinstance(cache, SignalCache) else SignalCache(cache)


# --------------------------------------------------------------------------- segments


@dataclass
class _Segment:
    """One forward window of one text: ids[start:end] is fed, tokens at `positions` are scored."""

    text_index: int
    window_index: int
    ids: np.ndarray  # int64 [end - start]
    positions: np.ndarray  # int64, positions inside the window (>= 1) whose token is scored


@dataclass
class _TextPlan:
    segments: list[_Segment] = field(default_factory=list)
    n_windows: int = 1
    n_dropped: int = 0


def _plan_text(
    index: int, ids: np.ndarray, scorable: np.ndarray, max_length: int, long_texts: str
) -> _TextPlan:
    """Cut one tokenised text into windows so that every scorable position (>= 1) is scored once."""
    n = len(ids)
    windows = [(0, min(n, max_length), 1)]  # (start, end, first position scored)
    if long_texts == "window":
        stride = max(1, max_length // 2)
        done = max_length
        while done < n:
            end = min(done + stride, n)
            windows.append((end - max_length, end, done))
            done = end
    plan = _TextPlan(n_windows=len(windows), n_dropped=int(scorable[windows[-1][1] :].sum()))
    for w, (start, end, first) in enumerate(windows):
        absolute = np.arange(first, end)[scorable[first:end]]
        if len(absolute):
            plan.segments.append(_Segment(index, w, ids[start:end], absolute - start))
    return plan


def _tokenise(
    tokenizer, texts: Sequence[str], prompts: Sequence[str] | None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(ids, scorable mask) per text; with prompts, the prompt's tokens then the rest's, only the rest
    scorable (see the module docstring)."""

    def encode(parts: list[str], special: bool) -> tuple[list[list[int]], list[list[int]]]:
        enc = tokenizer(
            parts,
            add_special_tokens=special,
            return_special_tokens_mask=True,
            return_attention_mask=False,
            verbose=False,
        )
        return enc["input_ids"], enc["special_tokens_mask"]

    if prompts is None:
        pieces = list(zip(*encode(list(texts), True)))
    else:
        prompt_ids, _ = encode(list(prompts), True)
        rest_ids, rest_special = encode([t[len(p) :] for t, p in zip(texts, prompts)], False)
        # Prompt tokens are context: marked like special tokens, never scored.
        pieces = [(p + r, [1] * len(p) + list(m)) for p, r, m in zip(prompt_ids, rest_ids, rest_special)]
    out = []
    for ids, special in pieces:
        scorable = np.asarray(special, dtype=bool) == 0
        if len(scorable):
            scorable[0] = False  # nothing predicts the first token of a sequence
        out.append((np.asarray(ids, dtype=np.int64), scorable))
    return out


def plan_batches(
    tokenizer, texts: Sequence[str], max_length: int, batch_tokens: int, long_texts: str = "truncate"
) -> list[list[np.ndarray]]:
    """The token ids the engine forwards for `texts`, in its batches (planned as `compute_token_stats`
    plans them): what a bare forward pass must run to be compared with the engine."""
    segments = []
    for i, (ids, scorable) in enumerate(_tokenise(tokenizer, texts, None)):
        segments += _plan_text(i, ids, scorable, max_length, long_texts).segments
    return [[seg.ids for seg in batch] for batch in _batches(segments, batch_tokens)]


def _batches(segments: Sequence[_Segment], batch_tokens: int) -> list[list[_Segment]]:
    """Longest first; a batch grows while (segments x longest length) stays within the budget."""
    order = sorted(segments, key=lambda s: -len(s.ids))
    batches: list[list[_Segment]] = []
    for seg in order:
        if batches and (len(batches[-1]) + 1) * len(batches[-1][0].ids) <= batch_tokens:
            batches[-1].append(seg)
        else:
            batches.append([seg])
    return batches


# --------------------------------------------------------------------------- softmax statistics


class _VocabMoments:
    """Running softmax statistics of a block of rows over vocabulary slices (an online softmax).

    Kept relative to the running max M: S = sum_v e^(z_v - M), A = sum_v e^(z_v - M) (z_v - M),
    B = sum_v e^(z_v - M) (z_v - M)^2. Then log p(v) = z_v - M - log S, E[log p] = A/S - log S and
    Var[log p] = Var[z] = B/S - (A/S)^2 (a shift does not change a variance; centring on the max keeps
    the subtraction well conditioned).
    """

    def __init__(self, targets: torch.Tensor, distribution: bool):
        self.targets = targets
        self.distribution = distribution
        self.target_logit = torch.zeros(targets.shape, dtype=torch.float32, device=targets.device)
        self.M = self.S = self.A = self.B = None

    def add(self, v0: int, z: torch.Tensor) -> None:
        """Fold in logits z [rows, V_slice] (float32) of vocabulary ids v0 .. v0 + V_slice; z is consumed."""
        # The target's logit, for rows whose target falls in this slice (no host sync: GPU-friendly).
        local = self.targets - v0
        inside = (local >= 0) & (local < z.shape[1])
        picked = z.gather(1, local.clamp(0, z.shape[1] - 1)[:, None]).squeeze(1)
        self.target_logit = torch.where(inside, picked, self.target_logit)
        m = z.amax(dim=1)
        z.sub_(m[:, None])
        e = z.exp()
        s = e.sum(dim=1)
        a = b = None
        if self.distribution:
            # In place, so the one buffer serves both moments: e (z - m), then e (z - m)^2.
            e.mul_(z)
            a = e.sum(dim=1)
            e.mul_(z)
            b = e.sum(dim=1)
        if self.M is None:
            self.M, self.S, self.A, self.B = m, s, a, b
            return
        M = torch.maximum(self.M, m)
        d_old, d_new = self.M - M, m - M
        f_old, f_new = d_old.exp(), d_new.exp()
        if self.distribution:
            self.B = f_old * (self.B + 2 * d_old * self.A + d_old * d_old * self.S) + f_new * (
                b + 2 * d_new * a + d_new * d_new * s
            )
            self.A = f_old * (self.A + d_old * self.S) + f_new * (a + d_new * s)
        self.S = f_old * self.S + f_new * s
        self.M = M

    def result(self) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        log_s = self.S.log()
        logprob = self.target_logit - self.M - log_s
        if not self.distribution:
            return logprob, None, None
        mean_shifted = self.A / self.S
        # Clamped at zero against rounding; the detectors decide how to divide by it.
        var = (self.B / self.S - mean_shifted * mean_shifted).clamp_min(0.0)
        return logprob, mean_shifted - log_s, var


def _blockwise(targets: torch.Tensor, rows: int, distribution: bool, fold) -> list[torch.Tensor | None]:
    """The statistics of `targets` in blocks of `rows`; `fold(moments, r0, r1)` adds the block's logits."""
    pieces: list[list[torch.Tensor]] = [[], [], []]
    for r0 in range(0, targets.shape[0], rows):
        moments = _VocabMoments(targets[r0 : r0 + rows], distribution)
        fold(moments, r0, r0 + rows)
        for piece, value in zip(pieces, moments.result()):
            if value is not None:
                piece.append(value)
    return [torch.cat(p) if p else None for p in pieces]


def _head_stats(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    settings: ScoringSettings,
    distribution: bool,
) -> list[torch.Tensor | None]:
    """Statistics of the tokens `targets` predicted from `hidden` [N, H], in blocks (see module doc)."""
    rows, logit_chunk = settings.blocks(hidden.device)
    if type(head) is not torch.nn.Linear or head.weight.numel() == 0:  # not sliceable by vocabulary
        rows = max(1, logit_chunk // max(1, _out_features(head)))
        return _blockwise(
            targets, rows, distribution, lambda m, r0, r1: m.add(0, head(hidden[r0:r1]).float())
        )
    weight, bias = head.weight, head.bias
    cols = max(1, logit_chunk // rows)

    def fold(moments: _VocabMoments, r0: int, r1: int) -> None:
        for v0 in range(0, weight.shape[0], cols):
            b = None if bias is None else bias[v0 : v0 + cols]
            moments.add(v0, F.linear(hidden[r0:r1], weight[v0 : v0 + cols], b).float())

    return _blockwise(targets, rows, distribution, fold)


def _out_features(head: torch.nn.Module) -> int:
    weight = getattr(head, "weight", None)
    return int(weight.shape[0]) if weight is not None and weight.dim() == 2 else 1


# --------------------------------------------------------------------------- the model side


def _split_model(model: torch.nn.Module, device: torch.device) -> tuple[Any, Any] | None:
    """(body, head) when logits == head(body(...).last_hidden_state) for this model, checked on a short input."""
    try:
        body, head = model.get_decoder(), model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return None
    if body is None or head is None or body is model:
        return None
    vocab = _out_features(head)
    ids = (torch.arange(8, device=device) * 7919 % max(1, vocab))[None]
    try:
        full = model(input_ids=ids, use_cache=False).logits.float()
        split = head(body(input_ids=ids, use_cache=False).last_hidden_state).float()
    except Exception as err:  # an unusual architecture: use the full forward
        log.info("head/body split unavailable (%s: %s); using full logits", type(err).__name__, err)
        return None
    scale = max(1.0, float(full.abs().max()))
    if full.shape != split.shape or not torch.allclose(full, split, rtol=1e-3, atol=1e-3 * scale):
        log.info("logits are not head(last hidden state) for %s; using full logits", type(model).__name__)
        return None
    return body, head


def forward_length(settings: ScoringSettings, model: torch.nn.Module) -> int:
    """Tokens per forward pass: the recipe's max_length, else the model's context length, else 2048."""
    if settings.max_length:
        return settings.max_length
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return 2048


def _forward_batch(
    batch: list[_Segment],
    model,
    split,
    device: torch.device,
    pad_id: int,
    settings: ScoringSettings,
    distribution: bool,
) -> list[np.ndarray | None]:
    """Statistics of the scored tokens of a batch, concatenated in batch order."""
    width = max(len(s.ids) for s in batch)
    ids = np.full((len(batch), width), pad_id, dtype=np.int64)
    flat_rows = []
    for i, seg in enumerate(batch):
        ids[i, : len(seg.ids)] = seg.ids
        flat_rows.append(i * width + seg.positions)
    flat = torch.from_numpy(np.concatenate(flat_rows)).to(device)
    ids_t = torch.from_numpy(ids).to(device)
    # Right padding: under causal attention a real token only sees earlier positions, which are all real,
    # and the default position ids 0..n-1 are right. So no padding mask is passed, which keeps the
    # attention on its fast causal path; pad positions compute values that are never read.
    targets = ids_t.reshape(-1)[flat]
    dtype = _AUTOCAST[settings.dtype]
    with torch.autocast(device_type=device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
        if split is not None:
            body, head = split
            hidden = body(input_ids=ids_t, use_cache=False).last_hidden_state
            hidden = hidden.reshape(-1, hidden.shape[-1])[flat - 1]
            values = _head_stats(head, hidden, targets, settings, distribution)
        else:
            logits = model(input_ids=ids_t, use_cache=False).logits
            logits = logits.reshape(-1, logits.shape[-1])[flat - 1]
            # No head/body split (`_split_model`): the same statistics from the full logits, in row blocks.
            rows = max(1, settings.blocks(device)[1] // logits.shape[1])
            values = _blockwise(
                targets, rows, distribution, lambda m, r0, r1: m.add(0, logits[r0:r1].float())
            )
    return [None if v is None else v.float().cpu().numpy() for v in values]


# --------------------------------------------------------------------------- distributed helpers


def all_gather(obj: Any, accelerator) -> list[Any]:
    """Every rank's `obj`, in rank order (just [obj] in a single process)."""
    if world(accelerator)[1] == 1:
        return [obj]
    from accelerate.utils import gather_object

    return gather_object([obj])


# --------------------------------------------------------------------------- the entry point


def compute_token_stats(
    model: torch.nn.Module,
    tokenizer,
    texts: Sequence[str],
    *,
    prompts: Sequence[str] | None = None,
    settings: Any = None,
    distribution: bool = True,
    accelerator=None,
    cache: SignalCache | str | Path | None = None,
    info: dict[str, Any] | None = None,
) -> list[TokenStats]:
    """Token statistics of every text (see the module doc); one `TokenStats` per text, in order.

    settings: a `ScoringSettings`, an `EvaluateConfig`, or None for defaults.
    prompts: required when settings.scoring_span == "solution"; prompts[i] must be a prefix of texts[i].
    distribution: also compute Min-K%++'s mean and variance of log p under the model's distribution.
    accelerator: under `accelerate launch` with several processes, segments are split across ranks and
        the results gathered, so every rank returns the full list. Call it on every rank.
    cache: a `SignalCache`, a directory for an on-disk one, or None for the process-wide in-memory cache.
    info: when given, filled with counts (texts, cached, windowed, truncated, empty, tokens scored).
    """
    settings = ScoringSettings.from_config(settings)
    settings.check()
    texts = list(texts)
    span_prompts = _check_prompts(texts, prompts, settings.scoring_span)
    if accelerator is not None:
        model = accelerator.unwrap_model(model)
    cache = as_cache(cache)
    rank, n_ranks = world(accelerator)
    device = next(model.parameters()).device
    max_length = forward_length(settings, model)

    key_fields = {
        "model": model_fingerprint(model),
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "dtype": settings.dtype,
        # "solution-apart": the solution span tokenised apart from its prompt (older caches joined them).
        "span": "solution-apart" if settings.scoring_span == "solution" else settings.scoring_span,
        "max_length": max_length,
        "long_texts": settings.long_texts,
    }
    keys = [
        _entry_key(key_fields, text, None if span_prompts is None else span_prompts[i])
        for i, text in enumerate(texts)
    ]
    results: list[TokenStats | None] = [cache.get(k, distribution) for k in keys]
    local_missing = [i for i, r in enumerate(results) if r is None]
    # Ranks may hold different caches; compute the union so all of them run the same plan.
    missing = sorted(set().union(*all_gather(local_missing, accelerator)))

    plans: dict[int, _TextPlan] = {}
    if missing:
        encoded = _tokenise(
            tokenizer,
            [texts[i] for i in missing],
            None if span_prompts is None else [span_prompts[i] for i in missing],
        )
        plans = {
            i: _plan_text(i, ids, scorable, max_length, settings.long_texts)
            for i, (ids, scorable) in zip(missing, encoded)
        }
        segments = [seg for plan in plans.values() for seg in plan.segments]
        segments.sort(key=lambda s: -len(s.ids))
        mine = segments[rank::n_ranks]  # longest-first striding balances the ranks
        computed = _run_segments(mine, model, tokenizer, device, settings, distribution)
        by_segment: dict[tuple[int, int], list[np.ndarray | None]] = {}
        for part in all_gather(computed, accelerator):
            by_segment.update(part)
        for i, plan in plans.items():
            stats = _assemble(plan, by_segment, distribution)
            cache.put(keys[i], stats, write_disk=rank == 0)
            results[i] = stats
    _report(info, results, plans, len(missing), settings.long_texts, max_length)
    return results


def _report(info, results: list, plans: dict, n_missing: int, long_texts: str, max_length: int) -> None:
    """Log texts longer than the context (once: every detector of every checkpoint scores the same texts)
    and fill `info` with the counts."""
    n_windowed = sum(plan.n_windows > 1 for plan in plans.values()) if long_texts == "window" else 0
    n_truncated = sum(plan.n_dropped > 0 for plan in plans.values())
    if n_windowed or n_truncated:
        say_once(
            log,
            "%d of %d texts were longer than the context (%d tokens): %s",
            n_windowed + n_truncated,
            len(results),
            max_length,
            "scored in sliding windows" if long_texts == "window" else "truncated",
        )
    if info is not None:
        info.update(
            texts=len(results),
            cached=len(results) - n_missing,
            windowed=n_windowed,
            truncated=n_truncated,
            empty=sum(r.n == 0 for r in results),
            tokens_scored=sum(r.n for r in results),
            max_length=max_length,
        )


def _check_prompts(texts: list[str], prompts: Sequence[str] | None, span: str) -> list[str] | None:
    if span == "text":
        return None
    if prompts is None:
        raise ValueError("scoring_span='solution' needs prompts (one prefix per text)")
    prompts = list(prompts)
    if len(prompts) != len(texts):
        raise ValueError(f"got {len(prompts)} prompts for {len(texts)} texts")
    for i, (text, prompt) in enumerate(zip(texts, prompts)):
        if not text.startswith(prompt):
            raise ValueError(f"prompts[{i}] is not a prefix of texts[{i}] (scoring_span='solution')")
    return prompts


def _entry_key(fields: dict[str, Any], text: str, prompt: str | None) -> str:
    payload = json.dumps({**fields, "text": text, "prompt": prompt}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _run_segments(
    segments: list[_Segment], model, tokenizer, device, settings: ScoringSettings, distribution: bool
) -> dict[tuple[int, int], list[np.ndarray | None]]:
    """Forward all segments in token-budget batches; results by (text index, window index)."""
    out: dict[tuple[int, int], list[np.ndarray | None]] = {}
    if not segments:
        return out
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            split = _split_model(model, device)
            total = sum(len(s.ids) for s in segments)
            enabled = settings.progress is not False
            with Progress(total, "token statistics", unit="tok", enabled=enabled, leave=False) as bar:
                for batch in _batches(segments, settings.batch_tokens):
                    values = _forward_batch(batch, model, split, device, pad_id, settings, distribution)
                    offset = 0
                    for seg in batch:
                        n = len(seg.positions)
                        out[(seg.text_index, seg.window_index)] = [
                            None if v is None else v[offset : offset + n] for v in values
                        ]
                        offset += n
                    bar.update(sum(len(s.ids) for s in batch))
    finally:
        model.train(was_training)
    return out


def _assemble(
    plan: _TextPlan, by_segment: dict[tuple[int, int], list[np.ndarray | None]], distribution: bool
) -> TokenStats:
    ids, parts = [], [[], [], []]
    for seg in plan.segments:  # already in window order
        ids.append(seg.ids[seg.positions])
        for part, value in zip(parts, by_segment[(seg.text_index, seg.window_index)]):
            if value is not None:
                part.append(value)

    def cat(chunks: list[np.ndarray], dtype) -> np.ndarray:
        return np.concatenate(chunks).astype(dtype) if chunks else np.zeros(0, dtype=dtype)

    return _freeze(
        TokenStats(
            token_ids=cat(ids, np.int64),
            logprob=cat(parts[0], np.float32),
            mean=cat(parts[1], np.float32) if distribution else None,
            var=cat(parts[2], np.float32) if distribution else None,
            n_windows=plan.n_windows,
            n_dropped=plan.n_dropped,
        )
    )


# --------------------------------------------------------------------------- other signals


def lowercase_inputs(
    texts: Sequence[str], prompts: Sequence[str] | None
) -> tuple[list[str], list[str] | None]:
    """Lowercased texts (and prompts); built as prompt.lower() + rest.lower() so each prompt stays a prefix."""
    if prompts is None:
        return [t.lower() for t in texts], None
    lower_prompts = [p.lower() for p in prompts]
    lower_texts = [lp + t[len(p) :].lower() for t, p, lp in zip(texts, prompts, lower_prompts)]
    return lower_texts, lower_prompts


@dataclass(frozen=True)
class TokenFrequencies:
    """How often each token id occurs in a reference corpus (DC-PDD's f(v))."""

    counts: np.ndarray  # int64 [vocab]

    def probability(self, token_ids: np.ndarray) -> np.ndarray:
        """Laplace-smoothed relative frequency (count + 1) / (total + vocab); ids past the table count 0."""
        ids = np.asarray(token_ids, dtype=np.int64)
        counts = np.where(ids < len(self.counts), self.counts[np.minimum(ids, len(self.counts) - 1)], 0)
        return (counts + 1.0) / (int(self.counts.sum()) + len(self.counts))


_FREQUENCY_CACHE: dict[str, TokenFrequencies] = {}


def token_frequencies(
    tokenizer, texts: Iterable[str] | None = None, *, cache_dir: str | Path | None = None
) -> TokenFrequencies:
    """Token counts of `texts` (None: the builtin corpus) under `tokenizer`, no special tokens, kept as
    `freq-<key>.npy` in `cache_dir` (None: `<leaklab cache>/frequencies`). The key is the tokenizer's and
    the corpus's content, not the model's: every checkpoint and later run of a tokenizer reuses it."""
    if texts is None:
        from leaklab.data.corpora import builtin_corpus_texts

        texts = builtin_corpus_texts()
    texts = list(texts)
    h = hashlib.sha256(tokenizer_fingerprint(tokenizer).encode())
    for text in texts:
        h.update(hashlib.sha256(text.encode()).digest())
    key = h.hexdigest()[:32]
    if key in _FREQUENCY_CACHE:
        return _FREQUENCY_CACHE[key]
    if cache_dir is None:
        cache_dir = cache_root() / "frequencies"
    path = Path(cache_dir) / f"freq-{key}.npy"
    if path.exists():
        table = TokenFrequencies(np.load(path))
    else:
        counts = np.zeros(len(tokenizer), dtype=np.int64)
        for start in range(0, len(texts), 256):
            enc = tokenizer(texts[start : start + 256], add_special_tokens=False, verbose=False)
            ids = np.concatenate(
                [np.asarray(x, dtype=np.int64) for x in enc["input_ids"]] + [np.zeros(0, np.int64)]
            )
            counts += np.bincount(ids, minlength=len(counts))[: len(counts)]
        table = TokenFrequencies(counts)
        buf = io.BytesIO()
        np.save(buf, counts)
        write_atomic(path, buf.getvalue())
    _FREQUENCY_CACHE[key] = table
    return table
