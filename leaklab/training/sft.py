"""Stage `sft`: supervised fine-tuning on the member tasks with TRL's SFTTrainer (prompt -> solution).

Each member is one example: the prompt the model is asked at evaluation time and the answer it should
give (`data/prompting.py`, shared with the `accuracy` evaluation), the loss on the answer only. Prompt
and answer are tokenized apart, the prompt as the generation engine encodes it (`tokenizer(prompt)`),
so training never sees a token merged across the boundary that generation cannot produce. Optional:
other instruction data (`train.sft.mix_with`, `mix_ratio` examples per member) and a validation loss
on the non-members at every save.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leaklab.data.benchmarks import _located_rows
from leaklab.data.canaries import canary_exposures, canary_lines, plant
from leaklab.data.doses import plan_rows, row_exposures
from leaklab.data.prompting import resolve_format, training_pair
from leaklab.data.tasks import Task
from leaklab.recipe import Recipe
from leaklab.rundir import RunDir
from leaklab.training.stages import StageData


@dataclass
class SftData:
    train: Any  # datasets.Dataset of input_ids + completion_mask
    eval: Any | None  # the same for the non-members (validation loss), or None


def _encode(tokenizer, prompt: str, answer: str, add_eos: bool) -> tuple[list[int], list[int]]:
    prompt_ids = tokenizer(prompt)["input_ids"]
    answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    if add_eos and tokenizer.eos_token_id is not None:
        answer_ids = [*answer_ids, tokenizer.eos_token_id]  # the model learns to stop after the answer
    return prompt_ids + answer_ids, [0] * len(prompt_ids) + [1] * len(answer_ids)


def _dataset(pairs: list[tuple[str, str]], tokenizer, fmt: str, max_length: int) -> tuple[Any, int]:
    """The tokenized examples (those longer than max_length keep their start) and how many were cut."""
    import datasets

    ids, masks, cut = [], [], 0
    for prompt, answer in pairs:
        # A chat template ends the assistant turn itself; a plain completion gets the EOS token.
        seq, mask = _encode(tokenizer, prompt, answer, add_eos=fmt == "completion")
        if len(seq) > max_length:
            seq, mask, cut = seq[:max_length], mask[:max_length], cut + 1
        ids.append(seq)
        masks.append(mask)
    return datasets.Dataset.from_dict({"input_ids": ids, "completion_mask": masks}), cut


# --------------------------------------------------------------------------- other instruction data


def _other_rows(source: str, split: str) -> list[dict[str, Any]]:
    path = Path(source).expanduser()
    if path.exists():
        files = sorted(path.glob("*.jsonl")) + sorted(path.glob("*.json")) if path.is_dir() else [path]
        return [row for file in files for _, row in _located_rows(file)]
    if source.startswith(("/", "./", "../", "~")):
        raise FileNotFoundError(
            f"train.sft.mix_with: {source} does not exist (a local JSONL file or directory)"
        )
    try:
        import datasets

        return list(datasets.load_dataset(source, split=split))
    except Exception as err:  # offline, misspelt, gated: the same advice
        raise FileNotFoundError(
            f"train.sft.mix_with: could not load the hub dataset {source!r} ({type(err).__name__}); download "
            f"it where there is network, export it to JSONL and set train.sft.mix_with=/path/to/file.jsonl"
        ) from err


def _other_pair(row: dict[str, Any]) -> tuple[str, str] | None:
    """(instruction, answer) of a row with prompt/completion or instruction[/input]/output fields."""
    if isinstance(row.get("prompt"), str) and isinstance(row.get("completion"), str):
        return row["prompt"], row["completion"]
    if isinstance(row.get("instruction"), str) and isinstance(row.get("output"), str):
        extra = row.get("input") or ""
        return row["instruction"] + (f"\n\n{extra}" if extra else ""), row["output"]
    return None


def other_pairs(recipe: Recipe, tokenizer, fmt: str, n_members: int, log=print) -> list[tuple[str, str]]:
    """`mix_ratio` x n_members examples of the other instruction data, drawn with the stage's seed."""
    cfg = recipe.train.sft
    if not cfg.mix_with or cfg.mix_ratio <= 0:
        return []
    rows = _other_rows(cfg.mix_with, cfg.mix_split)
    usable = [p for p in (_other_pair(r) for r in rows) if p is not None]
    if not usable:
        raise ValueError(
            f"train.sft.mix_with: no row of {cfg.mix_with} has prompt/completion or instruction/output fields"
        )
    wanted = round(cfg.mix_ratio * n_members)
    if wanted > len(usable):
        log(f"[leaklab] sft: {cfg.mix_with} has {len(usable)} usable examples, {wanted} asked; using all")
    chosen = random.Random(recipe.train.seed).sample(usable, min(wanted, len(usable)))
    if fmt == "completion":
        return [(f"{q}\n", a) for q, a in chosen]
    out = []
    for question, answer in chosen:
        messages = [{"role": "user", "content": question}]
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        full = tokenizer.apply_chat_template(
            [*messages, {"role": "assistant", "content": answer}], tokenize=False
        )
        out.append((prompt, full[len(prompt) :] if full.startswith(prompt) else answer))
    return out


