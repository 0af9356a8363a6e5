"""SrDetection wired into the pipeline: golden margins and decisions through the signal engine and a
stub generator (worked out by hand on the bigram model of test_detectors), undecided samples, caching of
signals / generations / variant sets, the audit's leakage rate, and (slow) the whole run on the tiny model.

Bigram model (TARGET_TABLE): after BOS p(a) = 1/2; after a p(b) = 1/2; after b p(c) = 1/2; after c
p(a) = 1/2; every other next token 1/4. So NLL("a b c") = NLL("a b c a") = ln 2, NLL("a a b b") = 1.5 ln 2,
NLL("b b b") = NLL("c c") = 2 ln 2, and greedy decoding cycles a -> b -> c -> a.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_detectors import bigram

from leaklab.data.tasks import Task
from leaklab.detectors import build_detector, run_detectors, score_detectors
from leaklab.detectors.inputs import ModelInputs
from leaklab.detectors.srdetection import (
    Decisions,
    SrDetectionConfig,
    SrDetectionGray,
    SrInputs,
    cut_text,
    decisions_by_n,
    score_srdetection,
)
from leaklab.metrics import leak_rate
from leaklab.perturb.variants import Variant, VariantSet
from leaklab.recipe import EvaluateConfig, RecipeError, load_recipe
from leaklab.signals.continuations import GenerationCache
from leaklab.signals.generation import Completion
from leaklab.signals.logprobs import SignalCache

LN2 = math.log(2)
REPO = Path(__file__).resolve().parents[2]


def count_forwards(model) -> list[int]:
    calls = [0]
    model.body.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


# Four samples (labels 1, 0, 1, 0): a leak, a clear non-leak, a tie with a single variant, no variants.
GRAY = SrInputs(
    texts=["a b c", "b b b", "a b c", "a a b b"],
    contexts=["", "", "", ""],
    variant_texts=[["a a b b", "b b b"], ["a b c", "c c"], ["a b c a"], []],
    variant_contexts=[["", ""], ["", ""], [""], []],
)
LABELS = np.array([1, 0, 1, 0])


def test_gray_box_margins_and_decisions_by_hand():
    model, tok = bigram()
    sr = score_srdetection(
        [build_detector("srdetection_gray:n=1,2")],
        ModelInputs(model, tok, GRAY.texts, settings=EvaluateConfig(), rule_inputs=GRAY, cache=SignalCache()),
    )
    one, two = sr.decisions["srdetection_gray@n=1"], sr.decisions["srdetection_gray@n=2"]
    # margin = min_i log PPL(x_i) - log PPL(x_0) over the first n variants
    np.testing.assert_allclose(one.margin[:3], [0.5 * LN2, -LN2, 0.0], atol=1e-6)
    np.testing.assert_allclose(two.margin[:2], [0.5 * LN2, -LN2], atol=1e-6)
    assert np.isnan(one.margin[3]) and np.isnan(two.margin[2:]).all()
    assert one.leak.tolist() == [True, False, False, False]  # the tie (sample 2) is not a leak
    assert one.decided.tolist() == [True, True, True, False]  # no variants: undecided
    assert two.decided.tolist() == [True, True, False, False]  # one variant < n = 2
    assert list(sr.columns) == ["srdetection_gray@n=1", "srdetection_gray@n=2"]
    np.testing.assert_array_equal(sr.columns["srdetection_gray@n=1"], one.margin)
    raw_original, raw_variants = sr.raw["gray"]
    np.testing.assert_allclose(raw_original, [LN2, 2 * LN2, LN2, 1.5 * LN2], atol=1e-6)
    assert raw_variants.shape == (4, 2) and np.isnan(raw_variants[3]).all()


def test_rule_metrics_by_hand():
    model, tok = bigram()
    d = score_srdetection(
        [build_detector("srdetection_gray:n=1")],
        ModelInputs(model, tok, GRAY.texts, settings=EvaluateConfig(), rule_inputs=GRAY, cache=SignalCache()),
    ).decisions
    m = SrDetectionGray().metrics(d["srdetection_gray@n=1"], LABELS)
    # leak = [1, 0, 0, 0] vs labels [1, 0, 1, 0]: tp 1, fn 1, fp 0, tn 2 (undecided counts as "no leak")
    assert m["accuracy"] == 0.75 and m["precision_member"] == 1.0 and m["recall_member"] == 0.5
    assert m["precision"] == pytest.approx((1 + 2 / 3) / 2) and m["recall"] == pytest.approx(0.75)
    assert m["f1"] == pytest.approx((2 / 3 + 0.8) / 2)
    assert m["n_undecided"] == 1 and m["n_leaks"] == 1 and m["n"] == 4 and m["n_members"] == 2
    assert m["variants_mean"] == pytest.approx((1 + 1 + 1 + 0) / 4)  # at most n = 1 compared
    # margins: members 0.35, 0.0 above non-members -0.69 and undecided (ranked lowest)
    assert m["auroc"] == 1.0
    # Flag rates: members 1 of 2, non-members 0 of 2; null: 1/(1+1) for the decided non-member, 0 for
    # the undecided one.
    assert m["flag_rate_members"] == 0.5 and m["flag_rate_non_members"] == 0.0
    assert m["null_flag_rate"] == pytest.approx(0.25)
    boot = SrDetectionGray().metrics(d["srdetection_gray@n=1"], LABELS, n_bootstrap=50, seed=1)
    assert boot["f1_ci_low"] <= boot["f1"] <= boot["f1_ci_high"]


def test_gray_box_reuses_the_baselines_cache_in_one_engine_call():
    model, tok = bigram()
    cache = SignalCache()
    run_detectors(["ppl"], ModelInputs(model, tok, GRAY.texts, settings=EvaluateConfig(), cache=cache))
    forwards = count_forwards(model)
    sr = score_srdetection(
        [build_detector("srdetection_gray")],
        ModelInputs(model, tok, GRAY.texts, settings=EvaluateConfig(), rule_inputs=GRAY, cache=cache),
    )
    # Every original is a hit (ppl scored them), and so are the variants whose text equals one of them;
    # only "c c" and "a b c a" are new.
    assert sr.info["gray"]["texts"] == 9 and sr.info["gray"]["cached"] == 7
    first = forwards[0]
    assert first > 0
    again = score_srdetection(
        [build_detector("srdetection_gray")],
        ModelInputs(model, tok, GRAY.texts, settings=EvaluateConfig(), rule_inputs=GRAY, cache=cache),
    )
    assert forwards[0] == first, "a second evaluation of the same model does no forward pass"
    assert again.info["gray"]["cached"] == 9


class GreedyBigram:
    """A stub `Generator`: greedy decoding of the bigram model on the words of the prompt."""

    NEXT = {"<bos>": "a", "a": "b", "b": "c", "c": "a"}

    def __init__(self, tok):
        self.tok = tok
        self.calls = 0

    def generate(self, prompts, max_new_tokens=256, stop=(), temperature=0.0, n=1, seed=0):
        self.calls += 1
        vocab = self.tok.get_vocab()
        out = []
        for prompt in prompts:
            word, words = (prompt.split() or ["<bos>"])[-1], []
            for _ in range(max_new_tokens):
                word = self.NEXT[word]
                words.append(word)
            out.append([Completion(" ".join(words), tuple(vocab[w] for w in words), "length")])
        return out


BLACK = SrInputs(
    texts=["a b c a b c", "b b b b", "a b"],
    contexts=["", "", ""],
    variant_texts=[["a b c b b c", "a b c c a b"], ["b b c a"], []],
    variant_contexts=[["", ""], [""], []],
)


def test_black_box_margins_by_hand(tmp_path):
    model, tok = bigram()
    settings = EvaluateConfig(srdetection=SrDetectionConfig(split="text", ngram=2))
    gen = GreedyBigram(tok)
    sr = score_srdetection(
        [build_detector("srdetection_black:n=1,2")],
        ModelInputs(
            model,
            tok,
            BLACK.texts,
            rule_inputs=BLACK,
            settings=settings,
            generator=gen,
            generation_cache=GenerationCache(tmp_path),
        ),
    )
    original, variants = sr.raw["black"]
    # "a b c | a b c": greedy after c is "a b c" -> both bigrams of the truth: NGO 1.
    # "a b c | b b c" and "a b c | c a b": one of two truth bigrams (bc / ab) appears: 0.5.
    # "b b | b b": greedy "c a", truth bigram bb missing: 0.   "b b | c a": exactly "c a": 1.
    # "a | b": one-token truth, N shrinks to 1: "b" is generated: 1.
    np.testing.assert_allclose(original, [1.0, 0.0, 1.0])
    np.testing.assert_allclose(variants[:2], [[0.5, 0.5], [1.0, np.nan]])
    two = sr.decisions["srdetection_black@n=2"]
    assert two.leak.tolist() == [True, False, False] and two.decided.tolist() == [True, False, False]
    np.testing.assert_allclose(sr.decisions["srdetection_black@n=1"].margin[:2], [0.5, -1.0])
    assert sr.info["black"]["generated"] == 6 and gen.calls == 1

    # The same model again, even from a fresh cache object on the same directory: nothing is generated.
    again = score_srdetection(
        [build_detector("srdetection_black")],
        ModelInputs(
            model,
            tok,
            BLACK.texts,
            rule_inputs=BLACK,
            settings=settings,
            generator=gen,
            generation_cache=GenerationCache(tmp_path),
        ),
    )
    assert gen.calls == 1 and again.info["black"]["cached"] == 6
    np.testing.assert_array_equal(again.raw["black"][0], original)


def test_cut_text_on_the_solution_keeps_the_prompt_in_the_prefix():
    _, tok = bigram()
    cut = cut_text(tok, "c c a b c", "c c ", split="solution", prefix_fraction=0.5)
    ids = tok.get_vocab()
    assert cut.prefix == "c c a b " and cut.truth == (ids["c"],)  # solution a b c: cut after round(1.5)=2
    whole = cut_text(tok, "c c a b c", "c c ", split="text", prefix_fraction=0.4)
    assert whole.prefix == "c c " and len(whole.truth) == 3
    assert cut_text(tok, "a b", "a b", split="solution") is None  # no solution: nothing to compare
    assert cut_text(tok, "a", "", split="text") is None  # no prefix: nothing to continue
    capped = cut_text(tok, "a b c a b c", "", split="text", max_new_tokens=2)
    assert len(capped.truth) == 2


def test_leak_rate_and_interval():
    d = Decisions(
        n=3,
        leak=np.array([True, False, True, False, False]),
        decided=np.array([True, True, True, True, False]),
        variants_used=np.array([3, 3, 3, 3, 0]),
        margin=np.array([0.1, -0.1, 0.2, -0.3, np.nan]),
    )
    rate = leak_rate(d.leak, d.decided, n_bootstrap=200, seed=0)
    assert rate["leak_rate"] == 0.5 and rate["n_decided"] == 4 and rate["n_undecided"] == 1
    assert 0.0 <= rate["leak_rate_ci_low"] <= 0.5 <= rate["leak_rate_ci_high"] <= 1.0
    nothing = leak_rate(np.zeros(5, bool), np.zeros(5, bool))
    assert math.isnan(nothing["leak_rate"]) and nothing["n_decided"] == 0


def test_specs_and_recipe_validation():
    assert list(build_detector("srdetection_black:n=1,3").columns()) == [
        "srdetection_black@n=1",
        "srdetection_black@n=3",
    ]
    with pytest.raises(ValueError, match="did you mean 'n'"):
        build_detector("srdetection_gray:nn=3")
    model, tok = bigram()
    with pytest.raises(ValueError, match="is a rule detector"):
        run_detectors(
            ["ppl", "srdetection_gray"],
            ModelInputs(model, tok, ["a"], settings=EvaluateConfig(), cache=SignalCache()),
        )
    with pytest.raises(ValueError, match="needs each sample's variants"):
        score_detectors(
            ["ppl", "srdetection_gray"],
            ModelInputs(model, tok, ["a"], settings=EvaluateConfig(), cache=SignalCache()),
        )
    with pytest.raises(RecipeError, match="n_variants is 10"):
        load_recipe("tiny_cpt", ['evaluate.detectors=["srdetection_gray:n=1,12"]'])
    with pytest.raises(RecipeError, match="prefix_fraction"):
        load_recipe("tiny_cpt", ["evaluate.srdetection.prefix_fraction=1.5"])
    with pytest.raises(RecipeError, match="did you mean 'solution'"):
        load_recipe("tiny_cpt", ["evaluate.srdetection.split=solutions"])
    ok = load_recipe(
        "tiny_cpt", ['evaluate.detectors=[ppl, "srdetection_gray:n=1,5"]', "data.prefilter=true"]
    )
    assert ok.data.prefilter and ok.evaluate.srdetection.ngram == 7


# --------------------------------------------------------------------------- the evaluator


def word_task(task_id: str, prompt: str, solution: str) -> Task:
    return Task(task_id, "words", prompt, solution)


def variant(task: Task, i: int, prompt: str, solution: str) -> Variant:
    renamed = dataclasses.replace(task, task_id=f"{task.task_id}#v{i}", prompt=prompt, solution=solution)
    return Variant(renamed, {}, {}, 0, "vocabulary")


def test_detection_evaluation_writes_scores_and_typed_rows_and_reuses_signals(tmp_path):
    from leaklab.evaluate import Evaluator
    from leaklab.evaluations.base import EvalSet
    from leaklab.rundir import RunDir

    model, tok = bigram()
    tasks = [word_task("t0", "a ", "b c"), word_task("t1", "b ", "b b"), word_task("t2", "a ", "a b b")]
    sets = [
        VariantSet("t0", 2, [variant(tasks[0], 0, "a ", "a b b"), variant(tasks[0], 1, "b ", "b b")]),
        VariantSet("t1", 2, [variant(tasks[1], 0, "a ", "b c"), variant(tasks[1], 1, "c ", "c")]),
        VariantSet("t2", 2, [], reasons=["no renamable identifiers"]),
    ]
    eval_set = EvalSet(
        task_ids=["t0", "t1", "t2"],
        labels=np.array([1, 0, 0]),
        texts=[t.text() for t in tasks],
        prompts=[t.prompt for t in tasks],
        tasks=tasks,
    )
    recipe = load_recipe(
        "tiny_cpt",
        [
            'evaluate.detectors=[ppl, "srdetection_gray:n=1,2"]',
            "evaluate.cv_folds=2",
            "evaluate.n_bootstrap=20",
        ],
    )

    def evaluator(root):
        ev = Evaluator(recipe, RunDir(root), eval_set, signal_cache=cache)
        ev.evaluations[0].variant_sets = sets  # what `prepare` reads or builds
        return ev

    cache = SignalCache()
    rows = evaluator(tmp_path).evaluate(model, tok, step=3, epoch=1.0)
    value = {(r["column"], r["metric"]): r["value"] for r in rows}
    assert value[("srdetection_gray@n=2", "n_undecided")] == 1
    assert value[("srdetection_gray@n=2", "n_leaks")] == 1 and value[("srdetection_gray@n=2", "f1")] == 1.0
    assert ("ppl", "auroc") in value and rows[-1]["metric"] == "done"
    assert sorted(rows[-1]["specs"]) == ["ppl", "srdetection_gray:n=1,2"]
    # Rows carry the family and its parameters, and intervals for baselines and rules alike.
    typed = {(r["detector"], json.dumps(r.get("params"))) for r in rows if r["metric"] == "f1"}
    # The blind baseline (text features only) is reported beside every set of detectors.
    assert typed == {
        ("ppl", "{}"),
        ("srdetection_gray", '{"n": 1}'),
        ("srdetection_gray", '{"n": 2}'),
        # Each rule column's margin scored as ppl is (cross-validated threshold), under its own column.
        ("srdetection_gray_margin", '{"n": 1}'),
        ("srdetection_gray_margin", '{"n": 2}'),
        ("blind", "{}"),
    }
    assert value[("srdetection_gray_margin@n=2", "auroc")] == value[("srdetection_gray@n=2", "auroc")]
    assert ("ppl", "auroc_ci_low") in value and ("srdetection_gray@n=2", "f1_ci_high") in value
    cells = [json.loads(line) for line in RunDir(tmp_path).scores(3, "detection").read_text().splitlines()]
    assert cells[0]["srdetection_gray@n=2"] == pytest.approx(0.5 * LN2, abs=1e-6)
    assert cells[0]["srdetection_gray@n=2:leak"] == 1 and cells[1]["srdetection_gray@n=2:leak"] == 0
    assert cells[2]["srdetection_gray@n=2"] is None and cells[2]["srdetection_gray@n=2:leak"] is None

    # Done: the same step is not evaluated twice in a run directory.
    assert (
        evaluator(tmp_path).pending(3) == []
        and evaluator(tmp_path).evaluate(model, tok, step=3, epoch=1.0) == []
    )
    forwards = count_forwards(model)
    evaluator(tmp_path / "again").evaluate(model, tok, step=3, epoch=1.0)
    assert forwards[0] == 0, "the same checkpoint again: every text (originals and variants) is cached"


def test_prefilter_drops_the_originals_easiest_under_the_base_model_and_counts_them(monkeypatch):
    """SrDetection §3.2 / App. A.2 on the bigram model: t0's original is easier than both its variants
    (dropped), t1's is not (kept), t2 has no variant to compare with (undecided, kept). What it returns,
    less kept_ids, is the manifest's `prefilter` block (leaklab/train.py)."""
    from leaklab.data.prefilter import prefilter_tasks
    from leaklab.perturb import store as variant_store

    model, tok = bigram()
    tasks = [word_task("t0", "a ", "b c"), word_task("t1", "b ", "b b"), word_task("t2", "a ", "a b b")]
    sets = [
        VariantSet("t0", 2, [variant(tasks[0], 0, "a ", "a b b"), variant(tasks[0], 1, "b ", "b b")]),
        VariantSet("t1", 2, [variant(tasks[1], 0, "a ", "b c"), variant(tasks[1], 1, "c ", "c")]),
        VariantSet("t2", 2, [], reasons=["no renamable identifiers"]),
    ]
    monkeypatch.setattr(variant_store, "variant_sets_for", lambda tasks_, cfg, log=print: sets)
    lines = []
    got = prefilter_tasks(model, tok, tasks, load_recipe("tiny_cpt", ["data.prefilter=true"]), lines.append)
    assert (got["n_candidates"], got["n_dropped"], got["n_undecided"]) == (3, 1, 1)
    assert got["dropped_ids"] == ["t0"] and got["kept_ids"] == ["t1", "t2"]
    assert any("pre-filter: dropped 1 of 3 tasks" in line for line in lines)


