"""The `leaklab` command: train | evaluate | audit | report | recipes | build-tiny.

Exit codes: 0 done, 1 the work failed (missing data or weights, with what to do), 2 bad input
(unknown recipe key or value, bad arguments), each explained in one line per problem on stderr.
"""

from __future__ import annotations

import sys

USAGE = """usage: leaklab COMMAND [ARGS]

  train recipe=NAME [key.sub=value ...]   train and evaluate every checkpoint
                                          (same as `accelerate launch leaklab/train.py ...`)
  evaluate RUN_DIR                        evaluate checkpoints of a run that have no results yet
  audit model=M benchmark=B detectors=[..] score any model on a whole benchmark, no training
                                          (no ground truth: scores and their distributions)
  report RUN_DIR                          write RUN_DIR/report/ (markdown, CSV, plots) and print the table
  recipes                                 list the recipes with a one-line description
  build-tiny [key=value ...]              build (or find) the builtin tiny model; keys as in model.tiny.*
"""


def _recipes() -> int:
    from leaklab.recipe import available_recipes, describe

    known = available_recipes()
    width = max((len(n) for n in known), default=0)
    for name, path in known.items():
        print(f"{name:<{width}}  {describe(path)}")
    return 0


def _build_tiny(args: list[str]) -> int:
    from leaklab.models.tiny import build_tiny_model
    from leaklab.recipe import RecipeError, load_recipe

    try:
        recipe = load_recipe("tiny_cpt", [f"model.tiny.{a}" for a in args])
    except RecipeError as err:
        for line in err.problems:
            print(f"leaklab: {line}", file=sys.stderr)
        return 2
    print(build_tiny_model(recipe.model.tiny))
    return 0


def _audit(args: list[str]) -> int:
    from leaklab.audit import audit_model, audit_overrides
    from leaklab.data.benchmarks import DataUnavailableError
    from leaklab.models.load import ModelUnavailableError
    from leaklab.recipe import RecipeError, load_recipe

    # The tiny recipe supplies the evaluation defaults; the audit names its own model and benchmark.
    try:
        recipe = load_recipe("tiny_cpt", ["name=audit", *audit_overrides(args)])
    except RecipeError as err:
        for line in err.problems:
            print(f"leaklab: {line}", file=sys.stderr)
        return 2
    try:
        audit_model(recipe)
    except (DataUnavailableError, ModelUnavailableError) as err:
        print(f"leaklab: {err}", file=sys.stderr)
        return 1
    return 0


def _run_dir_arg(args: list[str]) -> str | None:
    if len(args) != 1 or args[0].startswith("-"):
        print("leaklab: expected one argument, the run directory", file=sys.stderr)
        return None
    return args[0]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    command, args = argv[0], argv[1:]
    if command == "train":
        from leaklab.train import main as train_main

        return train_main(args)
    if command == "audit":
        return _audit(args)
    if command == "recipes":
        return _recipes()
    if command == "build-tiny":
        return _build_tiny(args)
    if command in ("evaluate", "report"):
        run_dir = _run_dir_arg(args)
        if run_dir is None:
            return 2
        from pathlib import Path

        if not (Path(run_dir) / "recipe.yaml").exists():
            print(f"leaklab: {run_dir} is not a leaklab run directory (no recipe.yaml)", file=sys.stderr)
            return 2
        if command == "evaluate":
            from leaklab.evaluate import evaluate_run

            evaluate_run(run_dir)
        from leaklab.report import print_summary
        from leaklab.rundir import RunDir

        print_summary(RunDir(run_dir))
        return 0
    import difflib

    match = difflib.get_close_matches(
        command, ["train", "evaluate", "audit", "report", "recipes", "build-tiny"], n=1
    )
    hint = f"; did you mean {match[0]!r}?" if match else ""
    print(f"leaklab: unknown command {command!r}{hint}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
