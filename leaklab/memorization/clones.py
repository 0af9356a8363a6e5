"""Type-1 clone detection: which runs of lines an output shares verbatim with a corpus.

A snippet is memorised when at least `min_lines` consecutive whitespace-normalised lines of an output
occur consecutively in one corpus document, blank lines dropped on both sides, with at least
MIN_INFORMATIVE lines that are not trivial (punctuation, a bare `pass`): the definition of
docs/evaluations.md#extraction-003-3-5, after "Unveiling memorization in code models". The index holds
polynomial hashes of line-hash windows, sorted once; hashes are Python's `hash`, so an index lives in
one process (rebuilt in seconds, never stored).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

MIN_LINES = 6
MIN_INFORMATIVE = 3
MAX_LOCATIONS = 64  # corpus locations tried when extending one match (enough for boilerplate repeats)

_TRIVIAL_WORDS = {"pass", "else:", "try:", "finally:", "return", "break", "continue", "...", '"""', "'''"}
_PUNCTUATION_ONLY = re.compile(r"^[\s()\[\]{},:;.]*$")
_MULT = np.uint64(0x9E3779B97F4A7C15)  # odd multiplier of the window hash (golden-ratio constant)


def normalise(line: str) -> str:
    return " ".join(line.split())


def is_trivial(normalised_line: str) -> bool:
    return normalised_line in _TRIVIAL_WORDS or bool(_PUNCTUATION_ONLY.match(normalised_line))


def code_lines(text: str) -> list[str]:
    """The normalised, non-blank lines of a text."""
    return [n for n in (normalise(line) for line in text.splitlines()) if n]


def _line_hashes(lines: Sequence[str]) -> np.ndarray:
    return np.fromiter((hash(line) for line in lines), dtype=np.int64, count=len(lines)).view(np.uint64)


def _window_hashes(hashes: np.ndarray, width: int) -> np.ndarray:
    """Hash of every `width` consecutive line hashes (uint64 arithmetic wraps, which is what we want)."""
    n = len(hashes) - width + 1
    if n <= 0:
        return np.zeros(0, dtype=np.uint64)
    out = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(width):
            out = out * _MULT + hashes[j : j + n]
    return out


@dataclass
class Clone:
    """One memorised run: output lines [start, start + n_lines) equal corpus lines of `doc` from `doc_line`."""

    output: int  # index of the output
    start: int  # first normalised line in the output
    n_lines: int
    doc: int  # corpus document of the longest match
    doc_line: int  # its first normalised line in that document
    text: str  # the normalised lines joined by newlines: the snippet's identity
    corpus_frequency: int  # times the whole run occurs in the corpus (over all documents)


@dataclass
class CorpusIndex:
    """Line-hash index of a corpus; build it with `build_index`."""

    names: list[str]  # one per document
    lines: list[str]  # every normalised non-blank line of every document, in order
    hashes: np.ndarray  # uint64 [n_lines]
    doc_of_line: np.ndarray  # int32 [n_lines]
    doc_start: np.ndarray  # int64 [n_docs]: first line of each document
    window_keys: np.ndarray  # uint64, sorted: the hash of every in-document window
    window_pos: np.ndarray  # int64: the first line of the window with that key
    texts: list[str]  # each document as given (references, not copies): for `source`
    source_line: np.ndarray  # int32 [n_lines]: each normalised line's line number in its document
    min_lines: int = MIN_LINES

    @property
    def n_docs(self) -> int:
        return len(self.names)

    def source(self, doc: int, doc_line: int, n_lines: int) -> str:
        """The document's own text of the normalised lines [doc_line, doc_line + n_lines): its lines as
        written (indentation kept), from the first to the last, blank lines between them included."""
        first = int(self.doc_start[doc]) + doc_line
        start, end = int(self.source_line[first]), int(self.source_line[first + n_lines - 1])
        return "\n".join(self.texts[doc].splitlines()[start : end + 1])

    def locations(self, key: np.uint64) -> np.ndarray:
        """First lines of every corpus window with this hash."""
        lo = np.searchsorted(self.window_keys, key, side="left")
        hi = np.searchsorted(self.window_keys, key, side="right")
        return self.window_pos[lo:hi]


def build_index(documents: Iterable[tuple[str, str]], min_lines: int = MIN_LINES) -> CorpusIndex:
    """Index (name, text) documents (min_lines >= 2: evaluate.extraction.min_lines is checked so).
    Texts that are empty after normalisation are left out."""
    names: list[str] = []
    texts: list[str] = []
    lines: list[str] = []
    source_line: list[int] = []
    starts: list[int] = []
    for name, text in documents:
        # code_lines, keeping where each line stands in the document.
        numbered = [(i, n) for i, n in enumerate(normalise(line) for line in text.splitlines()) if n]
        if not numbered:
            continue
        names.append(name)
        texts.append(text)
        starts.append(len(lines))
        source_line.extend(i for i, _ in numbered)
        lines.extend(n for _, n in numbered)
    hashes = _line_hashes(lines)
    doc_start = np.asarray(starts, dtype=np.int64)
    doc_len = np.diff(np.append(doc_start, len(lines)))
    doc_of_line = np.repeat(np.arange(len(names), dtype=np.int32), doc_len)
    # Windows over the whole stream, then keep those that do not cross a document boundary.
    keys = _window_hashes(hashes, min_lines)
    pos = np.arange(len(keys), dtype=np.int64)
    inside = doc_of_line[pos] == doc_of_line[pos + min_lines - 1] if len(keys) else np.zeros(0, bool)
    keys, pos = keys[inside], pos[inside]
    order = np.argsort(keys, kind="stable")
    return CorpusIndex(
        names=names,
        lines=lines,
        hashes=hashes,
        doc_of_line=doc_of_line,
        doc_start=doc_start,
        window_keys=keys[order],
        window_pos=pos[order],
        texts=texts,
        source_line=np.asarray(source_line, dtype=np.int32),
        min_lines=min_lines,
    )


