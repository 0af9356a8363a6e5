"""The sft stage end to end on a very small tiny model: train on synthetic members, evaluate accuracy and
detection at every checkpoint, resume from the newest checkpoint, reuse cached generations. Slow."""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SMALL_TINY
from leaklab.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

SMALL_SFT = [
    *SMALL_TINY,
    "data.max_samples=30",
    "data.member_fraction=0.5",
    "train.epochs=2",
    "train.save_every=epoch",  # the recipe saves every 250 steps
    "train.batch_size=8",
    "train.micro_batch_size=8",
    "evaluate.evaluations=[detection,accuracy]",
    "evaluate.detectors=[ppl]",
    "evaluate.n_bootstrap=0",
    "evaluate.accuracy.max_new_tokens=8",
    "evaluate.accuracy.max_tasks=6",
    "evaluate.accuracy.n_samples=2",
    "evaluate.accuracy.ks=[2]",
    "tracking.wandb.enabled=false",
]


def _env(cache: str) -> dict[str, str]:
    env = {**os.environ, "LEAKLAB_CACHE": cache, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    env.pop("WORLD_SIZE", None)
    return env


def _train(cache: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "leaklab/train.py", "recipe=tiny_sft", *SMALL_SFT, f"output_dir={out}"],
        cwd=REPO,
        env=_env(cache),
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_sft_trains_evaluates_accuracy_and_resumes(leaklab_cache, tmp_path):
    out = _train(leaklab_cache, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    (root,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    run = RunDir(root)
    steps = [s for s, _ in run.checkpoint_dirs()]
    assert len(steps) == 2, "a checkpoint per epoch"
    mixture = json.loads(run.mixture.read_text())
    assert mixture["stage"] == "sft" and mixture["format"] == "completion"
    assert mixture["member_examples"] == 15 and mixture["validation_examples"] == 15

    rows = run.results_rows()
    acc = [r for r in rows if r["evaluation"] == "accuracy"]
    assert sorted({r["step"] for r in acc}) == [0, *steps]
    counts = collections.Counter((r["step"], r["column"], r["metric"]) for r in acc)
    assert max(counts.values()) == 1
    for step in (0, *steps):
        got = {(r["column"], r["metric"]): r["value"] for r in acc if r["step"] == step}
        for side in ("members", "non_members", "all"):
            assert 0.0 <= got[(side, "pass@1")] <= 1.0 and 0.0 <= got[(side, "pass@2")] <= 1.0
            assert got[(side, "n_tasks")] == (12 if side == "all" else 6)
            assert got[(side, "n_extraction_failed")] >= 0
        assert got[("gap", "pass@1")] == pytest.approx(
            got[("members", "pass@1")] - got[("non_members", "pass@1")]
        )
        records = [json.loads(x) for x in run.scores(step, "accuracy").read_text().splitlines()]
        assert len(records) == 12 and {r["n"] for r in records} == {2}
        # The default boundary (auto): the fine-tuned checkpoints saw their prompts tokenized as they
        # are and get them so; the base model learned packed text and is healed. Rows and records say so.
        learned = "heal" if step == 0 else "none"
        done = [r for r in acc if r["step"] == step and r["metric"] == "done"]
        assert [r["prompt_boundary"] for r in done] == [learned]
        if step:
            assert {r["prompt_boundary"] for r in records} == {"none"}
        else:
            assert {r["prompt_boundary"] for r in records} <= {"heal", "cut"}
    assert {r["step"] for r in rows if r["evaluation"] == "detection" and r["metric"] == "auroc"} == {
        0,
        *steps,
    }
    assert any(r["metric"] == "eval_loss" for r in rows if r["evaluation"] == "training"), "validation loss"

    # Resume: the last checkpoint and its rows are gone; the same command continues from the first.
    last_step, last_dir = run.checkpoint_dirs()[-1]
    shutil.rmtree(last_dir)
    kept = [
        line for line in run.results.read_text().splitlines(True) if json.loads(line)["step"] != last_step
    ]
    run.results.write_text("".join(kept))
    again = _train(leaklab_cache, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from" in again.stdout and f"checkpoint-{steps[0]}" in again.stdout
    assert [s for s, _ in run.checkpoint_dirs()] == steps
    acc = [r for r in run.results_rows() if r["evaluation"] == "accuracy"]
    assert max(collections.Counter((r["step"], r["column"], r["metric"]) for r in acc).values()) == 1
    assert {r["step"] for r in acc} == {0, *steps}

    # Evaluating a checkpoint again reads its generations and verdicts from the cache.
    first = steps[0]
    kept = [
        line
        for line in run.results.read_text().splitlines(True)
        if not (json.loads(line)["step"] == first and json.loads(line)["evaluation"] == "accuracy")
    ]
    run.results.write_text("".join(kept))
    evaluated = subprocess.run(
        [sys.executable, "-m", "leaklab.cli", "evaluate", str(run.root)],
        cwd=REPO,
        env=_env(leaklab_cache),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert "generations and verdicts of 12 tasks from" in evaluated.stdout

    # The guard of the default: the same checkpoints under prompt_boundary=none score exactly what the
    # default scored (a default that healed an sft model's prompts once halved tiny_sft's pass@1).
    as_is = subprocess.run(
        [sys.executable, "-m", "leaklab.cli", "evaluate", str(run.root), "--into", "as_is",
         "evaluate.prompt_boundary=none", "evaluate.evaluations=[accuracy]"],
        cwd=REPO, env=_env(leaklab_cache), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert as_is.returncode == 0, as_is.stderr[-2000:]
    none_rows = RunDir(run.root / "evaluations" / "as_is").results_rows()

    def pass_at_1(rows):
        return {
            (r["step"], r["column"]): r["value"]
            for r in rows
            if r["evaluation"] == "accuracy" and r["metric"] == "pass@1" and r["step"] > 0
        }

    assert pass_at_1(none_rows) and pass_at_1(none_rows) == pass_at_1(run.results_rows())


def test_chat_format_without_a_chat_template_is_a_clear_error(leaklab_cache, tmp_path):
    from leaklab.data.synthetic import build_synthetic
    from leaklab.models.load import load_tokenizer, resolve_model_path
    from leaklab.recipe import load_recipe
    from leaklab.training import sft

    recipe = load_recipe("tiny_sft", [*SMALL_TINY, "train.sft.format=chat"])
    tokenizer = load_tokenizer(resolve_model_path(recipe.model))
    tasks = build_synthetic(size=4)
    manifest = {
        "member_ids": [t.task_id for t in tasks[:2]],
        "non_member_ids": [t.task_id for t in tasks[2:]],
    }
    with pytest.raises(ValueError, match=r"train\.sft\.format: chat format asked.*no chat template"):
        sft.build_dataset(recipe, tokenizer, tasks, manifest, RunDir(tmp_path), log=lambda *a: None)


def test_trl_configs_recompute_activations_only_when_asked(tmp_path):
    # TRL's SFTConfig defaults gradient checkpointing to True; the recipe's False must reach it.
    from trl import SFTConfig

    from leaklab.recipe import load_recipe
    from leaklab.training.cpt import training_arguments

    for asked in (False, True):
        recipe = load_recipe("tiny_sft", [*SMALL_TINY, f"train.gradient_checkpointing={str(asked).lower()}"])
        args = training_arguments(recipe, tmp_path, [], cls=SFTConfig)
        assert args.gradient_checkpointing is asked


def test_full_loss_equals_trls_fused_loss(leaklab_cache, tmp_path):
    # `train.sft.loss=full` (the model's own cross-entropy) must train on exactly TRL's objective: the
    # same completion-only loss and gradients on one batch, from two independent implementations.
    import torch

    from leaklab.data.synthetic import build_synthetic
    from leaklab.models.load import load_model, load_tokenizer, resolve_model_path
    from leaklab.recipe import load_recipe
    from leaklab.training import sft

    results = {}
    for loss in ("fused", "full"):
        recipe = load_recipe(
            "tiny_sft", [*SMALL_TINY, f"train.sft.loss={loss}", "tracking.wandb.enabled=false"]
        )
        path = resolve_model_path(recipe.model)
        tokenizer = load_tokenizer(path)
        tasks = build_synthetic(size=12)
        manifest = {
            "member_ids": [t.task_id for t in tasks[:8]],
            "non_member_ids": [t.task_id for t in tasks[8:]],
        }
        data = sft.build_dataset(recipe, tokenizer, tasks, manifest, RunDir(tmp_path), log=lambda *a: None)
        model = load_model(path, "float32")
        trainer = sft.build_trainer(model, tokenizer, data.dataset, recipe, tmp_path / loss, [], [])
        batch = trainer.data_collator([data.dataset.train[i] for i in range(8)])
        model.train()
        value = trainer.compute_loss(model, dict(batch))
        value.backward()
        grad = model.get_output_embeddings().weight.grad.clone()
        results[loss] = (value.item(), grad)
        if loss == "full":
            accuracy = trainer._metrics["train"]["mean_token_accuracy"][-1]
            assert 0.0 <= accuracy <= 1.0
    assert results["full"][0] == pytest.approx(results["fused"][0], rel=1e-5)
    assert torch.allclose(results["full"][1], results["fused"][1], atol=1e-6, rtol=1e-4)
