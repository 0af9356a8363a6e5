"""Identifier analysis: parse a task's code, find every identifier token with its role and scope, and
decide which names may be renamed (`analyse_task` -> `TaskCode`) and why the others stay (a name is
renamed only if all its occurrences are ordinary variables: docs/perturbations.md#srdetection-variants).
"""

from __future__ import annotations

import ast
import bisect
import builtins
import io
import keyword
import re
import symtable
import tokenize
from dataclasses import dataclass

from leaklab.data.tasks import Task

# Never produced and never renamed. `self`/`cls` are renamable in principle but renaming them makes
# a variant less natural than the original, the opposite of what SrDetection needs.
RESERVED = frozenset(
    {*dir(builtins), *keyword.kwlist, *keyword.softkwlist, "self", "cls", "_", "candidate", "check"}
)
# Reaching variables through strings defeats renaming: a program using these keeps its names (eval and
# exec only on what could be code text, not `eval(input())`); attributes are never renamed.
NAME_INTROSPECTION = frozenset({"locals", "globals", "vars"})
CODE_EVALUATORS = frozenset({"eval", "exec"})
# A string literal's prefix and opening quotes: r""" ... , '...', b'...'.
_STRING_OPENING = re.compile(r"[rRuUbBfF]*('{3}|\"{3}|'|\")")


class NotRenamable(ValueError):
    """A task (or a requested rename) that leaklab.perturb cannot handle safely; the message says why."""


# --------------------------------------------------------------------------- where names sit in code


@dataclass(frozen=True)
class _Tok:
    """One identifier token: where it is and what the AST says it is."""

    name: str
    start: int  # character offset in the source
    role: str  # name | param | def | class | attribute | keyword | global | except | import | unknown
    callee: str | None = None  # keyword tokens: the called function, when it is a plain name


class Offsets:
    """Maps AST (line, UTF-8 byte column) and tokenize (line, character column) to string offsets."""

    def __init__(self, source: str):
        self.lines = source.split("\n")
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line) + 1)

    def of_token(self, row: int, col: int) -> int:
        return self.starts[row - 1] + col

    def of_node(self, row: int, byte_col: int) -> int:
        line = self.lines[row - 1]
        return self.starts[row - 1] + len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))


@dataclass
class ParsedCode:
    """One parsed piece of code (a program or a test file) and its identifier facts."""

    source: str
    tree: ast.Module
    tokens: list[_Tok]
    prose_spans: list[tuple[int, int]]  # docstrings and comments: text where words may be renamed
    bound: dict[str, str]  # identifier -> how it is bound ("module", "local", "class")
    implicit_globals: list[str]  # free names that resolve to the module or the builtins
    unsafe: dict[str, str]  # identifier -> why it must never be renamed


def _parse_code(source: str) -> ParsedCode:
    if "\r" in source.replace("\r\n", ""):
        raise NotRenamable("code uses bare carriage returns as line breaks")
    try:
        tree = ast.parse(source)
        raw = list(tokenize.generate_tokens(io.StringIO(source).readline))
        table = symtable.symtable(source, "<variant>", "exec")
    except (SyntaxError, ValueError, tokenize.TokenError) as err:
        raise NotRenamable(f"code does not parse: {type(err).__name__}: {err}") from err
    offsets = Offsets(source)
    names = [
        (t.string, offsets.of_token(*t.start))
        for t in raw
        if t.type == tokenize.NAME and not keyword.iskeyword(t.string)
    ]
    roles = _roles(tree, offsets, names)
    tokens = [_Tok(name, start, *roles.get(start, ("unknown", None))) for name, start in names]
    code = ParsedCode(source, tree, tokens, _prose_spans(tree, raw, offsets), {}, [], {})
    _scope_facts(table, code)
    located = {start for _, start in names}
    for node in ast.walk(tree):
        # A name the AST knows but tokenize does not show (inside an f-string before 3.12): freeze it.
        if isinstance(node, ast.Name) and offsets.of_node(node.lineno, node.col_offset) not in located:
            code.unsafe.setdefault(node.id, "an occurrence could not be located in the source")
    for tok in tokens:
        if tok.role == "unknown":
            code.unsafe.setdefault(tok.name, "an occurrence has a role this module does not handle")
        elif tok.role == "import":
            code.unsafe.setdefault(tok.name, "imported name")
        elif tok.role == "class":
            code.unsafe.setdefault(tok.name, "class name (a harness may create it by name)")
    return code


