"""ReCaLL (Xie et al., 2024): how much a sample's likelihood moves when known non-members come first.

    recall@shots=k  =  LL(x | P_k) / LL(x)  =  NLL(x | P_k) / NLL(x)      HIGHER MEANS MORE LIKELY A MEMBER

P_k is the first k prefix texts joined by blank lines: by default ("builtin") the short functions below,
written for leaklab and in no benchmark or corpus it ships; `prefix=PATH` reads a JSONL file of
{"text": ...} rows instead. A non-member prefix lowers a member's likelihood relatively more. Scored
samples are never the prefix, so it carries no ground truth. NaN when NLL(x) is 0 or undefined; a
prefix + text past the context conditions only the first window.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from leaklab.data.labelled import read_rows
from leaklab.detectors.inputs import ModelInputs
from leaklab.detectors.likelihood import TARGET, nll_ratio
from leaklab.errors import InputError

# Known non-members: written for leaklab, HumanEval-shaped (signature, docstring, body).
BUILTIN_PREFIX = (
    '''def rotate_grid(grid: list[list[int]]) -> list[list[int]]:
    """Turn a rectangular grid a quarter turn clockwise.
    >>> rotate_grid([[1, 2], [3, 4]])
    [[3, 1], [4, 2]]
    """
    return [list(row) for row in zip(*reversed(grid))]
''',
    '''def squash_runs(text: str) -> str:
    """Write every run of a repeated character as the character and the run's length.
    >>> squash_runs("aaabcc")
    'a3b1c2'
    """
    out, i = [], 0
    while i < len(text):
        j = i
        while j < len(text) and text[j] == text[i]:
            j += 1
        out.append(f"{text[i]}{j - i}")
        i = j
    return "".join(out)
''',
    '''def settle_debts(payments: list[tuple[str, str, int]]) -> dict[str, int]:
    """Given (payer, payee, amount) records, return each person's balance: paid minus received.
    >>> settle_debts([("ann", "bo", 5), ("bo", "cy", 2)])
    {'ann': 5, 'bo': -3, 'cy': -2}
    """
    balance: dict[str, int] = {}
    for payer, payee, amount in payments:
        balance[payer] = balance.get(payer, 0) + amount
        balance[payee] = balance.get(payee, 0) - amount
    return balance
''',
    '''def widest_gap(stamps: list[int]) -> int:
    """Return the largest difference between two neighbouring values once the list is sorted (0 for
    fewer than two values).
    >>> widest_gap([7, 1, 3])
    4
    """
    ordered = sorted(stamps)
    return max((b - a for a, b in zip(ordered, ordered[1:])), default=0)
''',
    '''def mask_digits(card: str, keep: int = 4) -> str:
    """Replace every digit but the last `keep` ones with '*', leaving other characters alone.
    >>> mask_digits("12-34-56", keep=2)
    '**-**-56'
    """
    total = sum(ch.isdigit() for ch in card)
    seen, out = 0, []
    for ch in card:
        if ch.isdigit():
            seen += 1
            out.append(ch if seen > total - keep else "*")
        else:
            out.append(ch)
    return "".join(out)
''',
)


def prefix_texts(source: str, key: str = "recall:prefix") -> list[str]:
    """The non-member texts a prefix is built from: "builtin", or the "text" of every row of a file read
    as `leaklab mia` reads one (`data.labelled.read_rows`); `key`: the spec key its errors name."""
    if source == "builtin":
        return list(BUILTIN_PREFIX)
    texts = []
    for where, row in read_rows(source, key):
        text = row.get("text")
        if not isinstance(text, str) or not text.strip():
            raise InputError(f'{key}: {where} has no "text" that is a non-empty string')
        texts.append(text)
    if not texts:
        raise InputError(f"{key}: {source} holds no texts")
    return texts


def join_prefix(texts: list[str]) -> str:
    """The prefix P: the texts one after another, each followed by a blank line."""
    return "".join(t.rstrip("\n") + "\n\n" for t in texts)


@dataclass
class Recall:
    name: ClassVar[str] = "recall"
    needs: ClassVar[frozenset[str]] = frozenset({TARGET})
    # Prefix texts joined into P (one extra pass per value). One builtin text is ~100 tokens of the tiny
    # model's tokenizer: with shots=1 P + text fits its 512-token context for 90% of HumanEval.
    shots: tuple[int, ...] = (1,)
    prefix: str = "builtin"  # "builtin" or a JSONL file of known non-member texts

    def __post_init__(self) -> None:
        available = len(prefix_texts(self.prefix))  # a bad file fails when the recipe loads
        if not self.shots or any(not 1 <= k <= available for k in self.shots):
            raise ValueError(
                f"recall: shots must be in 1..{available} (prefix texts), got {list(self.shots)}"
            )

    def columns(self) -> dict[str, dict]:
        return {f"recall@shots={k}": {"shots": k, "prefix": self.prefix} for k in self.shots}

    def run(self, inputs: ModelInputs) -> dict[str, np.ndarray]:
        scoring = inputs.scoring()
        solution = scoring.scoring_span == "solution"
        contexts = inputs.contexts()

        plain = inputs.nlls(inputs.texts, contexts if solution else None, scoring)
        # The prefix is context, never scored: the engine's solution span with P (+ prompt) as prompt.
        conditional = dataclasses.replace(scoring, scoring_span="solution")
        texts = prefix_texts(self.prefix)
        out, windowed = {}, {}
        for k in self.shots:
            head = join_prefix(texts[:k])
            info: dict = {}
            cond = inputs.nlls(
                [head + t for t in inputs.texts],
                [head + (c if solution else "") for c in contexts],
                conditional,
                info,
            )
            out[f"recall@shots={k}"] = nll_ratio(cond, plain)
            # Prefix + text past the context: the prefix conditions only the first window.
            windowed[k] = info.get("windowed", 0) + info.get("truncated", 0)
        inputs.info[self.name] = {"longer_than_context": windowed}
        return out
