"""HyClone-style functional similarity (000 App. C.2): an optional LLM screen (stage 1), then the
ground-truth function A and a generated one B run on the same inputs in the sandbox (stage 2).
S_a, S_b, the clone rule, the inputs, the screen and the repair: docs/sandbox.md#hyclone-cross-execution.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from leaklab.execution.correctness import outputs_match
from leaklab.execution.input_gen import find_function, generate_inputs, input_key
from leaklab.execution.sandbox import FunctionCalls
from leaklab.similarity.judges import ask, judge_pairs

THRESHOLD = 0.8  # HyClone's clone threshold on S_a and S_b
MAX_INPUTS = 50  # inputs run per pair and side (the first ones)
SCREENED_OUT = "stage 1: the LLM screen says they are not functional clones"

INPUTS_PROMPT = (
    "Here is a Python function. Propose up to {n} different calls that test it well: ordinary cases, "
    "edge cases (empty, zero, negative, boundaries) and a few larger ones, with arguments of the types it "
    "expects.\n\n```python\n{source}\n```\n\nAnswer with JSON only: a list with one list of positional "
    'arguments per call to `{name}`, for example [[1, "a"], [0, ""]]. Use only JSON values '
    "(numbers, strings, true, false, null, lists, objects)."
)


REPAIR_PROMPT = (
    "This Python program cannot run as it is{error}.\n\n```python\n{source}\n```\n\nWrite the shortest "
    "preamble (imports, small helper definitions or constants) that lets it run unchanged. Answer with "
    "one ```python code block holding only the preamble."
)
_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.S)


@dataclass(frozen=True)
class CrossPair:
    reference: str  # the ground-truth program (context + function)
    candidate: str | None  # the generated program, None when no function was extracted
    entry_point: str
    inputs: Sequence[Sequence[Any]]  # argument lists, plain data (the shared set)


@dataclass(frozen=True)
class CrossResult:
    similarity: float | None  # (S_a + S_b) / 2; None when the pair did not reach execution
    s_a: float | None = None
    s_b: float | None = None
    clone: bool | None = None
    n_inputs: int = 0  # inputs the ground truth ran on (S_a's denominator)
    reason: str = ""  # why the pair did not reach execution ("" when it did)
    screen: str = ""  # stage 1: "" not asked, "clone", "not a clone", or "unreadable: <why>"
    llm_inputs: tuple[int, int] = (0, 0)  # LLM-proposed inputs kept for (A, B)
    llm_inputs_dropped: dict[str, int] = field(default_factory=dict)  # proposals dropped, by reason
    generated_inputs: dict[str, int] = field(default_factory=dict)  # inputs from the signature, by source
    repaired: tuple[str, ...] = ()  # the sides ("reference", "candidate") run again with an LLM preamble


@dataclass
class LLMStages:
    """The LLM parts of HyClone, asked through a judge back-end (`judges.make_backend`)."""

    generator: Any  # a `leaklab.signals.generation` back-end
    render: Callable[[str], str] = lambda text: text  # e.g. a chat template
    screen: bool = True  # stage 1
    n_inputs: int = 10  # inputs to ask per function (0: none)
    max_new_tokens: int = 512


def cross_execute(
    pairs: Sequence[CrossPair],
    sandbox,
    *,
    timeout_s: float = 5.0,
    llm: LLMStages | None = None,
    generated: int = 0,
) -> list[CrossResult]:
    """Stage 1 (with `llm.screen`) and stage 2 for every pair, all programs in one sandbox batch; results in order.
    `generated`: at most this many inputs per pair generated from the ground truth's signature (0: none)."""
    out: dict[int, CrossResult] = {}
    pending = []
    made: dict[int, Any] = {}
    for i, pair in enumerate(pairs):
        if pair.candidate is not None and generated > 0:
            made[i] = generate_inputs(pair.reference, pair.entry_point, pair.inputs, generated)
        if pair.candidate is None:
            out[i] = CrossResult(None, reason="no generated function")
        elif not pair.inputs and not (llm and llm.n_inputs > 0) and not (i in made and made[i].inputs):
            out[i] = CrossResult(None, reason="no inputs")
        else:
            pending.append(i)
    # Stage 1 screens every pair with a generated function, executable or not: its verdict is a metric
    # of its own (000, §3, Table 1 "HyClone Stage 1", a mean over all functions).
    with_function = [i for i, pair in enumerate(pairs) if pair.candidate is not None]
    screens = _screen(llm, pairs, with_function) if llm and llm.screen else {}
    for i, verdict in screens.items():
        if verdict == "not a clone":
            out[i] = CrossResult(None, reason=SCREENED_OUT, screen=verdict)
        elif i in out:  # not executable (no inputs): its reason stays, with the verdict beside it
            out[i] = replace(out[i], screen=verdict)
    pending = [i for i in pending if i not in out]
    proposed = _proposed_inputs(llm, pairs, pending) if llm and llm.n_inputs > 0 else {}

    jobs, plans = [], {}
    for i in pending:
        pair = pairs[i]
        extra = made[i].inputs[:MAX_INPUTS] if i in made else []
        # generated inputs go after the task's, which give way so that the generated ones still run
        shared = [list(a) for a in pair.inputs][: MAX_INPUTS - len(extra)] + extra
        (extra_a, extra_b), dropped = proposed.get(i, (([], []), Counter()))
        inputs_a, inputs_b, union = _input_sets(shared, extra_a, extra_b, dropped)
        if not union:
            out[i] = CrossResult(None, reason="no inputs", screen=screens.get(i, ""),
                                 llm_inputs_dropped=dict(dropped))  # fmt: skip
            continue
        n_shared = len(shared[:MAX_INPUTS])
        kept = (max(0, len(inputs_a) - n_shared), max(0, len(inputs_b) - n_shared))  # new proposals run
        plans[i] = (len(jobs), inputs_a, inputs_b, kept, dropped, made[i].sources if i in made else {})
        jobs += [
            FunctionCalls(pair.reference, pair.entry_point, union, timeout_s),
            FunctionCalls(pair.candidate, pair.entry_point, union, timeout_s),
        ]
    ran = sandbox.run_jobs(jobs) if jobs else []
    repaired = _repair(llm, jobs, ran, sandbox) if llm and jobs else {}
    for i, (j, inputs_a, inputs_b, kept, dropped, sources) in plans.items():
        reference, candidate = ran[j].calls or [], ran[j + 1].calls or []
        s_a, n_valid = _agreement(inputs_a, reference, candidate)
        s_b, n_valid_b = _agreement(inputs_b, reference, candidate) if kept[1] else (s_a, n_valid)
        sides = tuple(side for side, k in (("reference", j), ("candidate", j + 1)) if k in repaired)
        common = dict(screen=screens.get(i, ""), llm_inputs=kept, llm_inputs_dropped=dict(dropped),
                      generated_inputs=dict(sources), repaired=sides)  # fmt: skip
        if s_a is None and s_b is None:
            out[i] = CrossResult(None, reason="the ground truth runs on none of the inputs", **common)
            continue
        # A side whose inputs the ground truth runs on none of takes the other side's score.
        if s_a is None:
            s_a, n_valid = s_b, n_valid_b
        if s_b is None:
            s_b = s_a
        clone = s_a >= THRESHOLD and s_b >= THRESHOLD
        out[i] = CrossResult((s_a + s_b) / 2, s_a, s_b, clone, n_valid, **common)
    return [out[i] for i in range(len(pairs))]