def _roles(
    tree: ast.Module, offsets: Offsets, names: list[tuple[str, int]]
) -> dict[int, tuple[str, str | None]]:
    """Role of each identifier token, keyed by its start offset."""
    roles: dict[int, tuple[str, str | None]] = {}
    starts = [start for _, start in names]

    def names_in(node: ast.AST) -> list[tuple[str, int]]:
        lo = offsets.of_node(node.lineno, node.col_offset)
        hi = offsets.of_node(node.end_lineno, node.end_col_offset)
        return [(n, s) for n, s in names if lo <= s < hi]

    def first_after(node: ast.AST, name: str) -> int | None:
        lo = offsets.of_node(node.lineno, node.col_offset)
        for i in range(bisect.bisect_left(starts, lo), len(names)):
            if names[i][0] == name:
                return names[i][1]
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            roles[offsets.of_node(node.lineno, node.col_offset)] = ("name", None)
        elif isinstance(node, ast.arg):
            roles[offsets.of_node(node.lineno, node.col_offset)] = ("param", None)
        elif isinstance(node, ast.Attribute):
            end = offsets.of_node(node.end_lineno, node.end_col_offset)
            roles[end - len(node.attr)] = ("attribute", None)
        elif isinstance(node, ast.Call):
            callee = node.func.id if isinstance(node.func, ast.Name) else None
            for kw in node.keywords:
                if kw.arg is not None:
                    roles[offsets.of_node(kw.lineno, kw.col_offset)] = ("keyword", callee)
        elif isinstance(node, ast.ClassDef):
            for kw in node.keywords:  # class A(metaclass=M): an outside keyword
                if kw.arg is not None:
                    roles[offsets.of_node(kw.lineno, kw.col_offset)] = ("keyword", None)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for _, start in names_in(node):
                roles[start] = ("import", None)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name, start in names_in(node):
                if name in node.names:
                    roles[start] = ("global", None)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            start = first_after(node, node.name)
            if start is not None:
                roles[start] = ("except", None)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            start = first_after(node, node.name)
            if start is not None:
                roles[start] = ("class" if isinstance(node, ast.ClassDef) else "def", None)
    return roles


def docstring_statement(node: ast.AST) -> ast.Expr | None:
    """The first statement of a module, function or class when it is a constant expression (a docstring
    when the constant is a string)."""
    if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
        first = node.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            return first
    return None


def _prose_spans(tree: ast.Module, raw: list[tokenize.TokenInfo], offsets: Offsets) -> list[tuple[int, int]]:
    """Docstrings and comments: the only text outside identifiers that a rename may touch. A docstring's
    span is inside its quotes (a prefix is no word); one glued from several literals is left alone."""
    spans = []
    strings = {}
    for t in raw:
        start, end = offsets.of_token(*t.start), offsets.of_token(*t.end)
        if t.type == tokenize.COMMENT:
            spans.append((start, end))
        elif t.type == tokenize.STRING:
            strings[start] = (end, t.string)
    for first in filter(None, map(docstring_statement, ast.walk(tree))):
        start = offsets.of_node(first.lineno, first.col_offset)
        end, text = strings.get(start, (None, ""))
        whole = end == offsets.of_node(first.end_lineno, first.end_col_offset)
        opening = _STRING_OPENING.match(text)
        if isinstance(first.value.value, str) and whole and opening:
            spans.append((start + opening.end(), end - len(opening.group(1))))
    return sorted(spans)


def _scope_facts(table: symtable.SymbolTable, code: ParsedCode) -> None:
    """Walk Python's own symbol tables to learn how each identifier is bound in every scope."""
    module_bound: set[str] = set()

    def walk(t: symtable.SymbolTable) -> None:
        kind = str(getattr(t.get_type(), "value", t.get_type()))
        for sym in t.get_symbols():
            name = sym.get_name()
            if name.startswith("."):  # compiler-internal (".0" of comprehensions)
                continue
            binds = sym.is_assigned() or sym.is_namespace() or sym.is_parameter() or sym.is_imported()
            if kind == "module":
                if binds:
                    module_bound.add(name)
                    code.bound.setdefault(name, "module")
                elif sym.is_referenced():
                    code.implicit_globals.append(name)
            elif kind == "class":
                if binds:
                    code.bound[name] = "class"
                    code.unsafe.setdefault(name, "bound in a class body (reached as an attribute)")
                elif sym.is_global() and not sym.is_declared_global():
                    code.implicit_globals.append(name)
            else:
                if sym.is_local() or sym.is_parameter():
                    code.bound.setdefault(name, "local")
                elif sym.is_global() and not sym.is_declared_global():
                    code.implicit_globals.append(name)
            if sym.is_imported():
                code.unsafe.setdefault(name, "imported name")
        for child in t.get_children():
            walk(child)

    walk(table)
    for name in code.implicit_globals:
        if name not in module_bound:
            code.unsafe.setdefault(name, "refers to a builtin or a global defined elsewhere")


