"""Gray-box membership detectors (docs/detectors.md#gray-box-detectors): token statistics in, one score
out, HIGHER MEANS MORE LIKELY A MEMBER (the golden tests pin each sign). With l_t = log p(x_t | x_<t) over
the scored tokens of a text and NLL = -mean_t l_t:

  ppl        -exp(NLL)                                   (minus the perplexity)
  zlib       -NLL / len(zlib.compress(span))             (Carlini et al. 2021; bytes of the scored span)
  lowercase  -NLL(text) / NLL(text.lower())              (Carlini et al. 2021)
  mink@k     mean of the ceil(k n) smallest l_t          (Min-K% Prob, Shi et al. 2024)
  minkpp@k   mean of the ceil(k n) smallest z_t,         (Min-K%++, Zhang et al. 2025)
             z_t = (l_t - mu_t) / sigma_t, sigma_t floored at SIGMA_FLOOR
  dcpdd      mean over first occurrences of min(p(x_t) log(1 / f(x_t)), a)   (DC-PDD, Zhang et al. 2024)
  ref        -NLL_target / NLL_reference                 (log-perplexity ratio; reference re-tokenises)
  ref_diff   NLL_reference - NLL_target                  (the difference form)

No scored token: NaN in every detector; a ratio whose denominator NLL is 0: NaN.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from leaklab.detectors.signals import (  # the signals a detector reads (their table: signals.SOURCES)
    DISTRIBUTION,
    FREQUENCIES,
    LOWERCASE,
    REFERENCE,
    TARGET,
    Signals,
)

if TYPE_CHECKING:  # the registry is read at recipe load: keep torch out of that import
    from leaklab.signals.logprobs import TokenStats

SIGMA_FLOOR = 1e-4  # nats; below this the next-token distribution is treated as deterministic


# --------------------------------------------------------------------------- per-text formulas


def region_mean(values: np.ndarray, share: float, highest: bool = False) -> float:
    """Mean of the ceil(share n) lowest (or highest) values, at least one; NaN for no values."""
    n = len(values)
    if n == 0:
        return math.nan
    count = max(1, math.ceil(share * n - 1e-9))  # 1e-9: 0.07 * 100 is 7.000000000000001 in floating point
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    return float(np.mean(ordered[-count:] if highest else ordered[:count]))


def neighbour_gap(original: np.ndarray, neighbours: np.ndarray) -> np.ndarray:
    """Mean of each row's finite neighbour scores minus the original's; NaN when a row has none."""
    neighbours = np.asarray(neighbours, dtype=np.float64)
    finite = np.isfinite(neighbours)
    count = finite.sum(axis=1)
    total = np.where(finite, neighbours, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return mean - np.asarray(original, dtype=np.float64)


def minkpp_z(logprob: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """Min-K%++'s per-token z_t = (l_t - mu_t) / sigma_t, sigma_t floored at SIGMA_FLOOR."""
    sigma = np.sqrt(np.maximum(var.astype(np.float64), SIGMA_FLOOR**2))
    return (logprob.astype(np.float64) - mean) / sigma


def dcpdd_score(token_ids: np.ndarray, logprob: np.ndarray, freq: np.ndarray, a: float) -> float:
    """Mean over each token id's first occurrence of min(p(x_t) * log(1 / f(x_t)), a); NaN for no tokens.

    freq: the corpus frequency f(x_t) of each scored token (same length as token_ids).
    """
    if len(token_ids) == 0:
        return math.nan
    _, first = np.unique(token_ids, return_index=True)
    first.sort()
    alpha = np.exp(logprob[first].astype(np.float64)) * -np.log(freq[first])
    return float(np.mean(np.minimum(alpha, a)))


def nll_ratio(numerator: np.ndarray, nll: np.ndarray) -> np.ndarray:
    """numerator / NLL per sample; NaN where the NLL is not a positive number."""
    numerator, nll = np.asarray(numerator, dtype=np.float64), np.asarray(nll, dtype=np.float64)
    ok = np.isfinite(nll) & (nll > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, numerator / np.where(ok, nll, 1.0), np.nan)


def _nlls(stats: list[TokenStats]) -> np.ndarray:
    return np.array([s.nll() for s in stats], dtype=np.float64)


def _k_column(prefix: str, k: float) -> str:
    return f"{prefix}@{k:g}"


def _check_k(ks: tuple[float, ...]) -> None:
    if not ks or any(not 0 < k <= 1 for k in ks):
        raise ValueError(f"k must be in (0, 1], got {list(ks)}")


# --------------------------------------------------------------------------- detectors