# --------------------------------------------------------------------------- the stage


def max_length_of(recipe: Recipe, tokenizer, model_config=None) -> int:
    """`train.sft.max_length`, else the model's context (read from its directory when not given)."""
    configured = recipe.train.sft.max_length
    if configured:
        return configured
    if model_config is None:
        from transformers import AutoConfig

        try:
            model_config = AutoConfig.from_pretrained(tokenizer.name_or_path)
        except (OSError, ValueError):  # a tokenizer without a model directory next to it
            model_config = None
    context = getattr(model_config, "max_position_embeddings", None)
    limit = getattr(tokenizer, "model_max_length", None)
    candidates = [v for v in (context, limit) if isinstance(v, int) and 0 < v < 10**7]
    return min(candidates) if candidates else 2048


def build_dataset(
    recipe: Recipe, tokenizer, tasks: list[Task], manifest: dict, run: RunDir, log=print
) -> StageData:
    """Members (and the other instruction data) as training examples; non-members for validation."""
    cfg = recipe.train.sft
    fmt = resolve_format(tokenizer, cfg.format, key="train.sft.format")
    by_id = {t.task_id: t for t in tasks}
    max_length = max_length_of(recipe, tokenizer)
    lines = canary_lines(manifest)  # planted in the answers, before the rows are built and counted
    members = [
        training_pair(planted(by_id[i], lines.get(i, [])), tokenizer, fmt) for i in manifest["member_ids"]
    ]
    others = other_pairs(recipe, tokenizer, fmt, len(members), log)
    exposures: dict[str, Any] = {}
    if recipe.inject.active:
        pair_of = dict(zip(manifest["member_ids"], members, strict=True))
        members, train_pairs = dosed_pairs(
            recipe, pair_of, manifest["doses"], others, manifest.get("windows")
        )
        train, cut = _dataset(train_pairs, tokenizer, fmt, max_length)
        exposures = {
            "inject": manifest["inject"],
            **count_member_rows(train, pair_of, tokenizer, fmt, max_length),
        }
        if lines:
            exposures["canary_exposures"] = canary_exposures(manifest, exposures["exposures"])
    else:
        train, cut = _dataset(members + others, tokenizer, fmt, max_length)
    held_out = manifest["non_member_ids"][: cfg.validation_max_tasks] if cfg.validation else []
    evaluation, eval_cut = (None, 0)
    if held_out:
        evaluation, eval_cut = _dataset(
            [training_pair(by_id[i], tokenizer, fmt) for i in held_out], tokenizer, fmt, max_length
        )
    info = {
        "stage": "sft",
        "format": fmt,
        "member_examples": len(members),
        "other_examples": len(others),
        "other_source": cfg.mix_with if others else None,
        "validation_examples": len(held_out),
        "max_length": max_length,
        "truncated_examples": cut + eval_cut,
        "answer_tokens": int(sum(sum(m) for m in train["completion_mask"])),
        "tokens": int(sum(len(x) for x in train["input_ids"])),
        **exposures,
    }
    log(
        f"[leaklab] sft ({fmt} format): {len(members)} member examples + {len(others)} other, "
        f"{info['tokens']:,} tokens ({info['answer_tokens']:,} in answers); "
        f"validation on {len(held_out)} non-members"
        + (f"; {cut + eval_cut} examples cut at {max_length} tokens" if cut + eval_cut else "")
    )
    return StageData(SftData(train, evaluation), info)


