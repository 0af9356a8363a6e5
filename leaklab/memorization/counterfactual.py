"""Counterfactual functional memorization (000 §3): functions, prompts, extraction, criterion.

A sample is one Python function split into its context (the source before it), its signature (the
`def` line(s), decorators and docstring left out) and its ground truth (all after the signature,
docstring included: 000 App. E.1). The criterion, with T the target and R the reference
(docs/evaluations.md#counterfactual-memorization-000-3):
    SIM_text(x, x_T) < tau_text,  SIM_func(x, x_T) >= tau_func,  SIM_func(x, x_R) < tau_func
"""

from __future__ import annotations

import ast
import math
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class FunctionFilter:
    """Which functions become samples (the paper's defaults)."""

    min_body_lines: int = 10
    max_body_lines: int = 50
    min_chars: int = 500  # of the whole function, signature and docstring included

    def describe(self) -> str:
        return (
            f"body {self.min_body_lines}-{self.max_body_lines} lines, >= {self.min_chars} chars, not __init__"
        )


@dataclass(frozen=True)
class FunctionSample:
    sample_id: str  # "<source id>::<qualified name>"
    source_id: str
    name: str
    context: str
    signature: str
    ground_truth: str

    @property
    def function(self) -> str:
        return self.signature + self.ground_truth


def extract_functions(
    source: str, source_id: str, keep: FunctionFilter | None = None
) -> tuple[list[FunctionSample], Counter]:
    """Every function (methods and nested ones too) of `source` that passes `keep`, and why the rest did not."""
    keep = keep or FunctionFilter()
    skipped: Counter = Counter()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        skipped["source does not parse"] += 1
        return [], skipped
    lines = source.splitlines(keepends=True)
    samples = []
    for qualname, node in _functions(tree):
        if node.name == "__init__":
            skipped["excluded name"] += 1
            continue
        body = node.body
        docstring = ast.get_docstring(node, clean=False) is not None
        code = body[1:] if docstring else body
        if not code:
            skipped["no body after the docstring"] += 1
            continue
        start = node.lineno - 1  # the `def` line (decorators stay in the context)
        sig_end = _signature_end(lines, start, body[0].lineno - 1)
        if sig_end is None:
            skipped["body on the def line"] += 1
            continue
        # The length filter counts the code after the docstring; the ground truth is everything after the
        # signature, docstring and leading comments included, as the paper's App. E.1 shows it.
        code_start = body[0].end_lineno if docstring else sig_end
        end = node.end_lineno
        body_lines = [line for line in lines[code_start:end] if line.strip()]
        function_text = "".join(lines[start:end])
        if not keep.min_body_lines <= len(body_lines) <= keep.max_body_lines:
            skipped["body lines out of range"] += 1
            continue
        if len(function_text) < keep.min_chars:
            skipped["too short"] += 1
            continue
        samples.append(
            FunctionSample(
                sample_id=f"{source_id}::{qualname}",
                source_id=source_id,
                name=node.name,
                context="".join(lines[:start]),
                signature="".join(lines[start:sig_end]),
                ground_truth="".join(lines[sig_end:end]),
            )
        )
    return samples, skipped


def _signature_end(lines: list[str], start: int, first_statement: int) -> int | None:
    """Index of the first line after the signature: the shortest run of lines from `start` that parses
    as a `def` header (with a placeholder body), or None when the body shares the header's line."""
    indent = len(lines[start]) - len(lines[start].lstrip())
    for end in range(start + 1, first_statement + 1):
        header = "".join(line[indent:] if line[:indent].isspace() else line for line in lines[start:end])
        try:
            ast.parse(header.rstrip("\n") + "\n    pass\n")
        except (SyntaxError, ValueError):
            continue
        return end
    return None


def _functions(tree: ast.AST, prefix: str = ""):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node
            yield from _functions(node, prefix + node.name + ".")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, prefix + node.name + ".")
        else:
            yield from _functions(node, prefix)


