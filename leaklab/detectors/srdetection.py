"""SrDetection (SrDetection §3.1, Algorithm 1): the self-referential decision rules and the detectors
that run them. A sample x_0 is compared only with its own verified semantics-preserving variants
x_1..x_n (`leaklab.perturb.variants`), so no threshold is fitted:

  gray box:  leak  iff  PPL(x_0) < min_i PPL(x_i)      (the original is the easiest to predict)
  black box: leak  iff  NGO(x_0) > max_i NGO(x_i)      (the original's suffix is reproduced best)

Ties, undecided samples, the margins, the black box's cut and the calibrated and clean-null rules: see
docs/detectors.md#srdetection-001-31. No torch import here (recipe validation reads the registry).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from leaklab.data.tasks import context_of
from leaklab.metrics import excess_rate_pvalue, rule_metrics
from leaklab.plugins import RuleScores
from leaklab.similarity.text import ngram_overlap

if TYPE_CHECKING:
    from leaklab.detectors.inputs import ModelInputs

PAPER_NS = (1, 3, 5, 10)  # numbers of variants compared in SrDetection Tables 3 and 11


@dataclass(frozen=True)
class Decisions:
    """Per-sample SrDetection decisions for one number of variants n."""

    n: int
    leak: np.ndarray  # bool [samples]; False where undecided
    decided: np.ndarray  # bool [samples]
    variants_used: np.ndarray  # int [samples]: finite variant scores compared (<= n)
    margin: np.ndarray  # float [samples]: how far the original beats its best variant; NaN if undecided
    # The calibrated rule only: its exact p-value per sample (NaN if undecided).
    pvalue: np.ndarray | None = None
    # The clean-null rule only: the threshold each sample's margin was compared with (NaN if none), and
    # the rule's level alpha, its flag rate on clean samples (the null) in place of 1/(m+1).
    threshold: np.ndarray | None = None
    level: float | None = None

    @property
    def null_rate(self) -> np.ndarray:
        """Per sample, the chance the rule fires on a model that never saw it: 1/(m+1) with m the variants
        compared when the original and its variants are exchangeable; alpha for the clean-null rule (NaN
        if undecided)."""
        if self.level is not None:
            return np.where(self.decided, self.level, np.nan)
        return np.where(self.decided, 1.0 / (self.variants_used + 1.0), np.nan)

    @property
    def n_undecided(self) -> int:
        return int((~self.decided).sum())


def first_n_scores(variant_scores: np.ndarray | Sequence[Sequence[float]], n: int) -> np.ndarray:
    """[samples, n] array holding each row's first n finite scores, NaN-padded on the right."""
    scores = np.asarray(variant_scores, dtype=float)
    out = np.full((scores.shape[0], n), np.nan)
    for row, values in enumerate(scores):
        finite = values[np.isfinite(values)][:n]
        out[row, : len(finite)] = finite
    return out


def required_variants(n: int, min_variants: int | None) -> int:
    """Verified variants a decision at n needs: n (min_variants 0 or None, the paper), else min(n, it)."""
    return min(n, min_variants) if min_variants else n


def gray_box_decisions(
    original_ppl: np.ndarray | Sequence[float],
    variant_ppl: np.ndarray | Sequence[Sequence[float]],
    n: int | None = None,
    min_variants: int = 0,
) -> Decisions:
    """Leak iff PPL(original) < min over the first n variants' PPL (strict: ties are not leaks); a sample
    needs `required_variants(n, min_variants)` finite variant scores."""
    original = np.asarray(original_ppl, dtype=float)
    scores = np.asarray(variant_ppl, dtype=float)
    if scores.ndim != 2 or scores.shape[0] != original.shape[0]:
        raise ValueError(
            f"need original [samples] and variants [samples, variants]; got {original.shape} and {scores.shape}"
        )
    n = scores.shape[1] if n is None else n
    chosen = first_n_scores(scores, n)
    used = np.isfinite(chosen).sum(axis=1)
    decided = (used >= required_variants(n, min_variants)) & np.isfinite(original)
    # All-NaN rows are undecided anyway; fill them so nanmin does not warn.
    best = np.nanmin(np.where(decided[:, None], chosen, 0.0), axis=1)
    leak = decided & (original < best)
    margin = np.where(decided, best - original, np.nan)
    return Decisions(n=n, leak=leak, decided=decided, variants_used=used, margin=margin)


