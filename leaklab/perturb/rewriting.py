"""Rule-based code rewriting for MRI (Memorize or generalize?, §3.1, App. G): change ONE core logic of a
task's canonical solution with an AST operator (one per type in LOGIC_TYPES), keep its signature, and
rebuild the task around it; candidates are validated in the sandbox (App. B.5), rejections kept per type.
See docs/perturbations.md#mri-rewriting.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import random
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from leaklab.data.synthetic import BENCHMARK as SYNTHETIC
from leaklab.data.synthetic import rewrite as synthetic_rewrite
from leaklab.data.tasks import Task
from leaklab.execution.correctness import outputs_match
from leaklab.execution.sandbox import FunctionCalls
from leaklab.perturb.identifiers import docstring_statement

MAX_TEST_INPUTS = 200  # test inputs run per candidate (the first ones, in the tests' order)

# --------------------------------------------------------------------------- operator tables


def _both_ways(swaps: dict) -> dict:
    """`swaps` and their inverses (a -> b and b -> a)."""
    return swaps | {new: old for old, new in swaps.items()}


COMPONENT_FUNCTIONS = {"sum": "max", "float": "int"} | _both_ways(
    {"any": "all", "set": "list", "int": "round", "floor": "ceil"}
)
COMPONENT_METHODS = {"strip": "lstrip", "extend": "append"} | _both_ways(
    {
        "upper": "lower",
        "isupper": "islower",
        "startswith": "endswith",
        "find": "rfind",
        "lstrip": "rstrip",
        "isdigit": "isalpha",
        "capitalize": "title",
        "floor": "ceil",
    }
)
MATH_FUNCTIONS = _both_ways({"floor": "ceil"})
REVERSED_FUNCTIONS = _both_ways({"max": "min"})
ARITHMETIC = {ast.Mult: ast.Add, ast.Div: ast.Mult, ast.Pow: ast.Mult, ast.BitXor: ast.BitOr} | _both_ways(
    {ast.Add: ast.Sub, ast.FloorDiv: ast.Mod, ast.BitAnd: ast.BitOr}
)
EQUALITY = _both_ways({ast.Eq: ast.NotEq, ast.In: ast.NotIn})
BOUNDS = _both_ways({ast.Lt: ast.LtE, ast.Gt: ast.GtE})
SYMBOLS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.Eq: "==", ast.NotEq: "!=",
    ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.In: "in", ast.NotIn: "not in",
    ast.And: "and", ast.Or: "or",
}  # fmt: skip
DROPPABLE_STAGES = {"sorted", "reversed", "set", "abs", "list", "tuple", "str"}
DROPPABLE_METHODS = {"strip", "lower", "upper", "lstrip", "rstrip"}
# The words of the new prompt's sentence: it states the new behaviour in prose, never in code (why:
# docs/perturbations.md#mri-rewriting).
ARITHMETIC_WORDS = {
    ast.Add: "addition", ast.Sub: "subtraction", ast.Mult: "multiplication", ast.Div: "division",
    ast.FloorDiv: "whole-number division (the quotient rounded down)",
    ast.Mod: "the remainder of a division", ast.Pow: "raising to a power", ast.BitAnd: "bitwise AND",
    ast.BitOr: "bitwise OR", ast.BitXor: "bitwise exclusive OR",
}  # fmt: skip
EQUALITY_WORDS = {
    ast.Eq: "checks that two values are equal",
    ast.NotEq: "checks that two values differ",
    ast.In: "checks that a value is contained in a collection",
    ast.NotIn: "checks that a value is not contained in a collection",
}
BOUND_WORDS = {ast.Lt: "less than", ast.LtE: "less than or equal to", ast.Gt: "greater than",
               ast.GtE: "greater than or equal to"}  # fmt: skip
COMPONENT_WORDS = {
    "sum": "the total of the items", "max": "the largest item", "min": "the smallest item",
    "any": "a check that at least one item is true", "all": "a check that every item is true",
    "set": "the distinct items (duplicates dropped, order not kept)",
    "list": "all the items as a list (duplicates and order kept)",
    "int": "truncation to a whole number", "round": "rounding to the nearest whole number",
    "float": "conversion to a floating-point number", "floor": "rounding down", "ceil": "rounding up",
    "upper": "conversion to upper case", "lower": "conversion to lower case",
    "isupper": "a check for upper-case letters", "islower": "a check for lower-case letters",
    "startswith": "a check of how the text starts", "endswith": "a check of how the text ends",
    "find": "the position of the first occurrence", "rfind": "the position of the last occurrence",
    "lstrip": "removal of characters at the start", "rstrip": "removal of characters at the end",
    "strip": "removal of characters at both ends", "isdigit": "a check for digits",
    "isalpha": "a check for letters", "capitalize": "capitalising only the first letter",
    "title": "capitalising every word", "extend": "adding the items one by one",
    "append": "adding the whole value as one item",
}  # fmt: skip
STAGE_WORDS = {
    "sorted": "the sorting", "reversed": "the reversal", "set": "the removal of duplicates",
    "abs": "taking the absolute value", "list": "the conversion to a list",
    "tuple": "the conversion to a tuple", "str": "the conversion to text",
    "strip": "the removal of surrounding whitespace", "lstrip": "the removal of leading whitespace",
    "rstrip": "the removal of trailing whitespace", "lower": "the conversion to lower case",
    "upper": "the conversion to upper case",
}  # fmt: skip


class NotRewritable(ValueError):
    """A task the rule-based rewriter cannot work on (why in the message)."""


@dataclass(frozen=True)
class Edit:
    """One candidate change of the program: replace program[start:end] by `text`."""

    logic_type: str
    start: int
    end: int
    text: str
    sentence: str  # the new behaviour in prose, for the new prompt (no code of either solution)


@dataclass
class Rewrite:
    """The rewriting of one task: the accepted rewrite (or None) and every rejection."""

    task_id: str
    task: Task | None = None
    logic_type: str | None = None
    change: str = ""
    tried: dict[str, int] = field(default_factory=dict)  # candidates validated per type
    accepted: dict[str, int] = field(default_factory=dict)  # of those, how many passed the checks
    rejections: list[dict[str, str]] = field(default_factory=list)  # {"type", "reason", "detail"}
    judge: dict[str, Any] = field(default_factory=dict)  # the LLM judge's verdict (mri_sets.judge_rewrites)

    def reject(self, logic_type: str, reason: str, detail: str) -> None:
        self.rejections.append({"type": logic_type, "reason": reason, "detail": detail})

    def accept(self, task: Task, logic_type: str, change: str) -> None:
        """Count an accepted candidate; the first becomes the rewrite."""
        self.accepted[logic_type] = self.accepted.get(logic_type, 0) + 1
        if self.task is None:
            self.task, self.logic_type, self.change = task, logic_type, change


# --------------------------------------------------------------------------- source positions


class _Source:
    """The program, where its solution starts, and byte offsets of AST nodes (col_offset counts bytes)."""

    def __init__(self, program: str, solution_start: int) -> None:
        self.text = program
        self.data = program.encode("utf-8")
        self.solution_start = len(program[:solution_start].encode("utf-8"))
        self.line_starts = [0]
        for line in self.data.splitlines(keepends=True):
            self.line_starts.append(self.line_starts[-1] + len(line))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.line_starts[node.lineno - 1] + node.col_offset,
            self.line_starts[node.end_lineno - 1] + node.end_col_offset,
        )

    def segment(self, start: int, end: int) -> str:
        return self.data[start:end].decode("utf-8")

    def of(self, node: ast.AST) -> str:
        return self.segment(*self.span(node))

    def in_solution(self, node: ast.AST) -> bool:
        return hasattr(node, "lineno") and self.span(node)[0] >= self.solution_start


def _replace(src: _Source, logic_type: str, node: ast.AST, new_node: ast.AST, sentence: str) -> Edit:
    """The edit that puts `new_node`'s code in `node`'s place, in parentheses where an operator could bind."""
    text = ast.unparse(new_node)
    if isinstance(new_node, (ast.BinOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.UnaryOp, ast.Lambda)):
        text = f"({text})"
    return Edit(logic_type, *src.span(node), text, sentence)


def _token_edit(src: _Source, logic_type: str, left, right, old: str, new: str, sentence: str):
    """The edit (none when not found) that replaces the operator token `old` between nodes `left` and `right`."""
    lo, hi = src.span(left)[1], src.span(right)[0]
    found = re.search(rf"(?<![\w=<>!]){re.escape(old)}(?![\w=<>])", src.segment(lo, hi))
    if found is not None:
        yield Edit(logic_type, lo + found.start(), lo + found.end(), new, sentence)


def entry_function(tree: ast.AST, name: str | None) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The definition of the function `name` in `tree` (the first met), or None."""
    functions = (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return next((n for n in functions if n.name == name), None)


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name):
            return node.func.id
        if isinstance(node.func, ast.Attribute):
            return node.func.attr
    return None