# --------------------------------------------------------------------------- variant sets, built once


def test_variant_sets_are_built_once_per_benchmark_and_round_trip(tmp_path, monkeypatch):
    from leaklab.data.benchmarks import load_humaneval
    from leaklab.perturb import store as variant_store

    tasks = load_humaneval()[:3]
    cfg = SrDetectionConfig(n_variants=3, verify="none", replace_examples=False)
    built = []
    real = variant_store.build_variant_sets

    def counting(todo, cfg, log=print):
        built.extend(t.task_id for t in todo)
        return real(todo, cfg, log=log)

    monkeypatch.setattr(variant_store, "build_variant_sets", counting)
    first = variant_store.variant_sets_for(tasks[:2], cfg, cache_dir=tmp_path, log=lambda *a: None)
    again = variant_store.variant_sets_for(tasks, cfg, cache_dir=tmp_path, log=lambda *a: None)
    assert built == [tasks[0].task_id, tasks[1].task_id, tasks[2].task_id], "each task built once"
    assert [v.task for v in again[0].variants] == [v.task for v in first[0].variants]
    assert all(v.task.metadata["variant_of"] == tasks[0].task_id for v in again[0].variants)
    assert len(again[2].variants) == 3 and again[2].variants[0].task.tests != ""
    # Other settings are another cache file: nothing is served from the wrong one.
    other = dataclasses.replace(cfg, seed=1)
    assert variant_store.cache_file(tasks, other, tmp_path) != variant_store.cache_file(tasks, cfg, tmp_path)

    # The run's copy and its summary.
    info = variant_store.write_run_variants(tmp_path / "run", again, tasks, min_variants=2)
    assert info["variants"] == 9 and info["tasks_with_no_variant"] == 0 and not info["tests_run"]
    back = variant_store.read_run_variants(tmp_path / "run", tasks)
    assert [v.task for v in back[1].variants] == [v.task for v in again[1].variants]