# --------------------------------------------------------------------------- what a task lets us rename


@dataclass
class TaskCode:
    """What may be renamed in a task and where each occurrence is."""

    program: ParsedCode
    prompt_in_program: bool  # HumanEval style: the prompt is the head of the program
    tests: ParsedCode | None  # Task.tests when the task has test code
    functions: list[str]  # renamable function names, in order of first appearance
    variables: list[str]  # renamable variables and parameters
    parameters: list[str]  # the subset of names bound as parameters (renamed in prose too)
    frozen: dict[str, str]  # identifier -> why it stays
    taken: set[str]  # every identifier seen: a new name must avoid them all


def program_text(task: Task) -> tuple[str, bool]:
    """The code that renaming works on, and whether the prompt is its head: the solution when it parses
    alone (APPS, MBPP: whole programs, prose prompts), else prompt + solution (HumanEval, BigCodeBench)."""
    try:
        ast.parse(task.solution)
        return task.solution, False
    except SyntaxError:
        return task.prompt + task.solution, True


def analyse_task(task: Task) -> TaskCode:
    """Find the renamable identifiers of a task; raises NotRenamable with the reason when none can be."""
    source, prompt_in_program = program_text(task)
    program = _parse_code(source)
    tests = _parse_code(task.tests) if task.tests.strip() else None

    frozen = dict(program.unsafe)
    used = {tok.name for tok in program.tokens}
    _refuse_introspection(program)
    for name in used:
        if name in RESERVED or (name.startswith("__") and name.endswith("__")):
            frozen.setdefault(name, "builtin, keyword or reserved name")
    if tests is not None:
        _freeze_for_tests(program, tests, frozen)
    _freeze_ambiguous_keywords(program, frozen)

    # Each list in order of first appearance.
    renamable = [tok for tok in program.tokens if tok.name in program.bound and tok.name not in frozen]
    functions = list(dict.fromkeys(tok.name for tok in renamable if tok.role == "def"))
    parameters = list(dict.fromkeys(tok.name for tok in renamable if tok.role == "param"))
    as_variables = dict.fromkeys(tok.name for tok in renamable if tok.role in ("name", "param"))
    variables = [name for name in as_variables if name not in functions]
    taken = used | ({tok.name for tok in tests.tokens} if tests else set())
    return TaskCode(program, prompt_in_program, tests, functions, variables, parameters, frozen, taken)


def _refuse_introspection(program: ParsedCode) -> None:
    for node in ast.walk(program.tree):
        if not isinstance(node, ast.Name) or node.id not in program.implicit_globals:
            continue
        if node.id in NAME_INTROSPECTION:
            raise NotRenamable(f"program uses {node.id}(), which reaches variables by their names")
    for node in ast.walk(program.tree):
        evaluates = (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CODE_EVALUATORS
        )
        # eval(input()) reads data; eval("x + 1") or exec(code) may name variables.
        if (
            evaluates
            and node.func.id in program.implicit_globals
            and not all(isinstance(a, ast.Call) for a in node.args)
        ):
            raise NotRenamable(f"program calls {node.func.id}() on text that may name its variables")


def _freeze_for_tests(program: ParsedCode, tests: ParsedCode, frozen: dict[str, str]) -> None:
    """Names the tests define or cannot be followed in stay as they are in the program too."""
    for name, how in tests.bound.items():
        if how == "module" and name in program.bound:
            frozen.setdefault(name, "the tests define the same name")
    for name in tests.implicit_globals:
        # The tests reach this program name; follow it there unless the tests also bind it somewhere.
        if name in program.bound and name in tests.bound:
            frozen.setdefault(name, "the tests use the name both as their own and as the program's")


def _freeze_ambiguous_keywords(program: ParsedCode, frozen: dict[str, str]) -> None:
    """A keyword argument p= to a call we cannot resolve (a method, a returned function) might target a
    parameter we rename; such a p stays."""
    defined = {tok.name for tok in program.tokens if tok.role == "def"}
    for tok in program.tokens:
        if tok.role == "keyword" and tok.callee is None and tok.name in program.bound:
            frozen.setdefault(tok.name, "keyword argument of a call that cannot be resolved")
        elif tok.role == "keyword" and tok.callee in defined and tok.callee in frozen:
            frozen.setdefault(tok.name, "keyword argument of a function that keeps its name")
