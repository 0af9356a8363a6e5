"""What runs inside a sandboxed child once `isolation.enter_child` has locked it down (one function per
kind of run: it returns the exit code, never raises, sends JSON lines to a descriptor), and the judge:
`serve_candidate` / `judge_check` for `check(candidate)`, `serve_module` / `judge_unittest` for unittest
classes (docs/sandbox.md#judged-checks). `run_unittest` is the forgeable one-process way (hostile tests).
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import datetime
import importlib
import io
import json
import os
import random
import socket
import sys
import tempfile
import time
import traceback
import types
import unittest
import unittest.mock
from typing import Any

from leaklab.execution import isolation, values

MAX_LINE = 64 << 20  # the longest message a judge accepts from a candidate
JUDGE_NAME = "leaklab-judge"  # the judge's process name, as ps shows it


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_exact(fd: int, n: int) -> bytes | None:
    """`n` bytes from `fd`, or None when it ends first."""
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def send(fd: int, message: dict[str, Any]) -> None:
    write_all(
        fd, (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "replace")
    )


def _fresh_main() -> dict[str, Any]:
    """A new `__main__` module, registered so that pickle, dataclasses and friends can find it."""
    module = types.ModuleType("__main__")
    module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = module
    sys.argv = ["main.py"]
    return module.__dict__


def _reset_stdio() -> None:
    """Text streams over the new fds 0-2; the ones inherited from the worker point elsewhere."""

    def text(fd: int, errors: str = "surrogateescape", **options: Any) -> io.TextIOWrapper:
        buffered = io.BufferedReader if fd == 0 else io.BufferedWriter
        raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
        return io.TextIOWrapper(buffered(raw), encoding="utf-8", errors=errors, **options)

    sys.stdin = sys.__stdin__ = text(0)
    sys.stdout = sys.__stdout__ = text(1)
    sys.stderr = sys.__stderr__ = text(2, "backslashreplace", line_buffering=True)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):  # the program may have closed or replaced it
            stream.flush()


def describe(err: BaseException, filename: str, source: str) -> str:
    """`Type: message (line N: code)`, the line taken from the innermost frame of `filename`."""
    text = f"{type(err).__name__}: {err}".strip().rstrip(":")
    lineno = None
    if isinstance(err, SyntaxError) and err.filename == filename:
        lineno = err.lineno
    else:
        for frame, n in traceback.walk_tb(err.__traceback__):
            if frame.f_code.co_filename == filename:
                lineno = n
    if lineno:
        lines = source.splitlines()
        code = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
        text += f" (line {lineno}: {code[:120]})" if code else f" (line {lineno})"
    return text[:2000]


def _exec(source: str, filename: str, namespace: dict[str, Any]) -> str | None:
    """Run `source` in `namespace`; the description of what went wrong, or None."""
    try:
        exec(compile(source, filename, "exec"), namespace)
    except SystemExit as err:
        return f"exited with {err.code!r} while loading"
    except BaseException as err:
        return describe(err, filename, source)
    return None


def _load(source: str, entry_point: str) -> tuple[Any, str | None]:
    """Exec `source` as __main__ and find its entry point: (function, None) or (None, why not)."""
    _reset_stdio()
    namespace = _fresh_main()
    if error := _exec(source, "<program>", namespace):
        return None, error
    fn = namespace.get(entry_point)
    if callable(fn):
        return fn, None
    # APPS call-based problems are LeetCode-style: a method of class Solution.
    solution = namespace.get("Solution")
    if isinstance(solution, type) and callable(getattr(solution, entry_point, None)):
        try:
            return getattr(solution(), entry_point), None
        except BaseException as err:
            return None, describe(err, "<program>", source)
    return None, f"entry point {entry_point!r} is not defined"


def _call(fn: Any, args: list, kwargs: dict) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        reply = {"ok": values.encode(fn(*args, **kwargs))}
    except values.UnsupportedValue as err:
        reply = {"unsupported": str(err)}
    except BaseException as err:  # SystemExit and KeyboardInterrupt too: the candidate's doing
        reply = {"raise": type(err).__name__, "message": str(err)[:500]}
    return reply | {"t": time.perf_counter() - start}


# --------------------------------------------------------------------------- kinds of runs


def run_program(source: str, result_fd: int) -> int:
    _reset_stdio()
    namespace = _fresh_main()
    code = 0
    try:
        exec(compile(source, "<program>", "exec"), namespace)
    except SystemExit as err:
        if err.code is None or isinstance(err.code, int):
            code = err.code or 0
        else:
            print(err.code, file=sys.stderr)
            code = 1
    except BaseException as err:
        traceback.print_exc()
        with contextlib.suppress(OSError):
            send(result_fd, {"exception": describe(err, "<program>", source)})
        code = 1
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    _flush()
    return code if 0 <= code < 256 else 1


def serve_calls(source: str, entry_point: str, inputs: list, result_fd: int) -> int:
    """Exec `source`, then one line per call: {"ok": value} | {"raise": ...} | {"unsupported": ...}."""
    fn, error = _load(source, entry_point)
    send(result_fd, {"load_error": error} if error else {"loaded": True})
    if not error:
        for tree in inputs:
            args = values.decode(tree)  # a fresh copy per call: the candidate may mutate its arguments
            send(result_fd, _call(fn, list(args), {}))
    _flush()
    return 0


def serve_candidate(source: str, entry_point: str, requests_fd: int, replies_fd: int) -> int:
    """The candidate side of a judged check: load, say ready, then answer calls until EOF."""
    fn, error = _load(source, entry_point)
    send(replies_fd, {"load_error": error} if error else {"ready": True})
    if not error:
        requests = os.fdopen(requests_fd, "rb", closefd=False)
        while line := requests.readline():
            message = json.loads(line)
            send(replies_fd, _call(fn, values.decode(message["args"]), values.decode(message["kwargs"])))
    _flush()
    return 0


class CandidateFailed(BaseException):
    """The candidate crashed, broke the protocol or returned something with no plain-data form.
    A BaseException, so that test code catching Exception cannot swallow it."""


# The judge's side of the pipes, shared by the in-process judge (CandidateProxy) and the unittest judge
# (CandidateLink): whatever the candidate writes, or fails to, becomes CandidateFailed, never a judge error.


def read_reply(replies) -> dict[str, Any]:
    """The candidate's next message: one bounded, newline-terminated line holding a JSON object."""
    try:
        line = replies.readline(MAX_LINE)
    except Exception as err:
        raise CandidateFailed(f"the candidate's reply could not be read: {type(err).__name__}") from None
    if not line:
        raise CandidateFailed("the candidate process ended before answering")
    if not line.endswith(b"\n"):
        raise CandidateFailed("the candidate sent an over-long or unterminated reply")
    try:
        message = json.loads(line)
    except Exception as err:  # RecursionError from deep nesting, MemoryError: malformed all the same
        raise CandidateFailed(f"the candidate sent a malformed reply: {type(err).__name__}") from None
    if type(message) is not dict:
        raise CandidateFailed("the candidate sent a malformed reply")
    return message


