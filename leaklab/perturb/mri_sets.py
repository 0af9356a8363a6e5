"""MRI's perturbed task sets (rewrite, mutation, paraphrase): built once per benchmark, cached by
`set_store`, reused by every checkpoint and run. Paraphrase, LLM rewriting and the LLM judge need an
`LlmBackend` (`mri_llm.py`); without one the sets carry no paraphrase.
See docs/perturbations.md#mri-rewriting.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leaklab.data.tasks import Task, task_from_dict, task_to_dict
from leaklab.execution.sandbox import Sandbox
from leaklab.perturb import set_store
from leaklab.perturb.rewriting import LOGIC_TYPES, Rewrite, rewrite_tasks

STORE_VERSION = 1
SET_MODULES = ("rewriting", "unittest_rewrite", "mutation", "examples", "identifiers", "mri_sets", "mri_llm")
SET_CODE = tuple(Path(__file__).with_name(f"{name}.py") for name in SET_MODULES)
RUN_FILE = "perturbed.jsonl"  # <run>/perturbed.jsonl: the run's copy (its tasks only)
RUN_SUMMARY = "perturbed_summary.json"
NO_PARAPHRASE = "not computed: no LLM backend"  # a set's paraphrase_info; "" when the LLM made one


@dataclass
class PerturbedSet:
    """One original task's perturbations for MRI."""

    task_id: str
    rewrite: Task | None = None
    logic_type: str | None = None
    change: str = ""
    tried: dict[str, int] = field(default_factory=dict)
    accepted: dict[str, int] = field(default_factory=dict)
    rejections: list[dict[str, str]] = field(default_factory=list)
    mutation: Task | None = None
    mutation_info: dict[str, Any] = field(default_factory=dict)
    paraphrase: Task | None = None
    paraphrase_info: str = NO_PARAPHRASE  # "" when made, else why not
    judge: dict[str, Any] = field(default_factory=dict)  # the LLM judge's verdict on the rewrite, if asked


@dataclass(frozen=True)
class SetSettings:
    """How the sets are made: `seed` and `per_type` (rewrite candidates per logic-change type and task) are
    in the cache key; `workers` (when no sandbox is handed in) and `timeout_s` only run the programs."""

    seed: int = 0
    per_type: int = 2
    workers: int = 2
    timeout_s: float = 5.0


@dataclass
class LlmBackend:
    """An LLM for paraphrase (and, with `rewrite`, for rewriting instead of the rules): any generator of
    `leaklab.signals.generation`; `identity` names it in the cache key (backend + model)."""

    generator: Any
    identity: str
    rewrite: bool = False
    render: Callable[[str], str] = lambda text: text  # prompt -> what the model reads (a chat template)
    max_new_tokens: int = 2048
    judge: str = "off"  # off | record | filter: the LLM judges each rewrite (alignment, difficulty)


TASK_FIELDS = ("rewrite", "mutation", "paraphrase")  # the PerturbedSet fields that hold a Task (or None)


def set_to_json(ps: PerturbedSet) -> dict[str, Any]:
    data = dataclasses.asdict(ps)
    for name in TASK_FIELDS:
        data[name] = None if getattr(ps, name) is None else task_to_dict(getattr(ps, name))
    return data


def set_from_json(data: dict[str, Any]) -> PerturbedSet:
    tasks = {k: None if data.get(k) is None else task_from_dict(data[k]) for k in TASK_FIELDS}
    return PerturbedSet(**{**data, **tasks})


