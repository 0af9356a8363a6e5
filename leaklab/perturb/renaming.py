"""Renaming (tau_f, tau_v): apply a name mapping to a task's program, prompt, tests and entry point by
editing the source text at the identifiers' token positions (docs/perturbations.md#srdetection-variants);
`propose_renames` picks the new names from the vocabulary."""

from __future__ import annotations

import dataclasses
import keyword
import random
import re
from collections.abc import Mapping

from leaklab.data.tasks import Task
from leaklab.perturb.identifiers import RESERVED, NotRenamable, ParsedCode, TaskCode, analyse_task
from leaklab.perturb.vocabulary import candidates, context_words

# Words that are also English function words: in prose ("a list of numbers") they are not identifiers.
PROSE_SKIP = frozenset({"a", "A", "I"})


# --------------------------------------------------------------------------- renaming the text


_CODE_CONTEXT = re.compile(r"\s*(?:[(\[]|=(?!=))")


def _code_spans(text: str) -> list[tuple[int, int]]:
    """Stretches of prose that are code: doctest / `def` / `class` lines and call expressions
    `name(...)` (to the matching parenthesis on the same line)."""
    spans = [line.span() for line in re.finditer(r"^[ \t]*(?:>>>|def |class ).*$", text, re.M)]
    for call in re.finditer(r"\b\w+\(", text):
        depth, i = 0, call.end() - 1
        while i < len(text) and text[i] != "\n":
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            if depth == 0:
                spans.append((call.start(), i + 1))
                break
            i += 1
    return spans


def _prose_edits(text: str, base: int, renames: Mapping[str, str]) -> list[tuple[int, int, str]]:
    """Renames of words in docstrings, comments or a statement that refer to a renamed identifier; one that
    is also a plain word only where used as code. See docs/perturbations.md#srdetection-variants."""
    edits = []
    code = None
    for old, new in renames.items():
        if old in PROSE_SKIP:
            continue
        # `lst1`, `has_close_elements`, `minPath`, `k`: in prose these can only mean the identifier
        plain = not (len(old) == 1 or "_" in old or any(c.isdigit() or c.isupper() for c in old[1:]))
        # A whole word: not part of a longer identifier, not an attribute (`.x`), not a contraction
        # (`it's`), not an escape sequence (`\n`), not an abbreviation (`e.g.`).
        for match in re.finditer(rf"(?<![\w'.\\]){re.escape(old)}(?![\w']|\.\w)", text):
            if plain:
                code = _code_spans(text) if code is None else code
                in_code = any(lo <= match.start() < hi for lo, hi in code)
                if not (in_code or _CODE_CONTEXT.match(text, match.end())):
                    continue
            edits.append((base + match.start(), base + match.end(), new))
    return edits


def apply_edits(text: str, edits: list[tuple[int, int, str]]) -> str:
    out, pos = [], 0
    for start, end, new in sorted(edits):
        if start < pos:
            raise NotRenamable("overlapping edits")  # cannot happen for disjoint tokens; guards bugs
        out.append(text[pos:start])
        out.append(new)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _code_edits(
    code: ParsedCode,
    renames: Mapping[str, str],
    prose_renames: Mapping[str, str],
    functions: set[str],
    free_only: bool,
) -> list[tuple[int, int, str]]:
    """Edits for one piece of code. In test code (`free_only`) only names that reach the program are
    renamed: free references, and keyword arguments of calls to the program's functions."""
    edits = []
    for tok in code.tokens:
        new = renames.get(tok.name)
        if new is None:
            continue
        if free_only:
            reaches_program = tok.role == "name" and tok.name not in code.bound
            reaches_program |= tok.role == "keyword" and tok.callee in functions | {"candidate"}
            if not reaches_program:
                continue
        elif tok.role == "keyword":
            if tok.callee not in functions:
                continue  # a keyword of outside code (`sorted(key=...)`) keeps its name
        elif tok.role not in ("name", "param", "def", "global", "except"):
            continue  # attributes
        edits.append((tok.start, tok.start + len(tok.name), new))
    for lo, hi in code.prose_spans:
        edits.extend(_prose_edits(code.source[lo:hi], lo, prose_renames))
    return edits


def rename_task(task: Task, renames: Mapping[str, str], analysis: TaskCode | None = None) -> Task:
    """The task with identifiers renamed everywhere they occur (program, prompt, tests, entry point).
    Raises NotRenamable if a requested name may not be renamed or a new name is not fresh."""
    analysis = analysis or analyse_task(task)
    renamable = set(analysis.functions) | set(analysis.variables)
    for old, new in renames.items():
        if old not in renamable:
            why = analysis.frozen.get(old, "not an identifier of this program")
            raise NotRenamable(f"{old!r} may not be renamed: {why}")
        if not new.isidentifier() or new in RESERVED or new in analysis.taken:
            raise NotRenamable(f"{new!r} is not a fresh identifier")
    if len(set(renames.values())) != len(renames):
        raise NotRenamable("two identifiers would get the same new name")

    functions = set(analysis.functions)
    prose_renames = {o: n for o, n in renames.items() if o in functions or o in analysis.parameters}
    program = analysis.program
    edits = _code_edits(program, renames, prose_renames, functions, False)
    new_source = apply_edits(program.source, edits)

    prompt, solution = task.prompt, new_source
    if analysis.prompt_in_program:
        # Split where the prompt ended: every edit inside the prompt shifted that point.
        cut = len(task.prompt)
        if any(start < cut < end for start, end, _ in edits):
            raise NotRenamable("an identifier straddles the prompt / solution boundary")
        cut += sum(len(new) - (end - start) for start, end, new in edits if end <= cut)
        prompt, solution = new_source[:cut], new_source[cut:]
    else:
        prompt = apply_edits(task.prompt, _prose_edits(task.prompt, 0, prose_renames))

    tests = task.tests
    if analysis.tests is not None:
        tests = apply_edits(tests, _code_edits(analysis.tests, renames, {}, functions, True))
    entry_point = renames.get(task.entry_point, task.entry_point)
    return dataclasses.replace(task, prompt=prompt, solution=solution, tests=tests, entry_point=entry_point)


def propose_renames(analysis: TaskCode, rng: random.Random) -> dict[str, str]:
    """One new name for every renamable identifier (tau_f and tau_v together)."""
    taken = set(analysis.taken) | RESERVED
    renames: dict[str, str] = {}
    names = analysis.functions + analysis.variables
    # New names echo the docstrings and comments about as much as the old ones did (see `echo`).
    program = analysis.program
    prose = "\n".join(program.source[lo:hi] for lo, hi in program.prose_spans)
    context = context_words(prose, skip=names)
    prefer = rng.choice(("prefix", "synonym"))
    for name in names:
        for candidate in candidates(name, name in analysis.functions, rng, context=context, prefer=prefer):
            if candidate.isidentifier() and candidate not in taken and not keyword.iskeyword(candidate):
                renames[name] = candidate
                taken.add(candidate)
                break
    return renames
