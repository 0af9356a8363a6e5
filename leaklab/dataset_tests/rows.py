"""The dataset-level tests as result rows, beside dataset inference's (`evaluations.detection`): one row
per metric, for a set with known labels (a run's members and non-members, an mia set) or a suspect set
against a clean one (an audit). Columns sharded_likelihood, codec_test and pacost_test, each p-value
beside its measured false-positive rate (docs/detectors.md#dataset-level-tests-one-p-value-for-the-set-each-with-its-measured-false-positive-rate);
`params.set` names the set a row is about; a test too small to run on a set is left out.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from leaklab.data.forms import jsonl_lines
from leaklab.dataset_tests import codec, pacost, sharded_likelihood
from leaklab.rows import metric_rows


def _rows(name: str, params: dict[str, Any], metrics: dict[str, float]) -> list[dict[str, Any]]:
    return metric_rows(metrics, name, detector=name, params=params)


def sharded_likelihood_rows(
    model, tokenizer, texts, labels, *, shards: int = 10, permutations: int = 20, seed: int = 0, **engine
) -> list[dict[str, Any]]:
    """The sharded test of the members and of the non-members, each set in its given (canonical) order.
    engine: the signal engine's settings, accelerator, cache, and the examples' `separator`."""
    y = np.asarray(labels).astype(bool)
    out = []
    for name, keep in (("members", y), ("non_members", ~y)):
        examples = [t for t, k in zip(texts, keep) if k]
        if len(examples) < 4:
            continue
        metrics = sharded_likelihood.run_sharded_test(
            model, tokenizer, examples, shards=shards, permutations=permutations, seed=seed, **engine
        )
        params = {"set": name, "shards": shards, "permutations": permutations}
        out += _rows("sharded_likelihood", params, metrics)
    return out


SHARDS = 10  # the sharded likelihood test's shards at most (Oren et al.'s default)


def file_order_rows(model, tokenizer, tasks, labels, *, seed: int = 0, **engine) -> list[dict[str, Any]]:
    """The sharded test on the JSONL records of the members' tasks (labels 1) and of the non-members'
    (labels 0), each set in the order given, one record a line: the lines, order and separator of the
    file `inject.form: file` trains on (leaklab/data/forms.py), which a scraped copy of a benchmark has.
    The paper's 10 shards where each holds at least 4 examples of the smaller set, fewer on a small set
    (a shard of one example has nothing to permute), never under 2 (the t-test needs two)."""
    labels = np.asarray(labels).astype(bool)
    smaller = int(min(labels.sum(), (~labels).sum())) if (~labels).any() else int(labels.sum())
    shards = max(2, min(SHARDS, smaller // 4))
    return sharded_likelihood_rows(
        model, tokenizer, jsonl_lines(tasks), labels, shards=shards, seed=seed, separator="\n", **engine
    )


def codec_column_rows(drop, labels) -> list[dict[str, Any]]:
    """CoDeC from the `codec_drop` score column: the members' share of drops against the non-members'."""
    y = np.asarray(labels).astype(bool)
    drop = np.asarray(drop, dtype=np.float64)
    zero = np.zeros_like(drop)  # codec_score compares NLLs: a drop is drop > 0
    members, clean = codec.codec_score(zero[y], drop[y]), codec.codec_score(zero[~y], drop[~y])
    if members[2] < 2 or clean[2] < 2:
        return []
    return _rows("codec_test", {"set": "members_vs_non_members"}, codec.codec_vs_clean(members, clean))


def pacost_rows(gaps, labels, *, seed: int = 0) -> list[dict[str, Any]]:
    """PaCoST from the `pacost_gap` score column: the paired test on the members, its null rate measured
    on halves of the non-members."""
    y = np.asarray(labels).astype(bool)
    gaps = np.asarray(gaps, dtype=np.float64)
    metrics = pacost.gap_test(gaps[y])
    metrics.update(pacost.gap_null_rate(gaps[~y], seed=seed))
    return _rows("pacost_test", {"set": "members", "null": "non_members"}, metrics)


def dataset_test_rows(columns: dict[str, Any], labels, *, seed: int = 0) -> list[dict[str, Any]]:
    """The set-level rows of every dataset-level test whose score column was computed (codec_drop,
    pacost_gap): labels 1 = the suspect set (members), 0 = the clean set (non-members)."""
    out = []
    if "codec_drop" in columns:
        out += codec_column_rows(columns["codec_drop"], labels)
    if "pacost_gap" in columns:
        out += pacost_rows(columns["pacost_gap"], labels, seed=seed)
    return out


def dataset_test_rows_vs_clean(suspect: dict[str, Any], clean: dict[str, Any], *, seed: int = 0):
    """`dataset_test_rows` of an audited benchmark (suspect columns) against its clean set."""
    shared = [c for c in ("codec_drop", "pacost_gap") if c in suspect and c in clean]
    columns = {
        c: np.r_[np.asarray(suspect[c], dtype=float), np.asarray(clean[c], dtype=float)] for c in shared
    }
    if not columns:
        return []
    n_s = len(next(iter(suspect.values())))
    n_c = len(next(iter(clean.values())))
    return dataset_test_rows(columns, np.r_[np.ones(n_s), np.zeros(n_c)], seed=seed)


def verdict_sentences(value: dict[tuple[str, str], float | None]) -> list[str]:
    """One sentence per dataset-level test among the rows (value: (column, metric) -> value), each
    p-value with its measured false-positive baseline."""
    out = []
    p = value.get(("codec_test", "p_value"))
    if p is not None:
        out.append(
            f"CoDeC (does context from the benchmark lower its likelihood?): {value[('codec_test', 'codec')]:.2f} of "
            f"the benchmark's samples drop against {value[('codec_test', 'codec_clean')]:.2f} of the clean set's "
            f"(its false-positive baseline), one-sided exact p = {p:.3g}."
        )
    p = value.get(("pacost_test", "p_value"))
    if p is not None:
        rate = value.get(("pacost_test", "null_rejection_rate"))
        fp = "not measured" if rate is None else f"{rate:.2f}"
        out.append(
            f"PaCoST (more confident on the originals than on their verified variants?): p = {p:.3g}, with a "
            f"false-positive rate of {fp} at α = {value.get(('pacost_test', 'null_alpha')) or 0.05:g} on halves of "
            "the clean set."
        )
    return out


def sharded_verdict(rows: list[dict[str, Any]]) -> list[str]:
    """The sentence on the sharded likelihood test among an audit's rows (`file_order_rows`: set
    "members" the audited benchmark, "non_members" the clean set), with its measured false-positive rate
    on shuffled orders and, with a clean set, the same test on the clean set in its own order."""
    got = {
        (r.get("params", {}).get("set"), r["metric"]): r.get("value")
        for r in rows
        if r.get("column") == "sharded_likelihood"
    }
    p = got.get(("members", "p_value"))
    if p is None:
        return []
    rate = got.get(("members", "null_rejection_rate"))
    fp = "not measured" if rate is None else f"{rate:.2f}"
    text = (
        f"Sharded likelihood (is the benchmark's own file order likelier than shuffles of it, as for a model "
        f"trained on the file?): p = {p:.3g} over {got.get(('members', 'shards')) or 0:.0f} shards (exact "
        f"permutation p = {got.get(('members', 'p_value_exact')) or float('nan'):.3g}), with a false-positive "
        f"rate of {fp} at α = {got.get(('members', 'null_alpha')) or 0.05:g} on shuffled orders"
    )
    clean_p = got.get(("non_members", "p_value"))
    if clean_p is None:
        return [text + "."]
    return [
        text + f"; the clean set in its own order: p = {clean_p:.3g} (a low p there means the order of "
        "examples carries meaning, and the test cannot tell training from it)."
    ]
