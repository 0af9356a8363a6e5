"""The `leaklab` command: one function per command (COMMANDS), errors turned into lines and exit codes
by `leaklab.errors.guarded`. See docs/recipes.md#bad-input-local-files-and-progress.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from leaklab.errors import InputError, closest, debug_requested, guarded, strip_debug
from leaklab.progress import quiet_library_bars

USAGE = """usage: leaklab COMMAND [ARGS]

  train recipe=NAME [key.sub=value ...]   train and evaluate every checkpoint
                                          (same as `accelerate launch leaklab/train.py ...`)
  evaluate RUN_DIR [--into NAME] [evaluate.k=v ...]
                                          evaluate a run's checkpoints with what they lack (no retraining)
  audit model=M benchmark=B detectors=[..] score any model on a whole benchmark, no training
                                          (no ground truth: scores and their distributions)
  mia model=M data=FILE [detectors=[..]] membership inference on any labelled text (text + label
                                          columns, or members=F non_members=F, or data=hub:NAME), no
                                          training: the rows, scores and report of a run's step
  report RUN_DIR [--out DIR]              write RUN_DIR/report/ or DIR (index.html, markdown, CSV, figures) and
                                          print the table
  compare RUN_DIR... [--step N] [--out D] several runs side by side: tables, overlaid curves, F1 vs ratio
                                          (a sweep directory: mean and 95% t-interval over seeds)
  sweep recipe=NAME KEY=V1,V2 [seeds=0,1] (--local|--slurm)
                                          a grid of runs, here one after another or as a Slurm array
  study NAME [--smoke] [--jobs N] (--local|--slurm)
                                          a study's conditions trained and scored: the detector leaderboard
  select RUN_DIR [--side S] [--tolerance T] recommend a checkpoint by the accuracy–MRI trade-off
  recipes                                 list the recipes with a one-line description
  keys [recipe=NAME] [PATTERN]            every recipe key (or those matching): type, value, meaning
  detectors [NAME]                        every detector (or those named): kind, parameters, what it needs,
                                          cost class
  build-tiny [key=value ...]              build (or find) the builtin tiny model; keys as in model.tiny.*
  --version                               print leaklab's version
  counterfactual --target M1 --reference M2 --corpus PATH [--out DIR]
                                          two models' function completions vs a corpus: the
                                          similarity suite, Tables 1 and 2 (counterfactual memorization)

  COMMAND --help shows a command's arguments; --debug (or LEAKLAB_DEBUG=1) shows tracebacks.
"""


def _recipes(_args: list[str]) -> int:
    from leaklab.recipe import available_recipes, describe

    known = available_recipes()
    width = max((len(n) for n in known), default=0)
    for name, path in known.items():
        print(f"{name:<{width}}  {describe(path)}")
    return 0


HELP = {
    "evaluate": """usage: leaklab evaluate RUN_DIR [--into NAME] [evaluate.key=value ...] [--debug]

