"""Shared fixtures. Anything that trains uses a very small builtin model in a per-session cache."""

from __future__ import annotations

import os

import pytest

from leaklab.recipe import SMOKE_TINY

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


@pytest.fixture(scope="session")
def leaklab_cache(tmp_path_factory):
    """One model cache for the whole session, so the small tiny model is built once."""
    path = os.environ.get("LEAKLAB_TEST_CACHE") or str(tmp_path_factory.mktemp("leaklab-cache"))
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


@pytest.fixture(autouse=True)
def _no_shared_wandb_service():
    """A test that starts W&B in this process leaves WANDB_SERVICE in os.environ, naming this process's W&B
    service; a later test's subprocess would inherit it and share that service. A run killed mid-training
    then still holds its run ID there, and its resume fails with "run ID ... is in use". Every subprocess
    must start its own service, as a user's `leaklab train` does."""
    yield
    os.environ.pop("WANDB_SERVICE", None)
