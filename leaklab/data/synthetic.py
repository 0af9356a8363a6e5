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
    """What a task says and names, drawn per task; `pick` chooses among wordings deterministically."""

    fn: str
    args: dict[str, str]  # kind of argument -> its name
    var: str
    word_var: str
    wording: int  # index into a family's templates (taken modulo their number)
    phrase: int  # index into an operator's words

    def pick(self, *options: str) -> str:
        return options[self.wording % len(options)]

    def cmp(self, op: str) -> str:
        words = CMP_WORDS[op]
        return words[self.phrase % len(words)]

    def arith(self, op: str, k: int) -> str:
        words = ARITH_WORDS[op]
        return words[self.phrase % len(words)].format(k=k)


# With argument names fixed, a family with few constants (power, rotate, join, ...) runs out of distinct
# programs long before 2000 tasks; after SUFFIX_AFTER failed attempts the function name takes a suffix.
FN_SUFFIXES = ("_all", "_list", "_each", "_items", "_vals", "_new", "_out", "_of", "_fn", "_v2")
SUFFIX_AFTER = 20


def draw_surface(rng: random.Random, fn_names: Sequence[str], suffix: bool = False) -> Surface:
    return Surface(
        fn=rng.choice(fn_names) + (rng.choice(FN_SUFFIXES) if suffix else ""),
        args=dict(ARG_NAMES),
        var=LOOP_VAR,
        word_var=WORD_LOOP_VAR,
        wording=rng.randrange(6),
        phrase=rng.randrange(6),
    )


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


@dataclass(frozen=True)
class Family:
    """One kind of function.

    draw(rng) -> logic              the constants and operators of one task (what `rewrite` changes)
    make(logic, surface) -> (arg kinds, one-sentence description, the body's return expression)
    inputs(logic, rng) -> [[args], ...]   N_TESTS argument lists for the examples and the tests
    """

    name: str
    fn_names: tuple[str, ...]
    draw: Callable[[random.Random], dict[str, Any]]
    make: Callable[[dict[str, Any], Surface], tuple[list[str], str, str]]
    inputs: Callable[[dict[str, Any], random.Random], list[list]] = int_list_inputs


def _k(lo: int, hi: int) -> Callable[[random.Random], dict[str, Any]]:
    return lambda rng: {"k": rng.randint(lo, hi)}


def _op_k(ops: Sequence[str], lo: int, hi: int) -> Callable[[random.Random], dict[str, Any]]:
    return lambda rng: {"op": rng.choice(tuple(ops)), "k": rng.randint(lo, hi)}


def _count_cmp(c, s):
    xs, x = s.args["list"], s.var
    desc = s.pick(
        f"Count the numbers in {xs} that are {s.cmp(c['op'])} {c['k']}.",
        f"Return how many items of {xs} are {s.cmp(c['op'])} {c['k']}.",
        f"How many elements of {xs} are {s.cmp(c['op'])} {c['k']}?",
    )
    return ["list"], desc, f"sum(1 for {x} in {xs} if {x} {c['op']} {c['k']})"


def _filter_cmp(c, s):
    xs, x = s.args["list"], s.var
    desc = s.pick(
        f"Keep only the numbers in {xs} that are {s.cmp(c['op'])} {c['k']}, in order.",
        f"Return the items of {xs} that are {s.cmp(c['op'])} {c['k']}.",
        f"Filter {xs}: the elements {s.cmp(c['op'])} {c['k']}, in their original order.",
    )
    return ["list"], desc, f"[{x} for {x} in {xs} if {x} {c['op']} {c['k']}]"


def _sum_cmp(c, s):
    xs, x = s.args["list"], s.var
    desc = s.pick(
        f"Add up the numbers in {xs} that are {s.cmp(c['op'])} {c['k']}.",
        f"Return the sum of the items of {xs} that are {s.cmp(c['op'])} {c['k']}.",
    )
    return ["list"], desc, f"sum({x} for {x} in {xs} if {x} {c['op']} {c['k']})"


def _any_cmp(c, s):
    xs, x = s.args["list"], s.var
    desc = s.pick(
        f"Return True if some number in {xs} is {s.cmp(c['op'])} {c['k']}, else False.",
        f"Is any item of {xs} {s.cmp(c['op'])} {c['k']}?",
    )
    return ["list"], desc, f"any({x} {c['op']} {c['k']} for {x} in {xs})"