# --------------------------------------------------------------------------- the operators


def _swap_calls(src: _Source, node: ast.Call, logic_type: str, functions: dict, methods: dict):
    name, swaps = _call_name(node), functions if isinstance(node.func, ast.Name) else methods
    if name in swaps:
        new = copy.deepcopy(node)
        if isinstance(node.func, ast.Name):
            new.func.id = swaps[name]
        else:
            new.func.attr = swaps[name]
        words = COMPONENT_WORDS[swaps[name]], COMPONENT_WORDS[name]
        sentence = f"In one step this version uses {words[0]} where the task above uses {words[1]}."
        yield _replace(src, logic_type, node, new, sentence)


def _component_swap(src: _Source, node: ast.AST, ctx: dict):
    if isinstance(node, ast.Call):
        # math.floor is a function spelt as an attribute: only its sibling swaps
        owner = getattr(node.func, "value", None)
        methods = MATH_FUNCTIONS if isinstance(owner, ast.Name) and owner.id == "math" else COMPONENT_METHODS
        yield from _swap_calls(src, node, "component_swap", COMPONENT_FUNCTIONS, methods)


def _constraint_change(src: _Source, node: ast.AST, ctx: dict):
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in BOUNDS:
        op = type(node.ops[0])
        words = (BOUND_WORDS[op], BOUND_WORDS[BOUNDS[op]])
        sentence = f"One comparison is changed: where the task above asks for {words[0]}, this version asks for {words[1]}."
        new = SYMBOLS[BOUNDS[op]]
        yield from _token_edit(
            src, "constraint_change", node.left, node.comparators[0], SYMBOLS[op], new, sentence
        )
    if _call_name(node) == "range" and isinstance(node.func, ast.Name) and not node.keywords:
        args = list(node.args)
        if len(args) in (1, 2):
            start = args[0] if len(args) == 2 else ast.Constant(0)
            stop = args[-1]
            shifted = ast.BinOp(start, ast.Add(), ast.Constant(1))
            if isinstance(start, ast.Constant) and isinstance(start.value, int):
                shifted = ast.Constant(start.value + 1)
            later = "One loop starts one value later than in the task above: its first value is skipped."
            every_second = "One loop visits only every second value of its range."
            yield _replace(src, "constraint_change", node, ast.Call(node.func, [shifted, stop], []), later)
            new = ast.Call(node.func, [start, stop, ast.Constant(2)], [])
            yield _replace(src, "constraint_change", node, new, every_second)


