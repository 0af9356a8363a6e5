"""Dataset inference (leaklab/dataset_inference.py) and its Welch t-test (leaklab.metrics.welch_t_test)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from leaklab.dataset_inference import dataset_inference, null_rejection_rate
from leaklab.evaluations.detection import dataset_inference_rows
from leaklab.metrics import welch_t_test


def test_welch_by_hand():
    # a = 1, 2, 3, 4: mean 5/2, sample variance 5/3, over n 5/12; b = 0, 1, 1, 2: mean 1, 2/3, 1/6.
    # t = (3/2) / sqrt(5/12 + 1/6) = (3/2) / sqrt(7/12); df = (7/12)^2 / ((5/12)^2/3 + (1/6)^2/3) = 147/29.
    got = welch_t_test([1, 2, 3, 4], [0, 1, 1, 2])
    assert got["t"] == pytest.approx(1.5 / math.sqrt(7 / 12), rel=1e-12)
    assert got["df"] == pytest.approx(147 / 29, rel=1e-12)
    assert got["n_a"] == 4 and got["n_b"] == 4


@pytest.mark.parametrize("seed", range(5))
def test_welch_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(0.3, 1.0, 17 + seed)
    b = rng.normal(0.0, 2.5, 31)
    got = welch_t_test(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False, alternative="greater")
    assert got["t"] == pytest.approx(ref.statistic, rel=1e-10)
    assert got["p_value"] == pytest.approx(ref.pvalue, rel=1e-9)
    assert got["df"] == pytest.approx(ref.df, rel=1e-10)
    # One-sided: the other direction is the complement.
    assert welch_t_test(b, a)["p_value"] == pytest.approx(1 - ref.pvalue, rel=1e-9)


def test_welch_degenerate():
    assert math.isnan(welch_t_test([1.0], [1.0, 2.0])["p_value"])
    assert math.isnan(welch_t_test([1.0, np.nan], [1.0, 2.0])["p_value"])  # NaN dropped: one value left
    assert welch_t_test([2.0, 2.0], [1.0, 1.0])["p_value"] == 0.0
    assert welch_t_test([1.0, 1.0], [2.0, 2.0])["p_value"] == 1.0
    assert math.isnan(welch_t_test([1.0, 1.0], [1.0, 1.0])["p_value"])


def _sets(rng, n_s, n_c, shift, d=6):
    suspect = rng.standard_t(3, size=(n_s, d))
    clean = rng.standard_t(3, size=(n_c, d))
    suspect[:, 0] += shift
    return suspect, clean


def test_rejects_a_shifted_set_in_either_direction():
    rng = np.random.default_rng(0)
    for shift in (2.0, -2.0):
        suspect, clean = _sets(rng, 50, 100, shift)
        result = dataset_inference(suspect, clean, features=[f"c{i}" for i in range(6)], seed=1)
        assert result.p_value < 1e-3
        assert result.n_suspect == 25 and result.n_clean == 50
        # The learned weight of the informative feature carries the shift's sign.
        assert np.sign(result.weights["c0"]) == np.sign(shift)


def test_nan_and_constant_features_are_handled():
    rng = np.random.default_rng(1)
    suspect, clean = _sets(rng, 40, 40, 1.5, d=3)
    suspect[::3, 1] = np.nan
    suspect[:, 2] = clean[:, 2] = 7.0  # constant: dropped
    result = dataset_inference(suspect, clean, features=["a", "b", "c"], seed=0)
    assert result.p_value < 0.01
    assert set(result.weights) == {"a", "b"}
    everything_constant = dataset_inference(np.ones((8, 2)), np.ones((8, 2)))
    assert math.isnan(everything_constant.p_value)


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="at least 4 samples per set; the suspect set has 3"):
        dataset_inference(np.zeros((3, 2)), np.zeros((10, 2)))
    with pytest.raises(ValueError, match="suspect set has 2 score features, clean set 3"):
        dataset_inference(np.zeros((10, 2)), np.zeros((10, 3)))


def _fit_and_test_on_everything(suspect, clean):
    """A biased dataset inference: the combination is learned on the very samples it is tested on."""
    from sklearn.linear_model import LogisticRegression

    x = np.vstack([suspect, clean])
    y = np.r_[np.ones(len(suspect)), np.zeros(len(clean))]
    combined = LogisticRegression(max_iter=1000).fit(x, y).decision_function(x)
    return welch_t_test(combined[: len(suspect)], combined[len(suspect) :])["p_value"]


def test_false_positive_rate_on_null_data():
    # Suspect and clean drawn alike (heavy tails, many weak features): the test must reject about alpha of
    # the time. Binomial sd of the rate over 300 tests is 0.013, so 0.09 is three of them above 0.05.
    rng = np.random.default_rng(2)
    p_values, biased = [], []
    for trial in range(300):
        suspect, clean = _sets(rng, 30, 60, 0.0, d=8)
        p_values.append(dataset_inference(suspect, clean, seed=trial).p_value)
        if trial < 50:
            biased.append(_fit_and_test_on_everything(suspect, clean))
    rate = np.mean(np.asarray(p_values) < 0.05)
    assert 0.01 <= rate <= 0.09, rate
    # The check has teeth: testing on the samples the weights were fitted on rejects far too often.
    assert np.mean(np.asarray(biased) < 0.05) > 0.3


def test_null_rejection_rate():
    rng = np.random.default_rng(3)
    clean = rng.normal(size=(100, 5))
    got = null_rejection_rate(clean, n_halvings=100, alpha=0.05, seed=0)
    assert got["null_halvings"] == 100 and got["null_alpha"] == 0.05
    assert got["null_rejection_rate"] <= 0.1
    assert math.isnan(null_rejection_rate(clean[:7])["null_rejection_rate"])


def test_detection_rows():
    rng = np.random.default_rng(4)
    labels = np.r_[np.ones(30, int), np.zeros(60, int)]
    columns = {"ppl": rng.normal(size=90) + 2 * labels, "zlib": rng.normal(size=90)}
    rows = {r["metric"]: r for r in dataset_inference_rows(columns, labels, seed=0)}
    assert rows["p_value"]["value"] < 1e-3
    assert rows["p_value"]["column"] == "dataset_inference"
    assert rows["p_value"]["params"] == {"features": ["ppl", "zlib"]}
    assert rows["n_suspect_test"]["value"] == 15 and rows["n_clean_test"]["value"] == 30
    assert 0.0 <= rows["null_rejection_rate"]["value"] <= 0.15
    assert dataset_inference_rows(columns, np.r_[np.ones(3, int), np.zeros(87, int)]) == []


def test_report_shows_intervals_p_values_and_the_shift_warning(tmp_path):
    import json

    from leaklab.report import build_report

    rows = []
    for step, epoch, level in ((0, 0.0, 0.52), (8, 1.0, 0.81)):
        head = {"step": step, "epoch": epoch, "evaluation": "detection", "params": {}}
        for column, value in (("ppl", level), ("blind", 0.71)):
            for metric in ("auroc", "f1", "tpr@1%fpr"):
                rows += [
                    {**head, "detector": column, "column": column, "metric": metric, "value": value},
                    {**head, "detector": column, "column": column, "metric": f"{metric}_ci_low", "value": value - 0.125},
                    {**head, "detector": column, "column": column, "metric": f"{metric}_ci_high", "value": value + 0.125},
                ]  # fmt: skip
        rows += [
            {**head, "detector": "blind", "column": "blind", "metric": "distribution_shift", "value": 1.0},
            {**head, "detector": "blind", "column": "blind", "metric": "shift_p_value", "value": 0.003},
        ]
        di = {"p_value": 0.0123 if step else 0.4, "t": 2.5, "n_suspect_test": 25.0, "n_clean_test": 57.0,
              "null_rejection_rate": 0.04, "null_halvings": 100.0, "null_alpha": 0.05}  # fmt: skip
        rows += [
            {**head, "detector": "dataset_inference", "column": "dataset_inference", "metric": k, "value": v}
            for k, v in di.items()
        ]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    index = build_report(tmp_path)
    markdown = (tmp_path / "report" / "report.md").read_text()
    page = index.read_text()
    for text in (markdown, page):
        assert "distribution shift" in text and "AUROC 0.710, permutation p = 0.003" in text
        assert "0.0123" in text and "0.04 at α = 0.05 over 100 halvings" in text
    assert "0.810 [0.69, 0.94]" in markdown  # the auroc table's intervals
    assert "Last checkpoint (step 8, epoch 1) with bootstrap 95% intervals" in page
    assert "0.810 [0.69, 0.94]" in page


def _humaneval_file(path, first: int, count: int):
    import json

    from leaklab.data.benchmarks import humaneval_path
    from leaklab.data.benchmarks import load_benchmark as load

    rows = [json.loads(line) for line in _read_lines(humaneval_path())]
    ids = {t.task_id for t in load("humaneval")[first : first + count]}
    path.write_text("".join(json.dumps(r) + "\n" for r in rows if r["task_id"] in ids))
    return path


def _read_lines(source):
    import gzip
    from pathlib import Path

    source = Path(source)
    files = [source] if source.is_file() else sorted(source.glob("*.jsonl*"))
    for file in files:
        opener = gzip.open if file.suffix == ".gz" else open
        with opener(file, "rt") as handle:
            yield from (line for line in handle if line.strip())


@pytest.mark.slow
def test_audit_against_a_clean_set(leaklab_cache, tmp_path, capsys):
    import json

    from conftest import SMALL_TINY
    from leaklab.cli import main

    clean = _humaneval_file(tmp_path / "clean.jsonl", 100, 12)
    common = ["audit", "model=builtin:tiny", "benchmark=humaneval", "detectors=[ppl,zlib]", "data.max_samples=12",
              f"output_dir={tmp_path / 'runs'}", "evaluate.n_bootstrap=50", *SMALL_TINY]  # fmt: skip
    assert main([*common, f"clean={clean}"]) == 0
    out = capsys.readouterr().out
    assert "against the clean set" in out and "blind baseline (text only)" in out
    assert "dataset inference (is humaneval in training?): p = " in out
    (audit_dir,) = (tmp_path / "runs").iterdir()
    rows = [json.loads(line) for line in (audit_dir / "results.jsonl").read_text().splitlines()]
    got = {(r["column"], r["metric"]): r["value"] for r in rows if r.get("clean_set") == str(clean)}
    for column in ("ppl", "zlib", "blind"):
        assert 0.0 <= got[(column, "auroc_vs_clean")] <= 1.0
        assert got[(column, "auroc_vs_clean_ci_low")] <= got[(column, "auroc_vs_clean_ci_high")]
    assert 0.0 <= got[("dataset_inference", "p_value")] <= 1.0
    assert (
        got[("dataset_inference", "n_suspect_test")] == 6 and got[("dataset_inference", "null_halvings")] > 0
    )
    assert (audit_dir / "scores" / "step-0" / "audit_clean.jsonl").exists()
    verdict = (audit_dir / "verdict.md").read_text()
    assert verdict.startswith("Tested: ") and "12 humaneval tasks" in verdict and "Not shown:" in verdict
    assert "Dataset inference" in verdict and "Verdict (" in out

    # Another clean set gets its own folder, with its own rows only; the same audit again replaces its
    # rows rather than adding to them.
    other = _humaneval_file(tmp_path / "other.jsonl", 130, 12)
    assert main([*common, f"clean={other}"]) == 0
    assert main([*common, f"clean={other}"]) == 0
    folders = sorted((tmp_path / "runs").iterdir())
    assert len(folders) == 2 and any("-vs-other-" in f.name for f in folders), folders
    for folder, expected in (
        (audit_dir, str(clean)),
        (next(f for f in folders if f != audit_dir), str(other)),
    ):
        rows = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
        assert {r.get("clean_set") for r in rows} == {None, expected}
        keys = [(r["column"], r["metric"], r.get("clean_set")) for r in rows]
        assert len(keys) == len(set(keys))

    # The benchmark itself as its "clean" set: a clear error before any model loads.
    overlapping = _humaneval_file(tmp_path / "same.jsonl", 0, 12)
    assert main([*common, f"clean={overlapping}"]) == 2
    assert "12 of its 12 tasks are also in the audited benchmark" in capsys.readouterr().err


@pytest.mark.slow
def test_an_audit_runs_the_sharded_test_on_the_benchmark_and_its_clean_set(leaklab_cache, tmp_path, capsys):
    """`dataset_tests=[sharded_likelihood]` in an audit: the benchmark's records in their own order and the
    clean set's in theirs, each set's p-values with the false-positive rate measured on shuffled orders,
    and one verdict sentence naming both."""
    import json

    from conftest import SMALL_TINY
    from leaklab.cli import main

    clean = _humaneval_file(tmp_path / "clean.jsonl", 100, 16)
    args = ["audit", "model=builtin:tiny", "benchmark=humaneval", "detectors=[ppl]", "data.max_samples=16",
            "dataset_tests=[sharded_likelihood]", f"output_dir={tmp_path / 'runs'}", "evaluate.n_bootstrap=20",
            *SMALL_TINY, f"clean={clean}"]  # fmt: skip
    assert main(args) == 0
    (audit_dir,) = (tmp_path / "runs").iterdir()
    rows = [json.loads(line) for line in (audit_dir / "results.jsonl").read_text().splitlines()]
    got = {(r["params"]["set"], r["metric"]): r["value"] for r in rows if r["column"] == "sharded_likelihood"}
    for side in ("members", "non_members"):  # the benchmark, the clean set
        assert 0.0 <= got[(side, "p_value")] <= 1.0 and 0.0 < got[(side, "p_value_exact")] <= 1.0
        assert got[(side, "shards")] == 4 and 0.0 <= got[(side, "null_rejection_rate")] <= 1.0
    verdict = (audit_dir / "verdict.md").read_text()
    assert (
        "Sharded likelihood (" in verdict
        and f"p = {got[('members', 'p_value')]:.3g} over 4 shards" in verdict
    )
    assert f"the clean set in its own order: p = {got[('non_members', 'p_value')]:.3g}" in verdict
