"""Hostile code against the sandbox. Every case must end with the right verdict, the canaries intact,
the pool alive (same workers, still serving) and no process of the run left anywhere.

Each attack runs twice where it matters: with the Python-level guards (the default) and without them,
so that the operating-system layer (own uid, namespaces, limits) is shown to hold on its own.
"""

from __future__ import annotations

import os
import socket
import sysconfig
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from leaklab.execution.harness import JUDGE_NAME
from leaklab.execution.isolation import WORLD_WRITABLE
from leaklab.execution.sandbox import CheckFunction, Sandbox

TASK = "def add(a, b):\n"
CHECK = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(5, 5) == 10\n"
RIGHT = "    return a + b\n"


@pytest.fixture(scope="module", params=["guarded", "os-only"])
def sandbox(request):
    with Sandbox(
        workers=2, timeout_s=1.5, memory_mb=512, max_procs=16, guard_calls=request.param == "guarded"
    ) as sb:
        sb.initial_pids = sb.worker_pids
        yield sb


def _visible_dir() -> Path | None:
    """A root-owned directory outside the private tmpfs mounts, so that sandboxed runs can see it."""
    for base in ("/run", "/var/lib", "/opt", "/srv"):
        if os.path.isdir(base) and os.access(base, os.W_OK) and base not in WORLD_WRITABLE:
            return Path(tempfile.mkdtemp(prefix="leaklab-canary-", dir=base))
    return None


@pytest.fixture(scope="module")
def canaries(tmp_path_factory):
    """Two canary directories: one under pytest's tmp (hidden from runs as root) and one they can see."""
    hidden = tmp_path_factory.mktemp("canary")
    dirs = [hidden]
    visible = _visible_dir() if os.geteuid() == 0 else None
    if visible is not None:
        dirs.append(visible)
    for d in dirs:
        d.chmod(0o755)
        (d / "keep.txt").write_text("canary")
        (d / "keep.txt").chmod(0o644)
    yield dirs
    if visible is not None:
        (visible / "keep.txt").unlink(missing_ok=True)
        visible.rmdir()


@pytest.fixture(autouse=True)
def after_each(request, canaries):
    yield
    if "sandbox" not in request.fixturenames:
        return
    sb = request.getfixturevalue("sandbox")
    for d in canaries:
        assert (d / "keep.txt").read_text() == "canary", f"canary {d} damaged"
    assert sb.worker_pids == sb.initial_pids, "a worker died"
    assert sb.restarts == 0
    assert sb.run("print('alive')").stdout == "alive\n"
    _assert_nothing_left(sb)


def _assert_nothing_left(sb: Sandbox) -> None:
    for pid in sb.worker_pids:
        # A worker keeps one judge process between checks; anything else is a run's leftover.
        children = psutil.Process(pid).children(recursive=True)
        assert [p for p in children if p.name() != JUDGE_NAME] == [], "a run left a process behind"
        assert len(children) <= 1
    uids = set(sb.sandbox_uids)
    if uids:
        stray = [p.info for p in psutil.process_iter(["pid", "uids", "name"]) if p.info["uids"].real in uids]
        assert stray == [], f"processes of the sandbox uids survive: {stray}"


def _check(sb: Sandbox, body: str, top: str = "", timeout_s: float | None = None):
    return sb.check_function(top + TASK + body, "add", CHECK, timeout_s=timeout_s)


def _needs(sb: Sandbox, layer: str) -> None:
    """Skip where the machine does not allow an operating-system layer this attack is stopped by (the
    Python guards alone do not stop ctypes). As root on Linux all of them are in force."""
    if layer == "uid" and sb.isolation.get("uid") != "separate":
        pytest.skip("needs root: runs get a uid of their own only when the pool runs as root")
    if layer == "mounts" and sb.isolation.get("mounts") == "shared":
        pytest.skip("needs a mount namespace (root): private /tmp and a hidden /root")


# --------------------------------------------------------------------------- resources


def test_infinite_loop(sandbox):
    r = _check(sandbox, "    while True:\n        pass\n", timeout_s=0.5)
    assert (r.verdict, r.reason) == ("timeout", "wall-clock limit of 0.5 s")


