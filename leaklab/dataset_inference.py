"""Dataset inference (Maini et al., 2024, "LLM Dataset Inference: Did you train on my dataset?"): was a
suspect set S, as a whole, trained on, against a clean set C known not to be? A p-value.

  1. split S and C at random into fit and test halves (seeded);
  2. on the fit halves, fit a regularised logistic regression (suspect = 1) on the standardised
     per-sample score features (a NaN filled with the feature's fit median; a feature NaN everywhere
     or constant there dropped), so separating detectors weigh more and noisy ones less;
  3. one-sided Welch t-test that the combined score is higher on S's test half than on C's.

The test halves never set the weights, so under the null the p-value is about uniform:
`null_rejection_rate` measures that on the clean set split against itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from leaklab.dataset_tests.sharded_likelihood import rejection_rate
from leaklab.metrics import welch_t_test

MIN_PER_SET = 4  # two per half: the t-test needs two values on each side


@dataclass
class InferenceResult:
    p_value: float
    t: float
    df: float
    n_suspect: int  # samples of each set used in the t-test (the test halves)
    n_clean: int
    weights: dict[str, float] = field(default_factory=dict)  # feature -> weight (standardised units)

    def as_metrics(self) -> dict[str, float]:
        return {
            "p_value": self.p_value,
            "t": self.t,
            "df": self.df,
            "n_suspect_test": float(self.n_suspect),
            "n_clean_test": float(self.n_clean),
        }


def _halves(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    order = rng.permutation(n)
    return order[: n // 2], order[n // 2 :]


def _fit_combination(x_fit: np.ndarray, y_fit: np.ndarray):
    """(columns kept, centre, scale, fill values, weights) of the combination learned on the fit halves."""
    from sklearn.linear_model import LogisticRegression

    with np.errstate(all="ignore"):
        fill = np.nanmedian(x_fit, axis=0) if len(x_fit) else np.zeros(x_fit.shape[1])
    keep = ~np.isnan(fill)
    x = np.where(np.isnan(x_fit), fill, x_fit)[:, keep]
    fill = fill[keep]
    centre, scale = x.mean(axis=0), x.std(axis=0)
    varies = scale > 0
    x = (x[:, varies] - centre[varies]) / scale[varies]
    weights = LogisticRegression(C=1.0, max_iter=1000).fit(x, y_fit).coef_[0] if x.shape[1] else np.zeros(0)
    return np.flatnonzero(keep)[varies], centre[varies], scale[varies], fill[varies], weights


def _combine(x: np.ndarray, keep, centre, scale, fill, weights) -> np.ndarray:
    x = x[:, keep]
    x = np.where(np.isnan(x), fill, x)
    return ((x - centre) / scale) @ weights if len(weights) else np.zeros(len(x))


def dataset_inference(suspect, clean, *, features: list[str] | None = None, seed: int = 0) -> InferenceResult:
    """The test (module doc) of `suspect` against `clean`, [n_samples, n_features] score matrices (1-d:
    one feature); ValueError under MIN_PER_SET samples a set or for other columns; p NaN when no feature
    varies on the fit halves."""
    s, c = (np.asarray(m, dtype=np.float64) for m in (suspect, clean))
    s, c = (m.reshape(-1, 1) if m.ndim == 1 else m for m in (s, c))
    if s.shape[1] != c.shape[1]:
        raise ValueError(f"suspect set has {s.shape[1]} score features, clean set {c.shape[1]}")
    for name, m in (("suspect", s), ("clean", c)):
        if len(m) < MIN_PER_SET:
            raise ValueError(
                f"dataset inference needs at least {MIN_PER_SET} samples per set; the {name} set has {len(m)}"
            )
    names = features or [f"f{i}" for i in range(s.shape[1])]
    rng = np.random.default_rng(seed)
    s_fit, s_test = _halves(len(s), rng)
    c_fit, c_test = _halves(len(c), rng)
    x_fit = np.vstack([s[s_fit], c[c_fit]])
    y_fit = np.r_[np.ones(len(s_fit)), np.zeros(len(c_fit))]
    keep, centre, scale, fill, weights = _fit_combination(x_fit, y_fit)
    if len(weights) == 0:
        return InferenceResult(math.nan, math.nan, math.nan, len(s_test), len(c_test))
    test = welch_t_test(
        _combine(s[s_test], keep, centre, scale, fill, weights),
        _combine(c[c_test], keep, centre, scale, fill, weights),
    )
    return InferenceResult(
        p_value=test["p_value"],
        t=test["t"],
        df=test["df"],
        n_suspect=len(s_test),
        n_clean=len(c_test),
        weights={names[int(i)]: float(w) for i, w in zip(keep, weights)},
    )


def null_rejection_rate(
    clean, *, n_halvings: int = 100, alpha: float = 0.05, seed: int = 0
) -> dict[str, float]:
    """The test's false-positive rate on the data: the share of `n_halvings` random halvings of the clean
    set, tested half against half, with p < alpha (NaN under 2 * MIN_PER_SET clean samples); also
    null_halvings (the tests that gave a p-value) and null_alpha."""
    c = np.asarray(clean, dtype=np.float64)
    c = c.reshape(-1, 1) if c.ndim == 1 else c
    out = {"null_rejection_rate": math.nan, "null_halvings": 0.0, "null_alpha": float(alpha)}
    if len(c) < 2 * MIN_PER_SET:
        return out
    rng = np.random.default_rng(seed)
    p_values = []
    for _ in range(n_halvings):
        a, b = _halves(len(c), rng)
        p_values.append(dataset_inference(c[a], c[b], seed=int(rng.integers(2**31))).p_value)
    out["null_rejection_rate"], out["null_halvings"] = rejection_rate(p_values, alpha)
    return out


def feature_matrix(columns: dict[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    """[len(rows), len(columns)] of the named score columns at the given sample indices."""
    return np.column_stack([np.asarray(v, dtype=np.float64)[rows] for v in columns.values()])
