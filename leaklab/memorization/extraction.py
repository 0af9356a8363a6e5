"""Extraction audit (003; strategies, rankings and taxonomy:
docs/evaluations.md#extraction-audit-tiny_extraction-evaluateevaluations-extraction): sample a model,
find what it copies of its corpus, rank, classify. Clones are searched in the continuation only, the
text the model wrote. Sensitive content is found by patterns (no dependency, explainable matches).
"""

from __future__ import annotations

import ast
import json
import math
import re
import sysconfig
import warnings
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from leaklab.data.corpora import stdlib_source_files
from leaklab.errors import InputError
from leaklab.metrics import percentile_intervals, spearman
from leaklab.rundir import text_sha256

if TYPE_CHECKING:
    from leaklab.signals.continuations import Decoding

STRATEGIES = ("non_prompt", "temperature_decay", "prompt_conditioned", "two_step", "discoverable")
RANKINGS = ("ppl", "ppl_ratio", "ppl_reference_ratio", "ppl_zlib", "window_ppl")
TEXT_SUFFIXES = (".py", ".txt", ".md", ".jsonl", ".json")
WINDOW_LINES = 6


# --------------------------------------------------------------------------- corpora


def builtin_documents() -> list[tuple[str, str]]:
    """The builtin corpus (what the tiny model pretrains on) as (name, text): the same texts, in the same
    order, as `leaklab.data.corpora.builtin_corpus_texts`, named by file or pydoc topic."""
    from pydoc_data.topics import topics

    root = Path(sysconfig.get_paths()["stdlib"])
    docs = []
    for path in stdlib_source_files():
        try:
            docs.append((path.relative_to(root).as_posix(), path.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError):
            continue
    docs.extend((f"pydoc:{key}", topics[key]) for key in sorted(topics))
    return [(name, text) for name, text in docs if text.strip()]


def held_out_files() -> list[Path]:
    """Python files next to the builtin corpus that it leaves out (the stdlib's test suites): the tiny
    model never saw them, so their function definitions are fair prompts."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for path in root.rglob("*.py"):
        parts = set(path.relative_to(root).parts[:-1])
        if parts & {"site-packages", "dist-packages", "__pycache__"}:
            continue
        if parts & {"test", "tests", "idle_test"} or path.name.startswith("test_"):
            out.append(path)
    return sorted(out)


@dataclass
class Corpus:
    documents: list[tuple[str, str]]
    skipped: Counter = field(default_factory=Counter)  # files left out, by reason


def load_corpus(source: str, key: str = "evaluate.extraction.corpus") -> Corpus:
    """`builtin`, a text file, a JSONL file (a "text", "content" or "code" field per line) or a directory
    (every .py/.txt/.md/.jsonl/.json file below it). Files that are not UTF-8 are counted and skipped;
    a path that does not exist, or holds no text, is one InputError naming `key`."""
    if source == "builtin":
        return Corpus(builtin_documents())
    path = Path(source).expanduser()
    if not path.exists():
        raise InputError(f"{key}: {source} does not exist (give 'builtin', a file or a directory)")
    files = (
        sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)
        if path.is_dir()
        else [path]
    )
    docs: list[tuple[str, str]] = []
    skipped: Counter = Counter()
    for file in files:
        name = file.relative_to(path).as_posix() if path.is_dir() else file.name
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            skipped["not utf-8"] += 1
            continue
        if file.suffix == ".jsonl":
            for n, line in enumerate(text.splitlines(), start=1):
                try:
                    row = json.loads(line) if line.strip() else None
                except json.JSONDecodeError:
                    row = None
                keys = ("text", "content", "code") if isinstance(row, dict) else ()
                value = next((row[k] for k in keys if isinstance(row.get(k), str)), None)
                if value is None:
                    skipped["jsonl line without text"] += bool(line.strip())
                    continue
                docs.append((f"{name}:{n}", value))
        else:
            docs.append((name, text))
    docs = [(n, t) for n, t in docs if t.strip()]
    if not docs:
        raise InputError(
            f"{key}: {source} holds no text ({', '.join(TEXT_SUFFIXES)} files, UTF-8, not empty)"
            + (f"; skipped {dict(skipped)}" if skipped else "")
        )
    return Corpus(docs, skipped)


# --------------------------------------------------------------------------- sampling


def temperature_decay(step: int, logits):
    """Logits processor: temperature max(1, 20 - t) at new token t (0-based), as Unveiling §4.3 does
    (20 at the first token, lowered by 1 per token until 1). The sampler then applies temperature 1."""
    return logits / max(1.0, 20.0 - step)


def start_prompt(tokenizer) -> str:
    """The 'no prompt' prompt: the empty string when the tokenizer adds a start token itself, else the
    text of its BOS (or EOS) token, so generation starts from one special token either way."""
    if tokenizer("")["input_ids"]:
        return ""
    token = tokenizer.bos_token or tokenizer.eos_token
    if token is None:
        raise InputError(
            "extraction: the tokenizer has neither a BOS nor an EOS token to start non-prompt sampling"
        )
    return token


def function_definitions(sources: Sequence[tuple[str, str]], n: int, seed: int = 0) -> list[str]:
    """Up to `n` function definitions (decorators + signature, up to the colon) from Python sources, drawn
    at random with `seed` (one per function; sources that do not parse are skipped)."""
    found = []
    for _name, text in sources:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # old escape sequences in some files
                tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError):
            continue
        lines = text.splitlines()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                body = node.body[0].lineno
                header = lines[first - 1 : max(first, body - 1)]
                if header and header[-1].rstrip().endswith(":"):
                    found.append("\n".join(header) + "\n")
    rng = np.random.default_rng(seed)
    if len(found) > n:
        found = [found[i] for i in sorted(rng.choice(len(found), n, replace=False))]
    return found


@dataclass
class Sample:
    strategy: str
    top_k: int
    prompt: str
    text: str  # the generated continuation (the prompt not included)
    prompt_boundary: str = "none"  # how the prompt ended for the model: cut | heal | none


def sample(
    decoding: Decoding,
    strategy: str,
    top_k: int,
    n: int,
    max_new_tokens: int,
    *,
    prompts: Sequence[str] = (),
    seed: int = 0,
) -> list[Sample]:
    """`n` sampled continuations for one strategy and top-k through leaklab's own decoder (top-k and a
    decaying temperature need it). prompt_conditioned cycles through `prompts`, two_step uses
    `prompts[0]` for all `n`, discoverable samples once from each prompt; the others ignore them."""
    from leaklab.signals.generation import HFGenerator

    processor = temperature_decay if strategy == "temperature_decay" else None
    tokenizer = decoding.tokenizer
    generator = HFGenerator(
        decoding.model,
        tokenizer,
        batch_size=decoding.batch_size,
        top_k=top_k,
        logits_processor=processor,
        prompt_boundary=decoding.prompt_boundary,
    )
    if strategy in ("non_prompt", "temperature_decay"):
        chosen, per_prompt = [start_prompt(tokenizer)], n
    elif strategy == "two_step":
        chosen, per_prompt = list(prompts[:1]), n
    elif strategy == "discoverable":
        chosen, per_prompt = list(prompts), 1
    else:
        chosen = [prompts[i % len(prompts)] for i in range(n)] if prompts else []
        per_prompt = 1
    if not chosen or n == 0:
        return []
    results = generator.generate(chosen, max_new_tokens, temperature=1.0, n=per_prompt, seed=seed)
    return [
        Sample(strategy, top_k, p, c.text, c.prompt_boundary)
        for p, completions in zip(chosen, results)
        for c in completions
    ]


def first_lines(text: str, n: int) -> str:
    """The first `n` non-blank lines of `text`, as written (blank lines between them kept), ending in a
    newline: discoverable extraction's prompt."""
    kept, seen = [], 0
    for line in text.splitlines():
        if seen == n:
            break
        kept.append(line)
        seen += bool(line.strip())
    return "\n".join(kept) + "\n"


