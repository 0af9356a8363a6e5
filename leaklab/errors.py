"""leaklab's own errors for what a user can fix, and the one place they become a message and an exit code
(`guarded`: `leaklab: <line>` on stderr; anything else is a bug and keeps its traceback). A leaf module:
it imports nothing from leaklab, so every layer may raise these. See
docs/recipes.md#bad-input-local-files-and-progress.
"""

from __future__ import annotations

import difflib
import os
import sys
import traceback
from collections.abc import Callable, Iterable

DEBUG_ENV = "LEAKLAB_DEBUG"


def closest(name: str, options: Iterable[str], cutoff: float = 0.5) -> str:
    """The hint every message about an unknown name carries: `; did you mean 'x'?` for the option
    nearest `name`, or "" when none is near enough."""
    match = difflib.get_close_matches(str(name), [str(o) for o in options], n=1, cutoff=cutoff)
    return f"; did you mean {match[0]!r}?" if match else ""


class LeaklabError(Exception):
    """A problem the user can fix; `lines` is what is printed, one problem or hint per line."""

    exit_code = 1

    def lines(self) -> list[str]:
        return [line for line in str(self).splitlines() if line.strip()]


class InputError(LeaklabError, ValueError):
    """Bad input: a recipe key or value, a data file's contents, a run directory that holds another run."""

    exit_code = 2


class UnavailableError(LeaklabError, RuntimeError):
    """Something the input names cannot be had here; the message says how to get it (exit 1)."""


def debug_requested(argv: list[str] | None = None) -> bool:
    return "--debug" in (argv or []) or os.environ.get(DEBUG_ENV, "").lower() in ("1", "true", "yes")


def strip_debug(argv: list[str]) -> list[str]:
    return [a for a in argv if a != "--debug"]


def _say(*lines: str) -> None:
    for line in lines:
        print(f"leaklab: {line.strip()}", file=sys.stderr)


def guarded(fn: Callable[[], int], debug: bool = False) -> int:
    """Run a command; turn leaklab's errors, OS errors and interrupts into lines on stderr + an exit code."""
    debug = debug or debug_requested()
    try:
        return fn()
    except BrokenPipeError:
        # The reader went away (`leaklab recipes | head -1`): it read what it asked for. Point stdout at
        # /dev/null so the interpreter's last flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (LeaklabError, OSError, KeyboardInterrupt) as err:
        if debug:
            traceback.print_exc()
        if isinstance(err, LeaklabError):
            _say(*err.lines())
            return err.exit_code
        if isinstance(err, KeyboardInterrupt):
            _say(
                "interrupted; every file written so far is complete (writes are atomic), "
                "so running the same command again continues"
            )
            return 130
        # The machine, not the input: a full disk, a path that cannot be written or read.
        what = err.strerror or type(err).__name__
        where = f": {err.filename}" if err.filename else (f": {err}" if not err.strerror else "")
        _say(f"{what}{where} (run again with --debug for the traceback)")
        return 1
