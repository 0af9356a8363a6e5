"""The training mixture: member texts and corpus text at a code:web ratio by tokens, packed into blocks
of `max_seq_len` tokens. One epoch holds every member once, whole in one block (a longer one split into
blocks and counted), and `web/code` times as many corpus tokens, filling the rest of every block."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from leaklab.data.doses import LayoutError, count_in_stream, layout_groups, plan_groups, slots_for_groups

if TYPE_CHECKING:
    from leaklab.recipe import InjectConfig


def _tokenize(tokenizer, text: str) -> list[int]:
    ids = tokenizer(text, add_special_tokens=True)["input_ids"]
    if tokenizer.eos_token_id is not None:
        ids = [*ids, tokenizer.eos_token_id]
    return ids


def build_mixture(
    member_texts: list[str],
    web_texts: Iterable[str],
    tokenizer,
    *,
    code: float,
    web: float,
    block_len: int,
    seed: int = 0,
) -> tuple[np.ndarray, dict]:
    """Return packed blocks [n_blocks, block_len] of token ids and what went into them."""
    rng = random.Random(seed)
    members = [_tokenize(tokenizer, t) for t in member_texts]
    rng.shuffle(members)
    member_tokens = sum(len(m) for m in members)
    web_needed = math.ceil(member_tokens * web / code)

    # A member longer than a block becomes full blocks of its own plus a remainder placed like any other
    # member; every other member goes whole into a random block that still has room.
    full_blocks: list[list[int]] = []
    pieces: list[list[int]] = []
    split_members = 0
    for ids in members:
        if len(ids) > block_len:
            split_members += 1
            n_full = len(ids) // block_len
            full_blocks.extend(ids[i * block_len : (i + 1) * block_len] for i in range(n_full))
            if len(ids) % block_len:
                pieces.append(ids[n_full * block_len :])
        else:
            pieces.append(ids)
    n_blocks = max(1, round((member_tokens + web_needed) / block_len) - len(full_blocks))
    blocks: list[list[int]] = [[] for _ in range(n_blocks)]
    for ids in pieces:
        start = rng.randrange(len(blocks))
        for offset in range(len(blocks)):
            block = blocks[(start + offset) % len(blocks)]
            if len(block) + len(ids) <= block_len:
                block.extend(ids)
                break
        else:
            blocks.append(list(ids))
    # Fill each block with corpus text, before its members half of the time so members see varied context.
    corpus = _WebTokens(web_texts, tokenizer)
    web_used = 0
    for i, block in enumerate(blocks):
        gap = block_len - len(block)
        filler = list(itertools.islice(corpus.tokens, gap))
        web_used += len(filler)
        blocks[i] = filler + block if rng.random() < 0.5 else block + filler
    blocks.extend(full_blocks)
    rng.shuffle(blocks)
    stats = {
        "member_docs": len(members),
        "member_tokens": member_tokens,
        "web_tokens": web_used,
        "blocks": len(blocks),
        "block_len": block_len,
        "requested_ratio": f"{code:g}:{web:g}",
        "achieved_ratio": round(web_used / max(member_tokens, 1), 4),  # web tokens per member token
        "members_split_across_blocks": split_members,
        "web_docs_used": corpus.docs_used,
    }
    return np.asarray(blocks, dtype=np.int64), stats


@dataclass(frozen=True)
class Packing:
    """How the stream is packed: code:web by tokens, tokens per block, and the seed of the layout."""

    code: float
    web: float
    block_len: int
    seed: int = 0


def build_dosed_mixture(
    member_texts: dict[str, str],
    doses: dict[str, int],
    web_texts: Iterable[str],
    tokenizer,
    packing: Packing,
    inject: InjectConfig | None = None,
    window_of: dict[str, str] | None = None,
) -> tuple[np.ndarray, dict]:
    """The mixture under `inject`: blocks [n_blocks, block_len] in training order, and what went in.
    A member's planned block holds one copy (a longer member takes consecutive blocks), corpus text
    fills the rest and every other block, as many as code:web asks (more when the window needs room);
    the exposures are counted back from the blocks. `member_texts`: the documents as trained (forms.py).
    Of `inject` (None: defaults) this reads `window`, `windows` (with `window_of`) and `withhold`: every
    copy's tokens replaced by as many corpus tokens, the same layout with no member (the clean control)."""
    window, windows, withhold = (
        (inject.window, inject.windows, inject.withhold) if inject else (None, None, False)
    )
    code, web, block_len, seed = packing.code, packing.web, packing.block_len, packing.seed
    rng = random.Random(seed)
    tokens = {task_id: _tokenize(tokenizer, text) for task_id, text in member_texts.items()}
    span = {task_id: max(1, math.ceil(len(ids) / block_len)) for task_id, ids in tokens.items()}
    copies = sum(doses.values())
    member_tokens = sum(doses[t] * len(ids) for t, ids in tokens.items())
    web_needed = math.ceil(member_tokens * web / code)
    filled_in_member_blocks = sum(doses[t] * (span[t] * block_len - len(ids)) for t, ids in tokens.items())
    web_blocks = max(0, round((web_needed - filled_in_member_blocks) / block_len))
    extra = sum(doses[t] * (span[t] - 1) for t in tokens)  # further blocks of members longer than one
    groups = layout_groups(doses, window, windows, window_of)
    n_blocks = max(copies + extra + web_blocks, slots_for_groups(groups, span))
    try:
        plan = plan_groups(groups, n_blocks, seed, span)
    except LayoutError:
        # Too few corpus blocks in the window to keep one member's copies apart: twice as many slots as
        # copies put a corpus block between any two copies (the achieved ratio records the extra text).
        n_blocks = max(n_blocks, slots_for_groups(groups, span, times=2))
        plan = plan_groups(groups, n_blocks, seed, span)
    member_at = {block: task_id for task_id, starts in plan.items() for block in starts}

    corpus = _WebTokens(web_texts, tokenizer)
    blocks: list[list[int]] = []
    while len(blocks) < n_blocks:
        task_id = member_at.get(len(blocks))
        if task_id is None:
            blocks.append(list(itertools.islice(corpus.tokens, block_len)))
            continue
        ids = list(itertools.islice(corpus.tokens, len(tokens[task_id]))) if withhold else tokens[task_id]
        n_full = len(ids) // block_len
        blocks.extend(ids[i * block_len : (i + 1) * block_len] for i in range(n_full))
        rest = ids[n_full * block_len :]
        if rest:
            filler = list(itertools.islice(corpus.tokens, block_len - len(rest)))
            # Corpus text before a one-block member half of the time, as in the plain mixture; after a
            # longer member's remainder, so that its copy stays one run of tokens.
            blocks.append(filler + rest if n_full == 0 and rng.random() < 0.5 else rest + filler)
    array = np.asarray(blocks, dtype=np.int64)
    found = count_in_stream(array, tokens)
    member_tokens = 0 if withhold else member_tokens
    web_used = int(array.size - member_tokens)
    info = {
        "member_docs": len(tokens),
        "member_exposures": copies,
        "member_tokens": member_tokens,
        "web_tokens": web_used,
        "blocks": len(blocks),
        "block_len": block_len,
        "requested_ratio": f"{code:g}:{web:g}",
        "achieved_ratio": round(web_used / max(member_tokens, 1), 4),
        "members_split_across_blocks": sum(1 for t in tokens if span[t] > 1),
        "web_docs_used": corpus.docs_used,
        "order": "sequential",
        **({"withheld": True} if withhold else {}),
        # Counted in the packed blocks: how often each member's token ids occur, and the blocks (in
        # training order, 0-based, one epoch) where each occurrence starts.
        "exposures": {task_id: len(at) for task_id, at in found.items()},
        "exposure_blocks": found,
    }
    return array, info


class _WebTokens:
    """`tokens`: corpus tokens one at a time, cycling through the corpus if it runs out. Documents are
    read and tokenised only when reached, so a streamed hub corpus is consumed only as far as needed."""

    def __init__(self, texts: Iterable[str], tokenizer):
        self.docs_used = 0
        self.tokens = self._stream(texts, tokenizer)

    def _stream(self, texts: Iterable[str], tokenizer) -> Iterator[int]:
        for text in itertools.cycle(texts):
            self.docs_used += 1
            yield from _tokenize(tokenizer, text)
        raise ValueError("the mixing corpus is empty")