def decisions_by_n(
    original: np.ndarray | Sequence[float],
    variant_scores: np.ndarray | Sequence[Sequence[float]],
    mode: str,
    ns: Iterable[int] = PAPER_NS,
    min_variants: int = 0,
) -> dict[int, Decisions]:
    """Decisions for several n from one array of scores (mode "gray": lower PPL leaks, "black": higher
    NGO leaks; strict, so ties are not leaks)."""
    if mode not in ("gray", "black"):
        raise ValueError(f"mode must be 'gray' or 'black', got {mode!r}")
    # The black box is the gray rule on -NGO: leak iff -NGO(x_0) < min_i -NGO(x_i), margin NGO(x_0) - max_i.
    sign = 1.0 if mode == "gray" else -1.0
    original, variants = sign * np.asarray(original, float), sign * np.asarray(variant_scores, float)
    return {n: gray_box_decisions(original, variants, n, min_variants) for n in ns}


def calibrated_decisions(
    target_original: np.ndarray | Sequence[float],
    target_variants: np.ndarray | Sequence[Sequence[float]],
    reference_original: np.ndarray | Sequence[float],
    reference_variants: np.ndarray | Sequence[Sequence[float]],
    n: int | None = None,
    min_variants: int = 0,
    alpha: float = 0.0,
) -> Decisions:
    """The calibrated gray box (docs/detectors.md#srdetection-001-31): D_j = rank_reference(j) -
    rank_target(j) over the original and its first m <= n variants scored by both models (log PPL, ties
    share mid-ranks); margin D_0, p = #{j : D_j >= D_0} / (m + 1); leak iff D_0 > 0 and p <= max(alpha,
    1/(m+1))."""
    from scipy.stats import rankdata

    t0 = np.asarray(target_original, dtype=float)
    r0 = np.asarray(reference_original, dtype=float)
    tv = np.asarray(target_variants, dtype=float)
    rv = np.asarray(reference_variants, dtype=float)
    n = tv.shape[1] if n is None else n
    samples = t0.shape[0]
    leak = np.zeros(samples, dtype=bool)
    decided = np.zeros(samples, dtype=bool)
    used = np.zeros(samples, dtype=int)
    margin = np.full(samples, np.nan)
    pvalue = np.full(samples, np.nan)
    for s in range(samples):
        both = np.isfinite(tv[s]) & np.isfinite(rv[s])
        t = np.concatenate([[t0[s]], tv[s][both][:n]])
        r = np.concatenate([[r0[s]], rv[s][both][:n]])
        used[s] = len(t) - 1
        if used[s] < required_variants(n, min_variants) or not (np.isfinite(t0[s]) and np.isfinite(r0[s])):
            continue
        d = rankdata(r) - rankdata(t)  # mid-ranks: ties share the mean of their ranks
        decided[s] = True
        margin[s] = d[0]
        pvalue[s] = np.mean(d >= d[0])
        leak[s] = d[0] > 0 and pvalue[s] <= max(alpha, 1.0 / len(t)) + 1e-12
    return Decisions(n=n, leak=leak, decided=decided, variants_used=used, margin=margin, pvalue=pvalue)


def null_threshold(null_margins: np.ndarray | Sequence[float], alpha: float) -> float:
    """The ceil((1 - alpha)(m + 1))-th smallest of the m finite clean margins, which a new exchangeable
    clean sample exceeds with probability at most alpha (docs/detectors.md#srdetection-001-31); NaN
    when that rank exceeds m (no threshold at level alpha: the samples stay undecided)."""
    values = np.sort(np.asarray(null_margins, dtype=float))
    values = values[np.isfinite(values)]
    rank = math.ceil((1.0 - alpha) * (len(values) + 1) - 1e-9)
    return float(values[rank - 1]) if 1 <= rank <= len(values) else math.nan


