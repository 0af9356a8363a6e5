"""Stage `cpt`: continued pretraining on the packed member + corpus stream with the HF Trainer.

`build_dataset` mixes the member texts with corpus text at the recipe's code:web ratio and packs them
into fixed-length blocks; `build_trainer` trains on them (LoRA or full weights, applied by `train.py`),
with a checkpoint every epoch (or every N steps). Nothing here knows about detectors: evaluation hangs
off the Trainer as a callback (`training/callbacks.py`).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from leaklab.data.canaries import canary_exposures, canary_lines, plant
from leaklab.data.corpora import corpus_texts
from leaklab.data.forms import FILE_ID, REPHRASED, file_text
from leaklab.data.mixing import Packing, build_dosed_mixture, build_mixture
from leaklab.data.tasks import Task
from leaklab.detectors.srdetection import SrDetectionConfig
from leaklab.perturb import store
from leaklab.recipe import Recipe, parse_ratio
from leaklab.rundir import RunDir
from leaklab.training.stages import StageData


class PackedBlocks(torch.utils.data.Dataset):
    """Fixed-length token blocks; labels are the inputs (the model shifts them)."""

    def __init__(self, blocks: np.ndarray):
        self.blocks = torch.from_numpy(np.ascontiguousarray(blocks, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = self.blocks[i]
        return {"input_ids": ids, "labels": ids}


def build_dataset(
    recipe: Recipe, tokenizer, tasks: list[Task], manifest: dict, run: RunDir, log=print
) -> StageData:
    """The members' texts mixed with corpus text at code:web by tokens, packed into blocks."""
    by_id = {t.task_id: t for t in tasks}
    code, web = parse_ratio(recipe.mix.ratio)
    corpus = corpus_texts(
        recipe.mix.corpus, split=recipe.mix.corpus_split, text_field=recipe.mix.corpus_text_field
    )
    packing = {"code": code, "web": web, "block_len": recipe.mix.max_seq_len, "seed": recipe.mix.seed}
    if recipe.inject.active:
        return _dosed_dataset(recipe, tokenizer, by_id, manifest, corpus, packing, log)
    member_texts = [by_id[i].text(recipe.data.text_format) for i in manifest["member_ids"]]
    blocks, stats = build_mixture(member_texts, corpus, tokenizer, **packing)
    log(
        f"[leaklab] mixture: {stats['member_tokens']:,} member + {stats['web_tokens']:,} corpus tokens "
        f"in {stats['blocks']} blocks of {stats['block_len']}; code:web requested {stats['requested_ratio']}, "
        f"achieved 1:{stats['achieved_ratio']:g}"
    )
    return StageData(PackedBlocks(blocks), stats)


def _dosed_dataset(
    recipe: Recipe, tokenizer, by_id: dict, manifest: dict, corpus, packing: dict, log
) -> StageData:
    """`inject` set: each member as many times as its dose, at the planned blocks, in training order.
    `corpus` and `packing` (code, web, block_len, seed) are the plain mixture's (`build_dataset`)."""
    lines = canary_lines(manifest)  # planted before packing, so the counts below include them
    documents, doses = member_documents(recipe, by_id, manifest, lines, log)
    blocks, info = build_dosed_mixture(
        documents, doses, corpus, tokenizer, Packing(**packing), recipe.inject, manifest.get("windows")
    )
    if FILE_ID in doses:  # every copy of the file is an exposure of each member in it
        info["exposures"] = {t: info["exposures"][FILE_ID] for t in manifest["member_ids"]} | {
            FILE_ID: info["exposures"][FILE_ID]
        }
    info["inject"] = manifest["inject"]
    if lines:
        info["canary_exposures"] = canary_exposures(manifest, info["exposures"])
    where = manifest["inject"].get("windows") or manifest["inject"]["window"]  # the groups' windows, if any
    log(
        f"[leaklab] mixture: {info['member_exposures']} exposures of {info['member_docs']} documents "
        f"(doses {manifest['inject']['doses']}, window {where}, form "
        f"{recipe.inject.form}), {info['member_tokens']:,} member + {info['web_tokens']:,} corpus tokens in "
        f"{info['blocks']} blocks of {info['block_len']}, in that order; code:web requested "
        f"{info['requested_ratio']}, achieved 1:{info['achieved_ratio']:g}"
    )
    return StageData(PackedBlocks(blocks), info)