def _all_cmp(c, s):
    xs, x = s.args["list"], s.var
    desc = s.pick(
        f"Return True if every number in {xs} is {s.cmp(c['op'])} {c['k']}, else False.",
        f"Are all items of {xs} {s.cmp(c['op'])} {c['k']}?",
    )
    return ["list"], desc, f"all({x} {c['op']} {c['k']} for {x} in {xs})"


def _first_cmp(c, s):
    xs, x = s.args["list"], s.var
    desc = s.pick(
        f"Return the first number in {xs} that is {s.cmp(c['op'])} {c['k']}, or -1 if there is none.",
        f"Find the first item of {xs} {s.cmp(c['op'])} {c['k']}; -1 when no item is.",
    )
    return ["list"], desc, f"next(({x} for {x} in {xs} if {x} {c['op']} {c['k']}), -1)"


def _indices_cmp(c, s):
    xs = s.args["list"]
    desc = s.pick(
        f"Return the positions of the numbers in {xs} that are {s.cmp(c['op'])} {c['k']}.",
        f"List the indices i where {xs}[i] is {s.cmp(c['op'])} {c['k']}.",
    )
    return ["list"], desc, f"[i for i in range(len({xs})) if {xs}[i] {c['op']} {c['k']}]"


def _map_arith(c, s):
    xs, x = s.args["list"], s.var
    desc = s.pick(
        f"Return a new list: {s.arith(c['op'], c['k'])} each number of {xs}.",
        f"Apply this to every item of {xs} and return the results: {s.arith(c['op'], c['k'])}.",
    )
    return ["list"], desc, f"[{x} {c['op']} {c['k']} for {x} in {xs}]"


def _clip(c, s):
    xs, x = s.args["list"], s.var
    lo, hi = c["lo"], c["hi"]
    desc = s.pick(
        f"Clip every number of {xs} into the range from {lo} to {hi}.",
        f"Return {xs} with each item limited to at least {lo} and at most {hi}.",
    )
    return ["list"], desc, f"[min(max({x}, {lo}), {hi}) for {x} in {xs}]"


def _cap(c, s):
    xs, x = s.args["list"], s.var
    desc = s.pick(
        f"Replace every number of {xs} above {c['k']} by {c['k']}.",
        f"Return {xs} with each item capped at {c['k']}.",
    )
    return ["list"], desc, f"[min({x}, {c['k']}) for {x} in {xs}]"


def _floor_to(c, s):
    xs, x = s.args["list"], s.var
    desc = s.pick(
        f"Replace every number of {xs} below {c['k']} by {c['k']}.",
        f"Return {xs} with each item raised to at least {c['k']}.",
    )
    return ["list"], desc, f"[max({x}, {c['k']}) for {x} in {xs}]"


def _count_range(c, s):
    xs, x = s.args["list"], s.var
    lo, hi = c["lo"], c["hi"]
    desc = s.pick(
        f"Count the numbers in {xs} between {lo} and {hi}, both included.",
        f"How many items of {xs} lie from {lo} to {hi} inclusive?",
    )
    return ["list"], desc, f"sum(1 for {x} in {xs} if {lo} <= {x} <= {hi})"


def _count_mod(c, s):
    xs, x = s.args["list"], s.var
    desc = s.pick(
        f"Count the numbers in {xs} whose remainder when divided by {c['m']} is {c['r']}.",
        f"How many items of {xs} leave remainder {c['r']} modulo {c['m']}?",
    )
    return ["list"], desc, f"sum(1 for {x} in {xs} if {x} % {c['m']} == {c['r']})"


def _draw_mod(rng):
    m = rng.randint(2, 7)
    return {"m": m, "r": rng.randrange(m)}


def _filter_divisible(c, s):
    xs, x = s.args["list"], s.var
    desc = s.pick(
        f"Keep the numbers of {xs} that are divisible by {c['k']}.",
        f"Return the multiples of {c['k']} found in {xs}, in order.",
    )
    return ["list"], desc, f"[{x} for {x} in {xs} if {x} % {c['k']} == 0]"


def _multiples_upto(c, s):
    n = s.args["int"]
    desc = s.pick(
        f"Return the multiples of {c['k']} from 1 to {n}, inclusive.",
        f"List every number from 1 up to {n} that is divisible by {c['k']}.",
    )
    return ["int"], desc, f"[i for i in range(1, {n} + 1) if i % {c['k']} == 0]"