def _occurrences(index: CorpusIndex, locs: np.ndarray, target: np.ndarray) -> np.ndarray:
    """How far each corpus location `locs` continues to equal `target` (a line-hash run), within its doc."""
    length = np.zeros(len(locs), dtype=np.int64)
    alive = np.ones(len(locs), dtype=bool)
    n_total = len(index.hashes)
    for k in range(len(target)):
        at = locs + k
        ok = alive & (at < n_total)
        ok[ok] = (index.hashes[at[ok]] == target[k]) & (
            index.doc_of_line[at[ok]] == index.doc_of_line[locs[ok]]
        )
        length += ok
        alive = ok
        if not alive.any():
            break
    return length


def find_clones(index: CorpusIndex, outputs: Sequence[str]) -> list[list[Clone]]:
    """The memorised runs of each output (greedy, non-overlapping, longest first from the left)."""
    width = index.min_lines
    per_output_lines = [code_lines(o) for o in outputs]
    per_output_hashes = [_line_hashes(lines) for lines in per_output_lines]
    # One lookup for the windows of every output.
    windows = [_window_hashes(h, width) for h in per_output_hashes]
    owner = np.repeat(np.arange(len(outputs)), [len(w) for w in windows])
    offset = np.concatenate([np.arange(len(w)) for w in windows]) if windows else np.zeros(0, int)
    keys = np.concatenate(windows) if windows else np.zeros(0, np.uint64)
    slot = np.searchsorted(index.window_keys, keys)
    hit = np.zeros(len(keys), dtype=bool)
    valid = slot < len(index.window_keys)
    hit[valid] = index.window_keys[slot[valid]] == keys[valid]

    found: list[list[Clone]] = [[] for _ in outputs]
    hits_by_output: dict[int, list[int]] = {}
    for o, start in zip(owner[hit].tolist(), offset[hit].tolist()):
        hits_by_output.setdefault(o, []).append(start)
    for o, starts in hits_by_output.items():
        lines, hashes = per_output_lines[o], per_output_hashes[o]
        covered_until = 0
        for start in starts:
            if start < covered_until:
                continue  # inside a run already taken
            locs = index.locations(_window_hashes(hashes[start : start + width], width)[0])
            tail = hashes[start:]
            lengths = _occurrences(index, locs[:MAX_LOCATIONS], tail)
            best = int(np.argmax(lengths))
            n = int(lengths[best])
            if n < width:
                continue  # a hash collision of the window: the lines differ
            run = lines[start : start + n]
            if sum(not is_trivial(line) for line in run) < MIN_INFORMATIVE:
                continue
            # Corpus frequency of the whole run: every location of its first window, not only the first few.
            frequency = int((_occurrences(index, locs, hashes[start : start + n]) >= n).sum())
            loc = int(locs[best])
            doc = int(index.doc_of_line[loc])
            found[o].append(
                Clone(o, start, n, doc, loc - int(index.doc_start[doc]), "\n".join(run), frequency)
            )
            covered_until = start + n
    return found


@dataclass
class Snippet:
    """One distinct memorised snippet over all outputs."""

    text: str
    n_lines: int
    corpus_frequency: int
    output_frequency: int  # outputs that contain it
    example_doc: str  # a corpus document it comes from
    doc: int  # that document's index, and the snippet's first normalised line in it (`CorpusIndex.source`)
    doc_line: int


def unique_snippets(index: CorpusIndex, clones: list[list[Clone]]) -> list[Snippet]:
    """Distinct snippets, most frequent in the outputs first (ties: longer first, then text)."""
    by_text: dict[str, Snippet] = {}
    for per_output in clones:
        for text in {c.text for c in per_output}:
            clone = next(c for c in per_output if c.text == text)
            if text in by_text:
                by_text[text].output_frequency += 1
            else:
                by_text[text] = Snippet(
                    text,
                    clone.n_lines,
                    clone.corpus_frequency,
                    1,
                    index.names[clone.doc],
                    clone.doc,
                    clone.doc_line,
                )
    return sorted(by_text.values(), key=lambda s: (-s.output_frequency, -s.n_lines, s.text))


def naive_clones(
    corpus_docs: Sequence[list[str]], output: str, min_lines: int = MIN_LINES
) -> list[tuple[int, int]]:
    """The baseline the index is measured against: for every line of the output, scan every corpus line
    for an equal one and extend; (start, length) of the greedy runs. Same definitions, no index."""
    lines = code_lines(output)
    runs = []
    i = 0
    while i <= len(lines) - min_lines:
        best = 0
        for doc in corpus_docs:
            for j, line in enumerate(doc):
                if line != lines[i]:
                    continue
                n = 1
                while i + n < len(lines) and j + n < len(doc) and doc[j + n] == lines[i + n]:
                    n += 1
                best = max(best, n)
        if best >= min_lines and sum(not is_trivial(x) for x in lines[i : i + best]) >= MIN_INFORMATIVE:
            runs.append((i, best))
            i += best
        else:
            i += 1
    return runs
