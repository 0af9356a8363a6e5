"""`benchmark: synthetic`: small, solvable, seeded Python tasks a tiny model can learn to solve
(docs/evaluations.md#sft-and-accuracy-tiny_sft).

    tasks = load_synthetic(seed=0, max_samples=600)     # HumanEval-shaped Tasks, built once, cached
    other = rewrite(tasks[0], random.Random(1))         # the same family with another constant/operator

A task draws its *logic* (constants, operators: `draw`) and its *surface* (function name, docstring
wording: `Surface`); every other name the solution uses is fixed (ARG_NAMES, LOOP_VAR, ...), so a task
is solvable from its prompt alone, and a model that memorised a member reproduces its constant. The
cache (`<LEAKLAB_CACHE>/synthetic/`) is keyed by seed, size and a hash of this file. `rewrite` is MRI's
exact rewriting (docs/evaluations.md#mri-004-3-and-app-e): one logic choice changed, the rest kept.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leaklab.data.tasks import Task, task_from_dict, task_to_dict
from leaklab.rundir import cache_root, read_rows, write_atomic

BENCHMARK = "synthetic"
DEFAULT_SIZE = 2000  # tasks built when `data.max_samples` does not say
N_EXAMPLES = 2  # inputs shown in the docstring (also tested)
N_TESTS = 8  # inputs tested, examples included

# --------------------------------------------------------------------------- surface: names and words

# Argument names are fixed per kind: drawn ones were the tiny model's main failure (~60% of its wrong
# replies used another task's name; SFT on 2000 tasks did not teach it to copy the signature's).
ARG_NAMES = {"list": "nums", "str": "text", "words": "words", "int": "n"}
# Loop variables are fixed too: the prompt cannot show them, so a drawn one made a task unsolvable.
LOOP_VAR = "x"  # over numbers
WORD_LOOP_VAR = "w"  # over words

# Comparison operators and the words for them (several per operator: the wording varies per task).
CMP_WORDS = {
    ">": ("greater than", "larger than", "above", "bigger than"),
    "<": ("less than", "smaller than", "below", "under"),
    ">=": ("at least", "greater than or equal to", "no less than"),
    "<=": ("at most", "less than or equal to", "no more than"),
    "==": ("equal to", "exactly"),
    "!=": ("not equal to", "different from"),
}
CMP_OPS = tuple(CMP_WORDS)
ARITH_WORDS = {"+": ("add {k} to", "increase by {k}"), "-": ("subtract {k} from", "decrease by {k}"), "*": ("multiply by {k}", "scale by {k}")}  # fmt: skip


@dataclass
class Surface:
    """What a task says and names, drawn per task; `pick` chooses among a family's wordings and
    `phrasing` among an operator's words, deterministically."""

    fn: str
    args: dict[str, str]  # kind of argument -> its name
    var: str
    word_var: str
    wording: int  # index into a family's templates (taken modulo their number)
    phrase: int  # index into an operator's words

    def pick(self, *options: str) -> str:
        return options[self.wording % len(options)]

    def phrasing(self, words: Sequence[str]) -> str:
        return words[self.phrase % len(words)]


# With argument names fixed, a family with few constants (power, rotate, join, ...) runs out of distinct
# programs long before 2000 tasks; after SUFFIX_AFTER failed attempts the function name takes a suffix.
FN_SUFFIXES = ("_all", "_list", "_each", "_items", "_vals", "_new", "_out", "_of", "_fn", "_v2")
SUFFIX_AFTER = 20


# --------------------------------------------------------------------------- inputs


def _ints(rng: random.Random, hi: int, lo: int = 0, min_len: int = 0, max_len: int = 7) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(rng.randint(min_len, max_len))]


def _word(rng: random.Random, lo: int = 1, hi: int = 7) -> str:
    return "".join(rng.choice(string.ascii_lowercase[:12]) for _ in range(rng.randint(lo, hi)))


def _words(rng: random.Random, min_len: int = 0) -> list[str]:
    return [_word(rng) for _ in range(rng.randint(min_len, 5))]


# The first N_EXAMPLES inputs go into the docstring: they are kept long enough to show what happens.


def int_list_inputs(logic: dict, rng: random.Random, min_len: int = 0) -> list[list]:
    hi = 2 * max(abs(int(logic.get("k", 10))), 5) + 3
    return [[_ints(rng, hi, min_len=4 if i < N_EXAMPLES else min_len)] for i in range(N_TESTS)]