def send_request(requests_fd: int, message: dict[str, Any]) -> None:
    try:
        send(requests_fd, message)
    except OSError:
        raise CandidateFailed("the candidate process ended before answering") from None


def no_value(reply: dict[str, Any]) -> CandidateFailed:
    """Why a reply with neither a value nor an exception is the candidate's failure."""
    if "unsupported" in reply:
        return CandidateFailed(
            f"the candidate returned a value that is not plain data ({reply['unsupported']})"
        )
    return CandidateFailed("the candidate sent a malformed reply")


class CandidateProxy:
    """Stands in for the candidate function inside the judge: each call crosses to the candidate
    process and comes back as plain data."""

    def __init__(self, name: str, requests_fd: int, replies_fd: int) -> None:
        self.__name__ = name
        self._requests_fd = requests_fd
        self._replies = os.fdopen(replies_fd, "rb", closefd=False)

    def receive(self) -> dict[str, Any]:
        return read_reply(self._replies)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            request = {"args": values.encode(list(args)), "kwargs": values.encode(dict(kwargs))}
        except values.UnsupportedValue as err:
            raise JudgeError(f"the tests pass an argument that cannot reach the candidate: {err}") from None
        send_request(self._requests_fd, request)
        reply = self.receive()
        if "ok" in reply:
            try:
                return values.decode(reply["ok"])
            except Exception as err:
                raise CandidateFailed(f"malformed value: {str(err)[:200]}") from None
        if "raise" in reply:  # a builtin exception type as itself, so that tests expecting one still work
            raise _exception(str(reply["raise"]), "builtins", str(reply.get("message", "")))
        raise no_value(reply)


class JudgeError(BaseException):
    """The test code itself is unusable (not the candidate's fault)."""


def _loaded(peer: Any, who: str) -> dict[str, Any]:
    """The candidate's first message, once it says it is ready; CandidateFailed when it did not load."""
    ready = peer.receive()
    if not ready.get("ready"):
        raise CandidateFailed(f"{who} does not load: {ready.get('load_error', 'no reason given')}")
    return ready


# --------------------------------------------------------------------------- a module behind references

