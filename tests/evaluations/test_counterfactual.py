"""Counterfactual memorization: function corpus, prompts, extraction, the criterion, the evaluation's rows."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from leaklab.evaluations.counterfactual import (
    Counterfactual,
    CounterfactualConfig,
    hyclone_scores,
    metric_names,
)
from leaklab.memorization.counterfactual import (
    FunctionFilter,
    build_prompt,
    counterfactually_memorized,
    extract_function,
    extract_functions,
    most_lenient,
    score_unparsed_as_zero,
    table1,
    table2,
)

BODY = "".join(f"    value_{i} = items[{i}] * {i} + offset\n" for i in range(12)) + "    return value_11\n"
SOURCE = (
    "import os\n\nCONSTANT = 3\n\n\n"
    "@decorator\n"
    "def long_one(items,\n             offset=0) -> int:\n"
    '    """Docstring that the prompt leaves out."""\n'
    "    # a comment that belongs to the body\n" + BODY + "\n\n"
    "def short_one(x):\n    return x\n\n\n"
    "class K:\n    def __init__(self):\n" + BODY.replace("    ", "        ") + "\n"
    "    def method(self, items, offset):\n" + BODY.replace("    ", "        ")
)


def test_extract_functions_applies_the_papers_filter_and_splits_the_function():
    samples, skipped = extract_functions(SOURCE, "src")
    assert [s.sample_id for s in samples] == ["src::long_one", "src::K.method"]
    long_one = samples[0]
    assert long_one.signature == "def long_one(items,\n             offset=0) -> int:\n"
    assert long_one.ground_truth.startswith(
        '    """Docstring that the prompt leaves out."""\n    # a comment'
    )
    assert "Docstring" not in long_one.signature
    assert long_one.context.endswith("@decorator\n")
    assert skipped == {"body lines out of range": 1, "excluded name": 1}
    relaxed, _ = extract_functions(SOURCE, "src", FunctionFilter(min_body_lines=1, min_chars=0))
    assert "src::short_one" in [s.sample_id for s in relaxed]
    assert extract_functions("def broken(:\n", "b")[1] == {"source does not parse": 1}


def test_the_ground_truth_is_the_whole_continuation_docstring_included():
    # 000 §3 / App. E.1: the prompt is the signature without its docstring and the ground truth is all
    # that follows it, so a target that copies the function docstring and all reproduces it exactly.
    long_one = extract_functions(SOURCE, "src")[0][0]
    original = SOURCE[SOURCE.index("def long_one") : SOURCE.index("\n\n\ndef short_one")] + "\n"
    assert long_one.function == original
    verbatim_copy = original[len(long_one.signature) :] + "\n\ndef next_function():\n    pass\n"
    assert extract_function(long_one.signature, verbatim_copy).body == long_one.ground_truth
    assert long_one.ground_truth.count("\n") == 15  # docstring, comment, 12 assignments, return


def test_prompt_keeps_the_last_context_tokens_then_the_signature():
    sample = extract_functions(SOURCE, "src")[0][0]
    assert build_prompt(sample, 0, str.split) == sample.signature
    full = build_prompt(sample, 10_000, str.split)
    assert full == sample.context + sample.signature
    # Context words: import os CONSTANT = 3 @decorator; with 3 allowed, whole lines from the end until
    # "CONSTANT = 3" would overflow.
    short = build_prompt(sample, 3, str.split)
    assert short == "\n\n@decorator\n" + sample.signature
    assert len(short) < len(full) and "import os" not in short


def test_extract_function_stops_at_the_dedent_and_trims_to_what_parses():
    sig = "def f(a):\n"
    assert extract_function(sig, "    return a\n\nprint(f(1))\n") == extract_function(sig, "    return a\n")
    assert extract_function(sig, "    b = a\n    return b +\n").body == "    b = a\n"
    assert extract_function(sig, "").failure == "empty generation"
    assert extract_function(sig, "print(1)\n").failure == "no indented body"
    assert extract_function(sig, "    return (\n").failure == "no prefix of the body parses"
    method = extract_function("    def m(self):\n", "        return 1\n    def n(self):\n        pass\n")
    assert method.body == "        return 1\n"


def test_criterion_and_tables_by_hand():
    assert counterfactually_memorized(0.5, 0.8, 0.5) is True
    assert counterfactually_memorized(0.8, 0.8, 0.5) is False  # verbatim: not *functional* memorization
    assert counterfactually_memorized(0.5, 0.8, 0.75) is False  # the reference reproduces it as well
    assert counterfactually_memorized(0.5, math.nan, 0.1) is None
    target = [{"bleu": 0.5, "tsed": 0.9}, {"bleu": 0.9, "tsed": 0.9}, {"bleu": 0.1, "tsed": math.nan}]
    reference = [{"bleu": 0.1, "tsed": 0.3}, {"bleu": 0.2, "tsed": 0.2}, {"bleu": 0.1, "tsed": 0.5}]
    (bleu_row, tsed_row) = table1(target, reference, ["bleu", "tsed"])
    assert bleu_row["target_mean"] == pytest.approx(0.5) and bleu_row["delta"] == pytest.approx(0.5 - 0.4 / 3)
    assert tsed_row["n"] == 2 and tsed_row["delta"] == pytest.approx(0.9 - 0.25)
    assert tsed_row["target_std"] == pytest.approx(0.0)
    counts = table2(target, reference, ["bleu", "tsed"])
    assert counts["counts"] == {"tsed": 1} and counts["unique_over_metrics"] == 1
    assert counts["near_verbatim_bleu"] == 1


def test_exact_matches_are_counted_like_near_verbatim_ones():
    # 000 §4: "8 functions are counterfactually memorized exactly" (the target exact, the reference not)
    target = [
        {"bleu": 1.0, "exact_match": 1.0},
        {"bleu": 1.0, "exact_match": 1.0},
        {"bleu": 0.8, "exact_match": 0.0},
    ]
    reference = [
        {"bleu": 0.2, "exact_match": 0.0},
        {"bleu": 1.0, "exact_match": 1.0},
        {"bleu": 0.1, "exact_match": 0.0},
    ]
    counts = table2(target, reference, ["bleu"])
    assert counts["exact_verbatim"] == 1 and counts["near_verbatim_bleu"] == 2


def test_a_generation_without_a_function_scores_0_on_structure():
    from leaklab.similarity.suite import Pair, score_pairs

    truth = "    total = 0\n    for x in items:\n        total += x\n    return total\n"
    pairs = [
        Pair("    return (\n", truth, prefix="def f(items):\n"),
        Pair(truth, "    return (\n", prefix="def f(items):\n"),
    ]
    scores = score_pairs(pairs, workers=1)
    assert math.isnan(scores[0]["tsed"]) and math.isnan(scores[1]["tsed"])
    score_unparsed_as_zero(scores, [{"body": None}, {"body": None}])
    assert scores[0]["tsed"] == 0.0 and scores[0]["codebleu_equal"] == 0.0 and "tsed" in scores[0]["missing"]
    assert math.isnan(scores[1]["tsed"])  # a ground truth that does not parse stays missing
    assert table1(scores[:1], scores[:1], ["tsed"])[0]["n"] == 1


def test_table2_reports_both_unions_and_the_most_lenient_judge():
    # sample 0 flagged by judge_a and judge_b, sample 1 by judge_b alone, sample 2 by tsed alone
    target = [
        {"bleu": 0.1, "tsed": 0.1, "judge_a": 0.9, "judge_b": 0.9},
        {"bleu": 0.1, "tsed": 0.1, "judge_a": 0.1, "judge_b": 0.9},
        {"bleu": 0.1, "tsed": 0.9, "judge_a": 0.1, "judge_b": 0.1},
    ]
    reference = [{"bleu": 0.1, "tsed": 0.1, "judge_a": 0.1, "judge_b": 0.1}] * 3
    metrics, judges = ["tsed", "judge_a", "judge_b"], ["judge_a", "judge_b"]
    counts = table2(target, reference, metrics)["counts"]
    assert counts == {"tsed": 1, "judge_a": 1, "judge_b": 2}
    assert most_lenient(counts, judges) == "judge_b"
    assert most_lenient(counts, ["judge_a"]) is None  # one judge: nothing to leave out
    both = table2(target, reference, metrics, exclude="judge_b")
    assert both["unique_over_metrics"] == 3  # {0, 1, 2}
    assert both["unique_excluding"] == 2 and both["excluded"] == "judge_b"  # {0 (judge_a), 2 (tsed)}


def test_the_functional_metrics_are_the_papers():
    """000, §3 / Table 2: CodeBLEU (equal, syntax, data flow), TSED, three judges, HyClone stage 1 and
    HyClone's similarity. AST similarity and MRI's S are reported (Table 1) but flag nothing."""
    structural = ["codebleu_equal", "codebleu_syntax", "codebleu_dataflow", "tsed"]
    every, functional = metric_names(CounterfactualConfig())
    assert functional == structural
    assert {"ast_similarity", "mri_similarity", "edit_similarity"} <= set(every)
    cfg = CounterfactualConfig(
        judges=["structural", "rating", "equivalence"],
        judge_backend="openai",
        judge_model="m",
        execution=True,
    )
    every, functional = metric_names(cfg)
    judges = ["judge_structural", "judge_rating", "judge_equivalence"]
    assert functional == [*structural, *judges, "hyclone_stage1", "hyclone"]
    assert every[-1] == "hyclone_executed_only" and "hyclone_executed_only" not in functional
    # execution without a back-end to ask: no stage 1
    assert metric_names(CounterfactualConfig(execution=True))[1] == [*structural, "hyclone"]


def test_a_pair_that_never_ran_is_no_clone():
    """000, §4 and App. C.2: a screened-out or unexecuted pair is not a clone (Table 1 averages HyClone
    over all functions); the executed-only diagnostic leaves it out instead."""
    from leaklab.execution.crossexec import SCREENED_OUT, CrossResult

    ran = CrossResult(0.9, 0.9, 0.9, True, 4, screen="clone")
    screened_out = CrossResult(None, reason=SCREENED_OUT, screen="not a clone")
    no_function = CrossResult(None, reason="no generated function")
    unreadable = CrossResult(0.5, 0.5, 0.5, False, 4, screen="unreadable: no JSON object in the reply")
    got = [hyclone_scores(r, screened=True) for r in (ran, screened_out, no_function, unreadable)]
    assert [g["hyclone"] for g in got] == [0.9, 0.0, 0.0, 0.5]
    assert [g["hyclone_stage1"] for g in got[:3]] == [1.0, 0.0, 0.0] and math.isnan(got[3]["hyclone_stage1"])
    executed_only = [g["hyclone_executed_only"] for g in got]
    assert executed_only[0] == 0.9 and math.isnan(executed_only[1]) and math.isnan(executed_only[2])
    assert "hyclone_stage1" not in hyclone_scores(ran, screened=False)
    # the target's clone whose reference never ran is counterfactually memorized; executed only, it is not
    target, reference = {"bleu": 0.2, **got[0]}, {"bleu": 0.1, **got[1]}
    assert counterfactually_memorized(target["bleu"], target["hyclone"], reference["hyclone"]) is True
    only = "hyclone_executed_only"
    assert counterfactually_memorized(target["bleu"], target[only], reference[only]) is None


def test_config_validation():
    assert CounterfactualConfig().check() == []
    bad = CounterfactualConfig(max_new_tokens=0, tau_func=1.5, max_body_lines=1)
    assert len(bad.check()) == 3


def _context(tasks, labels, **cfg):
    recipe = SimpleNamespace(
        evaluate=SimpleNamespace(counterfactual=CounterfactualConfig(workers=1, **cfg), reference_model=None)
    )
    eval_set = SimpleNamespace(tasks=tasks, labels=np.array(labels))
    return SimpleNamespace(recipe=recipe, eval_set=eval_set, log=lambda *a: None, is_main_process=True)


def _stub_generations(evaluation, ctx, monkeypatch) -> None:
    """The member's target reproduces the body renamed (same structure and behaviour, other text), the
    non-member's target wrote nothing; the reference answers `return 0` to both."""
    renamed = BODY.replace("value_", "v")
    generations = {
        "target": [{"body": renamed, "failure": "", "raw": renamed}, {"body": None, "failure": "empty generation", "raw": ""}],
        "reference": [{"body": "    return 0\n", "failure": "", "raw": ""}] * 2,
    }  # fmt: skip
    monkeypatch.setattr(evaluation, "_functions", lambda ctx, model, tok: generations[model])
    ctx.reference = lambda: ("reference", None)


