"""Structural similarity of Python code: TSED (Song et al. 2024), CodeBLEU and its parts (Ren et al. 2020,
as the `codebleu` package 0.7.0 defines it, four tested differences), MRI's AST similarity (Memorize or
generalize?, §3.1).

TSED = max(0, (max_nodes - TED) / max_nodes), TED over tree-sitter's named nodes labelled by type with
costs TSED_COSTS (an exact Zhang–Shasha programme compiled with numba); MRI's AST similarity is the same
over Python `ast` node classes with unit costs. Each snippet is parsed once into a `Structure`.
See docs/perturbations.md#structural-similarity.
"""

from __future__ import annotations

import ast
import hashlib
import io
import keyword
import math
import operator
import re
import sys
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from functools import cache, cached_property, lru_cache
from importlib import metadata
from itertools import repeat

import numpy as np
from numba import njit

from leaklab.similarity.dataflow import data_flow
from leaklab.similarity.text import (
    bleu_from_counts,
    clipped_matches,
    edit_similarity_max_len,
    ngram_counts,
)

TSED_COSTS = (1.0, 0.8, 1.0)  # delete, insert, rename (Song et al. 2024; the tsed package's defaults)
MRI_COSTS = (1.0, 1.0, 1.0)
# Python's keywords (3.12 incl. the soft ones), the weighted n-gram's weight-1 tokens.
CODEBLEU_KEYWORDS = frozenset(keyword.kwlist) | {"match", "case", "type"}
_AST_CONTEXTS = (ast.Load, ast.Store, ast.Del)
# Compiled code is cached on disk (a new process loads it instead of compiling again) and drops the GIL.
jit = njit(cache=True, nogil=True)


def grammar_versions() -> dict[str, str]:
    """The parser versions every structural score depends on (node counts change between grammars)."""
    return {name: metadata.version(name) for name in ("tree-sitter", "tree-sitter-python")}


@lru_cache(maxsize=1)
def python_parser():
    """tree-sitter's parser for the pinned Python grammar, built once (every structural score uses it)."""
    import tree_sitter
    import tree_sitter_python

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_python.language()))


