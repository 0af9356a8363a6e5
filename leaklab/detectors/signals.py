"""The signals detectors read (their `needs`), in one table, SOURCES: what each asks of a run and how
`compute_signals` fills it, once per evaluation set, into the `Signals` the score detectors share.
Variants, generations and known-clean samples are read from `ModelInputs`; their rows only describe them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from leaklab.detectors.gradnorm import GRADIENTS
from leaklab.detectors.srdetection import CLEAN, GENERATIONS, VARIANTS

if TYPE_CHECKING:  # the registry is read at recipe load: keep torch out of that import
    from leaklab.detectors.inputs import ModelInputs
    from leaklab.signals.logprobs import ScoringSettings, SignalCache, TokenFrequencies, TokenStats

# What a detector can ask for; the evaluator computes each once.
TARGET = "target"  # token log-probs of the evaluated model on the text
DISTRIBUTION = "distribution"  # ... plus mean / variance of log p under its next-token distribution
LOWERCASE = "lowercase"  # token log-probs of the evaluated model on the lowercased text
REFERENCE = "reference"  # token log-probs of a reference model on the text (its own tokenizer)
FREQUENCIES = "frequencies"  # token frequencies of a reference corpus under the evaluated tokenizer


@dataclass
class Signals:
    """Everything the gray-box detectors read, one entry per text, computed once per evaluation."""

    spans: list[str]  # the scored text of each sample: the whole text, or its solution part
    target: list[TokenStats] | None = None
    lowercase: list[TokenStats] | None = None
    reference: list[TokenStats] | None = None
    frequencies: TokenFrequencies | None = None


@dataclass
class SignalPass:
    """One evaluation set on its way through the signal engine: what every source reads."""

    inputs: ModelInputs
    texts: list[str]
    prompts: list[str] | None  # None unless only the solution is scored
    needs: set[str]
    scoring: ScoringSettings
    cache: SignalCache
    counts: dict[str, Any] = field(default_factory=dict)  # per signal: the engine's counts (`info`)

    def token_stats(self, name: str, texts, prompts, distribution: bool = False, model=None):
        """`ModelInputs.token_stats` of `texts` (under the target model, or `model`), counted under `name`."""
        self.counts[name] = {}
        return self.inputs.token_stats(texts, prompts, self.scoring, self.counts[name], distribution, model)


def _target(run: SignalPass) -> list[TokenStats]:
    return run.token_stats("target", run.texts, run.prompts, DISTRIBUTION in run.needs)


def _lowercase(run: SignalPass) -> list[TokenStats]:
    from leaklab.signals.logprobs import lowercase_inputs

    return run.token_stats("lowercase", *lowercase_inputs(run.texts, run.prompts))


def _reference(run: SignalPass) -> list[TokenStats]:
    return run.token_stats("reference", run.texts, run.prompts, model=run.inputs.reference)


def _frequencies(run: SignalPass):
    """DC-PDD's corpus counts: the texts given, else `evaluate.dcpdd_corpus` ("builtin": the engine's)."""
    from leaklab.signals.logprobs import token_frequencies

    corpus, source = run.inputs.corpus_texts, run.inputs.settings.dcpdd_corpus
    if corpus is None and source != "builtin":
        from leaklab.data.corpora import corpus_texts

        corpus = corpus_texts(source)
    return token_frequencies(run.inputs.tokenizer, corpus, cache_dir=run.cache.directory)


@dataclass(frozen=True)
class Source:
    """One signal: what a detector that needs it asks of a run (in words), the `Signals` field it fills
    and how (None: not in `Signals`; the detector reads it from its `ModelInputs`)."""

    text: str
    field: str | None = None
    compute: Callable[[SignalPass], Any] | None = None


SOURCES: dict[str, Source] = {
    TARGET: Source("the model's token log-probs", "target", _target),
    # The distribution's moments come from the same pass as the log-probs (`_target` asks for them).
    DISTRIBUTION: Source(
        "the mean and variance of log p under the model's next-token distribution", "target", _target
    ),
    LOWERCASE: Source("log-probs of the lowercased text", "lowercase", _lowercase),
    REFERENCE: Source(
        "a reference model (evaluate.reference_model; a run's base model for SrDetection)",
        "reference",
        _reference,
    ),
    FREQUENCIES: Source("token frequencies of a corpus (evaluate.dcpdd_corpus)", "frequencies", _frequencies),
    VARIANTS: Source("verified variants of each task (built once per benchmark in the sandbox, cached)"),
    GENERATIONS: Source("generations from the model"),
    CLEAN: Source(
        "samples known not to be in training (a run's non-members, cross-fitted; clean= in an audit)"
    ),
    GRADIENTS: Source("the loss gradient of each sample (one forward and one backward pass per sample)"),
}


def compute_signals(inputs: ModelInputs, needs: set[str], info: dict[str, Any] | None = None) -> Signals:
    """The `Signals` that detectors needing `needs` read, each field computed once by its source.

    Under `scoring_span="solution"` only each text's solution is scored, conditioned on its prompt."""
    from leaklab.signals.logprobs import as_cache

    if REFERENCE in needs and inputs.reference is None:
        raise ValueError(
            "detector 'ref' needs a reference model: pass reference=(model, tokenizer) "
            "(the evaluator loads it from evaluate.reference_model)"
        )
    scoring = inputs.scoring()
    texts = list(inputs.texts)
    # Under the solution span the engine checks the prompts (one prefix per text), before any other signal.
    conditioned = scoring.scoring_span == "solution" and inputs.prompts is not None
    prompts = list(inputs.prompts) if conditioned else None
    run = SignalPass(inputs, texts, prompts, needs, scoring, as_cache(inputs.cache))
    spans = [t[len(p) :] for t, p in zip(texts, prompts)] if prompts is not None else texts
    signals = Signals(spans=spans)
    for name, source in SOURCES.items():
        if name in needs and source.compute is not None and getattr(signals, source.field) is None:
            setattr(signals, source.field, source.compute(run))
    if info is not None:
        info.update(run.counts)
    return signals