def str_inputs(logic: dict, rng: random.Random) -> list[list]:
    return [[_word(rng, 4 if i < N_EXAMPLES else 0, 9)] for i in range(N_TESTS)]


def words_inputs(logic: dict, rng: random.Random) -> list[list]:
    return [[_words(rng, 3 if i < N_EXAMPLES else 0)] for i in range(N_TESTS)]


def int_inputs(logic: dict, rng: random.Random) -> list[list]:
    return [[rng.randint(0, 40)] for _ in range(N_TESTS)]


# --------------------------------------------------------------------------- families

INPUTS = {"list": int_list_inputs, "str": str_inputs, "words": words_inputs, "int": int_inputs}


@dataclass(frozen=True)
class Family:
    """One kind of function. `draw(rng)` gives one task's logic (its constants and operators: what
    `rewrite` changes). `expression` (the body's return value) and `wordings` (docstring sentences, one
    picked per task) are str.format templates over the logic's keys, `arg` (the argument's name), `x` and
    `w` (the loop variables), `cmp` and `arith` (the surface's words for the logic's `op`) and the keys
    `words(logic)` adds. `inputs(logic, rng)` gives N_TESTS argument lists (examples and tests)."""

    name: str
    fn_names: tuple[str, ...]
    draw: Callable[[random.Random], dict[str, Any]]
    expression: str
    wordings: tuple[str, ...]
    kind: str  # of the one argument: a key of ARG_NAMES
    inputs: Callable[[dict[str, Any], random.Random], list[list]]
    words: Callable[[dict[str, Any]], dict[str, str]] | None


def family(name, fn_names, draw, expression, *wordings, kind="list", inputs=None, words=None) -> Family:
    """A Family, its wordings given one after another and its inputs, unless given, those of its kind."""
    return Family(name, fn_names, draw, expression, wordings, kind, inputs or INPUTS[kind], words)


def _k(lo: int, hi: int) -> Callable[[random.Random], dict[str, Any]]:
    return lambda rng: {"k": rng.randint(lo, hi)}


def _op_k(ops: Sequence[str], lo: int, hi: int) -> Callable[[random.Random], dict[str, Any]]:
    return lambda rng: {"op": rng.choice(tuple(ops)), "k": rng.randint(lo, hi)}


LABEL_WORDS = (("big", "small"), ("high", "low"), ("yes", "no"), ("hot", "cold"), ("up", "down"))


def _draw_label(rng):
    return {
        "op": rng.choice((">", "<", ">=", "<=")),
        "k": rng.randint(2, 20),
        "words": list(rng.choice(LABEL_WORDS)),  # JSON keeps lists, not tuples
    }


_CMP_K = _op_k(CMP_OPS, 1, 20)  # the comparison families' logic: an operator and a constant

