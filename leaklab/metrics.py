"""Detection metrics: how well one score column separates members (label 1) from non-members (0); MRI's
formulas; set-level tests. A higher score means member; a NaN score ranks below every scored sample and
is never called a member. Thresholds are cross-validated (and `*_oracle`, fitted on all labels as the
papers do); intervals come from one stratified bootstrap. See docs/results.md#how-the-metrics-are-computed.
"""

from __future__ import annotations

import functools
import math

import numpy as np

FPR_LEVELS = {"tpr@1%fpr": 0.01, "tpr@5%fpr": 0.05}
_BINARY = ("accuracy", "precision", "recall", "f1", "precision_member", "recall_member")


def _prepare(scores, labels) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).reshape(-1).copy()
    y = np.asarray(labels).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"{len(s)} scores but {len(y)} labels")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("labels must be 0 (non-member) or 1 (member)")
    s[np.isnan(s)] = -np.inf
    return s, y.astype(bool)


# --------------------------------------------------------------------------- counts -> metrics


def _binary_from_counts(tp, fp, fn, tn) -> dict[str, np.ndarray]:
    """Accuracy and macro / member-class precision, recall and F1 from confusion counts (arrays welcome)."""
    tp, fp, fn, tn = (np.asarray(x, dtype=np.float64) for x in (tp, fp, fn, tn))

    def div(a, b):
        return np.divide(a, b, out=np.zeros(np.broadcast(a, b).shape), where=b > 0)

    prec_pos, prec_neg = div(tp, tp + fp), div(tn, tn + fn)
    rec_pos, rec_neg = div(tp, tp + fn), div(tn, tn + fp)
    f1_pos, f1_neg = div(2 * tp, 2 * tp + fp + fn), div(2 * tn, 2 * tn + fn + fp)
    return {
        "accuracy": div(tp + tn, tp + fp + fn + tn),
        "precision": (prec_pos + prec_neg) / 2,
        "recall": (rec_pos + rec_neg) / 2,
        "f1": (f1_pos + f1_neg) / 2,
        "precision_member": prec_pos,
        "recall_member": rec_pos,
    }


def binary_metrics(labels, predictions) -> dict[str, float]:
    """Accuracy, macro precision / recall / F1 and member-class precision / recall of 0/1 decisions."""
    y = np.asarray(labels).astype(bool)
    return {k: float(v) for k, v in _binary_draws(y, predictions, np.ones(len(y))).items()}


def _candidates(scores: np.ndarray) -> np.ndarray:
    """Thresholds (member iff score >= t) realising every distinct split of `scores`; never -inf, so a
    NaN score (stored as -inf) is never a member; [NaN] (nobody a member) when every score is NaN."""
    u = np.unique(scores)
    parts = []
    if np.isfinite(u[0]):
        parts.append(u[:1])  # every scored sample is a member
    lower, upper = u[:-1], u[1:]
    with np.errstate(invalid="ignore"):
        parts.append(np.where(np.isfinite(lower) & np.isfinite(upper), lower + (upper - lower) / 2, upper))
    if np.isfinite(u[-1]):
        parts.append([np.nextafter(u[-1], np.inf)])  # nobody is a member
    cands = np.concatenate(parts)
    return cands if len(cands) else np.array([np.nan])


def _counts_at(scores: np.ndarray, labels: np.ndarray, thresholds: np.ndarray):
    pos, neg = np.sort(scores[labels]), np.sort(scores[~labels])
    tp = len(pos) - np.searchsorted(pos, thresholds, side="left")
    fp = len(neg) - np.searchsorted(neg, thresholds, side="left")
    return tp, fp, len(pos) - tp, len(neg) - fp


