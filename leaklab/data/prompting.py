"""How a task is shown to a model and how code is read back from its reply: one place for the `sft`
stage (what it trains on) and the `accuracy` evaluation (what it asks), so both see the same text.

Formats (docs/evaluations.md#sft-and-accuracy-tiny_sft): `completion` (a base model continues the
prompt; the reply is the body), `chat` (CHAT_INSTRUCTION through the chat template; the reply is the
whole function in a code block), `evalplus` (the MRI paper's 004 App. J template, the assistant turn
prefilled up to an opened ```python fence) and `auto` (chat when the tokenizer has a chat template).

    fmt = resolve_format(tokenizer, "auto")
    prompt, answer = training_pair(task, tokenizer, fmt)          # the sft stage's example
    prompt = model_prompt(task, tokenizer, fmt)                    # what generation is asked
    ext = extract_code(task, reply, fmt)  # Extracted(code, failure)
"""

from __future__ import annotations

from dataclasses import dataclass

from leaklab.data.tasks import Task
from leaklab.errors import InputError
from leaklab.execution.extract import candidate

CHAT_INSTRUCTION = "Complete the following Python function.\n\n```python\n{prompt}```"
# The evalplus format's two halves, in leaklab's words: the same request (a self-contained script in a
# markdown block) and the same prefilled preamble + opened fence as the paper's App. J template.
EVALPLUS_INSTRUCTION = (
    "Write a self-contained Python script, in a markdown code block, that solves this problem:"
)
EVALPLUS_RESPONSE = (
    "Here is a self-contained Python script whose function solves the problem and passes its tests:"
)
OPEN_FENCE = "```python\n"
_SPLIT = "\x00leaklab-prefill-end\x00"  # marks where the prefilled assistant turn stops


class ChatFormatError(InputError):
    """Chat format asked of a tokenizer that has no chat template."""


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def resolve_format(tokenizer, requested: str, key: str = "format") -> str:
    """The format for `requested` (a value recipe validation has checked: auto | completion | chat |
    evalplus); chat without a template is an error that names the key to change."""
    if requested == "auto":
        return "chat" if has_chat_template(tokenizer) else "completion"
    if requested in ("chat", "evalplus") and not has_chat_template(tokenizer):
        name = getattr(tokenizer, "name_or_path", "the model")
        raise ChatFormatError(
            f"{key}: chat format asked, but the tokenizer of {name} has no chat template; "
            f"set {key}=completion (a base model continues the prompt) or use a chat model"
        )
    return requested


def _messages(task: Task, fmt: str = "chat") -> list[dict[str, str]]:
    if fmt == "evalplus":
        return [{"role": "user", "content": f"{EVALPLUS_INSTRUCTION}\n```\n{task.prompt.strip()}\n```\n"}]
    return [{"role": "user", "content": CHAT_INSTRUCTION.format(prompt=task.prompt)}]


def _prefill(tokenizer, task: Task, answer: str) -> str:
    """The evalplus conversation with the assistant turn holding the preamble, the opened fence and
    `answer`, as the template renders it."""
    assistant = {"role": "assistant", "content": f"{EVALPLUS_RESPONSE}\n{OPEN_FENCE}{answer}"}
    return tokenizer.apply_chat_template([*_messages(task, "evalplus"), assistant], tokenize=False)


def model_prompt(task: Task, tokenizer, fmt: str) -> str:
    """The text a model is given for `task` (encoded as `tokenizer(text)` by the generation engine)."""
    if fmt == "completion":
        return task.prompt
    if fmt == "evalplus":
        # The template closes the assistant turn; the prompt stops where the prefill does.
        return _prefill(tokenizer, task, _SPLIT).split(_SPLIT)[0]
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
    if fmt == "evalplus":
        full = _prefill(tokenizer, task, task.program() + "```")
        if not full.startswith(prompt):
            raise ChatFormatError(
                f"the chat template of {getattr(tokenizer, 'name_or_path', 'the model')} does not render "
                "a prefilled assistant turn as a prefix of the whole; use format=chat"
            )
        return prompt, full[len(prompt) :]
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
    """The code to test: it continues the task's prompt (`task.program(code)`; a whole function in the
    reply is appended after the prompt and redefines the entry point). `failure` names why no code
    could be read ("" when some was): no_code, syntax_error or too_long, counted, never raised."""

    code: str
    failure: str = ""


def extract_code(task: Task, reply: str, fmt: str) -> Extracted:
    """The code in a model's reply, read by the extractor the RL rewards use
    (`leaklab.execution.extract.candidate`), so pass@1 and reward judge the same program. The reply's
    shape decides (a fenced block or a restated `def` is a whole function, else a body); `fmt` only
    says whether the prompt opened the fence."""
    if fmt == "evalplus":
        reply = OPEN_FENCE + reply  # the prompt opened the fence the reply's code sits in
    found = candidate(task.prompt, reply, task.entry_point, task.prompt_is_code)
    if found.code is None:
        return Extracted("", found.problem or "no_code")
    return Extracted(found.code)