MAX_ITEMS = 100_000  # the most elements one iteration of a reference brings across


class _Reference:
    """An object of the other process, by reference: each use is a request (`_ask`) answered there."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._ask("getattr", name=name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._ask("call", args=list(args), kwargs=dict(kwargs))

    def __getitem__(self, key: Any) -> Any:
        return self._ask("getitem", key=key)

    # Checked: what the candidate answers is not trusted (the judge's answers pass the same checks).
    def __len__(self) -> int:
        n = self._ask("len")
        if type(n) is not int or n < 0:
            raise CandidateFailed("the candidate's len() is not a non-negative int")
        return n

    def __iter__(self):
        items = self._ask("iter")
        if type(items) is not list:
            raise CandidateFailed("the candidate's iteration is not a list")
        return iter(items)

    def __bool__(self) -> bool:
        return self._ask("bool") is True

    def __str__(self) -> str:
        return str(self._ask("str"))


class JudgeObject(_Reference):
    """In the candidate: a mock of the judge's (one a test's `mock.patch` put in place), by reference;
    using it asks the judge, where the mock records the call and answers as the test configured it."""

    __slots__ = ("_jref",)

    def __init__(self, jref: int) -> None:
        object.__setattr__(self, "_jref", jref)

    def _ask(self, op: str, **fields: Any) -> Any:
        return _callback(op, object.__getattribute__(self, "_jref"), **fields)

    def __setattr__(self, name: str, value: Any) -> None:
        self._ask("setattr", name=name, value=value)

    def __enter__(self) -> Any:
        return self._ask("enter")

    def __exit__(self, *exc: Any) -> bool:
        return bool(self._ask("exit"))


# Set by serve_module: sends a request about a JudgeObject to the judge and returns its answer.
_callback: Any = None


def serve_module(source: str, requests_fd: int, replies_fd: int) -> int:
    """The candidate side of a judged unittest run: exec the program as __main__, list its globals
    (plain data, or references), then answer the judge's requests on references until EOF."""
    global _callback
    _reset_stdio()
    namespace = _fresh_main()
    if error := _exec(source, "<program>", namespace):
        send(replies_fd, {"load_error": error})
        _flush()
        return 0
    handles: dict[int, Any] = {}
    patched: list[tuple[Any, str, Any]] = []  # (owner, attribute, what was there), a stack

    def keep(obj: Any) -> dict[str, int]:
        handles[len(handles) + 1] = obj
        return {"$ref": len(handles)}

    def other(value: Any) -> dict[str, int]:  # a mock of the judge's goes back as itself
        if isinstance(value, JudgeObject):
            return {"$jref": object.__getattribute__(value, "_jref")}
        return keep(value)

    def encode(value: Any) -> Any:
        return values.encode(value, rich=True, other=other)

    def decode(tree: Any) -> Any:  # KeyError for a reference the judge was never given
        return values.decode(tree, rich=True, ref=handles.__getitem__, jref=JudgeObject)

    requests = os.fdopen(requests_fd, "rb", closefd=False)
    rng = None

    def callback(op: str, jref: int, **fields: Any) -> Any:
        message = {"callback": op, "jref": jref}
        message.update({k: (v if k == "name" else encode(v)) for k, v in fields.items()})
        send(replies_fd, message)
        answer = json.loads(requests.readline())
        if "cb_ok" in answer:
            return decode(answer["cb_ok"])
        name, module = str(answer.get("cb_raise")), str(answer.get("module", "builtins"))
        cls = _loaded_class(module, name)
        err = cls if cls is not None and issubclass(cls, BaseException) else RuntimeError
        raise err(str(answer.get("message", "")))

    _callback = callback
    names, imported = _module_globals(namespace, encode)
    globals_ = {"$dict": [[k, v] for k, v in names.items()]}
    send(replies_fd, {"ready": True, "globals": globals_, "imported": imported})
    while line := requests.readline():
        start = time.perf_counter()
        try:
            request = json.loads(line)
            op = request["op"]
            if op in ("patch", "unpatch", "environ"):
                _apply_setup(op, request, decode, patched)
                out = None
            else:
                obj = handles[request["ref"]]
                if "rng" in request:
                    _set_rng_state(decode(request["rng"]))
                try:
                    out = _serve_request(obj, op, request, decode)
                finally:
                    rng = encode(_rng_state()) if "rng" in request else None
            reply = {"ok": encode(out)}
        except values.UnsupportedValue as err:
            reply = {"unsupported": str(err)}
        except BaseException as err:  # the candidate's doing, SystemExit included: the judge decides
            reply = {"raise": type(err).__name__, "module": type(err).__module__, "message": str(err)[:500]}
        reply["t"] = time.perf_counter() - start
        if rng is not None:
            reply["rng"] = rng
            rng = None
        send(replies_fd, reply)
    _flush()
    return 0


