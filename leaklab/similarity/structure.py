"""Structural similarity of Python code on tree-sitter: TSED, CodeBLEU (and its parts), MRI's AST similarity.

Everything here is computed from one parsed `Structure` per snippet (built once, compared many times),
so a ground truth compared with a target's and a reference's generation is parsed once.

TSED (Song et al. 2024): TED = tree edit distance between the tree-sitter trees of named nodes, labelled
by node type, with delete 1, insert 0.8, rename 1 (reference -> candidate: deleting a reference node costs
1, inserting a candidate node 0.8); TSED = max(0, (max_nodes - TED) / max_nodes). The distance is an
exact Zhang–Shasha dynamic programme compiled with numba (`_zhang_shasha`).
The `tsed` package names a node after the last field label printed inside its s-expression
("body:" instead of "function_definition") because its s-expression reader overwrites the type with
every bare word; `labels="tsed_package"` reproduces that for comparison, the default uses node types.

CodeBLEU (Ren et al. 2020) in the definition of the `codebleu` package 0.7.0, which the tests compare
against: n-gram match = sentence BLEU-4 over whitespace tokens (smoothing method 1); weighted n-gram =
BLEU-shaped recall with Python keywords weighted 1 and other unigrams 0.2; syntax match = fraction of the
reference's subtrees (s-expressions of every node with children) present in the candidate; data-flow match
= fraction of the reference's normalised def-use edges matched one-to-one in the candidate. Syntax and
data flow are computed with comments and docstrings removed. Four deliberate differences, each tested:
  - `codebleu` computes `theta * (dataflow or 1)`, so a data-flow match of 0 (no edge matched) counts as
    a perfect 1. Here 0 stays 0. When the reference has no data-flow edge at all the data-flow score is
    undefined (None) and CodeBLEU (equal) averages the three other parts.
  - Where loops merge two edges of one token, `codebleu` orders the parent names with `set()` (which
    depends on PYTHONHASHSEED); here they keep first-seen order, so scores are reproducible.
  - Its weighted n-gram match takes the brevity penalty against the length of `[tokens, weights]` (2),
    so a short candidate is never penalised; here the reference's token count is used, as in BLEU.
  - An assignment whose target and value both have three parts (`self.kind = 'abc'`) makes it pair the
    string's inner parts, fail a lookup and drop the whole function's data flow; here a string is one
    token. Token texts are read from bytes here, not from character columns, so non-ASCII lines agree.

MRI's AST similarity (Memorize or generalize?, §3.1): Python `ast` trees labelled by node class, without
the Load/Store/Del context nodes, unit edit costs; similarity = max(0, 1 - TED / max_nodes).
"""

from __future__ import annotations

import ast
import hashlib
import io
import keyword
import math
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata

import numpy as np

from leaklab.similarity.text import bleu_from_counts, ngram_counts

TSED_COSTS = (1.0, 0.8, 1.0)  # delete, insert, rename (Song et al. 2024; the tsed package's defaults)
MRI_COSTS = (1.0, 1.0, 1.0)
# Python's keywords (3.12 incl. the soft ones), the weighted n-gram's weight-1 tokens.
CODEBLEU_KEYWORDS = frozenset(keyword.kwlist) | {"match", "case", "type"}
_STRING_TYPES = ("string", "string_literal", "character_literal")
_AST_CONTEXTS = (ast.Load, ast.Store, ast.Del)


def grammar_versions() -> dict[str, str]:
    """The parser versions every structural score depends on (node counts change between grammars)."""
    return {name: metadata.version(name) for name in ("tree-sitter", "tree-sitter-python")}


@lru_cache(maxsize=1)
def _parser():
    import tree_sitter
    import tree_sitter_python

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_python.language()))