def test_evaluation_rows_split_members_and_non_members(monkeypatch):
    """The plug-in end to end with generations stubbed: the member is reproduced, the non-member is not."""
    tasks = [
        SimpleNamespace(task_id=f"t{i}", prompt=f"def f{i}(items, offset):\n", solution=BODY, prompt_is_code=True,
                        entry_point=f"f{i}")
        for i in range(2)
    ]  # fmt: skip
    ctx = _context(tasks, [1, 0], min_chars=0)
    evaluation = Counterfactual()
    evaluation.prepare(ctx)
    assert len(evaluation._samples) == 2
    _stub_generations(evaluation, ctx, monkeypatch)
    out = evaluation.evaluate(ctx, "target", None, step=3)
    got = {(r["column"], r["metric"]): r["value"] for r in out.rows}
    assert got[("members", "tsed.memorized")] == 1.0 and got[("non_members", "tsed.memorized")] == 0.0
    assert got[("members", "memorized_any")] == 1.0 and got[("all", "n_extraction_failed_target")] == 1.0
    assert got[("non_members", "n_structure_missing_target")] == 1.0
    # ...and it is in Table 1's mean as a 0, not left out (000 §4 averages over all functions)
    assert got[("non_members", "tsed.target_mean")] == 0.0
    assert got[("members", "tsed.delta")] > 0.5
    assert out.records[0]["memorized_by"] and out.records[1]["target_failure"] == "empty generation"
    assert "flagged by any functional metric: members 1, non-members 0" in evaluation.summary(out.rows)
    # no judges: both of Table 2's unions are the same, nothing is left out
    assert got[("members", "memorized_any_excl_lenient")] == 1.0
    # AST similarity and MRI's S are in Table 1 only
    assert ("members", "mri_similarity.delta") in got and ("members", "mri_similarity.memorized") not in got
    assert ("members", "ast_similarity.memorized") not in got
    tsed_rows = [r for r in out.rows if r["metric"] == "tsed.delta"]
    assert all(r["params"]["grammar"].startswith("tree-sitter-python==") for r in tsed_rows)
    assert evaluation.specs(None)[-1].startswith("tree-sitter-python==")
    # As a membership signal: the member's TSED is defined and high, the non-member's missing -> AUROC 1.
    assert got[("membership", "tsed.auroc_target")] == 1.0 and got[("membership", "tsed.auroc_delta")] == 1.0
    assert got[("membership", "exact_match.auroc_target")] == 0.5  # a tie (both 0) counts one half


