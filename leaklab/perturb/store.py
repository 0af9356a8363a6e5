"""SrDetection's variant sets for the pipeline: built with sandboxed executors, cached per benchmark
(`set_store`), the run's own copy, read back. A variant is stored as the Task fields that differ from its
original plus its metadata. See docs/perturbations.md#caches-of-perturbed-sets.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from leaklab.data.tasks import Task
from leaklab.errors import UnavailableError
from leaklab.execution.correctness import check_solution, reference_outputs
from leaklab.execution.sandbox import Program, Sandbox
from leaklab.perturb import set_store
from leaklab.perturb.examples import RunError
from leaklab.perturb.variants import Variant, VariantSet, Verification, alpha_equivalent, make_variants
from leaklab.progress import Progress
from leaklab.rundir import RunDir

# Task fields a variant may change (rename_task, replace_examples); the rest are the original's.
CHANGED_FIELDS = ("prompt", "solution", "tests", "entry_point")
STORE_VERSION = 1  # bump when the stored form changes
# The modules and data whose content decides what variants come out (hashed into the cache file's name).
VARIANT_CODE = tuple(
    Path(__file__).with_name(name)
    for name in (
        *("identifiers.py", "renaming.py", "vocabulary.py", "examples.py", "llm.py", "variants.py"),
        *("code_counts.json", "prose_counts.json", "synonyms.txt"),
    )
)


# --------------------------------------------------------------------------- executors (sandbox)


def sandbox_executors(sandbox, originals: dict[str, Task]) -> tuple[Callable, Callable]:
    """(run_solution, verify) for `make_variants`, running everything in `sandbox`."""

    def run_solution(task: Task, inputs: list) -> list:
        program = task.program()
        if inputs and all(isinstance(x, str) for x in inputs):  # stdin of an APPS stdio task
            results = sandbox.run_jobs([Program(program, stdin) for stdin in inputs])
            return [r.stdout if r.passed else RunError(r.reason or r.verdict) for r in results]
        result = sandbox.call_function(program, task.entry_point or "", [list(x) for x in inputs])
        calls = result.calls or []
        return [
            (calls[i].value if calls[i].ok else RunError(calls[i].error))
            if i < len(calls)
            else RunError(result.reason or result.verdict)
            for i in range(len(inputs))
        ]

    def verify(variant: Task) -> bool:
        original = originals[variant.metadata.get("variant_of", variant.task_id)]
        if variant.test_type == "call" and any("output" not in c for c in variant.test_cases):
            reference = next(iter(reference_outputs([original], sandbox).values()), None)
            if reference is None or not reference.passed or reference.calls is None:
                return False
            cases = []
            for case, call in zip(variant.test_cases, reference.calls):
                if "output" not in case and not call.ok:
                    return False
                cases.append(case if "output" in case else {**case, "output": call.value})
            variant = dataclasses.replace(variant, test_cases=tuple(cases))
        return check_solution(variant, variant.solution, sandbox).passed

    return run_solution, verify


def build_variant_sets(tasks: Sequence[Task], cfg, log=print, rename: bool = True) -> list[VariantSet]:
    """`make_variants` for every task (cfg: a SrDetectionConfig) on a few threads, so one renames while
    another waits for the sandbox. `rename=False`: example replacement alone (an ablation; never cached)."""
    if not tasks:
        return []
    originals = {t.task_id: t for t in tasks}
    started = time.perf_counter()

    def alpha(variant: Task) -> bool:
        original = originals[variant.metadata.get("variant_of", variant.task_id)]
        return alpha_equivalent(original, variant, variant.metadata.get("renames", {}))

    with contextlib.ExitStack() as stack:
        run_solution = run_tests = None
        if cfg.verify == "tests" or cfg.replace_examples:
            try:
                sandbox = Sandbox(workers=cfg.sandbox_workers, timeout_s=cfg.sandbox_timeout_s)
            except RuntimeError as err:
                raise UnavailableError(
                    f"{err}\n  SrDetection runs the benchmark's code to verify variants and replace examples; "
                    "without a sandbox set evaluate.srdetection.verify=alpha (or none) and "
                    "evaluate.srdetection.replace_examples=false (renaming only)"
                ) from err
            run_solution, run_tests = sandbox_executors(stack.enter_context(sandbox), originals)
        verify = {"tests": run_tests, "alpha": alpha, "none": None}[cfg.verify]
        check = None if verify is None else Verification(verify, by=cfg.verify)
        run_solution = run_solution if cfg.replace_examples else None

        def one(task: Task) -> VariantSet:
            # CPython before 3.11.8 / 3.12.1 (gh-106905) rarely fails an `ast.parse` racing another thread's
            # ("AST constructor recursion depth mismatch"); the variants are pure, so a rebuild is the same.
            for attempt in range(3):
                try:
                    return make_variants(
                        task, cfg.n_variants, cfg.seed, run_solution=run_solution, verify=check, rename=rename
                    )
                except SystemError as err:
                    if "recursion depth mismatch" not in str(err) or attempt == 2:
                        raise

        with (
            ThreadPoolExecutor(max_workers=2 * cfg.sandbox_workers) as pool,
            Progress(len(tasks), "building SrDetection variants", unit="task") as progress,
        ):
            sets = []
            for variant_set in pool.map(one, tasks):
                sets.append(variant_set)
                progress.update()
    log(
        f"[leaklab] built variants of {len(tasks)} tasks in {time.perf_counter() - started:.1f}s: "
        f"{sum(len(s.variants) for s in sets)} kept of {sum(s.n_candidates for s in sets)} candidates"
    )
    return sets


# --------------------------------------------------------------------------- stored form

# The VariantSet and Variant fields stored as they are (a variant's task is stored as its changes).
SET_FIELDS = (
    *("task_id", "n_requested", "n_candidates", "n_verified", "tests_run", "verified_by"),
    *("reasons", "notes"),
)
VARIANT_FIELDS = ("function_renames", "variable_renames", "examples_replaced", "source")


def set_to_json(vs: VariantSet, original: Task) -> dict[str, Any]:
    variants = []
    for v in vs.variants:
        changes = {
            f: getattr(v.task, f) for f in CHANGED_FIELDS if getattr(v.task, f) != getattr(original, f)
        }
        variants.append(
            {
                "task_id": v.task.task_id,
                "changes": changes,
                "metadata": {k: v.task.metadata[k] for k in v.task.metadata if k not in original.metadata},
                **{f: getattr(v, f) for f in VARIANT_FIELDS},
            }
        )
    return {**{f: getattr(vs, f) for f in SET_FIELDS}, "variants": variants}


def set_from_json(data: dict[str, Any], original: Task) -> VariantSet:
    if data["task_id"] != original.task_id:
        raise ValueError(f"stored variants of {data['task_id']!r} do not belong to {original.task_id!r}")
    variants = [
        Variant(
            task=dataclasses.replace(
                original,
                task_id=v["task_id"],
                metadata={**original.metadata, **v["metadata"]},
                **v["changes"],
            ),
            **{f: v[f] for f in VARIANT_FIELDS},
        )
        for v in data["variants"]
    ]
    return VariantSet(variants=variants, **{f: data[f] for f in SET_FIELDS})


def cache_file(tasks: Sequence[Task], cfg, cache_dir: str | Path | None = None) -> Path:
    """Keyed by what changes the variants: the settings and the variant code itself."""
    code = set_store.code_digest(VARIANT_CODE)
    settings = [STORE_VERSION, cfg.n_variants, cfg.seed, cfg.verify, cfg.replace_examples, code]
    return set_store.cache_file("variants", tasks, settings, cache_dir)


def variant_sets_for(
    tasks: Sequence[Task], cfg, *, cache_dir: str | Path | None = None, log=print
) -> list[VariantSet]:
    """The variant sets of `tasks` (same order): from the cache, building and adding what is missing."""
    return set_store.cached_sets(
        cache_file(tasks, cfg, cache_dir),
        tasks,
        lambda todo: build_variant_sets(todo, cfg, log=log),
        set_to_json,
        set_from_json,
        "SrDetection variants",
        log,
    )


# --------------------------------------------------------------------------- the run's copy


def summary(sets: Sequence[VariantSet], min_variants: int = 2) -> dict[str, Any]:
    """Counts SrDetection reports: how many variants were built and verified, and why some are missing."""
    counts = Counter(len(vs.variants) for vs in sets)
    reasons: Counter[str] = Counter()
    for vs in sets:
        # "3 of 10 variants after 30 attempts" is a count, not a reason; the others name the cause.
        reasons.update(r for r in vs.reasons if " variants after " not in r)
    n_candidates = sum(vs.n_candidates for vs in sets)
    n_verified = sum(vs.n_verified for vs in sets)
    return {
        "tasks": len(sets),
        "n_requested": sets[0].n_requested if sets else None,
        "variants": sum(len(vs.variants) for vs in sets),
        "candidates": n_candidates,
        "verified": n_verified,
        "fraction_verified": n_verified / n_candidates if n_candidates else None,
        "tests_run": bool(sets) and all(vs.tests_run for vs in sets),
        "verified_by": sorted({vs.verified_by for vs in sets}),
        "tasks_without_tests": sum(any(r.startswith("no tests") for r in vs.reasons) for vs in sets),
        "tasks_with_all_variants": sum(len(vs.variants) >= vs.n_requested for vs in sets),
        "tasks_with_no_variant": counts.get(0, 0),
        "tasks_undecidable": sum(len(vs.variants) < min_variants for vs in sets),
        "min_variants": min_variants,
        "variants_per_task": {str(k): counts[k] for k in sorted(counts)},
        "reasons": dict(reasons.most_common(20)),
    }


def write_run_variants(
    run_root: str | Path, sets: Sequence[VariantSet], tasks: Sequence[Task], min_variants: int
) -> dict:
    """<run>/variants.jsonl (one set a line) and <run>/variants_summary.json; returns the summary."""
    run = RunDir(run_root)
    info = summary(sets, min_variants)
    set_store.write_run_copy(
        run.variants, [set_to_json(vs, t) for vs, t in zip(sets, tasks)], run.variants_summary, info
    )
    return info


def read_run_variants(run_root: str | Path, tasks: Sequence[Task]) -> list[VariantSet] | None:
    """The run's variant sets in the order of `tasks`; None when the run has none for all of them."""
    by_id = set_store.read_run_copy(RunDir(run_root).variants)
    if not by_id or any(t.task_id not in by_id for t in tasks):
        return None
    return [set_from_json(by_id[t.task_id], t) for t in tasks]


def describe(info: dict[str, Any]) -> str:
    """One line for the log."""
    fraction = info["fraction_verified"]
    return (
        f"[leaklab] SrDetection variants: {info['variants']} for {info['tasks']} tasks "
        f"(verified {'–' if fraction is None else f'{100 * fraction:.1f}%'} of candidates; "
        f"{info['tasks_with_no_variant']} tasks with none, {info['tasks_undecidable']} with fewer than "
        f"{info['min_variants']}: undecided)"
    )
