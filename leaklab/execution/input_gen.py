"""Inputs for HyClone's stage 2 read from a function's signature with `ast` (never imported or run):
`generate_inputs`. Its sources, taken in turn: docs/sandbox.md#hyclone-cross-execution.
"""

from __future__ import annotations

import ast
import json
import random
from dataclasses import dataclass, field
from typing import Any

COMMON = (0, 1, -2, 7, "", "abc", [], [1, 2, 3])  # values of common types for an unknown parameter
_MISSING = object()  # a parameter without a default (or one `literal_eval` cannot read)
_SEQUENCES = {"list", "List", "Sequence", "MutableSequence", "Iterable", "Collection", "Iterator"}
_MAPPINGS = {"dict", "Dict", "Mapping", "MutableMapping", "defaultdict", "OrderedDict"}
_SETS = {"set", "Set", "frozenset", "FrozenSet", "AbstractSet"}


@dataclass(frozen=True)
class Generated:
    inputs: list[list] = field(default_factory=list)
    sources: dict[str, int] = field(default_factory=dict)  # inputs kept per source


@dataclass(frozen=True)
class _Param:
    annotation: ast.expr | None
    default: Any  # _MISSING when required
    has_default: bool


def generate_inputs(source: str, entry_point: str, task_inputs=(), n: int = 10, seed: int = 0) -> Generated:
    """Up to `n` argument lists for `entry_point` in `source`, none repeating a task input or another."""
    if n <= 0:
        return Generated()
    params = _signature(source, entry_point)
    if isinstance(params, str):
        return Generated()  # no signature to read
    rng = random.Random(f"{seed}:{entry_point}")
    required = sum(not p.has_default for p in params)
    task = [list(a) for a in task_inputs if required <= len(a) <= len(params)]
    pools = [_pool(p, i, task, rng) for i, p in enumerate(params)]
    candidates = {
        "annotations": _draws(pools, "annotations", rng, n),
        "defaults": _default_calls(params, pools, rng),
        "mutated": _mutated(task, rng, n),
        "common": _draws(pools, "common", rng, n),
    }
    seen = {input_key(a) for a in task_inputs}
    kept: list[list] = []
    sources = dict.fromkeys(candidates, 0)
    queues = {name: iter(found) for name, found in candidates.items()}
    while len(kept) < n and queues:
        for name in list(queues):  # one from each source in turn
            args = next(queues[name], None)
            if args is None:
                del queues[name]
            elif input_key(args) not in seen and len(kept) < n:
                seen.add(input_key(args))
                kept.append(args)
                sources[name] += 1
    return Generated(kept, {s: c for s, c in sources.items() if c})


def find_function(source: str, entry_point: str) -> ast.FunctionDef | ast.AsyncFunctionDef | str:
    """The last top-level definition of `entry_point` in `source` (the one a call reaches), or why none."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return "the source does not parse"
    found = [
        n
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == entry_point
    ]
    return found[-1] if found else f"no top-level function {entry_point}"


def _signature(source: str, entry_point: str) -> list[_Param] | str:
    """The positional parameters of `entry_point` (the last top-level definition), or why none."""
    function = find_function(source, entry_point)
    if isinstance(function, str):
        return function
    args = function.args
    if any(d is None for d in args.kw_defaults):
        return "needs a keyword-only argument"
    positional = [*args.posonlyargs, *args.args]
    if positional and positional[0].arg in ("self", "cls"):
        return "a method"
    defaults = [_MISSING] * (len(positional) - len(args.defaults)) + [_literal(d) for d in args.defaults]
    first_default = len(positional) - len(args.defaults)
    return [_Param(a.annotation, d, i >= first_default) for i, (a, d) in enumerate(zip(positional, defaults))]


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _MISSING


def _pool(param: _Param, position: int, task: list[list], rng: random.Random) -> tuple[str, list]:
    """(where the parameter's values come from, the values)."""
    typed = _typed_values(param.annotation, rng) if param.annotation is not None else None
    if typed:
        return "annotations", typed
    if param.default is not _MISSING:
        return "defaults", [param.default, *_near(param.default, rng)]
    seen = [a[position] for a in task if position < len(a)]
    if seen:
        return "task", seen
    return "common", list(COMMON)


def _typed_values(node: ast.expr | None, rng: random.Random, depth: int = 0) -> list | None:
    """A few small typical values of the annotated type; None for a type not understood."""
    if node is None or depth > 3:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation: "list[int]"
        try:
            return _typed_values(ast.parse(node.value, mode="eval").body, rng, depth + 1)
        except SyntaxError:
            return None
    if isinstance(node, ast.Constant) and node.value is None:
        return [None]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # X | Y
        return _union([node.left, node.right], rng, depth)
    name = _name(node.value if isinstance(node, ast.Subscript) else node)
    if not isinstance(node, ast.Subscript):  # a bare name; a bare container holds ints (or maps str -> int)
        if name in _MAPPINGS:
            return [{}, {"a": 1}, {"a": 0, "b": -2, "c": 5}]
        if name in _SEQUENCES | _SETS | {"tuple", "Tuple"}:
            return _containers(name, [0, 1, 5, -3], rng)
        return _scalars(name, rng)
    items = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
    if name == "Optional":
        return (_typed_values(items[0], rng, depth + 1) or [0]) + [None]
    if name == "Union":
        return _union(items, rng, depth)
    if name in ("tuple", "Tuple"):
        if len(items) == 2 and isinstance(items[1], ast.Constant) and items[1].value is Ellipsis:
            return _containers("tuple", _typed_values(items[0], rng, depth + 1) or [0], rng)
        parts = [_typed_values(i, rng, depth + 1) or [0] for i in items]
        return [tuple(rng.choice(p) for p in parts) for _ in range(4)]
    if name in _MAPPINGS:
        keys = _typed_values(items[0], rng, depth + 1) or ["a", "b"]
        values = _typed_values(items[-1], rng, depth + 1) or [0, 1]
        keys = [k for k in keys if isinstance(k, str | int | float | bool | tuple)] or ["a", "b"]
        return [{}, *({rng.choice(keys): rng.choice(values) for _ in range(size)} for size in (1, 2, 4))]
    if name in _SEQUENCES | _SETS:
        inner = _typed_values(items[0], rng, depth + 1)
        return None if inner is None else _containers(name, inner, rng)
    return None


def _union(nodes: list[ast.expr], rng: random.Random, depth: int) -> list | None:
    parts = [_typed_values(n, rng, depth + 1) for n in nodes]
    if any(p is None for p in parts):
        return None
    return [v for p in parts for v in p]


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):  # typing.List, t.Optional
        return node.attr
    return ""


