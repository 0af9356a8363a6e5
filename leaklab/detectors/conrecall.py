"""Con-ReCall (Wang et al., 2024, "Con-ReCall: Detecting Pre-training Data in LLMs via Contrastive
Decoding"): ReCaLL's conditional likelihood with a prefix P_m of k known members contrasted against a
prefix P_n of k known non-members (texts joined by blank lines, as ReCaLL's):

    conrecall@gamma=g  =  ( NLL(x | P_n) - g * NLL(x | P_m) ) / NLL(x)     HIGHER MEANS MORE LIKELY A MEMBER

(the paper writes it with LL = -NLL; the signs cancel in the ratio). Where the shots come from and how
many fit: see docs/detectors.md#pac-con-recall-samia-gradnorm-codec-pacost-and-the-sharded-order-test.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from leaklab.detectors.likelihood import TARGET, nll_ratio
from leaklab.detectors.recall import join_prefix, prefix_texts
from leaklab.detectors.srdetection import CLEAN
from leaklab.errors import InputError


def cross_fitted_shots(
    texts: list[str], known_clean, folds: int, seed: int
) -> list[tuple[list[str], list[str]]]:
    """Per sample, (member candidates, non-member candidates) from the OTHER folds' samples, each list in
    a seeded random order (the order shots are tried in): known_clean[i] True marks a non-member,
    False a member. A fold whose complement holds no member or no non-member gives empty lists."""
    clean = np.asarray(known_clean).astype(bool)
    n = len(texts)
    k = max(1, min(folds, n))
    fold_of = np.random.default_rng(seed).permutation(n) % k
    out: list[tuple[list[str], list[str]]] = [([], [])] * n
    for fold in range(k):
        others = np.flatnonzero(fold_of != fold)
        rng = random.Random(seed * 1000 + fold)
        members = [texts[i] for i in others if not clean[i]]
        non_members = [texts[i] for i in others if clean[i]]
        drawn = (rng.sample(members, len(members)), rng.sample(non_members, len(non_members)))
        for i in np.flatnonzero(fold_of == fold):
            out[i] = drawn
    return out


def fitting_shots(
    tokenizer, candidates: list[str], prompt: str, rest: str, max_length: int, k: int
) -> list[str]:
    """Up to k candidates, taken in order, each kept only if join_prefix(kept + [it]) + prompt + rest
    stays inside max_length tokens, counted as the engine counts them (the prompt with special tokens,
    the rest apart, without). A candidate too long to fit is skipped, not a reason to stop; at most 4k
    candidates are tried (tokenising is not free)."""
    rest_tokens = len(tokenizer(rest, add_special_tokens=False)["input_ids"]) if rest else 0
    kept: list[str] = []
    for candidate in candidates[: 4 * k]:
        head = join_prefix([*kept, candidate]) + prompt
        if len(tokenizer(head)["input_ids"]) + rest_tokens <= max_length:
            kept.append(candidate)
            if len(kept) == k:
                break
    return kept


@dataclass
class ConRecall:
    name: ClassVar[str] = "conrecall"
    needs: ClassVar[frozenset[str]] = frozenset({TARGET, CLEAN})  # CLEAN: or the shot files
    gamma: tuple[float, ...] = (0.5,)
    shots: int = 5  # at most this many of each kind per prefix (fewer where the context is short)
    members: str = ""  # JSONL of known member texts (with non_members; else cross-fitted labels)
    non_members: str = ""  # JSONL of known non-member texts
    folds: int = 2  # cross-fitting folds when the shots come from the evaluation's labels
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.gamma or self.shots < 1 or self.folds < 2:
            raise ValueError(
                f"conrecall: needs a gamma, shots >= 1 and folds >= 2, got gamma={list(self.gamma)}, "
                f"shots={self.shots}, folds={self.folds}"
            )
        if bool(self.members) != bool(self.non_members):
            raise ValueError("conrecall: give both members=FILE and non_members=FILE, or neither")
        for key, source in (("members", self.members), ("non_members", self.non_members)):
            if source and not source.endswith(".jsonl"):
                raise ValueError(f"conrecall: shot files must be .jsonl files, got {source!r}")
            if source:
                prefix_texts(source, f"conrecall:{key}")  # a bad file fails when the recipe loads

    def columns(self) -> dict[str, dict]:
        source = "files" if self.members else "cross-fitted"
        params = {"shots": self.shots, "source": source, "seed": self.seed}
        return {f"conrecall@gamma={g:g}": {"gamma": g, **params} for g in self.gamma}

    def shot_lists(self, inputs) -> list[tuple[list[str], list[str]]]:
        """Per sample, (member candidates, non-member candidates) in the order they are tried."""
        if self.members:
            rng = random.Random(self.seed)
            members, non_members = prefix_texts(self.members), prefix_texts(self.non_members)
            drawn = (rng.sample(members, len(members)), rng.sample(non_members, len(non_members)))
            return [drawn] * len(inputs.texts)
        known = inputs.known_clean
        if known is None or len(set(np.asarray(known).astype(bool).tolist())) < 2:
            raise InputError(
                "conrecall needs known members and non-members for its prefixes: name them with "
                "conrecall:members=FILE.jsonl,non_members=FILE.jsonl (no labels to cross-fit here)"
            )
        return cross_fitted_shots(inputs.texts, known, self.folds, self.seed)

    def run(self, inputs) -> dict[str, np.ndarray]:
        from leaklab.signals.logprobs import forward_length

        scoring = inputs.scoring()
        solution = scoring.scoring_span == "solution"
        contexts = inputs.contexts() if solution else [""] * len(inputs.texts)
        max_length = forward_length(scoring, inputs.model)

        plain = inputs.nlls(inputs.texts, contexts if solution else None, scoring)
        fitted, heads = [], {"member": [], "non_member": []}
        for i, candidates in enumerate(self.shot_lists(inputs)):
            text, context = inputs.texts[i], contexts[i]
            rest = text[len(context) :]
            member_shots, clean_shots = (
                fitting_shots(inputs.tokenizer, c, context, rest, max_length, self.shots) for c in candidates
            )
            k = min(len(member_shots), len(clean_shots))  # the same number of shots in both prefixes
            if k:
                fitted.append(i)
                heads["member"].append(join_prefix(member_shots[:k]))
                heads["non_member"].append(join_prefix(clean_shots[:k]))
        # The prefix is context, never scored: the engine's solution span with prefix (+ prompt) as prompt.
        conditional = dataclasses.replace(scoring, scoring_span="solution")
        cond = {}
        for kind, prefixes in heads.items():
            values = np.full(len(inputs.texts), np.nan)
            values[fitted] = inputs.nlls(
                [h + inputs.texts[i] for h, i in zip(prefixes, fitted)],
                [h + contexts[i] for h, i in zip(prefixes, fitted)],
                conditional,
            )
            cond[kind] = values
        inputs.info[self.name] = {"no_room": len(inputs.texts) - len(fitted)}
        return {
            f"conrecall@gamma={g:g}": nll_ratio(cond["non_member"] - g * cond["member"], plain)
            for g in self.gamma
        }
