"""The isolated runner: a pool of workers (`worker.py`) forks one child per run under the layers of
`isolation.py`; nothing a program does raises out of here. Usage and verdicts: docs/sandbox.md.
"""

from __future__ import annotations

import contextlib
import json
import queue
import secrets
import select
import subprocess
import sys
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from leaklab.execution import values
from leaklab.execution.harness import read_exact
from leaklab.execution.isolation import Limits, data_caches
from leaklab.execution.worker import read_message, write_message

MAX_RESULT_BYTES = 64 << 20  # kept of the call results a run streams back; the rest is read and dropped
WORKER_START_TIMEOUT_S = 60.0  # a worker's imports and set-up, before the pool gives up on it


@dataclass
class CallOutcome:
    """One call of an entry point: its value (plain data) or what went wrong."""

    ok: bool
    value: Any = None
    error: str = ""
    duration_s: float = 0.0


@dataclass
class ExecResult:
    verdict: str
    reason: str = ""
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    signal: str | None = None
    duration_s: float = 0.0
    truncated: bool = False
    calls: list[CallOutcome] | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.verdict == "passed"


# --------------------------------------------------------------------------- jobs


@dataclass(frozen=True)
class Program:
    """Run `source` as __main__ with `stdin`."""

    source: str
    stdin: str | bytes | None = None
    timeout_s: float | None = None


@dataclass(frozen=True)
class FunctionCalls:
    """Run `source`, then call `entry_point(*args)` for each args in `inputs` (plain data)."""

    source: str
    entry_point: str
    inputs: Sequence[Sequence[Any]]
    timeout_s: float | None = None


@dataclass(frozen=True)
class CheckFunction:
    """HumanEval style: `tests` defines `check(candidate)`, run by a judge against the candidate's
    `entry_point`. `prelude` is trusted code run in the judge first (the prompt and canonical
    solution, for helpers such as HumanEval/32's `poly` that the tests call)."""

    source: str
    entry_point: str
    tests: str
    prelude: str = ""
    check: str = "check"
    timeout_s: float | None = None


@dataclass(frozen=True)
class UnitTests:
    """BigCodeBench style: `tests` defines a unittest.TestCase subclass `test_class`, run by the judge.
    `judged=False` runs both in one process, which the program can fool: only for the hostile tests."""

    source: str
    tests: str
    test_class: str = "TestCases"
    timeout_s: float | None = None
    guard_calls: bool | None = None
    judged: bool = True


Job = Program | FunctionCalls | CheckFunction | UnitTests


# --------------------------------------------------------------------------- workers