def _logic_reversal(src: _Source, node: ast.AST, ctx: dict):
    if isinstance(node, ast.Call):
        yield from _swap_calls(src, node, "logic_reversal", REVERSED_FUNCTIONS, {})
        if _call_name(node) in ("sorted", "sort"):
            new = copy.deepcopy(node)
            flag = next((k for k in new.keywords if k.arg == "reverse"), None)
            sentence = (
                "One sorting step puts the items in the opposite order to the task above."
                if flag
                else "One sorting step puts the items in descending order instead of ascending order."
            )
            if flag is None:
                new.keywords.append(ast.keyword("reverse", ast.Constant(True)))
            elif isinstance(flag.value, ast.Constant) and isinstance(flag.value.value, bool):
                flag.value = ast.Constant(not flag.value.value)
            else:
                flag.value = ast.UnaryOp(ast.Not(), flag.value)
            yield _replace(src, "logic_reversal", node, new, sentence)
    # not `while`: a negated loop condition mostly never stops, no meaningful rewrite
    if isinstance(node, (ast.If, ast.IfExp)) and src.in_solution(node.test):
        test = node.test
        start, end = src.span(test)
        old = src.of(test)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            text = src.of(test.operand)
            text = f"({text})" if isinstance(test.operand, (ast.BoolOp, ast.IfExp, ast.Lambda)) else text
        else:
            text = f"not ({old})" if isinstance(node, ast.If) else f"(not ({old}))"
        sentence = (
            "One condition is reversed: the step it guards is taken exactly when the task above would skip it."
            if isinstance(node, ast.If)
            else "One choice between two values is reversed: each value is picked exactly when the task above picks the other."
        )
        yield Edit("logic_reversal", start, end, text, sentence)


def _operator_change(src: _Source, node: ast.AST, ctx: dict):
    if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in ARITHMETIC:
        op, new_op = type(node.op), ARITHMETIC[type(node.op)]
        sentence = f"In one step this version uses {ARITHMETIC_WORDS[new_op]} where the task above uses {ARITHMETIC_WORDS[op]}."
        if isinstance(node, ast.BinOp):
            left, right, old, new = node.left, node.right, SYMBOLS[op], SYMBOLS[new_op]
        else:  # `x += y`: the token is the operator with its `=`
            left, right, old, new = node.target, node.value, SYMBOLS[op] + "=", SYMBOLS[new_op] + "="
        yield from _token_edit(src, "operator_change", left, right, old, new, sentence)
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in EQUALITY:
        op, new_op = type(node.ops[0]), EQUALITY[type(node.ops[0])]
        sentence = (
            f"In one test this version {EQUALITY_WORDS[new_op]} where the task above {EQUALITY_WORDS[op]}."
        )
        old, new = SYMBOLS[op], SYMBOLS[new_op]
        yield from _token_edit(src, "operator_change", node.left, node.comparators[0], old, new, sentence)
    elif isinstance(node, ast.BoolOp) and len(node.values) == 2:
        old = SYMBOLS[type(node.op)]
        new = "or" if old == "and" else "and"
        sentence = (
            "One combined condition holds when either of its two parts holds, where the task above needs both."
            if new == "or"
            else "One combined condition needs both of its two parts to hold, where the task above needs either."
        )
        yield from _token_edit(src, "operator_change", node.values[0], node.values[1], old, new, sentence)


