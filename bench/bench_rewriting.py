"""MRI rewriting: rule-based rewrites of HumanEval validated in the sandbox, and acceptance per type.

  batched     `rewriting.rewrite_tasks(tasks, sandbox)`: the originals in one batch on the pool, then
              every candidate of every task in one batch (what the MRI sets are built with)
  one-by-one  the same candidates, each run by `sandbox.call_function` in turn on a started pool of
              the same size (a validation loop written without batching), on the first --naive tasks;
              compared per candidate

Pool start-up is timed apart. The target: all 164 tasks in <= 2 minutes on 2 cores, and at
least 5 of the 8 logic-change types with accepted rewrites.

    python bench/bench_rewriting.py [--workers 2] [--naive 40] [--smoke]

Prints a table, then one JSON line: {"bench": "rewriting", "ratio_vs_one_by_one": ..., ...}.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter


def main() -> None:
    from leaklab.data.benchmarks import load_humaneval
    from leaklab.execution.sandbox import Sandbox
    from leaklab.perturb.rewriting import (
        LOGIC_TYPES,
        call_inputs,
        candidate_edits,
        edited_task,
        rewrite_tasks,
    )

    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--naive", type=int, default=40, help="tasks validated one candidate at a time")
    parser.add_argument("--smoke", action="store_true", help="6 tasks, 3 of them one at a time")
    args = parser.parse_args()
    tasks = load_humaneval()[: 6 if args.smoke else None]
    if args.smoke:
        args.naive = 3
    started = time.perf_counter()
    with Sandbox(workers=args.workers, timeout_s=5.0) as sandbox:
        start_s = time.perf_counter() - started
        t0 = time.perf_counter()
        results = rewrite_tasks(tasks, sandbox)
        batched_s = time.perf_counter() - t0
        n_candidates = sum(sum(r.tried.values()) for r in results) + len(tasks)

        # The same work one call at a time, on the first --naive tasks.
        t0 = time.perf_counter()
        naive_jobs = 0
        for task in tasks[: args.naive]:
            try:
                inputs = call_inputs(task)
            except ValueError:
                continue
            original = sandbox.call_function(task.program(), task.entry_point, inputs)
            naive_jobs += 1
            first_out = original.calls[0].value if original.calls and original.calls[0].ok else None
            sites = candidate_edits(
                task, random.Random(f"rewrite-sites:0:{task.task_id}"), inputs[0], first_out, True
            )
            for edits in sites.values():
                for edit in edits[:2]:
                    program, _ = edited_task(task, edit)
                    sandbox.call_function(program, task.entry_point, inputs)
                    naive_jobs += 1
        naive_s = time.perf_counter() - t0

    tried, accepted, chosen = Counter(), Counter(), Counter()
    for r in results:
        tried.update(r.tried)
        accepted.update(r.accepted)
        chosen[r.logic_type] += 1
    print(f"{'logic type':24} {'tried':>6} {'accepted':>9} {'rate':>6} {'chosen':>7}")
    for t in LOGIC_TYPES:
        rate = accepted[t] / tried[t] if tried[t] else 0.0
        print(f"{t:24} {tried[t]:6d} {accepted[t]:9d} {rate:6.2f} {chosen[t]:7d}")
    rewritten = sum(r.task is not None for r in results)
    print(f"\n{rewritten}/{len(tasks)} tasks rewritten in {batched_s:.1f}s (+{start_s:.1f}s pool start), "
          f"{n_candidates} programs run")  # fmt: skip
    batched_rate = n_candidates / batched_s
    naive_rate = naive_jobs / naive_s
    print(f"batched {batched_rate:.1f} programs/s, one-by-one {naive_rate:.1f} programs/s")
    print(
        json.dumps(
            {
                "bench": "rewriting",
                "ratio_vs_one_by_one": round(batched_rate / naive_rate, 3),
                "tasks": len(tasks),
                "rewritten": rewritten,
                "seconds": round(batched_s, 2),
                "pool_start_s": round(start_s, 2),
                "types_with_accepted": sum(1 for t in LOGIC_TYPES if accepted[t]),
                "acceptance": {
                    t: round(accepted[t] / tried[t], 3) if tried[t] else None for t in LOGIC_TYPES
                },
                "workers": args.workers,
            }
        )
    )


if __name__ == "__main__":
    main()
