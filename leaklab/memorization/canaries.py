"""How far a model has memorised the run's canaries (leaklab/data/canaries.py): exposure and extraction.

Exposure (Carlini et al., "The Secret Sharer", USENIX Security 2019, §4), estimated from a seeded
sample of M random secrets of the canary's format as the paper's §4.3 does:

    exposure = log2(M + 1) - log2(r),   r = 1 + #{candidates more likely than the true secret}

(ties in the secret's favour; see docs/evaluations.md#extraction-003-3-5). A secret's likelihood includes
its closing quote, so every candidate is tokenised the same way. Extraction: docs/evaluations.md#canaries.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from leaklab.data.canaries import Canary, draw_secret
from leaklab.metrics import percentile_intervals, resample_weights


@dataclass(frozen=True)
class Exposure:
    canary_id: str
    logprob: float  # log p(secret + closing quote | prefix) under the model, natural log
    rank: int  # 1 = more likely than every candidate
    n_candidates: int  # M
    exposure: float  # log2(M + 1) - log2(rank)


def candidates_for(canary: Canary, m: int, seed: int) -> list[str]:
    """M random secrets of the canary's format, none equal to its secret, seeded per canary so that
    every checkpoint ranks the secret against the same candidates."""
    rng = random.Random(f"canary.candidates:{seed}:{canary.id}")
    out: list[str] = []
    while len(out) < m:
        secret = draw_secret(canary.format, rng)
        if secret != canary.secret:
            out.append(secret)
    return out


def canary_exposure(
    model,
    tokenizer,
    canary: Canary,
    candidates: Sequence[str],
    *,
    settings=None,
    accelerator=None,
    cache=None,
) -> Exposure:
    """Exposure of one canary under the model, ranked against `candidates` (secrets of its format): each
    secret's log p(secret + '"' | prefix) is the sum of its tokens' log-probabilities."""
    from leaklab.signals.logprobs import ScoringSettings, compute_token_stats

    settings = replace(ScoringSettings.from_config(settings), scoring_span="solution")
    texts = [f'{canary.prefix}{s}"' for s in [canary.secret, *candidates]]
    stats = compute_token_stats(
        model, tokenizer, texts, prompts=[canary.prefix] * len(texts), settings=settings,
        distribution=False, accelerator=accelerator, cache=cache,
    )  # fmt: skip
    logprob, *others = (float(s.logprob.astype(np.float64).sum()) for s in stats)
    rank = 1 + sum(other > logprob for other in others)
    m = len(candidates)
    return Exposure(canary.id, logprob, rank, m, math.log2(m + 1) - math.log2(rank))


def canaries_in_outputs(outputs: Sequence[str], canaries: Sequence[Canary]) -> dict[str, bool]:
    """canary id -> whether its secret appears verbatim in any of the outputs."""
    return {c.id: any(c.secret in text for text in outputs) for c in canaries}


def by_dose(canaries: Sequence[Canary], values: dict[str, float]) -> dict[int, np.ndarray]:
    """dose -> the values of that dose group's canaries (in canary order), doses ascending."""
    groups: dict[int, list[float]] = {}
    for c in sorted(canaries, key=lambda c: c.dose or 0):
        groups.setdefault(int(c.dose or 0), []).append(float(values[c.id]))
    return {dose: np.asarray(v, dtype=np.float64) for dose, v in groups.items()}


def mean_with_interval(values: np.ndarray, n_bootstrap: int, seed: int) -> dict[str, float]:
    """mean, and its bootstrap 95% interval over the values (NaN without resamples or values)."""
    out = {"mean": float(values.mean()) if len(values) else math.nan, "ci_low": math.nan, "ci_high": math.nan}
    if len(values) and n_bootstrap > 0:
        weights = resample_weights([np.arange(len(values))], len(values), n=n_bootstrap, seed=seed)
        ci = percentile_intervals({"x": weights @ values / len(values)})
        out["ci_low"], out["ci_high"] = ci["x_ci_low"], ci["x_ci_high"]
    return out


# --------------------------------------------------------------------------- targeted extraction

# The decodings of a canary's own prompt, in the order they are tried: greedy (the most likely
# continuation), then `inject.canary_samples` samples at temperature 1 with top-k TOP_K.
STRATEGIES = ("greedy", "sampled")
TOP_K = 40  # top-k of the samples: the untargeted extraction's default (Unveiling memorization, §3)
MAX_NEW_TOKENS = 48  # room for the longest secret (an e-mail address, ~35 characters) and its quote


def canary_prompt(canary: Canary, document: str) -> str:
    """What an attacker who knows the secret's context prompts with (The Secret Sharer, §4: the
    canary's prefix): `document`, the member's text as it was trained, up to the secret, i.e. the text
    before the canary's line and its format prefix (`API_KEY = "sk-`). No character of the secret."""
    at = document.find(canary.line)
    if at < 0:
        raise ValueError(f"{canary.id}: its line {canary.line!r} is not in the member's document")
    return document[: at + len(canary.prefix)]


def extract_canaries(
    canaries: Sequence[Canary], prompts: dict[str, str], generate, n_samples: int, seed: int
) -> dict[str, str | None]:
    """canary id -> the first strategy (STRATEGIES) whose output of the canary's own prompt (`prompts`)
    holds its secret verbatim, None when none does. `generate(prompts, temperature=, n=, seed=)` returns
    each prompt's n output texts; canaries with the same prompt share its outputs."""
    distinct = sorted({prompts[c.id] for c in canaries})
    greedy = generate(distinct, temperature=0.0, n=1, seed=seed)
    sampled = (
        generate(distinct, temperature=1.0, n=n_samples, seed=seed) if n_samples > 0 else [[]] * len(distinct)
    )
    outputs = {
        "greedy": dict(zip(distinct, greedy, strict=True)),
        "sampled": dict(zip(distinct, sampled, strict=True)),
    }

    def found_by(canary: Canary) -> str | None:
        prompt = prompts[canary.id]  # one of `distinct`: every strategy has its outputs
        return next((s for s in STRATEGIES if any(canary.secret in t for t in outputs[s][prompt])), None)

    return {canary.id: found_by(canary) for canary in canaries}
