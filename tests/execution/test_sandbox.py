"""The sandbox API: kinds of runs, verdicts and their reasons, bad input, the value codec, the pool."""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time

import psutil
import pytest

from leaklab.execution import values
from leaklab.execution.config import (
    REWARD_LAYERS,
    ExecutionConfig,
    WeakerSandboxError,
    require_layers,
)
from leaklab.execution.sandbox import CheckFunction, FunctionCalls, Program, Sandbox, UnitTests

ADD = "def add(a, b):\n    return a + b\n"
CHECK_ADD = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n"


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2, timeout_s=2.0, memory_mb=512) as sb:
        yield sb


# --------------------------------------------------------------------------- kinds of runs


def test_program_reads_stdin_and_writes_stdout(sandbox):
    r = sandbox.run("a, b = map(int, input().split())\nprint(a + b)\n", stdin="2 40\n")
    assert (r.verdict, r.stdout, r.exit_code) == ("passed", "42\n", 0)


def test_program_exit_status_decides_a_plain_run(sandbox):
    assert sandbox.run("import sys\nsys.exit(0)").verdict == "passed"
    r = sandbox.run("import sys\nsys.exit(3)")
    assert (r.verdict, r.exit_code, r.reason) == ("failed", 3, "exited with code 3")
    r = sandbox.run("x = 1\nraise ValueError('bad value')\n")
    assert (
        r.verdict == "failed" and "ValueError: bad value (line 2: raise ValueError('bad value'))" in r.reason
    )
    assert "Traceback" in r.stderr


def test_run_jobs_keeps_the_order_of_its_jobs(sandbox):
    programs = [f"import time\ntime.sleep({0.05 * (i % 3)})\nprint({i})" for i in range(12)]
    results = sandbox.run_jobs([Program(p) for p in programs])
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(12)]


def test_every_run_gets_a_fresh_directory_that_is_removed(sandbox):
    write = "import os\nopen('f', 'w').write('x')\nprint(os.path.join(os.getcwd(), 'f'))"
    first, second = sandbox.run_jobs([Program(write)] * 2)
    assert first.verdict == second.verdict == "passed"
    probe = sandbox.run(f"import os\nprint(os.path.exists({first.stdout.strip()!r}))")
    assert probe.stdout == "False\n"


def test_modules_import_after_the_privilege_drop(sandbox):
    # Preloaded (ctypes) and not preloaded (sqlite3, timeit): the interpreter's own files stay
    # readable to the unprivileged run (a read-only view of the Python install, see isolation.py).
    code = "import ctypes, ctypes.util, sqlite3, timeit\nprint(ctypes.c_int(7).value, sqlite3.sqlite_version_info > (3,))"
    r = sandbox.run(code)
    if sandbox.isolation["root"] and sandbox.isolation["mounts"] == "shared":
        pytest.skip("as root without a mount namespace only preloaded modules import")
    assert (r.verdict, r.stdout) == ("passed", "7 True\n"), r.reason


def test_call_function_returns_plain_values_in_order(sandbox):
    r = sandbox.call_function(ADD, "add", [[1, 2], ["a", "b"], [[1], [2]], [1, None]])
    assert [c.value for c in r.calls[:3]] == [3, "ab", [1, 2]]
    assert not r.calls[3].ok and r.calls[3].error.startswith("TypeError")
    assert r.verdict == "failed" and r.reason.startswith("call 3 failed: TypeError")


def test_call_function_arguments_are_fresh_copies(sandbox):
    code = "def push(xs):\n    xs.append(1)\n    return xs\n"
    r = sandbox.call_function(code, "push", [[[0]], [[0]]])
    assert [c.value for c in r.calls] == [[0, 1], [0, 1]]


def test_call_function_on_a_leetcode_style_class(sandbox):
    code = "class Solution:\n    def twice(self, x):\n        return 2 * x\n"
    assert [c.value for c in sandbox.call_function(code, "twice", [[4]]).calls] == [8]


