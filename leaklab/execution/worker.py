"""A sandbox worker (`python -m leaklab.execution.worker`): a lean process that forks one isolated
child per run. A judged check forks only the candidate; the tests run in the worker's long-lived judge
(`harness.serve_judge`). See docs/sandbox.md#workers-and-runs.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import mmap
import os
import pickle
import select
import shutil
import signal
import socket
import struct
import tempfile
import time
import traceback
from typing import Any

from leaklab.execution import harness, isolation
from leaklab.execution.isolation import Limits

_HEADER = struct.Struct("!Q")
MADV_WIPEONFORK = 18  # Linux >= 4.14; not exported by Python's mmap module
JUDGE_CHECKS = 500  # checks a judge serves before it is replaced

# Imported once here so that forked children have them for free.
DEFAULT_PRELOAD = (
    "array", "ast", "base64", "binascii", "bisect", "calendar", "cmath", "collections", "collections.abc",
    "contextlib", "copy", "csv", "ctypes", "dataclasses", "datetime", "decimal", "difflib", "enum",
    "fractions", "functools", "glob", "hashlib", "heapq", "inspect", "io", "itertools", "json", "math",
    "numbers", "operator", "pathlib", "pprint", "queue", "random", "re", "shutil", "socket", "statistics",
    "string", "struct", "subprocess", "textwrap", "threading", "time", "typing", "unicodedata",
    "unittest", "uuid", "zlib",
)  # fmt: skip


# --------------------------------------------------------------------------- framing


def read_message(fd: int) -> Any:
    """The next message, or None at end of stream."""
    head = harness.read_exact(fd, _HEADER.size)
    if head is None:
        return None
    body = harness.read_exact(fd, _HEADER.unpack(head)[0])
    return None if body is None else pickle.loads(body)


def write_message(fd: int, message: Any, extras: list[bytes | memoryview] | tuple = ()) -> None:
    """A message, then raw buffers the reader knows the lengths of. The buffers are written straight
    from where they are, never copied into a new object (they may hold test code, see Worker.run)."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    harness.write_all(fd, _HEADER.pack(len(body)) + body)
    for extra in extras:
        harness.write_all(fd, extra)


