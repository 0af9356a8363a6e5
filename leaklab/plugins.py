"""What a plug-in is: one registry record (`Record`), and the interface its object satisfies (the
Protocols below; `tests/test_plugins.py` checks every record against its kind's). A record names its
object by a lazy "module:Object" path, so listing the registries imports no torch. See docs/plugins.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

if TYPE_CHECKING:
    from leaklab.detectors.inputs import ModelInputs
    from leaklab.detectors.signals import Signals

COSTS = ("cheap", "moderate", "costly")  # a detector record's `cost`, cheapest first


@dataclass(frozen=True)
class Record:
    """One plug-in, as every part of leaklab sees it.

    name: the name recipes use; path: "module:Object", imported on first use; kind: "score", "model"
        (reads the model: `run(inputs)`) or "rule" (`decide(inputs)`) for detectors, else "evaluation"
        or "stage" (the Protocols below).
    display / group: its name in reports ("" shows `name`) and its family (one palette, dash, shape).
    config: "module:Dataclass" of its recipe section, importing no torch (the recipe reads it on load);
        section: that section's key, which several records may share (SrDetection's three detectors).
    columns: other score columns it writes, with display names; summary: one line for listings.
    cost: detectors: one of COSTS, shown by `leaklab detectors` ("cheap": one forward pass; "moderate":
        several, or a second model; "costly": generation or sandbox runs).
    dose_panels: evaluations: "module:function", `(rows, run) -> list[Panel | Table]` of its per-dose rows.
    requires: evaluations: (key, what it gives, an example) of recipe keys outside its section that must
        be set for it to measure anything; the recipe loader refuses a recipe without them.
    """

    name: str
    path: str
    kind: str
    display: str = ""
    group: str = ""
    config: str | None = None
    section: str | None = None
    columns: tuple[tuple[str, str], ...] = ()
    summary: str = ""
    cost: str = ""
    dose_panels: str | None = None
    requires: tuple[tuple[str, str, str], ...] = ()

    def load(self) -> Any:
        """The plug-in's object (a class, or a module for a stage)."""
        return resolve(self.path)

    def settings_class(self) -> type | None:
        return resolve(self.config) if self.config else None

    @property
    def title(self) -> str:
        return self.display or self.name


def resolve(path: str) -> Any:
    """ "leaklab.detectors.likelihood:Ppl" -> the object; "leaklab.training.cpt" -> the module."""
    module, _, attr = path.partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, attr) if attr else loaded


# --------------------------------------------------------------------------- interfaces


@runtime_checkable
class Settings(Protocol):
    """A plug-in's recipe section (`Record.config`): a dataclass with these two."""

    # Fields whose value is one of a few words, relative to the section: {"format": ("auto", "chat")}.
    choices: ClassVar[dict[str, tuple[str, ...]]]

    def check(self, parent: Any) -> list[str]:
        """One line per problem, each naming its full key; `parent` is the enclosing section
        (the recipe's `evaluate` or `train`), for checks that read a sibling setting."""
        ...


class Detector(Protocol):
    """What every detector kind has: its name, what it needs, and the score columns it writes."""

    name: ClassVar[str]
    needs: ClassVar[frozenset[str]]  # score: signals of `likelihood` (target, lowercase, reference, ...)

    def columns(self) -> dict[str, dict]: ...


@runtime_checkable
class ScoreDetector(Detector, Protocol):
    """kind "score": one number per sample from the shared token statistics (higher = member)."""

    def score(self, signals: Signals) -> dict[str, Any]: ...


@runtime_checkable
class ModelDetector(Detector, Protocol):
    """kind "model": one number per sample, reading the model itself (`detectors/inputs.ModelInputs`)."""

    def run(self, inputs: ModelInputs) -> dict[str, Any]: ...


@dataclass
class RuleScores:
    """What a rule detector's `decide` returns: per column its margin and its decisions."""

    columns: dict[str, Any]
    decisions: dict[str, Any]
    info: dict[str, Any]


@runtime_checkable
class RuleDetector(Detector, Protocol):
    """kind "rule": decides leak / not leak per sample itself; its metrics need no threshold."""

    def decide(self, inputs: ModelInputs) -> RuleScores: ...

    def metrics(self, decisions: Any, labels: Any, *, n_bootstrap: int, seed: int) -> dict[str, float]: ...


@runtime_checkable
class AuditRates(Protocol):
    """Optional for a rule detector: what an audit (`leaklab audit`, no labels) reports of its decisions
    beside the leak rate every rule gets (`audit.rule_rates`), e.g. SrDetection's rate under the null."""

    def audit_rates(self, decisions: Any, *, n_bootstrap: int, seed: int) -> dict[str, float]: ...


