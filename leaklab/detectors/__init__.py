"""The detector registry, DETECTORS (one `plugins.Record` per detector; its kind, "score", "model" or
"rule", names the interface its class has), and the functions that build and run detectors. A spec is a
registry name, optionally with parameters: "mink:k=0.05,0.1,0.2" (`parse_spec`, `regroup_specs`). Every
spec of a recipe is built, and so checked, when the recipe loads. Adding a detector:
docs/development.md#adding-a-detector-an-evaluation-or-a-stage-step-by-step.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from leaklab.detectors.inputs import ModelInputs
from leaklab.detectors.signals import SOURCES, compute_signals
from leaklab.detectors.srdetection import VARIANTS
from leaklab.errors import closest
from leaklab.plugins import REGISTRIES, ChecksSettings, Record


def _likelihood(name: str, cls: str, title: str, cost: str, **more: Any) -> Record:
    return Record(
        name, f"leaklab.detectors.likelihood:{cls}", "score", title, "likelihood baselines", cost=cost, **more
    )


def _srdetection(name: str, cls: str, title: str, cost: str, **more: Any) -> Record:
    path, config = f"leaklab.detectors.srdetection:{cls}", "leaklab.detectors.srdetection:SrDetectionConfig"
    return Record(name, path, "rule", title, "SrDetection", config, "srdetection", cost=cost, **more)


def _other(name: str, path: str, cost: str) -> Record:
    return Record(name, f"leaklab.{path}", "model", "", "other detectors", cost=cost)


# Every detector, in the order reports show them (the rest of a report's columns follow by name).
DETECTORS: dict[str, Record] = {
    r.name: r
    for r in [
        _likelihood("ppl", "Ppl", "PPL", "cheap"),
        _likelihood("lowercase", "Lowercase", "Lowercase", "moderate"),
        _likelihood("zlib", "Zlib", "Zlib", "cheap"),
        _likelihood("mink", "MinK", "Min-K% Prob", "cheap"),
        _likelihood("minkpp", "MinKPlusPlus", "Min-K%++ Prob", "cheap"),
        _likelihood("dcpdd", "DcPdd", "DC-PDD", "cheap"),
        _likelihood(
            "ref", "ReferenceRatio", "Ref. ratio", "moderate", columns=(("ref_diff", "Ref. difference"),)
        ),
        _srdetection("srdetection_gray", "SrDetectionGray", "SrDetection gray box", "moderate"),
        _srdetection("srdetection_black", "SrDetectionBlack", "SrDetection black box", "costly"),
        _srdetection(
            "srdetection_calibrated",
            "SrDetectionCalibrated",
            "SrDetection calibrated (vs reference)",
            "moderate",
        ),
        _srdetection(
            "srdetection_clean_null",
            "SrDetectionCleanNull",
            "SrDetection clean null (gray box)",
            "moderate",
            columns=(("srdetection_clean_null_black", "SrDetection clean null (black box)"),),
        ),
        _other("cdd", "detectors.cdd:Cdd", "costly"),
        _other("neighbourhood", "detectors.neighbourhood:Neighbourhood", "moderate"),
        _other("ngram_acc", "detectors.ngram:NgramAccuracy", "costly"),
        _other("recall", "detectors.recall:Recall", "moderate"),
        _other("pac", "detectors.pac:Pac", "moderate"),
        _other("conrecall", "detectors.conrecall:ConRecall", "moderate"),
        _other("samia", "detectors.samia:Samia", "costly"),
        _other("gradnorm", "detectors.gradnorm:GradNorm", "moderate"),
        _other("codec", "dataset_tests.codec:Codec", "moderate"),
        _other("pacost", "dataset_tests.pacost:Pacost", "moderate"),
    ]
}
KINDS = ("score", "model", "rule")  # see plugins.Record
REGISTRIES.update(dict.fromkeys(KINDS, DETECTORS))  # where `plugins.register` adds outside detectors


def describe_detectors() -> list[dict[str, Any]]:
    """Every registered detector as `leaklab detectors` lists it: name, kind, display name, group,
    parameters with their defaults, its recipe section, what it needs and its cost class."""
    out = []
    for record in DETECTORS.values():
        cls = record.load()
        params = {}
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            params[f.name] = ",".join(map(str, default)) if isinstance(default, tuple) else str(default)
        out.append(
            {
                "name": record.name,
                "kind": record.kind,
                "display": record.title,
                "group": record.group,
                "params": params,
                "section": f"evaluate.{record.section}" if record.section else "",
                "needs": [SOURCES[n].text if n in SOURCES else n for n in sorted(cls.needs)],
                "cost": record.cost,
            }
        )
    return out


def record_of(spec: str) -> Record:
    """The registry record a spec names (unknown names raise ValueError with a hint)."""
    name = parse_spec(spec)[0]
    if name not in DETECTORS:
        raise ValueError(
            f"unknown detector {name!r}{closest(name, DETECTORS)} (known: {', '.join(DETECTORS)})"
        )
    return DETECTORS[name]


def needs_of(specs: Sequence[str]) -> frozenset[str]:
    """Every signal the specs read."""
    return frozenset().union(*(record_of(s).load().needs for s in specs))


def needs_variants(specs: Sequence[str]) -> bool:
    return VARIANTS in needs_of(specs)


def validate_specs(specs: Sequence[str], settings=None) -> list[str]:
    """One line per problem of the specs (unknown names or parameters, bad values, a spec that asks for
    more than `settings` provides), each naming the spec; [] when every spec builds."""
    problems = []
    for spec in specs:
        try:
            detector = build_detector(spec)
        except ValueError as err:
            problems.append(f"{spec!r}: {err}")
            continue
        if settings is not None and isinstance(detector, ChecksSettings):
            problems.extend(detector.check(settings))
    return problems


def parse_spec(spec: str) -> tuple[str, dict[str, list[str]]]:
    """ "mink:k=0.05,0.1" -> ("mink", {"k": ["0.05", "0.1"]})."""
    name, _, rest = spec.partition(":")
    params: dict[str, list[str]] = {}
    current = None
    for item in (x.strip() for x in rest.split(",")) if rest.strip() else []:
        if "=" in item:
            current, value = (part.strip() for part in item.split("=", 1))
            params[current] = [value]
        elif current is None:
            raise ValueError(f"detector spec {spec!r}: expected key=value after ':', got {item!r}")
        else:
            params[current].append(item)
    return name.strip(), params


def regroup_specs(items: Sequence[Any]) -> list[str]:
    """A spec list as a comma-split command line or YAML flow list gives it ("ppl", "srdetection_gray:n=1",
    3, 5, 10), put back together (["ppl", "srdetection_gray:n=1,3,5,10"]). Which item joins the spec
    before it: see docs/detectors.md#detector-specs."""
    out: list[str] = []
    for item in items:
        text = str(item).strip()
        name = text.partition(":")[0].strip()
        starts_spec = (
            ":" in text
            or name in DETECTORS
            or ("=" not in text and not _is_number(text) and bool(closest(text, DETECTORS, cutoff=0.6)))
        )
        if out and ":" in out[-1] and "=" in out[-1] and not starts_spec:
            out[-1] += f",{text}"
        else:
            out.append(text)
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def build_detector(spec: str):
    """The detector instance a spec names; unknown names and parameters raise ValueError with a hint."""
    name, params = parse_spec(spec)
    cls = record_of(spec).load()
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, values in params.items():
        if key not in fields:
            known = ", ".join(sorted(fields)) or "none"
            raise ValueError(
                f"detector {name!r}: unknown parameter {key!r}{closest(key, fields)} (known: {known})"
            )
        kwargs[key] = _convert(hints[key], values, f"{name}:{key}")
    return cls(**kwargs)


