"""Vocabulary for new identifier names: synonym groups, fallback prefixes, and candidate names in the
original's style (snake_case, camelCase, UPPER), ranked by how close their frequency in a reference code
corpus (`CODE_COUNTS_FILE`) is to the original's, so a variant is about as likely as its original under a
model that never saw the task. See docs/perturbations.md#srdetection-variants.
"""

from __future__ import annotations

import bisect
import functools
import io
import json
import keyword
import math
import random
import re
import tokenize
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

# Groups of interchangeable identifier words (a name's words may each be swapped for another member of
# a group they belong to), kept as data: one group per line, words split by spaces, `#` lines comments.
SYNONYMS_FILE = Path(__file__).with_name("synonyms.txt")
SYNONYM_GROUPS: tuple[tuple[str, ...], ...] = tuple(
    tuple(line.split())
    for line in SYNONYMS_FILE.read_text().splitlines()
    if line.strip() and not line.startswith("#")
)

# Fallbacks for names whose words are not in the vocabulary: a verb prefix for functions, a qualifier
# prefix for variables (`fib` -> `compute_fib`, `foo` -> `cur_foo`).
FUNCTION_PREFIXES = ("get", "compute", "find", "calc", "do")
VARIABLE_PREFIXES = ("cur", "my", "new", "tmp", "the")


def _synonym_table(groups: Sequence[Sequence[str]]) -> dict[str, list[str]]:
    table: dict[str, list[str]] = {}
    for group in groups:
        for word in group:
            alternatives = table.setdefault(word, [])
            alternatives.extend(w for w in group if w != word and w not in alternatives)
    return table


SYNONYMS = _synonym_table(SYNONYM_GROUPS)


def _split_words(name: str) -> tuple[str, list[str], str]:
    """`__minPath2` -> ("__", ["min", "Path"], "2"): leading underscores, words, trailing digits."""
    lead = name[: len(name) - len(name.lstrip("_"))]
    core = name[len(lead) :]
    digits = core[len(core.rstrip("0123456789")) :]
    core = core[: len(core) - len(digits)]
    words = [
        w for part in core.split("_") for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+", part)
    ]
    return lead, words or [core], digits


def _join_words(original: str, words: list[str], new_words: list[str]) -> str:
    """Join replacement words in the original's style (snake_case, camelCase, UPPER)."""
    lead, _, digits = _split_words(original)
    styled = []
    for old, new in zip(words, new_words):
        if old.isupper() and len(old) > 1:
            styled.append(new.upper())
        elif old[:1].isupper():
            styled.append(new[:1].upper() + new[1:])
        else:
            styled.append(new)
    core = original[len(lead) : len(original) - len(digits) if digits else None]
    if "_" in core or len(words) == 1:
        joined = "_".join(styled)
    else:  # camelCase / PascalCase: words are glued, each keeps its own capital
        joined = "".join(styled)
    return lead + joined + digits


# --------------------------------------------------------------------------- reference frequencies

# Shipped with the package (the same on every machine and Python version, so cached variants do not
# depend on the interpreter); rebuilt by `python -m leaklab.perturb.vocabulary`.
CODE_COUNTS_FILE = Path(__file__).with_name("code_counts.json")
# Words of the same corpus's prose (docstrings, comments, string literals and pydoc text), lower-cased:
# replacements for words inside example strings ("Hello world"), which identifiers ("cfunc", "msgi") are
# not. Rebuilt with CODE_COUNTS_FILE.
PROSE_COUNTS_FILE = Path(__file__).with_name("prose_counts.json")
_WORD = re.compile(r"[A-Za-z]+")
# Log-count units of jitter added to the frequency distance: large enough that the n variants of a task
# pick different names, small enough that a name used 1000 times is not replaced by one used twice.
FREQUENCY_JITTER = 2.0


def _python_tokens(sources: Iterable[str]):
    """The tokens of each Python source, in order; a file stops adding at the point it fails to tokenize."""
    for source in sources:
        try:
            yield from tokenize.generate_tokens(io.StringIO(source).readline)
        except (tokenize.TokenError, SyntaxError, ValueError):
            continue


def _frequent(counts: Counter[str], min_count: int) -> dict[str, int]:
    """The entries seen at least `min_count` times, most frequent first (ties by text)."""
    return {k: v for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if v >= min_count}


def count_code_tokens(sources: Iterable[str], min_count: int = 2) -> dict[str, int]:
    """Occurrences of each identifier and number literal in Python sources (keywords excluded)."""
    counts: Counter[str] = Counter(
        tok.string
        for tok in _python_tokens(sources)
        if tok.type in (tokenize.NAME, tokenize.NUMBER) and not keyword.iskeyword(tok.string)
    )
    return _frequent(counts, min_count)


