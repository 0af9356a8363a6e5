"""The optional LLM backend of MRI's perturbations: leaklab's prompts for paraphrase, rewriting and
judging a rewrite, tolerant reading of the replies (an unreadable or rule-breaking reply is a counted
rejection, never raised), and the rule-based rewriter's execution checks.
See docs/perturbations.md#mri-rewriting.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Sequence

from leaklab.data.tasks import Task
from leaklab.execution.sandbox import FunctionCalls
from leaklab.perturb.rewriting import (
    LOGIC_TYPES,
    NotRewritable,
    Rewrite,
    _outcome,
    check_candidate,
    entry_function,
    entry_params,
    probe_inputs,
    quoted_code,
    rewritten_task,
    with_outputs,
)
from leaklab.perturb.unittest_rewrite import Candidate, regenerable_sites, validate_candidates
from leaklab.similarity.judges import ask, reply_fields, yes_no

PARAPHRASE_PROMPT = """\
Here is the statement of a Python programming task, between <task> and </task>.

Write the same task in different words: the same meaning, requirements and examples, other phrasing.
Rules:
- keep every line of code as it is: the imports, the function signature, and every example (lines
  starting with >>> and the output under them);
- reword only the prose of the description;
- add no hints, no solution and no new requirement.

Answer with the whole reworded statement only, between <task> and </task>.

<task>
{prompt}</task>
"""

REWRITE_PROMPT = """\
Here is a Python programming task (between <task> and </task>) and its reference solution (between
<code> and </code>).

Make a new, different task from it:
1. Change exactly ONE piece of core logic of the solution, of one of these kinds: {types}.
   Keep the function name and its parameters exactly as they are. Do not rename variables, add if
   statements or make cosmetic edits: the new code must compute something different, and be about as
   hard to write as the original.
2. Rewrite the task statement so it asks for the new behaviour, changing as few words as possible and
   keeping the signature, imports and the layout of the examples (their outputs will be recomputed).
   Describe the new behaviour in words: quote no code of the old or the new solution.

Answer in exactly this form:
<type>the kind of change, one of the names above</type>
<code>
the whole new program
</code>
<task>
the whole new task statement
</task>

<task>
{prompt}</task>
<code>
{program}</code>
"""


def _tagged(reply: str, tag: str) -> str | None:
    """The text of the last <tag> block (closed or not; its fenced code if fenced), ending in a newline."""
    found = re.findall(rf"<{tag}>\n?(.*?)(?:</{tag}>|\Z)", reply, re.S)
    if not found:
        return None
    fence = re.search(r"```(?:python)?\n(.*?)```", found[-1], re.S)
    text = fence.group(1) if fence else found[-1]
    return text if text.endswith("\n") else text + "\n"


def _example_lines(prompt: str) -> list[str]:
    return [ln.strip() for ln in prompt.splitlines() if ln.strip().startswith(">>>")]


def read_paraphrase(task: Task, reply: str) -> tuple[Task | None, str]:
    """(paraphrased task, "") or (None, why it was refused)."""
    text = _tagged(reply, "task")
    if text is None:
        return None, "no <task> block in the reply"
    if not text.strip():
        return None, "empty paraphrase"
    if task.prompt_is_code:
        if entry_params(text, task.entry_point) != entry_params(task.program(), task.entry_point):
            return None, "the signature changed or the statement does not parse"
        if _example_lines(text) != _example_lines(task.prompt):
            return None, "the examples changed"
    if " ".join(text.split()) == " ".join(task.prompt.split()):
        return None, "nothing was reworded"
    meta = {**task.metadata, "paraphrase_of": task.task_id}
    return dataclasses.replace(task, task_id=f"{task.task_id}/paraphrase", prompt=text, metadata=meta), ""


def llm_paraphrases(
    tasks: Sequence[Task], generator, render: Callable[[str], str] = lambda t: t, max_new_tokens: int = 1024
) -> tuple[list[Task | None], Counter]:
    """One paraphrase per task (None where the reply was refused) and the refusals by reason."""
    prompts = [render(PARAPHRASE_PROMPT.format(prompt=t.prompt)) for t in tasks]
    read = [
        read_paraphrase(task, reply) for task, reply in zip(tasks, ask(generator, prompts, max_new_tokens))
    ]
    return [paraphrase for paraphrase, _ in read], Counter(why for _, why in read if why)


@dataclasses.dataclass
class Proposal:
    logic_type: str
    program: str  # what the tests run: prompt + solution for a code prompt, else the solution
    prompt: str  # the proposed statement
    solution: str  # what completes `prompt` (prompt_is_code: the entry point's body onwards)


def _body_onwards(program: str, entry_point: str | None) -> str | None:
    """The program from the entry point's first statement after its docstring: what follows a statement."""
    entry = entry_function(ast.parse(program), entry_point)
    body = entry.body if entry else []
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if not body:
        return None
    return "".join(program.splitlines(keepends=True)[body[0].lineno - 1 :])