def _simple(stmt: ast.stmt) -> bool:
    return isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)) and not (
        isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
    )


def _operation_order_swap(src: _Source, node: ast.AST, ctx: dict):
    for name in ("body", "orelse"):
        stmts = getattr(node, name, None)
        if not isinstance(stmts, list):
            continue
        for a, b in zip(stmts, stmts[1:]):
            if _simple(a) and _simple(b) and src.in_solution(a) and a.lineno != b.lineno:
                (a0, a1), (b0, b1) = src.span(a), src.span(b)
                first, second = src.segment(a0, a1), src.segment(b0, b1)
                if "\n" in first or "\n" in second:
                    continue
                text = second + src.segment(a1, b0) + first
                sentence = "Two consecutive steps of the task above are carried out in the opposite order."
                yield Edit("operation_order_swap", a0, b1, text, sentence)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1:
        inner = node.args[0]
        if (
            not node.keywords
            and isinstance(inner, ast.Call)
            and isinstance(inner.func, ast.Name)
            and len(inner.args) == 1
            and not inner.keywords
            and inner.func.id != node.func.id
        ):
            new = ast.Call(inner.func, [ast.Call(node.func, [inner.args[0]], [])], [])
            sentence = "Two operations that the task above applies one after the other are applied in the opposite order."
            yield _replace(src, "operation_order_swap", node, new, sentence)


def _constant_swap(src: _Source, node: ast.AST, ctx: dict):
    if not isinstance(node, ast.Constant) or id(node) in ctx["docstrings"]:
        return
    value = node.value
    if isinstance(value, bool):
        new: Any = not value
        sentence = f"One fixed yes/no setting is {str(new).lower()} instead of {str(value).lower()}."
    elif isinstance(value, (int, float)):
        new = value + 1 if isinstance(value, int) else (value * 2 if value else 1.0)
        sentence = f"One fixed number used in the computation is {new} instead of {value}."
    elif isinstance(value, str) and value and value.swapcase() != value and len(value) <= 40:
        new = value.swapcase()
        sentence = "One fixed piece of text used in the computation has the case of its letters swapped (upper case becomes lower case and lower case becomes upper case)."
    else:
        return
    yield _replace(src, "constant_swap", node, ast.Constant(new), sentence)


def _data_transformation(src: _Source, node: ast.AST, ctx: dict):
    if node is not ctx["entry"] or not ctx["first_input"]:
        return
    body = [s for s in node.body if src.in_solution(s)]
    if not body:
        return
    first = body[0]
    start = src.line_starts[first.lineno - 1]
    indent = " " * first.col_offset
    params = [a.arg for a in node.args.args]
    for name, value in zip(params, ctx["first_input"]):
        if isinstance(value, bool):
            continue
        reverse = (f"{name}[::-1]", "reversed")
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float)) for v in value):
            transforms = [(f"sorted({name})", "sorted in ascending order"), reverse]
        elif isinstance(value, (list, tuple, str)):
            transforms = [reverse]
            if isinstance(value, str):
                case = ("lower", "lower case") if value != value.lower() else ("upper", "upper case")
                transforms.append((f"{name}.{case[0]}()", f"converted to {case[1]}"))
        elif isinstance(value, (int, float)):
            transforms = [(f"abs({name})", "replaced by its absolute value")]
        else:
            continue
        for expr, what in transforms:
            line = f"{indent}{name} = {expr}\n"
            sentence = (
                f"Before anything else, the argument {name} is {what}, and the result is computed from that."
            )
            yield Edit("data_transformation", start, start, line, sentence)


