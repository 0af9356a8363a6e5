"""SrDetection's semantics-preserving variants (§3.1.1, App. A.1): `make_variants` renames functions
(tau_f) and variables (tau_v), replaces the shown examples (tau_t), keeps the variants that parse and
pass their check, and says why the others were dropped. Nothing here runs code: `run_solution(task,
inputs) -> outputs` (a value, stdout or `RunError` per input) and `verify(task) -> bool` come from the
caller (in the pipeline, `store.sandbox_executors`). See docs/perturbations.md#srdetection-variants.
"""

from __future__ import annotations

import ast
import dataclasses
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from leaklab.data.tasks import Task
from leaklab.perturb import identifiers
from leaklab.perturb.examples import (
    EXAMPLE_CANDIDATES,
    candidate_sets,
    choose_set,
    find_examples,
    replace_examples,
)
from leaklab.perturb.identifiers import NotRenamable, TaskCode, analyse_task, program_text
from leaklab.perturb.llm import llm_prompt, renames_from_proposal
from leaklab.perturb.renaming import propose_renames, rename_task


@dataclass(frozen=True)
class Variant:
    """One verified variant: the renamed task plus what was renamed and replaced."""

    task: Task
    function_renames: dict[str, str]
    variable_renames: dict[str, str]
    examples_replaced: int
    source: str  # "vocabulary" or "llm": who proposed the names

    @property
    def renames(self) -> dict[str, str]:
        return {**self.function_renames, **self.variable_renames}


@dataclass
class VariantSet:
    """The variants of one task and the bookkeeping SrDetection reports."""

    task_id: str
    n_requested: int
    variants: list[Variant] = field(default_factory=list)
    n_candidates: int = 0  # distinct candidates built and checked
    n_verified: int = 0  # candidates that parsed and passed `verify`
    tests_run: bool = False  # True only when the benchmark's tests ran on every candidate
    verified_by: str = "none"  # "tests", "alpha" (AST equal under the renaming) or "none" (parse only)
    reasons: list[str] = field(default_factory=list)  # why there are fewer than n_requested
    notes: list[str] = field(default_factory=list)  # what else happened (e.g. no examples to replace)


# --------------------------------------------------------------------------- putting it together

RunSolution = Callable[[Task, list[Any]], list[Any]]
Verify = Callable[[Task], bool]


@dataclass(frozen=True)
class Verification:
    """How every candidate variant is checked, `check(variant) -> bool`, and what that check is, `by`:
    "tests" (the benchmark's own: a task without tests gets no variant) or "alpha" (`alpha_equivalent`)."""

    check: Verify
    by: str = "tests"


