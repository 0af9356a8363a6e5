"""How a task is shown to a model and how code is read back from its reply: one place for the `sft`
stage (what it trains on) and the `accuracy` evaluation (what it asks), so both see the same text.

Two formats:
  completion  a base model continues the task's prompt (signature + docstring); its reply is the body.
  chat        a chat model gets CHAT_INSTRUCTION with the prompt in a code block, through its tokenizer's
              chat template; its reply is the whole function in a code block.
`auto` picks chat when the tokenizer has a chat template, completion otherwise.

    fmt = resolve_format(tokenizer, "auto")
    prompt, answer = training_pair(task, tokenizer, fmt)          # the sft stage's example
    prompt = model_prompt(task, tokenizer, fmt)                    # what generation is asked
    ext = extract_code(task, reply, fmt)  # Extracted(code, full_program, failure)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from leaklab.data.tasks import Task

FORMATS = ("auto", "completion", "chat")
CHAT_INSTRUCTION = "Complete the following Python function.\n\n```python\n{prompt}```"
# A base model's body ends where a new top-level statement starts (the HumanEval convention).
COMPLETION_STOP = ("\ndef ", "\nclass ", "\nif ", "\nprint(", "\nassert ", "\n#")


class ChatFormatError(ValueError):
    """Chat format asked of a tokenizer that has no chat template."""


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def resolve_format(tokenizer, requested: str, key: str = "format") -> str:
    """ "completion" or "chat" for `requested` (auto | completion | chat); chat without a template is an
    error that names the key to change."""
    if requested not in FORMATS:
        raise ValueError(f"{key}: {requested!r} is not one of {', '.join(FORMATS)}")
    if requested == "auto":
        return "chat" if has_chat_template(tokenizer) else "completion"
    if requested == "chat" and not has_chat_template(tokenizer):
        name = getattr(tokenizer, "name_or_path", "the model")
        raise ChatFormatError(
            f"{key}: chat format asked, but the tokenizer of {name} has no chat template; "
            f"set {key}=completion (a base model continues the prompt) or use a chat model"
        )
    return requested


def _messages(task: Task) -> list[dict[str, str]]:
    return [{"role": "user", "content": CHAT_INSTRUCTION.format(prompt=task.prompt)}]


def model_prompt(task: Task, tokenizer, fmt: str) -> str:
    """The text a model is given for `task` (encoded as `tokenizer(text)` by the generation engine)."""
    if fmt == "completion":
        return task.prompt
    return tokenizer.apply_chat_template(_messages(task), tokenize=False, add_generation_prompt=True)


def chat_answer(task: Task) -> str:
    """The reply a chat model is taught: the whole canonical program in a code block."""
    return f"```python\n{task.program()}```"


def training_pair(task: Task, tokenizer, fmt: str) -> tuple[str, str]:
    """(prompt text, answer text) of one training example: the answer is what the loss is taken on.

    In chat format the answer is the assistant turn as the template renders it (with its end-of-turn
    text), the part of the whole conversation after the generation prompt."""
    if fmt == "completion":
        return task.prompt, task.solution
    prompt = model_prompt(task, tokenizer, fmt)
    full = tokenizer.apply_chat_template(
        [*_messages(task), {"role": "assistant", "content": chat_answer(task)}], tokenize=False
    )
    if not full.startswith(prompt):
        # Templates that render the last turn differently with a generation prompt: keep the whole
        # assistant text after the user's turn as the template renders it without one.
        user_only = tokenizer.apply_chat_template(_messages(task), tokenize=False)
        if not full.startswith(user_only):
            raise ChatFormatError(
                f"the chat template of {getattr(tokenizer, 'name_or_path', 'the model')} renders a "
                "conversation that does not start with its prompt; use format=completion"
            )
        return prompt, full[len(user_only) :]
    return prompt, full[len(prompt) :]


# --------------------------------------------------------------------------- reading code back


@dataclass(frozen=True)
class Extracted:
    """The code to test and how: `full_program` (a whole program) or a body continuing the prompt.
    `failure` names why no code could be read ("" when some was): counted, never raised."""

    code: str
    full_program: bool
    failure: str = ""


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.S)


def _code_blocks(reply: str) -> list[str]:
    """Fenced code blocks in order, Python (or unlabelled) ones first; an unclosed last fence counts."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(reply)]
    python = [b for lang, b in blocks if lang in ("python", "py", "python3", "")]
    return python + [b for lang, b in blocks if lang not in ("python", "py", "python3", "")]


def _prompt_imports(task: Task) -> str:
    """The prompt's import lines (HumanEval's `from typing import List`), for a reply that is a whole
    function but left them out."""
    lines = [ln for ln in task.prompt.splitlines() if ln.startswith(("import ", "from "))]
    return "".join(ln + "\n" for ln in lines)


def extract_code(task: Task, reply: str, fmt: str) -> Extracted:
    """The code in a model's reply.

    completion: the reply continues the prompt; it is cut before the first new top-level statement
        (COMPLETION_STOP). A reply that restates the whole function (`def <entry point>(`) is taken as
        a whole program. Empty (whitespace only): failure "empty".
    chat: the first Python code block (or the whole reply when it has no fence but defines the entry
        point). It must define the entry point, else failure "no_code" / "no_entry_point"; the prompt's
        imports are put in front.
    """
    entry = task.entry_point or ""
    defines = re.compile(rf"^\s*def\s+{re.escape(entry)}\s*\(", re.M) if entry else None
    if fmt == "completion":
        if defines is not None and defines.match(reply):
            return Extracted(_prompt_imports(task) + reply, True)
        body = reply
        cuts = [i for i in (body.find(s) for s in COMPLETION_STOP) if i >= 0]
        if cuts:
            body = body[: min(cuts)]
        if not body.strip():
            return Extracted("", False, "empty")
        return Extracted(body.rstrip() + "\n", False)
    blocks = _code_blocks(reply)
    candidates = blocks or ([reply] if defines is not None and defines.search(reply) else [])
    if not candidates:
        return Extracted("", True, "no_code")
    for code in candidates:
        if defines is None or defines.search(code):
            return Extracted(_prompt_imports(task) + code.rstrip() + "\n", True)
    return Extracted("", True, "no_entry_point")
