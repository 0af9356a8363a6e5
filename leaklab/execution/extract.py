"""The code in a model's reply: `candidate(task_prompt, reply, entry_point)` is the text that continues
the prompt into a program, or why there is none. Nothing here runs code (`compile` only parses).
See docs/sandbox.md#code-from-a-reply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# Codex-paper stop sequences: a base model's body ends where top-level code starts again.
STOP_SEQUENCES = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\nassert ")
# A reply longer than this is not worth parsing (a generation limit normally stops far earlier).
MAX_CHARS = 100_000
# Lines dropped from the end, one at a time, to recover a body cut mid-line by the generation limit.
MAX_TRIMMED_LINES = 8

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


@dataclass(frozen=True)
class Candidate:
    """The continuation of the task's prompt (`code`), or `problem` when there is none."""

    code: str | None
    problem: str | None = None  # no_code | syntax_error | too_long


def reply_text(completion: Any) -> str:
    """The text of a completion: a string, or a conversation whose last assistant turn is the reply."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content") or "")
    if isinstance(completion, (list, tuple)):
        turns = [m for m in completion if isinstance(m, dict)]
        assistant = [m for m in turns if m.get("role") == "assistant"] or turns
        return str(assistant[-1].get("content") or "") if assistant else ""
    return "" if completion is None else str(completion)


def _defines(code: str, entry_point: str | None) -> bool:
    name = re.escape(entry_point) if entry_point else r"\w+"
    return re.search(rf"^(async\s+)?def\s+{name}\s*\(", code, re.M) is not None


def _fenced_code(text: str, entry_point: str | None) -> str | None:
    """The fenced block to run: the first that defines the entry point, else the first Python-ish one."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text) if body.strip()]
    if not blocks:
        return None
    for _, body in blocks:
        if _defines(body, entry_point):
            return body
    pythonic = [body for lang, body in blocks if lang in ("", "python", "py", "python3")]
    return (pythonic or [blocks[0][1]])[0]


def parses(program: str) -> bool:
    try:
        compile(program, "<candidate>", "exec", dont_inherit=True)
    except Exception:  # SyntaxError, ValueError (NUL bytes), RecursionError / MemoryError from nesting
        return False
    return True


def candidate(prompt: str, completion: Any, entry_point: str | None = None, prompt_is_code: bool = True):
    """What continues `prompt` into the program to test (see the module docstring)."""
    text = reply_text(completion)
    if len(text) > MAX_CHARS:
        return Candidate(None, "too_long")
    if not text.strip():
        return Candidate(None, "no_code")
    fenced = _fenced_code(text, entry_point)
    if not prompt_is_code:  # the prompt is prose (APPS): the reply is the whole program
        code = fenced if fenced is not None else text
        return Candidate(code) if parses(code) else Candidate(None, "syntax_error")
    restated = text.lstrip().startswith("def ") and _defines(text.lstrip(), entry_point)
    if fenced is not None or restated:
        code = fenced if fenced is not None else text
        if not code.strip():
            return Candidate(None, "no_code")
        # A whole function goes after the prompt on a line of its own; a fenced body continues it.
        joined = "\n" + code if _defines(code, entry_point) else code
        if parses(prompt + joined):
            return Candidate(joined)
        return Candidate(None, "syntax_error")
    # A base model's continuation: the body up to where top-level code resumes; a body cut mid-line by
    # the length limit is recovered by dropping its last lines.
    stops = [at for stop in STOP_SEQUENCES if (at := text.find(stop)) != -1]
    body = text[: min(stops, default=len(text))]
    if not body.strip():
        return Candidate(None, "no_code")
    lines = body.split("\n")
    for drop in range(min(MAX_TRIMMED_LINES, len(lines) - 1) + 1):
        attempt = "\n".join(lines[: len(lines) - drop])
        if attempt.strip() and parses(prompt + attempt):
            return Candidate(attempt.rstrip() + "\n")
    return Candidate(None, "syntax_error")
