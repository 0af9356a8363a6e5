"""The run directory: every stage reads what the previous one wrote here, so each can be re-run alone.

Writes are atomic (a temporary file and `os.replace`; rows appended in one `write` under a lock, a torn
tail cut first, rows already present skipped). What each file holds: docs/outputs.md#what-a-run-writes.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

from leaklab.errors import InputError

# A row is identified by these fields; a second row with the same key is a duplicate.
ROW_KEY = ("step", "evaluation", "column", "metric")
EVALUATIONS_DIR = "evaluations"  # <run>/evaluations/<name>/: results of other evaluation settings


def cache_root() -> Path:
    """Where leaklab keeps what outlives a run (the builtin model, per-benchmark variant sets):
    `$LEAKLAB_CACHE`, else ~/.cache/leaklab."""
    return Path(os.environ.get("LEAKLAB_CACHE", Path.home() / ".cache" / "leaklab")).expanduser()


def current_umask() -> int:
    """The process umask, read without changing it (Linux reports it in /proc); else set and restore."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: str | Path, data: str | bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp creates the file owner-only (0600); a run file gets what open() would give it, the
        # user's umask, so collaborators can read a shared results directory.
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, mode) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError) and err.filename is None and err.errno:
            # A full disk reports no file name; the user needs to know which write failed.
            raise OSError(err.errno, err.strerror, str(path)) from err
        raise


def write_json(path: str | Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=False, default=_jsonable) + "\n")


