"""Extraction audit of every checkpoint (docs/evaluations.md): what the model reproduces of its training data.

Strategies, rankings, rows and the corpus (003):
docs/evaluations.md#extraction-audit-tiny_extraction-evaluateevaluations-extraction. The corpus
(`leaklab/memorization/clones.py`) and the benchmark's tasks are indexed once per run; a non-member
match must also be corpus text (`n_unexplained` counts those that are not: a bug), except under the
targeted `discoverable` strategy, where it is a false discovery. Records mask every secret-like value.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from leaklab.errors import InputError
from leaklab.evaluations.base import EvalContext, EvalOutput, run_decoding
from leaklab.evaluations.canaries import extraction_rows as canary_extraction_rows
from leaklab.memorization.clones import build_index, find_clones, unique_snippets
from leaklab.memorization.extraction import (
    RANKINGS,
    SECRET_PATTERNS,
    STRATEGIES,
    TAGS,
    corpus_secrets,
    exposure_spearman,
    find_secrets,
    first_lines,
    function_definitions,
    held_out_files,
    load_corpus,
    mask_text,
    newline_counts,
    ranking_scores,
    sample,
    taxonomy,
)
from leaklab.metrics import leak_rate, pearson, precision_at_k, spearman
from leaklab.report.charts import metric_panel_spec
from leaklab.report.section import Panel, Section, Table, fmt
from leaklab.results import without_dose
from leaklab.rows import float_or_none, side_row
from leaklab.rundir import read_json

TEXT_CHARS = 2000  # of each output kept in the records


@dataclass
class ExtractionConfig:
    """`evaluate.extraction` in a recipe."""

    # Values that are one of a few words (checked at recipe load with a suggestion).
    choices: ClassVar[dict[str, tuple[str, ...]]] = {}

    # auto: the run's training corpus (mix.corpus + member tasks); builtin; or a file / directory.
    corpus: str = "auto"
    # Sampling strategies: non_prompt, temperature_decay, prompt_conditioned, two_step (needs non_prompt),
    # and discoverable (targeted: each benchmark task prompted with its first prefix_lines lines, greedy,
    # whatever top_k; not a default, it is not the paper's untargeted audit).
    strategies: list[str] = field(default_factory=lambda: [s for s in STRATEGIES if s != "discoverable"])
    top_k: list[int] = field(default_factory=lambda: [5, 10, 20, 40])  # one cell per strategy and k
    n_outputs: int = 100  # samples per strategy and top-k
    max_new_tokens: int = 256  # new tokens per sample (the paper: 256-1024)
    batch_size: int = 32  # rows decoded together
    min_lines: int = 6  # a clone is at least this many normalised lines
    # Where prompt_conditioned's function definitions come from: builtin (the stdlib test suites, which
    # the builtin corpus leaves out) or a file / directory of Python files the model did not train on.
    held_out: str = "builtin"
    n_prompts: int = 200  # distinct function definitions drawn (cycled through for n_outputs)
    precision_k: int = 100  # precision of each ranking's top k
    prefix_lines: int = 4  # discoverable: the non-blank lines of each task given as its prompt
    seed: int = 0  # seeds the sampling and the drawing of the prompts
    # The paper's PPL-PPL ratio divides by a smaller model trained on the same data (Unveiling §3.3,
    # CodeParrot-small): a directory or hub name, e.g. the last checkpoint of this recipe run again with
    # a smaller model. Without it `ppl_ratio` is empty; `ppl_reference_ratio` divides by the reference.
    small_model: str | None = None

    def check(self, parent=None) -> list[str]:
        problems = []
        for s in self.strategies:
            if s not in STRATEGIES:
                problems.append(
                    f"evaluate.extraction.strategies: unknown {s!r} (known: {', '.join(STRATEGIES)})"
                )
        if "two_step" in self.strategies and "non_prompt" not in self.strategies:
            problems.append(
                "evaluate.extraction.strategies: two_step prompts with non_prompt's snippets; add non_prompt"
            )
        if not self.top_k or any(k < 1 for k in self.top_k):
            problems.append(f"evaluate.extraction.top_k: a non-empty list of k >= 1, got {self.top_k}")
        for key in ("n_outputs", "max_new_tokens", "batch_size", "n_prompts", "precision_k", "prefix_lines"):
            if getattr(self, key) < 1:
                problems.append(f"evaluate.extraction.{key}: must be at least 1, got {getattr(self, key)}")
        if self.min_lines < 2:
            problems.append(f"evaluate.extraction.min_lines: must be at least 2, got {self.min_lines}")
        return problems


def cell(strategy: str, k: int) -> str:
    return f"{strategy}/k={k}"


def _row(column: str, metric: str, value, **params) -> dict[str, Any]:
    return side_row(column, metric, float_or_none(value), **params)


def is_python(text: str) -> bool:
    # Sampled text is often not Python; the parser's SyntaxWarnings about it are noise here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ast.parse(text)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return False
    return True


class Extraction:
    name: ClassVar[str] = "extraction"

    def __init__(self) -> None:
        self.index = None  # the corpus's clone index
        self.tasks = None  # the benchmark tasks' own index (members and non-members)
        self.task_labels: list[int] = []
        self.task_ids: list[str] = []
        # A run with inject.doses: task id -> dose (0: non-member), and each member's training exposures.
        self.task_doses: dict[str, int] = {}
        self.exposures: dict[str, int | None] = {}
        self.secrets: set = set()
        self.prompts: list[str] = []
        self.prefixes: list[str] = []  # discoverable: each task's first lines, in eval-set order
        self._newlines = None
        self._small = None  # (model, tokenizer) of evaluate.extraction.small_model, loaded once

    def specs(self, recipe) -> list[str]:
        cfg = recipe.evaluate.extraction
        cells = [cell(s, k) for s in cfg.strategies for k in cfg.top_k]
        return [*cells, f"n={cfg.n_outputs}", f"tokens={cfg.max_new_tokens}", *RANKINGS,
                f"small_model={cfg.small_model}"]  # fmt: skip

    # ------------------------------------------------------------------ once per run

    def prepare(self, ctx: EvalContext) -> None:
        cfg = ctx.recipe.evaluate.extraction
        source, key = cfg.corpus, "evaluate.extraction.corpus"
        if cfg.corpus == "auto":
            source, key = ctx.recipe.mix.corpus, "mix.corpus (evaluate.extraction.corpus=auto)"
        try:
            corpus = load_corpus(source, key)
        except InputError as err:
            raise InputError(f"{err} (evaluate.extraction.corpus takes a local file or directory)") from None
        docs = list(corpus.documents)
        eval_set = ctx.eval_set
        if cfg.corpus == "auto" and eval_set is not None:
            docs += [
                (f"member:{i}", t) for i, t, y in zip(eval_set.task_ids, eval_set.texts, eval_set.labels) if y
            ]
        self.index = build_index(docs, min_lines=cfg.min_lines)
        self.secrets = corpus_secrets(docs)
        if eval_set is not None and len(eval_set.task_ids):
            self.tasks = build_index(list(zip(eval_set.task_ids, eval_set.texts)), min_lines=cfg.min_lines)
            by_id = dict(zip(eval_set.task_ids, (int(y) for y in eval_set.labels)))
            self.task_ids = self.tasks.names
            self.task_labels = [by_id[i] for i in self.task_ids]
            if eval_set.doses is not None:
                self.task_doses = {i: int(d) for i, d in zip(eval_set.task_ids, eval_set.doses)}
                self.exposures = training_exposures(ctx.run, self.task_doses)
        if "discoverable" in cfg.strategies and eval_set is not None:
            self.prefixes = [first_lines(t, cfg.prefix_lines) for t in eval_set.texts]
        if "prompt_conditioned" in cfg.strategies:
            if cfg.held_out == "builtin":
                rng = np.random.default_rng(cfg.seed)
                files = held_out_files()
                files = [files[i] for i in sorted(rng.choice(len(files), min(80, len(files)), replace=False))]
                sources = [(f.name, f.read_text(encoding="utf-8", errors="replace")) for f in files]
            else:
                sources = load_corpus(cfg.held_out, "evaluate.extraction.held_out").documents
            self.prompts = function_definitions(sources, cfg.n_prompts, cfg.seed)
        ctx.log(
            f"[leaklab] extraction: corpus {self.index.n_docs} documents, {len(self.index.lines):,} lines"
            + (f" (skipped {dict(corpus.skipped)})" if corpus.skipped else "")
            + f"; {len(self.prompts)} held-out function definitions"
        )

    # ------------------------------------------------------------------ per checkpoint

    def _generate(self, ctx: EvalContext, model, tokenizer) -> list:
        cfg = ctx.recipe.evaluate.extraction
        decoding = run_decoding(ctx, model, tokenizer, cfg.batch_size)  # `sample` reads no cache
        samples = []
        for si, strategy in enumerate(s for s in STRATEGIES if s in cfg.strategies and s != "two_step"):
            # Discoverable extraction is greedy (top-1), as Carlini et al. define it: once, not per k.
            for k in [1] if strategy == "discoverable" else cfg.top_k:
                samples += sample(decoding, strategy, k, cfg.n_outputs, cfg.max_new_tokens,
                                  prompts=self.prefixes if strategy == "discoverable" else self.prompts,
                                  seed=cfg.seed + 1000 * si + k)  # fmt: skip
        if "two_step" in cfg.strategies:
            first = [s for s in samples if s.strategy == "non_prompt"]
            snippets = unique_snippets(self.index, find_clones(self.index, [s.text for s in first]))
            if snippets:
                top = snippets[0]
                # The prompt is the corpus's own lines (indentation and blank lines kept), not the
                # whitespace-normalised snippet, which would be code the model never saw.
                prompt = self.index.source(top.doc, top.doc_line, top.n_lines) + "\n"
                ctx.log(f"[leaklab] extraction: two_step prompts with a {top.n_lines}-line snippet")
                for k in cfg.top_k:
                    samples += sample(decoding, "two_step", k, cfg.n_outputs, cfg.max_new_tokens,
                                      prompts=[prompt], seed=cfg.seed + 7000 + k)  # fmt: skip
            else:
                ctx.log("[leaklab] extraction: two_step skipped (non_prompt found no memorised snippet)")
        return samples

    def _scores(
        self, ctx: EvalContext, model, tokenizer, texts: list[str], step: int
    ) -> dict[str, np.ndarray]:
        from leaklab.signals.logprobs import ScoringSettings, compute_token_stats

        # Outputs are scored whole, whatever span the detectors of the recipe score.
        settings = dataclasses.replace(ScoringSettings.from_config(ctx.recipe.evaluate), scoring_span="text")

        def stats_of(m, tok):
            return compute_token_stats(m, tok, texts, settings=settings, distribution=False,
                                       accelerator=ctx.accelerator, cache=ctx.signal_cache)  # fmt: skip

        if self._newlines is None:
            self._newlines = newline_counts(tokenizer)
        target = stats_of(model, tokenizer)
        small = None
        if ctx.recipe.evaluate.extraction.small_model:
            if self._small is None:
                self._small = _load_small(ctx.recipe)
            small = stats_of(*self._small)
        reference = None
        # At step 0 the base model is the reference itself: the ratio would be 1 for every output.
        if not (step == 0 and not ctx.recipe.evaluate.reference_model):
            loaded = ctx.reference()
            if loaded is not None:
                reference = stats_of(*loaded)
        return ranking_scores(target, texts, self._newlines, reference, small)

    def evaluate(self, ctx: EvalContext, model, tokenizer, step: int) -> EvalOutput:
        samples = self._generate(ctx, model, tokenizer)
        texts = [s.text for s in samples]
        scores = self._scores(ctx, model, tokenizer, texts, step)
        if not ctx.is_main_process:
            return EvalOutput()
        clones = find_clones(self.index, texts)
        task_clones = find_clones(self.tasks, texts) if self.tasks is not None else None
        output = self._output(ctx.recipe, samples, clones, scores, task_clones)
        output.rows += canary_extraction_rows(ctx, texts)  # per dose, when the run planted canaries
        return output

    # ------------------------------------------------------------------ rows and records

    def _output(self, recipe, samples, clones, scores, task_clones) -> EvalOutput:
        n_boot, seed = recipe.evaluate.n_bootstrap, recipe.evaluate.seed
        rows: list[dict[str, Any]] = []
        cells: dict[str, tuple[list[int], dict[str, Any]]] = {}
        by_strategy: dict[str, list[int]] = {}
        for i, s in enumerate(samples):
            params = {"strategy": s.strategy, "top_k": s.top_k}
            cells.setdefault(cell(s.strategy, s.top_k), ([], params))[0].append(i)
            by_strategy.setdefault(s.strategy, []).append(i)
        # Each strategy over all its top-k values: at the default sizes (100 outputs a cell, k = 100) the
        # smallest set that is large enough to rank, without mixing strategies as `all` does.
        for strategy, index in by_strategy.items():
            if len({samples[i].top_k for i in index}) > 1:
                cells[f"{strategy}/all"] = (index, {"strategy": strategy})
        cells["all"] = (list(range(len(samples))), {})
        for column, (index, params) in cells.items():
            rows += cell_rows(self.index, column, index, samples, clones, scores, recipe.evaluate, params)

        snippets = unique_snippets(self.index, clones)
        tags = {s.text: taxonomy(s.text) for s in snippets}
        counts = Counter(t for s in snippets for t in tags[s.text])
        rows += [_row("all", f"taxonomy.{t}", counts.get(t, 0)) for t in TAGS]
        found = {x for s in samples for x in find_secrets(s.text)}
        in_corpus = found & self.secrets
        kinds = Counter(kind for kind, _ in in_corpus)
        rows += [_row("all", f"secrets.{kind}", kinds.get(kind, 0)) for kind in SECRET_PATTERNS]
        rows.append(_row("all", "secrets_not_in_corpus", len(found - in_corpus)))

        records: list[dict[str, Any]] = []
        for i, s in enumerate(samples):
            records.append({
                "record": "output", "index": i, "strategy": s.strategy, "top_k": s.top_k,
                "memorised": bool(clones[i]), "clone_lines": sum(c.n_lines for c in clones[i]),
                "scores": {m: float_or_none(scores[m][i]) for m in RANKINGS},
                "prompt": mask_text(s.prompt)[:TEXT_CHARS], "text": mask_text(s.text)[:TEXT_CHARS],
                "prompt_boundary": s.prompt_boundary,
            })  # fmt: skip
        for sn in snippets:
            records.append({
                "record": "snippet", "text": mask_text(sn.text), "n_lines": sn.n_lines, "tags": tags[sn.text],
                "corpus_frequency": sn.corpus_frequency, "output_frequency": sn.output_frequency,
                "example_doc": sn.example_doc,
            })  # fmt: skip
        if task_clones is not None:
            # members / non_members: the untargeted strategies (the paper's audit, where a non-member
            # match outside the corpus is a bug). Discoverable outputs, prompted with a task's own first
            # lines, are apart in members/discoverable and non_members/discoverable: there a non-member
            # match is a false discovery (code predictable from its start), counted, not a bug.
            targeted = [s.strategy == "discoverable" for s in samples]
            untargeted = [[] if t else c for c, t in zip(task_clones, targeted, strict=True)]
            task_rows, task_records = self._task_rows(untargeted)
            if self.task_doses:
                task_rows += self._dose_rows(untargeted, n_boot, seed)
            if any(targeted):
                discoverable = [c if t else [] for c, t in zip(task_clones, targeted, strict=True)]
                found, _ = self._task_rows(discoverable, "/discoverable")
                task_rows += found
                if self.task_doses:
                    task_rows += self._dose_rows(discoverable, n_boot, seed, "/discoverable")
            rows += task_rows
            records += task_records
        return EvalOutput(rows=rows, records=records)

    def _task_rows(self, task_clones, suffix: str = "") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Members vs non-members extracted verbatim; every non-member match checked against the corpus.
        `suffix` is appended to the column names (members<suffix>, non_members<suffix>)."""
        hits = _clones_per_task(task_clones)
        rows, records = [], []
        for label, column in ((1, f"members{suffix}"), (0, f"non_members{suffix}")):
            docs = [d for d, y in enumerate(self.task_labels) if y == label]
            extracted = [d for d in docs if d in hits]
            rows.append(_row(column, "n_tasks", len(docs)))
            rows.append(_row(column, "n_extracted", len(extracted)))
            rows.append(_row(column, "extracted_fraction", len(extracted) / len(docs) if docs else math.nan))
            unexplained = 0
            for d in extracted:
                texts = sorted({c.text for c in hits[d]}, key=len, reverse=True)
                in_corpus = [bool(find_clones(self.index, [t])[0]) for t in texts]
                if label == 0:
                    unexplained += not all(in_corpus)
                records.append({"record": "task", "task_id": self.task_ids[d], "label": label,
                                "n_outputs": len({c.output for c in hits[d]}), "longest_lines": max(c.n_lines for c in hits[d]),
                                "snippet": mask_text(texts[0]), "in_corpus": in_corpus[0]})  # fmt: skip
            if label == 0:
                rows.append(_row(column, "n_unexplained", unexplained))
        return rows, records

    def _dose_rows(self, task_clones, n_boot: int, seed: int, suffix: str = "") -> list[dict[str, Any]]:
        """A run with inject.doses: per dose d, the members of dose d extracted verbatim (`"dose": d`
        rows of `members`: n_tasks, n_extracted, extracted_fraction with its bootstrap interval), and
        over all members the Spearman correlation between their training exposures and the number of
        outputs that reproduce them (`memorization.extraction.exposure_spearman`)."""
        outputs = {d: {c.output for c in found} for d, found in _clones_per_task(task_clones).items()}
        members = [d for d, y in enumerate(self.task_labels) if y == 1]
        dose_of = {d: self.task_doses[self.task_ids[d]] for d in members}
        rows = []
        for dose in sorted(set(dose_of.values())):
            extracted = np.array([d in outputs for d in members if dose_of[d] == dose])
            rate = leak_rate(extracted, n_bootstrap=n_boot, seed=seed)
            values = {"n_tasks": len(extracted), "n_extracted": int(extracted.sum())}
            values |= {f"extracted_fraction{t}": rate[f"leak_rate{t}"] for t in ("", "_ci_low", "_ci_high")}
            rows += [{**_row(f"members{suffix}", k, v), "dose": dose} for k, v in values.items()]
        # Members a stage listed with no count (rl: past train.rl.max_prompts) are left out.
        counted = [d for d in members if self.exposures.get(self.task_ids[d]) is not None]
        stats = exposure_spearman(
            [self.exposures[self.task_ids[d]] for d in counted],
            [len(outputs.get(d, ())) for d in counted],
            n_bootstrap=n_boot,
            seed=seed,
        )
        rows += [
            _row(f"members{suffix}", k if k != "n_members" else "exposure_n_members", v)
            for k, v in stats.items()
        ]
        return rows

    def summary(self, rows: list[dict[str, Any]]) -> str:
        got = {(r["column"], r["metric"]): r["value"] for r in without_dose(rows)}
        frac, n = got.get(("all", "memorised_fraction")), got.get(("all", "n_outputs"))
        if frac is None:
            return ""
        text = f"extraction: {frac:.1%} of {n:.0f} outputs memorised, {got.get(('all', 'n_unique_snippets'), 0):.0f} unique snippets"
        if ("members", "n_extracted") in got:
            text += (f"; members extracted {got[('members', 'n_extracted')]:.0f}/{got[('members', 'n_tasks')]:.0f}, "
                     f"non-members {got[('non_members', 'n_extracted')]:.0f}/{got[('non_members', 'n_tasks')]:.0f}")  # fmt: skip
        return text

    def report_section(self, rows: list[dict[str, Any]], run) -> Any:
        return extraction_section(rows, run)