FAMILIES: tuple[Family, ...] = (
    family(
        "count_cmp",
        ("count_matching", "how_many", "tally", "count_items"),
        _CMP_K,
        "sum(1 for {x} in {arg} if {x} {op} {k})",
        "Count the numbers in {arg} that are {cmp} {k}.",
        "Return how many items of {arg} are {cmp} {k}.",
        "How many elements of {arg} are {cmp} {k}?",
    ),
    family(
        "filter_cmp",
        ("keep_matching", "select", "filter_values", "pick"),
        _CMP_K,
        "[{x} for {x} in {arg} if {x} {op} {k}]",
        "Keep only the numbers in {arg} that are {cmp} {k}, in order.",
        "Return the items of {arg} that are {cmp} {k}.",
        "Filter {arg}: the elements {cmp} {k}, in their original order.",
    ),
    family(
        "sum_cmp",
        ("sum_matching", "partial_total", "add_selected"),
        _CMP_K,
        "sum({x} for {x} in {arg} if {x} {op} {k})",
        "Add up the numbers in {arg} that are {cmp} {k}.",
        "Return the sum of the items of {arg} that are {cmp} {k}.",
    ),
    family(
        "any_cmp",
        ("has_any", "some_match", "exists"),
        _CMP_K,
        "any({x} {op} {k} for {x} in {arg})",
        "Return True if some number in {arg} is {cmp} {k}, else False.",
        "Is any item of {arg} {cmp} {k}?",
    ),
    family(
        "all_cmp",
        ("all_match", "every_item", "check_all"),
        _CMP_K,
        "all({x} {op} {k} for {x} in {arg})",
        "Return True if every number in {arg} is {cmp} {k}, else False.",
        "Are all items of {arg} {cmp} {k}?",
    ),
    family(
        "first_cmp",
        ("first_match", "find_first", "earliest"),
        _CMP_K,
        "next(({x} for {x} in {arg} if {x} {op} {k}), -1)",
        "Return the first number in {arg} that is {cmp} {k}, or -1 if there is none.",
        "Find the first item of {arg} {cmp} {k}; -1 when no item is.",
    ),
    family(
        "indices_cmp",
        ("positions", "where", "find_indices"),
        _CMP_K,
        "[i for i in range(len({arg})) if {arg}[i] {op} {k}]",
        "Return the positions of the numbers in {arg} that are {cmp} {k}.",
        "List the indices i where {arg}[i] is {cmp} {k}.",
    ),
    family(
        "map_arith",
        ("adjust", "transform", "apply_all", "shift_values"),
        _op_k(("+", "-", "*"), 1, 12),
        "[{x} {op} {k} for {x} in {arg}]",
        "Return a new list: {arith} each number of {arg}.",
        "Apply this to every item of {arg} and return the results: {arith}.",
    ),
    family(
        "clip",
        ("clip", "clamp", "bound"),
        lambda r: {"lo": (lo := r.randint(0, 8)), "hi": lo + r.randint(2, 12)},
        "[min(max({x}, {lo}), {hi}) for {x} in {arg}]",
        "Clip every number of {arg} into the range from {lo} to {hi}.",
        "Return {arg} with each item limited to at least {lo} and at most {hi}.",
    ),
    family(
        "cap",
        ("cap", "limit_values", "ceiling"),
        _k(2, 25),
        "[min({x}, {k}) for {x} in {arg}]",
        "Replace every number of {arg} above {k} by {k}.",
        "Return {arg} with each item capped at {k}.",
    ),
    family(
        "floor_to",
        ("raise_low", "floor_values", "at_least"),
        _k(2, 25),
        "[max({x}, {k}) for {x} in {arg}]",
        "Replace every number of {arg} below {k} by {k}.",
        "Return {arg} with each item raised to at least {k}.",
    ),
    family(
        "count_range",
        ("count_between", "in_range", "count_window"),
        lambda r: {"lo": (lo := r.randint(0, 10)), "hi": lo + r.randint(1, 10)},
        "sum(1 for {x} in {arg} if {lo} <= {x} <= {hi})",
        "Count the numbers in {arg} between {lo} and {hi}, both included.",
        "How many items of {arg} lie from {lo} to {hi} inclusive?",
    ),
    family(
        "count_mod",
        ("count_remainder", "mod_count", "residue_count"),
        lambda r: {"m": (m := r.randint(2, 7)), "r": r.randrange(m)},
        "sum(1 for {x} in {arg} if {x} % {m} == {r})",
        "Count the numbers in {arg} whose remainder when divided by {m} is {r}.",
        "How many items of {arg} leave remainder {r} modulo {m}?",
    ),
    family(
        "filter_divisible",
        ("multiples_in", "divisible", "keep_multiples"),
        _k(2, 9),
        "[{x} for {x} in {arg} if {x} % {k} == 0]",
        "Keep the numbers of {arg} that are divisible by {k}.",
        "Return the multiples of {k} found in {arg}, in order.",
    ),
    family(
        "multiples_upto",
        ("multiples", "list_multiples", "divisible_upto"),
        _k(2, 9),
        "[i for i in range(1, {arg} + 1) if i % {k} == 0]",
        "Return the multiples of {k} from 1 to {arg}, inclusive.",
        "List every number from 1 up to {arg} that is divisible by {k}.",
        kind="int",
    ),
    family(
        "sum_multiples",
        ("sum_multiples", "multiple_total", "add_multiples"),
        _k(2, 9),
        "sum(i for i in range(1, {arg} + 1) if i % {k} == 0)",
        "Return the sum of the multiples of {k} from 1 to {arg}, inclusive.",
        "Add up every number from 1 up to {arg} that is divisible by {k}.",
        kind="int",
    ),
    family(
        "running_sum",
        ("running_total", "prefix_sums", "cumulative"),
        _k(0, 20),
        "[{k} + sum({arg}[:i + 1]) for i in range(len({arg}))]",
        "Return the running totals of {arg}, starting from {k}.",
        "Each output is {k} plus the sum of {arg} up to and including that position.",
    ),
    family(
        "running_max",
        ("running_max", "prefix_max", "high_water"),
        _k(0, 20),
        "[max([{k}] + {arg}[:i + 1]) for i in range(len({arg}))]",
        "Return the running maximum of {arg}, never below {k}.",
        "For each position, the largest of {k} and the items of {arg} so far.",
    ),
    family(
        "pair_op",
        ("neighbours", "pairwise", "adjacent"),
        _op_k(("+", "-", "*"), 0, 9),
        "[b {op} a + {k} for a, b in zip({arg}, {arg}[1:])]",
        "Return the {noun} of each pair of neighbours in {arg} (later one {op} earlier one), plus {k}.",
        "For neighbours a, b of {arg}, return b {op} a + {k}.",
        words=lambda c: {"noun": {"-": "difference", "+": "sum", "*": "product"}[c["op"]]},
    ),
    family(
        "chunk_sums",
        ("chunk_sums", "block_totals", "group_sums"),
        _k(2, 5),
        "[sum({arg}[i:i + {k}]) for i in range(0, len({arg}), {k})]",
        "Split {arg} into groups of {k} and return the sum of each group.",
        "Sum {arg} in consecutive blocks of {k} items (the last may be shorter).",
    ),
    family(
        "every_kth",
        ("every_kth", "stride", "sample_items"),
        lambda r: {"start": r.randint(0, 3), "step": r.randint(2, 4)},
        "{arg}[{start}::{step}]",
        "Return every {step}th item of {arg}, starting at index {start}.",
        "Take the items of {arg} at index {start}, then every {step} positions.",
    ),
    family(
        "rotate",
        ("rotate", "rotate_left", "cycle"),
        _k(1, 4),
        "{arg}[{k}:] + {arg}[:{k}]",
        "Move the first {k} items of {arg} to its end.",
        "Rotate {arg} left by {k} positions (when it is that long).",
    ),
    family(
        "affine",
        ("affine", "scale_shift", "linear_map"),
        lambda r: {"a": r.randint(2, 9), "b": r.randint(1, 20)},
        "[{x} * {a} + {b} for {x} in {arg}]",
        "Return each number of {arg} times {a}, plus {b}.",
        "Map every item of {arg} to {a} * item + {b}.",
    ),
    family(
        "abs_diff",
        ("distances", "abs_diff", "how_far"),
        _k(1, 25),
        "[abs({x} - {k}) for {x} in {arg}]",
        "Return how far each number of {arg} is from {k}.",
        "The absolute difference between every item of {arg} and {k}.",
    ),
    family(
        "power",
        ("powers", "raise_all", "power_each"),
        _k(2, 4),
        "[{x} ** {k} for {x} in {arg}]",
        "Raise every number of {arg} to the power {k}.",
        "Return each item of {arg} to the {k}th power.",
    ),
    family(
        "label",
        ("label", "classify", "tag_values"),
        _draw_label,
        "['{words[0]}' if {x} {op} {k} else '{words[1]}' for {x} in {arg}]",
        "Label each number of {arg}: '{words[0]}' if it is {cmp} {k}, otherwise '{words[1]}'.",
        "Return '{words[0]}' for items of {arg} {cmp} {k} and '{words[1]}' for the rest.",
    ),
    family(
        "max_offset",
        ("extreme_plus", "peak_offset", "bound_plus"),
        lambda r: {"agg": r.choice(("max", "min")), "k": r.randint(1, 20)},
        "{agg}({arg}) + {k}",
        "Return the {extreme} number in {arg} plus {k}.",
        "Find the {extreme} item of {arg} and add {k} to it.",
        inputs=functools.partial(int_list_inputs, min_len=1),
        words=lambda c: {"extreme": {"max": "largest", "min": "smallest"}[c["agg"]]},
    ),
    family(
        "shift_letters",
        ("shift", "caesar", "rotate_letters"),
        _k(1, 25),
        "''.join(chr((ord(c) - 97 + {k}) % 26 + 97) for c in {arg})",
        "Shift every letter of {arg} forward by {k} places in the alphabet, wrapping from z to a.",
        "Return {arg} with each lowercase letter moved {k} positions along the alphabet (cyclic).",
        kind="str",
    ),
    family(
        "count_char",
        ("count_letter", "occurrences", "letter_count"),
        lambda r: {"ch": r.choice(string.ascii_lowercase[:12])},
        "{arg}.count('{ch}')",
        "Count how many times the letter '{ch}' occurs in {arg}.",
        "Return the number of '{ch}' characters in {arg}.",
        kind="str",
    ),
    family(
        "replace_char",
        ("replace_letter", "swap_letter", "substitute"),
        lambda r: dict(zip("ab", r.sample(string.ascii_lowercase[:12], 2))),
        "{arg}.replace('{a}', '{b}')",
        "Replace every '{a}' in {arg} by '{b}'.",
        "Return {arg} with each letter '{a}' changed to '{b}'.",
        kind="str",
    ),
    family(
        "repeat",
        ("repeat", "copies", "duplicate"),
        _k(2, 9),
        "{arg} * {k}",
        "Return {arg} repeated {k} times.",
        "Concatenate {k} copies of {arg}.",
        kind="str",
    ),
    family(
        "pad",
        ("pad_right", "fill", "justify"),
        lambda r: {"k": r.randint(3, 10), "ch": r.choice("*-.#+=")},
        "{arg}.ljust({k}, '{ch}')",
        "Pad {arg} on the right with '{ch}' up to length {k}.",
        "Return {arg} left-justified in {k} characters, filled with '{ch}'.",
        kind="str",
    ),
    family(
        "truncate_words",
        ("truncate", "shorten", "heads"),
        _k(1, 5),
        "[{w}[:{k}] for {w} in {arg}]",
        "Cut every word of {arg} to its first {k} letters.",
        "Return the first {k} characters of each string in {arg}.",
        kind="words",
    ),
    family(
        "words_by_length",
        ("by_length", "length_filter", "keep_words"),
        _op_k(CMP_OPS, 1, 6),
        "[{w} for {w} in {arg} if len({w}) {op} {k}]",
        "Keep the words of {arg} whose length is {cmp} {k}.",
        "Return the strings in {arg} with {cmp} {k} characters.",
        kind="words",
    ),
    family(
        "words_starting",
        ("with_letter", "letter_filter", "matching_words"),
        lambda r: {
            "method": r.choice(("startswith", "endswith")),
            "ch": r.choice(string.ascii_lowercase[:12]),
        },
        "[{w} for {w} in {arg} if {w}.{method}('{ch}')]",
        "Keep the words of {arg} that {where} with '{ch}'.",
        "Return the strings in {arg} that {where} with the letter '{ch}'.",
        kind="words",
        words=lambda c: {"where": {"startswith": "start", "endswith": "end"}[c["method"]]},
    ),
    family(
        "join",
        ("join_words", "glue", "combine"),
        lambda r: {"sep": r.choice(("-", ", ", "_", " ", "/", "+", ":"))},
        "{sep!r}.join({arg})",
        "Join the words of {arg} with {sep!r} between them.",
        "Return the strings of {arg} glued together by {sep!r}.",
        kind="words",
    ),
    family(
        "prefix_words",
        ("prefix", "prepend", "tag_words"),
        lambda r: {"p": r.choice(("x", "re", "un", "pre", "my", "a_", "z-"))},
        "[{p!r} + {w} for {w} in {arg}]",
        "Put {p!r} in front of every word of {arg}.",
        "Return each string of {arg} with the prefix {p!r}.",
        kind="words",
    ),
    family(
        "count_long",
        ("count_words", "long_words", "count_by_length"),
        _op_k(CMP_OPS, 1, 6),
        "sum(1 for {w} in {arg} if len({w}) {op} {k})",
        "Count the words of {arg} with {cmp} {k} letters.",
        "How many strings of {arg} have a length {cmp} {k}?",
        kind="words",
    ),
    family(
        "digit_count",
        ("digit_count", "count_digit", "digits_of"),
        lambda r: {"d": r.randint(0, 9), "k": r.randint(2, 13)},
        "str({arg} * {k}).count('{d}')",
        "Count the digits equal to {d} in {arg} times {k}.",
        "Multiply {arg} by {k} and return how many of its digits are {d}.",
        kind="int",
    ),
)
FAMILY_BY_NAME = {f.name: f for f in FAMILIES}


