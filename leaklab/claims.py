"""Claims: several `leaklab evaluate RUN_DIR` workers share one run, one (checkpoint, evaluation) each: a
file created with O_EXCL, touched by its holder every `heartbeat_s`, taken over once `stale_s` old. It only
saves duplicated work (`rundir.append_rows` writes each row once). See docs/scaling.md.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

from leaklab.rundir import locked

# A claim untouched for 10 minutes is dead: loading a 7B checkpoint does not stop the heartbeat thread.
HEARTBEAT_S = 30.0
STALE_S = 600.0


def claims_dir(run_root: str | Path) -> Path:
    return Path(run_root) / "claims"


def claim_path(run_root: str | Path, step: int, evaluation: str) -> Path:
    return claims_dir(run_root) / f"step-{step}.{evaluation}.claim"


class Claim:
    """A held claim: its file, and a thread that keeps its heartbeat fresh until `release()`."""

    def __init__(self, path: Path, token: str, heartbeat_s: float):
        self.path = path
        self.token = token
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(heartbeat_s,), daemon=True)
        self._thread.start()

    def _beat(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                os.utime(self.path)
            except OSError:
                return  # the file is gone (released, or taken over): nothing left to keep alive

    def still_mine(self) -> bool:
        """False once another worker took the claim over (this worker was judged dead)."""
        return _holder(self.path).get("token") == self.token

    def release(self) -> None:
        self._stop.set()
        self._thread.join()
        # Remove the file only while it is still ours: a successor's claim must survive our release.
        with locked(self.path.parent / ".lock"):
            if self.still_mine():
                self.path.unlink(missing_ok=True)

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _holder(path: Path) -> dict:
    """The claim file's holder; {} when missing, or caught between create and write (so not ours)."""
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _create(path: Path, heartbeat_s: float) -> Claim | None:
    token = uuid.uuid4().hex
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        return None
    holder = {"token": token, "host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(holder) + "\n")
    return Claim(path, token, heartbeat_s)


def is_stale(path: Path, stale_s: float) -> bool:
    """True when the claim's heartbeat is older than `stale_s` (False when the file is gone)."""
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return False
    return age > stale_s


def try_claim(
    path: str | Path,
    *,
    heartbeat_s: float = HEARTBEAT_S,
    stale_s: float = STALE_S,
    log=print,
) -> Claim | None:
    """This worker's claim of `path` (a dead holder's taken over); None when a live worker holds it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    claim = _create(path, heartbeat_s)
    if claim is not None or not is_stale(path, stale_s):
        return claim
    # Under the lock, judge again (another worker may have taken it over meanwhile) and replace it.
    with locked(path.parent / ".lock"):
        if not is_stale(path, stale_s):
            return _create(path, heartbeat_s)  # released meanwhile: free to claim; taken: None
        holder = _holder(path)
        path.unlink(missing_ok=True)
        log(
            f"[leaklab] {path.name}: taking over the claim of {holder.get('host', '?')} "
            f"pid {holder.get('pid', '?')} (no heartbeat for over {stale_s:g} s)"
        )
        return _create(path, heartbeat_s)