def test_call_function_returns_nested_values_with_their_types(sandbox):
    code = "def f():\n    xs = [i * i for i in range(4)]\n    return (xs, {'n': len(xs)}, {1.5, 2.5})\n"
    r = sandbox.call_function(code, "f", [[]])
    assert r.verdict == "passed" and r.calls[0].value == ([0, 1, 4, 9], {"n": 4}, {1.5, 2.5})
    assert type(r.calls[0].value) is tuple


def test_check_function_passes_and_fails_with_the_failing_line(sandbox):
    assert sandbox.check_function(ADD, "add", CHECK_ADD).verdict == "passed"
    r = sandbox.check_function("def add(a, b):\n    return a - b\n", "add", CHECK_ADD)
    assert (
        r.verdict == "failed"
        and r.reason == "a test failed: AssertionError (line 2: assert candidate(1, 2) == 3)"
    )


def test_check_function_tests_see_the_trusted_prelude(sandbox):
    prelude = "def double(x):\n    return 2 * x\n\ndef quad(x):\n    return double(double(x))\n"
    tests = "def check(candidate):\n    assert candidate(3) == double(6)\n"
    # The candidate redefines the helper the tests use; the judge keeps the prelude's.
    candidate = "def double(x):\n    return 0\n\ndef quad(x):\n    return 0\n"
    assert sandbox.check_function(prelude, "quad", tests, prelude=prelude).verdict == "passed"
    assert sandbox.check_function(candidate, "quad", tests, prelude=prelude).verdict == "failed"


def test_check_function_candidate_exceptions_reach_the_tests(sandbox):
    tests = "def check(candidate):\n    try:\n        candidate(-1)\n    except ValueError:\n        return\n    assert False\n"
    code = "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n"
    assert sandbox.check_function(code, "f", tests).verdict == "passed"
    r = sandbox.check_function("def f(x):\n    raise KeyError(x)\n", "f", "def check(c):\n    c(1)\n")
    assert r.verdict == "failed" and "KeyError" in r.reason


def test_a_candidate_exception_the_judge_cannot_rebuild_fails_the_check(sandbox):
    # UnicodeDecodeError takes five arguments: rebuilt from its message alone it would raise TypeError in
    # the judge, which tests expecting a TypeError would catch as the candidate's own.
    tests = "def check(candidate):\n    try:\n        candidate()\n    except TypeError:\n        return\n    assert False\n"
    code = "def f():\n    b'\\xff'.decode('utf-8')\n"
    r = sandbox.check_function(code, "f", tests)
    assert r.verdict == "failed" and "UnicodeDecodeError" in r.reason


def test_unittest_passes_and_fails(sandbox):
    tests = (
        "import unittest\n\nclass TestCases(unittest.TestCase):\n"
        "    def test_a(self):\n        self.assertEqual(add(1, 2), 3)\n"
        "    def test_b(self):\n        self.assertEqual(add(0, 0), 0)\n"
    )
    r = sandbox.run_unittest(ADD, tests)
    assert r.verdict == "passed" and r.details["tests"] == 2
    r = sandbox.run_unittest("def add(a, b):\n    return a * b\n", tests)
    assert r.verdict == "failed" and r.reason.startswith("1 of 2 tests failed: test_a")


def test_judged_unittest_keeps_what_tests_rely_on_in_one_process(sandbox):
    """Tests and program in two processes, behaving as one: the program's imports are the tests' too,
    the random streams are shared across calls, a patched sys.stdout catches the program's prints,
    numpy scalars, Counters, arrays and tables keep their types, plots answer as themselves."""
    program = (
        "import random\nfrom collections import Counter\nimport numpy as np\nimport pandas as pd\n"
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "def task_func(n):\n"
        "    print('drawn')\n"
        "    fig, ax = plt.subplots()\n    ax.set_title('T')\n"
        "    frame = pd.DataFrame({'x': np.arange(n)})\n"
        "    return np.random.rand(n), random.random(), Counter('aab'), np.float64(2.5), frame, ax\n"
    )
    tests = (
        "import io, random, unittest\nfrom unittest.mock import patch\n"
        "class TestCases(unittest.TestCase):\n"
        "    def test_it(self):\n"
        "        np.random.seed(0)\n        random.seed(1)\n        random.random()\n"
        "        with patch('sys.stdout', new_callable=io.StringIO) as out:\n"
        "            arr, r, counts, f, frame, ax = task_func(3)\n"
        "        np.random.seed(0)\n        random.seed(1)\n        random.random()\n"
        "        self.assertTrue(np.allclose(arr, np.random.rand(3)))\n"
        "        self.assertEqual(r, random.random())\n"
        "        self.assertEqual(out.getvalue(), 'drawn\\n')\n"
        "        self.assertEqual(counts, Counter('aab'))\n"
        "        self.assertIsInstance(f, np.floating)\n"
        "        pd.testing.assert_frame_equal(frame, pd.DataFrame({'x': np.arange(3)}))\n"
        "        self.assertIsInstance(ax, plt.Axes)\n        self.assertEqual(ax.get_title(), 'T')\n"
    )
    r = sandbox.run_unittest(program, tests, timeout_s=60)
    assert r.verdict == "passed", r.reason


