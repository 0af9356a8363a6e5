"""Progress in a log file: nothing for a short phase, then a line every `every_s` seconds or 10%, and a
closing line; a repeated warning is said once and counted."""

from __future__ import annotations

import io
import logging

import leaklab.progress as progress
from leaklab.progress import Progress, say_once


def test_off_a_terminal_a_line_per_interval_or_tenth_and_a_closing_line(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    with Progress(100, "scoring", unit="tok", every_s=30, tty=False, stream=out) as p:
        for t in range(10):  # 10 units a second: 10 s, nothing yet
            clock[0] = t + 1.0
            p.update(1)
        assert out.getvalue() == ""
        clock[0] = 31.0
        p.update(20)  # 30 done at 31 s: the first line
        clock[0] = 32.0
        p.update(5)  # 35%: less than 10% more, and 1 s since the last line: nothing
        p.update(5)  # 40%: 10% more than the last line
        clock[0] = 70.0
        p.update(1)  # 41%, but 38 s since the last line
    lines = out.getvalue().splitlines()
    assert [line.split(": ")[1].split()[0] for line in lines] == ["30%", "40%", "41%", "done"]
    assert lines[0].startswith("[leaklab] scoring: 30% 30/100 tok in 31s")
    assert lines[-1] == "[leaklab] scoring: done 41/100 tok in 70s"


def test_a_short_phase_prints_nothing_and_disabled_prints_nothing(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    with Progress(10, "quick", tty=False, stream=out) as p:
        clock[0] = 5.0
        p.update(10)
    with Progress(10, "off", tty=False, stream=out, enabled=False) as p:
        clock[0] = 100.0
        p.update(10)
    assert out.getvalue() == ""


def test_a_repeated_warning_is_said_once(caplog):
    log = logging.getLogger("leaklab.test_progress")
    with caplog.at_level(logging.WARNING):
        said = [say_once(log, "%d of %d texts were longer than the context", 2, 7164) for _ in range(28)]
        say_once(log, "%d of %d texts were longer than the context", 3, 7164)
    assert said == [True] + [False] * 27
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "2 of 7164 texts were longer than the context",
        "3 of 7164 texts were longer than the context",
    ]


def test_training_off_a_terminal_prints_progress_and_short_loss_lines(tmp_path, monkeypatch):
    import io
    from types import SimpleNamespace

    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from leaklab.training.callbacks import TrainingProgress, plain_progress

    stream = io.StringIO()
    callback = TrainingProgress(stream)
    state = SimpleNamespace(is_world_process_zero=True, max_steps=100, global_step=0, epoch=0.0)
    callback.on_train_begin(None, state, None)
    callback.progress.every_s = 0.0  # a line at once, as after 30 s
    for step in range(1, 11):
        state.global_step, state.epoch = step, step / 100
        callback.on_step_end(None, state, None)
    # What GRPO logs: dozens of keys, some of them long strings; one short line of the ones that matter.
    logs = {"loss": 2.5, "learning_rate": 1e-4, "grad_norm": 0.8, "completions/mean_length": 31.0,
            "reward": 0.45, "completion": "x" * 900}  # fmt: skip
    callback.on_log(None, state, None, logs=logs)
    callback.on_train_end(None, state, None)
    lines = stream.getvalue().splitlines()
    assert "[leaklab] step 10/100 (epoch 0.10): loss 2.5, lr 0.0001, grad norm 0.8, reward 0.45" in lines
    assert any(line.startswith("[leaklab] training: 10% 10/100 step") for line in lines), lines
    assert all(len(line) < 160 and "{" not in line for line in lines), lines

    # In a run the Trainer's bar and raw dict printer give way to it, off a terminal only.
    model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))  # fmt: skip
    trainer = Trainer(model=model, args=TrainingArguments(output_dir=str(tmp_path), report_to="none"))
    monkeypatch.setattr("leaklab.training.callbacks.interactive", lambda: False)
    plain_progress(trainer)
    kinds = {type(c) for c in trainer.callback_handler.callbacks}
    assert TrainingProgress in kinds and ProgressCallback not in kinds and PrinterCallback not in kinds


def test_library_bars_are_quiet_off_a_terminal(monkeypatch):
    import os
    import sys

    import transformers.utils.logging as hf_logging

    from leaklab import progress

    before = os.environ.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    hf_logging.enable_progress_bar()
    try:
        progress.quiet_library_bars()
        assert not hf_logging.is_progress_bar_enabled()
        assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    finally:  # leave the process as it was for the tests after this one
        hf_logging.enable_progress_bar()
        os.environ.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
        if before is not None:
            os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = before