def _convert(tp, values: list[str], where: str):
    try:
        if typing.get_origin(tp) is tuple:
            item = typing.get_args(tp)[0]
            return tuple(item(v) for v in values)
        if len(values) != 1:
            raise ValueError("expected one value")
        return tp(values[0])
    except (TypeError, ValueError) as err:
        raise ValueError(f"detector parameter {where}: cannot use {','.join(values)!r} ({err})") from None


def run_detectors(
    specs: Sequence[str], inputs: ModelInputs, info: dict[str, Any] | None = None
) -> dict[str, np.ndarray]:
    """Score every text of `inputs` with every score detector; score column name -> float array (higher =
    member). The detectors share one `Signals` (`signals.compute_signals`); `info` gets its counts."""
    others = [spec for spec in specs if record_of(spec).kind != "score"]
    if others:
        raise ValueError(
            f"{others[0]!r} is a {record_of(others[0]).kind} detector: score it with score_detectors"
        )
    detectors = [build_detector(spec) for spec in specs]
    signals = compute_signals(inputs, set().union(*(d.needs for d in detectors)), info)
    columns: dict[str, np.ndarray] = {}
    for detector in detectors:
        for name, values in detector.score(signals).items():
            columns[name] = np.asarray(values, dtype=np.float64)  # a repeated column is the same computation
    return columns


