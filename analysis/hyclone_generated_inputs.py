"""What the signature-generated inputs (`leaklab/execution/input_gen.py`) change in HyClone's stage 2.

On HumanEval (the canonical programs), for each task: the inputs generated (by source) and how many of
them the canonical solution runs on; then pairs of (canonical, one-edit logic mutant), the mutants made
by MRI's rewriting operators (`leaklab.perturb.rewriting.candidate_edits`, first edit of each type, at
most `--mutants` per task, not validated), cross-executed on the task's test inputs alone and with
`--generated` inputs added: how many mutants each way calls clones (both S >= 0.8).

    python analysis/hyclone_generated_inputs.py [--generated 10] [--mutants 3] [--seed 0]

Prints the counts, then one JSON line with them.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generated", type=int, default=10)
    parser.add_argument("--mutants", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from leaklab.data.benchmarks import load_humaneval
    from leaklab.evaluations.counterfactual import _test_inputs
    from leaklab.execution.crossexec import CrossPair, cross_execute
    from leaklab.execution.input_gen import generate_inputs
    from leaklab.execution.sandbox import FunctionCalls, Sandbox
    from leaklab.perturb.rewriting import NotRewritable, candidate_edits, edited_task

    tasks = load_humaneval()
    inputs = [_test_inputs(t) for t in tasks]
    start = time.process_time()
    made = [
        generate_inputs(t.program(), t.entry_point, ins, args.generated, args.seed)
        for t, ins in zip(tasks, inputs)
    ]
    ms_per_task = (time.process_time() - start) * 1000 / len(tasks)
    sources = sum((collections.Counter(m.sources) for m in made), collections.Counter())

    pairs = []
    for task, ins in zip(tasks, inputs):
        try:
            edits = [
                e for found in candidate_edits(task, random.Random(task.task_id)).values() for e in found[:1]
            ]
        except NotRewritable:
            continue
        for edit in edits[: args.mutants]:
            try:
                program, _ = edited_task(task, edit)
            except NotRewritable:
                continue
            pairs.append(CrossPair(task.program(), program, task.entry_point, ins))

    with Sandbox(workers=1, timeout_s=5.0) as sandbox:
        jobs = [FunctionCalls(t.program(), t.entry_point, m.inputs, 5.0) for t, m in zip(tasks, made)]
        runs = sum(sum(c.ok for c in (r.calls or [])) for r in sandbox.run_jobs(jobs))
        plain = cross_execute(pairs, sandbox)
        generated = cross_execute(pairs, sandbox, generated=args.generated, seed=args.seed)
    both = [i for i, (p, g) in enumerate(zip(plain, generated)) if not p.reason and not g.reason]
    result = {
        "tasks": len(tasks),
        "generated_inputs": sum(len(m.inputs) for m in made),
        "by_source": dict(sources),
        "tasks_without_generated": sum(not m.inputs for m in made),
        "canonical_runs_on": runs,
        "generation_ms_cpu_per_task": round(ms_per_task, 2),
        "mutant_pairs": len(pairs),
        "executed_plain": sum(not r.reason for r in plain),
        "executed_generated": sum(not r.reason for r in generated),
        "clones_plain": sum(bool(plain[i].clone) for i in both),
        "clones_generated": sum(bool(generated[i].clone) for i in both),
        "clone_to_not": sum(bool(plain[i].clone) and not generated[i].clone for i in both),
        "not_to_clone": sum(not plain[i].clone and bool(generated[i].clone) for i in both),
        "mean_s_a_plain": round(sum(plain[i].s_a for i in both) / len(both), 3),
        "mean_s_a_generated": round(sum(generated[i].s_a for i in both) / len(both), 3),
    }
    print(
        f"{result['tasks']} HumanEval tasks: {result['generated_inputs']} inputs generated {result['by_source']}, "
        f"the canonical solution runs on {runs}; {result['tasks_without_generated']} tasks got none; "
        f"{ms_per_task:.2f} ms CPU per task"
    )
    print(
        f"{len(pairs)} (canonical, mutant) pairs; executed: {result['executed_plain']} on the test inputs, "
        f"{result['executed_generated']} with generated inputs"
    )
    print(
        f"called clones (pairs executed both ways, {len(both)}): test inputs {result['clones_plain']}, "
        f"+ generated {result['clones_generated']} ({result['clone_to_not']} clone -> not, "
        f"{result['not_to_clone']} not -> clone); mean S_a {result['mean_s_a_plain']} -> "
        f"{result['mean_s_a_generated']}"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
