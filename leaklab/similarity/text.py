"""Surface similarity between a generation and a reference, over token ids or characters.

N-gram overlap (NGO) is SrDetection's black-box score (§3.1.2), over sets of N = 7 tokens:

    NGO(gen, gt) = |Ngrams(gen) ∩ Ngrams(gt)| / |Ngrams(gt)|

A ground truth shorter than N is one n-gram; an empty one gives NaN. See docs/perturbations.md#text-similarity.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Hashable, Sequence
from itertools import repeat

import numpy as np

NGO_N = 7  # SrDetection App. A.1


def ngrams(seq: Sequence[Hashable], n: int) -> set[tuple]:
    """The set of contiguous length-n windows of `seq` (empty when `seq` is shorter than n)."""
    items = tuple(seq)
    return {items[i : i + n] for i in range(len(items) - n + 1)}


def ngram_overlap(generated: Sequence[Hashable], reference: Sequence[Hashable], n: int = NGO_N) -> float:
    """Fraction of the reference's distinct n-grams that also occur in the generation (set semantics),
    over any hashable items (token ids for SrDetection); short and empty references: module docstring."""
    if len(reference) == 0:
        return math.nan
    n = min(n, len(reference))
    reference_grams = ngrams(reference, n)
    return len(ngrams(generated, n) & reference_grams) / len(reference_grams)


# --------------------------------------------------------------------------- inputs

# Every token-level metric here tokenises code alike: `x+=1` -> ['x', '+', '=', '1'], finer than codebleu's
# `str.split()` (which keeps `f(x):` one token, scoring near-duplicates far lower).
_CODE_TOKEN = re.compile(r"\w+|[^\w\s]")


def as_text(value: str | bytes) -> tuple[str, bool]:
    """(text, lossy): bytes are decoded as UTF-8 with U+FFFD for bad bytes, and lossy says so."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8"), False
        except UnicodeDecodeError:
            return value.decode("utf-8", errors="replace"), True
    return value, False


def code_tokens(text: str) -> list[str]:
    """The token list every token-level metric uses (see `_CODE_TOKEN`)."""
    return _CODE_TOKEN.findall(text)


def normalise_lines(text: str) -> str:
    """Line endings unified, trailing spaces dropped, blank lines at either end removed."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return "\n".join(lines).strip("\n")


# --------------------------------------------------------------------------- metrics


def exact_match(candidate: str, reference: str) -> float:
    """1.0 when the two are the same text up to line endings and trailing whitespace, else 0.0."""
    return float(normalise_lines(candidate) == normalise_lines(reference))


BLEU_EPSILON = 0.1  # Chen & Cherry (2014) smoothing method 1, as nltk's and codebleu's default


def ngram_counts(words: Sequence[str], max_n: int = 4) -> list[Counter]:
    """[Counter of 1-grams, ..., Counter of max_n-grams] of whitespace-free words (`code_tokens`,
    `str.split()`): what BLEU needs of one side, reusable across pairs. An n-gram is keyed by its words
    joined with one space, which no word holds, so the counts are those of word tuples; a str caches its
    hash and a tuple does not. A unigram's key is the word itself."""
    join = " ".join
    # zip of n shifted copies: the length-n windows in order, no slice per window
    windows = (zip(*(words[i:] for i in range(n))) for n in range(2, max_n + 1))
    return [Counter(words)] + [Counter(map(join, grams)) for grams in windows]


def bleu_from_counts(
    candidate: list[Counter], reference: list[Counter], matched: list | None = None
) -> float:
    """Sentence BLEU from `ngram_counts` of both sides (same max_n; lengths are the 1-gram totals): uniform
    weights, clipped precision, BLEU_EPSILON matches for an order with none (smoothing method 1), brevity
    penalty exp(1 - r/c) for a shorter candidate; no unigram match (or an empty side) gives 0.0.
    `matched`: the clipped matches per order when the caller has them (CodeBLEU's weighted match shares them)."""
    c, r = sum(candidate[0].values()), sum(reference[0].values())
    if c == 0 or r == 0:
        return 0.0
    max_n = len(candidate)
    log_sum = 0.0
    for n, (cand_counts, ref_counts) in enumerate(zip(candidate, reference), start=1):
        hits = clipped_matches(cand_counts, ref_counts) if matched is None else matched[n - 1]
        total = max(1, sum(cand_counts.values()))
        if n == 1 and hits == 0:
            return 0.0
        log_sum += math.log((hits if hits > 0 else BLEU_EPSILON) / total) / max_n
    brevity = 1.0 if c > r else math.exp(1 - r / c)
    return brevity * math.exp(log_sum)