def build_perturbed_sets(
    tasks: Sequence[Task],
    settings: SetSettings = SetSettings(),
    *,
    sandbox=None,
    llm: LlmBackend | None = None,
    log=print,
) -> list[PerturbedSet]:
    """Rewrite (validated in the sandbox), mutate and (with an LLM) paraphrase every task; no cache."""
    # The builders load here, not with the recipe that every command reads.
    from leaklab.perturb.mri_llm import llm_paraphrases, llm_rewrites
    from leaklab.perturb.mutation import mutate_task

    if not tasks:
        return []
    started = time.perf_counter()
    if sandbox is None:
        with Sandbox(workers=settings.workers, timeout_s=settings.timeout_s) as sb:
            return build_perturbed_sets(tasks, settings, sandbox=sb, llm=llm, log=log)
    paraphrases: list[Task | None] = [None] * len(tasks)
    reasons = [NO_PARAPHRASE] * len(tasks)
    if llm is not None:
        paraphrases, failures = llm_paraphrases(tasks, llm.generator, llm.render, llm.max_new_tokens)
        reasons = ["" if p is not None else "the LLM's paraphrase was refused" for p in paraphrases]
        log(
            f"[leaklab] LLM paraphrases: {sum(p is not None for p in paraphrases)}/{len(tasks)}; refused: {dict(failures)}"
        )
    if llm is not None and llm.rewrite:
        options = dict(render=llm.render, max_new_tokens=llm.max_new_tokens, timeout_s=settings.timeout_s)
        rewrites: list[Rewrite] = llm_rewrites(tasks, llm.generator, sandbox, **options)
    else:
        rewrites = rule_rewrites(tasks, sandbox, settings)
    if llm is not None and llm.judge != "off":
        judge_rewrites(tasks, rewrites, llm, log)
    sets = []
    for task, rw, para, why in zip(tasks, rewrites, paraphrases, reasons):
        mutated, info = mutate_task(task, random.Random(f"mutate:{settings.seed}:{task.task_id}"))
        # task_id, logic_type, change, tried, accepted, rejections and judge are the Rewrite's own
        of_rewrite = {f.name: getattr(rw, f.name) for f in dataclasses.fields(rw) if f.name != "task"}
        extra = dict(mutation=mutated, mutation_info=info, paraphrase=para, paraphrase_info=why)
        sets.append(PerturbedSet(**of_rewrite, rewrite=rw.task, **extra))
    log(
        f"[leaklab] MRI sets of {len(tasks)} tasks in {time.perf_counter() - started:.1f}s: "
        f"{sum(s.rewrite is not None for s in sets)} rewritten, {sum(s.mutation is not None for s in sets)} mutated"
    )
    return sets


def rule_rewrites(tasks: Sequence[Task], sandbox, settings: SetSettings) -> list[Rewrite]:
    """The rule-based rewrites of `tasks` in their order: `unittest_rewrite` for unittest tasks
    (BigCodeBench), `rewriting` for every other task."""
    from leaklab.perturb.unittest_rewrite import rewrite_unittest_tasks

    out: list[Rewrite | None] = [None] * len(tasks)
    options = {"seed": settings.seed, "per_type": settings.per_type, "timeout_s": settings.timeout_s}
    for unittest, rewrite in ((False, rewrite_tasks), (True, rewrite_unittest_tasks)):
        chosen = [i for i, t in enumerate(tasks) if (t.test_type == "unittest") == unittest]
        if chosen:
            for i, rw in zip(chosen, rewrite([tasks[i] for i in chosen], sandbox, **options)):
                out[i] = rw
    return out


def judge_rewrites(tasks: Sequence[Task], rewrites: Sequence[Rewrite], llm: LlmBackend, log=print) -> None:
    """Ask the LLM judge about every accepted rewrite; record its verdict on the Rewrite and, with
    llm.judge == "filter", drop the rewrites it does not pass (the reason joins the rejections)."""
    from leaklab.perturb.mri_llm import llm_judge_rewrites

    chosen = [(task, rw) for task, rw in zip(tasks, rewrites) if rw.task is not None]
    pairs = [(task, rw.task) for task, rw in chosen]
    verdicts, failures = llm_judge_rewrites(pairs, llm.generator, llm.render)
    dropped = 0
    for (_, rw), verdict in zip(chosen, verdicts):
        rw.judge = dataclasses.asdict(verdict) | {"mode": llm.judge}
        if llm.judge == "filter" and not verdict.keeps:
            if verdict.aligned is None:
                why = f"unreadable verdict: {verdict.failure}"
            elif not verdict.aligned:
                why = f"statement not aligned with the new solution: {verdict.reason}"
            else:
                why = f"difficulty {verdict.difficulty or 'unreadable'} (not the same): {verdict.reason}"
            rw.reject(rw.logic_type or "any", "judge", why[:200])
            rw.task, rw.logic_type, rw.change = None, None, ""
            dropped += 1
    log(
        f"[leaklab] LLM judge of {len(chosen)} rewrites ({llm.judge}): "
        f"{sum(v.keeps for v in verdicts)} aligned and as hard; dropped {dropped}; unreadable {dict(failures)}"
    )


def cache_file(
    tasks: Sequence[Task], seed: int, per_type: int, cache_dir: str | Path | None = None, llm: str = ""
) -> Path:
    settings = [STORE_VERSION, seed, per_type, set_store.code_digest(SET_CODE)] + ([llm] if llm else [])
    return set_store.cache_file("perturbed", tasks, settings, cache_dir)


