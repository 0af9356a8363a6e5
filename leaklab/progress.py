"""Progress of long phases, readable on a terminal and in a log file; repeated warnings said once.

On a terminal `Progress` is a tqdm bar; elsewhere (a bar would be carriage-return noise) a plain line
once the phase has run `every_s` seconds, then every `every_s` seconds or 10% of the work, and a closing
line. A leaf module: it imports nothing from leaklab, so every layer may use it.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections import Counter

EVERY_S = 30.0


def interactive() -> bool:
    return sys.stderr.isatty()


def quiet_library_bars() -> None:
    """Off a terminal, the hub's and transformers' own tqdm bars would land in the log as carriage-return
    lines: HF_HUB_DISABLE_PROGRESS_BARS (read at import; a user's own setting wins), and a transformers
    already imported is told directly."""
    if interactive():
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1" and "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


class Progress:
    """`with Progress(total, "scoring", unit="tok") as p: ... p.update(n)`."""

    def __init__(
        self,
        total: float,
        desc: str,
        unit: str = "it",
        every_s: float = EVERY_S,
        enabled: bool | None = None,
        tty: bool | None = None,
        stream=None,
        leave: bool = True,
    ):
        self.total, self.desc, self.unit, self.every_s = total, desc, unit, every_s
        self.enabled = True if enabled is None else enabled
        self.stream = stream
        self.done = 0.0
        self.started = self.last_line = time.monotonic()
        self.last_fraction = 0.0
        self.lines = 0
        self.postfix = ""
        self.bar = None
        if self.enabled and (interactive() if tty is None else tty):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=unit, leave=leave, mininterval=0.5)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def set_postfix(self, text: str) -> None:
        self.postfix = text
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)

    def update(self, n: float = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.started < self.every_s:
            return
        fraction = self.done / self.total if self.total else 0.0
        if now - self.last_line >= self.every_s or fraction - self.last_fraction >= 0.1:
            self._line(now, fraction)

    def _line(self, now: float, fraction: float, closing: bool = False) -> None:
        elapsed = now - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = f", about {(self.total - self.done) / rate:.0f}s left" if rate and not closing else ""
        extra = f", {self.postfix}" if self.postfix else ""
        verb = "done" if closing else f"{100 * fraction:.0f}%"
        print(
            f"[leaklab] {self.desc}: {verb} {self.done:.0f}/{self.total:.0f} {self.unit} in {elapsed:.0f}s{eta}{extra}",
            file=self.stream or sys.stderr,
            flush=True,
        )
        self.last_line, self.last_fraction = now, fraction
        self.lines += 1

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.lines:  # a phase long enough to report also says when it ends
            self._line(time.monotonic(), 1.0, closing=True)
            self.lines = 0


_said: Counter[str] = Counter()


def say_once(logger: logging.Logger, message: str, *args) -> bool:
    """Log a warning the first time its text appears in this process; count the repeats. True if said."""
    text = message % args if args else message
    _said[text] += 1
    if _said[text] == 1:
        logger.warning("%s (said once; repeats are counted, not shown)", text)
        return True
    return False