def _cannot_run(result) -> str | None:
    """Why a program ran on none of its inputs (its load error, else the first call's), or None."""
    if result.calls and any(call.ok for call in result.calls):
        return None
    errors = [call.error for call in result.calls or [] if call.error]
    return result.reason or (errors[0] if errors else "it fails")


def _repair(llm: LLMStages, jobs: list, ran: list, sandbox) -> set[int]:
    """Ask a preamble for every job whose program cannot run, run those once more with it (in place in
    `ran`); the indexes of the jobs repaired."""
    broken = [(k, why) for k, result in enumerate(ran) if (why := _cannot_run(result)) is not None]
    if not broken:
        return set()
    prompts = [
        llm.render(REPAIR_PROMPT.format(error=f" ({why[:300]})", source=jobs[k].source.rstrip("\n")))
        for k, why in broken
    ]
    again = {}
    for (k, _), reply in zip(broken, ask(llm.generator, prompts, llm.max_new_tokens)):
        block = _CODE_BLOCK.search(reply)
        if block and block.group(1).strip():
            again[k] = replace(jobs[k], source=block.group(1) + "\n" + jobs[k].source)
    for k, result in zip(again, sandbox.run_jobs(list(again.values())) if again else []):
        ran[k] = result
    return set(again)


def _agreement(indexes: list[int], reference: list, candidate: list) -> tuple[float | None, int]:
    """(share of the inputs the ground truth runs on where the generation returns the same, that count)."""
    valid = [k for k in indexes if k < len(reference) and reference[k].ok]
    same = (
        k < len(candidate) and candidate[k].ok and outputs_match(candidate[k].value, reference[k].value)
        for k in valid
    )
    agree = sum(same)
    return (agree / len(valid) if valid else None), len(valid)


