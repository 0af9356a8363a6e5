"""Everything a report reads from one run directory, read once: `load_run` never raises on a missing or
unreadable file (a run not evaluated yet, or killed mid-write) but records it as one line of `problems`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leaklab.results import column_of, dose_rows, without_dose
from leaklab.rundir import RunDir, read_rows


@dataclass
class RunData:
    run: RunDir
    rows: list[dict[str, Any]] = field(default_factory=list)  # all members' rows (no `dose` field)
    # Rows of one dose group each (`"dose": d`), apart so that no (step, column, metric) table mixes them.
    dose_rows: list[dict[str, Any]] = field(default_factory=list)
    recipe: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)
    mixture: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # what is missing or unreadable, one line each
    _scores: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # step -> detection records

    @property
    def name(self) -> str:
        return self.run.root.name

    def rows_of(self, evaluation: str) -> list[dict[str, Any]]:
        return [r for r in self.rows if r.get("evaluation") == evaluation]

    def evaluations(self) -> list[str]:
        """Evaluations with rows, in order of first appearance."""
        return list(dict.fromkeys(str(r.get("evaluation")) for r in self.rows if r.get("evaluation")))

    def steps(self) -> list[int]:
        return sorted({int(r["step"]) for r in self.rows_of("detection") if column_of(r) is not None})

    def epoch_of(self, step: int) -> float:
        epochs = (r["epoch"] for r in self.rows if r.get("step") == step and r.get("epoch") is not None)
        return float(next(epochs, 0.0))

    def sample_counts(self) -> tuple[int | None, int | None]:
        """(members, non-members): from the manifest, else from a done row."""
        if "n_members" in self.manifest:
            return self.manifest.get("n_members"), self.manifest.get("n_non_members")
        for r in self.rows:
            if r.get("metric") == "done" and "n_members" in r:
                return r.get("n_members"), r.get("n_non_members")
        return None, None

    def scores(self, step: int) -> list[dict[str, Any]]:
        """Per-sample detection records at `step` (complete lines only); [] when there are none."""
        if step not in self._scores:
            self._scores[step] = read_rows(self.run.scores(step, "detection"))
        return self._scores[step]


def _read_file(path: Path, problems: list[str], what: str, parse=json.loads) -> dict[str, Any]:
    if not path.exists():
        problems.append(f"no {path.name} ({what} not shown)")
        return {}
    try:
        data = parse(path.read_text())
    except Exception as err:  # a damaged file must not stop the report; say so instead
        problems.append(f"{path.name} is unreadable ({err.__class__.__name__}); {what} not shown")
        return {}
    return data if isinstance(data, dict) else {}


def load_run(run_dir: str | Path) -> RunData:
    run = RunDir(run_dir)
    problems: list[str] = []
    if not run.results.exists():
        problems.append("no results.jsonl yet: nothing has been evaluated")
    every = [r for r in run.results_rows() if isinstance(r, dict) and "step" in r and "metric" in r]
    rows, per_dose = without_dose(every), dose_rows(every)
    from leaklab.plugins import import_plugins
    from leaklab.recipe import yaml_load  # also the registries a plug-in module registers into

    recipe = _read_file(run.recipe, problems, "model and stage", parse=yaml_load)
    # The run's plug-ins, so that their columns get their names; one that cannot be imported is a problem.
    for module in recipe["plugins"] if isinstance(recipe.get("plugins"), list) else []:
        try:
            import_plugins([module])
        except Exception as err:  # the report never fails on what the run's recipe names
            problems.append(f"plug-in {module!r} not importable here ({err}); its columns shown by name")
    manifest = _read_file(run.manifest, problems, "members and non-members")
    # `leaklab mia` trains nothing (its labels came with the data), so it has no mixture to miss.
    trained = manifest.get("mode") != "mia"
    return RunData(
        run=run,
        rows=rows,
        dose_rows=per_dose,
        recipe=recipe,
        manifest=manifest,
        mixture=_read_file(run.mixture, problems, "training mixture") if trained else {},
        environment=_read_file(run.root / "environment.json", problems, "versions and git commit"),
        problems=problems,
    )
