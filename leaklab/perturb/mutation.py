"""Mutation for MRI (Memorize or generalize?, §3.2, App. B): seeded, rule-based, semantics-preserving
noise on the prose of a task's description (scramble, capitalise, character noise; about RATE operations
per word, each kind at least once); identifiers, signature and examples stay.
See docs/perturbations.md#mri-mutation.
"""

from __future__ import annotations

import ast
import dataclasses
import random
import re
import string

from leaklab.data.tasks import Task
from leaklab.perturb.renaming import apply_edits
from leaklab.perturb.rewriting import _docstring_span

RATE = 4 / 5  # operations per word of the description
KINDS = ("scramble", "capitalise", "noise")
_WORD = re.compile(r"[A-Za-z]+")
# Letters, digits and punctuation (004 App. B.3); no quote or backslash, which could end a docstring.
NOISE_CHARACTERS = (
    string.ascii_lowercase + string.digits + "".join(c for c in string.punctuation if c not in "'\"\\`")
)
_EXAMPLE_LINE = re.compile(r"^[ \t]*(>>>|assert\s|\w+\(.*\)\s*(==>|=>|➞|->)|Input|Output|Example)", re.I)


# The field that holds the identifier of each kind of node that names something.
_NAME_FIELD = {ast.Name: "id", ast.arg: "arg", ast.Attribute: "attr"}
_NAME_FIELD |= dict.fromkeys((ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef), "name")


def _identifiers(task: Task) -> set[str]:
    try:
        tree = ast.parse(task.program())
    except (SyntaxError, ValueError):
        return {task.entry_point} if task.entry_point else set()
    return {getattr(node, _NAME_FIELD[type(node)]) for node in ast.walk(tree) if type(node) in _NAME_FIELD}


def _prose_regions(task: Task) -> list[tuple[int, int]]:
    """Character spans of the prompt whose words may be mutated."""
    prompt = task.prompt
    if task.prompt_is_code:
        span = _docstring_span(task)
        if span is None:
            return []
        lo, hi = span[0] + 3, span[1] - 3
    else:
        lo, hi = 0, len(prompt)
    regions, skip_next, end = [], False, lo
    for line in prompt[lo:hi].splitlines(keepends=True):
        start, end = end, end + len(line)
        if skip_next:  # the output line that follows a doctest call
            skip_next = False
            continue
        stripped = line.strip()
        if _EXAMPLE_LINE.match(line):
            skip_next = stripped.startswith(">>>")
            continue
        if not stripped or re.search(r"[=\[\]{}()]", stripped) and not task.prompt_is_code:
            continue  # a sample block or formula in a prose prompt stays
        regions.append((start, end))
    return regions


def _words(task: Task) -> list[tuple[int, int]]:
    protected = _identifiers(task)
    out = []
    for lo, hi in _prose_regions(task):
        text = task.prompt[lo:hi]
        for m in _WORD.finditer(text):
            word = m.group()
            # Skip identifiers, words glued to code (snake_case, digits, dotted names) or in backquotes.
            before = text[m.start() - 1] if m.start() else " "
            after = text[m.end()] if m.end() < len(text) else " "
            if (
                word in protected
                or before in "_.`'\""
                or after in "_`('\""
                or before.isdigit()
                or after.isdigit()
            ):
                continue
            out.append((lo + m.start(), lo + m.end()))
    return out


def _scramble(word: str, rng: random.Random) -> str | None:
    if len(word) < 4 or len(set(word[1:-1])) < 2:
        return None
    middle = list(word[1:-1])
    for _ in range(10):
        rng.shuffle(middle)
        new = word[0] + "".join(middle) + word[-1]
        if new != word:
            return new
    return None


def _capitalise(word: str, rng: random.Random) -> str:
    i = rng.randrange(len(word))
    return word[:i] + word[i].swapcase() + word[i + 1 :]


def _noise(word: str, rng: random.Random) -> str:
    i = rng.randrange(len(word))
    char = rng.choice(NOISE_CHARACTERS)
    action = rng.choice(("insert", "delete", "substitute") if len(word) > 1 else ("insert", "substitute"))
    if action == "insert":
        return word[:i] + char + word[i:]
    if action == "delete":
        return word[:i] + word[i + 1 :]
    while char == word[i].lower():
        char = rng.choice(NOISE_CHARACTERS)
    return word[:i] + char + word[i + 1 :]


def plan(n_words: int, rng: random.Random) -> list[str]:
    """The kinds of operation for a description of `n_words` words: round(RATE * n) in all (at least
    one of each kind), one of each first, the rest drawn."""
    total = max(len(KINDS), round(RATE * n_words))
    kinds = list(KINDS) + [rng.choice(KINDS) for _ in range(total - len(KINDS))]
    rng.shuffle(kinds)
    return kinds


def mutate_task(task: Task, rng: random.Random, max_tries: int = 5) -> tuple[Task | None, dict]:
    """(mutated task or None, counts): the prompt with noise on its prose, everything else unchanged.
    counts: operations per kind, `words`, `tries`, and `reason` when no mutation could be made."""
    words = _words(task)
    if not words:
        return None, {"reason": "no prose words to mutate", "words": 0}
    for attempt in range(1, max_tries + 1):
        kinds = plan(len(words), rng)
        order = list(range(len(words)))
        rng.shuffle(order)
        edits: dict[int, str] = {}
        counts = dict.fromkeys(KINDS, 0)
        for n, kind in enumerate(kinds):
            w = order[n % len(order)]  # a fresh word while there are any, then words again
            lo, hi = words[w]
            current = edits.get(w, task.prompt[lo:hi])
            if kind == "scramble":
                # w, or if too short to scramble (no draw made) the first word in `order` that is not
                for i in (w, *order):
                    new = _scramble(edits.get(i, task.prompt[slice(*words[i])]), rng)
                    if new is not None:
                        w = i
                        break
                if new is None:
                    new, kind = _capitalise(current, rng), "capitalise"
            else:
                new = {"capitalise": _capitalise, "noise": _noise}[kind](current, rng)
            edits[w] = new
            counts[kind] += 1
        prompt = apply_edits(task.prompt, [(*words[w], new) for w, new in edits.items()])
        if task.prompt_is_code:
            try:
                ast.parse(prompt)
            except (SyntaxError, ValueError):
                continue
        if prompt == task.prompt:
            continue
        mutated = dataclasses.replace(
            task,
            task_id=f"{task.task_id}/mutate",
            prompt=prompt,
            metadata={**task.metadata, "mutation_of": task.task_id, "mutation_ops": counts},
        )
        return mutated, {**counts, "words": len(words), "tries": attempt}
    return None, {"reason": "every mutation broke the prompt or changed nothing", "words": len(words)}