def count_prose_words(
    sources: Iterable[str], texts: Iterable[str] = (), min_count: int = 3
) -> dict[str, int]:
    """Occurrences of each lower-cased word in the strings and comments of Python `sources` and in
    plain `texts` (words of two or more letters)."""
    counts: Counter[str] = Counter()
    for tok in _python_tokens(sources):
        if tok.type in (tokenize.STRING, tokenize.COMMENT):
            counts.update(w.lower() for w in _WORD.findall(tok.string) if len(w) > 1)
    for text in texts:
        counts.update(w.lower() for w in _WORD.findall(text) if len(w) > 1)
    return _frequent(counts, min_count)


@functools.cache
def code_counts() -> dict[str, int]:
    return json.loads(CODE_COUNTS_FILE.read_text(encoding="utf-8"))


@functools.cache
def prose_counts() -> dict[str, int]:
    return json.loads(PROSE_COUNTS_FILE.read_text(encoding="utf-8"))


def log_count(token: str, counts: dict[str, int] | None = None) -> float:
    """log(1 + occurrences in the reference corpus (`code_counts` unless `counts`)): 0 if never seen."""
    return math.log1p((code_counts() if counts is None else counts).get(token, 0))


def frequency_order(
    original: str,
    options: Sequence[str],
    rng: random.Random,
    counts: dict[str, int] | None = None,
    context: frozenset[str] | None = None,
    bias: dict[str, float] | None = None,
) -> list[str]:
    """`options` ordered by closeness of their reference frequency to `original`'s, jittered by `rng`;
    with `context` (the task's prose words, `context_words`), also by closeness of their `echo`;
    `bias` adds a distance to some options."""
    target = log_count(original, counts)
    target_echo = echo(original, context) if context else 0.0
    keyed = []
    for o in options:
        distance = abs(log_count(o, counts) - target) + FREQUENCY_JITTER * rng.random()
        if context:
            distance += ECHO_WEIGHT * abs(echo(o, context) - target_echo)
        distance += (bias or {}).get(o, 0.0)
        keyed.append((distance, o))
    return [o for _, o in sorted(keyed)]


# Log-count units that a full mismatch in `echo` costs: more than the jitter, so where frequencies are
# alike a name echoing the prose as much as the original wins (`sum_to_n` -> `total_to_n` drops "sum").
ECHO_WEIGHT = 3.0
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _stem(word: str) -> str:
    """Crude plural folding so `sums` in prose matches the name part `sum`."""
    word = word.lower()
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def context_words(prose: str, skip: Iterable[str] = ()) -> frozenset[str]:
    """Stemmed word parts of the identifiers and words in `prose`, leaving out the names in `skip`
    (the names being renamed: where prose mentions them, renaming rewrites them too)."""
    skip = set(skip)
    words: set[str] = set()
    for token in _IDENT.findall(prose):
        if token not in skip:
            words.update(_stem(w) for w in _split_words(token)[1] if w)
    return frozenset(words)


def echo(name: str, context: frozenset[str]) -> float:
    """Fraction of `name`'s word parts that also occur in `context` (the task's prose)."""
    parts = [_stem(w) for w in _split_words(name)[1] if w]
    return sum(p in context for p in parts) / len(parts) if parts else 0.0


# Distance added to the names of the style a variant does not prefer (`candidates(prefer=...)`).
STYLE_WEIGHT = 3.0