# --------------------------------------------------------------------------- rendering a task


@dataclass
class Draft:
    """A task before the sandbox has computed its outputs."""

    task_id: str
    family: str
    logic: dict[str, Any]
    surface: Surface
    inputs: list[list]
    params: list[str] = field(default_factory=list)
    description: str = ""
    expression: str = ""

    @property
    def signature(self) -> str:
        return f"def {self.surface.fn}({', '.join(self.params)}):\n"

    @property
    def solution(self) -> str:
        return f"    return {self.expression}\n"


def render(
    task_id: str, family: Family, logic: dict[str, Any], surface: Surface, inputs: list[list]
) -> Draft:
    arg = surface.args[family.kind]
    names = {"arg": arg, "x": surface.var, "w": surface.word_var, **logic}
    if logic.get("op") in CMP_WORDS:
        names["cmp"] = surface.phrasing(CMP_WORDS[logic["op"]])
    if logic.get("op") in ARITH_WORDS:
        names["arith"] = surface.phrasing(ARITH_WORDS[logic["op"]]).format(k=logic["k"])
    if family.words:
        names |= family.words(logic)
    description = surface.pick(*family.wordings).format_map(names)
    expression = family.expression.format_map(names)
    return Draft(task_id, family.name, logic, surface, inputs, [arg], description, expression)