@cache  # node and field labels repeat: hash each once per process
def _label(text: str) -> int:
    """A 63-bit hash equal in every process (labels and subtrees cross process boundaries)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()) >> 1


# --------------------------------------------------------------------------- trees for edit distance


@dataclass(frozen=True)
class OrderedTree:
    """A tree in postorder: labels[i], the postorder index of i's leftmost leaf, and Zhang–Shasha's keyroots."""

    labels: np.ndarray
    leftmost: np.ndarray
    keyroots: np.ndarray


def ordered_tree(root, children, label) -> OrderedTree:
    """Postorder arrays of any tree given `children(node)` and `label(node) -> str` (iterative, no recursion limit)."""
    labels: list[int] = []
    leftmost: list[int] = []
    stack = [(root, False)]
    pending: list[list] = []  # per open node: [postorder index of its leftmost leaf, set by its first child]
    while stack:
        node, done = stack.pop()
        if done:
            idx = len(labels)
            cell = pending.pop()
            leftmost_idx = cell[0] if cell[0] >= 0 else idx
            labels.append(_label(label(node)))
            leftmost.append(leftmost_idx)
            if pending and pending[-1][0] < 0:
                pending[-1][0] = leftmost_idx
            continue
        pending.append([-1])
        stack.append((node, True))
        for child in reversed(children(node)):
            stack.append((child, False))
    # A keyroot is the highest node with a given leftmost leaf: the root, and every node with a left sibling.
    last_with_leaf = {value: i for i, value in enumerate(leftmost)}
    keyroots = np.asarray(sorted(last_with_leaf.values()), dtype=np.int64)
    return OrderedTree(np.asarray(labels, dtype=np.int64), np.asarray(leftmost, dtype=np.int64), keyroots)


@jit
def _zhang_shasha(l1, lm1, kr1, l2, lm2, kr2, costs):  # pragma: no cover - compiled
    # costs: (delete, insert, rename) as three floats, the `costs` of `tree_edit_distance`
    cost_del, cost_ins, cost_ren = costs
    n1 = l1.shape[0]
    n2 = l2.shape[0]
    tree_dist = np.zeros((n1, n2))
    forest = np.zeros((n1 + 1, n2 + 1))
    for a in range(kr1.shape[0]):
        i = kr1[a]
        li = lm1[i]
        for b in range(kr2.shape[0]):
            j = kr2[b]
            lj = lm2[j]
            rows = i - li + 2
            cols = j - lj + 2
            forest[0, 0] = 0.0
            for x in range(1, rows):
                forest[x, 0] = forest[x - 1, 0] + cost_del
            for y in range(1, cols):
                forest[0, y] = forest[0, y - 1] + cost_ins
            for x in range(1, rows):
                node1 = li + x - 1
                for y in range(1, cols):
                    node2 = lj + y - 1
                    delete = forest[x - 1, y] + cost_del
                    insert = forest[x, y - 1] + cost_ins
                    if lm1[node1] == li and lm2[node2] == lj:
                        rename = 0.0 if l1[node1] == l2[node2] else cost_ren
                        best = min(delete, insert, forest[x - 1, y - 1] + rename)
                        forest[x, y] = best
                        tree_dist[node1, node2] = best
                    else:
                        keep = forest[lm1[node1] - li, lm2[node2] - lj] + tree_dist[node1, node2]
                        forest[x, y] = min(delete, insert, keep)
    return tree_dist[n1 - 1, n2 - 1]


def tree_edit_distance(source: OrderedTree, target: OrderedTree, costs=TSED_COSTS) -> float:
    """Minimum cost to edit `source` into `target` (delete from source, insert into target, rename)."""
    return float(
        _zhang_shasha(
            source.labels, source.leftmost, source.keyroots,
            target.labels, target.leftmost, target.keyroots,
            tuple(float(cost) for cost in costs),
        )
    )  # fmt: skip


def normalised_tree_similarity(reference: OrderedTree, candidate: OrderedTree, costs) -> float:
    """max(0, (max_nodes - TED) / max_nodes); every tree has its root, so max_nodes >= 1."""
    nodes = max(reference.labels.size, candidate.labels.size)
    return max(0.0, (nodes - tree_edit_distance(reference, candidate, costs)) / nodes)


# --------------------------------------------------------------------------- CodeBLEU parts


def strip_comments_and_docstrings(source: str) -> str:
    """Source without comments and statement-level strings (docstrings), blank lines dropped, by CodeBLEU's
    tokenize rule (`_strip_by_tokenize`: a string token after INDENT or NEWLINE, or at column 0, goes);
    `_strip_by_scanning` gives the same text faster where it applies (the tests compare the two)."""
    fast = _strip_by_scanning(source)
    return _strip_by_tokenize(source) if fast is None else fast


def _strip_by_tokenize(source: str) -> str:
    out: list[str] = []
    previous = tokenize.INDENT
    last_line, last_col = -1, 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            (start_line, start_col), (end_line, end_col) = tok.start, tok.end
            if start_line > last_line:
                last_col = 0
            if start_col > last_col:
                out.append(" " * (start_col - last_col))
            if tok.type == tokenize.COMMENT:
                pass
            elif tok.type == tokenize.STRING:
                if previous not in (tokenize.INDENT, tokenize.NEWLINE) and start_col > 0:
                    out.append(tok.string)
            else:
                out.append(tok.string)
            previous = tok.type
            last_line, last_col = end_line, end_col
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return source
    return "\n".join(line for line in "".join(out).split("\n") if line.strip())


# One pass over the text finds what the tokenize rule depends on: string literals (their quotes on;
# a prefix is read back from the quote), comments, brackets and newlines. Inside a string or comment
# nothing else matches; other code is skipped (the lookahead lets `re` jump to the next candidate).
_SCAN = re.compile(
    r"""(?=['"#()\[\]{}\n])(?:(?P<s>'''(?:[^\\]|\\.)*?'''|\"\"\"(?:[^\\]|\\.)*?\"\"\""""
    r"""|'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")|(?P<c>\#[^\n]*)|(?P<o>[(\[{])|(?P<x>[)\]}])|(?P<n>\n))""",
    re.DOTALL,
)
_STRING_PREFIX = frozenset("rRbBuUfF")
_SPACES = re.compile(" *")
_FSTRING = re.compile(r"""(?<!\w)[rRbB]?[fF][rR]?['"]""")


def _strip_by_scanning(source: str) -> str | None:
    """`_strip_by_tokenize`'s result for source that parses, or None where this scanner does not apply.
    Without tabs, form feeds, carriage returns or backslash continuations, tokenize's padding reproduces
    every gap: the result is the source minus comments and dropped strings. A string is dropped at column
    0, or as its row's first token outside brackets when the row opens a deeper block (INDENT) or follows
    a row that ended a logical line (NEWLINE; after a blank or comment-only row tokenize gives NL)."""
    if any(ch in source for ch in "\t\r\f\v") or "\\\n" in source:
        return None
    if sys.version_info >= (3, 12) and _FSTRING.search(source):
        return None  # 3.12's tokenize splits f-strings into several tokens
    cuts: list[tuple[int, int]] = []
    indents = [0]
    depth = 0
    opens_line = True  # tokenize's previous token is INDENT or NEWLINE (it starts as if after an INDENT)
    end = len(source)
    position = 0
    while True:  # the start of a row (at 0, then after each newline outside strings)
        row_start = position
        first = _SPACES.match(source, position).end()  # where the row's first token starts
        if first >= end or source[first] in "#\n":
            first = -1  # blank or comment-only: no token, tokenize ends it with NL
        elif depth == 0:  # a logical line starts: tokenize compares its column with the open blocks
            column = first - row_start
            if column > indents[-1]:
                indents.append(column)
                opens_line = True  # INDENT
            elif column < indents[-1]:
                while len(indents) > 1 and indents[-1] > column:
                    indents.pop()
                opens_line = False  # DEDENT
        has_token = first >= 0
        for match in _SCAN.finditer(source, position):
            kind = match.lastgroup
            start = match.start()
            if kind == "n":
                opens_line = depth == 0 and has_token  # NEWLINE, else NL
                position = start + 1
                break
            if kind == "s":
                stop = match.end()
                # Up to two prefix letters belong to the string unless a name runs into them (`if"a"`).
                prefix = start
                while prefix > start - 2 and prefix > row_start and source[prefix - 1] in _STRING_PREFIX:
                    prefix -= 1
                if (
                    prefix < start
                    and prefix > 0
                    and (source[prefix - 1].isalnum() or source[prefix - 1] == "_")
                ):
                    prefix = start
                start = prefix
                if start == row_start or (start == first and opens_line):
                    cuts.append((start, stop))
                last_newline = source.rfind("\n", start, stop)
                if last_newline >= 0:  # the row now continues after the string's last line
                    row_start, first, has_token = last_newline + 1, -1, True
            elif kind == "c":
                cuts.append((start, match.end()))
            elif kind == "o":
                depth += 1
            else:
                depth -= 1
        else:
            break
    pieces = []
    last = 0
    for start, stop in cuts:
        pieces.append(source[last:start])
        last = stop
    pieces.append(source[last:])
    return "\n".join(line for line in "".join(pieces).split("\n") if line.strip())


@dataclass
class _Flat:
    """A tree-sitter tree as flat preorder lists from one cursor walk. Compiled metrics read the ids and
    `last`; the Python ones (broken trees, data flow) also `named`, `fields` and `kids`, built when first read."""

    nodes: list
    types: list[str]
    last: list[int]  # the preorder index of each node's last descendant (itself for a leaf)
    has_error: bool
    kind_ids: list[int]  # tree-sitter's ids of `types` and `fields` (0: no field)
    field_ids: list[int]
    language: object

    @cached_property
    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(kind ids, last descendants, field ids) as int64 arrays, what compiled code reads."""
        return tuple(
            np.array(values, dtype=np.int64) for values in (self.kind_ids, self.last, self.field_ids)
        )

    @cached_property
    def named(self) -> list[bool]:
        return [_KINDS[k][1] for k in self.kind_ids]

    @cached_property
    def fields(self) -> list[str | None]:
        names = field_names(self.language)
        return [names[f] for f in self.field_ids]

    @cached_property
    def kids(self) -> list:
        """Per node the list of its children, () for a leaf."""
        last = self.last
        out: list = []
        for i, end in enumerate(last):
            if end == i:
                out.append(())
                continue
            children = []
            c = i + 1
            while c <= end:
                children.append(c)
                c = last[c] + 1
            out.append(children)
        return out

    def child(self, i: int, name: str) -> int | None:
        """The first child of i in field `name` (tree-sitter's child_by_field_name)."""
        for c in self.kids[i]:
            if self.fields[c] == name:
                return c
        return None


def _flatten(tree) -> _Flat:
    cursor = tree.walk()
    nodes: list = []
    field_ids: list = []
    last: list[int] = []
    open_nodes: list[int] = []
    first_child, next_sibling, parent = cursor.goto_first_child, cursor.goto_next_sibling, cursor.goto_parent
    add_node, add_field, add_last = nodes.append, field_ids.append, last.append
    i = 0
    while True:
        add_node(cursor.node)
        add_field(cursor.field_id or 0)  # an int: field_name would build a new str per node
        add_last(i)
        if first_child():
            open_nodes.append(i)
            i += 1
            continue
        i += 1
        while not next_sibling():
            if not parent():
                # A node's type and namedness follow from its kind id: read them once per kind.
                kind_ids = [node.kind_id for node in nodes]
                kinds = _KINDS
                for kind, node in zip(kind_ids, nodes):
                    if kind not in kinds:
                        kinds[kind] = (node.type, node.is_named)
                types = [kinds[k][0] for k in kind_ids]
                has_error = tree.root_node.has_error
                return _Flat(nodes, types, last, has_error, kind_ids, field_ids, tree.language)
            last[open_nodes.pop()] = i - 1


_KINDS: dict[int, tuple[str, bool]] = {}  # tree-sitter kind id -> (node type, is named), one grammar


def _subtree_keys(flat: _Flat, source: bytes) -> list[int]:
    """One key per node with children (and the root), folded bottom-up from the label and each printed
    child's (field, key): equal keys <=> equal s-expressions (`str(node)`), without printing every subtree.
    Compiled for clean trees; in Python for trees with ERROR or MISSING nodes, whose labels need the source."""
    if flat.has_error:
        keys = np.array(_subtree_keys_python(flat, source), dtype=np.uint64)
    else:
        keys = _k_subtree_keys(*flat.arrays, *_label_tables(flat.language))
    last = flat.arrays[1]
    with_children = last > np.arange(last.size)
    with_children[0] = True  # the root
    return keys[with_children].tolist()


# A key: start from a seed (one for named nodes, one for the unnamed nodes with children that tree-sitter
# prints as `(is not("is")("not"))`), then per value h = (h ^ value) * M mod 2^64, h ^= h >> 32.
_SEED_NAMED, _SEED_UNNAMED = 0x517CC1B727220A95, 0x2545F4914F6CDD1D
_KEY_MULTIPLIER = 0x9E3779B97F4A7C15
_KEY_MASK = (1 << 64) - 1


def _fold(seed: int, values) -> int:
    h = seed
    for value in values:
        h = ((h ^ value) * _KEY_MULTIPLIER) & _KEY_MASK
        h ^= h >> 32
    return h


def _subtree_keys_python(flat: _Flat, source: bytes) -> list[int]:
    """Every node's key (0 for a leaf), as `_k_subtree_keys` computes it, for any tree: tree-sitter prints
    a MISSING node as `MISSING type` and a childless ERROR node as `UNEXPECTED c` with its first character."""
    types, named, fields, kids = flat.types, flat.named, flat.fields, flat.kids
    missing = [node.is_missing for node in flat.nodes] if flat.has_error else [False] * len(types)
    keys = [0] * len(types)
    for i in range(len(types) - 1, -1, -1):
        children = kids[i]
        if named[i] or missing[i]:
            if missing[i]:
                label = f"MISSING {types[i]}" if named[i] else f'MISSING "{types[i]}"'
            elif types[i] == "ERROR" and not children and flat.nodes[i].end_byte > flat.nodes[i].start_byte:
                node = flat.nodes[i]
                char = source[node.start_byte : node.end_byte].decode("utf-8", errors="replace")[:1]
                label = f"UNEXPECTED {char}"
            else:
                label = types[i]
            values = [_label(label)]
            for c in children:
                if named[c] or missing[c]:
                    values += (_label(fields[c]) if fields[c] else 0), keys[c]
            keys[i] = _fold(_SEED_NAMED, values)
        elif children:
            keys[i] = _fold(_SEED_UNNAMED, [_label(types[i])] + [_label(types[c]) for c in children])
    return keys


@lru_cache(maxsize=4)
def field_names(language) -> list[str | None]:
    """The grammar's field names by field id (id 0, no field: None)."""
    return [language.field_name_for_id(f) if f else None for f in range(language.field_count + 1)]


@lru_cache(maxsize=4)
def _label_tables(language) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per kind id: whether it is named and its label's hash; per field id: its label's hash (0: none)."""
    kinds = range(language.node_kind_count)
    named = np.array([language.node_kind_is_named(k) for k in kinds], dtype=np.bool_)
    kind_labels = np.array([_label(language.node_kind_for_id(k) or "") for k in kinds], dtype=np.uint64)
    field_labels = np.array([_label(name) if name else 0 for name in field_names(language)], dtype=np.uint64)
    return named, kind_labels, field_labels


@jit
def _k_mix(h, value):
    h = (h ^ value) * np.uint64(_KEY_MULTIPLIER)
    return h ^ (h >> np.uint64(32))


@jit
def _k_subtree_keys(kinds, last, field_ids, named, kind_labels, field_labels):  # pragma: no cover - compiled
    n = kinds.shape[0]
    keys = np.zeros(n, dtype=np.uint64)
    for i in range(n - 1, -1, -1):
        if named[kinds[i]]:
            h = _k_mix(np.uint64(_SEED_NAMED), kind_labels[kinds[i]])
            c = i + 1
            while c <= last[i]:
                if named[kinds[c]]:
                    h = _k_mix(_k_mix(h, field_labels[field_ids[c]]), keys[c])
                c = last[c] + 1
            keys[i] = h
        elif last[i] > i:
            h = _k_mix(np.uint64(_SEED_UNNAMED), kind_labels[kinds[i]])
            c = i + 1
            while c <= last[i]:
                h = _k_mix(h, kind_labels[kinds[c]])
                c = last[c] + 1
            keys[i] = h
    return keys


def _weighted_recall(candidate: list[Counter], reference: list[Counter], matched: list) -> float:
    """CodeBLEU's weighted n-gram match from `ngram_counts` of both sides: BLEU's shape with clipped
    recall (`matched` per order), keyword unigrams weighted 1, other unigrams 0.2."""
    c, r = sum(candidate[0].values()), sum(reference[0].values())
    if c == 0 or r == 0:
        return 0.0
    max_n = len(reference)
    log_sum = 0.0
    for n, (cand, ref) in enumerate(zip(candidate, reference), start=1):
        if n == 1:
            weights = [1.0 if word in CODEBLEU_KEYWORDS else 0.2 for word in ref]
            # Float sums in the reference's order, as codebleu adds them; an unmatched unigram adds
            # 0.0, which changes no sum. map() keeps the loop in C.
            hits = sum(map(operator.mul, map(min, ref.values(), map(cand.get, ref, repeat(0))), weights))
            total = max(1, sum(map(operator.mul, ref.values(), weights)))
            if hits == 0:
                return 0.0
        else:
            hits = matched[n - 1]
            total = max(1, sum(ref.values()))
        log_sum += math.log((hits if hits > 0 else 0.1) / total) / max_n
    return (1.0 if c > r else math.exp(1 - r / c)) * math.exp(log_sum)


# --------------------------------------------------------------------------- the per-snippet structure


@dataclass
class Structure:
    """Everything the structural metrics need from one snippet, parsed once. `error` set: nothing else is."""

    error: str | None = None
    tsed_tree: OrderedTree | None = None
    ast_tree: OrderedTree | None = None
    unparsed: str = ""
    subtrees: list[int] = field(default_factory=list)  # keys of every subtree's s-expression
    flow: list[tuple] = field(default_factory=list)
    # 1..4-gram counts of the raw text's whitespace tokens, keyed by joined words (CodeBLEU's BLEU-shaped parts)
    words: list[Counter] = field(default_factory=list)


STRUCTURE_PARTS = ("tsed", "ast", "codebleu")
_TREE_SITTER_ERROR = "tree-sitter could not parse it (ERROR or MISSING node)"


def structure(text: str, parts: tuple[str, ...] = STRUCTURE_PARTS) -> Structure:
    """Parse `text` once into the structural representations `parts` need (all by default); a snippet
    that Python or tree-sitter cannot parse carries the reason in `error` and nothing else. CodeBLEU alone
    parses the raw text only when the stripped text's tree is broken."""
    if not text.strip():
        return Structure(error="empty")
    try:
        python_tree = ast.parse(text)
    except SyntaxError as err:
        return Structure(error=f"SyntaxError: {err.msg}" + (f" (line {err.lineno})" if err.lineno else ""))
    except (ValueError, RecursionError, MemoryError) as err:
        return Structure(error=f"{type(err).__name__}: {err}")
    parser = python_parser()
    stripped_text = strip_comments_and_docstrings(text) if "codebleu" in parts else text
    tree = stripped_tree = None
    if stripped_text != text and all(part == "codebleu" for part in parts):
        stripped_tree = parser.parse(stripped_text.encode("utf-8", "surrogatepass"))
    if stripped_tree is None or stripped_tree.root_node.has_error:
        tree = parser.parse(text.encode("utf-8", "surrogatepass"))
        if tree.root_node.has_error:
            return Structure(error=_TREE_SITTER_ERROR)
    try:
        return _parsed_structure(text, python_tree, parser, tree, stripped_text, stripped_tree, parts)
    except Exception as err:  # noqa: BLE001 - a metric bug must cost this snippet's scores, not the batch
        return Structure(error=f"internal error in the structural metrics: {type(err).__name__}: {err}")


def _parsed_structure(text, python_tree, parser, tree, stripped_text, stripped_tree, parts) -> Structure:
    """The parts of a snippet that parses. `tree` (the raw text's) may be None when only CodeBLEU is asked
    and `stripped_tree` is in hand; `stripped_tree` None: parse it here unless nothing was stripped."""
    result = Structure()
    if "tsed" in parts:
        result.tsed_tree = ordered_tree(
            tree.root_node, operator.attrgetter("named_children"), operator.attrgetter("type")
        )
    if "ast" in parts:
        result.ast_tree = ordered_tree(
            python_tree,
            lambda n: [c for c in ast.iter_child_nodes(n) if not isinstance(c, _AST_CONTEXTS)],
            lambda n: type(n).__name__,
        )
        result.unparsed = ast.unparse(python_tree)
    if "codebleu" in parts:
        stripped = stripped_text.encode("utf-8", "surrogatepass")
        if stripped_tree is None:
            # Nothing stripped (no comment, docstring or blank line): the raw tree is the stripped one.
            stripped_tree = tree if stripped_text == text else parser.parse(stripped)
        flat = _flatten(stripped_tree)
        result.subtrees = _subtree_keys(flat, stripped)
        result.flow = data_flow(flat, stripped)
        result.words = ngram_counts(text.strip().split())
    return result


# --------------------------------------------------------------------------- pair metrics


def tsed(reference: Structure, candidate: Structure) -> float:
    """TSED of two parsed snippets (see the module docstring)."""
    return normalised_tree_similarity(reference.tsed_tree, candidate.tsed_tree, TSED_COSTS)


def syntax_match(reference: Structure, candidate: Structure) -> float:
    present = set(candidate.subtrees)
    return sum(1 for s in reference.subtrees if s in present) / len(reference.subtrees)


def dataflow_match(reference: Structure, candidate: Structure) -> float | None:
    """Fraction of the reference's data-flow edges matched one-to-one; None when it has none."""
    if not reference.flow:
        return None
    matched = Counter(reference.flow) & Counter(candidate.flow)
    return sum(matched.values()) / len(reference.flow)


def codebleu_parts(reference: Structure, candidate: Structure) -> dict[str, float | None]:
    """The four CodeBLEU components and their equal-weight mean (data flow None -> mean of the other three)."""
    # Clipped matches are symmetric: one count per order serves both BLEU-shaped parts.
    matched = [clipped_matches(c, r) for c, r in zip(candidate.words, reference.words)]
    parts = {
        "ngram": bleu_from_counts(candidate.words, reference.words, matched=matched),
        "weighted_ngram": _weighted_recall(candidate.words, reference.words, matched),
        "syntax": syntax_match(reference, candidate),
        "dataflow": dataflow_match(reference, candidate),
    }
    present = [v for v in parts.values() if v is not None]
    parts["equal"] = sum(present) / len(present)
    return parts


def ast_similarity(reference: Structure, candidate: Structure) -> float:
    """MRI's AST similarity: unit-cost tree edit distance over Python `ast` node classes, normalised."""
    return normalised_tree_similarity(reference.ast_tree, candidate.ast_tree, MRI_COSTS)


def mri_similarity(reference: Structure, candidate: Structure) -> float:
    """MRI's S = (AST similarity + edit similarity of the `ast.unparse`-normalised code) / 2."""
    return (
        ast_similarity(reference, candidate) + edit_similarity_max_len(candidate.unparsed, reference.unparsed)
    ) / 2