def read_rewrite(task: Task, reply: str) -> tuple[Proposal | None, str]:
    """The proposed (type, program, prompt), or None and why it was refused."""
    code, statement = _tagged(reply, "code"), _tagged(reply, "task")
    kind = (_tagged(reply, "type") or "").strip().lower().replace(" ", "_").replace("-", "_")
    if code is None or statement is None:
        return None, "the reply lacks a <code> or <task> block"
    if kind not in LOGIC_TYPES:
        kind = "other"
    old = entry_params(task.program(), task.entry_point)
    if entry_params(code, task.entry_point) != old:
        return None, "the program does not parse, lacks the entry point or changed its parameters"
    if " ".join(code.split()) == " ".join(task.program().split()):
        return None, "the program is unchanged"
    solution = code
    if task.prompt_is_code:
        # The task's program is statement + solution: the statement must be the signature and docstring
        # of the same function, and the solution the proposed body (helpers after it kept).
        if entry_params(statement, task.entry_point) != old:
            return None, "the statement does not parse or lost the signature"
        solution = _body_onwards(code, task.entry_point)
        if solution is None:
            return None, "the proposed function has no body"
    # A statement quoting either solution's code hands the model the original (Sim up, RAD down).
    quoted = quoted_code(statement, [task.program(), code], task.entry_point, task.prompt)
    if quoted:
        return None, f"the statement quotes the solutions' code ({', '.join(quoted[:3])})"
    program = statement + solution if task.prompt_is_code else solution
    return Proposal(kind, program, statement, solution), ""


def llm_rewrites(
    tasks: Sequence[Task],
    generator,
    sandbox,
    *,
    render: Callable[[str], str] = lambda t: t,
    max_new_tokens: int = 2048,
    timeout_s: float = 5.0,
) -> list[Rewrite]:
    """One LLM rewrite per task, checked in the sandbox exactly as the rule-based ones are."""
    results = [Rewrite(t.task_id) for t in tasks]
    types = ", ".join(t.replace("_", " ") for t in LOGIC_TYPES)
    prompts = [REWRITE_PROMPT.format(types=types, prompt=t.prompt, program=t.program()) for t in tasks]
    replies = ask(generator, [render(p) for p in prompts], max_new_tokens)
    plans, jobs, units = [], [], {}
    for i, (task, reply) in enumerate(zip(tasks, replies)):
        proposal, why = read_rewrite(task, reply)
        if proposal is None:
            results[i].reject("llm", "unreadable", why)
            continue
        if task.test_type == "unittest":  # no call inputs: its asserted literals are regenerated instead
            units[i] = proposal
            continue
        try:
            inputs, examples, probe = probe_inputs(task, proposal.prompt)
        except NotRewritable as err:
            results[i].reject(proposal.logic_type, "not_rewritable", str(err))
            continue
        entry = task.entry_point or ""
        plans.append((i, proposal, inputs, examples, probe, len(jobs)))
        jobs += [FunctionCalls(p, entry, probe, timeout_s) for p in (task.program(), proposal.program)]
    ran = sandbox.run_jobs(jobs)
    for i, proposal, inputs, examples, probe, j in plans:
        task, kind = tasks[i], proposal.logic_type
        results[i].tried[kind] = 1
        original, why = _outcome(ran[j], len(probe))
        if original is None:
            results[i].reject("any", "original_fails", why[:200])
            continue
        values, rejection = check_candidate(task, inputs, original, ran[j + 1], len(probe))
        if rejection is not None:
            results[i].reject(kind, **rejection)
            continue
        n = len(inputs)
        prompt = with_outputs(task, proposal.prompt, examples, values[n:])
        new = rewritten_task(task, prompt, proposal.solution, inputs, values[:n], kind, "LLM rewrite")
        results[i].accept(new, kind, "LLM rewrite")
    if units:  # through unittest_rewrite's checks, as the rule-based rewrites of such tasks
        subset, mine = [tasks[i] for i in units], [results[i] for i in units]
        sites = regenerable_sites(subset, sandbox, mine, timeout_s)
        candidates = [
            [Candidate(p.logic_type, p.program, p.solution, p.prompt, "LLM rewrite")] for p in units.values()
        ]
        validate_candidates(subset, sites, candidates, sandbox, mine, timeout_s)
    return results


