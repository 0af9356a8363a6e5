"""General ("web") text corpora: the builtin one, a hub dataset, or local files.

The builtin corpus ships with Python itself, so it is there on every machine and never downloads:
the standard library's source files (test suites excluded) followed by the `pydoc_data` topics as
natural-language text, in a fixed (sorted) order. It pretrains the builtin tiny model and stands in for
web text when mixing on a machine without network.
"""

from __future__ import annotations

import functools
import json
import os
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from leaklab.data.benchmarks import DataUnavailableError, _located_rows

# Directory names whose files are test suites or vendored packages, not library source.
_SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__", "dist-packages"}
_LOCAL_SUFFIXES = (".txt", ".md", ".py", ".jsonl", ".json")


@functools.cache
def stdlib_source_files() -> tuple[Path, ...]:
    # os.walk, pruned: rglob would also list the interpreter's own site-packages (thousands of files) only
    # to drop them, and every run and detector pass reads this list.
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS]
        files.extend(Path(folder, n) for n in names if n.endswith(".py") and not n.startswith("test_"))
    return tuple(sorted(files, key=lambda p: p.relative_to(root).as_posix()))


def pydoc_topics() -> list[str]:
    from pydoc_data.topics import topics

    return [topics[key] for key in sorted(topics)]


@functools.cache  # read once per process: the tokenizer, the mixer and DC-PDD's frequency table all use it
def builtin_corpus_texts() -> tuple[str, ...]:
    """Stdlib source (one text per file) then pydoc topics; the same texts on every run of one Python."""
    texts = []
    for path in stdlib_source_files():
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue  # a handful of files are deliberately not UTF-8
    texts.extend(pydoc_topics())
    return tuple(t for t in texts if t.strip())


def _local_texts(path: Path, text_field: str) -> Iterator[str]:
    files = sorted(p for p in path.rglob("*") if p.suffix in _LOCAL_SUFFIXES) if path.is_dir() else [path]
    if not files:
        raise DataUnavailableError(f"corpus directory {path} holds no {', '.join(_LOCAL_SUFFIXES)} files")
    for file in files:
        if file.suffix == ".jsonl":
            yield from (row[text_field] for _, row in _located_rows(file))
        elif file.suffix == ".json":
            for row in json.loads(file.read_text(encoding="utf-8")):
                yield row[text_field] if isinstance(row, dict) else str(row)
        else:
            yield file.read_text(encoding="utf-8", errors="replace")


def _hub_texts(name: str, split: str, text_field: str) -> Iterator[str]:
    try:
        import datasets

        ds = datasets.load_dataset(name, split=split, streaming=True)
        for row in ds:
            yield row[text_field]
    except Exception as err:
        raise DataUnavailableError(
            f"could not stream the corpus {name!r} (split {split!r}) from the hub: {type(err).__name__}: {err}\n"
            f"  Download it where there is network (e.g. `hf download {name} --repo-type dataset`), "
            f"then set mix.corpus=/path/to/dir-or-file (.txt, .md, .py or .jsonl with a "
            f"'{text_field}' field), or use mix.corpus=builtin."
        ) from err


def corpus_texts(source: str, *, split: str = "train", text_field: str = "text") -> Iterator[str]:
    """Texts of a corpus named by a recipe's `mix.corpus`: builtin, a local path, or a hub dataset."""
    if source == "builtin":
        yield from builtin_corpus_texts()
        return
    path = Path(source).expanduser()
    if path.exists():
        yield from _local_texts(path, text_field)
        return
    if source.startswith((".", "/", "~")) or source.endswith(_LOCAL_SUFFIXES):
        raise DataUnavailableError(f"corpus path {source} does not exist")
    yield from _hub_texts(source, split, text_field)