def candidates(
    name: str,
    is_function: bool,
    rng: random.Random,
    context: frozenset[str] | None = None,
    prefer: str | None = None,
) -> list[str]:
    """New names for `name`: synonyms, word swaps and prefixed names, ordered by `frequency_order`
    (and by how much they echo the task's prose `context`, when given)."""
    lead, words, digits = _split_words(name)
    tiers: list[list[str]] = []
    whole = SYNONYMS.get(name)  # a name that is itself a vocabulary entry: `nums`, `N`, `prime_list`
    if whole:
        tiers.append(list(whole))
    swappable = [i for i, w in enumerate(words) if SYNONYMS.get(w.lower())]
    if swappable:  # swap some of the words, keep the others, the style, the underscores and digits
        swapped = []
        for _ in range(12):
            new_words = [w.lower() for w in words]
            chosen = [i for i in swappable if rng.random() < 0.6] or [rng.choice(swappable)]
            for i in chosen:
                new_words[i] = rng.choice(SYNONYMS[words[i].lower()])
            swapped.append(_join_words(name, words, new_words))
        tiers.append(swapped)
    swaps = [] if tiers or prefer == "prefix" else matched_swaps(name, rng)
    if swaps:
        # No vocabulary word (`nbrs`): prefixes alone made variants likelier than their originals, so
        # unless the variant leans to prefixes one word becomes a reference word of its case and length.
        return frequency_order(name, swaps, rng, context=context)
    prefixes = FUNCTION_PREFIXES if is_function else VARIABLE_PREFIXES
    core = name[len(lead) :]
    camel = "_" not in core and any(c.isupper() for c in core[1:])
    prefixed = [lead + p + (core[0].upper() + core[1:] if camel else "_" + core) for p in prefixes]
    tiers.append(prefixed)
    pooled = [c for c in dict.fromkeys(c for tier in tiers for c in tier) if c != name]
    # A variant leans to prefixes (likelier than the original) or synonyms (less likely) for all its names,
    # so a task's variants fall on both sides of the original.
    bias = None
    if prefer and len(pooled) > len(prefixed):
        bias = {c: STYLE_WEIGHT for c in pooled if (c in prefixed) != (prefer == "prefix")}
    return frequency_order(name, pooled, rng, context=context, bias=bias)


def _case(word: str) -> str | None:
    """ "lower", "upper" or "title" for a word of letters; None for anything else (digits)."""
    if not word.isalpha() or not word.isascii():
        return None
    if word.islower():
        return "lower"
    if word.isupper():
        return "upper" if len(word) > 1 else "title"
    return "title" if word[0].isupper() and word[1:].islower() else None


@functools.cache
def matched_words() -> dict[tuple[str, int], tuple[list[float], list[str]]]:
    """The reference table's one-word identifiers (`path`, `Error`, `MAX`) grouped by (case, length),
    each group sorted by log count: (log counts, words)."""
    groups: dict[tuple[str, int], list[tuple[float, str]]] = {}
    for word in code_counts():
        case = _case(word)
        if case is not None and "_" not in word:
            groups.setdefault((case, len(word)), []).append((log_count(word), word))
    return {key: ([c for c, _ in sorted(ws)], [w for _, w in sorted(ws)]) for key, ws in groups.items()}


# How many reference words of the nearest frequencies a word's replacement is drawn from (jittered).
MATCH_WINDOW = 24


def matched_word(word: str, rng: random.Random) -> str:
    """A reference word of the same case and length as `word` and about its frequency; `word` itself
    when there is none (digits, a length the table lacks)."""
    case = _case(word)
    counts, words = matched_words().get((case, len(word)), ([], [])) if case else ([], [])
    if not words:
        return word
    target = log_count(word)
    at = bisect.bisect_left(counts, target)
    lo, hi = max(0, at - MATCH_WINDOW), min(len(words), at + MATCH_WINDOW)
    keyed = sorted(
        (abs(counts[i] - target) + FREQUENCY_JITTER * rng.random(), words[i])
        for i in range(lo, hi)
        if words[i].lower() != word.lower()
    )
    return keyed[0][1] if keyed else word


def matched_swaps(name: str, rng: random.Random, count: int = 12) -> list[str]:
    """`count` new names, each `name` with one of its words replaced by a `matched_word`: same style,
    underscores, digits and length, no added words (unlike a prefix, which makes a variant likelier)."""
    lead, words, _ = _split_words(name)
    letters = [i for i, w in enumerate(words) if _case(w)]
    if not letters:
        return []
    out = []
    for _ in range(count):
        i = rng.choice(letters)
        new_words = list(words)
        new_words[i] = matched_word(words[i], rng)
        out.append(_join_words(name, words, new_words))
    return [c for c in dict.fromkeys(out) if c != name]


def main() -> None:
    """Rebuild CODE_COUNTS_FILE and PROSE_COUNTS_FILE from this interpreter's standard library."""
    from leaklab.data.corpora import pydoc_topics, stdlib_source_files

    sources = []
    for path in stdlib_source_files():
        try:
            sources.append(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
    counts = count_code_tokens(sources)
    CODE_COUNTS_FILE.write_text(json.dumps(counts, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"{len(counts)} tokens from {len(sources)} files -> {CODE_COUNTS_FILE}")
    words = count_prose_words(sources, pydoc_topics())
    PROSE_COUNTS_FILE.write_text(json.dumps(words, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"{len(words)} prose words -> {PROSE_COUNTS_FILE}")


if __name__ == "__main__":
    main()