def read_json(path: str | Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        # Written atomically, so damage came from outside; say which file rather than where in json.
        raise InputError(f"{path} is damaged ({err}); restore it, or start a new run") from None


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def row_key(row: dict[str, Any]) -> tuple:
    key = tuple(row.get(k) for k in ROW_KEY)
    # A step's "done" markers are told apart by the specs they close: detectors added to an evaluated step
    # write a second marker (leaklab.evaluate.done_specs reads their union).
    if "specs" in row:
        return (*key, tuple(sorted(row["specs"])))
    # A row of one exposure dose group (or form group) stands beside the all-members row of its metric,
    # and a set-level test's row of one set (the sharded test's members and non-members) beside the other's.
    for group in ("dose", "form"):
        if group in row:
            key = (*key, (group, row[group]))
    test_set = (row.get("params") or {}).get("set") if isinstance(row.get("params"), dict) else None
    return (*key, ("set", test_set)) if test_set is not None else key


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """All complete rows of a JSONL file; a torn last line (no newline, or unparseable) is ignored."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    with path.open("rb") as f:
        for n, line in enumerate(f, 1):
            if not line.endswith(b"\n"):
                break  # torn tail from an interrupted append
            try:
                rows.append(json.loads(line))
            except (json.JSONDecodeError, UnicodeDecodeError):
                _warn_once(f"{path}:{n} is not a JSON row; skipped (the file is left as it is)")
    return rows


@functools.cache
def _warn_once(message: str) -> None:
    """A damaged line is read many times per command; say so once per process."""
    print(f"leaklab: warning: {message}", file=sys.stderr)


def _repair_tail(path: Path) -> None:
    """Cut a torn last line so the next append starts on a fresh line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        f.truncate(path.read_bytes().rfind(b"\n") + 1)


@contextmanager
def locked(path: str | Path) -> Iterator[None]:
    """An exclusive advisory lock on `path` (created if missing), released on exit or when the process
    dies, so a killed process never leaves it held."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def append_rows(path: str | Path, rows: Iterable[dict[str, Any]], key=row_key) -> int:
    """Append rows not already present (by `key`); one write call for the batch. Returns rows written.

    Several processes may append to one file (evaluate workers sharing a run, leaklab/claims.py): the
    tail repair, the duplicate check and the write happen under one lock, so no row is torn or doubled."""
    path = Path(path)
    rows = list(rows)
    if not rows:
        return 0
    # The lock is taken on the file itself (created here as open() would, under the umask): no lock file
    # appears beside the run's files.
    with locked(path):
        _repair_tail(path)
        seen = {key(r) for r in read_rows(path)}
        fresh = []
        for row in rows:
            if key(row) not in seen:
                seen.add(key(row))
                fresh.append(json.dumps(row, default=_jsonable) + "\n")
        if fresh:
            with path.open("ab") as f:
                f.write("".join(fresh).encode())
                f.flush()
                os.fsync(f.fileno())
        return len(fresh)


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _in_root(name: str) -> property:
    """A path inside the run directory (or evaluation folder), as an attribute: `run.results`."""
    return property(lambda self: self.root / name)


class RunDir:
    """Paths inside one run directory, or inside one of its evaluation folders
    (`<run>/evaluations/<name>/`, written by `leaklab evaluate RUN_DIR --into NAME`): a folder of its own
    results, scores, caches and report, on the checkpoints of the run above it."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        above = self.root.parent.parent
        in_run = self.root.parent.name == EVALUATIONS_DIR and (above / "recipe.yaml").exists()
        self.training_root = above if in_run else self.root  # where the checkpoints are

    recipe = _in_root("recipe.yaml")
    manifest = _in_root("manifest.json")
    mixture = _in_root("mixture.json")
    # The settings each evaluation's rows in results.jsonl were computed with (leaklab.evaluate).
    evaluation_settings = _in_root("evaluations.json")
    results = _in_root("results.jsonl")
    report = _in_root("report")
    variants = _in_root("variants.jsonl")
    variants_summary = _in_root("variants_summary.json")
    generation_cache = _in_root("cache/generations")
    execution_cache = _in_root("cache/executions")

    @property
    def checkpoints(self) -> Path:
        return self.training_root / "checkpoints"

    def evaluation_folder(self, name: str) -> Path:
        return self.root / EVALUATIONS_DIR / name

    def scores(self, step: int, evaluation: str) -> Path:
        return self.root / "scores" / f"step-{step}" / f"{evaluation}.jsonl"

    def checkpoint_dirs(self) -> list[tuple[int, Path]]:
        """(step, path) of every complete HF checkpoint, oldest first."""
        return sorted(
            (int(p.name.removeprefix("checkpoint-")), p)
            for p in self.checkpoints.glob("checkpoint-*")  # none when the folder is missing
            if p.name.removeprefix("checkpoint-").isdigit() and (p / "trainer_state.json").exists()
        )

    def append_results(self, rows: Iterable[dict[str, Any]]) -> int:
        return append_rows(self.results, rows)

    def results_rows(self) -> list[dict[str, Any]]:
        return read_rows(self.results)


# --------------------------------------------------------------------------- manifest and run files


def make_manifest(recipe, tasks, split) -> dict[str, Any]:
    """The ground truth of a run; a pure function of the data and the seeds, so byte-identical on re-run."""
    by_id = {t.task_id: t for t in tasks}
    ids = [*split.member_ids, *split.non_member_ids]
    data_hash = hashlib.sha256()
    for task_id in sorted(ids):
        data_hash.update(
            task_id.encode() + b"\0" + by_id[task_id].text(recipe.data.text_format).encode() + b"\0"
        )
    # A user's own file (data.name) is named as such; its loader format is kept beside it.
    named = {"benchmark_format": recipe.data.benchmark} if recipe.data.name else {}
    manifest = {
        "benchmark": recipe.data.name or recipe.data.benchmark,
        **named,
        "data_source": recipe.data.path or recipe.data.hub_name or "builtin",
        "text_format": recipe.data.text_format,
        "seed": recipe.data.seed,
        "member_fraction": recipe.data.member_fraction,
        "max_samples": recipe.data.max_samples,
        "n_tasks_in_benchmark": len(tasks),
        "n_members": len(split.member_ids),
        "n_non_members": len(split.non_member_ids),
        "data_sha256": data_hash.hexdigest(),
        "member_ids": list(split.member_ids),
        "non_member_ids": list(split.non_member_ids),
    }
    if recipe.inject.active:  # absent without `inject`, so those manifests stay as they were
        from leaklab.data import forms
        from leaklab.data.doses import assign_doses, assign_windows

        doses, members = recipe.inject.doses or [1], list(split.member_ids)
        if len(doses) > len(members):
            raise InputError(
                f"inject.doses: {len(doses)} dose groups but only {len(members)} members; use at most "
                f"{len(members)} doses (e.g. {doses[: len(members)]}) or more tasks"
            )
        manifest["inject"] = {
            "doses": doses,
            "window": recipe.inject.window or [0.0, 1.0],
            # Only when set, so manifests from before the key stay byte-identical.
            **({"withhold": True} if recipe.inject.withhold else {}),
            **({"form": recipe.inject.form} if recipe.inject.form != "document" else {}),
            **({"windows": recipe.inject.windows} if recipe.inject.windows else {}),
        }
        manifest["doses"] = assign_doses(members, doses, recipe.data.seed)
        # An inject.form's ground truth (leaklab/data/forms.py): the members in the benchmark file's order
        # (file), or each member's planned form (rephrased; `leaklab.train` settles those without a
        # verified variant to verbatim).
        if recipe.inject.form == "file":
            manifest["file_order"] = forms.benchmark_order(members, tasks)
        elif recipe.inject.form == "rephrased":
            manifest["forms"] = forms.assign_forms(manifest["doses"], recipe.data.seed)
        if recipe.inject.windows:  # each member's window group
            manifest["windows"] = assign_windows(manifest["doses"], recipe.inject.windows, recipe.data.seed)
    if recipe.inject.canaries > 0:  # the canaries' ground truth (leaklab/data/canaries.py)
        from leaklab.data.canaries import plan_canaries

        manifest["canaries"] = plan_canaries(
            recipe.inject.canaries, recipe.inject.canary_formats, manifest["doses"], recipe.data.seed
        )
    return manifest


def member_doses(run_dir: str | Path) -> dict[str, int]:
    """task id -> exposure dose of a run, from its manifest: each member's dose (1 when the run set no
    `inject.doses`) and 0 for every non-member, so a dose group of 0 is the non-members."""
    manifest = read_json(Path(run_dir) / "manifest.json")
    doses = manifest.get("doses") or {task_id: 1 for task_id in manifest["member_ids"]}
    return {
        **{task_id: int(doses[task_id]) for task_id in manifest["member_ids"]},
        **{task_id: 0 for task_id in manifest["non_member_ids"]},
    }


def _versions(packages: Iterable[str]) -> dict[str, str | None]:
    """package -> its installed version (None: not installed)."""
    versions = {}
    for package in packages:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def environment_info() -> dict[str, Any]:
    versions = _versions(("leaklab", "torch", "transformers", "peft", "trl", "accelerate", "datasets"))
    try:
        git = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        git = ""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "git": git or None,
    }