def _stable_hash(text: str) -> int:
    """A 63-bit hash equal in every process (labels and subtrees cross process boundaries)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()) >> 1


_label_hash = lru_cache(maxsize=65536)(_stable_hash)  # node labels repeat: hash each once per process


# --------------------------------------------------------------------------- trees for edit distance


@dataclass(frozen=True)
class OrderedTree:
    """A tree in postorder: labels[i], the postorder index of i's leftmost leaf, and Zhang–Shasha's keyroots."""

    labels: np.ndarray
    leftmost: np.ndarray
    keyroots: np.ndarray

    @property
    def size(self) -> int:
        return int(self.labels.size)


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
            labels.append(_label_hash(label(node)))
            leftmost.append(leftmost_idx)
            if pending and pending[-1][0] < 0:
                pending[-1][0] = leftmost_idx
            continue
        pending.append([-1])
        stack.append((node, True))
        for child in reversed(children(node)):
            stack.append((child, False))
    left = np.asarray(leftmost, dtype=np.int64)
    # A keyroot is the highest node with a given leftmost leaf: the root, and every node with a left sibling.
    last_with_leaf: dict[int, int] = {}
    for i, value in enumerate(leftmost):
        last_with_leaf[value] = i
    keyroots = np.asarray(sorted(last_with_leaf.values()), dtype=np.int64)
    return OrderedTree(np.asarray(labels, dtype=np.int64), left, keyroots)


def _jit(function):
    try:
        from numba import njit
    except ImportError:  # pure-Python fallback: the same code, slower
        return function
    return njit(cache=True, nogil=True)(function)


@_jit
def _zhang_shasha(l1, lm1, kr1, l2, lm2, kr2, cost_del, cost_ins, cost_ren):  # pragma: no cover - compiled
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
    cost_del, cost_ins, cost_ren = costs
    if source.size == 0 or target.size == 0:
        return source.size * cost_del + target.size * cost_ins
    return float(
        _zhang_shasha(
            source.labels, source.leftmost, source.keyroots,
            target.labels, target.leftmost, target.keyroots,
            float(cost_del), float(cost_ins), float(cost_ren),
        )
    )  # fmt: skip


def normalised_tree_similarity(reference: OrderedTree, candidate: OrderedTree, costs) -> float:
    """max(0, (max_nodes - TED) / max_nodes); two empty trees are identical (1.0)."""
    nodes = max(reference.size, candidate.size)
    if nodes == 0:
        return 1.0
    return max(0.0, (nodes - tree_edit_distance(reference, candidate, costs)) / nodes)


def _named_children(node) -> list:
    return node.named_children


def _tsed_package_label(node) -> str:
    # The tsed package reads `str(node)` word by word and keeps the last bare word inside a node's
    # parentheses: the last field label ("body:") printed before a named child, else the node type.
    label = node.type
    for i, child in enumerate(node.children):
        if child.is_named:
            name = node.field_name_for_child(i)
            if name:
                label = name + ":"
    return label


# --------------------------------------------------------------------------- CodeBLEU parts


def strip_comments_and_docstrings(source: str) -> str:
    """Source without comments and statement-level strings (docstrings), blank lines dropped.

    The rule CodeBLEU uses: a string token is dropped when it follows an INDENT or NEWLINE token or
    starts at column 0; columns are kept by padding with spaces. Untokenisable source is returned as is.
    """
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


def _is_token(node) -> bool:
    return (node.child_count == 0 or node.type in _STRING_TYPES) and node.type != "comment"


class _DataFlow:
    """Def-use edges of Python code as CodeBLEU defines them (comesFrom / computedFrom)."""

    def __init__(self, root, source: bytes):
        self.tokens: dict[tuple[int, int], tuple[int, str]] = {}
        stack = [root]
        order = []
        while stack:
            node = stack.pop()
            if _is_token(node):
                order.append(node)
            else:
                stack.extend(reversed(node.children))
        for i, node in enumerate(order):
            text = source[node.start_byte : node.end_byte].decode("utf-8", errors="replace")
            self.tokens[(node.start_byte, node.end_byte)] = (i, text)

    def token(self, node) -> tuple[int, str]:
        return self.tokens[(node.start_byte, node.end_byte)]

    def variables(self, node) -> list[tuple[int, str]]:
        """Tokens under `node` that are not punctuation or keywords (their type differs from their text)."""
        found = []
        stack = [node]
        while stack:
            current = stack.pop()
            if _is_token(current):
                idx, text = self.token(current)
                if current.type != text:
                    found.append((idx, text))
            else:
                stack.extend(reversed(current.children))
        return found

    def visit(self, node, states: dict) -> tuple[list, dict]:
        # `states` (variable -> token indexes of its last definitions) is never changed in place: a visit
        # that binds a name returns a new dict (copy on write), so branches can share their parent's.
        kind = node.type
        if _is_token(node):
            idx, text = self.token(node)
            if kind == text:
                return [], states
            if text in states:
                return [(text, idx, "comesFrom", [text], list(states[text]))], states
            if kind == "identifier":
                states = {**states, text: [idx]}
            return [(text, idx, "comesFrom", [], [])], states
        if kind == "default_parameter":
            return self._default_parameter(node, states)
        if kind in ("assignment", "augmented_assignment", "for_in_clause"):
            return self._assignment(node, states)
        if kind == "if_statement":
            return self._if(node, states)
        if kind in ("for_statement", "while_statement"):
            return self._loop(node, states)
        edges: list = []
        # Comprehension clauses bind their variables before the element expression uses them.
        for child in sorted(node.children, key=lambda c: c.type != "for_in_clause"):
            found, states = self.visit(child, states)
            edges += found
        return _by_token(edges), states

    def _default_parameter(self, node, states):
        states = dict(states)
        name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
        edges: list = []
        sources = []
        if value is not None:
            edges, states = self.visit(value, states)
            sources = self.variables(value)
        for idx, text in self.variables(name):
            if value is None:
                edges.append((text, idx, "comesFrom", [], []))
            for src_idx, src_text in sources:
                edges.append((text, idx, "comesFrom", [src_text], [src_idx]))
            states[text] = [idx]
        return _by_token(edges), states

    def _targets(self, node, left_field="left", right_field="right"):
        """(left, right) node pairs: element-wise when both sides list the same number of parts."""
        left, right = node.child_by_field_name(left_field), node.child_by_field_name(right_field)
        # A string is one token: its start/content/end parts are never paired with a target's parts
        # (codebleu pairs them, fails the token lookup and drops the whole function's data flow).
        lefts = [] if _is_token(left) else [c for c in left.children if c.type != ","]
        rights = [] if _is_token(right) else [c for c in right.children if c.type != ","]
        if len(lefts) != len(rights):
            lefts, rights = [left], [right]
        return (lefts or [left]), (rights or [right])

    def _bind(self, lefts, rights, states):
        edges = []
        for left, right in zip(lefts, rights):
            sources = self.variables(right)
            for idx, text in self.variables(left):
                edges.append((text, idx, "computedFrom", [t for _, t in sources], [i for i, _ in sources]))
                states[text] = [idx]
        return edges

    def _assignment(self, node, states):
        states = dict(states)
        if node.type == "for_in_clause":
            lefts, rights = [node.child_by_field_name("left")], [node.children[-1]]
        else:
            if node.child_by_field_name("right") is None:  # `x: int` binds nothing
                return [], states
            lefts, rights = self._targets(node)
        edges: list = []
        for right in rights:
            found, states = self.visit(right, states)
            edges += found
        edges += self._bind(lefts, rights, states)
        return _by_token(edges), states

    def _if(self, node, states):
        edges: list = []
        branch_states = []
        taken = dict(states)
        has_else = False
        for child in node.children:
            has_else = has_else or "else" in child.type
            if child.type in ("elif_clause", "else_clause"):
                found, after = self.visit(child, states)
                branch_states.append(after)
            else:
                found, taken = self.visit(child, taken)
            edges += found
        branch_states.append(taken)
        if not has_else:
            branch_states.append(states)
        merged: dict[str, list[int]] = {}
        for branch in branch_states:
            for name, where in branch.items():
                merged.setdefault(name, []).extend(where)
        return _by_token(edges), {name: sorted(set(where)) for name, where in merged.items()}

    def _loop(self, node, states):
        states = dict(states)
        edges: list = []
        for _ in range(2):  # twice, so uses in the body see definitions from the previous iteration
            if node.type == "for_statement":
                lefts, rights = self._targets(node)
                for right in rights:
                    found, states = self.visit(right, states)
                    edges += found
                edges += self._bind(lefts, rights, states)
                if node.children[-1].type == "block":
                    found, states = self.visit(node.children[-1], states)
                    edges += found
            else:
                for child in node.children:
                    found, states = self.visit(child, states)
                    edges += found
        merged: dict[tuple, list] = {}
        for text, idx, rel, names, where in edges:
            key = (text, idx, rel)
            if key not in merged:
                merged[key] = [list(names), list(where)]
            else:
                merged[key][0] = _ordered_union(merged[key][0], names)
                merged[key][1] = sorted(set(merged[key][1]) | set(where))
        ordered = sorted(merged.items(), key=lambda item: item[0][1])
        return [(k[0], k[1], k[2], v[0], v[1]) for k, v in ordered], states


def _ordered_union(first: list, second: list) -> list:
    return list(dict.fromkeys([*first, *second]))


def _by_token(edges: list) -> list:
    return sorted(edges, key=lambda edge: edge[1])


def data_flow(root, source: bytes) -> list[tuple]:
    """CodeBLEU's normalised data-flow edges: (variable, relation, [parent variables]), names renamed var_i."""
    flow = _DataFlow(root, source)
    edges, _ = flow.visit(root, {})
    edges = _by_token(edges)
    # Keep only tokens that take part in some edge (as a child with parents, or as a parent).
    linked = set()
    for _, idx, _, _, where in edges:
        if where:
            linked.add(idx)
        linked.update(where)
    by_token: dict[int, tuple] = {}
    for text, idx, rel, names, where in edges:
        if idx not in linked:
            continue
        if idx in by_token:
            old = by_token[idx]
            by_token[idx] = (text, idx, rel, _ordered_union(old[3], names), _ordered_union(old[4], where))
        else:
            by_token[idx] = (text, idx, rel, names, where)
    rename: dict[str, str] = {}
    normalised = []
    for text, _, rel, names, _ in by_token.values():
        for name in [*names, text]:
            rename.setdefault(name, f"var_{len(rename)}")
        normalised.append((rename[text], rel, tuple(rename[n] for n in names)))
    return normalised


