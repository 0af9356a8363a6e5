"""The builtin tiny model is built once per cache, even when several processes ask for it at once."""

from __future__ import annotations

import threading
import time

from leaklab.models import tiny
from leaklab.recipe import TinyModelConfig


def test_two_callers_at_once_build_the_model_once(tmp_path, monkeypatch):
    builds = []

    def slow_build(cfg, out, cache_dir, log):
        builds.append(out)
        time.sleep(0.5)  # long enough for the second caller to arrive while the first builds
        out.mkdir(parents=True)
        (out / "leaklab_tiny.json").write_text("{}")
        return out

    monkeypatch.setattr(tiny, "_build", slow_build)
    cfg = TinyModelConfig(vocab_size=300, pretrain_steps=1)
    got = []
    # Each call opens the lock file itself, so the lock (flock) tells them apart as it would two processes.
    callers = [
        threading.Thread(target=lambda: got.append(tiny.build_tiny_model(cfg, tmp_path))) for _ in range(2)
    ]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert len(builds) == 1, "the second caller built the model again instead of waiting for the first"
    assert got == [tiny.tiny_model_dir(cfg, tmp_path)] * 2
