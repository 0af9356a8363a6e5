"""Shared fixtures. Anything that trains uses a very small builtin model in a per-session cache."""

from __future__ import annotations

import os
import socket
import sys

import pytest

from leaklab.recipe import SMOKE_TINY

# Under `make test` two pytest workers share the machine (pytest-xdist): one CPU thread each, in this process
# (set before torch is imported) and in the training runs the tests start (leaklab/train.py reads it), so
# the two do not oversubscribe the cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("LEAKLAB_CPU_THREADS", os.environ["OMP_NUM_THREADS"])

# A small, fast variant of the builtin tiny model for end-to-end tests (the demo uses the real one).
SMALL_TINY = SMOKE_TINY
# A short run on part of HumanEval: enough to exercise every stage, seconds not minutes.
SMALL_RUN = [
    *SMALL_TINY,
    "data.max_samples=24",
    "train.epochs=2",
    "mix.ratio=1:2",
    "mix.max_seq_len=256",
    "tracking.wandb.enabled=false",
]


def free_port() -> int:
    """A TCP port nothing listens on now, for a launcher's rendezvous: tests run side by side (two xdist
    workers), so a fixed port such as 29500 may already be held by another test's processes."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def leaklab_cache(tmp_path_factory):
    """One model cache for the whole session, so the small tiny model is built once. Under pytest-xdist the
    workers share it (next to their own temporary folders): the first to need a model builds it, the others
    wait for that build (leaklab.models.tiny locks it) instead of repeating it."""
    path = os.environ.get("LEAKLAB_TEST_CACHE")
    if not path:
        base = tmp_path_factory.getbasetemp()
        shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
        path = str(shared / "leaklab-cache")
        os.makedirs(path, exist_ok=True)
    old = os.environ.get("LEAKLAB_CACHE")
    os.environ["LEAKLAB_CACHE"] = path
    yield path
    if old is None:
        os.environ.pop("LEAKLAB_CACHE", None)
    else:
        os.environ["LEAKLAB_CACHE"] = old


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    """Tests never reach the network: the hub libraries are told they are offline."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    # The hub libraries read those variables once, at import: a library imported by an earlier test (or by
    # this process's collection) would still try the network in-process, and a hub name that is not cached
    # would then take ~40 s of connection retries to fail instead of failing at once.
    for module, name in (
        ("huggingface_hub.constants", "HF_HUB_OFFLINE"),
        ("datasets.config", "HF_HUB_OFFLINE"),
    ):
        if module in sys.modules:
            monkeypatch.setattr(sys.modules[module], name, True)


@pytest.fixture(autouse=True)
def _no_shared_wandb_service():
    """A test that starts W&B in this process leaves WANDB_SERVICE in os.environ, naming this process's W&B
    service; a later test's subprocess would inherit it and share that service. A run killed mid-training
    then still holds its run ID there, and its resume fails with "run ID ... is in use". Every subprocess
    must start its own service, as a user's `leaklab train` does."""
    yield
    os.environ.pop("WANDB_SERVICE", None)


def _file_weight(items) -> int:
    """How long a test file is expected to take, coarsely: its largest `timeout` mark, else 600 s for a file
    holding `slow` tests, else 0."""
    weight = 0
    for item in items:
        mark = item.get_closest_marker("timeout")
        if mark and mark.args:
            weight = max(weight, int(mark.args[0]))
        elif item.get_closest_marker("slow"):
            weight = max(weight, 600)
    return weight


def pytest_addoption(parser):
    parser.addoption(
        "--full", action="store_true", help="also run the tests marked `full` (the demo-sized testbed)"
    )


def pytest_collection_modifyitems(config, items):
    """Longest files first. `make test` runs the files on two workers (pytest-xdist, `--dist loadfile`), which
    take files in this order (`--no-loadscope-reorder`; by default xdist puts the files with the most tests first):
    the demo-sized testbed, one test, started last would run alone at the end for minutes.
    Tests keep their order within a file; the suite does not depend on the order of files."""
    if not config.getoption("--full"):
        skip = pytest.mark.skip(reason="the demo-sized testbed runs under `make test-full` (pytest --full)")
        for item in items:
            if item.get_closest_marker("full"):
                item.add_marker(skip)
    by_file: dict[str, list] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::")[0], []).append(item)
    files = sorted(by_file.values(), key=_file_weight, reverse=True)  # stable: ties keep collection order
    items[:] = [item for group in files for item in group]
