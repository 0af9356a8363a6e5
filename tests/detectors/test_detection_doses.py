"""Detection per exposure dose: rows of the members of dose d against all the non-members,
with `"dose": d`, beside the all-members rows, which stay as a run without doses writes them."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from test_detectors import TARGET_TABLE, BigramLM, word_tokenizer

from leaklab.data.tasks import Task
from leaklab.detectors import DetectorScores
from leaklab.detectors.srdetection import Decisions
from leaklab.evaluations.detection import column_rows, group_rows
from leaklab.metrics import detection_metrics, rule_metrics
from leaklab.results import detection_rows, rows_per_dose, without_dose
from leaklab.rundir import append_rows, read_rows

CFG = SimpleNamespace(cv_folds=2, seed=0, n_bootstrap=50)


def scored(values: np.ndarray) -> DetectorScores:
    return DetectorScores(columns={"ppl": values}, params={"ppl": ("ppl", {})})


def test_rows_per_dose_hands_each_group_its_members_and_every_non_member_and_tags_the_rows():
    """The one loop all four evaluations' per-dose rows go through: dose groups ascending, each row
    function called on the members of that dose plus all non-members in sample order, rows filtered
    by `keep` and tagged with the dose."""
    labels = [1, 0, 1, 1, 0]
    doses = [4, 0, 1, 4, 0]
    calls = []

    def rows_of(index):
        calls.append(index)
        return [{"column": "members", "n": len(index)}, {"column": "non_members", "n": len(index)}]

    rows = rows_per_dose(labels, doses, rows_of, keep=lambda r: r["column"] == "members")
    assert calls == [[1, 2, 4], [0, 1, 3, 4]]
    assert rows == [{"column": "members", "n": 3, "dose": 1}, {"column": "members", "n": 4, "dose": 4}]
    assert rows_per_dose([0, 0], [0, 0], rows_of) == []  # no members, no dose groups


def test_high_dose_members_are_easier_to_tell_apart_and_auroc_is_sklearns_on_the_subset():
    rng = np.random.default_rng(0)
    # 20 members of dose 1 (no shift), 20 of dose 16 (shifted up), 40 non-members (dose 0).
    doses = np.r_[np.ones(20, int), np.full(20, 16), np.zeros(40, int)]
    labels = (doses > 0).astype(int)
    values = rng.normal(size=80) + 2.0 * (doses == 16)
    rows = rows_per_dose(labels, doses, group_rows(scored(values), labels, CFG))
    auroc = {r["dose"]: r["value"] for r in rows if r["metric"] == "auroc"}
    assert sorted(auroc) == [1, 16] and auroc[16] > auroc[1] + 0.3
    for dose in (1, 16):
        subset = (doses == 0) | (doses == dose)
        assert auroc[dose] == pytest.approx(roc_auc_score(labels[subset], values[subset]))
    n = {r["dose"]: r["value"] for r in rows if r["metric"] == "n_members"}
    assert n == {1: 20.0, 16: 20.0}
    low = {r["dose"]: r["value"] for r in rows if r["metric"] == "auroc_ci_low"}
    assert low[16] <= auroc[16]


def test_a_rule_detector_is_scored_on_the_subset_of_its_decisions():
    labels = np.array([1, 1, 1, 0, 0, 0])
    doses = np.array([1, 4, 4, 0, 0, 0])
    leak = np.array([False, True, True, False, True, False])
    margin = np.array([-1.0, 2.0, 1.0, -2.0, 0.5, -0.5])
    decisions = Decisions(2, leak, np.ones(6, bool), np.full(6, 2), margin)
    rule = SimpleNamespace(metrics=lambda d, y, **kw: rule_metrics(d.leak, y, margin=d.margin, **kw))
    scores = DetectorScores(
        columns={"srdetection_gray@n=2": margin},
        params={"srdetection_gray@n=2": ("srdetection_gray", {"n": 2})},
        decisions={"srdetection_gray@n=2": decisions},
        rules={"srdetection_gray@n=2": rule},
    )
    rows = rows_per_dose(
        labels, doses, group_rows(scores, labels, SimpleNamespace(cv_folds=2, seed=0, n_bootstrap=0))
    )
    value = {(r["dose"], r["metric"]): r["value"] for r in rows}
    # Dose 4: both members flagged, one non-member of three flagged.
    assert value[4, "flag_rate_members"] == 1.0 and value[4, "flag_rate_non_members"] == pytest.approx(1 / 3)
    assert value[1, "flag_rate_members"] == 0.0 and value[1, "n"] == 4.0


def test_dose_rows_are_kept_beside_the_all_members_rows_and_readers_keep_them_apart(tmp_path):
    head = {"step": 1, "epoch": 1.0, "evaluation": "detection", "detector": "ppl", "column": "ppl"}
    rows = [
        {**head, "metric": "auroc", "value": 0.6},
        {**head, "metric": "auroc", "value": 0.9, "dose": 16},
        {**head, "metric": "auroc", "value": 0.55, "dose": 1},
    ]
    path = tmp_path / "results.jsonl"
    assert append_rows(path, rows) == 3  # not taken for duplicates of one (step, column, metric)
    assert append_rows(path, rows) == 0
    back = read_rows(path)
    assert detection_rows(back) == without_dose(back) == rows[:1]


def bigram_eval(tmp_path, doses):
    from leaklab.evaluate import Evaluator
    from leaklab.evaluations.base import EvalSet
    from leaklab.recipe import load_recipe
    from leaklab.rundir import RunDir
    from leaklab.signals.logprobs import SignalCache

    tok = word_tokenizer(["a", "b", "c", "<bos>"])
    model = BigramLM(tok, TARGET_TABLE)
    solutions = ["b c", "a b b", "c c a", "b b", "a a b", "c b", "b c a", "a c", "c a b", "b a"]
    tasks = [Task(f"t{i}", "words", "a ", s) for i, s in enumerate(solutions)]
    eval_set = EvalSet(
        task_ids=[t.task_id for t in tasks],
        labels=np.array([1] * 4 + [0] * 6),
        texts=[t.text() for t in tasks],
        prompts=[t.prompt for t in tasks],
        tasks=tasks,
        doses=doses,
    )
    recipe = load_recipe(
        "tiny_cpt", ["evaluate.detectors=[ppl]", "evaluate.cv_folds=2", "evaluate.n_bootstrap=20"]
    )
    run = RunDir(tmp_path)
    rows = Evaluator(recipe, run, eval_set, signal_cache=SignalCache()).evaluate(
        model, tok, step=2, epoch=1.0
    )
    records = [json.loads(line) for line in run.scores(2, "detection").read_text().splitlines()]
    return rows, records, eval_set.labels


def test_evaluation_without_doses_writes_the_rows_it_wrote_before_and_with_doses_adds_dose_rows(tmp_path):
    plain, records, labels = bigram_eval(tmp_path / "plain", None)
    assert not any("dose" in r for r in plain)
    # What the evaluation wrote before per-dose rows: detection_metrics of the whole column.
    ppl = {r["metric"]: r["value"] for r in plain if r.get("column") == "ppl"}
    scores = np.array([r["ppl"] for r in records])
    expected = detection_metrics(scores, labels, cv_folds=2, seed=0, n_bootstrap=20)
    assert ppl == pytest.approx(expected, nan_ok=True)

    doses = np.array([1, 1, 4, 4, 0, 0, 0, 0, 0, 0])
    dosed, _, _ = bigram_eval(tmp_path / "dosed", doses)
    untimed = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa: E731
    assert untimed(without_dose(dosed)) == untimed(plain)
    auroc = {r["dose"]: r["value"] for r in dosed if r.get("dose") is not None and r["metric"] == "auroc"}
    for dose in (1, 4):
        subset = (doses == 0) | (doses == dose)
        assert auroc[dose] == pytest.approx(roc_auc_score(labels[subset], scores[subset]))


def test_column_rows_on_every_sample_are_the_rows_of_the_whole_column():
    values = np.random.default_rng(1).normal(size=12)
    labels = np.r_[np.ones(6, int), np.zeros(6, int)]
    everyone = column_rows(scored(values), labels, CFG)
    assert everyone == column_rows(scored(values), labels, CFG, np.arange(12))