# What a run's numbers may depend on beyond its recipe and seed: the libraries that compute them, and the
# thread count, which changes the order of floating-point sums in torch's CPU kernels (docs/reproducibility.md).
PROVENANCE_PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "numpy")


def provenance() -> dict[str, Any]:
    """The thread count and library versions of this process, as the manifest's "provenance" list
    records them: a run resumed with another thread count or library gets a second entry."""
    versions = _versions(PROVENANCE_PACKAGES)
    torch = sys.modules.get("torch")  # not imported here: a run that trains has it loaded already
    threads = torch.get_num_threads() if torch is not None else None
    return {"cpu_threads": threads, "python": platform.python_version(), "versions": versions}


def check_or_write_run_files(
    run: RunDir,
    recipe_yaml: str,
    run_hash: str,
    manifest: dict[str, Any],
    identity_changes: Callable[[Path], list[str]] | None = None,
) -> None:
    """Write recipe.yaml / manifest.json for a new run; for an existing one, insist it is the same run:
    the same manifest and the same training (`identity_changes(old recipe.yaml)`, 'key: old -> new'
    lines, names none). The recipe's text and hash are passed in, so this module stays below recipe."""
    old = read_json(run.manifest) if run.manifest.exists() else None
    if old is not None:
        # The provenance (threads, versions) is not the run's identity: a resume may differ there.
        if {k: v for k, v in old.items() if k != "provenance"} != manifest:
            raise InputError(
                f"{run.root} already holds a run with a different manifest (split or data changed); "
                f"choose another run_name or output_dir"
            )
        changes = identity_changes(run.recipe) if identity_changes and run.recipe.exists() else []
        if changes:
            raise InputError(
                f"{run.root} already holds a run trained differently ({'; '.join(changes)}); choose "
                f"another run_name or output_dir (evaluation settings may differ: they are not the run's)"
            )
    write_atomic(run.recipe, recipe_yaml)
    write_atomic(run.root / "run_hash.txt", run_hash + "\n")
    history, now = list((old or {}).get("provenance") or []), provenance()
    if history[-1:] != [now]:
        history.append(now)
    write_json(run.manifest, {**manifest, "provenance": history})
    write_json(run.root / "environment.json", environment_info())