def _weighted_recall(candidate: list[Counter], reference: list[Counter]) -> float:
    """CodeBLEU's weighted n-gram match from `ngram_counts` of both sides: BLEU's shape with clipped
    recall, keyword unigrams weighted 1, other unigrams 0.2."""
    c, r = sum(candidate[0].values()), sum(reference[0].values())
    if c == 0 or r == 0:
        return 0.0
    max_n = len(reference)
    log_sum = 0.0
    for n, (cand, ref) in enumerate(zip(candidate, reference), start=1):
        if n == 1:
            weight = {g: (1.0 if g[0] in CODEBLEU_KEYWORDS else 0.2) for g in ref}
            matched = sum(min(count, cand[g]) * weight[g] for g, count in ref.items())
            total = max(1, sum(count * weight[g] for g, count in ref.items()))
            if matched == 0:
                return 0.0
        else:
            matched = sum(min(count, cand[g]) for g, count in ref.items())
            total = max(1, sum(ref.values()))
        log_sum += math.log((matched if matched > 0 else 0.1) / total) / max_n
    return (1.0 if c > r else math.exp(1 - r / c)) * math.exp(log_sum)


# --------------------------------------------------------------------------- the per-snippet structure


@dataclass
class Structure:
    """Everything the structural metrics need from one snippet, parsed once. `error` set: nothing else is."""

    error: str | None = None
    tsed_tree: OrderedTree | None = None
    tsed_package_tree: OrderedTree | None = None
    ast_tree: OrderedTree | None = None
    unparsed: str = ""
    subtrees: list[int] = field(default_factory=list)  # hashes of every subtree's s-expression
    flow: list[tuple] = field(default_factory=list)
    # 1..4-gram counts of the whitespace tokens of the raw text (CodeBLEU's two BLEU-shaped parts)
    words: list[Counter] = field(default_factory=list)


