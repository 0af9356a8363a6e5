"""Example replacement (tau_t): find the input/output examples shown in a problem statement, mutate
their inputs type-aware, and write the new inputs and the canonical solution's outputs back as text.

The forms found: doctest `>>> f(...)` lines, `f(...) => out` lines, `Input: a = ..., b = ...` /
`Output: ...` pairs, "For a = ..., the output should be ..." sentences, and APPS stdin/stdout samples.
Nothing here runs code: the outputs come from the caller's `run_solution` (see `leaklab.perturb.variants`).
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
from leaklab.perturb.vocabulary import code_counts, frequency_order

# New example values are drawn like the originals (issue 13): a few candidates of the same type and
# magnitude, and among them the one whose reference frequency (`vocabulary.code_counts`) is closest to
# the original's. Uniform draws made shown numbers less round than a person's (10 -> 17) and words into
# letter soup, so variants were less likely than originals under a model that never saw the task.
VALUE_CANDIDATES = 10


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
_FOR_SHOULD = re.compile(r"For (?P<args>\w+ = .+?),? the output should be (?P<out>.+?)\.?[ \t]*$", re.M)


def _literal(text: str) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(text.strip())
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
    ok, _ = _literal(out_text)
    if not ok:
        return None
    nodes = list(expr.args)
    if expr.keywords:
        if expr.args or [kw.arg for kw in expr.keywords] != params[: len(expr.keywords)]:
            return None
        nodes = [kw.value for kw in expr.keywords]
    if not nodes or any(isinstance(n, ast.Starred) for n in nodes):
        return None
    values, spans = [], []
    for node in nodes:
        ok, value = _literal(ast.get_source_segment(call_text, node) or "")
        if not ok:
            return None
        offsets = Offsets(call_text)
        lo, hi = (
            offsets.of_node(node.lineno, node.col_offset),
            offsets.of_node(node.end_lineno, node.end_col_offset),
        )
        values.append(value)
        spans.append((call_start + lo, call_start + hi))
    return Example("call", tuple(values), tuple(spans), (out_start, out_start + len(out_text)), out_text)


def find_examples(task: Task, params: list[str] | None = None) -> list[Example]:
    """Examples in the prompt whose inputs can be replaced (see the module docstring for the forms)."""
    prompt, examples = task.prompt, []
    if task.test_type == "stdio":
        return _stdio_examples(prompt)
    if not task.entry_point:
        return []
    params = params or []
    fake = f"{task.entry_point}("  # `a = 1, b = 2` parsed as the keywords of a call
    for m in _DOCTEST.finditer(prompt):
        ex = _call_example(m["call"], m.start("call"), m["out"], m.start("out"), task.entry_point, params)
        examples.append(ex)
    for line_match in re.finditer(r"^.*$", prompt, re.M):
        m = _ARROW.match(line_match.group())
        if m:
            base = line_match.start()
            examples.append(
                _call_example(
                    m["call"],
                    base + m.start("call"),
                    m["out"],
                    base + m.start("out"),
                    task.entry_point,
                    params,
                )
            )
    for pattern in (_IO_PAIR, _FOR_SHOULD):
        for m in pattern.finditer(prompt):
            ex = _call_example(
                fake + m["args"] + ")",
                m.start("args") - len(fake),
                m["out"],
                m.start("out"),
                task.entry_point,
                params,
            )
            examples.append(ex)
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
    lines = prompt.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    is_in = re.compile(r"^\s*(?:Sample |Example )?Input\s*(?:\d+\s*)?:?\s*$", re.I)
    is_out = re.compile(r"^\s*(?:Sample |Example )?Output\s*(?:\d+\s*)?:?\s*$", re.I)

    def block(i: int) -> int:  # index after the non-blank lines starting at i
        while (
            i < len(lines) and lines[i].strip() and not is_in.match(lines[i]) and not is_out.match(lines[i])
        ):
            if lines[i].startswith("-----"):
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
    """A magnitude between half and twice `size`, log-uniform: as often smaller as larger. (Uniform on
    [size/2, 2 size] drew larger numbers two times in three, and larger inputs give longer outputs; on
    the untrained tiny model that alone made the rule flag 20% of tasks at n = 10, log-uniform 8%.)"""
    for _ in range(20):
        new = max(1, round(size * 2 ** rng.uniform(-1.0, 1.0)))
        if new != size:
            return new
    return size + 1


def _mutate_int(value: int, rng: random.Random) -> int:
    # Keep the sign and roughly the magnitude; keep 0 (often a special case the statement relies on).
    if value == 0:
        return 0
    size = abs(value)
    options = {_draw_int(size, rng) for _ in range(VALUE_CANDIDATES)}
    new = _closest(str(size), options, rng, str)
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


@functools.cache
def _words_by_length() -> dict[int, list[str]]:
    """Lower-case words of the reference corpus (`code_counts`), by length: replacements for words."""
    out: dict[int, list[str]] = {}
    for token in code_counts():
        if token.isascii() and token.isalpha() and token.islower():
            out.setdefault(len(token), []).append(token)
    return out


def _new_word(word: str, rng: random.Random) -> str:
    """A word of the same length and about the same frequency, in the original's case."""
    pool = [w for w in _words_by_length().get(len(word), []) if w != word.lower()]
    if not pool:
        return word
    new = frequency_order(word.lower(), rng.sample(pool, min(40, len(pool))), rng)[0]
    if word.isupper():
        return new.upper()
    return new[:1].upper() + new[1:] if word[:1].isupper() else new


