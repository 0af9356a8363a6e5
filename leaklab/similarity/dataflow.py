"""CodeBLEU's data flow as the `codebleu` package 0.7.0 defines it (its DFG_python, with the differences
`structure` names): which variable's value comes from which, as normalised (head, relation, parents)
edges, relation 0 = comesFrom, 1 = computedFrom. See docs/perturbations.md#structural-similarity.
"""

from __future__ import annotations

import bisect
import operator

_STRING_TYPES = ("string", "string_literal", "character_literal")
_COMES, _COMPUTED = 0, 1
_RELATIONS = {"comesFrom": _COMES, "computedFrom": _COMPUTED}


def data_flow(flat, source: bytes) -> list[tuple]:
    """CodeBLEU's normalised data-flow edges of a flattened tree (`structure._flatten`) of `source`."""
    tokens, spans, texts = _tokens(flat, source)
    is_variable = list(map(operator.ne, map(flat.types.__getitem__, tokens), texts))  # keywords: type == text
    flow = _ReferenceFlow(flat, tokens, spans, texts, is_variable)
    return _normalise(flow.visit(0, {})[0])


def _tokens(flat, source: bytes) -> tuple[list[int], list[tuple[int, int]], list[str]]:
    """The token nodes (leaves, a string whole, no comments) in order, their byte spans and texts."""
    types, last = flat.types, flat.last
    # A leaf is its own last descendant.
    tokens = [
        i
        for i, (kind, end) in enumerate(zip(types, last))
        if (end == i or kind in _STRING_TYPES) and kind != "comment"
    ]
    strings = [i for i in tokens if last[i] > i]
    if strings:  # a string's parts are not tokens of their own
        inside = {j for i in strings for j in range(i + 1, last[i] + 1)}
        tokens = [i for i in tokens if i not in inside]
    nodes = flat.nodes
    spans = [nodes[i].byte_range for i in tokens]  # one call per token, not two
    if source.isascii():  # byte offsets are character offsets: slice the text, decode once
        text = source.decode("ascii")
        texts = [text[start:end] for start, end in spans]
    else:
        texts = [source[start:end].decode("utf-8", errors="replace") for start, end in spans]
    return tokens, spans, texts


