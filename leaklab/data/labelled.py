"""Labelled text for membership inference (`leaklab mia`): texts, each member (1) or non-member (0).

Given as one file with text and label columns (`data=FILE`: .jsonl, .jsonl.gz, .json array, .csv,
.parquet), two files of texts (`members=FILE non_members=FILE`) or a hub dataset (`data=hub:NAME`),
all read by `load_labelled`. Every problem is one line naming the file, line (or row) and column.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from leaklab.data.benchmarks import _located_rows
from leaklab.errors import InputError, UnavailableError
from leaklab.rundir import write_atomic

HUB_PREFIX = "hub:"
SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".csv", ".parquet")
LABEL_WORDS = {"0": 0, "1": 1, "false": 0, "true": 1}


@dataclass
class LabelledSet:
    """Texts with their labels (1 = member), in the order read: every member, then every non-member
    when two files are given, else the file's own order."""

    name: str  # what reports and the output folder call the data (a file stem or a hub name)
    source: str  # where it came from, as given
    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    labels: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))

    def sha256(self) -> str:
        """A hash of the ids, texts and labels: the output folder changes when the data does."""
        digest = hashlib.sha256()
        for i, text, label in zip(self.ids, self.texts, self.labels):
            digest.update(f"{i}\0{int(label)}\0{text}\0".encode())
        return digest.hexdigest()


@dataclass(frozen=True)
class DataSpec:
    """What the command line named: `data` (a file or hub:NAME), or `members` and `non_members`."""

    data: str | None = None
    members: str | None = None
    non_members: str | None = None
    split: str = "train"
    text_column: str = "text"
    label_column: str = "label"
    # The rows' own ids, when they have this column: scores are keyed by them, so joining back to the
    # user's data does not rely on row order. Without it, <data name>/<row number>.
    id_column: str = "id"


def suffix_of(path: Path) -> str:
    """The extension that decides the reader ('.jsonl.gz' counts as one)."""
    return ".jsonl.gz" if path.name.endswith(".jsonl.gz") else path.suffix.lower()


def stem_of(path: Path) -> str:
    suffix = suffix_of(path)
    return path.name[: -len(suffix)] if suffix and path.name.lower().endswith(suffix) else path.stem


def read_rows(path: str | Path, key: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """("FILE:LINE" or "FILE (row N)", row) for every row of a labelled-text file; `key` is the
    command-line key that named the file (for the error lines)."""
    path = Path(path).expanduser()
    suffix = suffix_of(path)
    if suffix not in SUFFIXES:
        raise InputError(
            f"{key}={path}: unknown file extension {suffix or '(none)'!r}; use one of {', '.join(SUFFIXES)}"
        )
    if not path.is_file():
        raise InputError(f"{key}={path}: no such file")
    if suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            for row in reader:
                yield f"{path}:{reader.line_num}", row
    elif suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist(), 1):
            yield f"{path} (row {i})", row
    else:
        yield from _located_rows(path)


def _label(row: dict[str, Any], column: str, where: str) -> int:
    """0 or 1 from an int, a bool, a float 0.0 / 1.0 or the strings 0, 1, true, false (CSV cells)."""
    value = _column(row, column, where, "label_column")
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return int(value)
    if isinstance(value, str) and value.strip().lower() in LABEL_WORDS:
        return LABEL_WORDS[value.strip().lower()]
    raise InputError(f"{where}: {column} is {value!r}, expected 0 or 1 (1 = member, 0 = non-member)")


def _text(row: dict[str, Any], column: str, where: str) -> str:
    value = _column(row, column, where, "text_column")
    if not isinstance(value, str):
        got = "null" if value is None else type(value).__name__
        raise InputError(f"{where}: {column} is {got}, expected text")
    if not value.strip():
        raise InputError(f"{where}: {column} is empty")
    return value


def _column(row: dict[str, Any], column: str, where: str, key: str) -> Any:
    if column not in row:
        found = ", ".join(repr(c) for c in row) or "none"
        raise InputError(f"{where}: no {column!r} column (columns found: {found}); {key}= names another")
    return row[column]


def _hub_rows(name: str, split: str) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        import datasets

        rows = datasets.load_dataset(name, split=split)
    except Exception as err:  # offline, missing, gated: all end the same way for the user
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UnavailableError(
            f"data=hub:{name}: could not load split {split!r} ({reason}); download it where there is "
            f"network (`hf download {name} --repo-type dataset`), save the split as .jsonl, .csv or "
            f".parquet with text and label columns, and give data= that local path"
        ) from err
    for i, row in enumerate(rows, 1):
        yield f"hub:{name} (split {split}, row {i})", row