def parse_error(text: str) -> str | None:
    """Why `text` is not valid Python for the structural metrics, or None (Python's parser and tree-sitter agree)."""
    if not text.strip():
        return "empty"
    try:
        ast.parse(text)
    except SyntaxError as err:
        return f"SyntaxError: {err.msg}" + (f" (line {err.lineno})" if err.lineno else "")
    except (ValueError, RecursionError, MemoryError) as err:
        return f"{type(err).__name__}: {err}"
    return None


STRUCTURE_PARTS = ("tsed", "ast", "codebleu")


def structure(text: str, parts: tuple[str, ...] = STRUCTURE_PARTS) -> Structure:
    """Parse `text` once into the structural representations `parts` need (all by default).

    A snippet that does not parse carries the reason in `error` and nothing else.
    """
    error = parse_error(text)
    if error is not None:
        return Structure(error=error)
    parser = _parser()
    root = parser.parse(text.encode("utf-8", "surrogatepass")).root_node
    if root.has_error:
        return Structure(error="tree-sitter could not parse it (ERROR or MISSING node)")
    try:
        return _parsed_structure(text, parser, root, parts)
    except Exception as err:  # noqa: BLE001 - a metric bug must cost this snippet's scores, not the batch
        return Structure(error=f"internal error in the structural metrics: {type(err).__name__}: {err}")