class _ReferenceFlow:
    """Def-use edges of Python code as CodeBLEU defines them, on the flat tree (nodes are preorder indexes;
    a node's tokens, a run of `token_nodes`, are found by bisection). An edge is (text, token index,
    relation, [parent texts], [parent token indexes])."""

    def __init__(self, flat, tokens: list[int], spans: list[tuple[int, int]], texts: list[str], is_variable):
        self.flat = flat
        types, kids, last = flat.types, flat.kids, flat.last
        self.types, self.kids, self.last = types, kids, last
        self.token_nodes, self.texts, self.is_variable = tokens, texts, is_variable
        # Tokens are known by their byte span, as in codebleu: where two share one (only zero-width
        # nodes in broken code can) both stand for the last of them.
        if any(start == end for start, end in spans):
            by_span = {span: k for k, span in enumerate(spans)}
            self.alias = [by_span[span] for span in spans]
        else:
            self.alias = list(range(len(tokens)))
        self.index = dict(zip(tokens, self.alias))  # token node -> token index
        # Punctuation and keywords (type == text) never take part in the data flow: not visited at all.
        self.skip = {i for i, variable in zip(tokens, self.is_variable) if not variable}
        # Nodes with a comprehension clause among their children (visited clause first).
        self.reorder = set()
        if "for_in_clause" in types:
            self.reorder = {
                j for j, children in enumerate(kids) for c in children if types[c] == "for_in_clause"
            }

    def variables(self, node: int) -> list[tuple[int, str]]:
        """(token index, text) of the variable tokens under `node`, in order."""
        lo = bisect.bisect_left(self.token_nodes, node)
        hi = bisect.bisect_right(self.token_nodes, self.last[node])
        texts, is_variable, alias = self.texts, self.is_variable, self.alias
        return [(alias[k], texts[k]) for k in range(lo, hi) if is_variable[k]]

    def visit(self, node: int, states: dict) -> tuple[list, dict]:
        # `states` (variable -> token indexes of its last definitions) is never changed in place: a visit
        # that binds a name returns a new dict (copy on write), so branches can share their parent's.
        idx = self.index.get(node)
        if idx is not None:
            text = self.texts[idx]
            if self.types[node] == text:  # punctuation or a keyword
                return [], states
            if text in states:
                return [(text, idx, "comesFrom", [text], list(states[text]))], states
            if self.types[node] == "identifier":
                states = {**states, text: [idx]}
            return [(text, idx, "comesFrom", [], [])], states
        special = _FLOW_RULES.get(self.types[node])
        if special is not None:
            return special(self, node, states)
        edges: list = []
        children = self.kids[node]
        # Comprehension clauses bind their variables before the element expression uses them.
        reordered = node in self.reorder
        if reordered:
            children = sorted(children, key=lambda c: self.types[c] != "for_in_clause")
        skip, index, texts, types = self.skip, self.index, self.texts, self.types
        for child in children:
            if child in skip:
                continue
            idx = index.get(child)
            if idx is None:
                found, states = self.visit(child, states)
                edges += found
                continue
            # A variable token, handled here as `visit` would (most children are tokens: no call).
            text = texts[idx]
            if text in states:
                edges.append((text, idx, "comesFrom", [text], list(states[text])))
            else:
                if types[child] == "identifier":
                    states = {**states, text: [idx]}
                edges.append((text, idx, "comesFrom", [], []))
        # Children's edges come sorted and in token order, so only a reordering needs a sort.
        return (_by_token(edges) if reordered else edges), states

    def _default_parameter(self, node, states):
        states = dict(states)
        name, value = self.flat.child(node, "name"), self.flat.child(node, "value")
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

    def _targets(self, node):
        """(left, right) node pairs: element-wise when both sides list the same number of parts."""
        left, right = self.flat.child(node, "left"), self.flat.child(node, "right")
        # A string is one token: its start/content/end parts are never paired with a target's parts
        # (codebleu pairs them, fails the token lookup and drops the whole function's data flow).
        types = self.types
        lefts = [] if left in self.index else [c for c in self.kids[left] if types[c] != ","]
        rights = [] if right in self.index else [c for c in self.kids[right] if types[c] != ","]
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
        if self.types[node] == "for_in_clause":
            lefts, rights = [self.flat.child(node, "left")], [self.kids[node][-1]]
        else:
            if self.flat.child(node, "right") is None:  # `x: int` binds nothing
                return [], states
            lefts, rights = self._targets(node)
        edges: list = []
        for right in rights:
            found, states = self.visit(right, states)
            edges += found
        # The targets' tokens all come before the values' ones: this is the edges sorted by token.
        return self._bind(lefts, rights, states) + edges, states

    def _if(self, node, states):
        edges: list = []
        branch_states = []
        taken = dict(states)
        has_else = False
        for child in self.kids[node]:
            kind = self.types[child]
            has_else = has_else or "else" in kind
            if kind in ("elif_clause", "else_clause"):
                found, after = self.visit(child, states)
                branch_states.append(after)
            else:
                found, taken = self.visit(child, taken)
            edges += found
        branch_states.append(taken)
        if not has_else:
            branch_states.append(states)
        # Every state list is sorted and unique and never changed in place, and an unchanged branch hands
        # back the very dict it got: merge each distinct dict once, and a name whose branches all hold
        # the same list keeps that list (the union of one sorted unique list is itself).
        distinct = list({id(branch): branch for branch in branch_states}.values())
        merged = dict(distinct[0])
        for branch in distinct[1:]:
            for name, where in branch.items():
                have = merged.get(name)
                if have is None:
                    merged[name] = where
                elif have is not where:
                    merged[name] = sorted({*have, *where})
        # The children's edges come sorted and in token order: already sorted by token.
        return edges, merged

    def _loop(self, node, states):
        states = dict(states)
        edges: list = []
        kids = self.kids[node]
        for _ in range(2):  # twice, so uses in the body see definitions from the previous iteration
            if self.types[node] == "for_statement":
                lefts, rights = self._targets(node)
                for right in rights:
                    found, states = self.visit(right, states)
                    edges += found
                edges += self._bind(lefts, rights, states)
                if self.types[kids[-1]] == "block":
                    found, states = self.visit(kids[-1], states)
                    edges += found
            else:
                for child in kids:
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


_FLOW_RULES = {
    "default_parameter": _ReferenceFlow._default_parameter,
    "assignment": _ReferenceFlow._assignment,
    "augmented_assignment": _ReferenceFlow._assignment,
    "for_in_clause": _ReferenceFlow._assignment,
    "if_statement": _ReferenceFlow._if,
    "for_statement": _ReferenceFlow._loop,
    "while_statement": _ReferenceFlow._loop,
}


def _ordered_union(first: list, second: list) -> list:
    return list(dict.fromkeys([*first, *second]))


def _by_token(edges: list) -> list:
    return sorted(edges, key=operator.itemgetter(1))


def _normalise(edges: list) -> list[tuple]:
    """Edges of tokens that take part in the flow, merged per token, as (head, relation, parents) with
    variable names numbered by first appearance (codebleu's var_0, var_1, ...) and relations as codes."""
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
    rename: dict[str, int] = {}
    normalised = []
    for text, _, rel, names, _ in by_token.values():
        for name in (*names, text):
            if name not in rename:
                rename[name] = len(rename)
        normalised.append((rename[text], _RELATIONS[rel], tuple([rename[n] for n in names])))
    return normalised