# --------------------------------------------------------------------------- ranking without the corpus


def newline_counts(tokenizer) -> np.ndarray:
    """Newlines in the text of each token id (to place tokens on lines without re-tokenising)."""
    return np.array([tokenizer.decode([i]).count("\n") for i in range(len(tokenizer))], dtype=np.int64)


def window_ppl(
    logprob: np.ndarray, token_ids: np.ndarray, newlines: np.ndarray, lines: int = WINDOW_LINES
) -> float:
    """Average perplexity over windows of `lines` consecutive lines (stride one line), from the per-token
    log-probs of one pass. A token belongs to the line it starts on; lines without a scored token add
    nothing to a window; a text of fewer lines is one window. NaN when nothing was scored."""
    if len(logprob) == 0:
        return math.nan
    ids = np.clip(token_ids, 0, len(newlines) - 1)
    line = np.concatenate([[0], np.cumsum(newlines[ids])[:-1]])
    n_lines = int(line[-1]) + 1
    sums = np.bincount(line, weights=-logprob.astype(np.float64), minlength=n_lines)
    counts = np.bincount(line, minlength=n_lines).astype(np.float64)
    width = min(lines, n_lines)
    c_sum = np.concatenate([[0.0], np.cumsum(sums)])
    c_cnt = np.concatenate([[0.0], np.cumsum(counts)])
    w_sum = c_sum[width:] - c_sum[:-width]
    w_cnt = c_cnt[width:] - c_cnt[:-width]
    keep = w_cnt > 0
    return float(np.exp(w_sum[keep] / w_cnt[keep]).mean())


