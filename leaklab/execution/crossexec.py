"""HyClone-style functional similarity by execution (stage 2): run the ground-truth function and a
generated one on the same inputs in the sandbox and count how often they agree.

    results = cross_execute(pairs, sandbox)      # pairs: list[CrossPair]; results: list[CrossResult]

For a pair (A = the ground truth, B = the generation) and its inputs, S_a is the fraction of the inputs
A runs on where B returns the same value (`correctness.outputs_match`, exact); HyClone also computes S_b
on inputs generated for B. leaklab has one input set per task (the benchmark's own test inputs; an LLM
to generate inputs per function is not wired), so here S_b = S_a, said in every result. A pair is a
clone when both are >= `threshold` (0.8); its similarity is (S_a + S_b) / 2.

A pair that does not reach execution has no similarity and says why: no inputs, no generated function
(extraction failed), or the ground truth runs on none of its inputs. A generation that fails to load
or crashes on an input did reach execution: those inputs count as disagreements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

THRESHOLD = 0.8  # HyClone's clone threshold on S_a and S_b
MAX_INPUTS = 50  # inputs run per pair (the first ones)


@dataclass(frozen=True)
class CrossPair:
    reference: str  # the ground-truth program (context + function)
    candidate: str | None  # the generated program, None when no function was extracted
    entry_point: str
    inputs: Sequence[Sequence[Any]]  # argument lists, plain data


@dataclass(frozen=True)
class CrossResult:
    similarity: float | None  # (S_a + S_b) / 2; None when the pair did not reach execution
    s_a: float | None = None
    s_b: float | None = None
    clone: bool | None = None
    n_inputs: int = 0  # inputs the ground truth ran on (the denominator)
    reason: str = ""  # why the pair did not reach execution ("" when it did)
    note: str = "S_b = S_a: one shared input set (the benchmark's test inputs)"


def cross_execute(
    pairs: Sequence[CrossPair], sandbox, *, timeout_s: float = 5.0, threshold: float = THRESHOLD
) -> list[CrossResult]:
    """Stage 2 for every pair, all programs in one sandbox batch; results in order."""
    from leaklab.execution.correctness import outputs_match
    from leaklab.execution.sandbox import FunctionCalls

    jobs, where = [], {}
    out: list[CrossResult | None] = [None] * len(pairs)
    for i, pair in enumerate(pairs):
        inputs = [list(a) for a in pair.inputs[:MAX_INPUTS]]
        if not inputs:
            out[i] = CrossResult(None, reason="no inputs")
        elif pair.candidate is None:
            out[i] = CrossResult(None, reason="no generated function")
        else:
            where[i] = len(jobs)
            jobs += [
                FunctionCalls(pair.reference, pair.entry_point, inputs, timeout_s),
                FunctionCalls(pair.candidate, pair.entry_point, inputs, timeout_s),
            ]
    ran = sandbox.run_jobs(jobs)
    for i, j in where.items():
        reference, candidate = ran[j].calls or [], ran[j + 1].calls or []
        valid = [k for k, call in enumerate(reference) if call.ok]
        if not valid:
            out[i] = CrossResult(None, reason="the ground truth runs on none of the inputs")
            continue
        agree = sum(
            1
            for k in valid
            if k < len(candidate)
            and candidate[k].ok
            and outputs_match(candidate[k].value, reference[k].value)
        )
        s_a = agree / len(valid)
        s_b = s_a  # one shared input set
        out[i] = CrossResult((s_a + s_b) / 2, s_a, s_b, s_a >= threshold and s_b >= threshold, len(valid))
    return [r for r in out if r is not None]
