"""Clone detection speed: the line-hash index vs a naive line-by-line scan, measured in one run.

    .venv/bin/python bench/bench_extraction.py [--outputs 1000] [--tokens 256] [--naive-sample 10] [--smoke]

Corpus: the builtin tiny model's pretraining corpus (stdlib source + pydoc topics, ~12 MB). Outputs:
`--outputs` texts of exactly `--tokens` tokens of the tiny model's tokenizer, cut from (a) corpus files
(verbatim: many clones), (b) corpus files with their lines shuffled (few), (c) stdlib test files, which the
corpus leaves out (almost none), a third each. They stand in for model samples: what is timed is the
matching, which does not care who wrote the text. The naive scan (every output line against every corpus
line, then extension) is run on `--naive-sample` outputs and projected linearly to all of them (it
is linear in the number of outputs); both methods must find the same runs on that sample.
Targets: index built in <= 30 s, 1,000 outputs of 256 tokens matched in <= 10 s.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from leaklab.memorization.clones import build_index, code_lines, find_clones, naive_clones  # noqa: E402
from leaklab.memorization.extraction import builtin_documents, held_out_files  # noqa: E402


def make_outputs(docs, held_out, tokenizer, n: int, tokens: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    outputs = []
    while len(outputs) < n:
        kind = len(outputs) % 3
        text = rng.choice(docs)[1] if kind < 2 else rng.choice(held_out).read_text(errors="replace")
        start = rng.randrange(max(1, len(text) - tokens * 6))
        ids = tokenizer(text[start : start + tokens * 6], add_special_tokens=False)["input_ids"][:tokens]
        if len(ids) < tokens:
            continue
        out = tokenizer.decode(ids)
        if kind == 1:
            lines = out.splitlines()
            rng.shuffle(lines)
            out = "\n".join(lines)
        outputs.append(out)
    return outputs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--outputs", type=int, default=1000)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--naive-sample", type=int, default=10)
    p.add_argument("--smoke", action="store_true", help="60 corpus documents, 12 outputs of 64 tokens")
    args = p.parse_args()
    if args.smoke:
        args.outputs, args.tokens, args.naive_sample = 12, 64, 3

    from leaklab.models.tiny import build_tokenizer

    t0 = time.perf_counter()
    docs = builtin_documents()[: 60 if args.smoke else None]
    read_s = time.perf_counter() - t0
    megabytes = sum(len(t.encode()) for _, t in docs) / 1e6

    t0 = time.perf_counter()
    index = build_index(docs)
    index_s = time.perf_counter() - t0

    tokenizer = build_tokenizer(4096)
    outputs = make_outputs(docs, held_out_files(), tokenizer, args.outputs, args.tokens)

    t0 = time.perf_counter()
    found = find_clones(index, outputs)
    match_s = time.perf_counter() - t0

    corpus_lines = [code_lines(text) for _, text in docs]
    sample = outputs[: args.naive_sample]
    t0 = time.perf_counter()
    naive = [naive_clones(corpus_lines, o) for o in sample]
    naive_sample_s = time.perf_counter() - t0
    naive_projected_s = naive_sample_s * len(outputs) / max(1, len(sample))
    agree = all([(c.start, c.n_lines) for c in f] == n for f, n in zip(found, naive))

    memorised = sum(bool(f) for f in found)
    print(f"corpus: {len(docs)} documents, {megabytes:.1f} MB, {len(index.lines):,} non-blank lines")
    print(f"outputs: {len(outputs)} x {args.tokens} tokens; {memorised} hold a clone of >= 6 lines")
    print(f"{'step':<44}{'seconds':>10}{'target':>10}")
    print(f"{'read corpus':<44}{read_s:>10.2f}{'':>10}")
    print(f"{'build index':<44}{index_s:>10.2f}{'<= 30':>10}")
    print(f"{'match (index)':<44}{match_s:>10.2f}{'<= 10':>10}")
    print(f"{f'naive scan, {len(sample)} outputs (measured)':<44}{naive_sample_s:>10.2f}{'':>10}")
    print(f"{f'naive scan, {len(outputs)} outputs (projected)':<44}{naive_projected_s:>10.1f}{'':>10}")
    print(f"index and naive scan find the same runs on the sample: {agree}")
    print(
        json.dumps(
            {
                "bench": "extraction",
                "corpus_mb": round(megabytes, 2),
                "index_build_s": round(index_s, 3),
                "match_s": round(match_s, 3),
                "outputs": len(outputs),
                "tokens_per_output": args.tokens,
                "naive_sample": len(sample),
                "naive_projected_s": round(naive_projected_s, 2),
                "ratio_vs_naive": round(naive_projected_s / match_s, 1),
                "same_runs_on_sample": agree,
                "outputs_with_clone": memorised,
            }
        )
    )


if __name__ == "__main__":
    main()
