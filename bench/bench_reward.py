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

On a shared machine the wall-clock rate says more about the neighbours than about the reward, so each
round also counts the CPU time it cost: this process and every process below it (sandbox workers,
their judges and candidates, alive or already reaped). `cpu_bound_per_s` = cores / CPU seconds per
completion is the rate the same work reaches when it has the machine's cores to itself (the sandbox's
waits overlap across workers, so an idle machine runs CPU-bound); the table says which number is which.

    python bench/bench_reward.py [--rounds 2] [--workers 2] [--batch 64] [--problems 164] [--smoke]

Prints a table, then one JSON line: {"bench": "reward", "ratio_vs_one_by_one": ..., ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

TICKS = os.sysconf("SC_CLK_TCK")


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def tree_cpu_s() -> float:
    """CPU seconds of this process and everything below it. A process that ended and was reaped is in
    its reaper's children's times (the reaper is alive, or is us), so each second counts once."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    for pid in _descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # ended between the listing and the read
            continue
        # utime, stime, cutime, cstime are fields 14-17 of stat; 3 is the first after the name
        total += sum(int(v) for v in fields[11:15]) / TICKS
    return total


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
    parser.add_argument("--smoke", action="store_true", help="8 problems, one round, 2 workers")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.problems, args.batch, args.workers = 1, 8, 8, 2

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
    reward_times, single_times, reward_cpu, single_cpu = [], [], [], []
    try:
        for _ in range(args.rounds):
            cpu = tree_cpu_s()
            seconds, got = run_reward(reward, items, args.batch)
            reward_cpu.append(tree_cpu_s() - cpu)
            if got != expected:
                wrong = sum(a != b for a, b in zip(got, expected))
                raise SystemExit(f"the reward disagrees with the expected verdict on {wrong} of {n}")
            reward_times.append(seconds)
            cpu = tree_cpu_s()
            seconds, got = run_one_by_one(plain, items)
            single_cpu.append(tree_cpu_s() - cpu)
            if got != expected:
                raise SystemExit("checking one by one disagrees with the expected verdicts")
            single_times.append(seconds)
    finally:
        reasons = dict(reward.counts)
        reward.close()
        plain.close()

    reward_rate, single_rate = n / min(reward_times), n / min(single_times)
    cores = len(os.sched_getaffinity(0))
    reward_bound, single_bound = cores * n / min(reward_cpu), cores * n / min(single_cpu)
    load = os.getloadavg()[0]
    print(
        f"{n} completions of {args.problems} HumanEval problems, {args.workers} workers, "
        f"batches of {args.batch}, best of {args.rounds}; {cores} cores, load average {load:.1f}"
    )
    print(f"{'method':32} {'wall /s':>8} {'CPU ms each':>11} {'CPU-bound /s':>12}  wall s per round")
    for name, rate, cpu, bound, times in (
        ("reward (batched, pool reused)", reward_rate, reward_cpu, reward_bound, reward_times),
        ("check_solution one at a time", single_rate, single_cpu, single_bound, single_times),
    ):
        line = f"{name:32} {rate:8.1f} {1000 * min(cpu) / n:11.2f} {bound:12.1f}"
        print(f"{line}  {' '.join(f'{t:.2f}' for t in times)}")
    print(
        f"ratio reward / one-by-one: {reward_rate / single_rate:.2f}x wall, "
        f"{reward_bound / single_bound:.2f}x CPU; target >= 150 completions/s on {cores} idle cores"
    )
    print(f"pool start-up {start_s * 1000:.0f} ms (not in the rate); reasons over all rounds: {reasons}")
    print(
        json.dumps(
            {
                "bench": "reward",
                "ratio_vs_one_by_one": round(reward_rate / single_rate, 3),
                "reward_completions_per_s": round(reward_rate, 1),
                "one_by_one_completions_per_s": round(single_rate, 1),
                "reward_cpu_ms_per_completion": round(1000 * min(reward_cpu) / n, 3),
                "reward_cpu_bound_per_s": round(reward_bound, 1),
                "one_by_one_cpu_bound_per_s": round(single_bound, 1),
                "ratio_cpu_bound": round(reward_bound / single_bound, 3),
                "cores": cores,
                "load_average": round(load, 2),
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