def _clones_per_task(task_clones) -> dict[int, list]:
    """Task index -> its clones across all outputs."""
    hits: dict[int, list] = {}
    for per_output in task_clones:
        for c in per_output:
            hits.setdefault(c.doc, []).append(c)
    return hits


def training_exposures(run, task_doses: dict[str, int]) -> dict[str, int | None]:
    """Each member's exposures per epoch as counted in the data the stage built (mixture.json
    `exposures`); the dose the manifest assigned where the run has no such count (no run directory, or
    a mixture.json from before the count)."""
    mixture = read_json(run.mixture) if run is not None and run.mixture.exists() else {}
    counted = mixture.get("exposures") or {}
    members = [i for i, dose in task_doses.items() if dose > 0]
    if counted:
        return {i: counted.get(i) for i in members}
    return {i: task_doses[i] for i in members}


def cell_rows(index, column, rows_of_cell, samples, clones, scores, settings, params) -> list[dict]:
    """The rows of one cell (one strategy and top-k, or all outputs pooled); `settings`: the recipe's
    `evaluate` (its bootstrap and seed, and `extraction.precision_k`)."""
    precision_k, n_boot, seed = settings.extraction.precision_k, settings.n_bootstrap, settings.seed

    memorised = np.array([bool(clones[i]) for i in rows_of_cell])
    texts = [samples[i].text for i in rows_of_cell]
    snippets = unique_snippets(index, [clones[i] for i in rows_of_cell])
    rate = leak_rate(memorised, n_bootstrap=n_boot, seed=seed)
    out = [
        _row(column, "n_outputs", len(rows_of_cell), **params),
        _row(column, "n_empty", sum(not t.strip() for t in texts), **params),
        _row(column, "n_not_python", sum(not is_python(t) for t in texts), **params),
        _row(column, "memorised_fraction", rate["leak_rate"], **params),
        _row(column, "memorised_fraction_ci_low", rate["leak_rate_ci_low"], **params),
        _row(column, "memorised_fraction_ci_high", rate["leak_rate_ci_high"], **params),
        _row(column, "n_unique_snippets", len(snippets), **params),
        _row(column, "mean_snippet_lines", np.mean([s.n_lines for s in snippets]) if snippets else math.nan, **params),
        _row(column, "frequency_spearman", spearman([s.corpus_frequency for s in snippets], [s.output_frequency for s in snippets]), **params),
        _row(column, "frequency_pearson", pearson([s.corpus_frequency for s in snippets], [s.output_frequency for s in snippets]), **params),
    ]  # fmt: skip
    # Precision@k measures a ranking only when the ranking chooses: with k or fewer outputs the "top k" is
    # every output and precision@k is the memorised fraction whatever the scores (Unveiling §5.3 ranks
    # 20,000 outputs for its top 100). Such cells get NaN; the pooled `all` usually has enough.
    ranked = len(rows_of_cell) > precision_k
    for metric in RANKINGS:
        p = precision_at_k(
            scores[metric][rows_of_cell], memorised, precision_k, n_bootstrap=n_boot, seed=seed
        )
        if not ranked or np.isnan(scores[metric][rows_of_cell]).all():
            # Too few outputs to rank, or no score at all (a ratio without its second model): no ranking.
            p = dict.fromkeys(p, math.nan)
        name = f"precision_at_{precision_k}.{metric}"
        out += [
            _row(column, name, p["precision_at_k"], k=precision_k, **params),
            _row(column, f"{name}_ci_low", p["precision_at_k_ci_low"], **params),
            _row(column, f"{name}_ci_high", p["precision_at_k_ci_high"], **params),
        ]
    return out


