"""The blind baseline: a membership "detector" that never looks at the model.

After Das et al. (2024), "Blind baselines beat membership inference attacks for foundation models", and
Duan et al. (2024): when members and non-members differ in their text (length, dates, topics, style), a
classifier on the text alone separates them, and so does every detector, whether or not the model saw
anything. On a random split of one benchmark (what leaklab's manifest draws) the blind baseline scores
AUROC about 0.5; a higher value says the split itself is shifted and the other detectors' numbers
measure the shift as much as the exposure.

Features of a text (no tokenizer, no model): size (characters, words, lines; log scale), line shape
(mean / longest line, indented share), character classes (digits, upper case, punctuation, white space,
non-ASCII), zlib compression ratio, date-like tokens (years 1900-2099, ISO dates, month names) and
hashed word 1-2-gram and character 3-gram counts. The classifier is a regularised logistic regression.

Scores are out-of-fold: stratified k-fold with the same folds the detection metrics use for their
cross-validated thresholds (`leaklab.metrics.cv_decisions`: k = min(cv_folds, smaller class), shuffled
with the seed), fitted on k-1 folds and applied to the held-out one, so no sample is scored by a
classifier that saw its label. Higher = more member-like, like every detector.
"""

from __future__ import annotations

import math
import re
import zlib

import numpy as np

NAME = "blind"
SHIFT_AUROC = 0.6  # above this the split is flagged as distribution-shifted
HASH_FEATURES = 2**12

_DATE = re.compile(
    r"\b(?:19|20)\d\d(?:[-/.](?:0?[1-9]|1[0-2])(?:[-/.](?:0?[1-9]|[12]\d|3[01]))?)?\b"
    r"|\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?\s+\d{1,2}\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"\w+")


def text_features(text: str) -> list[float]:
    """The dense features of one text (see the module doc), in a fixed order."""
    n = len(text)
    lines = text.splitlines() or [""]
    words = _WORD.findall(text)
    lengths = [len(line) for line in lines]
    packed = len(zlib.compress(text.encode("utf-8"))) if n else 0

    def share(count: int) -> float:
        return count / n if n else 0.0

    return [
        math.log1p(n),
        math.log1p(len(words)),
        math.log1p(len(lines)),
        float(np.mean(lengths)),
        float(max(lengths)),
        sum(line.startswith((" ", "\t")) for line in lines) / len(lines),
        float(np.mean([len(w) for w in words])) if words else 0.0,
        share(sum(ch.isdigit() for ch in text)),
        share(sum(ch.isupper() for ch in text)),
        share(sum(ch.isspace() for ch in text)),
        share(sum(not ch.isalnum() and not ch.isspace() for ch in text)),
        share(sum(ord(ch) > 127 for ch in text)),
        packed / len(text.encode("utf-8")) if n else 0.0,
        float(len(_DATE.findall(text))),
    ]


def _ngram_matrix(texts: list[str]):
    """Sparse hashed counts of word 1-2-grams and character 3-grams, each row scaled to unit length."""
    from scipy.sparse import hstack
    from sklearn.feature_extraction.text import HashingVectorizer

    words = HashingVectorizer(n_features=HASH_FEATURES, ngram_range=(1, 2), alternate_sign=False)
    chars = HashingVectorizer(
        n_features=HASH_FEATURES, analyzer="char", ngram_range=(3, 3), alternate_sign=False
    )
    return hstack([words.transform(texts), chars.transform(texts)]).tocsr()


def blind_scores(texts: list[str], labels, *, folds: int = 5, seed: int = 0) -> np.ndarray:
    """Out-of-fold member probability of every text from a text-only classifier (see the module doc).

    All NaN when a class has fewer than 2 samples (no fold could hold both classes out).
    """
    from scipy.sparse import csr_matrix, hstack
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    y = np.asarray(labels).astype(int).reshape(-1)
    if len(y) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(y)} labels")
    scores = np.full(len(y), np.nan)
    k = min(folds, int(y.sum()), int((1 - y).sum()))
    if k < 2:
        return scores
    dense = np.array([text_features(t) for t in texts], dtype=np.float64)
    grams = _ngram_matrix(texts)
    splitter = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    for fit, held_out in splitter.split(dense, y):
        # Standardise the dense features on the fitted folds only: the held-out fold's statistics are
        # part of what it must not see.
        centre, scale = dense[fit].mean(axis=0), dense[fit].std(axis=0)
        scale[scale == 0] = 1.0

        x_fit, x_out = (
            hstack([csr_matrix((dense[rows] - centre) / scale), grams[rows]]).tocsr()
            for rows in (fit, held_out)
        )
        model = LogisticRegression(C=1.0, max_iter=2000)
        model.fit(x_fit, y[fit])
        scores[held_out] = model.predict_proba(x_out)[:, 1]
    return scores


def shift_warning(auroc: float, where: str) -> str:
    """The warning line when the blind baseline's AUROC exceeds SHIFT_AUROC, else ''."""
    if not (isinstance(auroc, float) and auroc > SHIFT_AUROC):
        return ""
    return (
        f"WARNING: the blind baseline (a text-only classifier that never sees the model) separates {where} "
        f"at AUROC {auroc:.3f} > {SHIFT_AUROC}: the two sets differ in their text (distribution shift), so "
        "detector scores measure that shift as well as training exposure"
    )