def test_analysis_tables_render_members_and_non_members(monkeypatch):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "analysis"))
    from counterfactual_tables import render

    got = {
        ("members", "tsed.target_mean"): 0.9, ("members", "tsed.target_std"): 0.05,
        ("members", "tsed.reference_mean"): 0.4, ("members", "tsed.reference_std"): 0.1,
        ("members", "tsed.delta"): 0.5, ("members", "tsed.memorized"): 3.0, ("members", "n_samples"): 4.0,
        ("non_members", "tsed.delta"): 0.0, ("non_members", "tsed.memorized"): 1.0,
        ("non_members", "n_samples"): 4.0, ("members", "memorized_any"): 3.0,
        ("members", "memorized_any_excl_lenient"): 2.0, ("members", "hyclone.memorized"): 2.0,
        ("members", "hyclone_executed_only.memorized"): 1.0, ("members", "hyclone.n_executed_target"): 1.0,
        ("members", "hyclone.n_executed_reference"): 0.0,
    }  # fmt: skip
    text = render(got, 7, excluded="judge_rating")
    assert "## Step 7" in text
    assert "| tsed | 0.900 ± 0.050 | 0.400 ± 0.100 | +0.500 | - | - | +0.000 |" in text
    assert "| tsed | 3 / 4 (75.0%) | 1 / 4 (25.0%) |" in text
    assert "| unique (any metric) | 3 / 4 (75.0%) | - |" in text
    assert "| unique (excl. the most lenient judge: judge_rating) | 2 / 4 (50.0%) | - |" in text
    # the executed-only diagnostic comes after the unions, marked as such
    lines = text.splitlines()
    diagnostic = next(i for i, line in enumerate(lines) if line.startswith("| hyclone_executed_only"))
    assert diagnostic > next(i for i, line in enumerate(lines) if line.startswith("| unique (any"))
    assert "in no union) | 1 / 4 (25.0%) |" in lines[diagnostic]
    assert "HyClone pairs executed (the rest score 0, not a clone): members: target 1, reference 0" in text