def _module_globals(namespace: dict[str, Any], encode) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """(the program's globals as plain data or references, the modules and importable objects it imported,
    which the judge imports itself)."""
    names, imported = {}, {}
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        if isinstance(value, types.ModuleType):
            imported[name] = [value.__name__, ""]
        elif _importable(value):  # from sklearn.preprocessing import StandardScaler: the judge's own
            imported[name] = [value.__module__, value.__qualname__]
        else:
            names[name] = encode(value)
    return names, imported


_MISSING = object()  # an attribute a patch added: unpatching deletes it


def _apply_setup(op: str, request: dict[str, Any], decode, patched: list[tuple[Any, str, Any]]) -> None:
    """A test's setup mirrored in the candidate: a mock.patch ("patch", see judge_unittest), its undoing
    ("unpatch", the last patch first), or the environment it set ("environ")."""
    if op == "patch":
        where = request["where"]
        owner = _loaded_class(where[1], where[2]) if where[0] == "class" else None
        if where[0] == "module":
            owner = importlib.import_module(where[1])
        if owner is None:
            raise LookupError(f"nothing to patch at {where}")
        attribute = str(request["attribute"])
        patched.append((owner, attribute, getattr(owner, attribute, _MISSING)))
        setattr(owner, attribute, decode(request["value"]))
    elif op == "unpatch":
        if patched:
            owner, attribute, old = patched.pop()
            if old is _MISSING:
                delattr(owner, attribute)
            else:
                setattr(owner, attribute, old)
    else:
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in decode(request["env"]).items()})


def _rng_state(fresh: bool = False) -> dict[str, Any]:
    """The global random streams tests seed (random, numpy.random), to carry across a call; `fresh`:
    newly seeded ones, as a fresh process has."""
    state: dict[str, Any] = {"random": (random.Random() if fresh else random).getstate()}
    if "numpy" in sys.modules:
        np_random = sys.modules["numpy"].random
        state["numpy"] = (np_random.RandomState() if fresh else np_random).get_state()
    return state


def _set_rng_state(state: Any) -> None:
    if type(state) is not dict:
        return
    if "random" in state:
        random.setstate(state["random"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])


def _importable(value: Any) -> bool:
    """A class of an installed module (not the program's own), which the judge can import itself.
    (Functions stay references: the candidate runs them, as it would in one process.)"""
    if not isinstance(value, type):
        return False
    module = getattr(value, "__module__", None)
    return (
        isinstance(module, str) and module not in ("__main__", "builtins") and "<" not in value.__qualname__
    )


# Modules whose classes, or whose module under another name, the candidate may not have the judge
# import for the tests: they reach processes, files, the interpreter. (A module under its own name,
# `os` for `os`, is what the tests' own `import os` would give them.)
_NOT_FOR_THE_JUDGE = frozenset(
    ("os", "posix", "sys", "subprocess", "shutil", "ctypes", "socket", "signal", "importlib", "builtins",
     "pty", "multiprocessing", "threading", "runpy", "code", "codeop", "pickle", "marshal", "io",
     "tempfile", "pathlib", "gc", "inspect", "types", "leaklab")
)  # fmt: skip


def _judge_import(name: str, module: str, qualname: str) -> Any:
    """What the program imported, imported by the judge itself (from its read-only sys.path)."""
    if not all(part.isidentifier() for part in module.split(".")):
        return None
    own_name = not qualname and name == module.rsplit(".", 1)[-1]
    if module.split(".")[0] in _NOT_FOR_THE_JUDGE and not own_name:
        return None
    try:
        obj: Any = importlib.import_module(module)
    except Exception:
        return None
    for part in qualname.split(".") if qualname else ():
        obj = getattr(obj, part, None) if part.isidentifier() else None
    return obj


def _serve_request(obj: Any, op: str, request: dict[str, Any], decode: Any) -> Any:
    if op == "call":
        return obj(*decode(request["args"]), **decode(request["kwargs"]))
    if op == "getattr":
        return getattr(obj, str(request["name"]))
    if op == "getitem":
        return obj[decode(request["key"])]
    if op == "contains":
        return decode(request["key"]) in obj
    if op in ("len", "str", "repr", "bool"):
        return getattr(builtins, op)(obj)
    if op == "iter":
        out = []
        for item in obj:
            out.append(item)
            if len(out) > MAX_ITEMS:
                raise ValueError(f"more than {MAX_ITEMS} items")
        return out
    if op == "type":
        return [type(obj).__module__, type(obj).__qualname__]
    raise ValueError(f"unknown request {op!r}")


