"""What one member copy is in the training stream (`inject.form`: document, the default; file, the
benchmark's own JSONL file, which the sharded likelihood test of Oren et al. 2023 looks for; rephrased,
half of each dose group as a verified variant), and the ground truth of each form. See
docs/testbeds.md#injection-forms-injectform.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

from leaklab.data.tasks import Task

FILE_ID = "benchmark.jsonl"  # the one document of the file form, in the mixture's exposure counts
VERBATIM, REPHRASED = "verbatim", "rephrased"


def benchmark_order(member_ids: Sequence[str], tasks: Sequence[Task]) -> list[str]:
    """The member ids in the order of the benchmark's own file (the loader's order)."""
    wanted = set(member_ids)
    return [t.task_id for t in tasks if t.task_id in wanted]


def jsonl_record(task: Task) -> dict[str, Any]:
    """A task as a record of the benchmark's own file. HumanEval's field names (task_id, prompt,
    canonical_solution, test, entry_point, in its order) for every benchmark: leaklab keeps no other
    benchmark's raw records, and the fields carry the same texts."""
    return {
        "task_id": task.task_id,
        "prompt": task.prompt,
        "canonical_solution": task.solution,
        "test": task.tests,
        "entry_point": task.entry_point,
        **({"test_cases": list(task.test_cases)} if task.test_cases else {}),
    }


def jsonl_lines(tasks: Sequence[Task]) -> list[str]:
    """One JSON line (no newline) per task, in the order given (json.dumps' defaults, as HumanEval's
    own file is written)."""
    return [json.dumps(jsonl_record(t)) for t in tasks]


def file_text(tasks: Sequence[Task]) -> str:
    """The JSONL file of `tasks`: its lines joined by newlines, with a final newline."""
    return "".join(line + "\n" for line in jsonl_lines(tasks))


def assign_forms(doses: dict[str, int], seed: int) -> dict[str, str]:
    """task id -> "verbatim" | "rephrased": each dose group's members shuffled with `seed` (its own
    stream), the first half (rounded down) rephrased, the rest verbatim. In the order of `doses`."""
    rng = random.Random(f"inject.form:{seed}")
    form: dict[str, str] = {}
    for dose in sorted(set(doses.values())):
        group = sorted(t for t, d in doses.items() if d == dose)
        rng.shuffle(group)
        half = len(group) // 2
        form.update({t: REPHRASED if i < half else VERBATIM for i, t in enumerate(group)})
    return {t: form[t] for t in doses}


def settle_forms(forms: dict[str, str], has_variant: set[str]) -> tuple[dict[str, str], list[str]]:
    """The forms as trained: a planned "rephrased" member without a verified variant is verbatim.
    Returns (forms, the ids that fell back, sorted)."""
    fallback = sorted(t for t, f in forms.items() if f == REPHRASED and t not in has_variant)
    return {t: VERBATIM if t in fallback else f for t, f in forms.items()}, fallback