def build_prompt(sample: FunctionSample, max_context_tokens: int, count_tokens: Callable[[str], list]) -> str:
    """Up to `max_context_tokens` tokens of the context (its end; `count_tokens(text)` -> the tokens), then
    the signature without docstring. The context is cut at a line start, never mid-token."""
    context = sample.context
    if max_context_tokens <= 0:
        return sample.signature
    if len(count_tokens(context)) > max_context_tokens:
        kept: list[str] = []
        for line in reversed(context.splitlines(keepends=True)):
            if len(count_tokens("".join([line, *kept]))) > max_context_tokens:
                break
            kept.insert(0, line)
        context = "".join(kept)
    return context + sample.signature


@dataclass(frozen=True)
class Extracted:
    body: str | None  # the function body (lines after the signature), None on failure
    failure: str = ""


def extract_function(signature: str, continuation: str) -> Extracted:
    """One valid function out of a generation that continued `signature`: the lines indented deeper
    than the `def` up to the first that is not, cut to the longest prefix that parses."""
    if not continuation.strip():
        return Extracted(None, "empty generation")
    def_line = next(
        (line for line in signature.splitlines() if line.lstrip().startswith(("def ", "async def "))), ""
    )
    indent = len(def_line) - len(def_line.lstrip())
    kept = []
    for line in continuation.splitlines(keepends=True):
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    if not kept:
        return Extracted(None, "no indented body")
    base = signature if signature.endswith("\n") else signature + "\n"
    for end in range(len(kept), 0, -1):
        body = "".join(kept[:end])
        if not body.endswith("\n"):
            body += "\n"
        try:
            ast.parse(_dedent_def(base + body, indent))
        except (SyntaxError, ValueError):
            continue
        return Extracted(body)
    return Extracted(None, "no prefix of the body parses")


def generate_functions(
    decoding, samples: Sequence[FunctionSample], context_tokens: int, max_new_tokens: int
) -> list[dict]:
    """Per sample, {"body": the function extracted from the greedy continuation or None, "failure": why,
    "raw": the continuation, "prompt_boundary"}; each prompt is cut at a token boundary of its sample's
    text (context, signature, true body)."""
    from leaklab.signals.continuations import greedy_replies
    from leaklab.signals.generation import prompt_boundaries

    tokenizer = decoding.tokenizer

    def count(text: str) -> list:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    prompts = [build_prompt(s, context_tokens, count) for s in samples]
    sources = [p + s.ground_truth for p, s in zip(prompts, samples)]
    raws = greedy_replies(decoding, prompts, max_new_tokens, sources=sources)
    applied = prompt_boundaries(tokenizer, prompts, decoding.prompt_boundary, sources)
    out = []
    for sample, raw, how in zip(samples, raws, applied):
        extracted = extract_function(sample.signature, raw)
        out.append({"body": extracted.body, "failure": extracted.failure, "raw": raw, "prompt_boundary": how})
    return out


def _dedent_def(code: str, indent: int) -> str:
    # A method's `def` is indented; parse it as if it were at the top level.
    if indent == 0:
        return code
    return "".join(
        line[indent:] if line[:indent].isspace() else line.lstrip() for line in code.splitlines(True)
    )


def score_unparsed_as_zero(scores: list[dict], functions: list[dict]) -> None:
    """A generation without a parsable function shares no structure with the ground truth: its structural
    metrics are 0, not missing, so Table 1's means stay over all functions (000 §4 averages over all
    7,422); the reason stays in `missing`. A ground truth without structure stays missing."""
    from leaklab.similarity.suite import STRUCTURE_METRICS

    for row, function in zip(scores, functions):
        if function["body"] is not None:
            continue
        for metric in STRUCTURE_METRICS:
            reason = row["missing"].get(metric, "")
            if math.isnan(row[metric]) and reason.startswith("candidate"):
                row[metric] = 0.0
                row["missing"][metric] = reason + " (no function: scored 0)"