BROKEN_TESTS = Task(
    "bad/tests",
    "humaneval",
    "def add(a, b):\n",
    "    return a + b\n",
    "add",
    tests="def check(candidate):\n    assert candidate(1, 2) == 4\n",
)
NOT_PYTHON = Task("bad/parse", "humaneval", "def f(x:\n", "    return x\n", "f", tests="def check(c): pass\n")


def test_bad_input_gives_fewer_variants_recorded_and_undecided():
    from leaklab.data.benchmarks import load_humaneval
    from leaklab.perturb import store as variant_store

    good = load_humaneval()[0]
    tasks = [good, BROKEN_TESTS, NOT_PYTHON]
    cfg = SrDetectionConfig(n_variants=3, sandbox_workers=1)
    sets = variant_store.build_variant_sets(tasks, cfg, log=lambda *a: None)
    assert len(sets[0].variants) == 3 and sets[0].tests_run
    assert sets[1].variants == [] and any("tests failed" in r for r in sets[1].reasons)
    assert sets[2].variants == [] and sets[2].reasons
    info = variant_store.summary(sets, min_variants=2)
    assert info["tasks_with_no_variant"] == 2 and info["tasks_undecidable"] == 2
    assert info["fraction_verified"] == pytest.approx(3 / (3 + sets[1].n_candidates))


