"""Trainer callbacks: evaluate each checkpoint as it is saved, and record the training loss as rows.

`on_save` fires on every rank; every rank takes part in the evaluation (the signal engine splits the
samples across ranks; ZeRO-3 needs all ranks in each forward), only the main process writes, and a
barrier keeps the ranks in step.
"""

from __future__ import annotations

import sys

from accelerate import PartialState
from transformers import TrainerCallback

from leaklab.evaluate import Evaluator
from leaklab.progress import Progress, interactive
from leaklab.rows import Row
from leaklab.rundir import RunDir


class EvaluateCheckpoints(TrainerCallback):
    """Evaluate the untrained model when training starts (step 0) and every checkpoint after its save."""

    def __init__(self, evaluator: Evaluator, tokenizer, log=print):
        self.evaluator = evaluator
        self.tokenizer = tokenizer
        self.log = log

    def _evaluate(self, model, step: int, epoch: float) -> None:
        state = PartialState()
        was_training = model.training
        model.eval()
        try:
            rows = self.evaluator.evaluate(model, self.tokenizer, step=step, epoch=epoch)
        finally:
            model.train(was_training)
        if state.is_main_process and rows:
            self.log(self.evaluator.summary_line(rows, step, epoch))
        state.wait_for_everyone()

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.evaluator.recipe.evaluate.base_model and state.global_step == 0:
            self._evaluate(model, 0, 0.0)

    def on_save(self, args, state, control, model=None, **kwargs):
        if self.evaluator.recipe.evaluate.every_checkpoint:
            self._evaluate(model, state.global_step, state.epoch or 0.0)


class TrainingRows(TrainerCallback):
    """The Trainer's logs (loss, learning rate, grad norm) as `evaluation: training` rows."""

    def __init__(self, run: RunDir):
        self.run = run

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        epoch = round(float(state.epoch or 0.0), 4)
        rows = [
            Row(key, float(value), step=state.global_step, epoch=epoch, evaluation="training").as_dict()
            for key, value in logs.items()
            if isinstance(value, (int, float)) and key != "epoch"
        ]
        self.run.append_results(rows)


# The Trainer's log keys worth a line, in this order, with their short names.
LOSS_LINE = (("loss", "loss"), ("learning_rate", "lr"), ("grad_norm", "grad norm"), ("reward", "reward"))


class TrainingProgress(TrainerCallback):
    """Off a terminal (a batch job, a log file): leaklab's progress line every 30 s (steps done, rate,
    time left) and one short line per logging step with the loss, in place of the Trainer's tqdm bar
    (carriage returns in a file) and its raw log dicts (hundreds of characters a line under TRL)."""

    def __init__(self, stream=None):
        self.stream = stream
        self.progress: Progress | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.progress = Progress(state.max_steps, "training", unit="step", tty=False, stream=self.stream)
            self.progress.done = float(state.global_step)  # a resumed run starts where it stopped

    def on_step_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(1)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        parts = [
            f"{short} {logs[key]:.4g}" for key, short in LOSS_LINE if isinstance(logs.get(key), (int, float))
        ]
        if not parts:
            return
        if self.progress is not None:
            self.progress.set_postfix(parts[0])
        epoch = f" (epoch {state.epoch:.2f})" if state.epoch is not None else ""
        print(f"[leaklab] step {state.global_step}/{state.max_steps}{epoch}: {', '.join(parts)}",
              file=self.stream or sys.stderr, flush=True)  # fmt: skip

    def on_train_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.close()
            self.progress = None


def plain_progress(trainer, stream=None) -> None:
    """Off a terminal, swap the Trainer's bar and raw log printing for `TrainingProgress`."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    if interactive():
        return
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(TrainingProgress(stream))