def _records(n: int = 12) -> list[dict]:
    import random

    from leaklab.similarity.suite import METRICS

    rng = random.Random(0)
    return [
        {
            "task_id": f"t{i}",
            "label": i % 2,
            "target": {m: (None if m == "tsed" and i == 0 else rng.random()) for m in METRICS},
            "reference": {m: rng.random() for m in METRICS},
        }
        for i in range(n)
    ]


def test_analysis_plots_write_three_pngs(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "analysis"))
    from counterfactual_tables import plots

    paths = plots(_records(), tmp_path / "figs")
    assert [p.name for p in paths] == [
        "target_vs_reference.png",
        "delta_vs_bleu.png",
        "metric_correlations.png",
    ]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def _judge_answer(prompt: str) -> str:
    """A fake judge: the renamed copy is structurally close, the reference's `return 0` is not; the
    equivalence judge is lenient (0.8 for anything but the reference); the empty generation gets an
    unreadable structural reply."""
    candidate = prompt.split(
        "=====Code 2=====" if "=====Code 2=====" in prompt else "Function B (Generated):"
    )[1]
    if "grammar parser" in prompt:
        if "v0 =" in candidate:
            return "Same flow.\n[[0.900]]"
        return "[[0.050]]" if "return 0" in candidate else "I cannot say."
    return '{"score": 0.1}' if "return 0" in candidate else '{"score": 0.8}'


