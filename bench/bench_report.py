"""`leaklab report` on a run the size of the demo's: wall and CPU time, and the size of the page.

The demo (`make demo`, recipe tiny_cpt) evaluates 164 HumanEval samples (82 members, 82 non-members) at
9 checkpoints (step 0 and 8 epochs) with 12 detector columns (ppl, zlib, lowercase, mink@0.2,
minkpp@0.2, dcpdd, ref, ref_diff, srdetection_gray at n = 1, 3, 5, 10), every metric with its bootstrap
interval, per-sample scores at every checkpoint, and the Trainer's loss every 10 steps. By default this
script writes a run of exactly that shape with random scores (what the report costs does not depend on
the values); `--run RUN_DIR` times a real run instead.

Timed: `python -m leaklab.cli report RUN_DIR` as a user runs it (interpreter start and imports
included), first with no report/ yet (the plotting library's bundle is written once), then again.
There is no other way to build this page to compare with: the bench checks the targets below. (It
used to time the markdown report of an old commit, read from git history; that code is gone from
the tree and a shallow clone has no history.)

    python bench/bench_report.py [--run RUN_DIR] [--repeats 2] [--smoke]

`--smoke`: a run of 20 samples at 2 checkpoints, timed once: the script still works, no more.

Targets: <= 10 s on 2 cores; index.html + vega-bundle.js <= 5 MB. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
COLUMNS = [
    ("ppl", "ppl", {}), ("zlib", "zlib", {}), ("lowercase", "lowercase", {}), ("mink@0.2", "mink", {"k": 0.2}),
    ("minkpp@0.2", "minkpp", {"k": 0.2}), ("dcpdd", "dcpdd", {}), ("ref", "ref", {}), ("ref_diff", "ref", {}),
    *[(f"srdetection_gray@n={n}", "srdetection_gray", {"n": n}) for n in (1, 3, 5, 10)],
]  # fmt: skip
SCORE_METRICS = ["auroc", "tpr@1%fpr", "tpr@5%fpr", "accuracy", "precision", "recall", "f1", "precision_member",
                 "recall_member", "f1_oracle", "accuracy_oracle", "precision_oracle", "recall_oracle"]  # fmt: skip


def demo_shaped_run(root: Path, n: int = 164, epochs: int = 8, steps_per_epoch: int = 42) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    ids = [f"HumanEval/{i}" for i in range(n)]
    half = n // 2
    (root / "recipe.yaml").write_text(
        "model:\n  name_or_path: builtin:tiny\ntrain:\n  stage: cpt\nmix:\n  ratio: '1:5'\n"
        "evaluate:\n  n_bootstrap: 1000\nseed: 0\n"
    )
    manifest = {"benchmark": "humaneval", "data_source": "builtin", "seed": 0, "n_members": half,
                "n_non_members": n - half, "member_ids": ids[:half], "non_member_ids": ids[half:]}  # fmt: skip
    (root / "manifest.json").write_text(json.dumps(manifest))
    (root / "mixture.json").write_text(json.dumps({"requested_ratio": "1:5", "achieved_ratio": 5.0,
                                                   "member_tokens": 20000, "web_tokens": 100000}))  # fmt: skip
    (root / "environment.json").write_text(json.dumps({"python": "3.11", "versions": {}, "git": None}))
    rows = []
    labels = np.array([1] * half + [0] * (n - half))
    for e in range(epochs + 1):
        step = e * steps_per_epoch
        base = {"step": step, "epoch": float(e), "evaluation": "detection"}
        records = [{"task_id": t, "label": int(y)} for t, y in zip(ids, labels)]
        for column, family, params in COLUMNS:
            scores = rng.normal(size=n) + labels * 0.1 * e
            for rec, s in zip(records, scores):
                rec[column] = float(s)
                if family.startswith("srdetection"):
                    rec[f"{column}:leak"] = int(s > 0.5)
            head = {**base, "detector": family, "params": params, "column": column}
            for metric in SCORE_METRICS:
                v = float(rng.uniform(0.3, 0.9))
                rows += [{**head, "metric": metric, "value": v},
                         {**head, "metric": f"{metric}_ci_low", "value": v - 0.1},
                         {**head, "metric": f"{metric}_ci_high", "value": v + 0.1}]  # fmt: skip
            rows += [
                {**head, "metric": m, "value": 0.0} for m in ("threshold_cv", "threshold_oracle", "cv_folds")
            ]
        rows.append({**base, "detector": None, "column": None, "metric": "done", "value": float(n),
                     "n_members": half, "n_non_members": n - half, "seconds": 10.0})  # fmt: skip
        out = root / "scores" / f"step-{step}"
        out.mkdir(parents=True, exist_ok=True)
        (out / "detection.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    for s in range(10, epochs * steps_per_epoch + 1, 10):
        base = {
            "step": s,
            "epoch": s / steps_per_epoch,
            "evaluation": "training",
            "detector": None,
            "column": None,
        }
        rows += [
            {**base, "metric": "loss", "value": 3.0 - s / 200},
            {**base, "metric": "learning_rate", "value": 3e-3},
        ]
    (root / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=REPO)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", help="a real run directory (default: a demo-shaped synthetic run)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="a small run, timed once")
    args = parser.parse_args(argv)
    shape = {"n": 20, "epochs": 1, "steps_per_epoch": 4} if args.smoke else {}
    repeats = 1 if args.smoke else args.repeats
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        run = Path(args.run) if args.run else demo_shaped_run(tmp / "demo-run", **shape)
        report = run / "report"
        for p in report.glob("*") if report.exists() else []:
            p.unlink()
        cli = [sys.executable, "-m", "leaklab.cli", "report", str(run)]
        first = timed(cli)
        again = min((timed(cli) for _ in range(repeats)), key=lambda t: t[0])
        size = (report / "index.html").stat().st_size + (report / "vega-bundle.js").stat().st_size
    if args.run:
        print(f"run: {args.run}")
    else:
        n, checkpoints = shape.get("n", 164), shape.get("epochs", 8) + 1
        print(f"run: demo-shaped synthetic ({n} samples, {checkpoints} checkpoints, 12 columns)")
    load = os.getloadavg()[0]
    # On a shared machine wall time includes waiting for the CPU: CPU time is what the report costs.
    print(f"cores: {os.cpu_count()}, load average {load:.1f}\n")
    print(f"{'what':<48}{'wall s':>8}{'CPU s':>8}")
    print(f"{'leaklab report, first (bundle written)':<48}{first[0]:>8.2f}{first[1]:>8.2f}")
    print(f"{'leaklab report, again':<48}{again[0]:>8.2f}{again[1]:>8.2f}")
    print(f"\nindex.html + vega-bundle.js: {size / 1e6:.2f} MB (target <= 5 MB); time target <= 10 s")
    result = {
        "bench": "report",
        "wall_s_first": round(first[0], 2),
        "wall_s": round(again[0], 2),
        "cpu_s": round(again[1], 2),
        "page_mb": round(size / 1e6, 3),
        "load_avg": round(load, 1),
        "meets_targets": first[0] <= 10 and size <= 5e6,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