def member_documents(
    recipe: Recipe, by_id: dict, manifest: dict, lines: dict, log
) -> tuple[dict[str, str], dict[str, int]]:
    """(document id -> text as trained, document id -> copies per epoch) for the recipe's inject.form
    (leaklab/data/forms.py): each member's own text (its canary lines planted), the one benchmark file,
    or each member's text with the `rephrased` ones as their variant (the manifest's settled forms)."""
    fmt, ids = recipe.data.text_format, manifest["member_ids"]
    if recipe.inject.form == "file":
        ordered = [by_id[i] for i in manifest["file_order"]]
        return {FILE_ID: file_text(ordered)}, {FILE_ID: manifest["inject"]["doses"][0]}
    texts = {i: plant(by_id[i].text(fmt), lines.get(i, [])) for i in ids}
    if recipe.inject.form == "rephrased":
        rephrased = [by_id[i] for i in ids if manifest["forms"][i] == REPHRASED]
        variants = trained_variants(rephrased, log=log)
        missing = [t.task_id for t in rephrased if t.task_id not in variants]
        if missing:  # the manifest settled the forms from the same cached variants
            raise RuntimeError(f"no verified variant of {missing[0]} although the manifest rephrases it")
        texts.update({i: plant(v.text(fmt), lines.get(i, [])) for i, v in variants.items()})
    return texts, manifest["doses"]


def trained_variants(tasks: Sequence[Task], log: Callable[[str], Any] = print) -> dict[str, Task]:
    """task id -> the variant each task is trained as: the first of its verified variants, built with
    SrDetection's default settings (fixed, so the trained text never depends on evaluate.* keys, and
    shared with `srdetection_gray:n=10`'s cached variants); tasks with none are left out."""
    sets = store.variant_sets_for(list(tasks), SrDetectionConfig(), log=log)
    return {t.task_id: vs.variants[0].task for t, vs in zip(tasks, sets) if vs.variants}


def per_device_batch(batch_size: int, micro_batch_size: int, world_size: int) -> int:
    """The largest per-process batch <= micro_batch_size that keeps `train.batch_size`, the global batch
    the recipe promises, exact whatever the number of processes."""
    if batch_size % world_size:
        raise ValueError(f"train.batch_size={batch_size} cannot be split evenly over {world_size} processes")
    micro = min(micro_batch_size, batch_size // world_size)
    while batch_size % (micro * world_size):
        micro -= 1
    return micro


def training_arguments(recipe: Recipe, output_dir: Path, report_to: list[str], cls=None, **extra):
    """The recipe's `train` settings as `cls` (TrainingArguments, or a TRL config such as GRPOConfig,
    given its own settings in `extra`), for this run's number of processes."""
    from transformers import TrainingArguments

    cls = cls or TrainingArguments
    t = recipe.train
    processes = int(os.environ.get("WORLD_SIZE", "1"))  # set by accelerate / torchrun
    micro = per_device_batch(t.batch_size, t.micro_batch_size, processes)
    save_by_epoch = t.save_every == "epoch"
    return cls(
        output_dir=str(output_dir),
        num_train_epochs=t.epochs,
        max_steps=t.max_steps,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=t.batch_size // (micro * processes),
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler,
        warmup_steps=t.warmup_steps,
        weight_decay=t.weight_decay,
        logging_steps=t.logging_steps,
        logging_first_step=True,
        save_strategy="epoch" if save_by_epoch else "steps",
        save_steps=None if save_by_epoch else int(t.save_every),
        save_total_limit=None,  # every checkpoint is evaluated and may be chosen later: keep them all
        bf16=t.bf16,
        deepspeed=t.deepspeed,
        seed=t.seed,
        data_seed=t.seed,
        report_to=report_to,
        run_name=output_dir.parent.name,
        dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),
        **_checkpointing_argument(t.gradient_checkpointing),
        disable_tqdm=False,
        remove_unused_columns=False,
        ddp_find_unused_parameters=False,
        # `inject` plans the order of the training data (doses, window): keep it, every epoch.
        **({"train_sampling_strategy": "sequential"} if recipe.inject.active else {}),
        **extra,
    )


def _checkpointing_argument(enabled: bool) -> dict:
    """transformers 5 renamed `gradient_checkpointing` to `activation_checkpointing`; take what exists.

    Always passed, False included: TRL's configs (SFTConfig, GRPOConfig) default it to True, which
    recomputed every activation unasked (+27% CPU per tiny-model SFT step, measured)."""
    from transformers import TrainingArguments

    params = inspect.signature(TrainingArguments.__init__).parameters
    name = "activation_checkpointing" if "activation_checkpointing" in params else "gradient_checkpointing"
    return {name: enabled}


def build_trainer(
    model, tokenizer, dataset: PackedBlocks, recipe: Recipe, output_dir: Path, callbacks, report_to
):
    from transformers import Trainer, default_data_collator

    return Trainer(
        model=model,
        args=training_arguments(recipe, output_dir, report_to),
        train_dataset=dataset,
        data_collator=default_data_collator,
        processing_class=tokenizer,
        callbacks=callbacks,
    )