def _sum_multiples(c, s):
    n = s.args["int"]
    desc = s.pick(
        f"Return the sum of the multiples of {c['k']} from 1 to {n}, inclusive.",
        f"Add up every number from 1 up to {n} that is divisible by {c['k']}.",
    )
    return ["int"], desc, f"sum(i for i in range(1, {n} + 1) if i % {c['k']} == 0)"


def _running_sum(c, s):
    xs = s.args["list"]
    desc = s.pick(
        f"Return the running totals of {xs}, starting from {c['k']}.",
        f"Each output is {c['k']} plus the sum of {xs} up to and including that position.",
    )
    return ["list"], desc, f"[{c['k']} + sum({xs}[:i + 1]) for i in range(len({xs}))]"


def _running_max(c, s):
    xs = s.args["list"]
    desc = s.pick(
        f"Return the running maximum of {xs}, never below {c['k']}.",
        f"For each position, the largest of {c['k']} and the items of {xs} so far.",
    )
    return ["list"], desc, f"[max([{c['k']}] + {xs}[:i + 1]) for i in range(len({xs}))]"


def _pair_op(c, s):
    xs = s.args["list"]
    word = {"-": "difference", "+": "sum", "*": "product"}[c["op"]]
    desc = s.pick(
        f"Return the {word} of each pair of neighbours in {xs} (later one {c['op']} earlier one), plus {c['k']}.",
        f"For neighbours a, b of {xs}, return b {c['op']} a + {c['k']}.",
    )
    return ["list"], desc, f"[b {c['op']} a + {c['k']} for a, b in zip({xs}, {xs}[1:])]"


def _chunk_sums(c, s):
    xs = s.args["list"]
    desc = s.pick(
        f"Split {xs} into groups of {c['k']} and return the sum of each group.",
        f"Sum {xs} in consecutive blocks of {c['k']} items (the last may be shorter).",
    )
    return ["list"], desc, f"[sum({xs}[i:i + {c['k']}]) for i in range(0, len({xs}), {c['k']})]"


def _every_kth(c, s):
    xs = s.args["list"]
    desc = s.pick(
        f"Return every {c['step']}th item of {xs}, starting at index {c['start']}.",
        f"Take the items of {xs} at index {c['start']}, then every {c['step']} positions.",
    )
    return ["list"], desc, f"{xs}[{c['start']}::{c['step']}]"


def _rotate(c, s):
    xs = s.args["list"]
    desc = s.pick(
        f"Move the first {c['k']} items of {xs} to its end.",
        f"Rotate {xs} left by {c['k']} positions (when it is that long).",
    )
    return ["list"], desc, f"{xs}[{c['k']}:] + {xs}[:{c['k']}]"


def _affine(c, s):
    xs, x = s.args["list"], s.var
    desc = s.pick(
        f"Return each number of {xs} times {c['a']}, plus {c['b']}.",
        f"Map every item of {xs} to {c['a']} * item + {c['b']}.",
    )
    return ["list"], desc, f"[{x} * {c['a']} + {c['b']} for {x} in {xs}]"


def _abs_diff(c, s):
    xs, x = s.args["list"], s.var
    desc = s.pick(
        f"Return how far each number of {xs} is from {c['k']}.",
        f"The absolute difference between every item of {xs} and {c['k']}.",
    )
    return ["list"], desc, f"[abs({x} - {c['k']}) for {x} in {xs}]"


def _power(c, s):
    xs, x = s.args["list"], s.var
    desc = s.pick(
        f"Raise every number of {xs} to the power {c['k']}.",
        f"Return each item of {xs} to the {c['k']}th power.",
    )
    return ["list"], desc, f"[{x} ** {c['k']} for {x} in {xs}]"


def _label(c, s):
    xs, x = s.args["list"], s.var
    yes, no = c["words"]
    desc = s.pick(
        f"Label each number of {xs}: '{yes}' if it is {s.cmp(c['op'])} {c['k']}, otherwise '{no}'.",
        f"Return '{yes}' for items of {xs} {s.cmp(c['op'])} {c['k']} and '{no}' for the rest.",
    )
    return ["list"], desc, f"['{yes}' if {x} {c['op']} {c['k']} else '{no}' for {x} in {xs}]"


LABEL_WORDS = (("big", "small"), ("high", "low"), ("yes", "no"), ("hot", "cold"), ("up", "down"))


def _draw_label(rng):
    return {
        "op": rng.choice((">", "<", ">=", "<=")),
        "k": rng.randint(2, 20),
        "words": list(rng.choice(LABEL_WORDS)),  # JSON keeps lists, not tuples
    }