def _worker_env() -> dict[str, str]:
    """A clean environment: nothing of ours (API keys, tokens) reaches the programs."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),  # where leaklab is imported from
        "PYTHONDONTWRITEBYTECODE": "1",
        # One hash seed for every worker: a set's iteration order must not depend on which worker
        # ran the reference solution and which the candidate.
        "PYTHONHASHSEED": "0",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }


class _WorkerProcess:
    def __init__(self, config: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "leaklab.execution.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_worker_env(),
            close_fds=True,
            start_new_session=True,  # Ctrl-C goes to us; we shut the workers down
            cwd="/",  # not under /tmp, which the worker hides behind a private tmpfs
        )
        self.to_fd = self.proc.stdin.fileno()
        self.from_fd = self.proc.stdout.fileno()
        write_message(self.to_fd, config)
        self.hello = self.receive(WORKER_START_TIMEOUT_S)
        if self.hello is None or "start_error" in self.hello:
            self.kill()
            why = self.hello["start_error"] if self.hello else "no answer"
            raise RuntimeError(f"a sandbox worker did not start: {why}")

    def receive(self, timeout_s: float) -> Any:
        ready, _, _ = select.select([self.from_fd], [], [], timeout_s)
        if not ready:
            return None
        try:
            message = read_message(self.from_fd)
            # Streams the worker kept in private memory follow the message as raw bytes.
            for name, size in message.get("private", ()) if isinstance(message, dict) else ():
                message[name] = read_exact(self.from_fd, size)
                if message[name] is None:
                    return None
            return message
        except (OSError, EOFError, ValueError):
            return None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 5.0) -> None:
        if self.alive():
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                write_message(self.to_fd, {"kind": "shutdown"})
                self.proc.wait(timeout_s)
        self.kill()

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                f.close()


def _stop_all(slots: list[_WorkerProcess | None]) -> None:
    for w in slots:
        if w is not None:
            w.stop()


class Sandbox:
    """A pool of sandbox workers; use as a context manager (or call `close`).

    `timeout_s` is the wall-clock limit per run (a job may set its own; CPU time is capped just
    above), `memory_mb` each process's address space, `max_procs` the processes and threads a run
    may have at once, `scratch_mb` the run's own /tmp (as root), `max_output_bytes` the stdout and
    stderr kept per run (`truncated` says more was dropped). `guard_calls=False` drops the Python
    guards (os.system, subprocess, deletions outside the run's directory) for programs that spawn
    processes legitimately; the operating-system layers hold without them. `disable` names layers of
    `isolation.LAYERS` to leave out, only for tests that show an attack working without one.
    """

    def __init__(
        self,
        workers: int = 2,
        timeout_s: float = 5.0,
        memory_mb: int = 1024,
        max_procs: int = 32,
        scratch_mb: int = 256,
        max_output_bytes: int = 1 << 20,
        guard_calls: bool = True,
        disable: Sequence[str] = (),
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.limits = Limits(
            timeout_s=timeout_s, memory_mb=memory_mb, max_procs=max_procs, scratch_mb=scratch_mb
        )
        self.max_output_bytes = max_output_bytes
        self.guard_calls = guard_calls
        self._config = {
            "disable": tuple(disable),
            "memory_mb": memory_mb,
            # Found here, with the caller's environment (LEAKLAB_CACHE, HF_HOME, ...): the worker's is clean.
            "hide": data_caches(),
        }
        self._queue: queue.Queue = queue.Queue()
        self.restarts = 0
        self._closed = False
        self._submit = threading.Lock()  # a job is queued wholly before close() drains, or refused
        # Started in parallel: each worker spends most of its start-up importing.
        with ThreadPoolExecutor(workers) as pool:
            starting = [pool.submit(_WorkerProcess, self._config) for _ in range(workers)]
        errors = [err for f in starting if (err := f.exception()) is not None]
        self._slots: list[_WorkerProcess | None] = [None if f.exception() else f.result() for f in starting]
        self._finalizer = weakref.finalize(self, _stop_all, self._slots)
        if errors:
            self.close()
            raise RuntimeError(f"the sandbox could not start: {errors[0]}") from errors[0]
        self.isolation: dict[str, Any] = dict(self._slots[0].hello["isolation"])
        self._threads = [threading.Thread(target=self._serve, args=(i,), daemon=True) for i in range(workers)]
        for t in self._threads:
            t.start()

    # ------------------------------------------------------------------ public API

    # One job of a kind each; `options` are the job's other fields (timeout_s, prelude, test_class, ...).
    def run(self, program: str, stdin: str | bytes | None = None, **options: Any) -> ExecResult:
        return self.run_jobs([Program(program, stdin, **options)])[0]

    def call_function(
        self, source: str, entry_point: str, inputs: Sequence[Sequence[Any]], **options: Any
    ) -> ExecResult:
        """`result.calls[i]` is the outcome of `entry_point(*inputs[i])`."""
        return self.run_jobs([FunctionCalls(source, entry_point, inputs, **options)])[0]

    def check_function(self, source: str, entry_point: str, tests: str, **options: Any) -> ExecResult:
        return self.run_jobs([CheckFunction(source, entry_point, tests, **options)])[0]

    def run_unittest(self, source: str, tests: str, **options: Any) -> ExecResult:
        return self.run_jobs([UnitTests(source, tests, **options)])[0]

    def run_jobs(self, jobs: Sequence[Job]) -> list[ExecResult]:
        """Run every job on the pool; the results come back in the order of `jobs`."""
        futures: list[Future] = [Future() for _ in jobs]
        with self._submit:
            if self._closed:
                raise RuntimeError("the sandbox is closed")
            for job, future in zip(jobs, futures):
                self._queue.put((job, future))
        return [f.result() for f in futures]

    @property
    def worker_pids(self) -> list[int]:
        return [w.proc.pid for w in self._slots if w is not None and w.alive()]

    @property
    def sandbox_uids(self) -> list[int]:
        """The uids programs run as, one per worker (empty when the pool does not run as root)."""
        return [w.hello["uids"][0] for w in self._slots if w is not None and w.hello["uids"]]

    def close(self) -> None:
        with self._submit:  # a job queued after the drain below would wait forever
            if self._closed:
                return
            self._closed = True
            # Jobs not started yet are cancelled (their callers get CancelledError), so that closing after
            # an interrupt does not first run everything that was queued.
            with contextlib.suppress(queue.Empty):
                while True:
                    self._queue.get_nowait()[1].cancel()  # (job, future): no None is queued before this
        for _ in getattr(self, "_threads", ()):
            self._queue.put(None)
        for t in getattr(self, "_threads", ()):
            t.join()
        self._finalizer()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the pool

    def _serve(self, slot: int) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            job, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = self._execute(slot, job)
            except BaseException as err:  # never leave a caller waiting
                result = ExecResult("error", reason=f"sandbox failure: {type(err).__name__}: {err}")
            future.set_result(result)

    def _worker(self, slot: int) -> _WorkerProcess:
        w = self._slots[slot]
        if w is None or not w.alive():
            if w is not None:
                w.kill()
                self.restarts += 1
            w = self._slots[slot] = _WorkerProcess(self._config)
        return w

    def _execute(self, slot: int, job: Job) -> ExecResult:
        try:
            message, secret = self._message(job)
        except (values.UnsupportedValue, ValueError) as err:
            return ExecResult("error", reason=str(err))
        w = self._worker(slot)
        try:
            write_message(w.to_fd, message, [secret])
        except OSError:
            w.kill()
            return ExecResult("error", reason="the sandbox worker died before the run")
        # The worker enforces the deadline; this one only catches a worker that itself hangs.
        reply = w.receive(message["limits"]["timeout_s"] + 30.0)
        if reply is None or "internal_error" in reply:
            w.kill()  # replaced before the next job
            why = reply["internal_error"] if reply else "the sandbox worker died or hung"
            return ExecResult("error", reason=f"sandbox failure: {why}")
        try:
            return _read_reply(job, message, reply)
        except Exception as err:  # the program's doing: `failed`, never `error`, which it may not choose
            return ExecResult(
                "failed",
                reason=f"the run's report is malformed ({type(err).__name__}: {str(err)[:200]})",
                stdout=_text(reply.get("stdout") or b""),
                stderr=_text(reply.get("stderr") or b""),
                duration_s=reply.get("duration_s") or 0.0,
            )

    def _message(self, job: Job) -> tuple[dict[str, Any], bytes]:
        """The job for the worker, and the test code it reads only after forking the candidate."""
        timeout = job.timeout_s if job.timeout_s is not None else self.limits.timeout_s
        guard = getattr(job, "guard_calls", None)
        message: dict[str, Any] = {
            "limits": asdict(self.limits) | {"timeout_s": float(timeout)},
            "max_output_bytes": self.max_output_bytes,
            "max_result_bytes": MAX_RESULT_BYTES,
            "guard": self.guard_calls if guard is None else guard,
            "program": job.source,
        }
        secret = b""
        if isinstance(job, Program):
            stdin = job.stdin.encode("utf-8") if isinstance(job.stdin, str) else job.stdin
            message |= {"kind": "program", "stdin": stdin}
        elif isinstance(job, FunctionCalls):
            message |= {"kind": "calls", "entry_point": job.entry_point}
            message["inputs"] = [values.encode(list(args)) for args in job.inputs]
        elif isinstance(job, CheckFunction):
            secret = json.dumps({"prelude": job.prelude, "tests": job.tests, "check": job.check}).encode()
            message |= {"kind": "check", "entry_point": job.entry_point, "secret_len": len(secret)}
        elif isinstance(job, UnitTests) and job.judged:
            secret = json.dumps({"tests": job.tests, "test_class": job.test_class}).encode()
            message |= {"kind": "check", "entry_point": "", "module": True, "secret_len": len(secret)}
        else:  # UnitTests(judged=False)
            message |= {"kind": "unittest", "tests": job.tests, "test_class": job.test_class}
            message["nonce"] = secrets.token_hex(16)
        return message, secret


# --------------------------------------------------------------------------- verdicts


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _lines(data: bytes) -> list[Any]:
    """The JSON lines of a result channel; ValueError when one is malformed, whatever the parser
    raised (a deeply nested line raises RecursionError, a huge one MemoryError)."""
    out = []
    for line in data.splitlines():
        try:
            message = json.loads(line)
        except Exception as err:
            raise ValueError(f"malformed line ({type(err).__name__})") from None
        if type(message) is not dict:
            raise ValueError("not an object")
        out.append(message)
    return out


def _ended(reply: dict[str, Any]) -> str:
    if reply["signal"]:
        return f"killed by {reply['signal']}"
    return f"exited with code {reply['exit_code']}"


def _read_reply(job: Job, message: dict[str, Any], reply: dict[str, Any]) -> ExecResult:
    timeout = message["limits"]["timeout_s"]
    result = ExecResult(
        verdict="error",
        stdout=_text(reply["stdout"]),
        stderr=_text(reply["stderr"]),
        exit_code=reply["exit_code"],
        signal=reply["signal"],
        duration_s=reply["duration_s"],
        truncated=bool(reply["stdout_dropped"] or reply["stderr_dropped"]),
        details={"leftover_processes": reply["leftover_processes"]},
    )
    if reply["stdout_dropped"] or reply["stderr_dropped"]:
        result.details["dropped_bytes"] = reply["stdout_dropped"] + reply["stderr_dropped"]
    cpu_limit = reply["signal"] == "SIGXCPU" or (reply.get("candidate") or {}).get("signal") == "SIGXCPU"
    if reply["timed_out"] or cpu_limit:
        result.verdict = "timeout"
        result.reason = f"wall-clock limit of {timeout:g} s" if reply["timed_out"] else "CPU-time limit"
        if isinstance(job, FunctionCalls):
            result.calls = _calls(reply["channel"], len(job.inputs))[0]
        return result
    if reply["channel_dropped"]:
        result.verdict, result.reason = "failed", "the result channel exceeded its size limit"
        return result
    if isinstance(job, Program):
        return _program_verdict(result, reply)
    if isinstance(job, FunctionCalls):
        return _calls_verdict(result, reply, len(job.inputs))
    if isinstance(job, CheckFunction) or message["kind"] == "check":
        return _check_verdict(result, reply)
    return _unittest_verdict(result, reply, message["nonce"])


def _program_verdict(result: ExecResult, reply: dict[str, Any]) -> ExecResult:
    if reply["exit_code"] == 0:
        result.verdict = "passed"
        return result
    result.verdict, result.reason = "failed", _ended(reply)
    try:
        exceptions = [str(m["exception"])[:2000] for m in _lines(reply["channel"]) if "exception" in m]
    except ValueError:
        exceptions = []
    if exceptions:
        result.reason += f": {exceptions[-1]}"
    return result


def _calls(channel: bytes, expected: int) -> tuple[list[CallOutcome], str | None]:
    """The outcomes in a calls channel and, when it is not a well-formed stream, why."""
    try:
        lines = _lines(channel)
    except ValueError:
        return [], "the result stream is malformed"
    if not lines:
        return [], None
    head, rest = lines[0], lines[1:]
    if "load_error" in head:
        return [], f"the program does not load: {head['load_error']}"
    if head.get("loaded") is not True or len(rest) > expected:
        return [], "the result stream is malformed"
    calls = []
    for line in rest:
        t = float(line["t"]) if type(line.get("t")) in (int, float) else 0.0
        if "ok" in line:
            try:
                calls.append(CallOutcome(True, values.decode(line["ok"]), duration_s=t))
            except Exception as err:  # ValueError, or RecursionError from a hostile depth
                return calls, f"the result stream is malformed: {str(err)[:200]}"
        elif "raise" in line:
            calls.append(
                CallOutcome(False, error=f"{line['raise']}: {line.get('message', '')}", duration_s=t)
            )
        elif "unsupported" in line:
            calls.append(CallOutcome(False, error=f"returned {line['unsupported']}", duration_s=t))
        else:
            return calls, "the result stream is malformed"
    return calls, None


def _calls_verdict(result: ExecResult, reply: dict[str, Any], n: int) -> ExecResult:
    calls, problem = _calls(reply["channel"], n)
    result.calls = calls
    result.verdict = "failed"
    if problem:
        result.reason = problem
    elif len(calls) < n:
        result.reason = f"the process {_ended(reply)} after {len(calls)} of {n} calls"
    elif failed := [i for i, c in enumerate(calls) if not c.ok]:
        result.reason = f"call {failed[0]} failed: {calls[failed[0]].error}"
    else:
        result.verdict = "passed"
    return result


def _check_verdict(result: ExecResult, reply: dict[str, Any]) -> ExecResult:
    candidate = reply.get("candidate") or {}
    result.exit_code, result.signal = candidate.get("exit_code"), candidate.get("signal")
    try:  # the judge's own record: trusted, but read as carefully as any
        verdict = json.loads(reply["channel"])
    except Exception:
        verdict = None
    if type(verdict) is not dict:
        result.verdict, result.reason = "error", f"the judge {_ended(reply)} without a verdict"
        return result
    if "tests" in verdict:
        result.details["tests"] = verdict["tests"]
    if verdict.get("passed") is True:
        result.verdict = "passed"
    elif "failed" in verdict:
        result.verdict, result.reason = "failed", str(verdict["failed"])
        if candidate.get("signal") and not candidate.get("killed_by_worker"):
            result.reason += f" (the candidate was killed by {candidate['signal']})"
    else:
        result.verdict, result.reason = "error", str(verdict.get("error", "malformed verdict"))
    return result


def _unittest_verdict(result: ExecResult, reply: dict[str, Any], nonce: str) -> ExecResult:
    """The in-process unittest report (UnitTests(judged=False)): forgeable, see harness.py."""
    try:
        reports = _lines(reply["channel"])
    except ValueError:
        reports = []
    result.verdict = "failed"
    if len(reports) != 1 or reports[0].get("nonce") != nonce:
        why = "no report" if not reports else "a forged or repeated report"
        result.reason = f"the program {_ended(reply)} with {why} from the tests"
        return result
    report = reports[0]
    if "error" in report:
        result.verdict, result.reason = "error", str(report["error"])
    elif "failed" in report:
        result.reason = str(report["failed"])
    elif reply["exit_code"] != 0:
        result.reason = f"the program {_ended(reply)} after the tests"
    elif not report.get("tests"):
        result.verdict, result.reason = "error", "the test class holds no tests"
    elif report.get("n_problems"):
        result.reason = f"{report['n_problems']} of {report['tests']} tests failed: " + "; ".join(
            report["problems"][:3]
        )
    else:
        result.verdict = "passed"
        result.details["tests"] = report["tests"]
    return result