def clipped_matches(first: Counter, second: Counter) -> int:
    """sum over shared n-grams of min(count in first, count in second): each n-gram of the smaller side
    looked up once in the other (absent: min with 0 adds nothing), in C loops."""
    if len(first) > len(second):
        first, second = second, first
    return sum(map(min, first.values(), map(second.get, first, repeat(0))))


def edit_similarity_max_len(candidate: str, reference: str) -> float:
    """MRI's edit similarity (004, §3.1.1): 1 - Levenshtein(candidate, reference) / max(len of the two),
    over characters with unit costs; two empty strings -> 1."""
    from rapidfuzz.distance import Levenshtein  # here: the recipe every command reads loads this module

    return float(Levenshtein.normalized_similarity(candidate, reference))


def edit_similarity_truth_len(candidate: str, reference: str) -> float:
    """The counterfactual paper's edit similarity (000, §3, after Ippolito et al. 2023):
    1 - Levenshtein(candidate, reference) / |reference|, floored at 0: a long generation is not forgiven
    by its own length. The floor and an empty reference (1 when the candidate is empty too, else 0) are
    our choices; the paper's ground truths are never empty."""
    from rapidfuzz.distance import Levenshtein

    if not reference:
        return 1.0 if not candidate else 0.0
    return max(0.0, 1.0 - Levenshtein.distance(candidate, reference) / len(reference))


def longest_common_substring(a: str, b: str) -> int:
    """Length of the longest contiguous run shared by `a` and `b` (a substring, not a subsequence): a
    suffix automaton of `b` walked along `a`, holding at each character the longest suffix of a[:i] found
    in `b`, in linear time. difflib's SequenceMatcher answers too short with its autojunk heuristic
    (spaces in code) and is far slower on code without it."""
    if not a or not b:
        return 0
    # States: transitions, suffix link, length of the longest string in the state.
    trans: list[dict[str, int]] = [{}]
    link = [-1]
    length = [0]
    last = 0
    for ch in b:
        cur = len(length)
        trans.append({})
        length.append(length[last] + 1)
        link.append(0)
        p = last
        while p != -1 and ch not in trans[p]:
            trans[p][ch] = cur
            p = link[p]
        if p != -1:
            q = trans[p][ch]
            if length[p] + 1 == length[q]:
                link[cur] = q
            else:
                clone = len(length)
                trans.append(dict(trans[q]))
                length.append(length[p] + 1)
                link.append(link[q])
                while p != -1 and trans[p].get(ch) == q:
                    trans[p][ch] = clone
                    p = link[p]
                link[q] = clone
                link[cur] = clone
        last = cur
    best = state = run = 0
    for ch in a:
        while state and ch not in trans[state]:
            state = link[state]
            run = length[state]
        if ch in trans[state]:
            state = trans[state][ch]
            run += 1
            if run > best:
                best = run
        # else: state is the root and run is 0
    return best


def lcs_similarity(candidate: str, reference: str) -> float:
    """Longest common substring length / max(len): 1.0 for equal texts, 0.0 when nothing is shared."""
    longest = max(len(candidate), len(reference))
    if longest == 0:
        return 1.0
    return longest_common_substring(candidate, reference) / longest


def jaccard(candidate: Sequence[Hashable], reference: Sequence[Hashable]) -> float:
    """|A ∩ B| / |A ∪ B| over the two token sets; two empty sets -> 1.0."""
    a, b = set(candidate), set(reference)
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


MINHASH_PERMUTATIONS = 128
_PRIME = (1 << 31) - 1  # a, x < 2^31 keeps a * x + b inside uint64


def minhash_signature(tokens: Sequence[str], permutations: int = MINHASH_PERMUTATIONS, seed: int = 0):
    """MinHash signature of a token set: per permutation the minimum of h(x) = (a * x + b) mod (2^31 - 1)
    over blake2b token hashes (the same in every worker, unlike `hash`), as uint64; an empty set gives
    the modulus everywhere (an "infinite" minimum), so two empty sets agree."""
    rng = np.random.default_rng(seed)
    a = rng.integers(1, _PRIME, size=permutations, dtype=np.uint64)
    b = rng.integers(0, _PRIME, size=permutations, dtype=np.uint64)
    x = np.array([_token_hash(t) for t in set(tokens)], dtype=np.uint64)
    if x.size == 0:
        return np.full(permutations, _PRIME, dtype=np.uint64)
    return ((a[:, None] * x[None, :] + b[:, None]) % np.uint64(_PRIME)).min(axis=1)


def _token_hash(token: str) -> int:
    digest = hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % _PRIME


def minhash_similarity(sig_a, sig_b) -> float:
    """Fraction of permutations whose minima agree: an unbiased estimate of the Jaccard index."""
    return float((sig_a == sig_b).mean())