class CandidateLink:
    """The judge's end of a `serve_module` candidate: one request, one reply, plain data both ways."""

    def __init__(self, requests_fd: int, replies_fd: int) -> None:
        self._requests_fd = requests_fd
        self._replies = os.fdopen(replies_fd, "rb", closefd=False)
        self.exported: dict[int, Any] = {}  # the judge's mocks the candidate holds by reference

    def encode(self, value: Any) -> Any:
        """A value of the judge's for the candidate: plain data, a reference back to one of its own
        objects, or to a mock or test function (`_exportable`); nothing else of the judge's."""

        def other(v: Any) -> Any:
            if isinstance(v, RemoteObject):
                return {"$ref": object.__getattribute__(v, "_ref")}
            if _exportable(v):
                self.exported[len(self.exported) + 1] = v
                return {"$jref": len(self.exported)}
            raise values.UnsupportedValue(
                f"a {type(v).__name__} of the tests cannot be sent to the candidate"
            )

        return values.encode(value, rich=True, other=other)

    def _serve_callback(self, message: dict[str, Any]) -> None:
        """The candidate used a mock of ours (see JudgeObject): do it here, answer on the requests pipe."""
        try:
            obj = self.exported[message["jref"]]
            op = message["callback"]
            if op in ("getattr", "setattr"):
                name = str(message["name"])
                # Only what the mocked API has: not the mock's own machinery (assert_*, configure_mock,
                # return_value, ...), which would let the candidate rewrite what the tests check.
                if name.startswith("_") or name in _MOCK_API:
                    raise AttributeError(f"{name} (a mock's own attribute, not the candidate's to use)")
            if op == "setattr":
                out = setattr(obj, name, self.decode(message["value"]))
            elif op == "enter":
                out = obj.__enter__()
            elif op == "exit":
                out = obj.__exit__(None, None, None)
            elif op in ("call", "getattr", "getitem", "iter", "len", "bool", "str"):
                out = _serve_request(obj, op, message, self.decode)
            else:
                raise ValueError(f"unknown callback {op!r}")
            answer = {"cb_ok": self.encode(out)}
        except CandidateFailed:
            raise
        except Exception as err:  # the mock's configured side effect, or a refused request
            answer = {
                "cb_raise": type(err).__name__,
                "module": type(err).__module__,
                "message": str(err)[:500],
            }
        send_request(self._requests_fd, answer)

    def tell(self, request: dict[str, Any]) -> None:
        """A request that is not about a reference (patch, unpatch, environ); its answer must be None."""
        send(self._requests_fd, request)
        reply = self._reply()
        if "ok" not in reply:
            raise CandidateFailed(
                f"the candidate could not apply {request['op']}: {reply.get('message', '')}"
            )

    def _reply(self) -> dict[str, Any]:
        """The answer to the last request, serving the candidate's callbacks on the way."""
        while True:
            message = self.receive()
            if "callback" not in message:
                return message
            self._serve_callback(message)

    def receive(self) -> dict[str, Any]:
        return read_reply(self._replies)

    def decode(self, tree: Any) -> Any:
        try:
            return values.decode(
                tree, rich=True, ref=lambda i: RemoteObject(self, i), jref=self.exported.__getitem__
            )
        except Exception as err:
            raise CandidateFailed(f"the candidate sent a malformed value: {str(err)[:200]}") from None

    def ask(self, op: str, ref: int, **fields: Any) -> Any:
        try:
            request = {"op": op, "ref": ref}
            for name, value in fields.items():
                request[name] = value if name == "name" else self.encode(value)
            if op == "call":  # one random stream, as if tests and program shared a process
                request["rng"] = self.encode(_rng_state())
        except values.UnsupportedValue as err:
            raise JudgeError(f"the tests pass a value that cannot reach the candidate: {err}") from None
        send_request(self._requests_fd, request)
        reply = self._reply()
        if "rng" in reply:
            with contextlib.suppress(Exception):  # a state the program garbled: the stream goes on
                _set_rng_state(self.decode(reply["rng"]))
        if "ok" in reply:
            return self.decode(reply["ok"])
        if "raise" in reply:
            raise _exception(str(reply["raise"]), str(reply.get("module", "")), str(reply.get("message", "")))
        raise no_value(reply)


