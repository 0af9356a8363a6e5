"""The sandbox wherever the interpreter, its virtualenv and leaklab live.

CI runs a fresh clone in a place we do not choose, maybe under /tmp, with its .venv inside. The
worker covers /tmp with a private tmpfs and /root (pyenv's Python, mode 700) with an empty one; what
the interpreter reads must come back read-only at the same paths, and nothing else of them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

import leaklab
from leaklab.execution import isolation

PACKAGE = Path(leaklab.__file__).resolve().parent


# --------------------------------------------------------------------------- what is kept, and where


def test_interpreter_paths_hold_the_python_install_site_packages_and_leaklab():
    paths = isolation.interpreter_paths()
    for needed in (
        sys.base_prefix,
        sys.prefix,
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["purelib"],
        PACKAGE,
    ):
        assert os.path.realpath(needed) in paths
    # The worker runs with cwd "/" and PYTHONPATH at the checkout: neither is kept as a whole.
    assert "/" not in paths and str(PACKAGE.parent) not in paths


@pytest.fixture
def open_dir():
    """A directory every user can enter, on a path every user can enter (pytest's own tmp_path sits
    under /tmp/pytest-of-root, mode 700, which would be the closed directory of every plan)."""
    d = Path(tempfile.mkdtemp(prefix="leaklab-plan-"))
    d.chmod(0o755)
    try:
        if isolation._closed_ancestor(str(d / "x")) is not None:
            pytest.skip(f"{d} lies under a directory closed to other users")
        yield d
    finally:
        shutil.rmtree(d)


def test_plan_keeps_paths_under_a_private_dir_and_never_the_dir_itself(open_dir):
    shared = open_dir / "tmp"  # stands in for /tmp
    venv = shared / "clone" / "repo" / ".venv"
    site = venv / "lib" / "site-packages"
    package = shared / "clone" / "repo" / "leaklab"
    elsewhere = open_dir / "opt" / "lib"
    for d in (site, package, elsewhere):
        d.mkdir(parents=True)
    (shared / "clone").chmod(0o700)  # as `mktemp -d` makes it

    plan = isolation.plan_mounts(
        [str(venv), str(site), str(package), str(shared), str(elsewhere), "/"],
        world_writable=(str(shared), str(open_dir / "missing")),
    )

    assert plan.private == (str(shared),)  # a directory that does not exist is not covered
    # The venv brings its site-packages along; the private dir itself and "/" are never kept whole,
    # and a path outside every covered directory needs no mount.
    assert sorted(plan.kept) == [(str(venv), str(shared)), (str(package), str(shared))]
    # The closed directory under the private one is covered already: no tmpfs of its own.
    assert plan.closed == ()


def test_plan_covers_a_closed_directory_on_the_way_to_a_kept_path(open_dir):
    home = open_dir / "home"  # like /root, or a home directory of mode 700
    python = home / ".pyenv" / "versions" / "3.11"
    python.mkdir(parents=True)
    home.chmod(0o700)
    plan = isolation.plan_mounts([str(python), str(home)], world_writable=())
    # Only the kept path comes back: the closed directory itself is not opened.
    assert plan.closed == (str(home),) and plan.kept == ((str(python), str(home)),)


# --------------------------------------------------------------------------- end to end

# Runs in the interpreter of a virtualenv under /tmp; prints what each program did in the sandbox.
DRIVER = """
import json, sys
from leaklab.execution.sandbox import Sandbox

programs = json.loads(sys.stdin.read())
with Sandbox(workers=1, timeout_s=10) as sb:
    results = sb.run_many(programs)
    print(json.dumps({
        "isolation": sb.isolation,
        "results": [[r.verdict, r.stdout, r.reason] for r in results],
    }))
"""


def test_a_checkout_and_virtualenv_under_tmp():
    # Like CI's fresh clone: a mode-700 directory under /tmp holding the checkout and its .venv.
    root = Path(tempfile.mkdtemp(prefix="leaklab-layout-", dir="/tmp"))
    escape = Path(f"/tmp/leaklab-layout-escape-{os.getpid()}")
    try:
        venv, checkout = root / "venv", root / "checkout"
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
            check=True,
            timeout=120,
        )
        python = venv / "bin" / "python"
        site = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        assert site.startswith(str(venv))
        # A module only this venv has, imported lazily (after the privilege drop), like numpy.
        Path(site, "leaklab_layout_probe.py").write_text("VALUE = 42\n")
        shutil.copytree(PACKAGE, checkout / "leaklab", ignore=shutil.ignore_patterns("__pycache__"))
        secret = root / "not-for-runs.txt"
        secret.write_text("secret")
        secret.chmod(0o644)

        programs = [
            # Not preloaded: read from the stdlib under /root and the venv under /tmp after the drop.
            "import ctypes.util, sqlite3, timeit, leaklab_layout_probe\nprint(leaklab_layout_probe.VALUE)",
            f"open({str(escape)!r}, 'w').write('x')\nprint('written')",
            f"import os\nprint(os.path.exists({str(secret)!r}), sorted(os.listdir({str(root)!r})))",
            f"open({str(Path(site, 'planted.py'))!r}, 'w').write('x')",
            f"import leaklab.execution.values as v\nprint(v.__file__.startswith({str(checkout)!r}))",
        ]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(checkout)}
        done = subprocess.run(
            [python, "-c", DRIVER],
            input=json.dumps(programs),
            capture_output=True,
            text=True,
            env=env,
            cwd=checkout,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        iso, (imports, escaped, listing, planted, own) = report["isolation"], report["results"]

        assert imports[:2] == ["passed", "42\n"], imports[2]
        assert own[:2] == ["passed", "True\n"], own[2]
        if iso["mounts"] != "minimal-root":
            pytest.skip("needs a mount namespace (root) for a private /tmp")
        assert iso["scratch_rebind"] == [str(venv)]
        assert escaped[:2] == ["passed", "written\n"] and not escape.exists()
        # Of the real /tmp a run sees the venv, read-only, and nothing else: not the checkout (the
        # worker imported leaklab before it pivoted into its minimal root).
        assert listing[:2] == ["passed", "False ['venv']\n"], listing[2]
        assert planted[0] == "failed" and "Read-only" in planted[2], planted[2]
        assert not Path(site, "planted.py").exists()
    finally:
        shutil.rmtree(root, ignore_errors=True)
        escape.unlink(missing_ok=True)  # where a broken sandbox let it through