def test_mixed_jobs_in_one_batch(sandbox):
    jobs = [
        Program("print('p')"),
        FunctionCalls(ADD, "add", [[2, 3]]),
        CheckFunction(ADD, "add", CHECK_ADD),
        UnitTests(
            ADD,
            "import unittest\nclass TestCases(unittest.TestCase):\n    def test(self):\n        assert add(1, 1) == 2\n",
        ),
    ]
    results = sandbox.run_jobs(jobs)
    assert [r.verdict for r in results] == ["passed"] * 4
    assert results[0].stdout == "p\n" and results[1].calls[0].value == 5


# --------------------------------------------------------------------------- bad input


def test_code_that_does_not_parse(sandbox):
    r = sandbox.run("def f(:\n    pass\n")
    assert r.verdict == "failed" and "SyntaxError" in r.reason
    r = sandbox.check_function("def add(a, b)\n    return a + b\n", "add", CHECK_ADD)
    assert r.verdict == "failed" and "does not load: SyntaxError" in r.reason
    r = sandbox.call_function("def add(a, b)\n", "add", [[1, 2]])
    assert r.verdict == "failed" and "does not load: SyntaxError" in r.reason


def test_tests_that_do_not_parse_are_an_error_not_a_failure(sandbox):
    r = sandbox.check_function(ADD, "add", "def check(candidate)\n    pass\n")
    assert r.verdict == "error" and "the test code does not run: SyntaxError" in r.reason
    r = sandbox.check_function(ADD, "add", "x = 1\n")
    assert (r.verdict, r.reason) == ("error", "the test code defines no check()")
    r = sandbox.run_unittest(ADD, "class TestCases(:\n")
    assert r.verdict == "error" and "the test code does not run: SyntaxError" in r.reason
    r = sandbox.run_unittest(ADD, "import unittest\nclass TestCases(unittest.TestCase):\n    pass\n")
    assert (r.verdict, r.reason) == ("error", "the test class holds no tests")


def test_missing_entry_point(sandbox):
    r = sandbox.check_function("def plus(a, b):\n    return a + b\n", "add", CHECK_ADD)
    assert r.verdict == "failed" and "entry point 'add' is not defined" in r.reason
    r = sandbox.call_function("x = 1\n", "add", [[1, 2]])
    assert r.verdict == "failed" and "entry point 'add' is not defined" in r.reason


def test_non_utf8_output_is_replaced_not_raised(sandbox):
    r = sandbox.run(
        "import sys\nsys.stdout.buffer.write(b'ok \\xff\\xfe\\n')\nsys.stderr.buffer.write(b'\\x80')"
    )
    assert r.verdict == "passed" and r.stdout == "ok \ufffd\ufffd\n" and r.stderr == "\ufffd"


def test_values_without_a_plain_form_fail_the_call(sandbox):
    r = sandbox.call_function("def f():\n    return (i for i in range(3))\n", "f", [[]])
    assert r.verdict == "failed" and "generator has no plain-data form" in r.reason
    r = sandbox.check_function("def f():\n    return object()\n", "f", "def check(c):\n    c()\n")
    assert r.verdict == "failed" and "not plain data" in r.reason