@dataclass
class DetectorScores:
    """What `score_detectors` returns, by score column: each sample's score (higher = more likely a
    member; a rule's margin, > 0 iff it says leak, NaN when undecided) and the (detector, parameters);
    for rule columns, the `Decisions` and the detector whose `metrics` scores them."""

    columns: dict[str, np.ndarray] = field(default_factory=dict)
    params: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    decisions: dict[str, Any] = field(default_factory=dict)
    rules: dict[str, Any] = field(default_factory=dict)

    def cells(self, i: int) -> dict[str, float | int | None]:
        """Sample i's score per column (None for NaN) and, for rule columns, `<column>:leak`
        (1 leak, 0 not, None undecided): one per-sample record's worth."""
        out: dict[str, float | int | None] = {}
        for column, values in self.columns.items():
            value = float(values[i])
            out[column] = None if np.isnan(value) else value
            decisions = self.decisions.get(column)
            if decisions is not None:
                out[f"{column}:leak"] = int(decisions.leak[i]) if decisions.decided[i] else None
        return out


def score_detectors(
    specs: Sequence[str], inputs: ModelInputs, info: dict[str, Any] | None = None
) -> DetectorScores:
    """Every spec on one model and its evaluation set: "score" detectors through `run_detectors`, "model"
    ones by `run(inputs)`, rules by `decide(inputs)`; `info` gets the counts of each (signals, "rules",
    "model_level"). Under several processes call it on every rank; every rank gets the full result."""
    detectors = {spec: build_detector(spec) for spec in specs}
    kinds = {spec: record_of(spec).kind for spec in specs}
    out = DetectorScores()
    score_specs = [s for s in specs if kinds[s] == "score"]
    if score_specs:
        out.columns.update(run_detectors(score_specs, inputs, info))
    rules = [d for s, d in detectors.items() if kinds[s] == "rule"]
    rule_info: dict[str, Any] = {}
    for detector in rules:
        decided = detector.decide(inputs)
        out.columns.update(decided.columns)
        out.decisions.update(decided.decisions)
        out.rules.update({column: detector for column in decided.decisions})
        rule_info.update(decided.info)
    if rules and info is not None:
        info["rules"] = rule_info
    model_level = [d for s, d in detectors.items() if kinds[s] == "model"]
    for detector in model_level:
        out.columns.update({c: np.asarray(v, dtype=np.float64) for c, v in detector.run(inputs).items()})
    if model_level and info is not None:
        info["model_level"] = inputs.info
    for detector in detectors.values():
        for column, params in detector.columns().items():
            out.params[column] = (detector.name, params)
    return out
