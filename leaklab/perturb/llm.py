"""LLM backend for renaming: leaklab's prompt asking a model for a renamed program, and the reading of
its answer back as a checked name mapping (the variant itself is still rendered by `renaming`)."""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Sequence

from leaklab.data.tasks import Task
from leaklab.perturb.identifiers import NotRenamable, TaskCode, program_text

LLM_PROMPT = """\
Below is a Python program between <code> and </code>.

Rewrite it with different identifier names and change nothing else:
- give every function you see defined here a new name, and use the new name at every call;
- give every parameter and local variable a new name, the same new name throughout its scope;
- keep names that come from Python or from imports (builtins, modules, attributes, keyword arguments of
  library calls) exactly as they are;
- pick names a programmer would plausibly choose for the same purpose (not var1, x_2, foo);
- keep every character of layout: indentation, blank lines, spacing, comments and docstrings.

Answer with the rewritten program only, between <code> and </code>.{avoid}

<code>
{code}
</code>
"""


def llm_prompt(task: Task, avoid: Sequence[str] = ()) -> str:
    """leaklab's own instruction for an LLM that proposes one renamed version of the program."""
    source, _ = program_text(task)
    note = "\nDo not reuse any of these names: " + ", ".join(sorted(avoid)) + "." if avoid else ""
    return LLM_PROMPT.format(code=source, avoid=note)


_LAYOUT = (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
_NOT_COMPARED = (tokenize.COMMENT, tokenize.STRING, *_LAYOUT)  # what a proposal may change freely


def _compared_tokens(source: str) -> list[tokenize.TokenInfo]:
    return [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type not in _NOT_COMPARED]


def renames_from_proposal(analysis: TaskCode, proposal: str) -> dict[str, str]:
    """Read a proposed program as a renaming of the original: token by token the two must be equal
    except identifiers (consistently mapped), comments and strings. Raises NotRenamable otherwise."""
    match = re.search(r"<code>\n?(.*?)</code>", proposal, re.S)
    text = match.group(1) if match else proposal
    fence = re.search(r"```(?:python)?\n(.*?)```", text, re.S)
    text = fence.group(1) if fence else text
    try:
        ours, theirs = _compared_tokens(analysis.program.source), _compared_tokens(text)
    except (tokenize.TokenError, SyntaxError) as err:
        raise NotRenamable(f"the proposal does not tokenize: {err}") from err
    if len(ours) != len(theirs):
        raise NotRenamable("the proposal changes more than identifiers")
    renames: dict[str, str] = {}
    for a, b in zip(ours, theirs):
        if a.type != b.type:
            raise NotRenamable("the proposal changes more than identifiers")
        if a.string == b.string:
            continue
        if a.type != tokenize.NAME or renames.setdefault(a.string, b.string) != b.string:
            raise NotRenamable(f"the proposal changes {a.string!r} inconsistently or outside identifiers")
    if not renames:
        raise NotRenamable("the proposal renames nothing")
    return renames