@runtime_checkable
class ChecksSettings(Protocol):
    """Optional for a detector: problems of its spec under the recipe's `evaluate` settings."""

    def check(self, settings: Any) -> list[str]: ...


@runtime_checkable
class Evaluation(Protocol):
    """kind "evaluation": constructed with no arguments, once per run."""

    name: ClassVar[str]

    def specs(self, recipe: Any) -> list[str]:
        """What its "done" marker records; a step is evaluated again when this grows."""
        ...

    def prepare(self, ctx: Any) -> None:
        """Once per run, before any checkpoint."""
        ...

    def evaluate(self, ctx: Any, model: Any, tokenizer: Any, step: int) -> Any:
        """Once per checkpoint, on every rank; returns an `EvalOutput`."""
        ...


@runtime_checkable
class Summarises(Protocol):
    """Optional for an evaluation: the one line logged after each checkpoint."""

    def summary(self, rows: list[dict[str, Any]]) -> str: ...


@runtime_checkable
class RunsTests(Protocol):
    """Optional for an evaluation that may run the benchmark's tests: for this recipe, the key and value
    that make it run them (said when a task has none), or None."""

    def runs_tests(self, recipe: Any) -> str | None: ...


@runtime_checkable
class Narrows(Protocol):
    """Optional for an evaluation: the recipe that computes only the specs a step lacks (`done` holds
    those its "done" markers already list), so adding a detector to an evaluated step scores only it."""

    def narrow(self, recipe: Any, done: set[str]) -> Any: ...


@runtime_checkable
class ReportsSection(Protocol):
    """Optional for an evaluation: its own section of the HTML report."""

    def report_section(self, rows: list[dict[str, Any]], run: Any) -> Any: ...


@runtime_checkable
class Stage(Protocol):
    """kind "stage": a module with these two functions (and optionally `resolve_base`)."""

    def build_dataset(self, recipe, tokenizer, tasks, manifest, run, log) -> Any: ...

    def build_trainer(self, model, tokenizer, dataset, recipe, output_dir, callbacks, report_to) -> Any: ...


# --------------------------------------------------------------------------- plug-ins from outside leaklab

# Installed packages declare plug-in modules under this entry-point group; a recipe names others with its
# `plugins` key (docs/plugins.md#telling-leaklab-where-it-is).
ENTRY_POINT_GROUP = "leaklab.plugins"
_imported: set[str] = set()  # modules already imported as plug-ins (each once per process)
# The registries by the kinds of record they hold; each registry module adds itself here when imported
# (detectors: "score", "model", "rule"; "evaluation"; "stage"), so `register` imports none of them.
REGISTRIES: dict[str, dict[str, Record]] = {}


def register(*records: Record) -> None:
    """Add plug-ins from a module outside leaklab: each record goes to the registry of its kind
    (detectors: DETECTORS, "evaluation": EVALUATIONS, "stage": STAGES), where recipes, the driver,
    `leaklab detectors` and the report find it as they find a built-in. A module calls this when imported.
    A name already registered for another object is refused: a plug-in never replaces a built-in."""
    for record in records:
        registry = REGISTRIES.get(record.kind)
        if registry is None:
            kinds = ", ".join(REGISTRIES) or "none loaded yet: import leaklab.recipe first"
            raise ValueError(f"plug-in {record.name!r}: unknown kind {record.kind!r} (kinds: {kinds})")
        known = registry.get(record.name)
        if known is not None and known != record:
            raise ValueError(f"plug-in {record.name!r} ({record.path}) clashes with {known.path}; rename it")
        registry[record.name] = record


def import_plugins(modules: Sequence[str]) -> None:
    """Import the modules a recipe's `plugins` key names (each registers its records when imported). A
    module that cannot be found is bad input: one line naming it (`leaklab.errors.InputError`)."""
    from leaklab.errors import InputError

    for name in modules:
        if name in _imported:
            continue
        if not isinstance(name, str) or not name:
            raise InputError(f"plugins: expected module names, e.g. plugins=[my_lab.detectors], got {name!r}")
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name and name.startswith(err.name):  # the module named, not one it imports
                raise InputError(
                    f"plugins: no module named {name!r} (an importable module: install its package, or "
                    f"put its folder on PYTHONPATH)"
                ) from None
            raise
        _imported.add(name)


def load_entry_points() -> None:
    """Import every module installed packages declare under ENTRY_POINT_GROUP. Called by the recipe
    module once the registries are imported and before it builds its sections from them."""
    from importlib.metadata import entry_points

    for point in entry_points(group=ENTRY_POINT_GROUP):
        module = point.value.partition(":")[0]
        if module not in _imported:
            _imported.add(module)
            loaded = point.load()
            if callable(loaded):  # "module:function": a function that registers when called
                loaded()
