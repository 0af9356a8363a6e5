"""`leaklab counterfactual`: two models outside a run, a corpus of Python files, the paper's tables.

    leaklab counterfactual --target M1 --reference M2 --corpus PATH [--out DIR] [options]

M1 / M2: hub names or local model directories. PATH: a .py file, a directory (every *.py below it) or
a JSONL file, one source per line in a "code", "content" or "text" field (an "id" field names it).
Writes DIR/pairs.jsonl (per function), DIR/tables.json (Table 1, Table 2) and prints both tables.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from leaklab.errors import InputError
from leaklab.memorization.counterfactual import (
    FunctionFilter,
    extract_functions,
    generate_functions,
    memorized_by,
    score_functions,
    table1,
    table2,
)
from leaklab.rows import float_or_none
from leaklab.rundir import write_atomic


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="leaklab counterfactual", description=__doc__.split("\n")[0])
    p.add_argument("--target", required=True, help="the model exposed to the corpus")
    p.add_argument("--reference", required=True, help="a model not exposed to it")
    p.add_argument("--corpus", required=True, help=".py file, directory of .py files, or JSONL")
    p.add_argument("--out", default="counterfactual_out")
    p.add_argument("--context-tokens", type=int, default=250)
    p.add_argument("--max-new-tokens", type=int, default=500)
    p.add_argument("--min-body-lines", type=int, default=10)
    p.add_argument("--max-body-lines", type=int, default=50)
    p.add_argument("--min-chars", type=int, default=500)
    p.add_argument("--max-functions", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=2, help="similarity suite processes")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--tau", type=float, default=0.75)
    return p


def corpus_sources(path: str | Path) -> list[tuple[str, str]]:
    """(source id, text) of every source in the corpus; a missing or empty corpus is an InputError."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"--corpus {path}: no such file or directory")
    if path.is_dir():
        files = sorted(path.rglob("*.py"))
        sources = [(str(f.relative_to(path)), f.read_text(encoding="utf-8", errors="replace")) for f in files]
    elif path.suffix == ".jsonl":
        sources = []
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(f"--corpus {path}: line {n} is not JSON ({err.msg})") from None
            text = next((row[k] for k in ("code", "content", "text") if isinstance(row.get(k), str)), None)
            if text is None:
                raise InputError(f"--corpus {path}: line {n} has no 'code', 'content' or 'text' string")
            sources.append((str(row.get("id", n)), text))
    else:
        sources = [(path.name, path.read_text(encoding="utf-8", errors="replace"))]
    if not sources:
        raise InputError(f"--corpus {path}: no Python sources found")
    return sources


def _generate(name: str, samples, args, cache_dir: Path) -> list[dict]:
    from leaklab.models.load import load_model, load_tokenizer
    from leaklab.signals.continuations import Decoding, GenerationCache

    model = load_model(name, args.dtype, False, key=name)
    model.eval()
    tokenizer = load_tokenizer(name, False, key=name)
    decoding = Decoding(model, tokenizer, cache=GenerationCache(cache_dir), batch_size=args.batch_size)
    return generate_functions(decoding, samples, args.context_tokens, args.max_new_tokens)


def _corpus_functions(args, keep) -> list:
    """The functions of --corpus that pass the filter, at most --max-functions; none is bad input."""
    samples, skipped = [], Counter()
    for source_id, text in corpus_sources(args.corpus):
        found, why = extract_functions(text, source_id, keep)
        samples += found
        skipped.update(why)
    if args.max_functions is not None:
        samples = samples[: args.max_functions]
    if not samples:
        raise InputError(
            f"--corpus {args.corpus}: no function passes the filter ({keep.describe()}); skipped {dict(skipped)}"
        )
    print(f"[leaklab] counterfactual: {len(samples)} functions ({keep.describe()}); skipped {dict(skipped)}")
    return samples


def main(argv: list[str]) -> int:
    from leaklab.similarity.suite import FUNCTIONAL_METRICS, METRICS, provenance

    args = parser().parse_args(argv)
    keep = FunctionFilter(args.min_body_lines, args.max_body_lines, args.min_chars)
    samples = _corpus_functions(args, keep)
    out = Path(args.out)
    target = _generate(args.target, samples, args, out / "cache")
    reference = _generate(args.reference, samples, args, out / "cache")
    t_scores, r_scores = score_functions(samples, target, reference, args.workers)
    lines = []
    for s, tf, rf, ts, rs in zip(samples, target, reference, t_scores, r_scores):
        lines.append(
            json.dumps(
                {
                    "sample_id": s.sample_id,
                    "target_function": tf["body"],
                    "target_failure": tf["failure"],
                    "reference_function": rf["body"],
                    "reference_failure": rf["failure"],
                    "prompt_boundary": tf["prompt_boundary"],  # cut | heal | none: how the prompt ended
                    "target": {m: float_or_none(ts[m]) for m in METRICS},
                    "reference": {m: float_or_none(rs[m]) for m in METRICS},
                    "memorized_by": memorized_by(ts, rs, FUNCTIONAL_METRICS, args.tau, args.tau),
                }
            )
            + "\n"
        )
    write_atomic(out / "pairs.jsonl", "".join(lines))
    t1 = table1(t_scores, r_scores, METRICS)
    t2 = table2(t_scores, r_scores, FUNCTIONAL_METRICS, args.tau, args.tau)
    t2.pop("flagged")
    tables = {
        "target": args.target,
        "reference": args.reference,
        "filter": keep.describe(),
        "n_functions": len(samples),
        "extraction_failed": {
            "target": sum(f["body"] is None for f in target),
            "reference": sum(f["body"] is None for f in reference),
        },
        "table1": t1,
        "table2": t2,
        "similarity": provenance(),
    }
    write_atomic(out / "tables.json", json.dumps(tables, indent=2))
    print(format_tables(t1, t2))
    print(f"[leaklab] wrote {out / 'pairs.jsonl'} and {out / 'tables.json'}")
    return 0


def format_tables(t1: list[dict], t2: dict) -> str:
    """The paper's Table 1 (mean ± std, target / reference / delta) and Table 2 (counts) as text."""
    lines = [f"{'metric':18} {'n':>5} {'target':>15} {'reference':>15} {'delta':>8}"]
    for row in t1:
        if not row.get("n"):
            lines.append(f"{row['metric']:18} {0:5d} {'-':>15} {'-':>15} {'-':>8}")
            continue
        lines.append(
            f"{row['metric']:18} {row['n']:5d} {row['target_mean']:7.3f} ± {row['target_std']:5.3f} "
            f"{row['reference_mean']:7.3f} ± {row['reference_std']:5.3f} {row['delta']:+8.3f}"
        )
    n = max(t2["n"], 1)
    lines.append("")
    lines.append(f"{'counterfactually memorized':30} {'count':>6} {'share':>7}")
    for metric, count in t2["counts"].items():
        lines.append(f"{metric:30} {count:6d} {count / n:7.1%}")
    for name, key in (
        ("unique (any metric)", "unique_over_metrics"),
        ("near-verbatim (BLEU)", "near_verbatim_bleu"),
    ):
        lines.append(f"{name:30} {t2[key]:6d} {t2[key] / n:7.1%}")
    return "\n".join(lines)