def _function_params(analysis: TaskCode, name: str | None) -> list[str]:
    for node in ast.walk(analysis.program.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return [a.arg for a in node.args.posonlyargs + node.args.args if a.arg not in ("self", "cls")]
    return []


def _example_tasks(
    task: Task, analysis: TaskCode, count: int, seed: int, run_solution: RunSolution
) -> tuple[list[tuple[Task, int]], str | None]:
    """`count` copies of the task, each with its own new examples (tau_t); one executor call in all."""
    examples = find_examples(task, _function_params(analysis, task.entry_point))
    if not examples:
        return [(task, 0)] * count, "no replaceable examples in the prompt"
    # Per copy, EXAMPLE_CANDIDATES candidate sets of new inputs; the solution runs on all of them at once
    # and `choose_set` keeps the set whose shown text is closest in shape to the original examples.
    per_copy = [
        candidate_sets(examples, random.Random(f"{seed}:{task.task_id}:examples:{i}"), EXAMPLE_CANDIDATES)
        for i in range(count)
    ]
    flat = [
        list(args) if ex.kind == "call" else args[0]
        for sets in per_copy
        for inputs in sets
        for ex, args in zip(examples, inputs)
        if args is not None
    ]
    try:
        outputs = list(run_solution(task, flat)) if flat else []
    except Exception as err:  # the executor is someone else's code: report, do not crash
        return [(task, 0)] * count, f"run_solution failed: {type(err).__name__}: {err}"
    if len(outputs) != len(flat):
        return [(task, 0)] * count, f"run_solution returned {len(outputs)} outputs for {len(flat)} inputs"
    copies, ran = [], iter(outputs)
    for sets in per_copy:
        set_outputs = [[None if args is None else next(ran) for args in inputs] for inputs in sets]
        inputs, outs = choose_set(examples, task.prompt, sets, set_outputs)
        copies.append(replace_examples(task, examples, inputs, outs))
    return copies, None


def _parses(task: Task) -> bool:
    try:
        ast.parse(program_text(task)[0])
        if task.tests.strip():
            ast.parse(task.tests)
        return True
    except SyntaxError:
        return False


def make_variants(
    task: Task,
    n: int = 10,
    seed: int = 0,
    *,
    run_solution: RunSolution | None = None,
    verify: Verification | None = None,
    llm: Callable[[str], str] | None = None,
    rename: bool = True,
) -> VariantSet:
    """Up to `n` verified semantics-preserving variants of `task`, deterministic for a seed, from at most
    3n candidates. Names come from the vocabulary or from `llm` (leaklab's prompt -> a proposed program);
    `rename=False` keeps them all (an ablation). Examples are replaced (tau_t) only with `run_solution`;
    `verify` None checks parsing alone. Never raises on bad input: `VariantSet.reasons` says why fewer
    than n came back."""
    verify_by = verify.by if verify is not None else "none"
    result = VariantSet(task.task_id, n, tests_run=verify_by == "tests", verified_by=verify_by)
    try:
        analysis = analyse_task(task)
    except NotRenamable as err:
        result.reasons.append(str(err))
        return result
    if not _can_vary(task, analysis, rename, verify_by == "tests", result):
        return result
    attempts = 3 * n
    bases: list[tuple[Task, int]] = [(task, 0)] * n
    if run_solution is not None:
        bases, why = _example_tasks(task, analysis, n, seed, run_solution)
        if why:
            result.notes.append(why)

    seen = {task.prompt + task.solution + task.tests}
    failures: Counter[str] = Counter()  # why a candidate was dropped, in the order first seen
    for attempt in range(attempts):
        if len(result.variants) >= n:
            break
        base, replaced = bases[attempt % len(bases)]
        rng = random.Random(f"{seed}:{task.task_id}:names:{attempt}")
        try:
            renames = _proposed_renames(task, analysis, rename, llm, rng, result)
            candidate = rename_task(base, renames, analysis if base is task else None)
        except NotRenamable as err:
            failures[str(err)] += 1
            continue
        except Exception as err:  # an LLM backend failing is not our caller's problem
            failures[f"{type(err).__name__}: {err}"] += 1
            continue
        key = candidate.prompt + candidate.solution + candidate.tests
        if key in seen:
            failures["duplicate of an earlier variant"] += 1
            continue
        seen.add(key)
        result.n_candidates += 1
        candidate = _numbered(candidate, task, len(result.variants), renames)
        if not _parses(candidate):
            failures["the variant does not parse"] += 1
            continue
        if not _verified(candidate, verify, failures):
            continue
        result.n_verified += 1
        functions = {k: v for k, v in renames.items() if k in analysis.functions}
        variables = {k: v for k, v in renames.items() if k not in analysis.functions}
        result.variants.append(
            Variant(candidate, functions, variables, replaced, "llm" if llm else "vocabulary")
        )
    if len(result.variants) < n:
        result.reasons.append(f"{len(result.variants)} of {n} variants after {attempts} attempts")
        result.reasons.extend(f"{count}x {why}" for why, count in failures.items())
    return result


def _can_vary(task: Task, analysis, rename: bool, verify_by_tests: bool, result: VariantSet) -> bool:
    """False (with the reason in `result`) when the task has no name to rename, or no test to verify by."""
    if rename and not analysis.functions and not analysis.variables:
        frozen = ", ".join(f"{k} ({v})" for k, v in sorted(analysis.frozen.items())[:6])
        result.reasons.append("no renamable identifiers" + (f"; kept: {frozen}" if frozen else ""))
        return False
    if verify_by_tests and not task.has_tests():
        result.tests_run = False
        result.reasons.append(
            "no tests: the benchmark gives none to verify variants with "
            "(evaluate.srdetection.verify=alpha checks renaming-only variants without tests)"
        )
        return False
    return True


def _proposed_renames(
    task: Task, analysis, rename: bool, llm, rng: random.Random, result: VariantSet
) -> dict:
    """old name -> new name: none (rename=False), drawn from the vocabulary, or proposed by `llm`."""
    if not rename:
        return {}
    if llm is None:
        return propose_renames(analysis, rng)
    used = [name for v in result.variants for name in v.renames.values()]
    return renames_from_proposal(analysis, llm(llm_prompt(task, used)))


def _numbered(candidate: Task, task: Task, index: int, renames: dict) -> Task:
    """The candidate as variant `index` of `task`: its id and metadata say what it is a variant of."""
    return dataclasses.replace(
        candidate,
        task_id=f"{task.task_id}#v{index}",
        metadata={**task.metadata, "variant_of": task.task_id, "variant_index": index, "renames": renames},
    )


class _AlphaRename(ast.NodeTransformer):
    """Apply a renaming to every binding and use of a name in an AST (attributes excepted), the way
    `rename_task` edits the text: names, parameters, definitions, global/nonlocal lists, except-as
    names, and keyword arguments of calls to renamed functions."""

    def __init__(self, renames: dict[str, str]):
        self.renames = renames

    def _new(self, name):
        return self.renames.get(name, name) if name is not None else None

    def visit_Name(self, node):
        node.id = self._new(node.id)
        return node

    def visit_arg(self, node):
        node.arg = self._new(node.arg)
        return self.generic_visit(node)

    def _visit_def(self, node):
        node.name = self._new(node.name)
        return self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = _visit_def

    def visit_Global(self, node):
        node.names = [self._new(n) for n in node.names]
        return node

    visit_Nonlocal = visit_Global

    def visit_ExceptHandler(self, node):
        node.name = self._new(node.name)
        return self.generic_visit(node)

    def visit_Call(self, node):
        if isinstance(node.func, ast.Name) and node.func.id in self.renames:
            for kw in node.keywords:
                kw.arg = self._new(kw.arg)
        return self.generic_visit(node)


def _without_docstrings(tree: ast.AST) -> ast.AST:
    # Docstrings are prose and shown examples, not code: renaming and tau_t rewrite them.
    for node in ast.walk(tree):
        first = identifiers.docstring_statement(node)
        if first is not None and isinstance(first.value.value, str):
            node.body = node.body[1:] or [ast.Pass()]
    return tree


def alpha_equivalent(original: Task, variant: Task, renames: dict[str, str]) -> bool:
    """Verification without tests: the variant's program is the original's under `renames` and nothing
    else (same AST once names are mapped and docstrings dropped), the renaming injective onto names the
    original never uses, so no reference is captured and nothing the program computes changes."""
    try:
        before = ast.parse(program_text(original)[0])
        after = ast.parse(program_text(variant)[0])
    except SyntaxError:
        return False
    used = {n.id for n in ast.walk(before) if isinstance(n, ast.Name)}
    used |= {n.arg for n in ast.walk(before) if isinstance(n, ast.arg)}
    used |= {n.name for n in ast.walk(before) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    new_names = list(renames.values())
    if len(set(new_names)) != len(new_names) or set(new_names) & (used - set(renames)):
        return False
    mapped = _without_docstrings(_AlphaRename(dict(renames)).visit(before))
    return ast.dump(mapped) == ast.dump(_without_docstrings(after))


FAILED = {
    "tests": "the benchmark's tests failed on the variant",
    "alpha": "the variant's program is not the original's under the renaming",
}


def _verified(candidate: Task, verify: Verification | None, failures: Counter[str]) -> bool:
    if verify is None:
        return True
    try:
        if verify.check(candidate):
            return True
        why = FAILED.get(verify.by, "the variant failed its check")
    except Exception as err:
        why = f"verify raised {type(err).__name__}"
    failures[why] += 1
    return False