def cross_fitted_thresholds(
    margin: np.ndarray | Sequence[float],
    known_clean: np.ndarray | Sequence[bool],
    alpha: float,
    *,
    folds: int = 5,
    seed: int = 0,
) -> np.ndarray:
    """Per sample, the `null_threshold` its margin is compared with: of the other seeded folds' clean
    margins for a known-clean sample (never its own), of all clean margins for every other sample."""
    m = np.asarray(margin, dtype=float)
    clean = np.asarray(known_clean).astype(bool)
    pool = np.flatnonzero(clean & np.isfinite(m))
    thresholds = np.full(len(m), null_threshold(m[pool], alpha))
    k = min(folds, len(pool))
    if k < 2:  # one clean margin cannot be compared with the others
        thresholds[pool] = math.nan
        return thresholds
    fold_of = np.random.default_rng(seed).permutation(len(pool)) % k
    for fold in range(k):
        thresholds[pool[fold_of == fold]] = null_threshold(m[pool[fold_of != fold]], alpha)
    return thresholds


def clean_null_decisions(
    base: Decisions, thresholds: np.ndarray | Sequence[float], alpha: float
) -> Decisions:
    """The clean-null rule on a raw rule's decisions: leak iff the raw margin exceeds the sample's
    threshold (strict, as the raw rules; the margin stays the raw one, so its AUROC is the raw rule's).
    Samples the raw rule left undecided, or without a threshold, are undecided (a sample without a
    threshold keeps its raw margin: the audit thresholds it against its clean set)."""
    t = np.asarray(thresholds, dtype=float)
    decided = base.decided & np.isfinite(t)
    with np.errstate(invalid="ignore"):
        leak = decided & (base.margin > t)
    return dataclasses.replace(base, leak=leak, decided=decided, threshold=t, level=alpha)


def clean_null_against_set(
    decisions: Decisions, clean_margins: np.ndarray | Sequence[float], alpha: float
) -> Decisions:
    """The clean-null rule on an audited benchmark: every sample's raw margin (`decisions.margin`, as the
    rule's `decide` left it without known-clean samples) against one threshold, the `null_threshold` of
    the clean set's margins under the same model; none of those is being decided."""
    raw = dataclasses.replace(decisions, decided=np.isfinite(decisions.margin))
    threshold = np.full(len(raw.leak), null_threshold(clean_margins, alpha))
    return clean_null_decisions(raw, threshold, alpha)


# --------------------------------------------------------------------------- settings and registry entries


@dataclass
class SrDetectionConfig:
    """SrDetection (§3.1): how variants are built, and the black box's prefix / suffix split."""

    choices: ClassVar[dict[str, tuple[str, ...]]] = {
        "split": ("solution", "text"),
        "verify": ("tests", "alpha", "none"),
    }

    n_variants: int = 10  # variants built per task; the detector spec's n values must not exceed it
    seed: int = 0  # seeds the names and example inputs of the variants
    # A decision at n needs n verified variants (0: the paper's rule); k > 0 accepts min(n, k), which mixes
    # comparisons with fewer variants (and a higher null) into a column. Fewer: undecided (not a leak).
    min_variants: int = 0
    # How each variant is checked before it is kept: "tests" runs the benchmark's own tests on it (in the
    # sandbox); "alpha" checks, without running anything, that its program is the original's under the
    # renaming (for benchmarks without tests); "none" only parses it. Failures are dropped.
    verify: str = "tests"
    replace_examples: bool = True  # tau_t: new example inputs, outputs from the canonical solution
    sandbox_workers: int = 2  # sandbox processes that verify variants in parallel
    sandbox_timeout_s: float = 10.0  # per test run
    # The black box cuts at `prefix_fraction` of the solution's tokens (the prompt stays in the prefix)
    # or, with split "text", of the whole text's: the paper does not say where it cut.
    split: str = "solution"
    prefix_fraction: float = 0.5  # where the black box cuts prefix from suffix (see split)
    ngram: int = 7  # N of the N-gram overlap, in tokens (App. A.1)
    max_new_tokens: int = 128  # suffixes longer than this are compared on their first max_new_tokens
    generation_batch_size: int = 64  # rows decoded together

    def check(self, parent=None) -> list[str]:
        """`evaluate.srdetection`'s own problems; a spec's n against n_variants is the detector's check."""
        problems = []
        for key in ("n_variants", "ngram", "max_new_tokens", "generation_batch_size"):
            if getattr(self, key) < 1:
                problems.append(f"evaluate.srdetection.{key}: must be at least 1, got {getattr(self, key)}")
        if self.min_variants < 0:
            problems.append(
                f"evaluate.srdetection.min_variants: must be 0 (all n) or more, got {self.min_variants}"
            )
        if self.sandbox_workers < 1 or self.sandbox_timeout_s <= 0:
            problems.append("evaluate.srdetection: sandbox_workers and sandbox_timeout_s must be positive")
        if not 0 < self.prefix_fraction < 1:
            problems.append(
                f"evaluate.srdetection.prefix_fraction: must be in (0, 1), got {self.prefix_fraction}"
            )
        return problems


