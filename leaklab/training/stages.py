"""Training stages: `train.stage` names one entry of STAGES; `train.py` calls its two builders.

A stage is one module with two functions, and one line below:

    build_dataset(recipe, tokenizer, tasks, manifest, run, log) -> StageData
        what the trainer trains on, built from the manifest's members (and whatever else the stage
        mixes in); `info` says what went in and is written to the run's mixture.json.
    build_trainer(model, tokenizer, dataset, recipe, output_dir, callbacks, report_to) -> Trainer
        a transformers `Trainer` (TRL's trainers are subclasses) that saves checkpoints to output_dir
        and calls `callbacks`, which evaluate every checkpoint.

The model arrives loaded, with LoRA applied when the recipe asks (`models/lora.py`); resume, the
evaluation and the summary are `train.py`'s. Stage modules are named by string and imported when a
builder is first called, so reading the names (recipe validation) imports no torch or transformers.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any


@dataclass
class StageData:
    dataset: Any  # a torch Dataset (or a datasets.Dataset for TRL trainers)
    info: dict[str, Any] = field(default_factory=dict)  # written to <run>/mixture.json


@dataclass(frozen=True)
class Stage:
    name: str
    module: str  # the module that defines build_dataset and build_trainer
    summary: str

    def builders(self) -> ModuleType:
        return importlib.import_module(self.module)

    def build_dataset(self, recipe, tokenizer, tasks, manifest, run, log=print) -> StageData:
        return self.builders().build_dataset(recipe, tokenizer, tasks, manifest, run, log)

    def build_trainer(self, model, tokenizer, dataset, recipe, output_dir, callbacks, report_to):
        return self.builders().build_trainer(
            model, tokenizer, dataset, recipe, output_dir, callbacks, report_to
        )

    def resolve_base(self, recipe, run, log=print) -> str | None:
        """The model training starts from when the stage module says so with a `resolve_base` of its own
        (rl: `train.rl.init_from`, an earlier stage's checkpoint); None: `model.name_or_path`."""
        hook = getattr(self.builders(), "resolve_base", None)
        return hook(recipe, run, log) if hook else None


STAGES: dict[str, Stage] = {
    "cpt": Stage("cpt", "leaklab.training.cpt", "continued pretraining on members packed with corpus text"),
    "sft": Stage(
        "sft", "leaklab.training.sft", "supervised fine-tuning on members (prompt -> solution), TRL"
    ),
    "rl": Stage(
        "rl", "leaklab.training.rl", "GRPO / RLOO (TRL) or PPO (veRL) with the sandbox's verdict as reward"
    ),
}

# What `train.stage` may be; recipe validation reads this.
STAGE_NAMES: tuple[str, ...] = tuple(STAGES)


def get_stage(name: str) -> Stage:
    try:
        return STAGES[name]
    except KeyError:
        raise ValueError(f"train.stage: unknown stage {name!r} (known: {', '.join(STAGE_NAMES)})") from None