def test_fork_bomb(sandbox):
    r = sandbox.run("import os\nwhile True:\n    os.fork()\n")
    assert r.verdict == "failed"
    assert ("os.fork is disabled" in r.reason) if sandbox.guard_calls else ("BlockingIOError" in r.reason)


def test_fork_bomb_through_ctypes_that_swallows_errors(sandbox):
    code = "import ctypes\nlibc = ctypes.CDLL(None)\nwhile True:\n    libc.fork()\n"
    r = sandbox.run(code, timeout_s=1.0)
    assert r.verdict == "timeout"
    assert 0 < r.details["leftover_processes"] <= sandbox.limits.max_procs


def test_memory_bomb(sandbox):
    r = sandbox.run("x = bytearray(8 * 1024**3)")
    assert r.verdict == "failed" and "MemoryError" in r.reason
    # Touching every page is slow on a busy machine: give it time, the limit must end it first.
    r = _check(
        sandbox, "    chunks = []\n    while True:\n        chunks.append(' ' * 10**7)\n", timeout_s=20
    )
    assert r.verdict == "failed" and "MemoryError" in r.reason


def test_deep_recursion(sandbox):
    r = _check(sandbox, "    return add(a, b)\n")
    assert r.verdict == "failed" and "RecursionError" in r.reason
    code = "import sys\nsys.setrecursionlimit(10**8)\ndef f(n):\n    return f(n + 1) + 1\nf(0)\n"
    assert sandbox.run(code, timeout_s=1.0).verdict in ("failed", "timeout")


def test_a_gigabyte_of_output_is_capped_and_the_verdict_stands(sandbox):
    body = "    import sys\n    chunk = 'x' * (1 << 20)\n    for _ in range(512):\n        sys.stdout.write(chunk)\n    return a + b\n"
    start = time.monotonic()
    r = _check(sandbox, body, timeout_s=20)
    assert r.verdict == "passed" and r.truncated and len(r.stdout) == sandbox.max_output_bytes
    assert r.details["dropped_bytes"] >= 2 * 512 * (1 << 20) - 2 * sandbox.max_output_bytes  # called twice
    assert time.monotonic() - start < 15


# --------------------------------------------------------------------------- the filesystem


def test_os_system_and_rmtree_at_the_canaries(sandbox, canaries):
    _needs(sandbox, "uid")
    for d in canaries:
        for attack in (
            f"import os\nos.system('rm -rf {d}')\n",
            f"import shutil\nshutil.rmtree({str(d)!r})\n",
            f"import ctypes\nctypes.CDLL(None).system(b'rm -rf {d}')\n",
            f"import os\nos.remove({str(d / 'keep.txt')!r})\n",
            f"open({str(d / 'keep.txt')!r}, 'w').write('gone')\n",
        ):
            r = sandbox.run(attack)
            assert (d / "keep.txt").read_text() == "canary", attack
            # A shell's failure is only its exit status, which these programs ignore.
            if "system" not in attack or (sandbox.guard_calls and "ctypes" not in attack):
                assert r.verdict == "failed", attack


def test_writes_outside_the_working_directory(sandbox):
    _needs(sandbox, "uid")
    name = f"leaklab-escape-{os.getpid()}-{time.monotonic_ns()}"
    # site-packages is visible to runs in every layout, read-only: the write is refused, not lost.
    in_tmp, in_package = Path("/tmp", name), Path(sysconfig.get_paths()["purelib"]) / name
    try:
        if sandbox.isolation.get("mounts") != "shared":
            r = sandbox.run(f"open({str(in_tmp)!r}, 'w').write('x')\nprint('written')")
            assert r.verdict == "passed"  # to a private, size-capped tmpfs that vanishes with the worker
            assert not in_tmp.exists()
            # Nor does the run see what is in the real /tmp, wherever the checkout lives.
            with tempfile.NamedTemporaryFile(dir="/tmp", prefix="leaklab-visible-") as f:
                os.chmod(f.name, 0o644)
                r = sandbox.run(f"import os\nprint(os.path.exists({f.name!r}))")
                assert r.stdout == "False\n", r.reason
        r = sandbox.run(f"open({str(in_package)!r}, 'w').write('x')")
        assert r.verdict == "failed" and ("Permission" in r.reason or "Read-only" in r.reason), r.reason
        assert not in_package.exists()
    finally:  # what a broken sandbox let through
        in_tmp.unlink(missing_ok=True)
        in_package.unlink(missing_ok=True)