VARIANTS = "variants"  # needs: the sample's verified variants
GENERATIONS = "generations"  # needs: greedy continuations of prefixes (black box)
CLEAN = "clean"  # needs: samples known not to be in training (a run's non-members; clean= in an audit)


def column_name(detector: str, n: int) -> str:
    """The score column of one n: "srdetection_gray@n=10"."""
    return f"{detector}@n={n}"


@dataclass
class SrRule:
    """What SrDetection's four rules share: n (numbers of variants compared; one score column each), its
    check, `decide` through `score_srdetection`, the metrics and the audit's rates of the decisions."""

    name: ClassVar[str]
    mode: ClassVar[str]
    needs: ClassVar[frozenset[str]]
    n: tuple[int, ...] = PAPER_NS

    def __post_init__(self) -> None:
        if not self.n or any(n < 1 for n in self.n) or len(set(self.n)) != len(self.n):
            raise ValueError(f"{self.name}: n must be distinct positive integers, got {list(self.n)}")

    def columns(self) -> dict[str, dict]:
        return {column_name(self.name, n): {"n": n} for n in self.n}

    def check(self, settings) -> list[str]:
        """n may not exceed the variants the recipe builds."""
        built = settings.srdetection.n_variants
        if max(self.n) > built:
            return [
                f"{self.name!r} compares up to n={max(self.n)} variants but evaluate.srdetection.n_variants is {built}"
            ]
        return []

    def decide(self, inputs: ModelInputs) -> RuleScores:
        """This rule on the shared `ModelInputs` (`detectors.score_detectors`)."""
        sr = score_srdetection([self], inputs)
        return RuleScores(sr.columns, sr.decisions, sr.info)

    def metrics(self, decisions, labels, *, n_bootstrap: int = 0, seed: int = 0) -> dict[str, float]:
        """`leaklab.metrics.rule_metrics` of the decisions (undecided = not a leak) plus `variants_mean`,
        the mean number of variants compared, and `null_flag_rate`, the non-members' flag rate expected if
        each original were exchangeable with its variants (the mean 1/(m+1), undecided samples count 0)."""
        out = rule_metrics(
            decisions.leak,
            labels,
            margin=decisions.margin,
            decided=decisions.decided,
            n_bootstrap=n_bootstrap,
            seed=seed,
        )
        out["variants_mean"] = (
            float(np.mean(decisions.variants_used)) if len(decisions.leak) else float("nan")
        )
        clean = ~np.asarray(labels).astype(bool)
        null = np.nan_to_num(decisions.null_rate[clean], nan=0.0)
        out["null_flag_rate"] = float(null.mean()) if clean.any() else float("nan")
        return out

    def audit_rates(self, decisions, *, n_bootstrap: int = 0, seed: int = 0) -> dict[str, float]:
        """What an audit (no labels) reports beside the leak rate: `null_rate` (mean `Decisions.null_rate`
        of the decided samples), `excess_pvalue` (the chance of at least this many leaks under it) and, for
        the calibrated rule, its p-values' median and how many are <= 0.05."""
        out: dict[str, float] = {}
        null = decisions.null_rate[decisions.decided]
        out["null_rate"] = float(null.mean()) if len(null) else float("nan")
        out["excess_pvalue"] = excess_rate_pvalue(decisions.leak[decisions.decided], null)
        if decisions.pvalue is not None:
            p = decisions.pvalue[decisions.decided]
            out["pvalue_median"] = float(np.median(p)) if len(p) else float("nan")
            out["n_pvalue_le_0.05"] = float((p <= 0.05).sum())
        return out