def _workflow_modification(src: _Source, node: ast.AST, ctx: dict):
    if isinstance(node, ast.Call) and not node.keywords:
        name, kept = _call_name(node), None  # kept: what the call is applied to, left without it
        if isinstance(node.func, ast.Name) and name in DROPPABLE_STAGES and len(node.args) == 1:
            kept = node.args[0]
        elif isinstance(node.func, ast.Attribute) and name in DROPPABLE_METHODS and not node.args:
            kept = node.func.value
        if kept is not None:
            sentence = f"One step of the task above is left out: {STAGE_WORDS[name]} is not done."
            yield _replace(src, "workflow_modification", node, kept, sentence)
    output = ctx["first_output"]
    if isinstance(node, ast.Return) and node.value is not None and ctx["has_output"]:
        if isinstance(node.value, ast.Constant) and node.value.value is None:
            return
        value = node.value
        if isinstance(output, (list, tuple, str)) and not isinstance(output, bool):
            new: ast.expr = ast.Subscript(value, ast.Slice(None, None, ast.Constant(-1)), ast.Load())
            what = "reversed (last item first)"
        elif isinstance(output, int) and not isinstance(output, bool):
            new = ast.BinOp(value, ast.Mult(), ast.Constant(2))
            what = "doubled"
        else:
            return
        sentence = f"One more step comes last: the value the description above asks for is {what} before it is returned."
        yield _replace(src, "workflow_modification", value, new, sentence)


OPERATORS = {
    "component_swap": _component_swap,
    "data_transformation": _data_transformation,
    "constraint_change": _constraint_change,
    "logic_reversal": _logic_reversal,
    "operator_change": _operator_change,
    "operation_order_swap": _operation_order_swap,
    "constant_swap": _constant_swap,
    "workflow_modification": _workflow_modification,
}
LOGIC_TYPES = tuple(OPERATORS)  # the eight logic-change types of App. G, in a fixed order


# --------------------------------------------------------------------------- candidates


def candidate_edits(
    task: Task, rng: random.Random, first_input: Sequence | None = None, first_output: Any = None,
    has_output: bool = False,
) -> dict[str, list[Edit]]:  # fmt: skip
    """Every edit each operator can make in the task's solution, per type, shuffled by `rng`; the data
    transformation and the added workflow stage choose by one test input and the original's output on it."""
    src = _Source(task.program(), len(task.prompt) if task.prompt_is_code else 0)
    try:
        tree = ast.parse(src.text)
    except (SyntaxError, ValueError) as err:
        raise NotRewritable(f"the canonical program does not parse: {err}") from err
    entry = entry_function(tree, task.entry_point)
    ctx = {
        "docstrings": {id(first.value) for first in filter(None, map(docstring_statement, ast.walk(tree)))},
        "entry": entry,
        "first_input": list(first_input or []),
        "first_output": first_output,
        "has_output": has_output,
    }
    out: dict[str, list[Edit]] = {t: [] for t in LOGIC_TYPES}
    seen: set[tuple[int, int, str]] = set()
    for node in ast.walk(tree):
        if not (src.in_solution(node) or node is entry):
            continue
        for logic_type, operator in OPERATORS.items():
            for edit in operator(src, node, ctx):
                key = (edit.start, edit.end, edit.text)
                if key in seen or src.segment(edit.start, edit.end) == edit.text:
                    continue
                seen.add(key)
                out[logic_type].append(edit)
    for edits in out.values():
        rng.shuffle(edits)
    return out


def edited_task(task: Task, edit: Edit) -> tuple[str, str]:
    """(new program, new solution) of `task` after `edit`."""
    data = task.program().encode("utf-8")
    new_program = (data[: edit.start] + edit.text.encode("utf-8") + data[edit.end :]).decode("utf-8")
    if task.prompt_is_code:
        if not new_program.startswith(task.prompt):
            raise NotRewritable("the edit reached into the prompt")
        return new_program, new_program[len(task.prompt) :]
    return new_program, new_program


# --------------------------------------------------------------------------- test inputs


def call_inputs(task: Task) -> list[list]:
    """The argument lists the task's tests call its entry point with: the "call" cases' inputs, or the
    literal arguments of every `candidate(...)` in a HumanEval-style `check`. Raises NotRewritable."""
    # examples.py (and the renaming it loads) only when rewriting runs: the recipe loads this module.
    from leaklab.perturb.examples import literal

    if task.test_type == "call":
        inputs = [list(c["input"]) for c in task.test_cases]
    elif task.test_type == "function":
        try:
            tree = ast.parse(task.tests)
        except (SyntaxError, ValueError) as err:
            raise NotRewritable(f"the tests do not parse: {err}") from err
        inputs, seen = [], set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "candidate":
                read = [literal(a) for a in node.args]  # a starred argument is no literal
                args = [value for _, value in read]
                if not node.keywords and all(ok for ok, _ in read) and repr(args) not in seen:
                    seen.add(repr(args))
                    inputs.append(args)
        # ast.walk is breadth first; keep the source order of the asserts
        inputs.sort(key=lambda a: task.tests.find(repr(a)[1:-1]) if repr(a)[1:-1] in task.tests else 0)
    else:
        raise NotRewritable(f"{task.test_type} tests: no call inputs to recompute outputs on")
    if not task.entry_point:
        raise NotRewritable("the task names no entry point")
    if not inputs:
        raise NotRewritable("the tests call the entry point with no literal inputs")
    return inputs[:MAX_TEST_INPUTS]