def _exportable(value: Any) -> bool:
    """What of the judge's the candidate may hold by reference: mocks, the tests' own functions (side
    effects), in-memory streams (a patched sys.stdout the tests read back) and their bound methods.
    Nothing there leads to the judge's files, modules or verdict channel."""
    if isinstance(value, (types.MethodType, types.BuiltinMethodType)):
        value = value.__self__
    if isinstance(value, types.FunctionType):
        return value.__code__.co_filename == "<tests>"
    return isinstance(value, (unittest.mock.NonCallableMock, io.StringIO, io.BytesIO))


# Names of the mock machinery itself: the candidate may not read them on a mock of the tests'.
_MOCK_API = frozenset(dir(unittest.mock.MagicMock)) | frozenset(dir(unittest.mock.NonCallableMagicMock))


def _loaded_class(module: str, qualname: str) -> type | None:
    """The class of that name in this process, if its module is imported already (never imports)."""
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None) if obj is not None and part.isidentifier() else None
    return obj if isinstance(obj, type) else None


def _travels_as_data(kind: type) -> bool:
    if kind.__module__ == "builtins" or issubclass(kind, (datetime.date, datetime.timedelta)):
        return True
    data_types = [(sys.modules.get("numpy"), "ndarray"), (sys.modules.get("numpy"), "generic")]
    data_types += [(sys.modules.get("pandas"), name) for name in ("DataFrame", "Series", "Index")]
    return any(module is not None and issubclass(kind, getattr(module, name)) for module, name in data_types)


def _exception(name: str, module: str, message: str) -> BaseException:
    """The candidate's exception as the judge's own class of that name, so that `assertRaises` sees it;
    a class the judge does not have (or cannot build from a message) fails the test instead."""
    cls = _loaded_class(module or "builtins", name) or getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        with contextlib.suppress(Exception):
            return cls(message)
    return CandidateFailed(f"the candidate raised {name}: {message}")


class RemoteObject(_Reference):
    """A candidate's object that has no plain-data form (its function, a plot, an instance of its
    class). It stays in the candidate process; what the tests ask of it crosses as plain data. It is
    equal only to itself and hashes by identity: no comparison is ever delegated to the candidate."""

    __slots__ = ("_link", "_ref", "_kind")

    def __init__(self, link: CandidateLink, ref: int) -> None:
        object.__setattr__(self, "_link", link)
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_kind", None)

    def _ask(self, op: str, **fields: Any) -> Any:
        return object.__getattribute__(self, "_link").ask(op, object.__getattribute__(self, "_ref"), **fields)

    def __contains__(self, key: Any) -> bool:
        return self._ask("contains", key=key) is True

    def __repr__(self) -> str:
        return str(self._ask("repr"))

    @property
    def __class__(self) -> type:  # isinstance(ref, SomeClass) asks this after type(ref)
        kind = object.__getattribute__(self, "_kind")
        if kind is None:
            named = self._ask("type")
            kind = RemoteObject
            if type(named) is list and len(named) == 2 and all(type(n) is str for n in named):
                kind = _loaded_class(*named) or RemoteObject
                # A genuine value of a type that travels as data would have come as data: an object
                # claiming to be an int, a list, an ndarray or a DataFrame is lying about itself.
                if _travels_as_data(kind):
                    kind = RemoteObject
            object.__setattr__(self, "_kind", kind)
        return kind


def _unittest_problem(test: Any, trace: str) -> str:
    last = trace.strip().splitlines()[-1] if trace.strip() else "failed"
    return f"{test.id().rsplit('.', 1)[-1]}: {last[:300]}"


def judge_unittest(tests: str, test_class: str, requests_fd: int, replies_fd: int) -> dict[str, Any]:
    """The trusted unittest class run against the candidate's module behind references; the verdict."""
    link = CandidateLink(requests_fd, replies_fd)
    namespace = _fresh_main()
    try:
        ready = _loaded(link, "the program")
        names = link.decode(ready.get("globals"))
        if type(names) is not dict:
            raise CandidateFailed("the candidate's globals are malformed")
    except CandidateFailed as err:
        return {"failed": str(err)}
    for name, value in names.items():
        if type(name) is str and name.isidentifier() and not name.startswith("__"):
            namespace[name] = value
    imported = ready.get("imported")
    for name, where in imported.items() if type(imported) is dict else ():
        ok = type(where) is list and len(where) == 2 and all(type(w) is str for w in where)
        ok = ok and type(name) is str and name.isidentifier() and not name.startswith("__")
        if ok and (obj := _judge_import(name, *where)) is not None:
            namespace[name] = obj
    # Fresh random streams, as in a fresh process: the judge serves many checks, and the last program's
    # stream (carried back after each call) must not choose this check's unseeded test inputs.
    _set_rng_state(_rng_state(fresh=True))
    with _shared_files(), _forwarded_patches(link):
        return _run_test_class(tests, test_class, namespace)