def perturbed_sets_for(
    tasks: Sequence[Task],
    settings: SetSettings = SetSettings(),
    *,
    cache_dir: str | Path | None = None,
    sandbox=None,
    llm: LlmBackend | None = None,
    log=print,
) -> list[PerturbedSet]:
    """The sets of `tasks` (same order): from the cache, building and adding what is missing."""
    identity = "" if llm is None else f"{llm.identity}|rewrite={llm.rewrite}"
    if llm is not None and llm.judge != "off":
        identity += f"|judge={llm.judge}"
    return set_store.cached_sets(
        cache_file(tasks, settings.seed, settings.per_type, cache_dir, identity),
        tasks,
        lambda todo: build_perturbed_sets(todo, settings, sandbox=sandbox, llm=llm, log=log),
        lambda ps, task: set_to_json(ps),
        lambda data, task: set_from_json(data),
        "MRI perturbed sets",
        log,
    )


def summary(sets: Sequence[PerturbedSet]) -> dict[str, Any]:
    """Acceptance per logic-change type and every rejection reason, counted."""
    tried: Counter[str] = Counter()
    accepted: Counter[str] = Counter()
    chosen: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for s in sets:
        tried.update(s.tried)
        accepted.update(s.accepted)
        chosen[s.logic_type or "none"] += 1
        reasons.update(f"{r['type']}: {r['reason']}" for r in s.rejections)
    per_type = {
        t: {
            "tried": tried[t],
            "accepted": accepted[t],
            "acceptance": accepted[t] / tried[t] if tried[t] else None,
            "chosen": chosen[t],
        }
        for t in LOGIC_TYPES
    }
    mutation_reasons = Counter(s.mutation_info.get("reason") for s in sets if s.mutation is None)
    asked_llm = any(s.paraphrase_info != NO_PARAPHRASE for s in sets)
    return {
        "tasks": len(sets),
        "rewritten": sum(s.rewrite is not None for s in sets),
        "mutated": sum(s.mutation is not None for s in sets),
        "paraphrased": sum(s.paraphrase is not None for s in sets),
        "paraphrase": "made by the LLM backend" if asked_llm else NO_PARAPHRASE,
        "types_with_accepted_rewrites": sum(1 for t in LOGIC_TYPES if accepted[t]),
        "judge": judge_summary(sets),
        "per_type": per_type,
        "rejections": dict(reasons.most_common()),
        "mutation_failures": dict(mutation_reasons),
    }


def judge_summary(sets: Sequence[PerturbedSet]) -> dict[str, Any]:
    """The LLM judge's verdicts counted: rewrites seen, kept, misaligned, per difficulty, unreadable."""
    verdicts = [s.judge for s in sets if s.judge]
    if not verdicts:
        return {"judged": 0}
    return {
        "judged": len(verdicts),
        "mode": verdicts[0].get("mode"),
        "aligned": sum(v["aligned"] is True for v in verdicts),
        "misaligned": sum(v["aligned"] is False for v in verdicts),
        "difficulty": dict(Counter(v["difficulty"] or "unreadable" for v in verdicts)),
        "kept": sum(v["aligned"] is True and v["difficulty"] == "same" for v in verdicts),
        "unreadable": dict(Counter(v["failure"] for v in verdicts if v["failure"])),
    }


def write_run_sets(run_root: str | Path, sets: Sequence[PerturbedSet]) -> dict[str, Any]:
    root = Path(run_root)
    info = summary(sets)
    set_store.write_run_copy(root / RUN_FILE, [set_to_json(s) for s in sets], root / RUN_SUMMARY, info)
    return info


def describe(info: dict[str, Any]) -> str:
    types = ", ".join(f"{t} {v['accepted']}/{v['tried']}" for t, v in info["per_type"].items() if v["tried"])
    return (
        f"[leaklab] MRI sets: {info['rewritten']}/{info['tasks']} tasks rewritten "
        f"({info['types_with_accepted_rewrites']} of {len(LOGIC_TYPES)} logic types accepted; {types}), "
        f"{info['mutated']} mutated; paraphrase {info['paraphrase']} ({info['paraphrased']})"
        + (f"; LLM judge: {info['judge']}" if info.get("judge", {}).get("judged") else "")
    )