# --------------------------------------------------------------------------- the judge of a rewrite

JUDGE_PROMPT = """\
A Python programming task was changed into a new one. Below are the original task with its reference
solution, then the new task with its reference solution and some of its tests (a call and the value it
must return).

<original_task>
{prompt}</original_task>
<original_solution>
{program}</original_solution>

<new_task>
{new_prompt}</new_task>
<new_solution>
{new_program}</new_solution>
<new_tests>
{tests}
</new_tests>

Answer two questions about the NEW task.
1. Alignment: does the new task statement ask for exactly what the new solution does, so that a careful
   programmer reading only the new statement would write code that passes the new tests? Examples in
   the statement that contradict the solution, or a changed behaviour the statement does not mention,
   mean it is not aligned.
2. Difficulty: compared with the original task, is the new task easier, about the same, or harder to
   solve?

Answer with JSON only, in this form:
{{"aligned": true or false, "difficulty": "easier" or "same" or "harder", "reason": "<one sentence>"}}
"""
JUDGE_TESTS_SHOWN = 5  # tests quoted in the judge's prompt (the first ones)


@dataclasses.dataclass(frozen=True)
class Judgement:
    """The judge's verdict on one rewrite: aligned (None when unreadable), difficulty, reason, and why
    the reply could not be read ("" when it could)."""

    aligned: bool | None
    difficulty: str | None = None
    reason: str = ""
    failure: str = ""

    @property
    def keeps(self) -> bool:
        """What the filter keeps: aligned and of equal difficulty, as the paper's validation (App. B)."""
        return self.aligned is True and self.difficulty == "same"


def judge_prompt(original: Task, rewrite: Task) -> str:
    tests = rewrite.tests.strip()[:2000]
    if rewrite.test_type == "call" and rewrite.test_cases:
        calls = []
        for case in rewrite.test_cases[:JUDGE_TESTS_SHOWN]:
            args = ", ".join(repr(a) for a in case["input"])
            calls.append(f"{rewrite.entry_point}({args}) == {case['output']!r}")
        tests = "\n".join(calls)
    return JUDGE_PROMPT.format(
        prompt=original.prompt,
        program=original.program(),
        new_prompt=rewrite.prompt,
        new_program=rewrite.program(),
        tests=tests,
    )


_DIFFICULTY_WORDS = {
    "same": "same", "similar": "same", "equal": "same", "about the same": "same", "comparable": "same",
    "easier": "easier", "simpler": "easier", "harder": "harder", "more difficult": "harder",
}  # fmt: skip


def read_judgement(reply: str) -> Judgement:
    """Read one judge reply: JSON (fenced or bare, the last object wins), or failing that the fields
    `aligned: ...` and `difficulty: ...` written loosely. Anything else is a Judgement with `failure`."""
    if not reply or not reply.strip():
        return Judgement(None, failure="empty reply")
    obj = reply_fields(reply, ("aligned", "difficulty", "reason"))
    if obj is None:
        return Judgement(None, failure="no JSON object in the reply")
    aligned = yes_no(obj.get("aligned"))
    if aligned is None:
        return Judgement(None, failure="no true/false 'aligned' field")
    difficulty = _DIFFICULTY_WORDS.get(str(obj.get("difficulty", "")).strip().lower())
    reason = str(obj.get("reason") or "")
    if difficulty is None:
        return Judgement(aligned, None, reason, failure=f"unknown difficulty {obj.get('difficulty')!r}")
    return Judgement(aligned, difficulty, reason)


def llm_judge_rewrites(
    pairs: Sequence[tuple[Task, Task]],
    generator,
    render: Callable[[str], str] = lambda t: t,
    max_new_tokens: int = 256,
) -> tuple[list[Judgement], Counter]:
    """The judge's verdict on every (original, rewrite) pair, and the unreadable replies by reason."""
    if not pairs:
        return [], Counter()
    prompts = [render(judge_prompt(original, rewrite)) for original, rewrite in pairs]
    verdicts = [read_judgement(reply) for reply in ask(generator, prompts, max_new_tokens)]
    return verdicts, Counter(v.failure for v in verdicts if v.failure)
