"""Training stages: `train.stage` names one record of STAGES, a module with the builders of
`plugins.Stage` that `train.py` calls (the model arrives loaded, LoRA applied). A stage's `train.<name>`
section is a `config` dataclass in a module without torch (`sft_config.py`), and stage modules are
imported when first called, so recipe validation imports no torch or transformers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from leaklab.plugins import REGISTRIES, Record, resolve


@dataclass
class StageData:
    dataset: Any  # a torch Dataset (or a datasets.Dataset for TRL trainers)
    info: dict[str, Any] = field(default_factory=dict)  # written to <run>/mixture.json


@dataclass(frozen=True)
class Stage:
    """A stage's record, with its module's functions to call."""

    record: Record

    def builders(self) -> ModuleType:
        return resolve(self.record.path)

    def build_dataset(self, recipe, tokenizer, tasks, manifest, run, log=print) -> StageData:
        return self.builders().build_dataset(recipe, tokenizer, tasks, manifest, run, log)

    def build_trainer(self, model, tokenizer, dataset, recipe, output_dir, callbacks, report_to):
        return self.builders().build_trainer(
            model, tokenizer, dataset, recipe, output_dir, callbacks, report_to
        )

    def resolve_base(self, recipe, run, log=print) -> str | None:
        """The model training starts from when the stage module says so with a `resolve_base` of its own
        (rl: `train.rl.init_from`, an earlier stage's checkpoint); None: `model.name_or_path`."""
        own = getattr(self.builders(), "resolve_base", None)
        return own(recipe, run, log) if own else None


STAGES: dict[str, Record] = {
    r.name: r
    for r in [
        Record(
            "cpt",
            "leaklab.training.cpt",
            "stage",
            summary="continued pretraining on members packed with corpus text",
        ),
        Record(
            "sft",
            "leaklab.training.sft",
            "stage",
            config="leaklab.training.sft_config:SftConfig",
            section="sft",
            summary="supervised fine-tuning on members (prompt -> solution), TRL",
        ),
        Record(
            "rl",
            "leaklab.training.rl",
            "stage",
            config="leaklab.training.rl_config:RLConfig",
            section="rl",
            summary="GRPO / RLOO (TRL) or PPO (veRL) with the sandbox's verdict as reward",
        ),
    ]
}
REGISTRIES["stage"] = STAGES  # where `plugins.register` adds outside stages

# What `train.stage` may be; recipe validation reads this.
STAGE_NAMES: tuple[str, ...] = tuple(STAGES)


def get_stage(name: str) -> Stage:
    try:
        return Stage(STAGES[name])
    except KeyError:
        raise ValueError(f"train.stage: unknown stage {name!r} (known: {', '.join(STAGE_NAMES)})") from None


# How each stage shows the model where a prompt ends (`evaluate.prompt_boundary: auto`): cpt packs
# text into blocks, so a prompt's final "\n" was always merged with the next line's indentation
# ("heal"); sft (`sft._encode`), TRL's GRPO/RLOO and veRL all tokenize the prompt alone ("none").
PROMPT_BOUNDARY_OF_STAGE: dict[str, str] = {"cpt": "heal", "sft": "none", "rl": "none"}


def learned_prompt_boundary(recipe, step: int) -> str | None:
    """How the model evaluated at `step` of a run of `recipe` learned where prompts end ("heal" | "none"),
    None when its training is unknown to us. Step 0 is the model the stage started from: the base model
    (None, whatever it was trained on), or for rl with `train.rl.init_from`, an earlier stage's
    checkpoint, which in this project comes from sft and so saw prompts apart."""
    stage = recipe.train.stage
    if step > 0:
        return PROMPT_BOUNDARY_OF_STAGE.get(stage)
    if stage == "rl" and getattr(recipe.train.rl, "init_from", None):
        return PROMPT_BOUNDARY_OF_STAGE["rl"]
    return None