def test_llm_judges_are_extra_functional_metrics_through_an_endpoint(monkeypatch, tmp_path):
    import test_mri_judge

    from leaklab.similarity.judges import make_backend

    server = test_mri_judge._FakeServer
    server.answer, server.prompts = staticmethod(_judge_answer), []
    httpd = test_mri_judge.ThreadingHTTPServer(("127.0.0.1", 0), server)
    test_mri_judge.threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        tasks = [
            SimpleNamespace(task_id=f"t{i}", prompt=f"def f{i}(items, offset):\n", solution=BODY, prompt_is_code=True,
                            entry_point=f"f{i}")
            for i in range(2)
        ]  # fmt: skip
        judged = dict(
            judges=["structural", "equivalence"], judge_backend="openai", judge_model="j", judge_base_url=url
        )
        assert CounterfactualConfig(**judged).check() == []
        ctx = _context(tasks, [1, 0], min_chars=0, **judged)
        evaluation = Counterfactual()
        evaluation.prepare(ctx)
        _stub_generations(evaluation, ctx, monkeypatch)
        out = evaluation.evaluate(ctx, "target", None, step=3)
        evaluation.evaluate(ctx, "target", None, step=4)
    finally:
        httpd.shutdown()
        httpd.server_close()
    # 2 judges x (2 target + 2 reference) pairs, then only the 2 targets again: the reference is asked once
    assert len(server.prompts) == 2 * 4 + 2 * 2
    got = {(r["column"], r["metric"]): r for r in out.rows}
    value = {k: r["value"] for k, r in got.items()}
    assert value[("members", "judge_structural.target_mean")] == pytest.approx(0.9)
    assert value[("members", "judge_structural.delta")] == pytest.approx(0.85)
    assert value[("non_members", "judge_structural.n_unreadable_target")] == 1.0
    assert value[("members", "judge_structural.memorized")] == 1.0
    assert value[("non_members", "judge_equivalence.memorized")] == 1.0  # the lenient judge flags it ...
    assert value[("non_members", "memorized_any")] == 1.0  # ... in the union over every metric ...
    assert value[("non_members", "memorized_any_excl_lenient")] == 0.0  # ... and is left out of the other
    # the judge left out is read over all samples, so both sides leave out the same one
    for side in ("members", "non_members", "all"):
        assert got[(side, "memorized_any_excl_lenient")]["params"]["excluded"] == "judge_equivalence"
    assert (
        value[("members", "memorized_any")] == 1.0 and value[("members", "memorized_any_excl_lenient")] == 1.0
    )
    line = evaluation.summary(out.rows)
    assert "members 1 (1 without judge_equivalence), non-members 1 (0 without judge_equivalence)" in line
    assert value[("membership", "judge_structural.auroc_target")] == 1.0
    assert out.records[0]["target"]["judge_structural"] == pytest.approx(0.9)
    assert "judge_structural" in out.records[0]["memorized_by"]
    # the back-end the evaluation builds for openai is the HTTP client, with no chat template
    generator, render = make_backend("openai", "j", url)
    assert render("x") == "x" and generator.base_url == url


