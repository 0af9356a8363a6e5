"""A run's results in Python: `leaklab.load_run(path)` on a run directory, a sweep directory or an mia
folder, with the rows and the per-sample scores as pandas DataFrames.

    results = leaklab.load_run("runs/tiny_cpt-1a2b3c4d")
    results.rows()          # one row per (run, step, evaluation, column, metric): ROW_SCHEMA
    results.bookkeeping()   # timing, training-loss and done rows, kept apart from the results
    results.scores(10)      # one row per sample at step 10: task_id, label, one column per score

The files stay the record (results.jsonl, scores/step-N/<evaluation>.jsonl); this module only reads them.
docs/results-in-python.md writes the schema down; tests/test_first_day.py checks it against real runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leaklab.errors import InputError
from leaklab.rundir import RunDir, read_json, read_rows

# field -> (Python type of its values, meaning): the columns every `rows()` frame has, in this order. A
# sweep's frame also has one column per grid axis (e.g. "mix.ratio") and "seed"; rows of some evaluations
# carry their own further fields (a dose row's "dose"), kept as further columns.
ROW_SCHEMA: dict[str, tuple[str, str]] = {
    "run": ("str", "the run directory's name (a sweep has several)"),
    "step": ("int", "optimizer step of the checkpoint; 0: the model before training (mia: as given)"),
    "epoch": ("float", "epoch of that checkpoint"),
    "evaluation": ("str", "the evaluation that wrote the row: detection, accuracy, mri, ..."),
    "detector": ("str or None", "the detector's registry name (None for rows of no detector)"),
    "params": ("dict", "the detector's parameters for this column, a dict (e.g. {'k': 0.2})"),
    "column": ("str", "the score column: a detector and its parameters, e.g. mink@0.2"),
    "metric": ("str", "what the value measures: auroc, auroc_ci_low, f1, tpr@1%fpr, p_value, ..."),
    "value": ("float", "the number (NaN where it could not be computed)"),
}
# Rows that say how the run went rather than what it measured.
BOOKKEEPING_EVALUATIONS = ("timing", "training")
DONE_METRIC = "done"


def is_bookkeeping(row: dict[str, Any]) -> bool:
    return row.get("evaluation") in BOOKKEEPING_EVALUATIONS or row.get("metric") == DONE_METRIC


@dataclass
class RunResults:
    """What `load_run` returns: `kind` is "run", "mia" or "sweep"; `runs` maps each run's name to its
    directory and `points` each run's name to its grid point (a sweep's axes and seed; empty otherwise)."""

    path: Path
    kind: str
    runs: dict[str, Path]
    points: dict[str, dict[str, str]] = field(default_factory=dict)

    def _frame(self, rows: list[dict[str, Any]]):
        import pandas as pd

        frame = pd.DataFrame(rows)
        for name in ROW_SCHEMA:
            if name not in frame:
                frame[name] = pd.Series(dtype="float64" if name in ("epoch", "value") else "object")
        frame = frame.astype({"step": "int64", "epoch": "float64", "value": "float64"})
        axes = list(dict.fromkeys(k for point in self.points.values() for k in point))
        rest = [c for c in frame.columns if c not in ROW_SCHEMA and c not in axes]
        return frame[[*ROW_SCHEMA, *axes, *rest]]

    def _all_rows(self) -> list[dict[str, Any]]:
        out = []
        for name, directory in self.runs.items():
            for row in read_rows(Path(directory) / "results.jsonl"):
                if isinstance(row, dict) and "step" in row and "metric" in row:
                    value = row.get("value")
                    number = float(value) if isinstance(value, (int, float)) else float("nan")
                    out.append({**row, "run": name, "value": number, **self.points.get(name, {})})
        return out

    def rows(self):
        """Every result row (ROW_SCHEMA, plus a sweep's axes), bookkeeping rows left out."""
        return self._frame([r for r in self._all_rows() if not is_bookkeeping(r)])

    def bookkeeping(self):
        """The timing, training (loss, learning rate, ...) and done rows, with their own fields."""
        return self._frame([r for r in self._all_rows() if is_bookkeeping(r)])

    def steps(self, evaluation: str = "detection") -> list[int]:
        """Steps with per-sample scores of `evaluation` in any run."""
        found = set()
        for directory in self.runs.values():
            for path in (Path(directory) / "scores").glob(f"step-*/{evaluation}.jsonl"):
                found.add(int(path.parent.name.removeprefix("step-")))
        return sorted(found)

    def scores(self, step: int | None = None, evaluation: str = "detection"):
        """The per-sample scores at `step` (default: the last step that has them): a row per sample with
        task_id, label (1 member, 0 non-member) and one column per score column (a rule's decisions
        in `<column>:leak`); a sweep's frame also has run and its axes."""
        import pandas as pd

        steps = self.steps(evaluation)
        if step is None and steps:
            step = steps[-1]
        if step not in steps:
            have = ", ".join(map(str, steps)) or "none"
            raise InputError(f"{self.path}: no per-sample {evaluation} scores at step {step} (steps: {have})")
        frames = []
        for name, directory in self.runs.items():
            records = read_rows(RunDir(directory).scores(step, evaluation))
            if records:
                frame = pd.DataFrame(records)
                if len(self.runs) > 1:
                    frame.insert(0, "run", name)
                    for key, value in self.points.get(name, {}).items():
                        frame[key] = value
                frames.append(frame)
        return pd.concat(frames, ignore_index=True)


def load_run(path: str | Path) -> RunResults:
    """The results of a run directory, an mia folder or a sweep directory (its runs that have results)."""
    root = Path(path).expanduser()
    if (root / "sweep.json").is_file():
        plan = read_json(root / "sweep.json")
        runs, points = {}, {}
        for run in plan.get("runs", []):
            directory = root / run["run_dir"]  # an absolute run_dir stays as it is
            if (directory / "results.jsonl").exists():
                runs[run["name"]] = directory
                points[run["name"]] = {
                    ("seed" if k == "seeds" else k): str(v) for k, v in run.get("point", {}).items()
                }
        return RunResults(root, "sweep", runs, points)
    if not (root / "recipe.yaml").exists():
        raise InputError(f"{path} is not a leaklab run, sweep or mia folder (no recipe.yaml or sweep.json)")
    manifest = read_json(root / "manifest.json") if (root / "manifest.json").exists() else {}
    kind = "mia" if manifest.get("mode") == "mia" else "run"
    return RunResults(root, kind, {root.name: root})