# --------------------------------------------------------------------------- the new prompt


def _docstring_span(task: Task) -> tuple[int, int] | None:
    """Character span of the entry point's docstring in the prompt (quotes included), else of a prompt
    that is one module docstring (MBPP+'s: a sentence put after it would not parse as a program)."""
    try:
        tree = ast.parse(task.prompt)
    except (SyntaxError, ValueError):
        return None
    entry = entry_function(tree, task.entry_point)
    # The entry point's first constant statement (HumanEval/115 puts an import before its docstring).
    body = entry.body if entry else []
    first = next((s for s in body if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)), None)
    if first is None or not isinstance(first.value.value, str):
        first = docstring_statement(tree)
    if first is None or not isinstance(first.value.value, str):
        return None
    src = _Source(task.prompt, 0)
    lo, hi = src.span(first.value)
    return len(src.data[:lo].decode()), len(src.data[:hi].decode())


_EXAMPLE_START = re.compile(
    r"^[ \t]*(>>>|Example|For example|Examples|e\.g\.|Input:|assert |[\w]+\(.*\)\s*(==>|=>|➞|->))", re.M
)


# Characters that make a piece of code read as code rather than as a word or a number.
_CODE_MARKS = set("()[]{}=+-*/%<>!&|^~'\"")


def _squeeze(text: str) -> str:
    return "".join(text.split())


@functools.lru_cache(maxsize=256)
def code_fragments(program: str) -> frozenset[str]:
    """Every one-line expression and statement of `program`, whitespace removed, that reads as code (an
    operator, a bracket or a quote in it, at least 3 characters); literals are values, not code."""
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        try:  # a function body on its own (the solution of a prompt that is code)
            program = textwrap.dedent(program)
            tree = ast.parse(program)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return frozenset()
    src = _Source(program, 0)
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.expr, ast.stmt)) or isinstance(node, ast.Constant):
            continue
        if node.lineno != node.end_lineno:
            continue  # a fragment spread over lines is no phrase a prompt could hold
        text = _squeeze(src.of(node))
        if len(text) < 3 or not _CODE_MARKS & set(text):
            continue
        try:
            float(text)
        except ValueError:
            out.add(text)
    return frozenset(out)


def prose_of(prompt: str, entry_point: str | None) -> str:
    """The prompt without its signature and examples: lines that call or define the entry point, doctest
    lines and the output line under each, and Input:/Output: lines."""
    out, after_doctest = [], False
    for line in prompt.splitlines():
        stripped = line.strip()
        example = (
            stripped.startswith(">>>")
            or (entry_point and f"{entry_point}(" in line)
            or stripped.startswith(("Input:", "Output:"))
        )
        if example or after_doctest:
            after_doctest = stripped.startswith(">>>")
            continue
        out.append(line)
    return "\n".join(out)


def quoted_code(
    new_prompt: str, programs: Sequence[str], entry_point: str | None, old_prompt: str = ""
) -> list[str]:
    """The code fragments of `programs` (`code_fragments`) and the `backticked` spans that the prose of
    `new_prompt` shows and the prose of `old_prompt` (the task rewritten) did not; empty when none."""
    new, old = prose_of(new_prompt, entry_point), prose_of(old_prompt, entry_point)
    new_squeezed, old_squeezed = _squeeze(new), _squeeze(old)
    found = set()
    for program in programs:
        found |= {f for f in code_fragments(program) if f in new_squeezed and f not in old_squeezed}
    old_ticks = set(re.findall(r"`[^`\n]+`", old))
    found |= {t for t in re.findall(r"`[^`\n]+`", new) if t not in old_ticks}
    return sorted(found)


def state_change(prompt: str, span: tuple[int, int] | None, sentence: str) -> str:
    """The prompt with `sentence` put into the docstring, before its examples (or at its end); a prose
    prompt (no docstring) gets it as a last paragraph."""
    sentence = sentence.replace("\\", "\\\\").replace('"""', "'''")
    if span is None:
        return prompt.rstrip("\n") + "\n\n" + sentence + "\n"
    lo, hi = span
    doc = prompt[lo:hi]
    body_start = lo + 3 if doc[:3] in ('"""', "'''") else lo + 1
    close = hi - (3 if doc[-3:] in ('"""', "'''") else 1)
    inside = prompt[body_start:close]
    line_start = prompt.rfind("\n", 0, lo) + 1
    indent = re.match(r"[ \t]*", prompt[line_start:]).group()
    example = _EXAMPLE_START.search(inside)
    if example:
        at = body_start + example.start()
        return prompt[:at] + f"{indent}{sentence}\n" + prompt[at:]
    if inside.endswith("\n" + indent) or inside.endswith("\n"):
        at = close - (len(inside) - len(inside.rstrip(" \t")))
        return prompt[:at] + f"{indent}{sentence}\n" + prompt[at:]
    return prompt[:close] + f"\n{indent}{sentence}\n{indent}" + prompt[close:]