def private_buffer(size: int) -> mmap.mmap:
    """Memory that every later fork sees as zeros: for data a candidate must never find in the worker
    it is forked from (the tests of a judged check, and the judge's verdict, which quotes them)."""
    buf = mmap.mmap(-1, max(1, size), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    with contextlib.suppress(OSError):
        buf.madvise(MADV_WIPEONFORK)
    return buf


# --------------------------------------------------------------------------- one run


def _child_entry(job: dict[str, Any]) -> tuple[Any, tuple]:
    """(the harness function a job's child runs, its arguments); fd 3 (and 4) are the child's channels."""
    kind = job["kind"]
    if kind == "check":
        if job.get("module"):  # a judged unittest run: the whole module, behind references
            return harness.serve_module, (job["program"], 3, 4)
        return harness.serve_candidate, (job["program"], job["entry_point"], 3, 4)
    if kind == "program":
        return harness.run_program, (job["program"], 3)
    if kind == "calls":
        return harness.serve_calls, (job["program"], job["entry_point"], job["inputs"], 3)
    # "unittest", the only other kind Sandbox._message makes
    return harness.run_unittest, (job["program"], job["tests"], job["test_class"], job["nonce"], 3)


class _Stream:
    """A pipe the worker reads, keeping at most `cap` bytes and counting the rest. A private stream
    reads into a `private_buffer` and never makes a Python object of what it holds."""

    def __init__(self, fd: int, cap: int, private: bool = False) -> None:
        self.fd, self.cap, self.private = fd, cap, private
        self.dropped = 0
        self.size = 0
        self.eof = False
        if private:
            self.buffer = private_buffer(cap)
            self.scratch = private_buffer(1 << 16)  # what is read past the cap, to drop
        else:
            self.data = bytearray()

    def read(self) -> bool:
        """Read what is there; False at end of file."""
        room = self.cap - self.size
        try:
            if self.private:
                with memoryview(self.buffer if room else self.scratch) as view:
                    n = os.readv(self.fd, [view[self.size :] if room else view])
            else:
                chunk = os.read(self.fd, 1 << 16)
                n = len(chunk)
                self.data += chunk[:room]
        except BlockingIOError:
            return True
        except OSError:
            n = 0
        self.size += min(n, room)
        self.dropped += n - min(n, room)
        self.eof = n == 0
        return n > 0

    def close(self) -> None:
        if self.private:
            self.buffer.close()
            self.scratch.close()


def _status(status: int) -> dict[str, Any]:
    if os.WIFSIGNALED(status):
        return {"exit_code": None, "signal": signal.Signals(os.WTERMSIG(status)).name}
    return {"exit_code": os.WEXITSTATUS(status), "signal": None}


def _supervise(
    main_pid: int | None,
    streams: dict[str, _Stream],
    to_write: list[tuple[int, memoryview]],
    deadline: float,
    until: Any = None,
) -> bool:
    """Pump pipes until the main child exits (or, without one, `until()` holds) or the deadline
    passes; True when it timed out."""
    poller = select.poll()
    by_fd: dict[int, Any] = {}
    for stream in streams.values():
        os.set_blocking(stream.fd, False)
        poller.register(stream.fd, select.POLLIN)
        by_fd[stream.fd] = stream
    pending = {}
    for fd, data in to_write:
        if len(data):
            os.set_blocking(fd, False)
            poller.register(fd, select.POLLOUT)
            pending[fd] = data
        else:
            os.close(fd)
    pidfd = None
    if main_pid is not None:
        try:
            pidfd = os.pidfd_open(main_pid)
            poller.register(pidfd, select.POLLIN)
        except (AttributeError, OSError):
            pass  # no pidfd: poll in short steps and ask waitpid
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            step = left if pidfd is not None or main_pid is None else min(left, 0.005)
            for fd, _ in poller.poll(step * 1000):
                if fd == pidfd:
                    return False
                if fd in by_fd:
                    if not by_fd[fd].read():
                        poller.unregister(fd)
                elif fd in pending:
                    try:
                        n = os.write(fd, pending[fd][: 1 << 16])
                        pending[fd] = pending[fd][n:]
                        done = not len(pending[fd])
                    except (BlockingIOError, InterruptedError):
                        done = False
                    except OSError:  # the child closed its stdin: it wants no more
                        done = True
                    if done:
                        poller.unregister(fd)
                        os.close(fd)
                        del pending[fd]
            if main_pid is None:
                if until():
                    return False
            elif pidfd is None and os.waitid(os.P_PID, main_pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                return False
    finally:
        if pidfd is not None:
            os.close(pidfd)
        for fd in pending:
            os.close(fd)


def _drain(streams: dict[str, _Stream], timeout_s: float = 1.0) -> None:
    """Read to end of file once every writer is dead."""
    deadline = time.monotonic() + timeout_s
    open_streams = list(streams.values())
    while open_streams and time.monotonic() < deadline:
        r, _, _ = select.select([s.fd for s in open_streams], [], [], max(0.0, deadline - time.monotonic()))
        open_streams = [s for s in open_streams if s.fd not in r or s.read()]
    for s in streams.values():
        os.close(s.fd)


class Worker:
    def __init__(self, proto_in: int, config: dict[str, Any]) -> None:
        self.proto_in = proto_in
        self.pid = os.getpid()
        # Imported before the worker pivots into its minimal root, where leaklab's checkout is no
        # longer visible.
        for name in DEFAULT_PRELOAD:
            with contextlib.suppress(Exception):  # a missing optional module only costs a lazy import later
                importlib.import_module(name)
        self.uids = self._probe_uids()
        self.isolation = isolation.setup_worker(
            memory_mb=config["memory_mb"], disable=tuple(config["disable"]), hide=config["hide"]
        )
        self.seccomp = self.isolation.pop("seccomp_program", None)
        self.rebind = self.isolation.get("scratch_rebind", [])
        self.isolation["uid"] = "separate" if self.uids else "shared"
        if isolation.is_root() and not self.uids:
            # Programs would run as root, able to kill and delete anything: refuse instead.
            raise RuntimeError("running as root, but switching to an unprivileged uid does not work here")
        self.fresh_scratch = self.isolation["scratch"].startswith("per-run")
        # pid 1 of the namespace the worker's children live in (None: they share the worker's).
        self.init: tuple[int, ...] = (self.isolation["pid_init"],) if "pid_init" in self.isolation else ()
        self.scratch_mounted = False
        self.guards = isolation.build_guards()
        # The network guard stands in for a missing namespace whatever the call guards are set to.
        no_netns = self.isolation["network"] != "namespace"
        self.socket_guards = isolation.build_socket_guards() if no_netns else []
        self.run_root = tempfile.mkdtemp(prefix="leaklab-runs-", dir=self.isolation.get("run_root"))
        os.chmod(self.run_root, 0o711)  # runs can reach their own directory, not list the others
        self.judge: dict[str, Any] | None = None
        self.kill_leftovers()

    def _probe_uids(self) -> tuple[int, int] | None:
        """Two fresh uids if this worker may switch to them (root, and setuid really works)."""
        if not isolation.is_root():
            return None
        uid = isolation.UID_BASE + 2 * self.pid
        uids = (uid, uid + 1)  # (candidate, judge)
        pid = os.fork()
        if pid == 0:
            try:
                isolation.become(uids[0])
                os._exit(0 if os.getuid() == uids[0] else 1)
            except BaseException:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        return uids if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else None

    def kill_leftovers(self) -> None:
        self._stop_judge()
        for uid in self.uids or ():
            isolation.kill_uid(uid)
        isolation.reap_everything(self.init)
        self._clean_state()

    def _clean_state(self) -> None:
        """What a run wrote outside its processes, gone: its /tmp (and the directories that lead
        there), its System V objects and message queues. Called once its processes are all dead."""
        if self.scratch_mounted:
            isolation.drop_scratch()
            self.scratch_mounted = False
        if self.fresh_scratch:
            isolation.clear_ipc(queues=self.isolation["mounts"] == "minimal-root")

    # ------------------------------------------------------------------ children

    def _workdir(self, uid: int | None, own_scratch: bool, scratch_mb: int = 256) -> str:
        """The run's working directory: in a fresh /tmp of its own (see `_clean_state`), or one made
        here and removed after the run."""
        if own_scratch:
            isolation.mount_scratch(scratch_mb, self.rebind)
            self.scratch_mounted = True
            path = isolation.RUN_DIR
            # Open to the judge too: a judged unittest's tests (another uid) make files there for the
            # program to read and read what it writes. Nothing else shares this scratch.
            os.mkdir(path)
            os.chmod(path, 0o777)
        else:
            path = tempfile.mkdtemp(dir=self.run_root)
        if uid is not None:
            os.chown(path, uid, uid)
        return path

    def _fork(
        self,
        fds: dict[int, int],
        uid: int | None,
        limits: Limits,
        workdir: str,
        guard: bool,
        func,
        *args,
        cpu_limit: bool = True,
    ) -> int:
        pid = os.fork()
        if pid == 0:
            code = 70
            # Objects inherited from the worker are never collected here: without this, the first full
            # collection would touch (and so copy) every page of the worker's heap.
            gc.freeze()
            try:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                isolation.place_fds(fds)
                # In a PID namespace of its own the child sees its parent, the worker, as pid 0.
                parent = 0 if self.init else self.pid
                isolation.enter_child(uid, limits, workdir, parent, cpu_limit, self.seccomp)
                if self.fresh_scratch:  # files it makes are the judge's to read and remove, see _workdir
                    os.umask(0)
                isolation.apply_guards(self.guards if guard else [], workdir)
                isolation.apply_guards(self.socket_guards, workdir)
                code = func(*args)
            except BaseException:
                with contextlib.suppress(BaseException):
                    os.write(2, traceback.format_exc().encode("utf-8", "replace"))
                code = 71
            finally:
                os._exit(code)
        return pid

    # ------------------------------------------------------------------ the judge

    def _judge_socket(self, limits: Limits) -> socket.socket:
        """The live judge's socket, starting a judge first if there is none (or it has served its
        share of checks: a fresh one now and then keeps whatever test code left behind bounded)."""
        if self.judge is not None and self.judge["checks"] >= JUDGE_CHECKS:
            self._stop_judge()
        if self.judge is None:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            uid = self.uids[1] if self.uids else None
            workdir = self._workdir(uid, own_scratch=False)
            devnull = os.open(os.devnull, os.O_RDWR)
            pid = self._fork(
                {0: devnull, 1: devnull, 2: devnull, 3: theirs.fileno()},
                uid, limits, workdir, False, harness.serve_judge, 3,
                cpu_limit=False,  # it lives across checks; the worker's deadline bounds each one
            )  # fmt: skip
            os.close(devnull)
            theirs.close()
            self.judge = {"pid": pid, "socket": ours, "workdir": workdir, "checks": 0}
        self.judge["checks"] += 1
        return self.judge["socket"]

    def _stop_judge(self, grace_s: float = 0.0) -> dict[str, Any] | None:
        """Kill the judge (if any), after `grace_s` for one already on its way out; how it had ended,
        when it ended on its own."""
        if self.judge is None:
            return None
        judge, self.judge = self.judge, None
        ended = None
        deadline = time.monotonic() + grace_s
        with contextlib.suppress(ChildProcessError):
            while True:
                done, status = os.waitpid(judge["pid"], os.WNOHANG)
                if done:
                    ended = _status(status)
                    break
                if time.monotonic() >= deadline:
                    os.kill(judge["pid"], signal.SIGKILL)
                    os.waitpid(judge["pid"], 0)
                    break
                time.sleep(0.001)
        judge["socket"].close()
        shutil.rmtree(judge["workdir"], ignore_errors=True)
        return ended

    def _send_check(self, sock: socket.socket, job: dict[str, Any], fds: list[int]) -> None:
        """The check's header and test code to the judge; the test code is read from the parent only
        now, after the candidate was forked, into a `private_buffer`, and sent from there."""
        n = job["secret_len"]
        secret = private_buffer(n)
        try:
            with memoryview(secret) as view:
                got = 0
                while got < n:
                    read = os.readv(self.proto_in, [view[got:n]])
                    if read == 0:
                        raise EOFError("the parent closed the pipe in the middle of a job")
                    got += read
                sock.setblocking(True)
                header = json.dumps({"secret_len": n, "entry_point": job["entry_point"]}).encode()
                socket.send_fds(sock, [header], fds)
                for i in range(0, n, 1 << 15):  # records of 32 KiB
                    sock.send(view[i : min(n, i + (1 << 15))])
        finally:
            secret.close()

    # ------------------------------------------------------------------ one job

    def run(self, job: dict[str, Any]) -> tuple[dict[str, Any], list[_Stream]]:
        limits = Limits(**job["limits"])
        kind = job["kind"]
        cand_uid = self.uids[0] if self.uids else None
        workdir = self._workdir(cand_uid, self.fresh_scratch, limits.scratch_mb)
        devnull = os.open(os.devnull, os.O_RDWR)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        streams = {
            "stdout": _Stream(out_r, job["max_output_bytes"]),
            "stderr": _Stream(err_r, job["max_output_bytes"]),
        }
        to_write: list[tuple[int, memoryview]] = []
        start = time.monotonic()
        deadline = start + limits.timeout_s
        reply: dict[str, Any] = {}
        if kind == "check":
            judge = self._judge_socket(limits)
            req_r, req_w = os.pipe()
            rep_r, rep_w = os.pipe()
            main = None
            serve, args = _child_entry(job)
            cand = self._fork(
                {0: devnull, 1: out_w, 2: err_w, 3: req_r, 4: rep_w},
                cand_uid, limits, workdir, job["guard"], serve, *args,
            )  # fmt: skip
            others = [cand]
            for fd in (req_r, rep_w, out_w, err_w, devnull):
                os.close(fd)
            # The verdict quotes the tests: it stays in private memory on its way to the parent.
            verdict = _Stream(judge.fileno(), 1 << 20, private=True)
            try:
                self._send_check(judge, job, [rep_r, req_w])
            except (OSError, EOFError):
                verdict.eof = True  # the judge is gone; reported below
            finally:
                os.close(rep_r)
                os.close(req_w)
            timed_out = verdict.eof or _supervise(
                None,
                {**streams, "channel": verdict},
                to_write,
                deadline,
                until=lambda: verdict.size or verdict.eof,
            )
            timed_out = timed_out and not verdict.eof
            if timed_out or verdict.eof or not verdict.size:
                # Stuck in the check or dead: either way it is not trusted with the next one.
                # A judge that closed its socket is exiting: give it a moment to say how.
                ended = self._stop_judge(grace_s=0.0 if timed_out else 1.0)
                if ended and not timed_out:
                    reply["judge"] = ended
        else:
            res_r, res_w = os.pipe()
            stdin_r = devnull
            if job.get("stdin") is not None:
                stdin_r, stdin_w = os.pipe()
                to_write.append((stdin_w, memoryview(job["stdin"])))
            func, args = _child_entry(job)
            fds = {0: stdin_r, 1: out_w, 2: err_w, 3: res_w}
            main = self._fork(fds, cand_uid, limits, workdir, job["guard"], func, *args)
            others = []
            for fd in {stdin_r, out_w, err_w, res_w, devnull}:
                os.close(fd)
            streams["channel"] = _Stream(res_r, job["max_result_bytes"])
            verdict = None
            timed_out = _supervise(main, streams, to_write, deadline)
        reply.update({"timed_out": timed_out, "duration_s": time.monotonic() - start})
        self._end_run(main, others, reply)
        self._collect(streams, workdir, reply)
        if verdict is None:
            return reply, []
        reply["channel_dropped"] = verdict.dropped
        reply["private"] = [("channel", verdict.size)]
        return reply, [verdict]

    def _collect(self, streams: dict[str, _Stream], workdir: str, reply: dict[str, Any]) -> None:
        """The run's output into `reply`, once its processes are gone; its files are cleared."""
        _drain(streams)
        if self.scratch_mounted:
            self._clean_state()
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        for name, stream in streams.items():
            reply[f"{name}_dropped"] = stream.dropped
            reply[name] = bytes(stream.data)

    def _end_run(self, main: int | None, others: list[int], reply: dict[str, Any]) -> None:
        """Whatever the outcome, nothing of the run survives it: its session groups first, then every
        process that was re-parented to this subreaper, then (root) every process of its uid."""
        # A candidate that already died did so on its own (a crash, the CPU limit): say so.
        for pid in others:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                reply["candidate"] = _status(status)
        # Processes the run started that outlive it: below its own, or re-parented here already.
        run_pids = [p for p in (main, *others) if p is not None]
        judge = (self.judge["pid"],) if self.judge else ()
        # Orphans go to this subreaper or, inside the PID namespace, to its init.
        keep = (*judge, *self.init)
        orphans = [
            p for p in isolation.children() if p not in (*run_pids, *keep) and not isolation.is_zombie(p)
        ]
        left = isolation.live_descendants([*run_pids, *orphans, *self.init]) + len(orphans)
        reply["leftover_processes"] = left
        for pid in run_pids:
            for kill in (os.killpg, os.kill):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    kill(pid, signal.SIGKILL)
        if main is not None:
            _, status = os.waitpid(main, 0)
            reply.update(_status(status))
        else:  # a judged check: the exit status that matters is the judge's, when it died
            reply.update(reply.get("judge") or {"exit_code": 0, "signal": None})
        for pid in others:
            if "candidate" not in reply:
                os.waitpid(pid, 0)
                reply["candidate"] = {"exit_code": None, "signal": "SIGKILL", "killed_by_worker": True}
        stray = isolation.reap_everything(keep) + isolation.live_descendants(list(self.init))
        if stray and self.uids:
            # A second net: every process of the run's uid descends from it, so the sweep found them all.
            isolation.kill_uid(self.uids[0])
            isolation.reap_everything(keep)
        # The init reaps what died under it; wait until it has, so that the next run starts without
        # them (not even as zombies in its /proc, or in its uid's process count).
        deadline = time.monotonic() + 2.0
        while self.init and isolation.children(self.init[0]) and time.monotonic() < deadline:
            time.sleep(0.001)

    def serve(self, job: dict[str, Any], out_fd: int) -> None:
        """Run a job and write the reply, private streams straight from their buffers."""
        private: list[_Stream] = []
        try:
            reply, private = self.run(job)
        except BaseException as err:
            reply = {"internal_error": f"{type(err).__name__}: {err}\n{traceback.format_exc()}"}
            with contextlib.suppress(BaseException):
                self.kill_leftovers()
        views = [memoryview(s.buffer)[: s.size] for s in private]
        write_message(out_fd, reply, views)
        for view in views:
            view.release()
        for stream in private:
            stream.close()


def main() -> None:
    # The protocol moves off fds 0/1, so a stray print from an imported module cannot corrupt it.
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which shuts us down
    config = read_message(proto_in)
    try:
        worker = Worker(proto_in, config)
    except Exception as err:
        write_message(proto_out, {"start_error": f"{type(err).__name__}: {err}"})
        return
    write_message(proto_out, {"pid": worker.pid, "isolation": worker.isolation, "uids": worker.uids})
    while True:
        job = read_message(proto_in)
        if job is None or job.get("kind") == "shutdown":
            break
        worker.serve(job, proto_out)
    worker.kill_leftovers()
    shutil.rmtree(worker.run_root, ignore_errors=True)


if __name__ == "__main__":
    main()