def _mutate_str(value: str, rng: random.Random) -> str:
    """Swap some words for words of the same length and frequency, and some single letters / digits
    for others of the same kind, drawn from those the string already uses when it uses two or more
    (a binary string stays binary); spaces and punctuation stay, so the string keeps its shape (a date
    stays a date, `(()())` stays a bracket string)."""
    parts = re.findall(r"[A-Za-z]{2,}|.", value, re.S)
    positions = [i for i, p in enumerate(parts) if p.isascii() and p.isalnum()]
    if not positions:
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


def mutate_value(value: Any, rng: random.Random) -> Any:
    """A value of the same type and shape as `value`, changed a little (type-aware)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return _mutate_int(value, rng)
    if isinstance(value, float):
        return _mutate_float(value, rng, _decimals(value))
    if isinstance(value, str):
        return _mutate_str(value, rng)
    if isinstance(value, (list, tuple)):
        items = [mutate_value(x, rng) if rng.random() < 0.5 else x for x in value]
        if len(items) >= 2 and rng.random() < 0.3:
            if rng.random() < 0.5:
                items.pop(rng.randrange(len(items)))
            else:
                items.insert(rng.randrange(len(items) + 1), rng.choice(items))
        if _is_sorted(value):  # a sorted input often means the statement promises sorted inputs
            items = sorted(items)
        return type(value)(items)
    if isinstance(value, dict):
        return {k: mutate_value(v, rng) if rng.random() < 0.5 else v for k, v in value.items()}
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
        parts = re.split(r"(\s+)", line)
        if len([p for p in parts if p.strip()]) <= 1 and re.fullmatch(r"\s*-?\d+\s*", line or "x"):
            out.append(line)
            continue
        new_parts = []
        for part in parts:
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


def _failed(output: Any) -> bool:
    return isinstance(output, (RunError, BaseException))


def new_examples(examples: list[Example], rng: random.Random) -> list[tuple[Any, ...] | None]:
    """Mutated inputs, one per example (None when no different input could be made)."""
    inputs: list[tuple[Any, ...] | None] = []
    for ex in examples:
        new = None
        for _ in range(5):
            if ex.kind == "stdio":
                candidate: tuple[Any, ...] = (_mutate_stdin(ex.args[0], rng),)
            else:
                candidate = tuple(mutate_value(v, rng) for v in ex.args)
            if candidate != ex.args:
                new = candidate
                break
        inputs.append(new)
    return inputs


def replace_examples(
    task: Task, examples: list[Example], inputs: list[tuple[Any, ...] | None], outputs: list[Any]
) -> tuple[Task, int]:
    """The task with each example whose new input ran cleanly replaced (input and output text)."""
    edits: list[tuple[int, int, str]] = []
    replaced = 0
    for ex, args, output in zip(examples, inputs, outputs):
        if args is None or _failed(output):
            continue
        if ex.kind == "stdio":
            if not isinstance(output, str) or not output.strip():
                continue
            edits.append((*ex.arg_spans[0], args[0].rstrip("\n")))
            edits.append((*ex.output_span, output.rstrip("\n")))
        else:
            for span, old, value in zip(ex.arg_spans, ex.args, args):
                if value != old or type(value) is not type(old):  # unchanged arguments keep their text
                    edits.append((*span, format_value(value, task.prompt[span[0] : span[1]])))
            edits.append((*ex.output_span, format_value(output, ex.output_text)))
        replaced += 1
    return dataclasses.replace(task, prompt=apply_edits(task.prompt, edits)), replaced