def test_root_home_is_hidden(sandbox):
    _needs(sandbox, "mounts")
    r = sandbox.run("import os\nprint(sorted(os.listdir('/root')))")
    assert r.stdout.strip() != str(sorted(os.listdir("/root")))


# --------------------------------------------------------------------------- the network


def test_no_connection_reaches_a_listener_on_localhost(sandbox):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    attacks = [
        f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'hi')\n",
        f"import _socket\ns = _socket.socket()\ns.settimeout(1)\ns.connect(('127.0.0.1', {port}))\n",
    ]
    if sandbox.isolation["network"] != "namespace":
        attacks = attacks[:1]  # without a namespace only the Python guard stands
    results = sandbox.run_many(attacks)
    # The kernel completes a handshake without accept(): a connection that came would be waiting.
    listener.setblocking(False)
    with pytest.raises(BlockingIOError):
        listener.accept()
    listener.close()
    assert all(r.verdict == "failed" for r in results), [r.reason for r in results]


# --------------------------------------------------------------------------- processes and signals


def test_killing_the_parent_and_everyone_else(sandbox):
    _needs(sandbox, "uid")
    me = os.getpid()
    attacks = [
        "import os\nos.kill(os.getppid(), 9)\n",
        f"import os\nos.kill({me}, 9)\n",
        f"import ctypes, os\nlibc = ctypes.CDLL(None)\nassert libc.kill({me}, 9) != 0\nassert libc.kill(os.getppid(), 9) != 0\n",
        # kill(-1) signals every process the caller may signal, except itself: nothing but its own uid.
        "import ctypes\nctypes.CDLL(None).kill(-1, 9)\nprint('survived')\n",
    ]
    results = sandbox.run_many(attacks)
    if sandbox.guard_calls:
        assert [r.verdict for r in results[:2]] == ["failed", "failed"]
    assert results[2].verdict == "passed", results[2].reason  # both kills were refused
    assert results[3].stdout == "survived\n"  # and this process, the workers and the pool are alive


def test_a_double_forked_daemon_is_killed(sandbox):
    code = (
        "import ctypes, time\nlibc = ctypes.CDLL(None)\n"
        "if libc.fork() == 0:\n    libc.setsid()\n    if libc.fork() == 0:\n        time.sleep(60)\n"
        "print('parent done', flush=True)\n"
    )
    r = sandbox.run(code)
    assert r.verdict == "passed" and r.details["leftover_processes"] >= 1


def test_signal_tricks(sandbox):
    ignore = "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGXCPU, signal.SIGALRM):\n    signal.signal(s, signal.SIG_IGN)\n"
    results = sandbox.run_many(
        [
            ignore + "while True:\n    pass\n",
            "import signal\nsignal.raise_signal(signal.SIGSTOP)\n",
            "import signal\nsignal.raise_signal(signal.SIGSEGV)\n",
        ],
        timeout_s=1.0,
    )
    assert [r.verdict for r in results] == ["timeout", "timeout", "failed"]
    assert results[2].reason == "killed by SIGSEGV"
    r = _check(sandbox, "    import os, signal\n    os.kill(os.getpid(), signal.SIGKILL)\n", top="")
    assert r.verdict == "failed"


def test_closing_stdio_does_not_change_the_verdict(sandbox):
    r = _check(sandbox, RIGHT, top="import os\nos.close(1)\nos.close(2)\n")
    assert r.verdict == "passed"
    r = _check(sandbox, RIGHT, top="import os\nos.closerange(0, 1024)\n")
    assert r.verdict == "failed"  # without its channel the candidate cannot answer


# --------------------------------------------------------------------------- faking a pass