def entry_params(program: str, entry_point: str | None) -> list[str] | None:
    """The entry point's positional parameter names; None when the program does not parse or lacks it."""
    try:
        entry = entry_function(ast.parse(program), entry_point)
    except (SyntaxError, ValueError):
        return None
    return None if entry is None else [a.arg for a in entry.args.args]


def probe_inputs(task: Task, prompt: str) -> tuple[list[list], list, list[list]]:
    """(the tests' call inputs, the examples of calls that `prompt` (the task's, or its rewrite's) shows,
    MBPP+'s asserts included, and both inputs together: what a program is run on). Raises NotRewritable."""
    from leaklab.perturb.examples import find_examples

    inputs = call_inputs(task)
    params = entry_params(task.program(), task.entry_point)
    found = find_examples(dataclasses.replace(task, prompt=prompt), params, asserts=True)
    examples = [ex for ex in found if ex.kind == "call"]
    return inputs, examples, inputs + [list(ex.args) for ex in examples]


def with_outputs(task: Task, prompt: str, examples: list, outputs: list) -> str:
    """`prompt` (the task's, or its rewrite's) with each of its `examples` showing the rewrite's output."""
    from leaklab.perturb.examples import replace_examples

    base = dataclasses.replace(task, prompt=prompt)
    return replace_examples(base, examples, [ex.args for ex in examples], outputs)[0].prompt


def rewritten_task(
    task: Task, prompt: str, solution: str, inputs: list[list], outputs: list, logic_type: str, change: str
) -> Task:
    """The rewritten Task: its new prompt and solution, "call" tests of the original inputs' new outputs."""
    return dataclasses.replace(
        task,
        task_id=f"{task.task_id}/rewrite",
        prompt=prompt,
        solution=solution,
        tests="",
        test_type="call",
        test_cases=tuple({"input": i, "output": o} for i, o in zip(inputs, outputs)),
        compare=task.compare if task.compare in ("exact", "set", "apps") else "exact",
        metadata={**task.metadata, "rewrite_of": task.task_id, "logic_type": logic_type, "change": change},
    )


# --------------------------------------------------------------------------- validation in the sandbox


def _outcome(result, n: int) -> tuple[list | None, str]:
    """(values, "") when every call returned, else (None, why)."""
    calls = result.calls or []
    if len(calls) < n:
        return None, result.reason or result.verdict
    bad = next((c for c in calls[:n] if not c.ok), None)
    if bad is not None:
        return None, bad.error or "error"
    return [c.value for c in calls[:n]], ""


def check_candidate(task: Task, inputs: list[list], original: list, result, n_probe: int):
    """(values, None) for a candidate that ran cleanly on all `n_probe` inputs and differs from the
    original on at least one test input (the first len(inputs)); else (None, {"reason", "detail"})."""
    values, why = _outcome(result, n_probe)
    if values is None:
        reason = "timeout" if "time" in why.lower() else "crashes"
        return None, {"reason": reason, "detail": why[:200]}
    n = len(inputs)
    if all(
        outputs_match(v, o, task.compare, task.atol, a) for v, o, a in zip(values[:n], original[:n], inputs)
    ):
        return None, {"reason": "equivalent", "detail": "same output as the original on every test input"}
    return values, None


def rewrite_tasks(
    tasks: Sequence[Task],
    sandbox,
    *,
    seed: int = 0,
    per_type: int = 2,
    timeout_s: float = 5.0,
) -> list[Rewrite]:
    """One validated rewrite per task (or None with the reasons), in the order of `tasks`: the first of
    up to `per_type` candidates per type that passes (docs/perturbations.md#mri-rewriting)."""
    results = [Rewrite(t.task_id) for t in tasks]
    plans, jobs = _original_jobs(tasks, sandbox, seed, timeout_s, results)
    original_results = sandbox.run_jobs(jobs)
    jobs = []
    for task, plan, result in zip(tasks, plans, results):
        if plan is not None:
            outcome = original_results[plan["original"]]
            _candidate_jobs(task, plan, outcome, result, jobs, seed, per_type, timeout_s)
    candidate_results = sandbox.run_jobs(jobs)
    for task, plan, result in zip(tasks, plans, results):
        if plan is not None:
            _accept_first(task, plan, candidate_results, result)
    return results