def draft(seed: int, index: int, attempt: int = 0) -> Draft:
    """Attempt `attempt` at task `index` of the benchmark drawn with `seed` (family index mod the number
    of families). `drafts` makes the programs unique."""
    family = FAMILIES[index % len(FAMILIES)]
    rng = random.Random(f"synthetic:{seed}:{index}:{attempt}")
    logic = family.draw(rng)
    surface = Surface(
        fn=rng.choice(family.fn_names) + (rng.choice(FN_SUFFIXES) if attempt >= SUFFIX_AFTER else ""),
        args=dict(ARG_NAMES),
        var=LOOP_VAR,
        word_var=WORD_LOOP_VAR,
        wording=rng.randrange(6),
        phrase=rng.randrange(6),
    )
    inputs = family.inputs(logic, random.Random(f"synthetic-inputs:{seed}:{index}"))
    return render(f"synthetic/{index}", family, logic, surface, inputs)


MAX_ATTEMPTS = 200


def drafts(seed: int, size: int) -> list[Draft]:
    """The first `size` tasks drawn with `seed`, every program (signature + solution) different: a
    non-member whose program equals a member's would be leaked, not held out. Drawn in order, so a
    bigger benchmark starts with the same tasks as a smaller one. A family whose programs run out (far
    beyond DEFAULT_SIZE) repeats one after MAX_ATTEMPTS tries."""
    seen: set[str] = set()
    out = []
    for index in range(size):
        for attempt in range(MAX_ATTEMPTS):
            d = draft(seed, index, attempt)
            if d.signature + d.solution not in seen:
                break
        seen.add(d.signature + d.solution)
        out.append(d)
    return out