@dataclass
class Ppl:
    name: ClassVar[str] = "ppl"
    needs: ClassVar[frozenset[str]] = frozenset({TARGET})

    def columns(self) -> dict[str, dict]:
        return {"ppl": {}}

    def score(self, signals: Signals) -> dict[str, np.ndarray]:
        with np.errstate(over="ignore"):
            return {"ppl": -np.exp(_nlls(signals.target))}


@dataclass
class Zlib:
    name: ClassVar[str] = "zlib"
    needs: ClassVar[frozenset[str]] = frozenset({TARGET})

    def columns(self) -> dict[str, dict]:
        return {"zlib": {}}

    def score(self, signals: Signals) -> dict[str, np.ndarray]:
        entropy = np.array(
            [len(zlib.compress(span.encode("utf-8"))) for span in signals.spans], dtype=np.float64
        )
        return {"zlib": -_nlls(signals.target) / entropy}


@dataclass
class Lowercase:
    name: ClassVar[str] = "lowercase"
    needs: ClassVar[frozenset[str]] = frozenset({TARGET, LOWERCASE})

    def columns(self) -> dict[str, dict]:
        return {"lowercase": {}}

    def score(self, signals: Signals) -> dict[str, np.ndarray]:
        original, lower = _nlls(signals.target), _nlls(signals.lowercase)
        return {"lowercase": -nll_ratio(original, lower)}


@dataclass
class MinK:
    name: ClassVar[str] = "mink"
    needs: ClassVar[frozenset[str]] = frozenset({TARGET})
    k: tuple[float, ...] = (0.2,)

    def __post_init__(self) -> None:
        _check_k(self.k)

    def columns(self) -> dict[str, dict]:
        return {_k_column("mink", k): {"k": k} for k in self.k}

    def score(self, signals: Signals) -> dict[str, np.ndarray]:
        return {
            _k_column("mink", k): np.array(
                [region_mean(s.logprob, k) for s in signals.target], dtype=np.float64
            )
            for k in self.k
        }


@dataclass
class MinKPlusPlus:
    name: ClassVar[str] = "minkpp"
    needs: ClassVar[frozenset[str]] = frozenset({TARGET, DISTRIBUTION})
    k: tuple[float, ...] = (0.2,)

    def __post_init__(self) -> None:
        _check_k(self.k)

    def columns(self) -> dict[str, dict]:
        return {_k_column("minkpp", k): {"k": k} for k in self.k}

    def score(self, signals: Signals) -> dict[str, np.ndarray]:
        zs = [minkpp_z(s.logprob, s.mean, s.var) for s in signals.target]
        return {
            _k_column("minkpp", k): np.array([region_mean(z, k) for z in zs], dtype=np.float64)
            for k in self.k
        }


@dataclass
class DcPdd:
    name: ClassVar[str] = "dcpdd"
    needs: ClassVar[frozenset[str]] = frozenset({TARGET, FREQUENCIES})
    a: float = 0.01  # upper clip of each token's alpha (docs/detectors.md)

    def __post_init__(self) -> None:
        if not self.a > 0:
            raise ValueError(f"dcpdd: a must be positive, got {self.a}")

    def columns(self) -> dict[str, dict]:
        return {"dcpdd": {"a": self.a}}

    def score(self, signals: Signals) -> dict[str, np.ndarray]:
        table = signals.frequencies
        values = [
            dcpdd_score(s.token_ids, s.logprob, table.probability(s.token_ids), self.a)
            for s in signals.target
        ]
        return {"dcpdd": np.array(values, dtype=np.float64)}


@dataclass
class ReferenceRatio:
    name: ClassVar[str] = "ref"
    needs: ClassVar[frozenset[str]] = frozenset({TARGET, REFERENCE})
    forms: tuple[str, ...] = field(default=("ratio", "diff"))

    def __post_init__(self) -> None:
        unknown = set(self.forms) - {"ratio", "diff"}
        if unknown or not self.forms:
            raise ValueError(f"ref: forms must be ratio and/or diff, got {list(self.forms)}")

    def columns(self) -> dict[str, dict]:
        return {{"ratio": "ref", "diff": "ref_diff"}[f]: {"form": f} for f in self.forms}

    def score(self, signals: Signals) -> dict[str, np.ndarray]:
        target, reference = _nlls(signals.target), _nlls(signals.reference)
        out = {}
        if "ratio" in self.forms:
            out["ref"] = -nll_ratio(target, reference)
        if "diff" in self.forms:
            out["ref_diff"] = reference - target
        return out
