"""Every plug-in is its registry record: each record's object satisfies its kind's Protocol, its settings
are a recipe section, and a detector registered here, in this test alone, is scored, reported and
rendered with no change anywhere else."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from test_detectors import bigram

from leaklab import plugins
from leaklab.detectors import DETECTORS, KINDS, build_detector, score_detectors
from leaklab.detectors.inputs import ModelInputs
from leaklab.detectors.likelihood import TARGET
from leaklab.evaluations import EVALUATIONS
from leaklab.evaluations.base import EvalContext, EvalSet
from leaklab.evaluations.detection import Detection
from leaklab.metrics import rule_metrics
from leaklab.plugins import Record, RuleScores
from leaklab.recipe import PLUGIN_SECTIONS, EvaluateConfig, Recipe, get_key, load_recipe
from leaklab.report import charts
from leaklab.report.rundata import load_run
from leaklab.report.sections import build_sections
from leaklab.results import display_name, is_rule
from leaklab.rundir import RunDir
from leaklab.signals.logprobs import compute_token_stats
from leaklab.training.stages import STAGES

DETECTOR_PROTOCOLS = {
    "score": plugins.ScoreDetector,
    "model": plugins.ModelDetector,
    "rule": plugins.RuleDetector,
}


@pytest.mark.parametrize("name", list(DETECTORS))
def test_every_detector_record_satisfies_its_kind(name):
    record = DETECTORS[name]
    assert record.name == name and record.kind in KINDS and record.group
    detector = record.load()()
    assert isinstance(detector, DETECTOR_PROTOCOLS[record.kind]), f"{name} is not a {record.kind} detector"
    for other, protocol in DETECTOR_PROTOCOLS.items():
        if other != record.kind:  # the kind is what the record says, not a method it happens to have
            assert not isinstance(detector, protocol) or {record.kind, other} == {"score", "model"}


@pytest.mark.parametrize("name", list(EVALUATIONS))
def test_every_evaluation_record_satisfies_the_protocol(name):
    record = EVALUATIONS[name]
    evaluation = record.load()()
    assert record.kind == "evaluation" and evaluation.name == name
    assert isinstance(evaluation, plugins.Evaluation)


@pytest.mark.parametrize("name", list(STAGES))
def test_every_stage_record_satisfies_the_protocol(name):
    record = STAGES[name]
    assert record.kind == "stage" and isinstance(record.load(), plugins.Stage)


def test_every_plugin_setting_is_a_checked_recipe_section():
    records = [*DETECTORS.values(), *EVALUATIONS.values(), *STAGES.values()]
    sections = {(parent, name) for parent, name, _ in PLUGIN_SECTIONS}
    recipe = Recipe()
    for record in records:
        if record.config is None:
            continue
        parent = "train" if record.kind == "stage" else "evaluate"
        assert (parent, record.section) in sections
        settings = get_key(recipe, f"{parent}.{record.section}")
        assert dataclasses.is_dataclass(settings) and type(settings) is record.settings_class()
        assert isinstance(settings, plugins.Settings) and settings.check(get_key(recipe, parent)) == []
        fields = {f.name for f in dataclasses.fields(settings)}
        assert all(key.split(".")[0] in fields for key in settings.choices), record.name


# --------------------------------------------------------------------------- a rule detector of the test's own


@dataclasses.dataclass(frozen=True)
class ToyDecisions:
    leak: np.ndarray
    decided: np.ndarray
    margin: np.ndarray


@dataclasses.dataclass
class ToyRule:
    """Leak iff the sample's NLL is below the median NLL of the evaluation set."""

    name = "toy_rule"
    needs = frozenset({TARGET})
    scale: float = 1.0

    def columns(self) -> dict[str, dict]:
        return {"toy_rule": {"scale": self.scale}}

    def decide(self, inputs) -> RuleScores:
        stats = compute_token_stats(inputs.model, inputs.tokenizer, inputs.texts, settings=inputs.scoring())
        nlls = np.array([s.nll() for s in stats])
        margin = self.scale * (np.nanmedian(nlls) - nlls)
        decisions = ToyDecisions(leak=margin > 0, decided=np.isfinite(margin), margin=margin)
        return RuleScores({"toy_rule": margin}, {"toy_rule": decisions}, {"toy_rule": {"texts": len(nlls)}})

    def metrics(self, decisions, labels, *, n_bootstrap: int = 0, seed: int = 0) -> dict[str, float]:
        return rule_metrics(
            decisions.leak,
            labels,
            margin=decisions.margin,
            decided=decisions.decided,
            n_bootstrap=n_bootstrap,
            seed=seed,
        )


