"""Example replacement (tau_t): find the input/output examples shown in a problem statement (the forms
in docs/perturbations.md#srdetection-variants), mutate their inputs type-aware, and write the new inputs
and the canonical solution's outputs back as text. Nothing here runs code: the outputs come from the
caller's `run_solution` (see `leaklab.perturb.variants`).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from leaklab.data.tasks import Task
from leaklab.perturb.identifiers import Offsets
from leaklab.perturb.renaming import apply_edits
from leaklab.perturb.vocabulary import frequency_order, log_count, prose_counts

VALUE_CANDIDATES = 10  # draws of a new value; the one of closest reference frequency is kept


@dataclass(frozen=True)
class RunError:
    """A failed run of the canonical solution on one input (what `run_solution` returns for it)."""

    message: str


# --------------------------------------------------------------------------- tau_t: new example inputs


@dataclass(frozen=True)
class Example:
    """An input/output example shown in a prompt: where its pieces sit and what they hold."""

    kind: str  # "call" (arguments of the entry point) or "stdio" (stdin text)
    args: tuple[Any, ...]  # argument values (call) or (stdin,) (stdio)
    arg_spans: tuple[tuple[int, int], ...]  # where each argument's text sits in the prompt
    output_span: tuple[int, int]
    output_text: str


_ARROW = re.compile(
    r"^(?P<indent>[ \t]*)(?:[*-] )?(?P<call>\w+\(.*\))\s*(?:#\s*)?(?:==>|=>|➞|->)\s*(?P<out>.+?)\s*$"
)
_DOCTEST = re.compile(r"^(?P<indent>[ \t]*)>>> (?P<call>.+)\n(?P=indent)(?P<out>(?!>>>)\S.*?)\s*$", re.M)
_IO_PAIR = re.compile(
    r"Input:[ \t]*(?P<args>[^\n]+?)[ \t]*\n[ \t]*Output:[ \t]*(?P<out>[^\n]+?)[ \t]*$", re.M
)
# MBPP+'s one example: `assert f(...) == out` (only when asked: see find_examples).
_ASSERT = re.compile(r"^(?P<indent>[ \t]*)assert (?P<call>\w+\(.*\))\s*==\s*(?P<out>.+?)\s*$")
_FOR_SHOULD = re.compile(r"For (?P<args>\w+ = .+?),? the output should be (?P<out>.+?)\.?[ \t]*$", re.M)


def literal(source: ast.AST | str) -> tuple[bool, Any]:
    """(True, the value) of a literal's node or text; (False, None) for anything else."""
    try:
        return True, ast.literal_eval(source.strip() if isinstance(source, str) else source)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def _call_example(
    call_text: str, call_start: int, out_text: str, out_start: int, entry_point: str, params: list[str]
) -> Example | None:
    """An example written as a call `f(1, 'x')` or as `a = 1, b = 'x'` (with `params` in order)."""
    try:
        expr = ast.parse(call_text, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(expr, ast.Call) or not isinstance(expr.func, ast.Name) or expr.func.id != entry_point:
        return None
    ok, _ = literal(out_text)
    if not ok:
        return None
    nodes = list(expr.args)
    if expr.keywords:
        if expr.args or [kw.arg for kw in expr.keywords] != params[: len(expr.keywords)]:
            return None
        nodes = [kw.value for kw in expr.keywords]
    if not nodes or any(isinstance(n, ast.Starred) for n in nodes):
        return None
    values, spans, offsets = [], [], Offsets(call_text)
    for node in nodes:
        ok, value = literal(ast.get_source_segment(call_text, node) or "")
        if not ok:
            return None
        values.append(value)
        lo = call_start + offsets.of_node(node.lineno, node.col_offset)
        spans.append((lo, call_start + offsets.of_node(node.end_lineno, node.end_col_offset)))
    return Example("call", tuple(values), tuple(spans), (out_start, out_start + len(out_text)), out_text)


def find_examples(task: Task, params: list[str] | None = None, asserts: bool = False) -> list[Example]:
    """Examples in the prompt whose inputs can be replaced; with `asserts`, also MBPP+'s
    `assert f(...) == out` lines (MRI's rewrites recompute their outputs)."""
    prompt = task.prompt
    if task.test_type == "stdio":
        return _stdio_examples(prompt)
    if not task.entry_point:
        return []
    fake = f"{task.entry_point}("  # `a = 1, b = 2` parsed as the keywords of a call
    # (call text, where it starts, output text, where it starts) of every form, in this order
    found = [(m["call"], m.start("call"), m["out"], m.start("out")) for m in _DOCTEST.finditer(prompt)]
    for line in re.finditer(r"^.*$", prompt, re.M):
        m = _ARROW.match(line.group()) or (_ASSERT.match(line.group()) if asserts else None)
        if m:
            found.append((m["call"], line.start() + m.start("call"), m["out"], line.start() + m.start("out")))
    for pattern in (_IO_PAIR, _FOR_SHOULD):
        for m in pattern.finditer(prompt):
            found.append((fake + m["args"] + ")", m.start("args") - len(fake), m["out"], m.start("out")))
    examples = [_call_example(*where, task.entry_point, params or []) for where in found]
    # Keep examples that do not overlap (two forms can match the same text), first come first kept.
    kept: list[Example] = []
    for ex in sorted((ex for ex in examples if ex is not None), key=_extent):
        lo, hi = _extent(ex)
        if all(hi <= _extent(k)[0] or lo >= _extent(k)[1] for k in kept):
            kept.append(ex)
    return kept


def _extent(ex: Example) -> tuple[int, int]:
    return min(s for s, _ in ex.arg_spans), ex.output_span[1]


def _stdio_examples(prompt: str) -> list[Example]:
    """APPS samples: a line `Input` (or `Sample Input`), the stdin lines, then `Output` and stdout lines."""
    offsets = Offsets(prompt)
    lines, starts = offsets.lines, offsets.starts
    is_in = re.compile(r"^\s*(?:Sample |Example )?Input\s*(?:\d+\s*)?:?\s*$", re.I)
    is_out = re.compile(r"^\s*(?:Sample |Example )?Output\s*(?:\d+\s*)?:?\s*$", re.I)

    def block(i: int) -> int:  # index after the non-blank lines starting at i
        while i < len(lines) and lines[i].strip() and not lines[i].startswith("-----"):
            if is_in.match(lines[i]) or is_out.match(lines[i]):
                break
            i += 1
        return i

    examples, i = [], 0
    while i < len(lines):
        if not is_in.match(lines[i]):
            i += 1
            continue
        in_end = block(i + 1)
        j = in_end
        while j < len(lines) and not lines[j].strip():
            j += 1
        if in_end == i + 1 or j >= len(lines) or not is_out.match(lines[j]):
            i += 1
            continue
        out_end = block(j + 1)
        if out_end == j + 1:
            i = j + 1
            continue
        in_span = (starts[i + 1], starts[in_end] - 1)
        out_span = (starts[j + 1], starts[out_end] - 1)
        stdin = prompt[in_span[0] : in_span[1]] + "\n"
        examples.append(Example("stdio", (stdin,), (in_span,), out_span, prompt[out_span[0] : out_span[1]]))
        i = out_end
    return examples


def _closest(original: str, options: set, rng: random.Random, text=repr):
    """The option whose text is about as frequent in reference code as `original` (jittered)."""
    by_text = {text(o): o for o in sorted(options, key=repr)}
    return by_text[frequency_order(original, list(by_text), rng)[0]]


def _draw_int(size: int, rng: random.Random) -> int:
    """A magnitude between half and twice `size`, log-uniform: as often smaller as larger."""
    for _ in range(20):
        new = max(1, round(size * 2 ** rng.uniform(-1.0, 1.0)))
        if new != size:
            return new
    return size + 1


def _mutate_int(value: int, rng: random.Random) -> int:
    if value == 0:  # often a special case the statement relies on
        return 0
    if abs(value) == 1 and rng.random() < 0.5:  # 1 can only grow: let it grow as often as others do
        return value
    size = abs(value)
    options = {_draw_int(size, rng) for _ in range(VALUE_CANDIDATES)}
    # Down as often as up where both are drawn (the closest-frequency pick alone leans up).
    down, up = {o for o in options if o < size}, {o for o in options if o > size}
    side = down if down and (not up or rng.random() < 0.5) else up
    new = _closest(str(size), side, rng, str)
    return new if value > 0 else -new


def _mutate_float(value: float, rng: random.Random, decimals: int) -> float:
    if value == 0.0:
        return value
    options = {round(value * rng.uniform(0.5, 1.5), decimals) for _ in range(VALUE_CANDIDATES)}
    options = {o for o in options if o not in (0.0, value)} or {value}
    return _closest(repr(abs(value)), {abs(o) for o in options}, rng) * (1 if value > 0 else -1)


def _decimals(value: float) -> int:
    text = repr(value)
    return max(1, len(text.split(".")[1])) if "." in text and "e" not in text else 2


PROSE_MIN_COUNT = 20  # rarer words of the prose counts are mostly fragments ("objdum", "winso")


@functools.cache
def _words_by_length() -> dict[int, list[str]]:
    """Words of the reference corpus's prose (`prose_counts`), by length: replacements for words."""
    out: dict[int, list[str]] = {}
    for word, count in prose_counts().items():
        if word.isascii() and word.isalpha() and count >= PROSE_MIN_COUNT:
            out.setdefault(len(word), []).append(word)
    return out


def _new_word(word: str, rng: random.Random) -> str:
    """A word of the same length and about the same frequency, in the original's case."""
    pool = [w for w in _words_by_length().get(len(word), []) if w != word.lower()]
    if not pool:
        return word
    new = frequency_order(word.lower(), rng.sample(pool, min(40, len(pool))), rng, prose_counts())[0]
    if word.isupper():
        return new.upper()
    return new[:1].upper() + new[1:] if word[:1].isupper() else new


_MIRROR = str.maketrans("()[]{}<>", ")(][}{><")


def _mutate_str(value: str, rng: random.Random) -> str:
    """Swap some words for words of the same length and frequency, and some single letters / digits for
    others of the same kind the string already uses (a binary string stays binary); the rest stays."""
    parts = re.findall(r"[A-Za-z]{2,}|.", value, re.S)
    positions = [i for i, p in enumerate(parts) if p.isascii() and p.isalnum()]
    if not positions:  # symbols only: a shuffle, or the mirror image (keeps a bracket string balanced)
        if rng.random() < 0.5:
            return value[::-1].translate(_MIRROR)
        chars = list(value)
        rng.shuffle(chars)
        return "".join(chars)
    chosen = [i for i in positions if rng.random() < 0.35] or [rng.choice(positions)]
    for i in chosen:
        part = parts[i]
        if len(part) > 1:
            parts[i] = _new_word(part, rng)
            continue
        kind = str.isdigit if part.isdigit() else str.isalpha
        pool = sorted({c.lower() for c in value if c.isascii() and kind(c)} - {part.lower()})
        if not pool:
            alphabet = "0123456789" if part.isdigit() else "abcdefghijklmnopqrstuvwxyz"
            pool = list(alphabet.replace(part.lower(), ""))
        new = rng.choice(pool)
        parts[i] = new.upper() if part.isupper() else new
    return "".join(parts)


def mutate_value(value: Any, rng: random.Random, memo: dict | None = None) -> Any:
    """A value of the same type and shape as `value`, changed a little (type-aware). With `memo`, a
    number or string met again (here or in another example of the same memo) gets the same replacement."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float, str)):
        key = (type(value).__name__, value)
        if memo is not None and key in memo:
            return memo[key]
        if isinstance(value, int):
            new = _mutate_int(value, rng)
        elif isinstance(value, float):
            new = _mutate_float(value, rng, _decimals(value))
        else:
            new = _mutate_str(value, rng)
        if memo is not None:
            memo[key] = new
        return new
    if isinstance(value, (list, tuple)):
        items = [mutate_value(x, rng, memo) if rng.random() < 0.5 else x for x in value]
        if len(items) >= 2 and rng.random() < 0.3:
            if rng.random() < 0.5:
                items.pop(rng.randrange(len(items)))
            else:
                items.insert(rng.randrange(len(items) + 1), rng.choice(items))
        if _is_sorted(value):  # a sorted input often means the statement promises sorted inputs
            items = sorted(items)
        return type(value)(items)
    if isinstance(value, dict):
        return {k: mutate_value(v, rng, memo) if rng.random() < 0.5 else v for k, v in value.items()}
    return value


def _is_sorted(items: Sequence[Any]) -> bool:
    try:
        return len(items) >= 2 and all(a <= b for a, b in zip(items, items[1:]))
    except TypeError:
        return False


def _mutate_stdin(text: str, rng: random.Random) -> str:
    """Mutate numbers and words of a stdin sample. The first line and lines holding a single integer
    are kept: in contest inputs they are usually sizes or test counts that other lines depend on."""
    lines = text.split("\n")
    out = [lines[0]]
    for line in lines[1:]:
        if re.fullmatch(r"\s*-?\d+\s*", line):
            out.append(line)
            continue
        new_parts = []
        for part in re.split(r"(\s+)", line):
            if re.fullmatch(r"-?\d+", part):
                new_parts.append(str(_mutate_int(int(part), rng)) if rng.random() < 0.6 else part)
            elif re.fullmatch(r"-?\d+\.\d+", part):
                decimals = len(part.split(".")[1])
                new_parts.append(f"{_mutate_float(float(part), rng, decimals):.{decimals}f}")
            elif part.isalpha():
                new_parts.append(_mutate_str(part, rng))
            else:
                new_parts.append(part)
        out.append("".join(new_parts))
    return "\n".join(out)


def format_value(value: Any, like: str = "") -> str:
    """Python literal text for `value`, in the style of `like` (quote character, ", " or ",")."""
    quote = '"' if like.lstrip("[({ ").startswith('"') else "'"
    sep = "," if ("," in like and ", " not in like) else ", "

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return repr(round(v, 10))  # 0.7000000000000002 -> 0.7: a prompt shows what a person would
        if isinstance(v, str):
            text = repr(v)
            if quote == '"' and '"' not in v and text.startswith("'"):
                text = '"' + text[1:-1].replace("\\'", "'") + '"'
            return text
        if isinstance(v, list):
            return "[" + sep.join(fmt(x) for x in v) + "]"
        if isinstance(v, tuple):
            return "(" + sep.join(fmt(x) for x in v) + ("," if len(v) == 1 else "") + ")"
        if isinstance(v, dict):
            return "{" + sep.join(f"{fmt(k)}: {fmt(x)}" for k, x in v.items()) + "}"
        return repr(v)

    return fmt(value)


def _failed(ex: Example, output: Any) -> bool:
    """Whether the run that made `output` failed (a stdio run that printed nothing counts as failed)."""
    if ex.kind == "stdio" and not (isinstance(output, str) and output.strip()):
        return True
    return isinstance(output, (RunError, BaseException))


def candidate_sets(
    examples: list[Example], rng: random.Random, k: int = 1
) -> list[list[tuple[Any, ...] | None]]:
    """Up to `k` distinct candidate sets of new inputs, one input per example (None where no new input
    could be made); the examples of one set share a `mutate_value` memo."""
    sets: list[list[tuple[Any, ...] | None]] = []
    for _ in range(2 * k):
        if len(sets) >= k:
            break
        memo: dict = {}
        chosen: list[tuple[Any, ...] | None] = []
        for ex in examples:
            new = None
            for attempt in range(5):
                if ex.kind == "stdio":
                    candidate: tuple[Any, ...] = (_mutate_stdin(ex.args[0], rng),)
                else:  # after a miss, draw without the memo (it may map every value to itself)
                    candidate = tuple(mutate_value(v, rng, memo if attempt == 0 else None) for v in ex.args)
                if candidate != ex.args:
                    new = candidate
                    break
            chosen.append(new)
        if any(c is not None for c in chosen) and chosen not in sets:
            sets.append(chosen)
    return sets


# --------------------------------------------------------------------------- choosing among candidates

# Candidate sets of new inputs the solution runs on; `choose_set` keeps one. The weights of
# `shape_distance`: docs/perturbations.md#srdetection-variants.
EXAMPLE_CANDIDATES = 16
FAMILIARITY_WEIGHT = 1.0  # per unit of log-frequency (numbers in reference code, words in its prose)
MAGNITUDE_WEIGHT = 2.0  # per relative change of the sum of the shown numbers (linear, not log)
_PIECES = re.compile(r"[A-Za-z]+|\d+|\S")


def _rewritten(ex: Example, prompt: str, args: tuple[Any, ...], output: Any) -> list[tuple[int, int, str]]:
    """(start, end, new text) of each piece of `ex` that `replace_examples` writes for `args` and `output`;
    an argument whose value did not change keeps its text."""
    if ex.kind == "stdio":
        return [(*ex.arg_spans[0], args[0].rstrip("\n")), (*ex.output_span, str(output).rstrip("\n"))]
    pieces = []
    for (lo, hi), old, value in zip(ex.arg_spans, ex.args, args):
        same = value == old and type(value) is type(old)
        pieces.append((lo, hi, prompt[lo:hi] if same else format_value(value, prompt[lo:hi])))
    return pieces + [(*ex.output_span, format_value(output, ex.output_text))]


def familiarity(text: str) -> float:
    """Sum of the reference log-frequencies of the numbers (`code_counts`) and words (`prose_counts`)
    in `text`: a unigram statistic of the text alone, higher for common pieces (1, 10, "hello")."""
    total = 0.0
    for piece in _PIECES.findall(text):
        if piece.isdigit():
            total += log_count(piece)
        elif piece.isalpha():
            total += log_count(piece.lower(), prose_counts())
    return total


def shape_distance(original: str, new: str) -> float:
    """How far `new` is from `original` in shape: word/number/symbol pieces, digits, characters, the
    familiarity of its numbers and words and the size of its numbers."""
    a, b = _PIECES.findall(original), _PIECES.findall(new)
    digits = sum(c.isdigit() for c in new) - sum(c.isdigit() for c in original)
    return (
        abs(len(b) - len(a))
        + 0.5 * abs(digits)
        + 0.1 * abs(len(new) - len(original))
        + FAMILIARITY_WEIGHT * abs(familiarity(new) - familiarity(original))
        + MAGNITUDE_WEIGHT * abs(magnitude(new) - magnitude(original)) / (1 + magnitude(original))
    )


def magnitude(text: str) -> int:
    """Sum of the numbers (digit runs) in `text`: how large the shown numbers are."""
    # Capped: int() refuses digit runs over 4300 characters, and such a number is "huge" either way.
    return sum(int(p) if len(p) <= 15 else 10**15 for p in _PIECES.findall(text) if p.isdigit())


def example_cost(ex: Example, prompt: str, args: tuple[Any, ...], output: Any) -> float | None:
    """`shape_distance` of the new example's shown text from the original's, 2 more when a bool (or None)
    output differs from the shown one; None when its run failed."""
    if _failed(ex, output):
        return None
    shown = " ".join(prompt[lo:hi] for lo, hi in ex.arg_spans) + " " + ex.output_text
    cost = shape_distance(shown, " ".join(text for _, _, text in _rewritten(ex, prompt, args, output)))
    ok, shown_output = literal(ex.output_text) if ex.kind == "call" else (False, None)
    if ok and isinstance(shown_output, (bool, type(None))) and output is not shown_output:
        cost += 2.0
    return cost


UNREPLACED_COST = 3.0  # of an example left as it was: more than most replacements


def choose_set(
    examples: list[Example],
    prompt: str,
    sets: Sequence[Sequence[tuple[Any, ...] | None]],
    outputs: Sequence[Sequence[Any]],
) -> tuple[list[tuple[Any, ...] | None], list[Any]]:
    """(inputs, outputs) of the candidate set closest in shape to the original examples (sum of
    `example_cost`, the earlier set on ties); an example whose run failed is left as it was (None)."""
    best: tuple[list, list] = ([None] * len(examples), [None] * len(examples))
    best_cost = float("inf")
    for inputs, outs in zip(sets, outputs):
        kept_inputs, kept_outputs, total = [], [], 0.0
        for ex, args, output in zip(examples, inputs, outs):
            cost = None if args is None else example_cost(ex, prompt, args, output)
            kept_inputs.append(None if cost is None else args)
            kept_outputs.append(None if cost is None else output)
            total += UNREPLACED_COST if cost is None else cost
        if total < best_cost:
            best, best_cost = (kept_inputs, kept_outputs), total
    return best


def replace_examples(
    task: Task, examples: list[Example], inputs: list[tuple[Any, ...] | None], outputs: list[Any]
) -> tuple[Task, int]:
    """The task with each example whose new input ran cleanly replaced (input and output text)."""
    edits: list[tuple[int, int, str]] = []
    replaced = 0
    for ex, args, output in zip(examples, inputs, outputs):
        if args is not None and not _failed(ex, output):
            edits += _rewritten(ex, task.prompt, args, output)
            replaced += 1
    return dataclasses.replace(task, prompt=apply_edits(task.prompt, edits)), replaced