def score_functions(samples, target: list[dict], reference: list[dict], workers: int):
    """(target scores, reference scores): the similarity suite on each side's functions against the
    ground truth, a failed extraction compared as text (its raw continuation), structure then scored 0."""
    from leaklab.similarity.suite import Pair, score_pairs

    pairs = [
        Pair(f["body"] if f["body"] is not None else f["raw"], s.ground_truth, prefix=s.signature)
        for functions in (target, reference)
        for s, f in zip(samples, functions)
    ]
    scores = score_pairs(pairs, workers=workers)
    t_scores, r_scores = scores[: len(samples)], scores[len(samples) :]
    score_unparsed_as_zero(t_scores, target)
    score_unparsed_as_zero(r_scores, reference)
    return t_scores, r_scores


# --------------------------------------------------------------------------- criterion and tables

TEXT_METRIC = "bleu"
TAU = 0.75


def counterfactually_memorized(
    text_target: float,
    func_target: float,
    func_reference: float,
    tau_text: float = TAU,
    tau_func: float = TAU,
) -> bool | None:
    """The paper's criterion; None when a score is missing (NaN)."""
    if any(math.isnan(v) for v in (text_target, func_target, func_reference)):
        return None
    return text_target < tau_text and func_target >= tau_func and func_reference < tau_func


def memorized_by(target: dict, reference: dict, metrics: Sequence[str], tau_text: float, tau_func: float):
    """The metrics among `metrics` by which one sample (its target and reference scores) is
    counterfactually memorized."""
    return [
        m
        for m in metrics
        if counterfactually_memorized(target[TEXT_METRIC], target[m], reference[m], tau_text, tau_func)
    ]


def table1(target: Sequence[dict], reference: Sequence[dict], metrics: Sequence[str]) -> list[dict]:
    """Per metric: mean and std over samples scored on both sides, for target and reference, and the delta."""
    rows = []
    for metric in metrics:
        pairs = [
            (t[metric], r[metric])
            for t, r in zip(target, reference)
            if not (math.isnan(t[metric]) or math.isnan(r[metric]))
        ]
        if not pairs:
            rows.append({"metric": metric, "n": 0})
            continue
        ts, rs = [p[0] for p in pairs], [p[1] for p in pairs]
        rows.append(
            {
                "metric": metric,
                "n": len(pairs),
                "target_mean": statistics.fmean(ts),
                "target_std": statistics.pstdev(ts),
                "reference_mean": statistics.fmean(rs),
                "reference_std": statistics.pstdev(rs),
                "delta": statistics.fmean(ts) - statistics.fmean(rs),
            }
        )
    return rows


def table2(
    target: Sequence[dict],
    reference: Sequence[dict],
    metrics: Sequence[str],
    tau_text: float = TAU,
    tau_func: float = TAU,
    exclude: str | None = None,
) -> dict:
    """Counts of counterfactually memorized samples per functional metric, and the union over all of
    them (the paper's "Unique (any metric)") and without `exclude` (its "Unique (excl. Nikiema)"); the
    text metric counts near-verbatim (target >= tau, reference < tau), exact matches likewise."""
    flagged: dict[str, set[int]] = {}
    for metric in metrics:
        if metric == TEXT_METRIC:
            continue
        flagged[metric] = {
            i
            for i, (t, r) in enumerate(zip(target, reference))
            if counterfactually_memorized(t[TEXT_METRIC], t[metric], r[metric], tau_text, tau_func)
        }
    verbatim = {
        i
        for i, (t, r) in enumerate(zip(target, reference))
        if t[TEXT_METRIC] >= tau_text and r[TEXT_METRIC] < tau_text
    }
    # The paper's exact-match count (000 §4): the target reproduces x exactly, the reference does not.
    exact = {
        i
        for i, (t, r) in enumerate(zip(target, reference))
        if t.get("exact_match", 0.0) == 1.0 and r.get("exact_match", 0.0) < 1.0
    }
    union = set().union(*flagged.values()) if flagged else set()
    kept = set().union(*(s for m, s in flagged.items() if m != exclude)) if flagged else set()
    return {
        "n": len(target),
        "counts": {m: len(s) for m, s in flagged.items()},
        "unique_over_metrics": len(union),
        "unique_excluding": len(kept),
        "excluded": exclude,
        f"near_verbatim_{TEXT_METRIC}": len(verbatim),
        "exact_verbatim": len(exact),
        "flagged": {m: sorted(s) for m, s in flagged.items()},
    }