def _original_jobs(tasks: Sequence[Task], sandbox, seed: int, timeout_s: float, results: list[Rewrite]):
    """(per task its plan or None, the sandbox jobs running each original on its test inputs and examples).
    Synthetic tasks are rewritten here, by their family's own rewrite."""
    plans: list[dict | None] = [None] * len(tasks)
    jobs: list = []
    for i, task in enumerate(tasks):
        rng = random.Random(f"rewrite:{seed}:{task.task_id}")
        if task.benchmark == SYNTHETIC and "family" in task.metadata:
            _synthetic(task, rng, sandbox, results[i])
            continue
        try:
            inputs, examples, probe = probe_inputs(task, task.prompt)
        except NotRewritable as err:
            results[i].reject("any", "not_rewritable", str(err))
            continue
        plans[i] = {"inputs": inputs, "examples": examples, "probe": probe, "original": len(jobs)}
        jobs.append(FunctionCalls(task.program(), task.entry_point or "", probe, timeout_s))
    return plans, jobs


def _candidate_jobs(task: Task, plan: dict, outcome, result: Rewrite, jobs: list, seed: int, per_type: int,
                    timeout_s: float) -> None:  # fmt: skip
    """Append to `jobs` and plan["candidates"] up to `per_type` candidates of every type, in an order drawn
    for the task; none (the reason in `result`) when the original fails or nothing can be edited."""
    plan["candidates"] = []
    original, why = _outcome(outcome, len(plan["probe"]))
    if original is None:
        result.reject("any", "original_fails", f"the canonical solution fails: {why}")
        return
    plan["original_values"] = original
    rng = random.Random(f"rewrite-sites:{seed}:{task.task_id}")
    try:
        sites = candidate_edits(task, rng, plan["inputs"][0], original[0], True)
    except NotRewritable as err:
        result.reject("any", "not_rewritable", str(err))
        return
    for _, edit, program, solution in parsed_edits(task, sites, rng, per_type, result):
        plan["candidates"].append((edit, solution, len(jobs)))
        jobs.append(FunctionCalls(program, task.entry_point or "", plan["probe"], timeout_s))


def parsed_edits(
    task: Task, sites: dict[str, list[Edit]], rng: random.Random, per_type: int, result: Rewrite
):
    """(logic type, edit, program, solution) for up to `per_type` edits of every type, the types in an
    order drawn for the task; no site and no parse are recorded in `result` as rejections."""
    order = list(LOGIC_TYPES)
    rng.shuffle(order)
    for logic_type in order:
        if not sites[logic_type]:
            result.reject(logic_type, "no_site", "no place in the solution to apply it")
        for edit in sites[logic_type][:per_type]:
            try:
                program, solution = edited_task(task, edit)
                ast.parse(program)
            except (NotRewritable, SyntaxError, ValueError) as err:
                result.reject(logic_type, "syntax", str(err)[:200])
                continue
            yield logic_type, edit, program, solution


def _accept_first(task: Task, plan: dict, candidate_results: list, result: Rewrite) -> None:
    """Check every candidate's outputs; the first that passes becomes the rewrite, all are counted."""
    n = len(plan["inputs"])
    for edit, solution, j in plan["candidates"]:
        kind = edit.logic_type
        result.tried[kind] = result.tried.get(kind, 0) + 1
        original = plan["original_values"]
        values, rejection = check_candidate(
            task, plan["inputs"], original, candidate_results[j], len(plan["probe"])
        )
        if rejection is not None:
            result.reject(kind, **rejection)
            continue
        prompt = with_outputs(task, task.prompt, plan["examples"], values[n:])
        span = _docstring_span(dataclasses.replace(task, prompt=prompt)) if task.prompt_is_code else None
        prompt = state_change(prompt, span, edit.sentence)
        new = rewritten_task(task, prompt, solution, plan["inputs"], values[:n], kind, edit.sentence)
        result.accept(new, kind, edit.sentence)


def _synthetic(task: Task, rng: random.Random, sandbox, out: Rewrite) -> None:
    try:
        new = synthetic_rewrite(task, rng, sandbox)
    except (ValueError, RuntimeError) as err:
        out.reject("any", "not_rewritable", str(err)[:200])
        return
    kind = "operator_change" if new.metadata.get("changed") == "op" else "constant_swap"
    out.tried[kind] = 1
    change = f"family {task.metadata['family']}: {new.metadata.get('changed')} drawn anew"
    out.accept(dataclasses.replace(new, metadata={**new.metadata, "logic_type": kind}), kind, change)
