"""How often the blind baseline's distribution-shift warning fires on splits with no shift.

A run's manifest splits one benchmark at random, so members and non-members come from the same texts and
any warning there is a false alarm. This script draws random splits of HumanEval at a given size and
counts, per split, three rules on the same out-of-fold blind scores: the old AUROC cut-off (> 0.6), a
one-sided Mann-Whitney test on the pooled scores, and the permutation test leaklab uses
(`leaklab.detectors.blind.shift_pvalue`, level SHIFT_ALPHA).

    python analysis/blind_shift_null.py [--size 20] [--splits 40]

Prints one line per rule, then one JSON line with the counts.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from scipy.stats import mannwhitneyu

from leaklab.data.benchmarks import load_benchmark
from leaklab.detectors.blind import SHIFT_ALPHA, blind_scores, shift_pvalue
from leaklab.metrics import auroc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=20, help="members (and non-members) per split")
    parser.add_argument("--splits", type=int, default=40)
    args = parser.parse_args()

    texts = np.array([t.text("prompt+solution") for t in load_benchmark("humaneval")], dtype=object)
    labels = np.r_[np.ones(args.size, int), np.zeros(args.size, int)]
    alarms = {"auroc_above_0.6": 0, "mann_whitney": 0, "permutation": 0}
    for i in range(args.splits):
        chosen = list(texts[np.random.default_rng(i).choice(len(texts), 2 * args.size, replace=False)])
        scores = blind_scores(chosen, labels, seed=i)
        alarms["auroc_above_0.6"] += int(auroc(scores, labels) > 0.6)
        rank_p = mannwhitneyu(scores[labels == 1], scores[labels == 0], alternative="greater").pvalue
        alarms["mann_whitney"] += int(rank_p < SHIFT_ALPHA)
        alarms["permutation"] += int(shift_pvalue(chosen, labels, seed=i, scores=scores) < SHIFT_ALPHA)
    for rule, count in alarms.items():
        print(f"{rule:>16}: {count} of {args.splits} random {args.size}/{args.size} splits flagged")
    print(json.dumps({"analysis": "blind_shift_null", "size": args.size, "splits": args.splits, **alarms}))


if __name__ == "__main__":
    main()
