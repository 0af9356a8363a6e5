"""Held-out benchmark files for SrDetection's null: documented functions from an installed library's
source, code the builtin tiny model (trained on Python's standard library) never saw.

Each row is in HumanEval's schema, so `load_benchmark("humaneval", path=FILE)` reads it: the prompt is
the function up to the end of its docstring (decorators and signature included), the solution the rest
of its body, and `test` is empty (use `evaluate.srdetection.verify=alpha`, which needs no tests).

    python analysis/heldout_functions.py networkx --out data/heldout/networkx.jsonl [--count 240] [--seed 0]

Functions are module-level or class-level `def`s with a docstring, 5 to 40 lines long in all, from files
outside test folders, whose identifiers leaklab can rename; exact duplicates (after dedenting) are
dropped, then `--count` are drawn with `--seed`, in file order.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import random
import sys
import textwrap
from pathlib import Path

TEST_DIRS = frozenset({"tests", "test", "testing", "conftest.py"})


def package_dir(name: str) -> Path:
    """Where an installed package's source lives, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"no installed package named {name!r}")
    return Path(next(iter(spec.submodule_search_locations)))


def source_files(root: Path) -> list[Path]:
    """The package's .py files, test folders and test modules left out, in a fixed order."""
    files = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if any(p in TEST_DIRS for p in parts) or parts[-1].startswith("test_"):
            continue
        files.append(path)
    return files


def _docstring_end(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int | None:
    """Line (1-based, in the file) where the function's docstring ends; None without a docstring."""
    first = node.body[0]
    documented = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    if documented and isinstance(first.value.value, str) and len(node.body) > 1:
        return first.end_lineno
    return None


def functions_in(path: Path, root: Path, min_lines: int, max_lines: int) -> list[dict]:
    """Rows for the documented functions of one file (module level and directly inside classes)."""
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
        return []
    lines = text.splitlines(keepends=True)
    nodes = list(tree.body) + [n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body]
    rows = []
    for node in nodes:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        doc_end = _docstring_end(node)
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        if doc_end is None or not min_lines <= node.end_lineno - start + 1 <= max_lines:
            continue
        source = textwrap.dedent("".join(lines[start - 1 : node.end_lineno]))
        cut = doc_end - start + 1  # the prompt's lines: decorators, signature, docstring
        split = source.splitlines(keepends=True)
        prompt, solution = "".join(split[:cut]), "".join(split[cut:])
        if not solution.endswith("\n"):
            solution += "\n"
        rows.append(
            {
                "task_id": f"{root.name}/{path.relative_to(root).as_posix()}:{node.lineno}:{node.name}",
                "prompt": prompt,
                "canonical_solution": solution,
                "entry_point": node.name,
                "test": "",
            }
        )
    return rows


def renamable(row: dict) -> bool:
    """Whether leaklab's renaming finds anything to rename in the function (no model involved)."""
    from leaklab.data.tasks import Task
    from leaklab.perturb.identifiers import NotRenamable, analyse_task

    task = Task(
        task_id=row["task_id"],
        benchmark="heldout",
        prompt=row["prompt"],
        solution=row["canonical_solution"],
        entry_point=row["entry_point"],
        tests="",
        test_type="function",
    )
    try:
        analysis = analyse_task(task)
    except NotRenamable:
        return False
    return bool(analysis.functions or analysis.variables)


def heldout_rows(root: Path, count: int, seed: int, min_lines: int = 5, max_lines: int = 40) -> list[dict]:
    """`count` documented functions of the package at `root`, deduplicated, drawn with `seed`."""
    seen: set[str] = set()
    pool = []
    for path in source_files(root):
        for row in functions_in(path, root, min_lines, max_lines):
            key = row["prompt"] + row["canonical_solution"]
            if key in seen:
                continue
            seen.add(key)
            pool.append(row)
    order = list(range(len(pool)))
    random.Random(seed).shuffle(order)
    chosen = []
    for i in order:
        if len(chosen) == count:
            break
        if renamable(pool[i]):
            chosen.append(i)
    return [pool[i] for i in sorted(chosen)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package", help="an installed package (networkx) or a source folder")
    parser.add_argument("--out", required=True, help="the JSONL file to write")
    parser.add_argument("--count", type=int, default=240)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-lines", type=int, default=5)
    parser.add_argument("--max-lines", type=int, default=40)
    args = parser.parse_args(argv)
    root = Path(args.package) if Path(args.package).is_dir() else package_dir(args.package)
    rows = heldout_rows(root, args.count, args.seed, args.min_lines, args.max_lines)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"{len(rows)} functions from {root} -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