def test_a_rule_detector_registered_in_a_test_is_scored_reported_and_rendered(tmp_path, monkeypatch):
    record = Record("toy_rule", f"{__name__}:ToyRule", "rule", "Toy rule", "toy rules")
    monkeypatch.setitem(DETECTORS, "toy_rule", record)
    assert isinstance(build_detector("toy_rule:scale=2"), plugins.RuleDetector)

    # Scored: through its own `decide`, beside a score detector.
    model, tok = bigram()
    texts = ["a b c a", "b b b b", "a a b b", "c c c a", "a b a b", "b c b c"] * 2
    labels = np.array([1, 0, 1, 0, 1, 0] * 2)
    info: dict = {}
    scores = score_detectors(
        ["ppl", "toy_rule"], ModelInputs(model, tok, texts, settings=EvaluateConfig()), info=info
    )
    assert set(scores.columns) == {"ppl", "toy_rule"} and set(scores.decisions) == {"toy_rule"}
    assert info["rules"] == {"toy_rule": {"texts": 12}}
    ppl_order = np.argsort(-scores.columns["ppl"], kind="stable")  # lower NLL <=> higher ppl score
    assert np.all(np.diff(scores.columns["toy_rule"][ppl_order]) <= 1e-9)

    # Reported: the detection evaluation takes it from the recipe and scores it by its own metrics.
    recipe = load_recipe("tiny_cpt", ["evaluate.detectors=[ppl,toy_rule]", "evaluate.n_bootstrap=0"])
    eval_set = EvalSet(task_ids=[f"T/{i}" for i in range(12)], labels=labels, texts=texts, prompts=[""] * 12)
    ctx = EvalContext(recipe=recipe, run=RunDir(tmp_path / "run"), eval_set=eval_set, log=lambda *a: None)
    detection = Detection()
    detection.prepare(ctx)
    output = detection.evaluate(ctx, model, tok, step=0)
    toy = {r["metric"]: r["value"] for r in output.rows if r["column"] == "toy_rule"}
    assert {"f1", "auroc", "n_undecided"} <= set(toy) and "f1_oracle" not in toy
    # Both error rates, from the rule's own decisions, for a rule the framework knows nothing about.
    leak = np.array([r["toy_rule:leak"] == 1 for r in output.records])
    assert toy["flag_rate_members"] == pytest.approx(leak[labels == 1].mean())
    assert toy["flag_rate_non_members"] == pytest.approx(leak[labels == 0].mean())
    assert all("toy_rule:leak" in r for r in output.records)
    assert "toy_rule F1" in detection.summary(output.rows)

    # Rendered: its display name, its group, a rule's style in the report.
    assert is_rule("toy_rule") and display_name("toy_rule") == "Toy rule"
    assert charts.group_of("toy_rule") == "toy rules"
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "recipe.yaml").write_text("model:\n  name_or_path: builtin:tiny\n")
    manifest = {"member_ids": eval_set.task_ids[::2], "non_member_ids": eval_set.task_ids[1::2]}
    (run / "manifest.json").write_text(json.dumps(manifest))
    rows = [{"step": 0, "epoch": 0.0, "evaluation": "detection", **r} for r in output.rows]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    sections = {s.key: s for s in build_sections(load_run(run))}
    page = json.dumps([dataclasses.asdict(i) for i in sections["detection"].items], default=str)
    assert "Toy rule" in page
    styles = charts.series_styles(["ppl", "toy_rule"])
    assert styles["toy_rule"].group == "toy rules" and styles["toy_rule"].shape != styles["ppl"].shape


def test_every_rule_detector_gets_both_flag_rates_even_from_its_own_metrics():
    from leaklab.evaluations.detection import rule_detector_metrics

    class F1Only:  # a rule whose own metrics know nothing of flag rates
        def metrics(self, decisions, labels, *, n_bootstrap: int = 0, seed: int = 0):
            return {"f1": 0.5}

    decisions = ToyDecisions(
        leak=np.array([1, 0, 1, 1, 1, 0], bool), decided=np.ones(6, bool), margin=np.zeros(6)
    )
    labels = np.array([1, 1, 0, 0, 0, 0])
    m = rule_detector_metrics(F1Only(), decisions, labels, n_bootstrap=100, seed=0)
    assert m["f1"] == 0.5
    assert m["flag_rate_members"] == 0.5 and m["flag_rate_non_members"] == 0.75
    assert m["flag_rate_non_members_ci_low"] <= 0.75 <= m["flag_rate_non_members_ci_high"]


def test_an_audit_rates_any_rule_detector_from_its_own_decisions():
    from leaklab.audit import rule_rates, rule_vs_clean

    # Sample 0 and 2 flagged, 1 not, 3 undecided: no SrDetection fields (null rate, p-values, n_leaks).
    decisions = ToyDecisions(
        leak=np.array([True, False, True, False]),
        decided=np.array([True, True, True, False]),
        margin=np.array([1.0, -1.0, 2.0, np.nan]),
    )
    rates = rule_rates(ToyRule(), decisions, n_bootstrap=0, seed=0)
    assert (rates["n_decided"], rates["n_undecided"], rates["n_leaks"]) == (3, 1, 2)
    assert rates["leak_rate"] == pytest.approx(2 / 3) and "null_rate" not in rates
    clean = ToyDecisions(
        leak=np.array([False, True]), decided=np.array([True, True]), margin=np.array([-1.0, 1.0])
    )
    versus = {r["metric"]: r["value"] for r in rule_vs_clean(decisions, clean, {"column": "toy_rule"})}
    assert versus["clean_n_leaks"] == 1 and versus["clean_leak_rate"] == 0.5