def finish(d: Draft, outputs: list[Any], metadata: dict[str, Any] | None = None) -> Task:
    """The Task of a draft, with the canonical solution's outputs (from the sandbox) as the truth."""
    examples = "".join(
        f"    >>> {d.surface.fn}({', '.join(repr(a) for a in args)})\n    {out!r}\n"
        for args, out in zip(d.inputs[:N_EXAMPLES], outputs[:N_EXAMPLES])
    )
    # The description comes last, after the examples: its constants are then the last numbers the model
    # reads before the body. Copying the constant was the tiny model's remaining failure (it wrote a
    # typical value instead); with the sentence last, 1000 SFT steps reach 0.33 pass@1 on non-members.
    prompt = f'{d.signature}    """\n{examples}    {d.description}\n    """\n'
    asserts = "".join(
        f"    assert candidate({', '.join(repr(a) for a in args)}) == {out!r}\n"
        for args, out in zip(d.inputs, outputs)
    )
    tests = f"def check(candidate):\n{asserts}"
    meta = {
        "family": d.family,
        "logic": d.logic,
        "surface": dataclasses.asdict(d.surface),
        "inputs": d.inputs,
        "outputs": outputs,
        **(metadata or {}),
    }
    return Task(
        task_id=d.task_id,
        benchmark=BENCHMARK,
        prompt=prompt,
        solution=d.solution,
        entry_point=d.surface.fn,
        tests=tests,
        test_type="function",
        metadata=meta,
    )