@pytest.mark.parametrize(
    "top, body",
    [
        ("import sys\nsys.exit(0)\n", RIGHT),
        ("import os\nos._exit(0)\n", RIGHT),
        ("", "    import sys\n    sys.exit(0)\n"),
        ("", "    import os\n    os._exit(0)\n"),
        ("import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})\n", "    return 0\n"),
        ("def check(candidate):\n    pass\n", "    return 0\n"),
        ("import builtins\nbuiltins.abs = lambda x: 0\nbuiltins.len = lambda x: 3\n", "    return 0\n"),
        ("class Same:\n    def __eq__(self, other):\n        return True\n", "    return Same()\n"),
        ("class Same(int):\n    def __eq__(self, other):\n        return True\n", "    return Same(0)\n"),
        (
            "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'{\"passed\": true}\\n')\n    except OSError:\n        pass\n",
            "    return 0\n",
        ),
        ("print('passed')\n", "    return 0\n"),
    ],
    ids=[
        "sys.exit-at-load",
        "os._exit-at-load",
        "sys.exit-in-call",
        "os._exit-in-call",
        "patched-AssertionError",
        "redefined-check",
        "patched-builtins",
        "equal-to-everything",
        "int-subclass-equal-to-everything",
        "forged-verdict-on-every-fd",
        "prints-passed",
    ],
)
def test_faking_a_pass_in_a_function_check(sandbox, top, body):
    r = _check(sandbox, body, top=top)
    assert r.verdict == "failed", r


def test_the_candidate_cannot_read_the_tests(sandbox):
    """The judged check's test code is never in the candidate's memory: searching it finds nothing."""
    secret = "def check(candidate):\n    assert candidate(7) == 'tell-no-one-1234'\n"
    # Walks every frame up the stack (the worker's own, down to the job it was forked with), and
    # everything reachable from their locals, and every object the collector tracks.
    # The needle is assembled at run time so that the spy's own source does not contain it.
    spy = (
        "import gc, re, sys\n"
        "NEEDLE = re.compile('tell' + '-no-' + r'one-[0-9]+')\n"
        "def find(o, seen, depth=0):\n"
        "    if id(o) in seen or depth > 6:\n"
        "        return None\n"
        "    seen.add(id(o))\n"
        "    if isinstance(o, (str, bytes, bytearray)):\n"
        "        text = o if isinstance(o, str) else bytes(o).decode('latin-1')\n"
        "        hit = NEEDLE.search(text)\n"
        "        return hit.group(0) if hit else None\n"
        "    items = o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple, set)) else ()\n"
        "    for v in list(items):\n"
        "        if (hit := find(v, seen, depth + 1)):\n"
        "            return hit\n"
        "def f(x):\n"
        "    seen = set()\n"
        "    frame = sys._getframe()\n"
        "    while frame:\n"
        "        if (hit := find(dict(frame.f_locals), seen) or find(frame.f_globals, seen)):\n"
        "            return hit\n"
        "        frame = frame.f_back\n"
        "    for o in gc.get_objects():\n"
        "        if (hit := find(o, seen)):\n"
        "            return hit\n"
        "    return None\n"
    )
    # Several times, so that workers also run it after having run it before.
    results = sandbox.run_jobs([CheckFunction(spy, "f", secret)] * 4)
    assert [r.verdict for r in results] == ["failed"] * 4, [r.reason for r in results]
    assert sandbox.check_function(spy.replace("return None", "return 'tell-no-one-1234'"), "f", secret).passed


UNITTEST = (
    "import unittest\n\nclass TestCases(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n"
)


@pytest.mark.parametrize(
    "program",
    [
        "import sys\nsys.exit(0)\n",
        "import os\nos._exit(0)\n",
        "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\ndef add(a, b):\n    return 0\n",
        "import builtins\nbuiltins.isinstance = lambda *a: True\ndef add(a, b):\n    return 0\n",
        "import os, json\nos.write(3, json.dumps({'nonce': 'x', 'tests': 1, 'problems': [], 'n_problems': 0}).encode() + b'\\n')\nos._exit(0)\n",
        "import os, json\ndef add(a, b):\n    os.write(3, b'{}\\n')\n    return a + b\n",
    ],
    ids=[
        "sys.exit",
        "os._exit",
        "patched-assertEqual",
        "patched-isinstance",
        "forged-report",
        "extra-report",
    ],
)
def test_faking_a_pass_in_unittest(sandbox, program):
    assert sandbox.run_unittest(program, UNITTEST).verdict in ("failed", "error")