def load_labelled(spec: DataSpec, limit: int | None = None) -> LabelledSet:
    """The labelled set `spec` names, checked; `limit` keeps the first `limit` members and the first
    `limit` non-members (in the order read), so a file sorted by label still gives both."""
    if spec.data and (spec.members or spec.non_members):
        raise InputError("mia: give data=FILE, or members=FILE non_members=FILE, not both")
    if spec.data:
        out = _one_source(spec)
    elif spec.members and spec.non_members:
        out = _two_files(spec)
    else:
        missing = "non_members" if spec.members else "members" if spec.non_members else "data"
        raise InputError(
            f"mia: {missing}= is required: data=FILE (text and label columns), members=FILE "
            "non_members=FILE, or data=hub:NAME"
        )
    if limit is not None:
        if limit < 1:
            raise InputError(f"mia: --limit must be a positive number, got {limit}")
        keep = sorted(i for label in (0, 1) for i in np.flatnonzero(out.labels == label)[:limit])
        out.ids = [out.ids[i] for i in keep]
        out.texts = [out.texts[i] for i in keep]
        out.labels = out.labels[keep]
    return out


def _one_source(spec: DataSpec) -> LabelledSet:
    """data=FILE or data=hub:NAME: a text and a label column."""
    if spec.data.startswith(HUB_PREFIX):
        name = spec.data[len(HUB_PREFIX) :]
        rows = _hub_rows(name, spec.split)
        source, label = f"{spec.data} (split {spec.split})", f"{name.replace('/', '--')}-{spec.split}"
    else:
        rows = read_rows(spec.data, "data")
        source, label = spec.data, stem_of(Path(spec.data))
    out = LabelledSet(name=label, source=source)
    labels = []
    for n, (where, row) in enumerate(rows):
        out.texts.append(_text(row, spec.text_column, where))
        labels.append(_label(row, spec.label_column, where))
        out.ids.append(_row_id(row, spec.id_column, f"{label}/{n}"))
    out.labels = np.asarray(labels, dtype=int)
    _check_unique_ids(out, f"data={spec.data}", spec.id_column)
    if len(set(labels)) < 2:
        only = f"every {spec.label_column} is {labels[0]}" if labels else "no rows"
        raise InputError(
            f"data={spec.data}: {only}; membership inference needs members (1) and non-members (0)"
        )
    _check_disjoint(out, spec.data)
    return out


def _two_files(spec: DataSpec) -> LabelledSet:
    """members=FILE non_members=FILE: a text column each; the label is the file's."""
    paths = {"members": Path(spec.members), "non_members": Path(spec.non_members)}
    name = f"{stem_of(paths['members'])}-vs-{stem_of(paths['non_members'])}"
    out = LabelledSet(name=name, source=f"members={spec.members} non_members={spec.non_members}")
    labels = []
    for key, label in (("members", 1), ("non_members", 0)):
        count = 0
        for where, row in read_rows(paths[key], key):
            out.texts.append(_text(row, spec.text_column, where))
            # Per file: each file's ids may start again at 0.
            out.ids.append(f"{key}/{_row_id(row, spec.id_column, str(count))}")
            labels.append(label)
            count += 1
        if not count:
            raise InputError(f"{key}={paths[key]}: holds no texts")
    out.labels = np.asarray(labels, dtype=int)
    _check_unique_ids(out, "members= and non_members=", spec.id_column)
    _check_disjoint(out, "members= and non_members=")
    return out


def _row_id(row: dict, column: str, default: str) -> str:
    value = row.get(column) if isinstance(row, dict) else None
    return default if value is None or value == "" else str(value)


def _check_unique_ids(out: LabelledSet, where: str, column: str) -> None:
    """Two rows with one id would share one line of scores; say which, and how to do without."""
    seen: set[str] = set()
    for i in out.ids:
        if i in seen:
            raise InputError(
                f"{where}: the id {i!r} ({column} column) names two rows; ids must be unique "
                f"(or name another column: id_column=C)"
            )
        seen.add(i)


def _check_disjoint(out: LabelledSet, where: str) -> None:
    """A text both member and non-member has no answer; an error, not a silent coin flip."""
    members = {text for text, label in zip(out.texts, out.labels) if label == 1}
    both = members & {text for text, label in zip(out.texts, out.labels) if label == 0}
    if both:
        first = next(i for i, t in zip(out.ids, out.texts) if t in both)
        raise InputError(
            f"{where}: {len(both)} text(s) are labelled both member and non-member (first: {first}); "
            "every text needs one label"
        )


def write_labelled(out: LabelledSet, path: Path) -> None:
    """The set as scored, one {"task_id", "label", "text"} a line: the run folder holds its own data."""
    lines = (
        json.dumps({"task_id": i, "label": int(label), "text": text})
        for i, text, label in zip(out.ids, out.texts, out.labels)
    )
    write_atomic(path, "".join(line + "\n" for line in lines))
