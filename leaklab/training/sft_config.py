"""The `train.sft` section of a recipe (stage `sft`); imports nothing heavy, so the recipe can read it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass
class SftConfig:
    """`train.sft`: the sft stage (leaklab/training/sft.py)."""

    choices: ClassVar[dict[str, tuple[str, ...]]] = {
        "format": ("auto", "completion", "chat", "evalplus"),
        "loss": ("fused", "full"),
    }

    format: str = "auto"  # auto | completion | chat (auto: chat when the tokenizer has a chat template)
    max_length: int | None = None  # tokens per example (longer ones are cut); None: the model's context
    # Other instruction data mixed in: a local JSONL (prompt/completion or instruction/output) or a hub dataset.
    mix_with: str | None = None
    mix_ratio: float = 0.0  # examples of mix_with per member example (0: members only)
    mix_split: str = "train"  # split of a hub mix_with dataset
    validation: bool = True  # validation loss on the non-members at every save
    validation_max_tasks: int = 256  # at most this many non-members in the validation loss
    # full: the model's own loss over full logits (fastest on CPU and for small vocabularies); fused:
    # TRL's chunked LM head, which never builds the (batch, length, vocab) logits (for large vocabularies).
    loss: str = "fused"

    def check(self, parent=None) -> list[str]:
        if self.mix_ratio < 0 or self.validation_max_tasks < 1:
            return ["train.sft: mix_ratio must be >= 0 and validation_max_tasks >= 1"]
        return []
