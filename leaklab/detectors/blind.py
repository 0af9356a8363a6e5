"""The blind baseline (Das et al., 2024, "Blind baselines beat membership inference attacks for
foundation models"; Duan et al., 2024): a regularised logistic regression on the text alone, never the
model, scored out-of-fold on the CV thresholds' folds (`leaklab.metrics.cv_decisions`); `shift_pvalue`
tests whether it separates the split. Its features, why a permutation test and its measured false-alarm
rate: docs/detectors.md#blind-baseline-and-dataset-inference-rigour-checks-in-every-detection-evaluation.
"""

from __future__ import annotations

import math
import re
import zlib

import numpy as np

from leaklab.metrics import auroc

NAME = "blind"
SHIFT_ALPHA = 0.05  # level of the shift test: its false-alarm rate on a split with no shift
# The permutation test's budget: 49 refits give p down to 0.02; stopping at the 3rd permuted AUROC at or
# above the observed one keeps p >= 3/49 > SHIFT_ALPHA, so stopping early never changes the decision.
SHIFT_PERMUTATIONS, SHIFT_STOP = 49, 3
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


def blind_features(texts: list[str]):
    """(dense features, hashed counts of word 1-2-grams and character 3-grams, each row scaled to unit
    length) of the texts: computed once, refitted on many labellings."""
    from scipy.sparse import hstack
    from sklearn.feature_extraction.text import HashingVectorizer

    dense = np.array([text_features(t) for t in texts], dtype=np.float64).reshape(len(texts), -1)
    words = HashingVectorizer(n_features=HASH_FEATURES, ngram_range=(1, 2), alternate_sign=False)
    chars = HashingVectorizer(
        n_features=HASH_FEATURES, analyzer="char", ngram_range=(3, 3), alternate_sign=False
    )
    return dense, hstack([words.transform(texts), chars.transform(texts)]).tocsr()


def _out_of_fold(features, y: np.ndarray, folds: int, seed: int) -> np.ndarray:
    from scipy.sparse import csr_matrix, hstack
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    dense, grams = features
    scores = np.full(len(y), np.nan)
    k = min(folds, int(y.sum()), int((1 - y).sum()))
    if k < 2:
        return scores
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


def _labels(texts: list[str], labels) -> np.ndarray:
    y = np.asarray(labels).astype(int).reshape(-1)
    if len(y) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(y)} labels")
    return y


def blind_scores(texts: list[str], labels, *, folds: int = 5, seed: int = 0) -> np.ndarray:
    """Out-of-fold member probability of every text from the text-only classifier; all NaN when a class
    has fewer than 2 samples (no fold could hold both classes out)."""
    y = _labels(texts, labels)
    return _out_of_fold(blind_features(texts), y, folds, seed)


def shift_pvalue(
    texts: list[str],
    labels,
    *,
    folds: int = 5,
    seed: int = 0,
    scores=None,
    max_permutations: int = SHIFT_PERMUTATIONS,
) -> float:
    """One-sided permutation p-value of the blind baseline's AUROC against the same texts with shuffled
    labels, each permutation refitting the whole classifier (exact under a random split). Sequential
    (Besag & Clifford 1991): it stops at the `SHIFT_STOP`-th permuted AUROC at or above the observed one
    with p = SHIFT_STOP / permutations drawn (never below SHIFT_ALPHA), else p = (1 + exceedances) /
    (1 + max_permutations). `scores`: the observed out-of-fold scores, when already computed. NaN when
    a class has fewer than 2 samples."""
    y = _labels(texts, labels)
    features = blind_features(texts)
    observed = _out_of_fold(features, y, folds, seed) if scores is None else np.asarray(scores, float)
    if np.isnan(observed).all():
        return float("nan")
    statistic = auroc(observed, y)
    rng = np.random.default_rng(seed)
    exceed = 0
    for drawn in range(1, max_permutations + 1):
        shuffled = rng.permutation(y)
        if auroc(_out_of_fold(features, shuffled, folds, seed), shuffled) >= statistic:
            exceed += 1
            if exceed == SHIFT_STOP:
                return SHIFT_STOP / drawn
    return (1 + exceed) / (1 + max_permutations)


def shift_warning(p_value: float, auroc: float, where: str) -> str:
    """The warning line when the shift test rejects at SHIFT_ALPHA (p < alpha), else ''."""
    if not (isinstance(p_value, float) and p_value < SHIFT_ALPHA):
        return ""
    return (
        f"WARNING: the blind baseline (a text-only classifier that never sees the model) separates {where} "
        f"at AUROC {auroc:.3f} (permutation p = {p_value:.2g} < {SHIFT_ALPHA}): the two sets differ in their "
        "text (distribution shift), so detector scores measure that shift as well as training exposure"
    )