def test_wandb_gets_the_counterfactual_figures_offline(tmp_path, monkeypatch):
    from test_report import make_run

    from leaklab import tracking
    from leaklab.recipe import load_recipe

    monkeypatch.setenv("WANDB_MODE", "offline")
    run = make_run(tmp_path / "run")
    assert (
        tracking.start(load_recipe("tiny_counterfactual", ["tracking.wandb.mode=offline"]), run) is not None
    )
    try:
        tracking.log_checkpoint("counterfactual", _records(), 3)
    finally:
        tracking.finish()
    (offline,) = (run / "wandb").glob("offline-run-*")
    images = offline / "files" / "media" / "images" / "counterfactual"
    names = sorted(p.name.rsplit("_", 2)[0] for p in images.glob("*.png"))
    assert names == ["delta_vs_bleu", "metric_correlations", "target_vs_reference"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in images.glob("*.png"))
    # the per-function table too: nested scores as columns (a missing TSED in the first row is no error)
    import json

    (table,) = (offline / "files" / "media" / "table" / "counterfactual").glob("samples_*.table.json")
    data = json.loads(table.read_text())
    assert {"target.tsed", "reference.bleu"} <= set(data["columns"]) and len(data["data"]) == 12


def test_hyclone_execution_scores_agreement_on_the_test_inputs():
    from leaklab.execution.crossexec import CrossPair, cross_execute
    from leaklab.execution.sandbox import Sandbox

    ref = "def f(x):\n    return x * 2\n"
    inputs = [[1], [2], [3], ["a"], [None]]  # None: the ground truth crashes, so 4 inputs count
    pairs = [
        CrossPair(ref, "def f(x):\n    return x + x\n", "f", inputs),  # agrees everywhere
        CrossPair(ref, "def f(x):\n    return x * 2 if x != 3 else 0\n", "f", inputs),  # 3 of 4
        CrossPair(ref, "def f(x):\n    raise ValueError\n", "f", inputs),  # crashes: disagrees
        CrossPair(ref, None, "f", inputs),
        CrossPair(ref, ref, "f", []),
        CrossPair("def f(x):\n    raise KeyError\n", ref, "f", inputs),
    ]
    with Sandbox(workers=1, timeout_s=5.0) as sandbox:
        got = cross_execute(pairs, sandbox)
    assert [r.similarity for r in got[:3]] == [1.0, 0.75, 0.0]
    assert [r.clone for r in got[:3]] == [True, False, False] and got[0].n_inputs == 4
    assert got[1].s_a == got[1].s_b == 0.75
    assert [r.reason for r in got[3:]] == [
        "no generated function",
        "no inputs",
        "the ground truth runs on none of the inputs",
    ]


def test_evaluation_with_execution_adds_hyclone(monkeypatch):
    tests = (
        "def check(candidate):\n"
        "    assert candidate([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], 2) == 123\n"
        "    assert candidate([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], 0) == 11\n"
    )
    tasks = [
        SimpleNamespace(task_id=f"t{i}", prompt=f"def f{i}(items, offset):\n", solution=BODY, prompt_is_code=True,
                        entry_point=f"f{i}", test_type="function", tests=tests, test_cases=())
        for i in range(2)
    ]  # fmt: skip
    ctx = _context(tasks, [1, 0], min_chars=0, execution=True)
    evaluation = Counterfactual()
    evaluation.prepare(ctx)
    assert evaluation._inputs[0] == [[list(range(12)), 2], [[1] * 12, 0]]
    _stub_generations(evaluation, ctx, monkeypatch)
    out = evaluation.evaluate(ctx, "target", None, step=3)
    got = {(r["column"], r["metric"]): r for r in out.rows}
    value = {k: r["value"] for k, r in got.items()}
    assert (
        value[("members", "hyclone.target_mean")] == 1.0
        and value[("members", "hyclone.reference_mean")] == 0.0
    )
    assert (
        value[("members", "hyclone.memorized")] == 1.0 and value[("members", "hyclone.clones_target")] == 1.0
    )
    assert value[("non_members", "hyclone.n_executed_target")] == 0.0
    assert got[("non_members", "hyclone.n_executed_target")]["params"]["not_executed"] == {
        "no generated function": 1
    }
    # the 2 test inputs and the mutated copies of them generated by default (hyclone_generated_inputs)
    made = got[("members", "hyclone.generated_inputs_target")]
    assert made["value"] >= 1 and set(made["params"]["by_source"]) == {"mutated"}
    assert 2 < out.records[0]["hyclone_target"]["n_inputs"] <= 2 + made["value"]
    assert out.records[0]["target"]["hyclone"] == 1.0