def run_drafts(drafts: Sequence[Draft], sandbox=None) -> list[list[Any]]:
    """The canonical solutions' outputs on their inputs, computed in the sandbox (one job per draft)."""
    from leaklab.execution.sandbox import FunctionCalls, Sandbox

    jobs = [FunctionCalls(d.signature + d.solution, d.surface.fn, d.inputs, 10.0) for d in drafts]
    with Sandbox(workers=2, timeout_s=10.0) if sandbox is None else contextlib.nullcontext(sandbox) as sb:
        results = sb.run_jobs(jobs)
    outputs = []
    for d, r in zip(drafts, results):
        calls = r.calls or []
        if not r.passed or len(calls) != len(d.inputs) or not all(c.ok for c in calls):
            errors = [c.error for c in calls if not c.ok]
            raise RuntimeError(  # a bug in a family of this module, never in user data
                f"{d.task_id} ({d.family}): the canonical solution failed in the sandbox: "
                f"{r.reason or (errors[0] if errors else r.verdict)}"
            )
        outputs.append([c.value for c in calls])
    return outputs


# --------------------------------------------------------------------------- the benchmark, cached


def build_synthetic(seed: int = 0, size: int = DEFAULT_SIZE, sandbox=None) -> list[Task]:
    """`size` tasks drawn with `seed`, their outputs computed in the sandbox (no cache)."""
    todo = drafts(seed, size)
    outputs = run_drafts(todo, sandbox)
    return [finish(d, out, {"seed": seed}) for d, out in zip(todo, outputs)]


def load_synthetic(
    path: str | Path | None = None,
    seed: int = 0,
    max_samples: int | None = None,
    **_: Any,
) -> list[Task]:
    """The synthetic benchmark: `max_samples` tasks (DEFAULT_SIZE when None) drawn with `seed`, from the
    cache, or built (in the sandbox) and cached."""
    if path:
        raise ValueError(
            f"the synthetic benchmark is built, not read: unset data.path ({path}); data.seed and "
            "data.max_samples choose the tasks"
        )
    size = DEFAULT_SIZE if max_samples is None else int(max_samples)
    if size < 1:
        raise ValueError(f"the synthetic benchmark needs at least one task, got max_samples={size}")
    code_version = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    file = cache_root() / "synthetic" / f"seed{seed}-n{size}-{code_version}.jsonl"
    if file.exists():
        return [task_from_dict(row) for row in read_rows(file)]
    tasks = build_synthetic(seed, size)
    write_atomic(file, "".join(json.dumps(task_to_dict(t)) + "\n" for t in tasks))
    return tasks


# --------------------------------------------------------------------------- rewriting (MRI)


def rewrite(task: Task, rng: random.Random, sandbox=None, max_tries: int = 50) -> Task:
    """The same family with one logic choice of `task` (a constant or an operator) drawn anew, names,
    wording template and test inputs kept, docstring and tests rebuilt in the sandbox (opened when
    None). Its id is `<id>/rewrite`; metadata `rewrite_of` and `changed` (the logic key, e.g. "op")."""
    meta = task.metadata
    if task.benchmark != BENCHMARK or "family" not in meta:
        raise ValueError(f"{task.task_id} is not a synthetic task: only those can be rewritten exactly")
    if sandbox is None:  # one sandbox for every try
        from leaklab.execution.sandbox import Sandbox

        with Sandbox(workers=1, timeout_s=10.0) as sb:
            return rewrite(task, rng, sb, max_tries)
    family = FAMILY_BY_NAME[meta["family"]]
    old = dict(meta["logic"])
    inputs = [list(a) for a in meta["inputs"]]
    for _ in range(max_tries):
        fresh = family.draw(rng)
        changeable = sorted(k for k in old if k in fresh and fresh[k] != old[k])
        if not changeable:
            continue
        key = rng.choice(changeable)
        logic = {**old, key: fresh[key]}
        if key in ("lo", "hi") and logic["lo"] >= logic["hi"]:  # a range must stay a range
            continue
        if key in ("m", "r") and not 0 <= logic["r"] < logic["m"]:
            continue
        d = render(f"{task.task_id}/rewrite", family, logic, Surface(**meta["surface"]), inputs)
        (outputs,) = run_drafts([d], sandbox)
        # A rewrite the original solution still passes changed nothing the tests can see: draw again.
        if outputs != meta.get("outputs"):
            return finish(d, outputs, {"rewrite_of": task.task_id, "changed": key, "seed": meta.get("seed")})
    raise ValueError(f"{task.task_id}: no other logic that the tests tell apart in family {family.name}")