def _max_offset(c, s):
    xs = s.args["list"]
    word = {"max": "largest", "min": "smallest"}[c["agg"]]
    desc = s.pick(
        f"Return the {word} number in {xs} plus {c['k']}.",
        f"Find the {word} item of {xs} and add {c['k']} to it.",
    )
    return ["list"], desc, f"{c['agg']}({xs}) + {c['k']}"


def _shift_letters(c, s):
    t, ch = s.args["str"], "c"
    desc = s.pick(
        f"Shift every letter of {t} forward by {c['k']} places in the alphabet, wrapping from z to a.",
        f"Return {t} with each lowercase letter moved {c['k']} positions along the alphabet (cyclic).",
    )
    return (
        ["str"],
        desc,
        f"''.join(chr((ord({ch}) - 97 + {c['k']}) % 26 + 97) for {ch} in {t})",
    )


def _count_char(c, s):
    t = s.args["str"]
    desc = s.pick(
        f"Count how many times the letter '{c['ch']}' occurs in {t}.",
        f"Return the number of '{c['ch']}' characters in {t}.",
    )
    return ["str"], desc, f"{t}.count('{c['ch']}')"


def _replace_char(c, s):
    t = s.args["str"]
    desc = s.pick(
        f"Replace every '{c['a']}' in {t} by '{c['b']}'.",
        f"Return {t} with each letter '{c['a']}' changed to '{c['b']}'.",
    )
    return ["str"], desc, f"{t}.replace('{c['a']}', '{c['b']}')"


def _draw_two_letters(rng):
    a, b = rng.sample(string.ascii_lowercase[:12], 2)
    return {"a": a, "b": b}


def _repeat(c, s):
    t = s.args["str"]
    desc = s.pick(f"Return {t} repeated {c['k']} times.", f"Concatenate {c['k']} copies of {t}.")
    return ["str"], desc, f"{t} * {c['k']}"


def _pad(c, s):
    t = s.args["str"]
    desc = s.pick(
        f"Pad {t} on the right with '{c['ch']}' up to length {c['k']}.",
        f"Return {t} left-justified in {c['k']} characters, filled with '{c['ch']}'.",
    )
    return ["str"], desc, f"{t}.ljust({c['k']}, '{c['ch']}')"


def _draw_pad(rng):
    return {"k": rng.randint(3, 10), "ch": rng.choice("*-.#+=")}


def _truncate_words(c, s):
    ws, w = s.args["words"], s.word_var
    desc = s.pick(
        f"Cut every word of {ws} to its first {c['k']} letters.",
        f"Return the first {c['k']} characters of each string in {ws}.",
    )
    return ["words"], desc, f"[{w}[:{c['k']}] for {w} in {ws}]"


def _words_by_length(c, s):
    ws, w = s.args["words"], s.word_var
    desc = s.pick(
        f"Keep the words of {ws} whose length is {s.cmp(c['op'])} {c['k']}.",
        f"Return the strings in {ws} with {s.cmp(c['op'])} {c['k']} characters.",
    )
    return ["words"], desc, f"[{w} for {w} in {ws} if len({w}) {c['op']} {c['k']}]"


def _words_starting(c, s):
    ws, w = s.args["words"], s.word_var
    where = {"startswith": "start", "endswith": "end"}[c["method"]]
    desc = s.pick(
        f"Keep the words of {ws} that {where} with '{c['ch']}'.",
        f"Return the strings in {ws} that {where} with the letter '{c['ch']}'.",
    )
    return ["words"], desc, f"[{w} for {w} in {ws} if {w}.{c['method']}('{c['ch']}')]"


def _draw_starting(rng):
    return {"method": rng.choice(("startswith", "endswith")), "ch": rng.choice(string.ascii_lowercase[:12])}


def _join(c, s):
    ws = s.args["words"]
    desc = s.pick(
        f"Join the words of {ws} with {c['sep']!r} between them.",
        f"Return the strings of {ws} glued together by {c['sep']!r}.",
    )
    return ["words"], desc, f"{c['sep']!r}.join({ws})"


def _prefix_words(c, s):
    ws, w = s.args["words"], s.word_var
    desc = s.pick(
        f"Put {c['p']!r} in front of every word of {ws}.",
        f"Return each string of {ws} with the prefix {c['p']!r}.",
    )
    return ["words"], desc, f"[{c['p']!r} + {w} for {w} in {ws}]"