Evaluate the base model (step 0) and every checkpoint of RUN_DIR with what it has no results for yet:
the evaluations and detectors of RUN_DIR/recipe.yaml, or those the evaluate.* keys name (no retraining:
`evaluate.detectors=[ppl,zlib,"mink:k=0.2"]` adds the columns it lacks, `evaluate.evaluations=[...]`
adds evaluations); then rebuild RUN_DIR/report/ and print the table. Rows already in
RUN_DIR/results.jsonl are kept, never rewritten; an interrupted evaluation is simply run again.
RUN_DIR/evaluations.json records the settings each evaluation's rows were computed with: a different
value of one of them (evaluate.cv_folds, n_bootstrap, seed, dtype, scoring_span, a plug-in's section, ...)
is refused, and --into NAME writes to RUN_DIR/evaluations/NAME/ instead (its own results and report, on
the run's checkpoints). Keys outside evaluate.* (and tracking.*) change the trained weights: train a new run.
Several of these may run on one run at once (on one machine or as Slurm array tasks; train with
evaluate.during_training=false): each claims one checkpoint x evaluation at a time (RUN_DIR/claims/),
and a claim whose worker died (no heartbeat for 10 minutes) is taken over.
""",
    "audit": """usage: leaklab audit model=M benchmark=B [detectors=[..]] [key.sub=value ...] [--debug]

Score a model leaklab did not train on a whole benchmark (no ground truth: per-sample scores, their
distribution, and SrDetection's leakage rate with a bootstrap interval).

  model=M        required: a hub name, a local directory or builtin:tiny (model.name_or_path)
  benchmark=B    humaneval | humaneval_plus | mbpp_plus | apps | bigcodebench (data.benchmark);
                 data.path=FILE takes a local copy
  detectors=[..] detector specs (evaluate.detectors); default: those of tiny_cpt. Detectors that need a
                 reference model (ref) are skipped unless evaluate.reference_model names one.
  clean=C        a set known not to be in the model's training (a file or directory in the benchmark's
                 format, or a benchmark name): adds each detector's AUROC benchmark vs C, the blind
                 baseline (warns when the two sets differ in their text) and dataset inference (a p-value)
  other keys     any recipe key (`leaklab keys`), e.g. data.max_samples=20 output_dir=audits

example:
  leaklab audit model=builtin:tiny benchmark=humaneval detectors=[ppl,mink]
""",
    "mia": """usage: leaklab mia model=M (data=FILE | members=FILE non_members=FILE | data=hub:NAME)
                   [detectors=[..]] [--limit N] [key.sub=value ...] [--debug]

Membership inference on any labelled text, without training: every detector that applies to plain text
scores each text with model M, and the folder <output_dir>/mia-<model>-<data>-<hash>/ gets what a run's
step gets (results.jsonl with AUROC, TPR@1%/5%FPR, CV and oracle F1 with bootstrap intervals, the blind
baseline and dataset inference; scores/step-0/detection.jsonl; report/; W&B), so `leaklab report` and
`leaklab compare` read it like a run. Running it again computes only what the folder lacks.

  model=M            required: a hub name, a local directory or builtin:tiny (model.name_or_path)
  data=FILE          .jsonl, .jsonl.gz, .json, .csv or .parquet with a text and a label column
                     (label 1 = member, 0 = non-member; true / false also read)
  members=FILE non_members=FILE
                     two files of texts (a text column each) instead of data=
  data=hub:NAME      a hub dataset, with split=S (default train); offline, save it and give data= a path
  text_column=C label_column=L id_column=I
                     the columns' names (default text, label, id); with an id column the per-sample
                     scores are keyed by its values (two files: members/<id>, non_members/<id>)
  --limit N          the first N members and the first N non-members
  detectors=[..]     detector specs (evaluate.detectors); default: tiny_cpt's that apply to plain text.
                     Those needing variants (srdetection_*, neighbourhood) do not apply; ref needs
                     evaluate.reference_model. Either is skipped by default and refused when named.
  other keys         any recipe key (`leaklab keys`), e.g. output_dir=mia evaluate.n_bootstrap=200

example:
  leaklab mia model=builtin:tiny members=seen.jsonl non_members=unseen.jsonl detectors=[ppl,zlib,mink]
""",
    "report": """usage: leaklab report RUN_DIR [--out DIR]

Write RUN_DIR/report/ (or DIR) from the run's files and print the AUROC and F1 tables: index.html (interactive,
opens offline from disk, with vega-bundle.js beside it), report.md, results.csv, PNG + PDF figures.
Nothing else in RUN_DIR changes; a run with missing or half-written files gets a page that says so.
""",
    "select": """usage: leaklab select RUN_DIR [--side non_members|members|all] [--tolerance T]

Recommend a checkpoint of RUN_DIR as the MRI paper does for its training stage (needs the mri
evaluation's rows). sft / cpt: among checkpoints whose validation loss is within T (relative, default
0.05) of the lowest (accuracy within T of the highest when no loss was logged), the one with the lowest
MRI on the chosen side (default non_members, the held-out split). rl: the checkpoint with the highest
validation reward (the non-members' pass@1, the binary all-tests reward on the held-out split). Prints
the table (Pareto front marked, Early / Best-Val / Late) and writes RUN_DIR/selection.json with the
recommendation and why.
""",
    "build-tiny": """usage: leaklab build-tiny [key=value ...]

Build the builtin tiny model (a small Llama trained on Python's standard library) or find it in the
cache (~/.cache/leaklab or $LEAKLAB_CACHE), and print its directory. Keys are those of model.tiny.*
(`leaklab keys`), e.g. `leaklab build-tiny hidden_size=256 num_layers=4`.
""",
    "detectors": """usage: leaklab detectors [NAME ...]

List every registered detector (or those whose name contains a NAME given): its kind (score, model, rule), display name and group, parameters with
their defaults, what it needs from a run (a reference model, variants, generations...) and its cost class.
""",
    "keys": """usage: leaklab keys [recipe=NAME] [key.sub=value ...] [PATTERN ...]

List every recipe key with its type, its value (the recipe's, or the schema default without one) and
what it means; a value too long for its column is shown whole below its key. PATTERN keeps the keys that
contain it (or match it, with * ? []): `leaklab keys recipe=apps_cpt srdetection`, `leaklab keys
'evaluate.*seed'`. Any key can be set on the command line of train and audit as key.sub=value.
""",
}


def _detectors(args: list[str]) -> int:
    import leaklab.recipe  # noqa: F401  (its import joins installed plug-ins to the registries)
    from leaklab.detectors import describe_detectors
    from leaklab.keys import matches

    described = describe_detectors()
    if args:
        # `leaklab detectors mink` shows the detectors whose name contains a pattern given.
        chosen = [d for d in described if matches(d["name"], args)]
        if not chosen:
            names = [d["name"] for d in described]
            hint = closest(args[0], names, cutoff=0.4) or f"; known: {', '.join(names)}"
            raise InputError(f"detectors: no detector matches {' '.join(args)!r}{hint}")
        described = chosen
    for d in described:
        params = ", ".join(f"{k}={v}" for k, v in d["params"].items()) or "none"
        print(f"{d['name']}  ({d['kind']}, {d['cost']})  {d['display']} [{d['group']}]")
        print(f"    parameters: {params}" + (f"; settings: {d['section']}.*" if d["section"] else ""))
        print(f"    needs: {'; '.join(d['needs'])}")
    print(
        "\ncost per checkpoint: cheap = one forward pass over the texts, moderate = several forward passes"
        " or a second model, costly = generation or sandbox runs.\n"
        "spec: name or name:key=v1,v2 in evaluate.detectors, e.g. detectors=[ppl,srdetection_gray:n=1,3,5,10]"
    )
    return 0


def _keys(args: list[str]) -> int:
    from leaklab.keys import describe_keys, format_keys, matches
    from leaklab.recipe import Recipe, load_recipe
    from leaklab.train import parse_command_line

    patterns = [a for a in args if "=" not in a and not a.startswith("-")]
    args = [a for a in args if a not in patterns]
    named = any(a.partition("=")[0] in ("recipe", "--recipe") for a in args)
    recipe_name, overrides, _ = parse_command_line(args)
    recipe = load_recipe(recipe_name, overrides) if named or overrides else Recipe()
    rows = describe_keys(recipe)
    if patterns:
        chosen = [r for r in rows if matches(r[0], patterns)]
        if not chosen:
            hint = closest(patterns[0], [r[0] for r in rows], cutoff=0.4)
            raise InputError(f"keys: no recipe key matches {' '.join(patterns)!r}{hint}")
        rows = chosen
    print(format_keys(rows))
    return 0


def _build_tiny(args: list[str]) -> int:
    from leaklab.models.tiny import build_tiny_model
    from leaklab.recipe import load_recipe

    recipe = load_recipe("tiny_cpt", [f"model.tiny.{a}" for a in args])
    print(build_tiny_model(recipe.model.tiny))
    return 0


def _audit(args: list[str]) -> int:
    from leaklab.audit import audit_model, audit_overrides, clean_set_of

    args, clean = clean_set_of(args)
    audit_model(_tiny_recipe("audit", audit_overrides(args)), clean=clean)
    return 0


def _mia(args: list[str]) -> int:
    from leaklab.mia import parse_mia_args, run_mia

    overrides, spec, limit = parse_mia_args(args)
    named = any(o.partition("=")[0] == "evaluate.detectors" for o in overrides)
    run_dir = run_mia(_tiny_recipe("mia", overrides), spec, limit, named=named)
    return _summary(str(run_dir), None)


def _tiny_recipe(command: str, overrides: list[str]):
    """The tiny recipe's evaluation defaults under the command's own model and data, preflighted. The
    model is required: without it the tiny recipe's builtin one would be scored, for minutes, unasked."""
    from leaklab.recipe import load_recipe
    from leaklab.train import preflight

    if not any(o.partition("=")[0] == "model.name_or_path" for o in overrides):
        raise InputError(
            f"{command}: model= is required (a hub name, a local directory, or builtin:tiny); "
            f"see `leaklab {command} --help`"
        )
    recipe = load_recipe("tiny_cpt", [f"name={command}", *overrides])
    preflight(recipe)
    return recipe


def _select(args: list[str]) -> int:
    from leaklab.selection import SIDES, describe, select_run

    parser = argparse.ArgumentParser(prog="leaklab select", add_help=False)
    parser.add_argument("run_dir")
    parser.add_argument("--side", default="non_members")
    parser.add_argument("--tolerance", type=float, default=0.05)
    try:
        ns = parser.parse_args(args)
    except SystemExit as err:
        raise InputError(
            "select: expected RUN_DIR [--side S] [--tolerance T] (see `leaklab select --help`)"
        ) from err
    if ns.side not in SIDES:
        raise InputError(f"select: --side must be one of {', '.join(SIDES)}, got {ns.side!r}")
    _require_run(ns.run_dir)
    sel = select_run(ns.run_dir, ns.side, ns.tolerance)
    print(describe(sel))
    if sel.recommended is None:
        return 1
    print(f"written: {Path(ns.run_dir) / 'selection.json'}")
    return 0


def _require_run(run_dir: str) -> None:
    if not (Path(run_dir) / "recipe.yaml").exists():
        raise InputError(f"{run_dir} is not a leaklab run directory (no recipe.yaml)")


def _report(args: list[str]) -> int:
    out_dir = None
    if "--out" in args:
        at = args.index("--out")
        if at + 1 >= len(args) or args[at + 1].startswith("-"):
            raise InputError("report: --out takes a directory (see `leaklab report --help`)")
        out_dir = args[at + 1]
        args = args[:at] + args[at + 2 :]
        if Path(out_dir).exists() and not Path(out_dir).is_dir():
            raise InputError(f"report: --out {out_dir} is a file; name a directory (created if missing)")
    if len(args) != 1 or args[0].startswith("-"):
        raise InputError("report: expected one argument, the run directory (see `leaklab report --help`)")
    _require_run(args[0])
    return _summary(args[0], out_dir)


def _evaluate(args: list[str]) -> int:
    """`leaklab evaluate RUN_DIR [--into NAME] [evaluate.key=value ...]`, then the report."""
    from leaklab.evaluate import evaluate_run
    from leaklab.rundir import RunDir

    into = None
    if "--into" in args:
        at = args.index("--into")
        if at + 1 >= len(args) or args[at + 1].startswith("-") or "=" in args[at + 1]:
            raise InputError("evaluate: --into takes a name (see `leaklab evaluate --help`)")
        into = args[at + 1]
        args = args[:at] + args[at + 2 :]
    positional = [a for a in args if "=" not in a]
    if len(positional) != 1 or positional[0].startswith("-"):
        raise InputError(
            "evaluate: expected one run directory, then evaluate.* keys (see `leaklab evaluate --help`)"
        )
    run_dir = positional[0]
    _require_run(run_dir)
    evaluate_run(run_dir, overrides=[a for a in args if "=" in a], into=into)
    return _summary(str(RunDir(run_dir).evaluation_folder(into)) if into else run_dir, None)


def _summary(run_dir: str, out_dir: str | None) -> int:
    from leaklab.claims import claims_dir
    from leaklab.report import print_summary
    from leaklab.rundir import RunDir, locked

    # Evaluate workers sharing a run end at about the same time: one writes report/ at a time.
    with locked(claims_dir(run_dir) / ".report.lock"):
        print_summary(RunDir(run_dir), out_dir=out_dir)
    return 0


def _lazy(module: str, name: str):
    """A command whose module is imported only when it runs, so `leaklab recipes` needs no torch."""

    def run(args: list[str]) -> int:
        return getattr(importlib.import_module(module), name)(args)

    return run


COMMANDS = {
    "train": _lazy("leaklab.train", "command"),
    "evaluate": _evaluate,
    "audit": _audit,
    "mia": _mia,
    "report": _report,
    "compare": _lazy("leaklab.sweep", "compare_command"),
    "select": _select,
    "recipes": _recipes,
    "keys": _keys,
    "detectors": _detectors,
    "build-tiny": _build_tiny,
    "counterfactual": _lazy("leaklab.memorization.standalone", "main"),
    "sweep": _lazy("leaklab.sweep", "command"),
    "study": _lazy("leaklab.study", "command"),
}


def dispatch(argv: list[str]) -> int:
    """One command; leaklab's errors propagate to `main`, which prints them."""
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] in ("--version", "version"):
        from importlib.metadata import version

        print(f"leaklab {version('leaklab')}")
        return 0
    command, args = argv[0], argv[1:]
    if command in HELP and any(a in ("-h", "--help") for a in args):
        print(HELP[command], end="")
        return 0
    if command in COMMANDS:
        return COMMANDS[command](args)
    hint = closest(command, COMMANDS, cutoff=0.6)
    print(f"leaklab: unknown command {command!r}{hint}\n\n{USAGE}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """The boundary: every error leaklab raises is printed here, once (`leaklab.errors.guarded`)."""
    quiet_library_bars()
    argv = sys.argv[1:] if argv is None else argv
    return guarded(lambda: dispatch(strip_debug(argv)), debug=debug_requested(argv))


if __name__ == "__main__":
    raise SystemExit(main())