def test_arguments_without_a_plain_form_are_an_error(sandbox):
    assert sandbox.call_function(ADD, "add", [[object(), 1]]).verdict == "error"
    r = sandbox.check_function(ADD, "add", "def check(c):\n    c(lambda: 1, 2)\n")
    assert r.verdict == "error" and "cannot reach the candidate" in r.reason


def test_timeouts_per_run(sandbox):
    start = time.monotonic()
    r = sandbox.run("while True:\n    pass\n", timeout_s=0.5)
    assert (r.verdict, r.reason) == ("timeout", "wall-clock limit of 0.5 s")
    assert time.monotonic() - start < 3
    r = sandbox.call_function(
        "def f(x):\n    while x:\n        pass\n    return x\n", "f", [[0], [1]], timeout_s=0.5
    )
    assert r.verdict == "timeout" and [c.value for c in r.calls] == [0]


def test_output_is_capped():
    with Sandbox(workers=1, timeout_s=5, max_output_bytes=1000) as sb:
        r = sb.run("print('x' * 5000)\nprint('done')")
    assert r.verdict == "passed" and r.truncated and len(r.stdout) == 1000
    assert r.details["dropped_bytes"] == 5000 + 1 + 5 - 1000


# --------------------------------------------------------------------------- the pool


def test_isolation_is_reported(sandbox):
    iso = sandbox.isolation
    assert iso["network"] in ("namespace", "python-guard") and iso["subreaper"]
    if iso["root"]:  # the pool refuses to run programs as root
        assert iso["uid"] == "separate"
    if iso["mounts"] == "namespace":
        assert "/tmp" in iso["private_dirs"]
    if iso["root"] and iso["mounts"] != "shared":
        # As root every layer is in force (see isolation.py); the hostile tests show each one holding.
        assert iso["mounts"] == "minimal-root" and iso["scratch"] == "per-run"
        assert iso["proc"] == "own-processes-only" and iso["pid"] == "namespace", iso
        assert iso["seccomp"] == "filter", iso


def test_a_worker_that_dies_mid_run_is_replaced():
    with Sandbox(workers=1, timeout_s=10) as sb:
        (pid,) = sb.worker_pids
        killer = threading.Timer(0.3, os.kill, (pid, signal.SIGKILL))
        killer.start()
        r = sb.run("import time\ntime.sleep(5)")
        killer.join()
        assert r.verdict == "error" and "worker died" in r.reason
        assert sb.run("print(1)").stdout == "1\n"
        assert sb.restarts == 1 and sb.worker_pids != [pid]


def test_closed_sandbox_refuses_work_and_leaves_no_worker():
    sb = Sandbox(workers=2)
    pids = sb.worker_pids
    sb.close()
    with pytest.raises(RuntimeError, match="closed"):
        sb.run("print(1)")
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


# --------------------------------------------------------------------------- values codec


def _round_trip(value):
    return values.decode(json.loads(json.dumps(values.encode(value))))


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(10**5000),
        1.5,
        math.inf,
        "é\n\x00",
        b"\x00\xff",
        bytearray(b"ab"),
        1 + 2j,
        [1, [2, (3, frozenset({4}))]],
        {"a": 1, (1, 2): {3}, 4: None},
        {"$tuple": [1]},  # a user dict that looks like a tag stays a dict
    ],
    ids=lambda v: type(v).__name__,
)
def test_codec_round_trips_plain_values(value):
    back = _round_trip(value)
    assert back == value and type(back) is type(value)


def test_codec_decodes_nan_and_rejects_malformed_input():
    assert math.isnan(_round_trip(float("nan")))
    deep: list = []
    for _ in range(values.MAX_DEPTH + 5):
        deep = [deep]
    for bad in [{"$set": [[1]]}, {"$nope": 1}, {"a": 1}, {"$dict": [[1]]}, deep]:
        with pytest.raises(ValueError):
            values.decode(bad)


