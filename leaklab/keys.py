"""`leaklab keys [recipe=NAME]`: every recipe key with its type, value and meaning, read from the schema.

A key's meaning is its field's comment in the source (at the end of its line, else the lines above), so
the list cannot drift from the schema: a key without one shows "(no description)" and a test fails.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import inspect
import re
import typing
from functools import cache
from typing import Any

from leaklab.recipe import Recipe

_FIELD = re.compile(r"^\s+(\w+)\s*:\s*[^=#]+?(?:=.*?)?(?:#\s*(.*))?$")


@cache
def field_comments(cls: type) -> dict[str, str]:
    """{field name: its comment} from the class's source."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    comments: dict[str, str] = {}
    above: list[str] = []
    for line in source.splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("#").strip())
            continue
        match = _FIELD.match(line)
        if match and not stripped.startswith(("def ", "@", '"""')):
            name, trailing = match.group(1), match.group(2)
            text = trailing.strip() if trailing else " ".join(above)
            if text:
                comments[name] = text.removeprefix("noqa").strip()
        above = []
    return comments


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is None:
        return "none" if tp is type(None) else getattr(tp, "__name__", str(tp))
    args = typing.get_args(tp)
    if origin is list:
        return f"list[{_type_name(args[0])}]"
    return " | ".join(_type_name(a) for a in args)


def _first_sentence(text: str) -> str:
    """One line: up to the first sentence end."""
    text = " ".join(text.split())
    # A sentence ends at ". " before a capital, not after an abbreviation such as "e.g." or "App.".
    cut = re.search(r"(?<=\w{4}\.)\s(?=[A-Z])", text)
    if cut:
        text = text[: cut.start()].rstrip(".")
    return text  # whole: a cut meaning (even piped, or for one key) hides what the key does


def describe_keys(recipe: Any = None) -> list[tuple[str, str, str, str]]:
    """(key, type, value, meaning) for every leaf key; values are the recipe's (defaults without one)."""
    recipe = recipe if recipe is not None else Recipe()
    rows: list[tuple[str, str, str, str]] = []

    def walk(obj: Any, prefix: str) -> None:
        cls = type(obj)
        hints = typing.get_type_hints(cls)
        # `train` and `evaluate` are built from a base class plus the plug-ins' sections: their own
        # fields' comments are in the base's source.
        comments = {k: v for klass in reversed(cls.__mro__) for k, v in field_comments(klass).items()}
        for f in dataclasses.fields(cls):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{prefix}{f.name}.")
                continue
            meaning = comments.get(f.name) or "(no description)"
            rows.append((prefix + f.name, _type_name(hints[f.name]), _show(value), _first_sentence(meaning)))

    walk(recipe, "")
    return rows


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value) if value != "" else '""'


def format_keys(rows: list[tuple[str, str, str, str]]) -> str:
    """A table of key, type, value, meaning; a value too long for its column is shown whole on the line
    below its key, so nothing is cut."""
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    widths[2] = min(widths[2], 24)
    lines = []
    for key, tp, value, meaning in rows:
        shown = value if len(value) <= 24 else "(below)"
        lines.append(f"{key:<{widths[0]}}  {tp:<{widths[1]}}  {shown:<{widths[2]}}  {meaning}")
        if len(value) > 24:
            lines.append(f"    = {value}")
    return "\n".join(lines)


def matches(name: str, patterns: list[str]) -> bool:
    """`name` contains one of the patterns, or matches one with shell wildcards (`evaluate.*seed`)."""
    return any(fnmatch.fnmatchcase(name, p) if any(c in p for c in "*?[") else p in name for p in patterns)