def most_lenient(counts: dict[str, int], judges: Sequence[str]) -> str | None:
    """The judge that flags the most samples (the first of a tie), or None with fewer than two judges:
    the paper leaves its most lenient judge (Nikiema's, 14% against 4%) out of its second union."""
    asked = [j for j in judges if j in counts]
    if len(asked) < 2:
        return None
    return max(asked, key=lambda j: counts[j])


# --------------------------------------------------------------------------- figures


def plots(records: list[dict], out: str | Path) -> list[Path]:
    """Three PNGs from the evaluation's per-function records (scores/step-N/counterfactual.jsonl):
    target vs reference per metric, delta vs target BLEU (structural metrics), Pearson correlations
    between the metrics; members and non-members coloured. Returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    metrics = list(records[0]["target"])
    colour = {1: "tab:red", 0: "tab:blue"}

    paths: list[Path] = []

    def save(fig, name: str) -> None:
        fig.tight_layout()
        paths.append(out / name)
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)

    def value(record, side, metric):
        v = record[side].get(metric)
        return math.nan if v is None else v

    cols = 4
    rows = math.ceil(len(metrics) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        for label, name in ((1, "members"), (0, "non-members")):
            pts = [
                (value(r, "reference", metric), value(r, "target", metric))
                for r in records
                if r["label"] == label
            ]
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=8, alpha=0.6, c=colour[label], label=name)
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8)
        ax.set(title=metric, xlabel="reference", ylabel="target", xlim=(-0.02, 1.02), ylim=(-0.02, 1.02))
    for ax in list(axes.flat)[len(metrics) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    save(fig, "target_vs_reference.png")

    from leaklab.similarity.suite import TEXT_METRICS

    structural = [m for m in metrics if m not in TEXT_METRICS]
    fig, axes = plt.subplots(1, len(structural), figsize=(3.2 * len(structural), 3.0), squeeze=False)
    for ax, metric in zip(axes.flat, structural):
        for label, name in ((1, "members"), (0, "non-members")):
            sel = [r for r in records if r["label"] == label]
            ax.scatter([value(r, "target", "bleu") for r in sel],
                       [value(r, "target", metric) - value(r, "reference", metric) for r in sel],
                       s=8, alpha=0.6, c=colour[label], label=name)  # fmt: skip
        ax.axhline(0, color="grey", lw=0.8)
        ax.axvline(0.75, color="grey", lw=0.8, ls="--")
        ax.set(title=f"{metric} delta", xlabel="target BLEU", ylabel="target - reference")
    save(fig, "delta_vs_bleu.png")

    table = np.array([[value(r, "target", m) for m in metrics] for r in records], dtype=float)
    corr = np.full((len(metrics), len(metrics)), np.nan)
    for i in range(len(metrics)):
        for j in range(len(metrics)):
            ok = ~np.isnan(table[:, i]) & ~np.isnan(table[:, j])
            if ok.sum() > 2 and table[ok, i].std() > 0 and table[ok, j].std() > 0:
                corr[i, j] = np.corrcoef(table[ok, i], table[ok, j])[0, 1]
    fig, ax = plt.subplots(figsize=(7, 6))
    image = ax.imshow(corr, vmin=-1, vmax=1, cmap="coolwarm")
    ax.set_xticks(range(len(metrics)), metrics, rotation=90, fontsize=7)
    ax.set_yticks(range(len(metrics)), metrics, fontsize=7)
    fig.colorbar(image, ax=ax, label="Pearson r of the target scores (blank: constant, or < 3 pairs)")
    save(fig, "metric_correlations.png")
    return paths
