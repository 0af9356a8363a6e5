"""Reward throughput: the RL reward function vs checking one completion at a time, same run.

The completions are what an RL batch holds on HumanEval: for every problem its canonical body (passes),
a wrong body (fails its tests) and the canonical function restated in a fenced chat reply (passes).
Every one of them reaches the sandbox; completions that never do (no code, syntax errors) would only
make the reward look faster, so there are none unless --with-unparsable adds one per problem. All
completions are distinct, so the reward's sharing of verdicts between repeated completions of a group
saves nothing here.

  reward      `CodeReward(...)(prompts, completions, task=[...])` in batches of --batch (one call per
              RL step), over the pool it keeps between calls
  one-by-one  `correctness.check_solution(task, program, sandbox)` for each completion in turn, on a
              started pool of the same size (what a reward function written without batching does)

Rounds alternate A/B and the best of each is kept, so a busy machine hurts both alike; pool start-up
is timed apart (the reward starts its pool once per training).

    python bench/bench_reward.py [--rounds 2] [--workers 2] [--batch 64] [--problems 164]

Prints a table, then one JSON line: {"bench": "reward", "ratio_vs_one_by_one": ..., ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def completions_for(tasks, with_unparsable: bool) -> list[tuple[object, str, bool]]:
    """(task, completion, should_pass) for every task."""
    items = []
    for t in tasks:
        header = t.prompt[: t.prompt.index(f"def {t.entry_point}(")]  # imports and helpers
        chat = (
            f"Here is the function:\n```python\n{header}{t.prompt[len(header) :]}{t.solution}```\nIt works."
        )
        items += [(t, t.solution, True), (t, "    return None\n", False), (t, chat, True)]
        if with_unparsable:
            items.append((t, "    return (\n", False))
    return items


def run_reward(reward, items, batch: int) -> tuple[float, list[float]]:
    from leaklab.execution.rewards import task_to_json

    columns = [task_to_json(t) for t, _, _ in items]  # built by the dataset once, not per step
    start = time.perf_counter()
    rewards: list[float] = []
    for i in range(0, len(items), batch):
        chunk = items[i : i + batch]
        rewards += reward(
            [t.prompt for t, _, _ in chunk], [c for _, c, _ in chunk], task=columns[i : i + batch]
        )
    return time.perf_counter() - start, rewards


def run_one_by_one(sandbox, items) -> tuple[float, list[float]]:
    from leaklab.execution.correctness import check_solution
    from leaklab.execution.extract import candidate

    start = time.perf_counter()
    rewards = []
    for task, completion, _ in items:
        found = candidate(task.prompt, completion, task.entry_point, task.prompt_is_code)
        if found.code is None:
            rewards.append(0.0)
            continue
        rewards.append(float(check_solution(task, found.code, sandbox).passed))
    return time.perf_counter() - start, rewards


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2 * (os.cpu_count() or 1), help="as CodeReward")
    parser.add_argument("--batch", type=int, default=64, help="completions per reward call (an RL step)")
    parser.add_argument("--problems", type=int, default=164)
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--with-unparsable", action="store_true")
    args = parser.parse_args()

    from leaklab.data.benchmarks import load_humaneval
    from leaklab.execution.rewards import CodeReward
    from leaklab.execution.sandbox import Sandbox

    items = completions_for(load_humaneval()[: args.problems], args.with_unparsable)
    expected = [float(p) for _, _, p in items]
    n = len(items)

    t0 = time.perf_counter()
    reward = CodeReward(workers=args.workers, timeout_s=args.timeout)
    reward.check_sandbox()
    start_s = time.perf_counter() - t0
    plain = Sandbox(workers=args.workers, timeout_s=args.timeout, max_output_bytes=1 << 16)
    reward_times, single_times = [], []
    try:
        for _ in range(args.rounds):
            seconds, got = run_reward(reward, items, args.batch)
            if got != expected:
                wrong = sum(a != b for a, b in zip(got, expected))
                raise SystemExit(f"the reward disagrees with the expected verdict on {wrong} of {n}")
            reward_times.append(seconds)
            seconds, got = run_one_by_one(plain, items)
            if got != expected:
                raise SystemExit("checking one by one disagrees with the expected verdicts")
            single_times.append(seconds)
    finally:
        reasons = dict(reward.counts)
        reward.close()
        plain.close()

    reward_rate, single_rate = n / min(reward_times), n / min(single_times)
    print(
        f"{n} completions of {args.problems} HumanEval problems, {args.workers} workers, "
        f"batches of {args.batch}, best of {args.rounds}"
    )
    print(f"{'method':36} {'completions/s':>13}  seconds per round")
    for name, rate, times in (
        ("reward (batched, pool reused)", reward_rate, reward_times),
        ("check_solution one at a time", single_rate, single_times),
    ):
        print(f"{name:36} {rate:13.1f}  {' '.join(f'{t:.2f}' for t in times)}")
    print(f"ratio reward / one-by-one: {reward_rate / single_rate:.2f}x; target >= 150 completions/s")
    print(f"pool start-up {start_s * 1000:.0f} ms (not in the rate); reasons over all rounds: {reasons}")
    print(
        json.dumps(
            {
                "bench": "reward",
                "ratio_vs_one_by_one": round(reward_rate / single_rate, 3),
                "reward_completions_per_s": round(reward_rate, 1),
                "one_by_one_completions_per_s": round(single_rate, 1),
                "n_completions": n,
                "workers": args.workers,
                "batch": args.batch,
                "rounds": args.rounds,
                "pool_start_s": round(start_s, 3),
                "with_unparsable": args.with_unparsable,
            }
        )
    )


if __name__ == "__main__":
    main()
