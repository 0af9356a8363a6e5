"""Signals computed once per evaluation and shared by every detector (see `logprobs` for token statistics)."""

from leaklab.signals.logprobs import (
    ScoringSettings,
    SignalCache,
    TokenFrequencies,
    TokenStats,
    compute_token_stats,
    lowercase_inputs,
    model_fingerprint,
    token_frequencies,
    tokenizer_fingerprint,
)

__all__ = [
    "ScoringSettings",
    "SignalCache",
    "TokenFrequencies",
    "TokenStats",
    "compute_token_stats",
    "lowercase_inputs",
    "model_fingerprint",
    "token_frequencies",
    "tokenizer_fingerprint",
]