@contextlib.contextmanager
def _forwarded_patches(link: CandidateLink):
    """Each patch a test applies (`@patch('requests.get')`, `patch.dict(os.environ, ...)`) is applied
    in the candidate too, with a reference to the judge's mock, and undone with it. One that cannot be
    sent stays the judge's own, and the test sees the real thing."""
    patch, patch_dict = unittest.mock._patch, unittest.mock._patch_dict
    enter, exit_ = patch.__enter__, patch.__exit__
    apply_dict, undo_dict = patch_dict._patch_dict, patch_dict._unpatch_dict
    forwarded: set[int] = set()

    def patch_enter(self: Any) -> Any:
        new, owner = enter(self), self.getter()
        # Where the candidate finds the patched object: a module by name, a class by its module and
        # qualified name (the judge's __main__ is the tests', the candidate's is the program).
        where = ["module", owner.__name__] if isinstance(owner, types.ModuleType) else None
        if isinstance(owner, type):
            where = ["class", owner.__module__, owner.__qualname__]
        try:
            value = link.encode(getattr(owner, self.attribute))
        except values.UnsupportedValue:
            return new
        if where is not None:
            link.tell({"op": "patch", "where": where, "attribute": self.attribute, "value": value})
            forwarded.add(id(self))
        return new

    def patch_exit(self: Any, *exc_info: Any) -> Any:
        if id(self) in forwarded:
            forwarded.discard(id(self))
            link.tell({"op": "unpatch"})
        return exit_(self, *exc_info)

    def then_send_environ(method: Any) -> Any:  # patch.dict of os.environ: the candidate's follows
        def changed(self: Any) -> Any:
            out = method(self)
            if self.in_dict is os.environ:
                link.tell({"op": "environ", "env": link.encode(dict(os.environ))})
            return out

        return changed

    patch.__enter__, patch.__exit__ = patch_enter, patch_exit
    patch_dict._patch_dict, patch_dict._unpatch_dict = (
        then_send_environ(apply_dict),
        then_send_environ(undo_dict),
    )
    try:
        yield
    finally:
        patch.__enter__, patch.__exit__ = enter, exit_
        patch_dict._patch_dict, patch_dict._unpatch_dict = apply_dict, undo_dict


@contextlib.contextmanager
def _shared_files():
    """Tests often make files (tempfile.mkdtemp, relative paths) for the program to read, and read
    what it writes: while a judged unittest runs, the judge works in the run's own directory with
    files and temporary directories open to the program's uid. The run's scratch is its alone."""
    cwd, umask = os.getcwd(), os.umask(0)
    saved = tempfile.tempdir, tempfile.mkdtemp

    def mkdtemp(*args: Any, **kwargs: Any) -> str:
        path = saved[1](*args, **kwargs)
        os.chmod(path, 0o777)
        return path

    try:
        if os.path.isdir(isolation.RUN_DIR):
            os.chdir(isolation.RUN_DIR)
            tempfile.tempdir = "/tmp"
        tempfile.mkdtemp = mkdtemp
        yield
    finally:
        tempfile.tempdir, tempfile.mkdtemp = saved
        os.umask(umask)
        os.chdir(cwd)


def _run_test_class(tests: str, test_class: str, namespace: dict[str, Any]) -> dict[str, Any]:
    if error := _exec(tests, "<tests>", namespace):
        return {"error": f"the test code does not run: {error}"}
    cls = namespace.get(test_class)
    if not (isinstance(cls, type) and issubclass(cls, unittest.TestCase)):
        return {"error": f"the test code defines no unittest.TestCase {test_class}"}
    result = unittest.TestResult()
    try:
        unittest.TestLoader().loadTestsFromTestCase(cls).run(result)
    except BaseException as err:  # the tests' own doing (a JudgeError, SystemExit in a test)
        return {"error": f"the tests could not run: {describe(err, '<tests>', tests)}"}
    if not result.testsRun:
        return {"error": "the test class holds no tests"}
    problems = [_unittest_problem(t, trace) for t, trace in result.failures + result.errors]
    problems += [f"{t.id().rsplit('.', 1)[-1]}: unexpected success" for t in result.unexpectedSuccesses]
    if problems:
        return {
            "failed": f"{len(problems)} of {result.testsRun} tests failed: " + "; ".join(problems[:3]),
            "tests": result.testsRun,
        }
    return {"passed": True, "tests": result.testsRun}


