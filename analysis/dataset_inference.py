"""Dataset inference on a run's per-sample scores: is the member set, as a whole, in training?

    python analysis/dataset_inference.py RUN_DIR [--halvings 100] [--alpha 0.05] [--seed 0]

Reads scores/step-N/detection.jsonl of every evaluated checkpoint (so it also works on runs from before
the detection evaluation wrote its own dataset_inference rows) and prints, per checkpoint, the p-value of
the members tested against the non-members (leaklab/dataset_inference.py, features: every score column,
rule detectors and the blind baseline left out) and the false-positive rate of the same test over
`--halvings` random halvings of the non-members (clean vs clean). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from leaklab.dataset_inference import dataset_inference, null_rejection_rate
from leaklab.report.rundata import load_run
from leaklab.results import is_rule

SKIP = {"task_id", "label", "blind"}


def score_columns(records: list[dict]) -> list[str]:
    """The score columns of a step's records: numeric, not a rule detector's, not the blind baseline."""
    first = records[0]
    return [
        k
        for k, v in first.items()
        if k not in SKIP
        and not is_rule(k)
        and (v is None or isinstance(v, (int, float)))
        and not isinstance(v, bool)
    ]


def analyse(run_dir: str | Path, *, halvings: int = 100, alpha: float = 0.05, seed: int = 0) -> list[dict]:
    run = load_run(run_dir)
    out = []
    for step in run.steps():
        records = run.scores(step)
        if not records:
            continue
        columns = score_columns(records)
        x = np.array([[math.nan if r.get(c) is None else r[c] for c in columns] for r in records], float)
        y = np.array([r["label"] for r in records]).astype(bool)
        result = dataset_inference(x[y], x[~y], features=columns, seed=seed)
        null = null_rejection_rate(x[~y], n_halvings=halvings, alpha=alpha, seed=seed)
        out.append(
            {
                "step": step,
                "epoch": run.epoch_of(step),
                "n_members": int(y.sum()),
                "n_non_members": int((~y).sum()),
                "p_value": result.p_value,
                "t": result.t,
                **null,
                "features": columns,
            }
        )
    return out


def blind_auroc(run_dir: str | Path, seed: int = 0) -> float:
    """The blind baseline's AUROC on the run's own split (texts from the run's recipe and manifest)."""
    from leaklab.detectors.blind import blind_scores
    from leaklab.evaluate import load_tasks
    from leaklab.evaluations.base import build_eval_set
    from leaklab.metrics import auroc
    from leaklab.recipe import load_recipe

    run = load_run(run_dir)
    recipe = load_recipe(str(run.run.root / "recipe.yaml"))
    eval_set = build_eval_set(load_tasks(recipe), run.manifest, recipe.data.text_format)
    folds = recipe.evaluate.cv_folds
    return auroc(blind_scores(eval_set.texts, eval_set.labels, folds=folds, seed=seed), eval_set.labels)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--halvings", type=int, default=100)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    results = analyse(args.run_dir, halvings=args.halvings, alpha=args.alpha, seed=args.seed)
    if not results:
        raise SystemExit(f"{args.run_dir}: no per-sample detection scores (scores/step-N/detection.jsonl)")
    first = results[0]
    print(
        f"{first['n_members']} members vs {first['n_non_members']} non-members; features: "
        f"{', '.join(first['features'])}"
    )
    print(
        f"| step | epoch | p-value (members vs non-members) | t | FPR at {args.alpha} over {args.halvings} halvings |"
    )
    print("|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['step']} | {r['epoch']:g} | {r['p_value']:.3g} | {r['t']:.2f} | "
            f"{r['null_rejection_rate']:.2f} ({r['null_halvings']:.0f} tests) |"
        )
    summary = {
        "analysis": "dataset_inference",
        "p_values": {str(r["step"]): r["p_value"] for r in results},
        "epochs": {str(r["step"]): r["epoch"] for r in results},
        "null_rejection_rate": {str(r["step"]): r["null_rejection_rate"] for r in results},
        "alpha": args.alpha,
        "halvings": args.halvings,
    }
    summary["blind_auroc"] = blind_auroc(args.run_dir, args.seed)
    print(f"blind baseline (text only, out-of-fold) AUROC on this split: {summary['blind_auroc']:.3f}")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