def _count_long(c, s):
    ws, w = s.args["words"], s.word_var
    desc = s.pick(
        f"Count the words of {ws} with {s.cmp(c['op'])} {c['k']} letters.",
        f"How many strings of {ws} have a length {s.cmp(c['op'])} {c['k']}?",
    )
    return ["words"], desc, f"sum(1 for {w} in {ws} if len({w}) {c['op']} {c['k']})"


def _digit_count(c, s):
    n = s.args["int"]
    desc = s.pick(
        f"Count the digits equal to {c['d']} in {n} times {c['k']}.",
        f"Multiply {n} by {c['k']} and return how many of its digits are {c['d']}.",
    )
    return ["int"], desc, f"str({n} * {c['k']}).count('{c['d']}')"


def _draw_digit(rng):
    return {"d": rng.randint(0, 9), "k": rng.randint(2, 13)}


_CMP_K = _op_k(CMP_OPS, 1, 20)  # the comparison families' logic: an operator and a constant

FAMILIES: tuple[Family, ...] = (
    Family("count_cmp", ("count_matching", "how_many", "tally", "count_items"), _CMP_K, _count_cmp),
    Family("filter_cmp", ("keep_matching", "select", "filter_values", "pick"), _CMP_K, _filter_cmp),
    Family("sum_cmp", ("sum_matching", "partial_total", "add_selected"), _CMP_K, _sum_cmp),
    Family("any_cmp", ("has_any", "some_match", "exists"), _CMP_K, _any_cmp),
    Family("all_cmp", ("all_match", "every_item", "check_all"), _CMP_K, _all_cmp),
    Family("first_cmp", ("first_match", "find_first", "earliest"), _CMP_K, _first_cmp),
    Family("indices_cmp", ("positions", "where", "find_indices"), _CMP_K, _indices_cmp),
    Family(
        "map_arith",
        ("adjust", "transform", "apply_all", "shift_values"),
        _op_k(("+", "-", "*"), 1, 12),
        _map_arith,
    ),  # fmt: skip
    Family(
        "clip",
        ("clip", "clamp", "bound"),
        lambda r: {"lo": (lo := r.randint(0, 8)), "hi": lo + r.randint(2, 12)},
        _clip,
    ),  # fmt: skip
    Family("cap", ("cap", "limit_values", "ceiling"), _k(2, 25), _cap),
    Family("floor_to", ("raise_low", "floor_values", "at_least"), _k(2, 25), _floor_to),
    Family(
        "count_range",
        ("count_between", "in_range", "count_window"),
        lambda r: {"lo": (lo := r.randint(0, 10)), "hi": lo + r.randint(1, 10)},
        _count_range,
    ),  # fmt: skip
    Family("count_mod", ("count_remainder", "mod_count", "residue_count"), _draw_mod, _count_mod),
    Family("filter_divisible", ("multiples_in", "divisible", "keep_multiples"), _k(2, 9), _filter_divisible),
    Family(
        "multiples_upto",
        ("multiples", "list_multiples", "divisible_upto"),
        _k(2, 9),
        _multiples_upto,
        int_inputs,
    ),  # fmt: skip
    Family(
        "sum_multiples",
        ("sum_multiples", "multiple_total", "add_multiples"),
        _k(2, 9),
        _sum_multiples,
        int_inputs,
    ),  # fmt: skip
    Family("running_sum", ("running_total", "prefix_sums", "cumulative"), _k(0, 20), _running_sum),
    Family("running_max", ("running_max", "prefix_max", "high_water"), _k(0, 20), _running_max),
    Family("pair_op", ("neighbours", "pairwise", "adjacent"), _op_k(("+", "-", "*"), 0, 9), _pair_op),
    Family("chunk_sums", ("chunk_sums", "block_totals", "group_sums"), _k(2, 5), _chunk_sums),
    Family(
        "every_kth",
        ("every_kth", "stride", "sample_items"),
        lambda r: {"start": r.randint(0, 3), "step": r.randint(2, 4)},
        _every_kth,
    ),  # fmt: skip
    Family("rotate", ("rotate", "rotate_left", "cycle"), _k(1, 4), _rotate),
    Family(
        "affine",
        ("affine", "scale_shift", "linear_map"),
        lambda r: {"a": r.randint(2, 9), "b": r.randint(1, 20)},
        _affine,
    ),  # fmt: skip
    Family("abs_diff", ("distances", "abs_diff", "how_far"), _k(1, 25), _abs_diff),
    Family("power", ("powers", "raise_all", "power_each"), _k(2, 4), _power),
    Family("label", ("label", "classify", "tag_values"), _draw_label, _label),
    Family(
        "max_offset",
        ("extreme_plus", "peak_offset", "bound_plus"),
        lambda r: {"agg": r.choice(("max", "min")), "k": r.randint(1, 20)},
        _max_offset,
        functools.partial(int_list_inputs, min_len=1),
    ),  # fmt: skip
    Family("shift_letters", ("shift", "caesar", "rotate_letters"), _k(1, 25), _shift_letters, str_inputs),
    Family(
        "count_char",
        ("count_letter", "occurrences", "letter_count"),
        lambda r: {"ch": r.choice(string.ascii_lowercase[:12])},
        _count_char,
        str_inputs,
    ),  # fmt: skip
    Family(
        "replace_char",
        ("replace_letter", "swap_letter", "substitute"),
        _draw_two_letters,
        _replace_char,
        str_inputs,
    ),  # fmt: skip
    Family("repeat", ("repeat", "copies", "duplicate"), _k(2, 9), _repeat, str_inputs),
    Family("pad", ("pad_right", "fill", "justify"), _draw_pad, _pad, str_inputs),
    Family("truncate_words", ("truncate", "shorten", "heads"), _k(1, 5), _truncate_words, words_inputs),
    Family(
        "words_by_length",
        ("by_length", "length_filter", "keep_words"),
        _op_k(CMP_OPS, 1, 6),
        _words_by_length,
        words_inputs,
    ),  # fmt: skip
    Family(
        "words_starting",
        ("with_letter", "letter_filter", "matching_words"),
        _draw_starting,
        _words_starting,
        words_inputs,
    ),  # fmt: skip
    Family(
        "join",
        ("join_words", "glue", "combine"),
        lambda r: {"sep": r.choice(("-", ", ", "_", " ", "/", "+", ":"))},
        _join,
        words_inputs,
    ),  # fmt: skip
    Family(
        "prefix_words",
        ("prefix", "prepend", "tag_words"),
        lambda r: {"p": r.choice(("x", "re", "un", "pre", "my", "a_", "z-"))},
        _prefix_words,
        words_inputs,
    ),  # fmt: skip
    Family(
        "count_long",
        ("count_words", "long_words", "count_by_length"),
        _op_k(CMP_OPS, 1, 6),
        _count_long,
        words_inputs,
    ),  # fmt: skip
    Family(
        "digit_count", ("digit_count", "count_digit", "digits_of"), _draw_digit, _digit_count, int_inputs
    ),  # fmt: skip
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
    kinds, description, expression = family.make(logic, surface)
    params = [surface.args[kind] for kind in kinds]
    return Draft(task_id, family.name, logic, surface, inputs, params, description, expression)


def draft(seed: int, index: int, attempt: int = 0) -> Draft:
    """Attempt `attempt` at task `index` of the benchmark drawn with `seed` (family index mod the number
    of families). `drafts` makes the programs unique."""
    family = FAMILIES[index % len(FAMILIES)]
    rng = random.Random(f"synthetic:{seed}:{index}:{attempt}")
    logic = family.draw(rng)
    surface = draw_surface(rng, family.fn_names, suffix=attempt >= SUFFIX_AFTER)
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


def _call(fn: str, args: list) -> str:
    return f"{fn}({', '.join(repr(a) for a in args)})"


def finish(d: Draft, outputs: list[Any], metadata: dict[str, Any] | None = None) -> Task:
    """The Task of a draft, with the canonical solution's outputs (from the sandbox) as the truth."""
    examples = "".join(
        f"    >>> {_call(d.surface.fn, args)}\n    {out!r}\n"
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


class SyntheticBuildError(RuntimeError):
    """A family whose canonical solution did not run (a bug in this module, never in user data)."""


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
            raise SyntheticBuildError(
                f"{d.task_id} ({d.family}): the canonical solution failed in the sandbox: "
                f"{r.reason or (errors[0] if errors else r.verdict)}"
            )
        outputs.append([c.value for c in calls])
    return outputs


# --------------------------------------------------------------------------- the benchmark, cached


def cache_file(seed: int, size: int) -> Path:
    code_version = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    return cache_root() / "synthetic" / f"seed{seed}-n{size}-{code_version}.jsonl"


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
    file = cache_file(seed, size)
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