@dataclass
class SrDetectionGray(SrRule):
    """Leak iff the original has a lower perplexity than each of its first n variants."""

    name: ClassVar[str] = "srdetection_gray"
    mode: ClassVar[str] = "gray"
    needs: ClassVar[frozenset[str]] = frozenset({VARIANTS})


@dataclass
class SrDetectionCalibrated(SrRule):
    """Leak iff the target moves the original up its variant ranking more than a reference model does
    (exact p-value under exchangeability; see `calibrated_decisions`). The reference is the run's base
    model, or `evaluate.reference_model` in an audit."""

    name: ClassVar[str] = "srdetection_calibrated"
    mode: ClassVar[str] = "calibrated"
    needs: ClassVar[frozenset[str]] = frozenset({VARIANTS, "reference"})
    alpha: float = 0.0  # leak iff p <= max(alpha, 1/(m+1)); 0: the smallest p-value a sample can get

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.alpha < 1.0:
            raise ValueError(f"{self.name}: alpha must be in [0, 1), got {self.alpha}")

    def columns(self) -> dict[str, dict]:
        return {column_name(self.name, n): {"n": n, "alpha": self.alpha} for n in self.n}


@dataclass
class SrDetectionBlack(SrRule):
    """Leak iff the original's greedy suffix overlaps its true suffix more than any of n variants' does."""

    name: ClassVar[str] = "srdetection_black"
    mode: ClassVar[str] = "black"
    needs: ClassVar[frozenset[str]] = frozenset({VARIANTS, GENERATIONS})


@dataclass
class SrDetectionCleanNull(SrRule):
    """Leak iff the raw rule's margin (gray or black box, `base`) exceeds the `null_threshold` of the
    margins of samples known to be clean: a run's non-members, cross-fitted (`cross_fitted_thresholds`),
    or an audit's `clean=` set (`clean_null_against_set`). Without them nothing is decided."""

    name: ClassVar[str] = "srdetection_clean_null"
    mode: ClassVar[str] = "clean_null"
    needs: ClassVar[frozenset[str]] = frozenset({VARIANTS, CLEAN})
    base: str = "gray"  # the raw rule whose margin is thresholded: gray (PPL) or black (NGO)
    alpha: float = 0.05  # the flag rate allowed on clean samples

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.base not in ("gray", "black"):
            raise ValueError(f"{self.name}: base must be 'gray' or 'black', got {self.base!r}")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"{self.name}: alpha must be in (0, 1), got {self.alpha}")

    @property
    def family(self) -> str:
        """The column family: one per base, so a gray and a black clean-null rule never share columns."""
        return self.name if self.base == "gray" else f"{self.name}_black"

    def columns(self) -> dict[str, dict]:
        return {column_name(self.family, n): {"n": n, "base": self.base, "alpha": self.alpha} for n in self.n}

    def decide(self, inputs: ModelInputs) -> RuleScores:
        raw = SrDetectionGray(n=self.n) if self.base == "gray" else SrDetectionBlack(n=self.n)
        scored = raw.decide(inputs)
        known, folds, seed = inputs.known_clean, inputs.settings.cv_folds, inputs.settings.seed
        columns, decisions = {}, {}
        for n in self.n:
            base = scored.decisions[column_name(raw.name, n)]
            if known is None:
                thresholds = np.full(len(base.leak), np.nan)
            else:
                thresholds = cross_fitted_thresholds(base.margin, known, self.alpha, folds=folds, seed=seed)
            name = column_name(self.family, n)
            decisions[name] = clean_null_decisions(base, thresholds, self.alpha)
            columns[name] = decisions[name].margin
        return RuleScores(columns, decisions, scored.info)


