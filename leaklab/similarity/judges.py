"""LLM judges of code similarity: the counterfactual paper's questions (000 App. C.1) in leaklab's words
(`SYSTEMS`, `PROMPTS`), and HyClone's stage-1 clone screen; tolerant reading of the replies (an
unreadable one is a `Verdict` with `failure`, counted by `judge_pairs`, never raised).
See docs/perturbations.md#llm-judges.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

CATEGORIES = ("equivalent", "similar", "opposed", "unrelated")

# What each judge asks and after whom (000 App. C.1; HyClone, App. C.2): docs/perturbations.md#llm-judges.
SYSTEMS = {
    "structural": "You are a system that rates how similar pieces of code are.",
    "rating": (
        "You are a system that rates how similar pieces of code are, judging how code fragments relate "
        "in meaning."
    ),
    "equivalence": (
        "You are an expert in code analysis who judges whether two Python functions are functionally "
        "equivalent."
    ),
    "clone_screen": "You are an expert in code analysis who screens pairs of functions for clones.",
}

PROMPTS = {
    "structural": (
        "Here are two Python code passages. Rate how similar they are by the structure a grammar parser "
        "finds in them, with a score from 0 to 1 written to three decimal places in the form [[0.777]].\n"
        "=====Code 1=====\n{reference}\n=====Code 2=====\n{candidate}\n=====End====="
    ),
    "rating": (
        "Rate how semantically similar the two Python code fragments below are.\n\n"
        "Code Fragment 1:\n{reference}\n\nCode Fragment 2:\n{candidate}\n\n"
        "Give your rating as one JSON object with exactly these three fields:\n"
        '1. "similarity_rating": how semantically similar they are, from 0.0 to 1.0\n'
        '2. "category": exactly one of "equivalent", "similar", "opposed" or "unrelated"\n'
        '3. "reasoning": a short justification of the rating\n\n'
        "Reply with the JSON object and nothing else."
    ),
    "equivalence": (
        "Judge whether the two Python functions below encode the same logic. Take into account whether "
        "they give the same outputs for the same inputs, whether they follow the same algorithm or "
        "approach, and whether they treat edge cases in the same way.\n\n"
        "Function A (Reference):\n{reference}\n\nFunction B (Generated):\n{candidate}\n\n"
        "Give one equivalence score from 0.0 to 1.0: 0.0 for entirely different logic, 1.0 for the same "
        "logic. Reply with a JSON object and nothing else:\n"
        '{{"equivalence_score": <0.0 to 1.0>, "reasoning": "<short explanation>"}}'
    ),
    "clone_screen": (
        "Screen these two Python functions for functional cloning: would they likely produce the same "
        "outputs for the same inputs?\n\nFunction A (Reference):\n{reference}\n\n"
        "Function B (Generated):\n{candidate}\n\nReply with a JSON object and nothing else: "
        '{{"clone": true}} or {{"clone": false}}'
    ),
}


@dataclass(frozen=True)
class Verdict:
    score: float | None  # in [0, 1]; 1.0 / 0.0 for the clone screen; None when unreadable
    category: str | None = None
    reason: str | None = None
    failure: str = ""


def make_backend(backend: str, model: str, base_url: str | None = None):
    """(generator, render) for an LLM that leaklab asks its own prompts: "openai" (a server at
    `base_url`, key from $OPENAI_API_KEY) or "hf" (a local directory or hub name, loaded here; a chat
    model's prompts are wrapped in its chat template; other prompts are read as they are)."""
    from leaklab.signals.generation import make_generator

    if backend == "openai":
        api_key = os.environ.get("OPENAI_API_KEY")
        return make_generator("openai", base_url, model, api_key=api_key), lambda text: text
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    generator = make_generator("hf", AutoModelForCausalLM.from_pretrained(model, dtype="auto"), tokenizer)
    if not getattr(tokenizer, "chat_template", None):
        return generator, lambda text: text

    def render(text: str) -> str:
        return tokenizer.apply_chat_template(chat_messages(text), tokenize=False, add_generation_prompt=True)

    return generator, render


def prompt(kind: str, reference: str, candidate: str) -> str:
    """The judge's system role, a blank line, then its question about the pair (`chat_messages` splits
    them again for a chat template)."""
    user = PROMPTS[kind].format(reference=reference.rstrip("\n"), candidate=candidate.rstrip("\n"))
    return f"{SYSTEMS[kind]}\n\n{user}"


def chat_messages(text: str) -> list[dict[str, str]]:
    """A judge prompt as chat turns: its system role as a system turn, the rest as the user's; any other
    text as one user turn."""
    for system in SYSTEMS.values():
        if text.startswith(system + "\n\n"):
            return [
                {"role": "system", "content": system},
                {"role": "user", "content": text[len(system) + 2 :]},
            ]
    return [{"role": "user", "content": text}]


_NUMBER = r"([01](?:\.\d+)?|\.\d+)"
_BRACKETED = re.compile(r"\[\[\s*" + _NUMBER + r"\s*\]\]")


def _unit(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if 0.0 <= number <= 1.0 else None


def reply_fields(reply: str, keys: Sequence[str]) -> dict | None:
    """The reply's last JSON object with lower-cased keys or, when it has none, the `keys` read one by
    one from loose `key: value` text (models drop braces or quote oddly); None when neither is there."""
    decoder = json.JSONDecoder()
    obj = None
    for brace in re.finditer(r"\{", reply):  # fenced or bare
        try:
            found, _ = decoder.raw_decode(reply[brace.start() :])
        except json.JSONDecodeError:
            continue
        if isinstance(found, dict):
            obj = found
    if obj is None:
        obj = {}
        for key in keys:
            m = re.search(rf"""["']?{key}["']?\s*[:=]\s*["']?([^"',}}\n]+)""", reply, re.IGNORECASE)
            if m:
                obj[key] = m.group(1).strip()
        if not obj:
            return None
    return {str(k).lower(): v for k, v in obj.items()}


def yes_no(value) -> bool | None:
    """A JSON boolean, or true / yes / false / no written as a string; None for anything else."""
    if isinstance(value, str):
        value = {"true": True, "yes": True, "false": False, "no": False}.get(value.strip().lower())
    return value if isinstance(value, bool) else None


def parse(kind: str, reply: str) -> Verdict:
    """Read one judge reply; anything unreadable is a Verdict with `failure` set."""
    if not reply or not reply.strip():
        return Verdict(None, failure="empty reply")
    if kind == "structural":
        matches = _BRACKETED.findall(reply)
        if not matches:
            return Verdict(None, failure="no [[score]] in the reply")
        score = _unit(matches[-1])  # the final answer comes last
        return Verdict(score) if score is not None else Verdict(None, failure="score outside [0, 1]")
    keys = ("similarity_rating", "equivalence_score", "score", "category", "reasoning", "reason", "clone")
    obj = reply_fields(reply, keys)
    if obj is None:
        return Verdict(None, failure="no JSON object in the reply")
    if kind == "clone_screen":
        value = yes_no(obj.get("clone"))
        if value is None:
            return Verdict(None, failure="no true/false 'clone' field")
        return Verdict(1.0 if value else 0.0)
    # The field the prompt asks for; a plain "score" is read too (models rename fields).
    field = {"rating": "similarity_rating", "equivalence": "equivalence_score"}[kind]
    score = _unit(obj.get(field, obj.get("score")))
    if score is None:
        return Verdict(None, failure=f"no '{field}' in [0, 1]")
    reason = obj.get("reasoning", obj.get("reason"))
    if kind == "equivalence":
        return Verdict(score)
    category = str(obj.get("category", "")).strip().lower()
    if category not in CATEGORIES:
        return Verdict(score, None, reason, failure=f"unknown category {category!r}")
    return Verdict(score, category, str(reason or "") or None)


def ask(generator, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
    """One greedy reply per prompt from any `leaklab.signals.generation` back-end ("" where it gave none)."""
    replies = generator.generate(prompts, max_new_tokens=max_new_tokens, temperature=0.0)
    return [completions[0].text if completions else "" for completions in replies]


def judge_pairs(
    generator,
    kind: str,
    pairs: Sequence[tuple[str, str]],
    render: Callable[[str], str] = lambda text: text,
    max_new_tokens: int = 256,
) -> tuple[list[Verdict], Counter]:
    """Ask one judge about every (reference, candidate) pair; the verdicts and the failures by reason."""
    prompts = [render(prompt(kind, ref, cand)) for ref, cand in pairs]
    verdicts = [parse(kind, reply) for reply in ask(generator, prompts, max_new_tokens)]
    return verdicts, Counter(v.failure for v in verdicts if v.failure)