def ranking_scores(
    stats, texts: Sequence[str], newlines: np.ndarray, reference_stats=None, small_stats=None
) -> dict[str, np.ndarray]:
    """Per text, each ranking metric oriented higher = more likely memorised (NaN where undefined: an
    empty text; ppl_ratio, the paper's (Unveiling §3.3), without `small_stats`, a smaller model trained on
    the same data; and ppl_reference_ratio without `reference_stats`, a model that never saw it)."""
    nll = np.array([s.nll() for s in stats])
    out = {
        "ppl": -np.exp(nll),
        "ppl_zlib": -nll / np.array([max(1, len(zlib.compress(t.encode("utf-8")))) for t in texts]),
        "window_ppl": -np.array([window_ppl(s.logprob, s.token_ids, newlines) for s in stats]),
    }
    for name, other in (("ppl_ratio", small_stats), ("ppl_reference_ratio", reference_stats)):
        out[name] = np.full(len(stats), math.nan)
        if other is not None:
            # log PPL is the mean NLL: a small ratio (large negated) = more likely memorised
            with np.errstate(divide="ignore", invalid="ignore"):
                out[name] = -(nll / np.array([s.nll() for s in other]))
    return out


# --------------------------------------------------------------------------- sensitive content

SECRET_PATTERNS = {
    "email": re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"),
    "ipv4": re.compile(
        r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\d.])"
    ),
    "aws_key": re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    "private_key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    # A quoted value assigned to a name that says it is secret: the value is what counts.
    "assigned_secret": re.compile(
        r"(?i)(?:api[_-]?key|secret|token|passw(?:or)?d)\w*\s*[:=]\s*['\"]([^'\"\s]{8,})['\"]"
    ),
    # Long hexadecimal strings (hashes, keys): 32+ hex digits in quotes.
    "hex_key": re.compile(r"['\"]([0-9a-fA-F]{32,})['\"]"),
}


def find_secrets(text: str) -> list[tuple[str, str]]:
    """(kind, value) of every pattern match in a text (the value is the group when the pattern has one)."""
    return [
        (kind, m.group(1) if pattern.groups else m.group(0))
        for kind, pattern in SECRET_PATTERNS.items()
        for m in pattern.finditer(text)
    ]


def corpus_secrets(documents: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
    """Every (kind, value) the patterns find in the corpus: an output's match counts only if it is here."""
    return {s for _, text in documents for s in find_secrets(text)}


def mask(kind: str, value: str) -> str:
    """What a report shows instead of a value: its kind, length and a short hash (same value, same mask)."""
    return f"<{kind} len={len(value)} sha={text_sha256(value)[:8]}>"


def mask_text(text: str) -> str:
    """The text with every pattern match masked (any match, in the corpus or not)."""
    for kind, value in sorted(set(find_secrets(text)), key=lambda s: -len(s[1])):
        text = text.replace(value, mask(kind, value))
    return text


# --------------------------------------------------------------------------- taxonomy

TAGS = ("licence", "import", "definition", "docstring", "configuration", "other")
_LICENCE = re.compile(r"(?i)copyright|licen[cs]e|all rights reserved|spdx-|permission is hereby granted")
_IMPORT = re.compile(r"^(?:import \S|from \S+ import )")
_DEFINITION = re.compile(r"^(?:async def |def |class |@\w)")
_ASSIGNMENT = re.compile(r"^(?:[A-Za-z_][\w.]*\s*(?::[^=]+)?=\s*\S|['\"][^'\"]+['\"]\s*:\s*\S)")


def taxonomy(snippet: str) -> list[str]:
    """Rule-based tags of a memorised snippet (normalised lines), ['other'] when no rule fires; import
    and configuration (assignments, dict entries) need half or more of the lines."""
    lines = snippet.splitlines() or [""]
    tags = []
    if _LICENCE.search(snippet):
        tags.append("licence")
    if sum(bool(_IMPORT.match(x)) for x in lines) * 2 >= len(lines):
        tags.append("import")
    if any(_DEFINITION.match(x) for x in lines):
        tags.append("definition")
    if '"""' in snippet or "'''" in snippet or any(x.startswith(">>>") for x in lines):
        tags.append("docstring")
    if sum(bool(_ASSIGNMENT.match(x)) for x in lines) * 2 >= len(lines):
        tags.append("configuration")
    return tags or ["other"]


# --------------------------------------------------------------------------- exposure and extraction


def exposure_spearman(exposures, occurrences, *, n_bootstrap: int = 0, seed: int = 0) -> dict[str, float]:
    """Unveiling's frequency finding (§4.3) with the exposure controlled: Spearman between each member's
    training exposures and the outputs that reproduce it (0 for a member never extracted), with a
    percentile interval over resampled members when `n_bootstrap` > 0."""
    x = np.asarray(exposures, dtype=np.float64)
    y = np.asarray(occurrences, dtype=np.float64)
    out = {"exposure_spearman": spearman(x, y), "n_members": float(len(x))}
    if n_bootstrap > 0 and len(x) >= 2:
        rng = np.random.default_rng(seed)
        draws = []
        for _ in range(n_bootstrap):
            pick = rng.integers(0, len(x), len(x))
            draws.append(spearman(x[pick], y[pick]))  # NaN when a resample is constant: ignored
        out.update(percentile_intervals({"exposure_spearman": np.array(draws, dtype=np.float64)}))
    return out