def test_summary_line_shows_the_rule_f1_at_the_largest_n():
    from leaklab.evaluations.detection import Detection

    def row(detector, params, column, metric, value):
        return {"detector": detector, "params": params, "column": column, "metric": metric, "value": value}

    rows = [
        row("ppl", {}, "ppl", "auroc", 0.61),
        row("srdetection_gray", {"n": 3}, "srdetection_gray@n=3", "f1", 0.5),
        row("srdetection_gray", {"n": 10}, "srdetection_gray@n=10", "f1", 0.7),
        row("srdetection_gray", {"n": 10}, "srdetection_gray@n=10", "auroc", 0.9),
    ]
    line = Detection().summary(rows)
    assert "ppl AUROC 0.610" in line and "srdetection_gray@n=10 F1 0.700" in line
    assert "n=3" not in line and "AUROC 0.900" not in line


# --------------------------------------------------------------------------- end to end (slow)


def _run(args: list[str], cache: str) -> subprocess.CompletedProcess:
    """A leaklab command in a child process (offline, the session's model cache); must succeed."""
    env = {**os.environ, "LEAKLAB_CACHE": cache, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    env.pop("WORLD_SIZE", None)
    out = subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out


@pytest.mark.slow
def test_tiny_run_with_srdetection_prefilter_and_audit(leaklab_cache, tmp_path):
    from conftest import SMALL_RUN, SMALL_TINY
    from leaklab.rundir import RunDir

    detectors = "evaluate.detectors=[ppl,srdetection_gray,srdetection_black]"
    cmd = [
        "leaklab/train.py",
        "recipe=tiny_cpt",
        *SMALL_RUN,
        detectors,
        "data.prefilter=true",
        "evaluate.srdetection.max_new_tokens=32",  # the black box's continuations: short is enough here
    ]
    out = _run([*cmd, f"output_dir={tmp_path / 'runs'}"], leaklab_cache)
    (root,) = (tmp_path / "runs").iterdir()
    run = RunDir(root)
    manifest = json.loads(run.manifest.read_text())
    pre = manifest["prefilter"]
    n = manifest["n_members"] + manifest["n_non_members"]
    assert pre["n_candidates"] == 24 and n == 24 - pre["n_dropped"] == 24 - len(pre["dropped_ids"])
    assert "pre-filter: dropped" in out.stdout
    summary = json.loads((root / "variants_summary.json").read_text())
    assert summary["tasks"] == n and summary["tests_run"] and summary["fraction_verified"] > 0.9

    steps = [0, *(s for s, _ in run.checkpoint_dirs())]
    assert len(steps) == 3
    rows = [r for r in run.results_rows() if r["evaluation"] == "detection"]
    value = {(r["step"], r["column"], r["metric"]): r["value"] for r in rows}
    for step in steps:
        for mode in ("gray", "black"):
            for k in (1, 3, 5, 10):
                column = f"srdetection_{mode}@n={k}"
                assert 0.0 <= value[(step, column, "f1")] <= 1.0
                assert 0.0 <= value[(step, column, "auroc")] <= 1.0
                assert value[(step, column, "n")] == n
                assert 0 <= value[(step, column, "n_undecided")] <= n
        # More variants can only make the gray-box rule stricter: flagged samples never grow with n.
        leaks = [value[(step, f"srdetection_gray@n={k}", "n_leaks")] for k in (3, 5, 10)]
        assert leaks == sorted(leaks, reverse=True)
        cells = [json.loads(x) for x in run.scores(step, "detection").read_text().splitlines()]
        assert len(cells) == n and all(c["srdetection_gray@n=10:leak"] in (0, 1, None) for c in cells)
    assert "srdetection_gray@n=10 F1" in out.stdout

    # `leaklab evaluate` on a checkpoint whose rows were dropped: same numbers, variants not rebuilt.
    last = steps[-1]
    kept = [x for x in run.results.read_text().splitlines(keepends=True) if json.loads(x)["step"] != last]
    run.results.write_text("".join(kept))
    again = _run(["-m", "leaklab.cli", "evaluate", str(root)], leaklab_cache)
    assert "building SrDetection variants" not in again.stdout
    redone = {(r["column"], r["metric"]): r["value"] for r in run.results_rows() if r["step"] == last}
    for mode in ("gray", "black"):
        key = (f"srdetection_{mode}@n=10", "f1")
        assert redone[key] == pytest.approx(value[(last, *key)], abs=1e-9)

    # The audit of the same small model: a leakage rate with its bootstrap interval, and against a clean
    # set (8 other HumanEval tasks) the rule's rate there under the same model, with the exact test.
    from test_dataset_inference import _humaneval_file

    clean = _humaneval_file(tmp_path / "clean.jsonl", 150, 8)
    audit = _run(
        [
            "-m",
            "leaklab.cli",
            "audit",
            "model=builtin:tiny",
            "benchmark=humaneval",
            "detectors=[srdetection_gray]",
            "data.max_samples=16",
            f"output_dir={tmp_path / 'audit'}",
            f"clean={clean}",
            *SMALL_TINY,
        ],
        leaklab_cache,
    )
    assert "leakage rate on humaneval" in audit.stdout
    assert "decided clean tasks (one-sided Fisher exact p = " in audit.stdout
    (audit_root,) = (tmp_path / "audit").iterdir()
    rates = {(r["column"], r["metric"]): r["value"] for r in RunDir(audit_root).results_rows()}
    rate = rates[("srdetection_gray@n=10", "leak_rate")]
    low, high = (
        rates[("srdetection_gray@n=10", "leak_rate_ci_low")],
        rates[("srdetection_gray@n=10", "leak_rate_ci_high")],
    )
    assert 0.0 <= low <= rate <= high <= 1.0
    decided = rates[("srdetection_gray@n=10", "n_decided")]
    assert rates[("srdetection_gray@n=10", "n_leaks")] == pytest.approx(rate * decided)
    assert decided + rates[("srdetection_gray@n=10", "n_undecided")] == 16
    from leaklab.metrics import two_rate_pvalue

    clean_decided = rates[("srdetection_gray@n=10", "clean_n_decided")]
    assert 0 < clean_decided <= 8
    assert rates[("srdetection_gray@n=10", "vs_clean_pvalue")] == pytest.approx(
        two_rate_pvalue(
            int(rates[("srdetection_gray@n=10", "n_leaks")]),
            int(decided),
            int(rates[("srdetection_gray@n=10", "clean_n_leaks")]),
            int(clean_decided),
        )
    )


# --------------------------------------------------------------------------- analysis scripts


def load_script(name: str):
    import importlib.util

    path = REPO / "analysis" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_sr_run(root: Path, ratio: str, strength: float) -> Path:
    """A run directory as the evaluator writes it: ppl and SrDetection rows at epochs 0, 1, 2; the
    original beats its variants more often for members as training goes on (`strength`)."""
    from leaklab.metrics import detection_metrics
    from leaklab.rundir import append_rows

    rng = np.random.default_rng(0)
    labels = np.r_[np.ones(30), np.zeros(30)].astype(int)
    rows = []
    for step, epoch in enumerate((0.0, 1.0, 2.0)):
        base = {"step": step, "epoch": epoch, "evaluation": "detection"}
        ppl = rng.normal(size=60) + strength * epoch * labels
        rows += [
            {**base, "detector": "ppl", "column": "ppl", "metric": k, "value": v}
            for k, v in detection_metrics(ppl, labels).items()
        ]
        original = rng.normal(size=60) - strength * epoch * labels
        variants = rng.normal(size=(60, 10))
        for mode, sign in (("gray", 1), ("black", -1)):  # black box: higher NGO is "easier"
            for n, d in decisions_by_n(sign * original, sign * variants, mode=mode).items():
                metrics = SrDetectionGray().metrics(d, labels)
                column = f"srdetection_{mode}@n={n}"
                rows += [
                    {**base, "detector": column, "column": column, "metric": k, "value": v}
                    for k, v in metrics.items()
                ]
    append_rows(root / "results.jsonl", rows)
    (root / "recipe.yaml").write_text(f"name: t\nmix:\n  ratio: '{ratio}'\n")
    return root


def test_detector_table_shows_srdetection_at_its_largest_n(tmp_path, capsys):
    table = load_script("detector_table")
    run = write_sr_run(tmp_path / "run", "1:5", 2.0)
    assert table.main([str(run), "--oracle"]) == 0
    out = capsys.readouterr().out
    methods = [
        line.split("|")[2].strip() for line in out.splitlines() if line.startswith("| ") and "---" not in line
    ]
    assert "SrDetection gray box (n=10)" in methods and "SrDetection black box (n=10)" in methods
    assert not any("(n=3)" in m for m in methods)
    f1 = table.load_detection(run)[(2.0, "srdetection_gray@n=10")]["f1"]
    assert f"{100 * f1:.2f}" in out  # the rule's own F1, even with --oracle
    assert table.main([str(run), "--all-n"]) == 0
    assert "SrDetection gray box (n=3)" in capsys.readouterr().out


def test_srdetection_tables_by_n_and_epoch(tmp_path, capsys):
    tables = load_script("srdetection_tables")
    run = write_sr_run(tmp_path / "run", "1:5", 2.0)
    assert tables.main([str(run), "--names", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "Table 3 (gray box)" in out and "Table 11 (black box)" in out
    lines = [line for line in out.splitlines() if line.startswith("| tiny") or line.startswith("|  |")]
    assert [line.split("|")[2].strip() for line in lines[:4]] == ["1", "3", "5", "10"]
    f1 = tables.load_detection(run)[(1.0, "srdetection_gray@n=5")]["f1"]
    assert lines[2].split("|")[4].strip() == f"{100 * f1:.2f}"  # row n=5, column epoch 1
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "results.jsonl").write_text("")
    assert tables.main([str(tmp_path / "empty")]) == 1


def test_ratio_figure_reads_each_runs_ratio(tmp_path, capsys):
    figure = load_script("ratio_figure")
    runs = [
        write_sr_run(tmp_path / r.replace(":", "_"), r, s)
        for r, s in (("1:10", 0.5), ("1:1", 3.0), ("1:5", 1.0))
    ]
    out_png = tmp_path / "fig3.png"
    assert figure.main([*map(str, runs), "--epoch", "2", "--out", str(out_png)]) == 0
    out = capsys.readouterr().out
    assert "| Method | 1:1 | 1:5 | 1:10 |" in out  # ordered by the share of web text
    assert out_png.exists() and out_png.stat().st_size > 1000
    f1 = figure.load_detection(runs[1])[(2.0, "srdetection_gray@n=10")]["f1"]
    row = next(line for line in out.splitlines() if line.startswith("| SrDetection gray box"))
    assert row.split("|")[2].strip() == f"{100 * f1:.2f}"
    assert figure.main([*map(str, runs), "--epoch", "7"]) == 2
    assert "no results at epoch 7" in capsys.readouterr().err


def test_audit_reports_null_rates_and_the_calibrated_rule(leaklab_cache, tmp_path):
    """An audit of a model against itself as reference (a model that saw nothing the reference did not):
    every rule row carries its null rate and the chance of its leak count under it; the calibrated rule
    flags nothing (target and reference rank every text alike, so every p-value is 1)."""
    from conftest import SMALL_TINY
    from leaklab.audit import audit_model
    from leaklab.models.load import resolve_model_path
    from leaklab.recipe import load_recipe
    from leaklab.rundir import RunDir

    base = [*SMALL_TINY, "data.max_samples=8", f"output_dir={tmp_path}"]
    path = resolve_model_path(load_recipe("tiny_cpt", base).model, log=lambda *a: None)
    recipe = load_recipe(
        "tiny_cpt",
        [
            *base,
            'evaluate.detectors=["srdetection_gray:n=1,3","srdetection_calibrated:n=1,3"]',
            f"evaluate.reference_model={path}",
            "evaluate.srdetection.n_variants=3",
            "evaluate.srdetection.verify=alpha",
            "evaluate.srdetection.replace_examples=false",
            "tracking.wandb.enabled=false",
        ],
    )
    logged: list[str] = []
    root = audit_model(recipe, log=lambda *a: logged.append(" ".join(map(str, a))))
    rows = {(r["column"], r["metric"]): r["value"] for r in RunDir(root).results_rows()}
    for column in ("srdetection_gray@n=3", "srdetection_calibrated@n=3"):
        assert rows[(column, "n_decided")] == 8
        assert rows[(column, "null_rate")] == pytest.approx(1 / 4)
        assert 0.0 <= rows[(column, "excess_pvalue")] <= 1.0
    assert rows[("srdetection_calibrated@n=3", "n_leaks")] == 0
    assert rows[("srdetection_calibrated@n=3", "pvalue_median")] == 1.0
    assert rows[("srdetection_calibrated@n=3", "excess_pvalue")] == 1.0
    summary = json.loads((Path(root) / "variants_summary.json").read_text())
    assert summary["verified_by"] == ["alpha"] and summary["tests_run"] is False
    text = "\n".join(logged)
    assert "null rate %" in text and "a rate near it is no evidence of leakage" in text