def _parsed_structure(text: str, parser, root, parts) -> Structure:
    result = Structure()
    if "tsed" in parts:
        result.tsed_tree = ordered_tree(root, _named_children, _node_type)
        result.tsed_package_tree = ordered_tree(root, _named_children, _tsed_package_label)
    if "ast" in parts:
        python_tree = ast.parse(text)
        result.ast_tree = ordered_tree(
            python_tree,
            lambda n: [c for c in ast.iter_child_nodes(n) if not isinstance(c, _AST_CONTEXTS)],
            lambda n: type(n).__name__,
        )
        result.unparsed = ast.unparse(python_tree)
    if "codebleu" in parts:
        stripped = strip_comments_and_docstrings(text).encode("utf-8", "surrogatepass")
        stripped_root = parser.parse(stripped).root_node
        stack = [stripped_root]
        while stack:
            node = stack.pop()
            result.subtrees.append(_stable_hash(str(node)))
            stack.extend(c for c in node.children if c.child_count)
        result.flow = data_flow(stripped_root, stripped)
        result.words = ngram_counts(text.strip().split())
    return result


def _node_type(node) -> str:
    return node.type


# --------------------------------------------------------------------------- pair metrics


def tsed(reference: Structure, candidate: Structure, labels: str = "type") -> float:
    """TSED of two parsed snippets (see the module docstring); labels "type" or "tsed_package"."""
    attr = {"type": "tsed_tree", "tsed_package": "tsed_package_tree"}[labels]
    return normalised_tree_similarity(getattr(reference, attr), getattr(candidate, attr), TSED_COSTS)


def syntax_match(reference: Structure, candidate: Structure) -> float:
    present = set(candidate.subtrees)
    return sum(1 for s in reference.subtrees if s in present) / len(reference.subtrees)


def dataflow_match(reference: Structure, candidate: Structure) -> float | None:
    """Fraction of the reference's data-flow edges matched one-to-one; None when it has none."""
    if not reference.flow:
        return None
    available = Counter(candidate.flow)
    matched = 0
    for edge in reference.flow:
        if available[edge] > 0:
            available[edge] -= 1
            matched += 1
    return matched / len(reference.flow)


def codebleu_parts(reference: Structure, candidate: Structure) -> dict[str, float | None]:
    """The four CodeBLEU components and their equal-weight mean (data flow None -> mean of the other three)."""
    parts = {
        "ngram": bleu_from_counts(candidate.words, reference.words),
        "weighted_ngram": _weighted_recall(candidate.words, reference.words),
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
    from leaklab.similarity.text import edit_similarity

    return (
        ast_similarity(reference, candidate) + edit_similarity(candidate.unparsed, reference.unparsed)
    ) / 2
