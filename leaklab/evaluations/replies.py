"""Ask a checkpoint tasks, read the code back from its replies, run that code against the tests: the
cache -> generate -> extract -> judge pipeline that the accuracy and MRI evaluations share. Verdicts
are cached per model, tokenizer and settings (`verdict_cache`), so evaluating a checkpoint again
neither generates nor executes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leaklab.data.prompting import extract_code
from leaklab.data.tasks import Task
from leaklab.evaluations.base import EvalContext
from leaklab.execution.correctness import SampleResult, check_many
from leaklab.execution.sandbox import Sandbox
from leaklab.rundir import read_rows, text_sha256, write_atomic


@dataclass(frozen=True)
class Reading:
    """What was read from one reply: its code and the program the sandbox runs, or why there is none."""

    reply: str
    code: str
    failure: str  # "" when code was read, else no_code | syntax_error | too_long
    program: str | None  # the runnable program (the task's prompt continued by the code); None on failure


def read_replies(asked: Sequence[Task], replies: Sequence[str], fmt: str) -> list[Reading]:
    """The code of each reply to the task asked (`extract_code`); a reply without code is a failure."""
    readings = []
    for task, reply in zip(asked, replies):
        ext = extract_code(task, reply, fmt)
        program = None if ext.failure else task.program(ext.code)
        readings.append(Reading(reply, ext.code, ext.failure, program))
    return readings


def run_readings(
    asked: Sequence[Task], readings: Sequence[Reading], workers: int, timeout_s: float
) -> list[SampleResult | None]:
    """The sandbox verdict of every reading with code (None for the others), in order. The sandbox starts
    only when there is code to run, so a checkpoint whose replies hold none starts no sandbox."""
    results: list[SampleResult | None] = [None] * len(readings)
    where = [n for n, r in enumerate(readings) if not r.failure]
    if where:
        batch = [(asked[n], readings[n].code) for n in where]  # code that continues the task's prompt
        with Sandbox(workers=workers, timeout_s=timeout_s) as sandbox:
            for n, result in zip(where, check_many(batch, sandbox, timeout_s=timeout_s)):
                results[n] = result
    return results


def verdict_cache(ctx: EvalContext, name: str, model, tokenizer, fmt: str, settings: dict, *more) -> Path:
    """<run>/cache/executions/<name>/<hash>.jsonl, the hash of the model, tokenizer, format, `settings`
    (every setting that changes a reply or its verdict; the recipe's prompt boundary is added) and `more`."""
    from leaklab.signals.logprobs import model_fingerprint, tokenizer_fingerprint

    settings = {**settings, "prompt_boundary": ctx.recipe.evaluate.prompt_boundary}
    identity = [model_fingerprint(model), tokenizer_fingerprint(tokenizer), fmt, settings, *more]
    digest = text_sha256(json.dumps(identity))[:24]
    return ctx.run.execution_cache / name / f"{digest}.jsonl"


def cached_judgements(
    ctx: EvalContext,
    name: str,
    cache: Path,
    keys: Sequence[str],
    unit: str,
    generate: Callable[[], Any],
    judge: Callable[[Any], list],
) -> list | None:
    """What `judge` made of the replies, one entry per key: from `cache` when it holds every key, else
    `generate()` (on every process: under several, each decodes its share) and `judge(replies)` on the
    main process, written to the cache. None on the other processes."""
    stored = {row["key"]: row["judged"] for row in read_rows(cache)} if cache.exists() else {}
    if all(key in stored for key in keys):
        ctx.log(f"[leaklab] {name}: generations and verdicts of {len(keys)} {unit} from {cache}")
        return [stored[key] for key in keys] if ctx.is_main_process else None
    started = time.perf_counter()
    replies = generate()
    if not ctx.is_main_process:
        return None
    generated = time.perf_counter()
    judged = judge(replies)
    ctx.log(
        f"[leaklab] {name}: replies to {len(keys)} {unit} generated in {generated - started:.1f}s, "
        f"judged in {time.perf_counter() - generated:.1f}s"
    )
    write_atomic(cache, "".join(json.dumps({"key": k, "judged": j}) + "\n" for k, j in zip(keys, judged)))
    return judged
