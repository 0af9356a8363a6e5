"""LLM judges of code similarity: leaklab's own prompts, tolerant parsing, counted failures.

Four questions about a pair (reference function = the ground truth, candidate = a generation):
  structural    how similar the two are in structure, a 0-1 score written as [[x.xxx]]
  rating        a 0-1 similarity rating, one category (equivalent / similar / opposed / unrelated) and a
                one-sentence reason, as JSON
  equivalence   a 0-1 score for "the two compute the same function", as JSON
  clone_screen  HyClone's stage 1: a yes/no "are these likely functional clones", as JSON
Any back-end of `leaklab.signals.generation` answers them (HFGenerator on a local model, OpenAIGenerator
on an OpenAI-compatible server, VLLMGenerator); `render` wraps a prompt for a chat model (e.g. the
tokenizer's chat template). Greedy decoding. A reply that cannot be read becomes a `Verdict` with
`failure` set and no score, and `judge_pairs` counts them, never raises.

The counterfactual evaluation asks them as optional functional metrics (`evaluate.counterfactual.judges`,
`judge_backend`; `make_backend` builds the back-end). The clone screen (HyClone's stage 1) is asked by
`leaklab/execution/crossexec.py` before cross-execution (stage 2) when a back-end is configured.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

CATEGORIES = ("equivalent", "similar", "opposed", "unrelated")

_PAIR = """Function A (the reference):
```python
{reference}
```

Function B (the candidate):
```python
{candidate}
```
"""

PROMPTS = {
    "structural": (
        "You compare two Python functions by their structure: the control flow, the order of the "
        "operations, how data moves between variables and calls. Names, comments and formatting do not "
        "matter.\n\n" + _PAIR + "\nHow structurally similar are A and B, from 0 (nothing in common) to 1 "
        "(the same structure)? Think briefly, then end your answer with the score in double brackets "
        "with three decimals, for example [[0.350]]."
    ),
    "rating": (
        "You judge how close a candidate Python function is to a reference function.\n\n" + _PAIR + "\n"
        "Give a similarity rating from 0 to 1, pick the one category that fits best - equivalent (same "
        "behaviour), similar (mostly the same behaviour), opposed (related but does something "
        "contrary), unrelated (different purpose) - and give one sentence of reason. Answer with JSON "
        'only: {{"score": <number>, "category": "<category>", "reason": "<sentence>"}}'
    ),
    "equivalence": (
        "Decide whether two Python functions compute the same thing: for every input they accept, do "
        "they return the same value and cause the same effects? Different code that behaves the same "
        "counts as equivalent.\n\n" + _PAIR + "\nGive a score from 0 (clearly different behaviour) to "
        '1 (certainly equivalent). Answer with JSON only: {{"score": <number>}}'
    ),
    "clone_screen": (
        "Screen two Python functions for functional cloning: would they likely produce the same outputs "
        "for the same inputs?\n\n" + _PAIR + '\nAnswer with JSON only: {{"clone": true}} or '
        '{{"clone": false}}'
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
    model's prompts are wrapped in its chat template)."""
    from leaklab.signals.generation import make_generator

    if backend == "openai":
        return make_generator("openai", base_url, model, api_key=os.environ.get("OPENAI_API_KEY")), None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    generator = make_generator("hf", AutoModelForCausalLM.from_pretrained(model, dtype="auto"), tokenizer)
    if not getattr(tokenizer, "chat_template", None):
        return generator, None

    def render(text: str) -> str:
        messages = [{"role": "user", "content": text}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    return generator, render


def prompt(kind: str, reference: str, candidate: str) -> str:
    if kind not in PROMPTS:
        raise ValueError(f"unknown judge {kind!r}; choose one of {', '.join(PROMPTS)}")
    return PROMPTS[kind].format(reference=reference.rstrip("\n"), candidate=candidate.rstrip("\n"))


_NUMBER = r"([01](?:\.\d+)?|\.\d+)"
_BRACKETED = re.compile(r"\[\[\s*" + _NUMBER + r"\s*\]\]")


def _unit(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if 0.0 <= number <= 1.0 else None


def last_json_object(text: str) -> dict | None:
    """The last JSON object in `text` (fenced or bare); None when there is none."""
    decoder = json.JSONDecoder()
    found = None
    for start in [m.start() for m in re.finditer(r"\{", text)]:
        try:
            obj, _ = decoder.raw_decode(text[start:])
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            found = obj
    return found


def reply_fields(reply: str, keys: Sequence[str]) -> dict | None:
    """The reply's last JSON object with lower-cased keys or, when it has none, the `keys` read one by
    one from loose `key: value` text (models drop braces or quote oddly); None when neither is there."""
    obj = last_json_object(reply)
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
    obj = reply_fields(reply, ("score", "category", "reason", "clone"))
    if obj is None:
        return Verdict(None, failure="no JSON object in the reply")
    if kind == "clone_screen":
        value = yes_no(obj.get("clone"))
        if value is None:
            return Verdict(None, failure="no true/false 'clone' field")
        return Verdict(1.0 if value else 0.0)
    score = _unit(obj.get("score"))
    if score is None:
        return Verdict(None, failure="no 'score' in [0, 1]")
    if kind == "equivalence":
        return Verdict(score)
    category = str(obj.get("category", "")).strip().lower()
    if category not in CATEGORIES:
        return Verdict(score, None, obj.get("reason"), failure=f"unknown category {category!r}")
    return Verdict(score, category, str(obj.get("reason", "")) or None)


def judge_pairs(
    generator,
    kind: str,
    pairs: Sequence[tuple[str, str]],
    render: Callable[[str], str] = lambda text: text,
    max_new_tokens: int = 256,
) -> tuple[list[Verdict], Counter]:
    """Ask one judge about every (reference, candidate) pair; the verdicts and the failures by reason."""
    prompts = [render(prompt(kind, ref, cand)) for ref, cand in pairs]
    replies = generator.generate(prompts, max_new_tokens=max_new_tokens, temperature=0.0)
    verdicts = [parse(kind, completions[0].text if completions else "") for completions in replies]
    return verdicts, Counter(v.failure for v in verdicts if v.failure)