def _load_small(recipe):
    """(model, tokenizer) of `evaluate.extraction.small_model`."""
    from leaklab.models.load import load_model, load_tokenizer

    path, key = recipe.evaluate.extraction.small_model, "evaluate.extraction.small_model"
    model = load_model(path, recipe.evaluate.dtype, recipe.model.trust_remote_code, key=key)
    model.eval()
    return model, load_tokenizer(path, recipe.model.trust_remote_code, key=key)


def extraction_section(rows: list[dict[str, Any]], run) -> Any:
    """Memorised fraction per cell over checkpoints, members vs non-members extracted, and a table."""

    items: list[Any] = []
    cells = [r for r in rows if "/k=" in str(r["column"]) or r["column"] == "all"]
    spec = metric_panel_spec(cells, "memorised_fraction", x="step", bounded=True)
    if spec:
        items.append(Panel("Memorised fraction per sampling strategy and top-k", spec,
                           caption="outputs sharing >= 6 normalised lines verbatim with the corpus; band: bootstrap 95%"))  # fmt: skip
    sides = [r for r in rows if r["column"] in ("members", "non_members")]
    spec = metric_panel_spec(sides, "extracted_fraction", x="step", bounded=True) if sides else None
    if spec:
        items.append(Panel("Benchmark tasks extracted verbatim", spec,
                           caption="tasks with >= 6 lines reproduced in some output; non-members only through text the corpus also holds"))  # fmt: skip
    got: dict[tuple[int, str], dict[str, Any]] = {}
    for r in rows:
        got.setdefault((int(r["step"]), str(r["column"])), {})[r["metric"]] = r["value"]
    pk = next(
        (m.split(".")[0] for r in rows for m in [r["metric"]] if m.startswith("precision_at_")),
        "precision_at_100",
    )

    header = [
        "step",
        "cell",
        "outputs",
        "memorised",
        "unique snippets",
        *[f"P@{pk.split('_')[-1]} {m}" for m in RANKINGS],
    ]
    table = [
        [str(step), col, fmt(v.get("n_outputs"), 0), fmt(v.get("memorised_fraction")), fmt(v.get("n_unique_snippets"), 0),
         *[fmt(v.get(f"{pk}.{m}")) for m in RANKINGS]]
        for (step, col), v in sorted(got.items()) if "n_outputs" in v
    ]  # fmt: skip
    items.append(
        Table("Per checkpoint and cell", header, table, caption="P@k: precision of each ranking's top k")
    )
    notes = []
    if any(
        r["metric"] == "n_unexplained" and r["column"] == "non_members" and (r["value"] or 0) > 0
        for r in rows
    ):
        notes.append(
            "some non-member matches are not in the corpus: a clone-detector bug, see the task records"
        )
    return Section("extraction", "Extraction audit", intro=__doc__.split("\n")[0], items=items, notes=notes)