def _screen(llm: LLMStages, pairs, pending) -> dict[int, str]:
    """Stage 1 for the pending pairs: index -> "clone" | "not a clone" | "unreadable: <why>"."""
    asked = [(pairs[i].reference, pairs[i].candidate) for i in pending]
    if not asked:
        return {}
    verdicts, _ = judge_pairs(llm.generator, "clone_screen", asked, llm.render, llm.max_new_tokens)
    return {
        i: (f"unreadable: {v.failure}" if v.score is None else "clone" if v.score >= 0.5 else "not a clone")
        for i, v in zip(pending, verdicts)
    }


def _proposed_inputs(llm: LLMStages, pairs, pending) -> dict[int, tuple[tuple[list, list], Counter]]:
    """index -> ((inputs for A, inputs for B), proposals dropped by reason); one LLM batch for all."""
    programs = [(i, side, getattr(pairs[i], side)) for i in pending for side in ("reference", "candidate")]
    if not programs:
        return {}
    prompts = [
        llm.render(
            INPUTS_PROMPT.format(n=llm.n_inputs, source=source.rstrip("\n"), name=pairs[i].entry_point)
        )
        for i, _, source in programs
    ]
    found: dict[int, tuple[tuple[list, list], Counter]] = {i: (([], []), Counter()) for i in pending}
    for (i, side, source), reply in zip(programs, ask(llm.generator, prompts, llm.max_new_tokens)):
        kept, dropped = parse_inputs(reply, arity(source, pairs[i].entry_point), llm.n_inputs)
        found[i][0][0 if side == "reference" else 1].extend(kept)
        found[i][1].update(dropped)
    return found


def arity(source: str, entry_point: str) -> tuple[int, float] | None:
    """(fewest, most) positional arguments `entry_point` in `source` takes; None when it cannot be read."""
    function = find_function(source, entry_point)
    if isinstance(function, str):
        return None
    args = function.args
    if any(d is None for d in args.kw_defaults):  # a keyword-only argument without default
        return (1, 0)  # no positional call fits
    positional = len(args.posonlyargs) + len(args.args)
    most = float("inf") if args.vararg else positional
    return positional - len(args.defaults), most


def last_json_array(text: str) -> list | None:
    """The last top-level JSON array in `text` (fenced or bare); None when there is none."""
    decoder = json.JSONDecoder()
    found, position = None, 0
    while True:
        start = text.find("[", position)
        if start < 0:
            return found
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            position = start + 1
            continue
        found, position = value, end  # skip what it holds: nested arrays are not top-level


def parse_inputs(reply: str, accepts: tuple[int, float] | None, limit: int) -> tuple[list[list], Counter]:
    """The argument lists an LLM reply proposes (at most `limit`) and the rest dropped, counted by reason."""
    dropped: Counter = Counter()
    proposals = last_json_array(reply or "")
    if proposals is None:
        dropped["no JSON list in the reply"] += 1
        return [], dropped
    kept: list[list] = []
    for args in proposals:
        if not isinstance(args, list):
            dropped["not a list of arguments"] += 1
        elif accepts is not None and not accepts[0] <= len(args) <= accepts[1]:
            dropped["wrong number of arguments"] += 1
        elif len(kept) >= limit:
            dropped["beyond the number asked"] += 1
        else:
            kept.append(args)
    return kept, dropped


def _input_sets(shared, extra_a, extra_b, dropped: Counter):
    """(indexes for S_a, indexes for S_b, the union run by both programs); repeats run once and count."""
    union: list[list] = []
    seen: dict[str, int] = {}

    def place(args, proposed: bool) -> int:
        # The shared inputs all run, as given; a proposal already there (shared or proposed) runs once.
        key = input_key(args)  # not json.dumps alone: dict keys of mixed types (HumanEval/95) cannot sort
        if proposed and key in seen:
            dropped["repeats an input already there"] += 1
            return seen[key]
        seen.setdefault(key, len(union))
        union.append(args)
        return len(union) - 1

    base = [place(a, False) for a in shared[:MAX_INPUTS]]
    side_a = base + [place(a, True) for a in extra_a]
    side_b = base + [place(a, True) for a in extra_b]
    return list(dict.fromkeys(side_a))[:MAX_INPUTS], list(dict.fromkeys(side_b))[:MAX_INPUTS], union
