"""The audit's closing paragraph (leaklab/audit.py `verdict`): what was tested, the evidence with its
error rates, and what the audit does not show."""

from __future__ import annotations

from leaklab.audit import verdict

TESTED = {
    "model": "m",
    "benchmark": "humaneval",
    "n_tasks": 40,
    "detectors": ["ppl", "zlib"],
    "clean": None,
    "n_clean": 0,
}


def _clean_rows(
    p_value: float, aurocs: dict[str, float], false_positives: float = 0.03, shifted: bool = False
):
    rows = [{"column": c, "metric": "auroc_vs_clean", "value": v} for c, v in aurocs.items()]
    rows += [
        {"column": "dataset_inference", "metric": "p_value", "value": p_value},
        {"column": "dataset_inference", "metric": "null_rejection_rate", "value": false_positives},
        {"column": "dataset_inference", "metric": "null_alpha", "value": 0.05},
        {"column": "blind", "metric": "auroc_vs_clean", "value": 0.8 if shifted else 0.5},
        {"column": "blind", "metric": "distribution_shift", "value": 1.0 if shifted else 0.0},
    ]
    return rows


def test_significant_and_more_member_like_is_evidence():
    text = verdict(
        _clean_rows(1e-4, {"ppl": 0.71, "zlib": 0.66}), {**TESTED, "clean": "c.jsonl", "n_clean": 40}
    )
    assert text.startswith("Tested: m on 40 humaneval tasks with ppl, zlib, against the clean set c.jsonl")
    assert "p = 0.0001" in text and "false-positive rate of 0.03" in text
    assert "evidence that the model treats the benchmark as more familiar" in text
    assert "Not shown:" in text


def test_significant_but_less_member_like_is_a_distribution_difference():
    text = verdict(_clean_rows(1e-4, {"ppl": 0.31, "zlib": 0.35}), {**TESTED, "clean": "c", "n_clean": 40})
    assert "a distribution difference between the sets, not evidence of leakage" in text
    assert "evidence that the model" not in text


def test_not_significant_unreliable_and_shifted():
    assert "No evidence at this sample size" in verdict(
        _clean_rows(0.4, {"ppl": 0.55}), {**TESTED, "clean": "c"}
    )
    unreliable = verdict(_clean_rows(1e-3, {"ppl": 0.7}, false_positives=0.3), {**TESTED, "clean": "c"})
    assert "not reliable" in unreliable and "evidence that the model" not in unreliable
    shifted = verdict(_clean_rows(1e-3, {"ppl": 0.7}, shifted=True), {**TESTED, "clean": "c"})
    assert "by their text alone (AUROC 0.800)" in shifted


def test_without_a_clean_set_a_raw_rule_rate_is_uncalibrated():
    rows = [
        {"column": "srdetection_gray:n=10", "metric": "leak_rate", "value": 0.25},
        {"column": "srdetection_gray:n=10", "metric": "n_decided", "value": 100.0},
        {"column": "srdetection_gray:n=10", "metric": "null_rate", "value": 1 / 11},
    ]
    text = verdict(rows, {**TESTED, "detectors": ["srdetection_gray:n=10"]})
    assert "flagged 25.0% of 100 decided tasks against a nominal null of 9.1%. Uncalibrated" in text
    assert "no test of membership was made" in text


def test_the_uncalibrated_caveat_is_said_once_for_every_n():
    rows = [
        {"column": f"srdetection_gray@n={n}", "metric": m, "value": v}
        for n in (1, 3, 5, 10)
        for m, v in (("leak_rate", 0.1 * n / 10 + 0.2), ("n_decided", 100.0), ("null_rate", 1 / (n + 1)))
    ]
    text = verdict(rows, {**TESTED, "detectors": ["srdetection_gray"]})
    assert text.count("which this audit did not measure") == 1, text
    for n in (1, 3, 5, 10):
        assert f"srdetection_gray@n={n} flagged" in text


def test_the_calibrated_rule_is_evidence_with_its_exact_chance():
    rows = [
        {"column": "srdetection_calibrated", "metric": "leak_rate", "value": 0.2},
        {"column": "srdetection_calibrated", "metric": "n_decided", "value": 50.0},
        {"column": "srdetection_calibrated", "metric": "n_leaks", "value": 10.0},
        {"column": "srdetection_calibrated", "metric": "excess_pvalue", "value": 2e-5},
    ]
    text = verdict(rows, {**TESTED, "detectors": ["srdetection_calibrated"]})
    assert "flagged 10 of 50 decided tasks (20.0%; chance of this many with no leakage 2e-05" in text
    assert "no test of membership was made" not in text


def test_with_a_clean_set_a_raw_rule_is_compared_with_the_clean_rate():
    rows = [
        {"column": "srdetection_gray@n=10", "metric": "leak_rate", "value": 0.25},
        {"column": "srdetection_gray@n=10", "metric": "n_decided", "value": 100.0},
        {"column": "srdetection_gray@n=10", "metric": "null_rate", "value": 1 / 11},
        {"column": "srdetection_gray@n=10", "metric": "clean_leak_rate", "value": 0.05},
        {"column": "srdetection_gray@n=10", "metric": "clean_n_decided", "value": 200.0},
        {"column": "srdetection_gray@n=10", "metric": "vs_clean_pvalue", "value": 1e-6},
    ]
    tested = {**TESTED, "detectors": ["srdetection_gray:n=10"], "clean": "c.jsonl", "n_clean": 200}
    text = verdict(rows, tested)
    assert "25.0% of 100 decided benchmark tasks and 5.0% of 200 decided clean tasks" in text
    assert "Fisher exact p = 1e-06): evidence" in text and "nominal null" not in text
    same = [*rows[:-1], {**rows[-1], "value": 0.4}]
    assert "no evidence at this sample size" in verdict(same, tested)


def test_rule_vs_clean_rows_count_decided_samples_only():
    import numpy as np

    from leaklab.audit import rule_vs_clean
    from leaklab.detectors.srdetection import Decisions
    from leaklab.metrics import two_rate_pvalue

    def decisions(leak, decided):
        leak, decided = np.array(leak, bool), np.array(decided, bool)
        return Decisions(1, leak, decided, decided.astype(int), np.where(decided, 0.0, np.nan))

    bench = decisions([1, 1, 1, 0, 0], [1, 1, 1, 1, 0])  # 3 of 4 decided
    clean = decisions([0, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0])  # 1 of 4 decided
    head = {"step": 0, "column": "srdetection_gray@n=1", "metric": "n_decided", "value": 4.0}
    got = {r["metric"]: r["value"] for r in rule_vs_clean(bench, clean, head)}
    assert got["clean_n_decided"] == 4 and got["clean_n_leaks"] == 1 and got["clean_leak_rate"] == 0.25
    assert got["vs_clean_pvalue"] == two_rate_pvalue(3, 4, 1, 4)
    assert all(r["column"] == "srdetection_gray@n=1" for r in rule_vs_clean(bench, clean, head))