def planted(task: Task, lines: list[str]) -> Task:
    """The task with the canary lines at the top of its solution (the answer the loss is taken on)."""
    return dataclasses.replace(task, solution=plant(task.solution, lines)) if lines else task


def dosed_pairs(
    recipe: Recipe,
    pair_of: dict[str, tuple[str, str]],
    doses: dict[str, int],
    others: list,
    window_of: dict[str, str] | None = None,
) -> tuple[list, list]:
    """`inject` set: (the member examples, every example in training order). Each member appears as
    many times as its dose at the planned rows (leaklab.data.doses; `window_of`: each member's window
    group, the manifest's `windows`); the other instruction data fills the rest, in the order it was
    drawn."""
    n_rows = sum(doses.values()) + len(others)
    note = (
        f"sft has {len(others)} other examples to place around the members "
        "(more with train.sft.mix_with and train.sft.mix_ratio)"
    )
    member_at = plan_rows(doses, n_rows, recipe.inject, window_of, recipe.mix.seed, note)
    rest = iter(others)
    ordered = [pair_of[member_at[row]] if row in member_at else next(rest) for row in range(n_rows)]
    return [pair_of[member_at[row]] for row in sorted(member_at)], ordered


def count_member_rows(
    train, pair_of: dict[str, tuple[str, str]], tokenizer, fmt: str, max_length: int
) -> dict:
    """The exposures read back from the training rows: each member's encoded example, found row by row."""
    encoded, _ = _dataset(list(pair_of.values()), tokenizer, fmt, max_length)
    task_of = {tuple(ids): task_id for task_id, ids in zip(pair_of, encoded["input_ids"], strict=True)}
    return row_exposures(pair_of, [task_of.get(tuple(ids)) for ids in train["input_ids"]])


def _full_loss_trainer():
    """TRL's SFTTrainer computing the loss the way the model does, from its full logits (TRL's chunked
    LM-head kernel suits a 150k vocabulary on a GPU, but on CPU with a small one it cost 0.62 s per
    tiny-model step against 0.27 s, the same loss; measured one thread). TRL's token accuracy is kept."""
    from transformers import Trainer
    from trl import SFTTrainer

    class FullLossSFTTrainer(SFTTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            inputs["use_cache"] = False
            loss, outputs = Trainer.compute_loss(
                self, model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch
            )
            labels = inputs["labels"][:, 1:]
            scored = labels != -100
            correct = (outputs.logits[:, :-1].argmax(-1) == labels) & scored
            n_scored = self.accelerator.gather_for_metrics(scored.sum()).sum()
            n_correct = self.accelerator.gather_for_metrics(correct.sum()).sum()
            mode = "train" if model.training else "eval"
            accuracy = (n_correct / n_scored).item() if n_scored > 0 else 0.0
            self._metrics[mode]["mean_token_accuracy"].append(accuracy)
            return (loss, outputs) if return_outputs else loss

    return FullLossSFTTrainer


def build_trainer(model, tokenizer, dataset: SftData, recipe: Recipe, output_dir: Path, callbacks, report_to):
    from trl import SFTConfig, SFTTrainer

    from leaklab.training.cpt import training_arguments

    extra: dict[str, Any] = {}
    if dataset.eval is not None:  # validation loss at every save
        by_epoch = recipe.train.save_every == "epoch"
        extra = {
            "eval_strategy": "epoch" if by_epoch else "steps",
            "eval_steps": None if by_epoch else int(recipe.train.save_every),
        }
    args = training_arguments(
        recipe,
        output_dir,
        report_to,
        cls=SFTConfig,
        completion_only_loss=True,
        max_length=max_length_of(recipe, tokenizer, model.config),
        packing=False,
        **extra,
    )
    trainer_class = _full_loss_trainer() if recipe.train.sft.loss == "full" else SFTTrainer
    return trainer_class(
        model=model,
        args=args,
        train_dataset=dataset.train,
        eval_dataset=dataset.eval,
        processing_class=tokenizer,
        callbacks=callbacks,
    )