def judge_check(fields: Any, entry_point: str, requests_fd: int, replies_fd: int) -> dict[str, Any]:
    """Run the trusted test code against a proxy of the candidate; the verdict, as a dict."""
    prelude, tests, check_name = fields["prelude"], fields["tests"], fields["check"]
    namespace = _fresh_main()
    if prelude and (error := _exec(prelude, "<prelude>", namespace)):
        return {"error": f"the reference code does not run: {error}"}
    if error := _exec(tests, "<tests>", namespace):
        return {"error": f"the test code does not run: {error}"}
    check = namespace.get(check_name)
    if not callable(check):
        return {"error": f"the test code defines no {check_name}()"}
    proxy = CandidateProxy(entry_point, requests_fd, replies_fd)
    try:
        _loaded(proxy, "the candidate")
    except CandidateFailed as err:
        return {"failed": str(err)}
    # Tests that call the function by name, not through `candidate`, reach the candidate too.
    namespace[entry_point] = proxy
    try:
        check(proxy)
    except JudgeError as err:
        return {"error": str(err)}
    except CandidateFailed as err:
        return {"failed": str(err)}
    except AssertionError as err:
        return {"failed": "a test failed: " + describe(err, "<tests>", tests)}
    except BaseException as err:
        return {"failed": describe(err, "<tests>", tests)}
    return {"passed": True}


def serve_judge(control_fd: int) -> int:
    """Serve the worker's checks over a SOCK_SEQPACKET socket: per check a header with the candidate's
    pipe ends, the test code, and one verdict back. See docs/sandbox.md#judged-checks."""
    isolation.undumpable()  # matters without root, where the candidate has the judge's uid
    isolation.set_process_name(JUDGE_NAME)
    _reset_stdio()
    streams = (sys.stdin, sys.stdout, sys.stderr)
    sock = socket.socket(fileno=control_fd)
    while True:
        header, fds, _, _ = socket.recv_fds(sock, 1 << 16, 2)
        if not header or len(fds) != 2:
            return 0
        meta = json.loads(header)
        payload = read_exact(control_fd, meta["secret_len"])  # in records of its own
        if payload is None:
            return 0
        replies_fd, requests_fd = fds
        try:
            fields = json.loads(payload)  # Sandbox._message's JSON
            if "test_class" not in fields:
                verdict = judge_check(fields, meta["entry_point"], requests_fd, replies_fd)
            else:
                try:
                    verdict = judge_unittest(fields["tests"], fields["test_class"], requests_fd, replies_fd)
                except BaseException as err:  # never without a verdict; the worker reads one record per check
                    verdict = {"failed": f"the check broke off: {type(err).__name__}: {str(err)[:300]}"}
        finally:
            os.close(replies_fd)
            os.close(requests_fd)
            sys.stdin, sys.stdout, sys.stderr = streams  # in case the test code replaced them
        sock.send(json.dumps(verdict, ensure_ascii=False).encode("utf-8", "replace"))


def run_unittest(source: str, tests: str, test_class: str, nonce: str, result_fd: int) -> int:
    """Program and unittest tests in one process; one report line carrying `nonce`."""
    _reset_stdio()
    namespace = _fresh_main()

    def report(**fields: Any) -> int:
        send(result_fd, {"nonce": nonce, **fields})
        _flush()
        return 0

    try:
        compiled_tests = compile(tests, "<tests>", "exec")
    except SyntaxError as err:
        return report(error="the test code does not compile: " + describe(err, "<tests>", tests))
    # What tests rely on, saved before the candidate runs and put back before the tests do: a program
    # that patches builtins or unittest's asserts at load time does not fake a pass.
    saved_builtins = dict(builtins.__dict__)
    classes = (unittest.TestCase, unittest.TestResult, unittest.TestSuite, unittest.TestLoader)
    saved_classes = [(cls, dict(vars(cls))) for cls in classes]
    if error := _exec(source, "<program>", namespace):
        return report(failed=f"the program does not load: {error}")
    builtins.__dict__.update(saved_builtins)
    for cls, saved in saved_classes:
        for name, attr in saved.items():
            if vars(cls).get(name) is not attr:
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(cls, name, attr)
    test_result, test_loader = classes[1], classes[3]
    try:
        exec(compiled_tests, namespace)
        suite = test_loader().loadTestsFromTestCase(namespace[test_class])
    except BaseException as err:
        return report(error="the test code does not run: " + describe(err, "<tests>", tests))
    result = test_result()
    try:
        suite.run(result)
    except BaseException as err:  # SystemExit from the program inside a test, for instance
        return report(failed="the tests were interrupted: " + describe(err, "<program>", source))
    problems = [_unittest_problem(test, trace) for test, trace in result.failures + result.errors]
    return report(tests=result.testsRun, problems=problems[:20], n_problems=len(problems))
