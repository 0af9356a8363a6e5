"""The non-LLM similarity suite over many (candidate, reference) pairs, batched over a process pool:
each unique snippet becomes one `Document` once, then pairs are compared from documents. Structural
metrics that a side cannot parse for are NaN with the reason in `missing`; non-UTF-8 bytes are replaced
and flag the pair `lossy`. A pair's `prefix` (the prompted signature) is prepended for the structural
metrics only. See docs/perturbations.md#the-similarity-suite.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from leaklab.similarity import structure as st
from leaklab.similarity import text as tx

TEXT_METRICS = ("exact_match", "bleu", "edit_similarity", "lcs", "ngram_overlap_7", "jaccard", "minhash")
STRUCTURE_METRICS = (
    "codebleu_equal",
    "codebleu_syntax",
    "codebleu_dataflow",
    "tsed",
    "ast_similarity",
    "mri_similarity",
)
METRICS = TEXT_METRICS + STRUCTURE_METRICS
# The structural metrics the counterfactual paper counts as functional (000, §3; its Table 2). AST
# similarity and MRI's S also need both sides to parse and are reported beside them (Table 1, the
# membership AUROCs), but flag nothing: MRI's S is half edit similarity, a text metric.
FUNCTIONAL_METRICS = ("codebleu_equal", "codebleu_syntax", "codebleu_dataflow", "tsed")
EDIT_SIMILARITY = "1 - Levenshtein / |ground truth|, floored at 0"  # 000 §3 (MRI's uses the longer string)


@dataclass(frozen=True)
class Pair:
    candidate: str | bytes
    reference: str | bytes
    prefix: str = ""


@dataclass
class Document:
    text: str
    lossy: bool
    tokens: list[str]
    grams: list  # 1..4-gram Counters of the tokens (BLEU), counted once per snippet
    minhash: np.ndarray
    structure: st.Structure


def document(value: str | bytes, prefix: str = "") -> Document:
    """Everything the suite needs from one snippet, computed once."""
    text, lossy = tx.as_text(value)
    tokens = tx.code_tokens(text)
    return Document(
        text,
        lossy,
        tokens,
        tx.ngram_counts(tokens),
        tx.minhash_signature(tokens),
        st.structure(prefix + text),
    )


def compare(reference: Document, candidate: Document) -> dict:
    """All metrics of one pair: {metric: float (NaN when missing)}, `missing` {metric: reason}, `lossy`."""
    row: dict = {
        "exact_match": tx.exact_match(candidate.text, reference.text),
        "bleu": tx.bleu_from_counts(candidate.grams, reference.grams),
        # normalised by the ground truth's length (000, §3), not the longer string (MRI's)
        "edit_similarity": tx.edit_similarity_truth_len(candidate.text, reference.text),
        "lcs": tx.lcs_similarity(candidate.text, reference.text),
        "ngram_overlap_7": tx.ngram_overlap(candidate.tokens, reference.tokens),
        "jaccard": tx.jaccard(candidate.tokens, reference.tokens),
        "minhash": tx.minhash_similarity(candidate.minhash, reference.minhash),
    }
    missing: dict[str, str] = {}
    if math.isnan(row["ngram_overlap_7"]):
        missing["ngram_overlap_7"] = "empty reference"
    sides = (("reference", reference), ("candidate", candidate))
    errors = [f"{side}: {doc.structure.error}" for side, doc in sides if doc.structure.error]
    if errors:
        for metric in STRUCTURE_METRICS:
            row[metric] = math.nan
            missing[metric] = "; ".join(errors)
    else:
        ref, cand = reference.structure, candidate.structure
        parts = st.codebleu_parts(ref, cand)
        row["codebleu_equal"] = parts["equal"]
        row["codebleu_syntax"] = parts["syntax"]
        row["codebleu_dataflow"] = math.nan if parts["dataflow"] is None else parts["dataflow"]
        if parts["dataflow"] is None:
            missing["codebleu_dataflow"] = "reference has no data-flow edge"
        row["tsed"] = st.tsed(ref, cand)
        row["ast_similarity"] = st.ast_similarity(ref, cand)
        row["mri_similarity"] = st.mri_similarity(ref, cand)
    row["missing"] = missing
    row["lossy"] = reference.lossy or candidate.lossy
    return row


def default_workers() -> int:
    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1, 8))


def score_pairs(pairs: Sequence[Pair], workers: int | None = None, chunksize: int = 8) -> list[dict]:
    """Score every pair (reference = ground truth, candidate = generation); rows in input order. `workers`
    spawned processes (default: the usable cores, at most 8; 1 = in this process)."""
    keys: dict[tuple[str | bytes, str], int] = {}
    for pair in pairs:
        for value in (pair.reference, pair.candidate):
            keys.setdefault((value, pair.prefix), len(keys))
    texts, prefixes = [value for value, _ in keys], [prefix for _, prefix in keys]
    references = [keys[(pair.reference, pair.prefix)] for pair in pairs]
    candidates = [keys[(pair.candidate, pair.prefix)] for pair in pairs]
    workers = default_workers() if workers is None else workers
    if workers <= 1 or len(pairs) < 2:
        docs = list(map(document, texts, prefixes))
        return [compare(docs[r], docs[c]) for r, c in zip(references, candidates)]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        docs = list(pool.map(document, texts, prefixes, chunksize=chunksize))
        pairs_of_docs = ([docs[r] for r in references], [docs[c] for c in candidates])
        return list(pool.map(compare, *pairs_of_docs, chunksize=chunksize))


def provenance() -> dict:
    """What the scores depend on, recorded next to them."""
    return {
        "grammar": st.grammar_versions(),
        "tsed_costs": {"delete": st.TSED_COSTS[0], "insert": st.TSED_COSTS[1], "rename": st.TSED_COSTS[2]},
        "bleu": {"tokens": "code tokens (\\w+ | one non-space char)", "smoothing": "method1, epsilon 0.1"},
        "edit_similarity": EDIT_SIMILARITY,
        "minhash_permutations": tx.MINHASH_PERMUTATIONS,
    }