def test_evaluation_flags_per_dose(monkeypatch):
    """Members of dose 1 (wrote nothing) and dose 8 (reproduced the body renamed), one non-member."""
    tasks = [
        SimpleNamespace(task_id=f"t{i}", prompt=f"def f{i}(items, offset):\n", solution=BODY, prompt_is_code=True,
                        entry_point=f"f{i}")
        for i in range(3)
    ]  # fmt: skip
    ctx = _context(tasks, [1, 1, 0], min_chars=0)
    ctx.eval_set.task_ids, ctx.eval_set.doses = ["t0", "t1", "t2"], np.array([1, 8, 0])
    evaluation = Counterfactual()
    evaluation.prepare(ctx)
    renamed = BODY.replace("value_", "v")
    empty = {"body": None, "failure": "empty generation", "raw": ""}
    generations = {
        "target": [empty, {"body": renamed, "failure": "", "raw": renamed}, empty],
        "reference": [{"body": "    return 0\n", "failure": "", "raw": ""}] * 3,
    }
    monkeypatch.setattr(evaluation, "_functions", lambda ctx, model, tok: generations[model])
    ctx.reference = lambda: ("reference", None)
    out = evaluation.evaluate(ctx, "target", None, step=3)
    flags = {(r["dose"], r["column"], r["metric"]): r["value"] for r in out.rows if "dose" in r}
    assert flags[1, "members", "memorized_any"] == 0.0 and flags[8, "members", "memorized_any"] == 1.0
    assert flags[8, "members", "n_samples"] == 1.0 and flags[8, "membership", "tsed.auroc_target"] == 1.0
    assert {c for _, c, _ in flags} == {"members", "membership"}
    # The all-members rows and the summary line are those of the two members together.
    got = {(r["column"], r["metric"]): r["value"] for r in out.rows if "dose" not in r}
    assert got[("members", "memorized_any")] == 1.0 and got[("members", "n_samples")] == 2.0
    assert "members 1, non-members 0" in evaluation.summary(out.rows)


def test_the_reference_is_the_base_model_at_step_0_and_a_missing_one_is_an_error(monkeypatch):
    """Step 0 without evaluate.reference_model: the checkpoint is the base model, its own reference (the
    reference loader is not asked). Later, a reference that does not load stops the evaluation."""
    tasks = [
        SimpleNamespace(task_id=f"t{i}", prompt=f"def f{i}(items, offset):\n", solution=BODY, prompt_is_code=True,
                        entry_point=f"f{i}")
        for i in range(2)
    ]  # fmt: skip
    ctx = _context(tasks, [1, 0], min_chars=0)
    evaluation = Counterfactual()
    evaluation.prepare(ctx)
    _stub_generations(evaluation, ctx, monkeypatch)
    ctx.reference = lambda: pytest.fail("step 0 is its own reference")
    out = evaluation.evaluate(ctx, "target", None, step=0)
    assert {(r["column"], r["metric"]): r["value"] for r in out.rows}[("all", "tsed.delta")] == 0.0
    fresh = Counterfactual()
    fresh.prepare(ctx)
    _stub_generations(fresh, ctx, monkeypatch)
    ctx.reference = lambda: None
    with pytest.raises(ValueError, match="needs a reference model"):
        fresh.evaluate(ctx, "target", None, step=3)