def test_codec_turns_subclasses_into_their_builtin_type():
    class Liar(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    back = _round_trip(Liar(5))
    assert type(back) is int and back == 5 and back != 6
    with pytest.raises(values.UnsupportedValue):
        values.encode(object())


def test_a_judge_that_dies_or_hangs_is_replaced(sandbox):
    dies = "def check(candidate):\n    import os\n    os._exit(3)\n"
    r = sandbox.check_function(ADD, "add", dies)
    assert (r.verdict, r.reason) == ("error", "the judge exited with code 3 without a verdict")
    hangs = "def check(candidate):\n    while True:\n        pass\n"
    assert sandbox.check_function(ADD, "add", hangs, timeout_s=0.5).verdict == "timeout"
    assert [r.verdict for r in sandbox.run_jobs([CheckFunction(ADD, "add", CHECK_ADD)] * 4)] == ["passed"] * 4


def test_closing_cancels_queued_jobs():
    """Closing waits for the run in flight and cancels the queued ones: decided by counting outcomes,
    not by timing, once an event says the first run has started (its worker has a child)."""
    sb = Sandbox(workers=1, timeout_s=5)
    (worker,) = sb.worker_pids
    outcomes: list[str] = []
    started = threading.Event()

    def submit():
        try:
            # Long enough that close() comes while it runs, even on a busy machine.
            outcomes.append(sb.run("import time\ntime.sleep(1.5)").verdict)
        except BaseException as err:  # CancelledError for the jobs that never started
            outcomes.append(type(err).__name__)

    threads = [threading.Thread(target=submit) for _ in range(20)]
    for t in threads:
        t.start()

    def watch():  # the event: a run's process exists under the worker
        while not started.is_set():
            if psutil.Process(worker).children():
                started.set()
            else:
                time.sleep(0.001)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert started.wait(timeout=60), "no run started"
    deadline = time.monotonic() + 60  # every thread has queued its job (none is refused as too late)
    while sb._queue.qsize() < 19 and time.monotonic() < deadline:
        time.sleep(0.001)
    sb.close()
    for t in threads:
        t.join()
    # The one in flight ran to its end; every queued one was cancelled, none ran after close().
    assert sorted(outcomes) == ["CancelledError"] * 19 + ["passed"], outcomes


def test_rewards_refuse_a_weaker_sandbox_unless_the_recipe_allows_it(sandbox):
    full = {key: wanted for key, wanted, _ in REWARD_LAYERS}
    assert require_layers(full) == [] and ExecutionConfig().allow_weaker_sandbox is False
    weaker = dict(full, seccomp="off", scratch="shared")
    with pytest.raises(WeakerSandboxError, match="seccomp filter.*allow_weaker_sandbox=true"):
        require_layers(weaker)
    assert len(require_layers(weaker, allow_weaker=True)) == 2
    # The pool says what it has: as root on Linux (with libseccomp) every layer is in force.
    if sandbox.isolation["root"] and sandbox.isolation["seccomp"] == "filter":
        assert require_layers(sandbox.isolation) == []
    with Sandbox(workers=1, disable=("seccomp",)) as weak:
        assert require_layers(weak.isolation, allow_weaker=True) == [REWARD_LAYERS[-1][2]]


def test_a_job_queued_while_the_pool_closes_gets_an_answer():
    # A caller that passed the "closed?" check but had not queued its job yet when close() drained the
    # queue used to wait forever (its job sat behind the workers' stop signals).
    sb = Sandbox(workers=1, timeout_s=5)
    in_put, release = threading.Event(), threading.Event()
    plain_put = sb._queue.put

    def slow_put(item, *args, **kwargs):
        if item is not None and not in_put.is_set():
            in_put.set()
            release.wait(10)
        plain_put(item, *args, **kwargs)

    sb._queue.put = slow_put
    outcome: list[str] = []

    def submit():
        try:
            outcome.append(sb.run("print(1)").verdict)
        except BaseException as err:
            outcome.append(type(err).__name__)

    caller = threading.Thread(target=submit, daemon=True)
    caller.start()
    assert in_put.wait(30)
    closer = threading.Thread(target=sb.close, daemon=True)
    closer.start()
    time.sleep(0.3)  # close() is under way (or waiting for the caller's job to be queued)
    release.set()
    caller.join(30)
    closer.join(30)
    # Run (a worker took it before the drain) or cancelled: either way its caller is answered.
    assert outcome in (["passed"], ["CancelledError"])