def _scalars(name: str, rng: random.Random) -> list | None:
    if name == "int":
        return [0, 1, -1, 2, rng.randint(3, 20), rng.randint(-50, -2), rng.randint(21, 1000)]
    if name == "float":
        return [0.0, 1.5, -2.25, round(rng.uniform(-10, 10), 3), round(rng.uniform(10, 1000), 2)]
    if name == "str":
        word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8)))
        return ["", "a", "abc", "Hello World", "a1 b2", word]
    if name == "bool":
        return [True, False]
    if name == "None":
        return [None]
    return None


def _containers(name: str, inner: list, rng: random.Random) -> list:
    """Empty, one item, and a few longer ones, of `inner`'s values."""
    lists = [
        [],
        [rng.choice(inner)],
        *([rng.choice(inner) for _ in range(size)] for size in (2, 3, 4, 5, 6, 8, 10)),
    ]
    if name in _SETS:
        try:
            return [set(x) if name != "frozenset" else frozenset(x) for x in lists]
        except TypeError:  # unhashable items
            return lists
    return [tuple(x) for x in lists] if name in ("tuple", "Tuple") else lists


def _near(value: Any, rng: random.Random) -> list:
    """A value next to a default, of the same type (none for None)."""
    # examples.py (and the renaming it loads) only when inputs are made: the recipe loads this module.
    from leaklab.perturb.examples import mutate_value

    if value is None:
        return []
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int | float) and value == 0:
        return [type(value)(1)]
    if isinstance(value, str) and not value:
        return ["a"]
    if isinstance(value, list | tuple) and not value:
        return []
    return [mutate_value(value, rng)]


def _draws(pools: list[tuple[str, list]], kind: str, rng: random.Random, n: int) -> list[list]:
    """Calls passing every parameter, each value drawn from its pool (3n: room for repeats to drop);
    none when no parameter's values come from `kind`."""
    if all(k != kind for k, _ in pools):
        return []
    return [[rng.choice(values) for _, values in pools] for _ in range(3 * n)]


def _default_calls(params: list[_Param], pools: list[tuple[str, list]], rng: random.Random) -> list[list]:
    """Leave every defaulted parameter out; then pass each known default's nearby value in turn."""
    required = [p for p in params if not p.has_default]
    if len(required) == len(params):
        return []
    base = [rng.choice(values) for _, values in pools[: len(required)]]
    calls = [list(base)]
    for i in range(len(required), len(params)):
        if params[i].default is _MISSING:
            continue
        for near in _near(params[i].default, rng):
            defaults = [p.default for p in params[len(required) : i]]
            if _MISSING not in defaults:  # the parameters before it must be passed, by their defaults
                calls.append([*base, *defaults, near])
    return calls


def _mutated(task: list[list], rng: random.Random, n: int) -> list[list]:
    """Each task input with its values changed a little (same types), twice over when there are few."""
    from leaklab.perturb.examples import mutate_value

    rounds = 1 if len(task) >= n else 2
    return [[mutate_value(v, rng) for v in args] for _ in range(rounds) for args in task]


def input_key(args) -> str:
    """A text that two equal argument lists share (to find repeats); never raises."""
    try:
        return json.dumps(list(args), sort_keys=True, default=repr)
    except TypeError:  # dict keys of mixed types cannot be sorted
        return repr(list(args))