def dose_panels(rows: list[dict[str, Any]], run) -> list[Panel | Table]:
    """The report's dose-response panels (its record's `dose_panels`): the share of each dose's members
    reproduced verbatim at the last checkpoint against the dose, and per checkpoint the correlation
    between a member's exposures and the outputs that reproduce it."""
    last = max(int(r["step"]) for r in rows)
    items: list[Panel | Table] = []
    spec = metric_panel_spec(
        [r for r in rows if int(r["step"]) == last], "extracted_fraction", x="dose", bounded=True
    )
    if spec is not None:
        items.append(
            Panel(
                f"Members extracted verbatim against dose (step {last}, epoch {run.epoch_of(last):g})",
                spec,
                "share of the members of each dose with >= evaluate.extraction.min_lines lines reproduced "
                "in some output; band: bootstrap 95% interval over members",
            )
        )
    got: dict[int, dict[str, Any]] = {}
    for r in run.rows_of("extraction"):
        if str(r.get("metric", "")).startswith("exposure_"):
            got.setdefault(int(r["step"]), {})[r["metric"]] = r.get("value")
    if got:
        items.append(
            Table(
                "Exposures vs outputs reproducing each member (Spearman)",
                ["step", "Spearman ρ [95% CI]", "members"],
                [
                    [
                        str(step),
                        f"{fmt(v.get('exposure_spearman'))} "
                        f"[{fmt(v.get('exposure_spearman_ci_low'), 2)}, {fmt(v.get('exposure_spearman_ci_high'), 2)}]",
                        fmt(v.get("exposure_n_members"), 0),
                    ]
                    for step, v in sorted(got.items())
                ],
                "rank correlation over all members (never extracted: 0 outputs) between the exposures "
                "counted in the training data and the outputs that reproduce the member; interval: "
                "members resampled (Unveiling §4.3 correlates contents found in the outputs instead)",
            )
        )
    return items