# --------------------------------------------------------------------------- inputs


@dataclass
class SrInputs:
    """The originals and their verified variants as texts, each with its context (the text before the
    solution). Variant rows may be shorter than n_variants, or empty."""

    texts: list[str]
    contexts: list[str]
    variant_texts: list[list[str]]
    variant_contexts: list[list[str]]

    @property
    def width(self) -> int:
        return max((len(row) for row in self.variant_texts), default=0)

    def flat(self) -> tuple[list[str], list[str]]:
        """Originals first, then every variant row after row."""
        texts = self.texts + [t for row in self.variant_texts for t in row]
        contexts = self.contexts + [c for row in self.variant_contexts for c in row]
        return texts, contexts

    def unflatten(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-text values in `flat()` order -> (originals [N], variants [N, width] NaN-padded)."""
        values, start = np.asarray(values, dtype=float), len(self.texts)
        variants = np.full((start, self.width), np.nan)
        for row, texts in enumerate(self.variant_texts):
            variants[row, : len(texts)] = values[start : start + len(texts)]
            start += len(texts)
        return values[: len(self.texts)].copy(), variants


def inputs_from_tasks(tasks: Sequence[Any], variant_sets: Sequence[Any], text_format: str) -> SrInputs:
    """SrInputs from Task objects and their `VariantSet`s (same order)."""
    texts, contexts, v_texts, v_contexts = [], [], [], []
    for task, vs in zip(tasks, variant_sets, strict=True):
        if vs.task_id != task.task_id:
            raise ValueError(f"variant set of {vs.task_id!r} given for task {task.task_id!r}")
        text = task.text(text_format)
        texts.append(text)
        contexts.append(context_of(text, task.solution))
        row = [v.task.text(text_format) for v in vs.variants]
        v_texts.append(row)
        v_contexts.append([context_of(t, v.task.solution) for t, v in zip(row, vs.variants)])
    return SrInputs(texts, contexts, v_texts, v_contexts)


# --------------------------------------------------------------------------- gray box: PPL


def gray_scores(
    model, tokenizer, inputs: SrInputs, settings=None, *, accelerator=None, cache=None, info=None
) -> tuple[np.ndarray, np.ndarray]:
    """(originals [N], variants [N, width]) log perplexities (mean NLL) in ONE signal-engine call, with
    the baselines' settings and cache (the originals `ppl` scored are cache hits)."""
    from leaklab.signals.logprobs import ScoringSettings, compute_token_stats

    scoring = ScoringSettings.from_config(settings)
    texts, contexts = inputs.flat()
    stats = compute_token_stats(
        model,
        tokenizer,
        texts,
        prompts=contexts if scoring.scoring_span == "solution" else None,
        settings=scoring,
        distribution=False,
        accelerator=accelerator,
        cache=cache,
        info=info,
    )
    return inputs.unflatten(np.array([s.nll() for s in stats], dtype=float))


# --------------------------------------------------------------------------- black box: NGO


@dataclass(frozen=True)
class Cut:
    """One black-box query: the model continues `prefix`, which is compared with `truth` (token ids)."""

    prefix: str
    truth: tuple[int, ...]


def cut_text(
    tokenizer,
    text: str,
    context: str,
    split: str = "solution",
    prefix_fraction: float = 0.5,
    max_new_tokens: int = 128,
) -> Cut | None:
    """Where the black box cuts a text (None: nothing to continue or to compare): on a token boundary
    inside the solution (tokens with a character after `context`; split="text": the whole text), the
    prefix the text before that token, the truth its token ids on (at most `max_new_tokens`)."""
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("the black box needs a fast tokenizer (character offsets of tokens)")
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    start = len(context) if split == "solution" else 0
    region = [i for i, (_, end) in enumerate(offsets) if end > start]
    if not region:
        return None
    # The suffix keeps at least one token, so NGO is defined; the prefix too when there are two or more.
    cut = region[min(max(round(len(region) * prefix_fraction), 1), len(region) - 1)]
    prefix = text[: offsets[cut][0]]
    if not prefix:
        return None
    return Cut(prefix, tuple(ids[cut:])[:max_new_tokens])


def black_scores(inputs: ModelInputs, info: dict[str, Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """NGO of every original and variant of `inputs.rule_inputs` (NaN where the text cannot be cut),
    as `evaluate.srdetection` sets the cut. Each prefix ends on a token boundary of its text and is cut
    there (`evaluate.prompt_boundary`), so the generated ids line up with the text's own."""
    from leaklab.signals.continuations import Decoding, greedy_continuations

    sr, rule_inputs = inputs.settings.srdetection, inputs.rule_inputs
    texts, contexts = rule_inputs.flat()
    cuts = [
        cut_text(inputs.tokenizer, t, c, sr.split, sr.prefix_fraction, sr.max_new_tokens)
        for t, c in zip(texts, contexts)
    ]
    usable = [i for i, c in enumerate(cuts) if c is not None]
    generated = greedy_continuations(
        Decoding.of(inputs, batch_size=sr.generation_batch_size),
        [cuts[i].prefix for i in usable],
        [len(cuts[i].truth) for i in usable],
        info=info,
        sources=[texts[i] for i in usable],
    )
    ngo = np.full(len(texts), np.nan)
    for i, ids in zip(usable, generated):
        ngo[i] = ngram_overlap(ids, cuts[i].truth, n=sr.ngram)
    if info is not None:
        info["uncut"] = len(texts) - len(usable)
    return rule_inputs.unflatten(ngo)


# --------------------------------------------------------------------------- the pipeline entry point


@dataclass
class SrScores:
    """What `score_srdetection` returns: per score column the margin (higher = more member; > 0 iff the
    rule says leak, NaN when undecided) and the rule's decisions; the raw scores by mode."""

    columns: dict[str, np.ndarray] = field(default_factory=dict)
    decisions: dict[str, Decisions] = field(default_factory=dict)
    raw: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


def score_srdetection(detectors: Sequence[Any], inputs: ModelInputs) -> SrScores:
    """Run the gray, black and calibrated SrDetection rules among `detectors` on one model and the variants
    of `inputs.rule_inputs`, through the baselines' signal cache, `inputs.generator` (the black box) and
    `inputs.reference` (the calibrated rule). Call it on every rank; all get the full result."""
    sr = inputs.settings.srdetection
    if inputs.rule_inputs is None:  # the one error message, before any work
        raise ValueError("SrDetection needs each sample's variants (ModelInputs.rule_inputs)")
    result = SrScores()
    for mode in ("gray", "black", "calibrated"):
        mine = [d for d in detectors if d.mode == mode]
        if not mine:
            continue
        info: dict[str, Any] = {}
        if mode == "calibrated":
            if inputs.reference is None:
                raise ValueError(
                    "srdetection_calibrated needs a reference model (the run's base model, or "
                    "evaluate.reference_model in an audit)"
                )
            # The target's scores are the gray box's (a cache hit when srdetection_gray ran too).
            target = result.raw.get("gray") or inputs.variant_nlls(mode, info)
            raw = (*target, *inputs.variant_nlls(mode, info, inputs.reference))
        else:
            raw = inputs.variant_nlls(mode, info) if mode == "gray" else black_scores(inputs, info)
        result.raw[mode], result.info[mode] = raw, info
        for detector in mine:
            if mode == "calibrated":
                by_n = {
                    n: calibrated_decisions(*raw, n=n, min_variants=sr.min_variants, alpha=detector.alpha)
                    for n in detector.n
                }
            else:
                by_n = decisions_by_n(*raw, mode=mode, ns=detector.n, min_variants=sr.min_variants)
            for n, decisions in by_n.items():
                name = column_name(detector.name, n)
                result.columns[name] = decisions.margin
                result.decisions[name] = decisions
    return result