def best_threshold(scores, labels) -> float:
    """The macro-F1-maximising threshold (member iff score >= t); the middle of a plateau of ties."""
    s, y = _prepare(scores, labels)
    if len(s) == 0:
        return math.nan
    cands = _candidates(s)
    f1 = _binary_from_counts(*_counts_at(s, y, cands))["f1"]
    best = np.flatnonzero(f1 == f1.max())
    return float(cands[best[len(best) // 2]])


def auroc(scores, labels) -> float:
    """Area under the ROC curve (Mann-Whitney U; ties count one half); NaN without both classes."""
    from scipy.stats import rankdata

    s, y = _prepare(scores, labels)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    ranks = rankdata(s)  # average ranks; -inf (NaN scores) ranks first
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def tpr_at_fpr(scores, labels, max_fpr: float) -> float:
    """Highest TPR over thresholds with FPR <= max_fpr; NaN without both classes."""
    s, y = _prepare(scores, labels)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    tp, fp, _, _ = _counts_at(s, y, _candidates(s))
    ok = fp / n_neg <= max_fpr + 1e-12
    return float((tp[ok] / n_pos).max()) if ok.any() else 0.0


def threshold_free(scores, labels) -> dict[str, float]:
    tprs = {name: tpr_at_fpr(scores, labels, level) for name, level in FPR_LEVELS.items()}
    return {"auroc": auroc(scores, labels), **tprs}


def roc_curve(scores, labels) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, TPR) at every distinct split, (0, 0) to (1, 1) by rising FPR; empty without both classes."""
    s, y = _prepare(scores, labels)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return np.zeros(0), np.zeros(0)
    tp, fp, _, _ = _counts_at(s, y, _candidates(s))
    fpr = np.concatenate([[0.0], fp / n_neg, [1.0]])
    tpr = np.concatenate([[0.0], tp / n_pos, [1.0]])
    order = np.lexsort((tpr, fpr))
    return fpr[order], tpr[order]


def cv_decisions(scores, labels, *, folds: int = 5, seed: int = 0) -> tuple[np.ndarray, list[float]]:
    """(held-out decisions of stratified k-fold thresholds, None under 2 samples a class; the thresholds)."""
    from sklearn.model_selection import StratifiedKFold

    s, y = _prepare(scores, labels)
    k = min(folds, int(y.sum()), int((~y).sum()))
    if k < 2:
        return None, []
    decisions = np.zeros(len(s), dtype=bool)
    thresholds = []
    splitter = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    for fit, held_out in splitter.split(s, y):
        t = best_threshold(s[fit], y[fit])
        thresholds.append(t)
        decisions[held_out] = s[held_out] >= t
    return decisions, thresholds


def detection_metrics(
    scores, labels, *, cv_folds: int = 5, seed: int = 0, n_bootstrap: int = 0
) -> dict[str, float]:
    """Every detection metric of one score column: counts, threshold-free, binary at the CV and the oracle
    threshold, and with n_bootstrap > 0 the intervals of all but the oracle ones (f1_oracle's too)."""
    raw = np.asarray(scores, dtype=np.float64).reshape(-1)
    s, y = _prepare(scores, labels)
    out: dict[str, float] = {
        "n": float(len(s)),
        "n_members": float(y.sum()),
        "n_nan": float(np.isnan(raw).sum()),
    }
    out.update(threshold_free(s, y))

    decisions, thresholds = cv_decisions(s, y, folds=cv_folds, seed=seed)
    if decisions is None:
        out.update({k: math.nan for k in _BINARY})
        out["threshold_cv"] = math.nan
    else:
        out.update(binary_metrics(y, decisions))
        out["threshold_cv"] = float(np.mean(thresholds))
        for i, t in enumerate(thresholds):
            out[f"threshold_cv_fold{i}"] = t
    out["cv_folds"] = float(len(thresholds))

    t_oracle = best_threshold(s, y)
    oracle = binary_metrics(y, s >= t_oracle) if len(s) else dict.fromkeys(_BINARY, math.nan)
    out.update({f"{k}_oracle": v for k, v in oracle.items()})
    out["threshold_oracle"] = t_oracle

    if n_bootstrap > 0 and y.any() and (~y).any():
        out.update(_bootstrap(s, y, decisions, n_bootstrap, seed))
    return out


# --------------------------------------------------------------------------- the bootstrap
# A resample is a row of multiplicities (how often each sample was drawn), every metric a weighted count.


def resample_weights(strata: list[np.ndarray], size: int, *, n: int, seed: int = 0) -> np.ndarray:
    """[n, size] multiplicities of `n` resamples, each stratum (an index array) resampled with replacement
    at its size, in order. Cached and read-only: every score column of an evaluation shares them."""
    key = (tuple(np.asarray(s, dtype=np.int64).tobytes() for s in strata), size, n, seed)
    return _resample_weights(key)


def member_resamples(labels, n: int, seed: int = 0) -> np.ndarray:
    y = np.asarray(labels).astype(bool)
    return resample_weights([np.flatnonzero(y), np.flatnonzero(~y)], len(y), n=n, seed=seed)


@functools.lru_cache(maxsize=8)
def _resample_weights(key) -> np.ndarray:
    strata_bytes, size, n, seed = key
    strata = [np.frombuffer(b, dtype=np.int64) for b in strata_bytes]
    rng = np.random.default_rng(seed)
    weights = np.zeros((n, size))
    for b in range(n):
        for stratum in strata:
            if len(stratum):
                weights[b] += np.bincount(rng.choice(stratum, len(stratum)), minlength=size)
    weights.flags.writeable = False
    return weights


def percentile_intervals(draws: dict[str, np.ndarray]) -> dict[str, float]:
    """`<name>_ci_low` / `_ci_high`: 2.5th / 97.5th percentiles of each metric's draws (NaNs ignored)."""
    out = {}
    for name, values in draws.items():
        values = np.asarray(values, dtype=np.float64)
        low, high = (math.nan, math.nan) if np.isnan(values).all() else np.nanpercentile(values, [2.5, 97.5])
        out[f"{name}_ci_low"], out[f"{name}_ci_high"] = float(low), float(high)
    return out


def resampled_mean(weights: np.ndarray, values, where=None) -> np.ndarray:
    """Per resample, the mean of `values` over the samples where `where` holds (NaN: it drew none)."""
    v = np.asarray(values, dtype=np.float64)
    mask = np.ones(len(v), dtype=bool) if where is None else np.asarray(where).astype(bool)
    total = weights @ np.where(mask, v, 0.0)  # a NaN outside the mask must not reach the sum
    count = weights @ mask
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / count, np.nan)


def group_mean_intervals(values, labels, *, n_bootstrap: int, seed: int = 0) -> dict[str, float]:
    """Bootstrap 95% intervals of a per-sample value's mean (each task's pass@1, say) on members,
    non_members, all and of their gap, from `detection_metrics`' resample; {} when n_bootstrap is 0."""
    if n_bootstrap <= 0:
        return {}
    y = np.asarray(labels).astype(bool)
    weights = member_resamples(y, n_bootstrap, seed)
    members, non_members = resampled_mean(weights, values, y), resampled_mean(weights, values, ~y)
    return percentile_intervals(
        {
            "members": members,
            "non_members": non_members,
            "all": resampled_mean(weights, values),
            "gap": members - non_members,
        }
    )


def _weighted_threshold_counts(s: np.ndarray, y: np.ndarray, weights: np.ndarray):
    """Per resample, TP and FP at the splits `_candidates` realises ([B, T] each), and the member and
    non-member weight at each distinct score ([B, U] each, for AUROC)."""
    values, inverse = np.unique(s, return_inverse=True)
    onehot = np.zeros((len(s), len(values)))
    onehot[np.arange(len(s)), inverse] = 1.0
    pos_w = (weights * y) @ onehot  # [B, U] member weight at each distinct score
    neg_w = (weights * ~y) @ onehot
    tp = np.cumsum(pos_w[:, ::-1], axis=1)[:, ::-1]  # members scoring >= each distinct score
    fp = np.cumsum(neg_w[:, ::-1], axis=1)[:, ::-1]
    finite = np.isfinite(values)  # a NaN score (stored as -inf) is never called a member
    zeros = np.zeros((len(weights), 1))
    return np.hstack([tp[:, finite], zeros]), np.hstack([fp[:, finite], zeros]), pos_w, neg_w


def _bootstrap(s: np.ndarray, y: np.ndarray, decisions, n: int, seed: int) -> dict[str, float]:
    """Intervals of a score column's metrics (see the module doc), vectorised over resamples."""
    weights = member_resamples(y, n, seed)
    draws = threshold_free_draws(s, y, weights)
    if decisions is not None:
        draws.update(_binary_draws(y, decisions, weights))
    tp, fp, _, _ = _weighted_threshold_counts(s, y, weights)
    n_pos, n_neg = (weights * y).sum(1, keepdims=True), (weights * ~y).sum(1, keepdims=True)
    draws["f1_oracle"] = _binary_from_counts(tp, fp, n_pos - tp, n_neg - fp)["f1"].max(axis=1)
    return percentile_intervals(draws)


def threshold_free_draws(s: np.ndarray, y: np.ndarray, weights: np.ndarray) -> dict[str, np.ndarray]:
    """AUROC (ties count one half) and TPR@FPR of every resample."""
    tp, fp, pos_w, neg_w = _weighted_threshold_counts(s, y, weights)
    n_pos, n_neg = pos_w.sum(1), neg_w.sum(1)
    neg_below = np.cumsum(neg_w, axis=1) - neg_w  # non-members scoring strictly lower
    with np.errstate(invalid="ignore", divide="ignore"):
        draws = {"auroc": (pos_w * (neg_below + 0.5 * neg_w)).sum(1) / (n_pos * n_neg)}
        for name, level in FPR_LEVELS.items():
            ok = fp / n_neg[:, None] <= level + 1e-12
            draws[name] = np.where(ok, tp / n_pos[:, None], 0.0).max(axis=1)
    return draws


def _binary_draws(y: np.ndarray, predictions: np.ndarray, weights: np.ndarray) -> dict[str, np.ndarray]:
    p = np.asarray(predictions).astype(bool)
    counts = [weights @ (y & p), weights @ (~y & p), weights @ (y & ~p), weights @ (~y & ~p)]
    return _binary_from_counts(*counts)


# --------------------------------------------------------------------------- rule detectors


def rule_metrics(
    leak, labels, *, margin=None, decided=None, n_bootstrap: int = 0, seed: int = 0
) -> dict[str, float]:
    """Metrics of a rule detector (it decides itself, e.g. SrDetection; undecided: not a leak): counts,
    binary metrics, flag rates, its `margin`'s threshold-free ones (> 0 iff leak), intervals."""
    y = np.asarray(labels).astype(bool)
    p = np.asarray(leak).astype(bool)
    d = np.ones(len(y), dtype=bool) if decided is None else np.asarray(decided).astype(bool)
    m = None if margin is None else np.asarray(margin, dtype=np.float64)

    out: dict[str, float] = {
        "n": float(len(y)),
        "n_members": float(y.sum()),
        "n_leaks": float(p.sum()),
        "n_undecided": float((~d).sum()),
    }
    out.update(binary_metrics(y, p))
    out.update(threshold_free(m, y) if m is not None else dict.fromkeys(["auroc", *FPR_LEVELS], math.nan))
    out.update(flag_rates(p, y))
    if n_bootstrap > 0 and y.any() and (~y).any():
        weights = member_resamples(y, n_bootstrap, seed)
        draws = _binary_draws(y, p, weights)
        draws.update(_flag_rate_draws(y, p, weights))
        if m is not None:
            s, _ = _prepare(m, y)
            draws.update(threshold_free_draws(s, y, weights))
        out.update(percentile_intervals(draws))
    return out


def flag_rates(leak, labels, *, n_bootstrap: int = 0, seed: int = 0) -> dict[str, float]:
    """A rule's share of members flagged (TPR) and of non-members (FPR), which F1 or AUROC alone hide;
    intervals with n_bootstrap > 0; NaN for a side with no samples."""
    y = np.asarray(labels).astype(bool)
    p = np.asarray(leak).astype(bool)
    out = {
        "flag_rate_members": float(p[y].mean()) if y.any() else math.nan,
        "flag_rate_non_members": float(p[~y].mean()) if (~y).any() else math.nan,
    }
    if n_bootstrap > 0 and y.any() and (~y).any():
        weights = member_resamples(y, n_bootstrap, seed)
        out.update(percentile_intervals(_flag_rate_draws(y, p, weights)))
    return out


def _flag_rate_draws(y: np.ndarray, p: np.ndarray, weights: np.ndarray) -> dict[str, np.ndarray]:
    """Both flag rates in every resample (each stratum keeps its size, so the denominators are fixed)."""
    return {
        "flag_rate_members": weights @ (y & p) / y.sum(),
        "flag_rate_non_members": weights @ (~y & p) / (~y).sum(),
    }


def leak_rate(leak, decided=None, *, n_bootstrap: int = 1000, seed: int = 0) -> dict[str, float]:
    """Audit without ground truth: the share of decided samples a rule flags, with its bootstrap interval."""
    p = np.asarray(leak).astype(bool)
    d = np.ones(len(p), dtype=bool) if decided is None else np.asarray(decided).astype(bool)
    flags = p[d].astype(np.float64)
    out = {
        "n": float(len(p)),
        "n_decided": float(len(flags)),
        "n_undecided": float((~d).sum()),
        "n_leaks": float(flags.sum()),
        "leak_rate": float(flags.mean()) if len(flags) else math.nan,
        "leak_rate_ci_low": math.nan,
        "leak_rate_ci_high": math.nan,
    }
    if len(flags) and n_bootstrap > 0:
        weights = resample_weights([np.arange(len(flags))], len(flags), n=n_bootstrap, seed=seed)
        out.update(percentile_intervals({"leak_rate": weights @ flags / len(flags)}))
    return out


def excess_rate_pvalue(flags, null_rates) -> float:
    """P(at least sum(flags) samples flagged) when sample i is flagged with probability null_rates[i],
    independently (a Poisson-binomial upper tail, exact by convolution): is a rule's leakage rate above
    what it gives on data no model saw? NaN without samples."""
    k = int(np.asarray(flags).astype(bool).sum())
    rates = np.asarray(null_rates, dtype=np.float64)
    if rates.size == 0:
        return math.nan
    dist = np.zeros(rates.size + 1)  # dist[j] = P(j flagged so far)
    dist[0] = 1.0
    for i, r in enumerate(rates, start=1):
        dist[1 : i + 1] = dist[1 : i + 1] * (1 - r) + dist[:i] * r
        dist[0] *= 1 - r
    return float(min(1.0, dist[k:].sum()))


def two_rate_pvalue(flagged: int, n: int, flagged_clean: int, n_clean: int) -> float:
    """One-sided Fisher exact test that a rule flags a larger share of n samples than of n_clean known-clean
    ones (the measured null): the hypergeometric upper tail. NaN if a side is empty."""
    if n <= 0 or n_clean <= 0:
        return math.nan
    total, flags = n + n_clean, flagged + flagged_clean
    ways = math.comb(total, n)
    tail = sum(
        math.comb(flags, j) * math.comb(total - flags, n - j) for j in range(flagged, min(flags, n) + 1)
    )
    return min(1.0, tail / ways)


# --------------------------------------------------------------------------- ranking (extraction audit)


def precision_at_k(
    scores, relevant, k: int = 100, *, n_bootstrap: int = 0, seed: int = 0
) -> dict[str, float]:
    """Fraction of relevant items among the `k` highest scores (NaN last, ties in input order); in a
    resample an item drawn w times fills min(w, room left) of the k places."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1).copy()
    y = np.asarray(relevant, dtype=np.float64).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"{len(s)} scores but {len(y)} relevance labels")
    k = min(k, len(s))
    out = {
        "k": float(k),
        "precision_at_k": math.nan,
        "precision_at_k_ci_low": math.nan,
        "precision_at_k_ci_high": math.nan,
    }
    if k == 0:
        return out
    s[np.isnan(s)] = -np.inf
    order = np.argsort(-s, kind="stable")
    y_ranked = y[order]
    out["precision_at_k"] = float(y_ranked[:k].mean())
    if n_bootstrap > 0:
        weights = resample_weights([np.arange(len(s))], len(s), n=n_bootstrap, seed=seed)[:, order]
        before = np.cumsum(weights, axis=1) - weights
        taken = np.clip(k - before, 0, weights)
        out.update(percentile_intervals({"precision_at_k": taken @ y_ranked / k}))
    return out


def pearson(x, y) -> float:
    """Pearson correlation; NaN with fewer than 2 pairs or a constant side."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(a) < 2 or a.std() == 0 or b.std() == 0:
        return math.nan
    return float(((a - a.mean()) * (b - b.mean())).mean() / (a.std() * b.std()))


def spearman(x, y) -> float:
    from scipy.stats import rankdata

    return pearson(rankdata(np.asarray(x, dtype=np.float64)), rankdata(np.asarray(y, dtype=np.float64)))


# --------------------------------------------------------------------------- MRI (Memorize or generalize?)
# Acc is pass@1 in [0, 1]; a value that cannot be computed is None (reported as such, never 0).

MIN_ACCURACY = 0.10  # competence rule (App. D): Acc(T_ori) >= 10% ...
MIN_SOLVED = 50  # ... and at least 50 original tasks solved


def mean_similarity(similarities) -> float | None:
    """Sim(T_rew) = mean of S_i over every rewritten task (None without one); an answer without an S_i
    (no parsable code) counts 0, as in `instance_mri`: the paper's mean runs over all of T_rew."""
    values = [0.0 if s is None or math.isnan(s) else float(s) for s in similarities]
    return sum(values) / len(values) if values else None


def relative_accuracy_drop(acc_original: float | None, acc_perturbed: float | None) -> float | None:
    """RAD_p = max(0, (Acc_ori - Acc_p) / Acc_ori); None when either is missing or Acc_ori = 0
    (a relative drop from nothing is undefined)."""
    if acc_original is None or acc_perturbed is None or acc_original <= 0:
        return None
    return max(0.0, (acc_original - acc_perturbed) / acc_original)


def memorization_risk_index(similarity: float | None, rad_rewrite: float | None) -> float | None:
    """MRI = Sim(T_rew) x RAD_rew."""
    if similarity is None or rad_rewrite is None:
        return None
    return similarity * rad_rewrite


def instance_mri(solved_original, similarities, rewrite_failed) -> float | None:
    """iMRI = mean over originally solved tasks k of Sim_k x Drop_k (Drop_k = 1 when the rewrite fails;
    a missing Sim_k counts 0, as in `mean_similarity`). None when no task was solved."""
    terms = [
        (0.0 if s is None or math.isnan(s) else float(s)) * float(bool(f))
        for ok, s, f in zip(solved_original, similarities, rewrite_failed)
        if ok
    ]
    return sum(terms) / len(terms) if terms else None


def competence(
    acc_original: float | None,
    n_solved: int,
    min_accuracy: float = MIN_ACCURACY,
    min_solved: int = MIN_SOLVED,
) -> str:
    """'' when RAD and MRI may be reported (App. D's competence rule), else why they are N/A."""
    reasons = []
    if acc_original is None or acc_original < min_accuracy:
        shown = "none" if acc_original is None else f"{acc_original:.3f}"
        reasons.append(f"Acc_ori {shown} < {min_accuracy:g}")
    if n_solved < min_solved:
        reasons.append(f"{n_solved} original tasks solved < {min_solved}")
    return "below competence threshold: " + "; ".join(reasons) if reasons else ""


def mri_draws(weights: np.ndarray, passed_original, passed_rewrite, similarities) -> dict[str, np.ndarray]:
    """The formulas above on every resample (`weights` [B, tasks]) of one side's rewritten tasks (NaN where
    they give None); the competence rule is the point estimate's only."""
    ori = np.asarray(passed_original, dtype=np.float64)
    rew = np.asarray(passed_rewrite, dtype=np.float64)
    sim = np.nan_to_num(np.array([np.nan if s is None else s for s in similarities], dtype=np.float64))
    acc_ori, acc_rew = resampled_mean(weights, ori), resampled_mean(weights, rew)
    mean_sim = resampled_mean(weights, sim)
    with np.errstate(invalid="ignore", divide="ignore"):
        rad = np.where(acc_ori > 0, np.maximum(0.0, (acc_ori - acc_rew) / acc_ori), np.nan)
    return {
        "acc_ori_rew": acc_ori,
        "acc_rew": acc_rew,
        "sim": mean_sim,
        "rad_rew": rad,
        "mri": mean_sim * rad,
        "imri": resampled_mean(weights, sim * (1.0 - rew), ori > 0),
    }


# --------------------------------------------------------------------------- dataset-level tests


def auroc_chance_pvalue(scores, labels) -> float:
    """Two-sided p-value of "AUROC = 0.5": the Mann-Whitney U test in its normal approximation, with
    the tie correction and no continuity correction. U = AUROC * n1 * n0 has mean n1 * n0 / 2 and
    variance n1 * n0 / 12 * ((n + 1) - sum(t^3 - t) / (n * (n - 1))) over the tie groups t of the pooled
    scores; p = erfc(|z| / sqrt(2)). NaN scores are left out; NaN without both classes or when every
    score ties."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels).reshape(-1).astype(bool)
    keep = ~np.isnan(s)
    s, y = s[keep], y[keep]
    n1, n0 = int(y.sum()), int((~y).sum())
    n = n1 + n0
    if n1 == 0 or n0 == 0:
        return math.nan
    _, ties = np.unique(s, return_counts=True)
    variance = n1 * n0 / 12 * ((n + 1) - float((ties**3 - ties).sum()) / (n * (n - 1)))
    if variance <= 0:
        return math.nan
    z = (auroc(s, y) - 0.5) * n1 * n0 / math.sqrt(variance)
    return math.erfc(abs(z) / math.sqrt(2))


def holm_adjusted(p_values) -> np.ndarray:
    """Holm's step-down adjustment (the i-th smallest of m becomes max over j <= i of min(1, (m - j + 1)
    * p_(j))), in the input order: rejecting below alpha keeps the family-wise error rate at alpha."""
    p = np.asarray(p_values, dtype=np.float64).reshape(-1)
    order = np.argsort(p, kind="stable")
    m = len(p)
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted


def welch_t_test(a, b) -> dict[str, float]:
    """One-sided Welch t-test of "mean(a) > mean(b)" (ddof 1, Welch-Satterthwaite df, p = P(T_df >= t)),
    NaNs dropped; under 2 values on a side all but the counts are NaN."""
    from scipy.stats import t as student_t

    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    out = {"t": math.nan, "df": math.nan, "p_value": math.nan, "n_a": float(len(a)), "n_b": float(len(b))}
    if len(a) < 2 or len(b) < 2:
        return out
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    diff = a.mean() - b.mean()
    if va + vb == 0:
        if diff != 0:
            out.update(t=math.copysign(math.inf, diff), p_value=0.0 if diff > 0 else 1.0)
        return out
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    out.update(t=float(t), df=float(df), p_value=float(student_t.sf(t, df)))
    return out
