"""`leaklab sweep`: a grid of runs from one recipe, run here one after another or as a Slurm job array,
and `leaklab compare SWEEP_DIR`: mean and 95% t-interval over seeds per grid point and detector.

The sweep directory holds sweep.json (the grid and every run's overrides) and runs/<run name>/, one
ordinary run directory per grid point. A seeds axis varies the training's randomness only: the member
split and the evaluation's seeds stay pinned (`pinned_seeds`). Usage and guarantees: docs/scaling.md.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from leaklab.errors import InputError
from leaklab.recipe import SPREAD_SEEDS, RecipeError, get_key, load_recipe
from leaklab.report.compare import main as compare_main
from leaklab.results import detection_rows
from leaklab.rundir import locked, read_json, read_rows, write_atomic, write_json

SEED_KEYS = ("seed", "train.seed", "mix.seed")

HELP = """usage: leaklab sweep recipe=NAME KEY=V1,V2,... [seeds=0,1,2] [KEY=VALUE ...] (--local | --slurm)
                     [--out DIR] [--gpus N] [--time HH:MM:SS] [--partition P]

Expand the grid (every combination of the comma-separated values) into runs, one run directory each
under one sweep directory and one W&B group.

  --local        run them here, one after another (`leaklab train` per run)
  --slurm        write SWEEP_DIR/slurm/sweep.sbatch, a job array with one task per run (each `accelerate
                 launch leaklab/train.py ...` with launch/ddp.yaml on one node), and print the sbatch line
  --out DIR      the sweep directory (default <output_dir>/sweeps/<recipe>-<hash of the grid>)
  --gpus N       GPUs per array task (default 8); --time, --partition: passed to #SBATCH

`leaklab compare SWEEP_DIR` then reads the whole sweep: mean and 95% t-interval over seeds (at least 3 seeds).
"""


# --------------------------------------------------------------------------- the grid


def parse_options(argv: list[str], command: str, opts: dict[str, Any], positional, flags=(), valued=()):
    """Fill `opts` from the options of `leaklab sweep` or `study`: --local / --slurm as opts["mode"],
    each of `flags` as True, each of `valued` from the argument after it; `positional(arg)` takes the
    other arguments, in order."""
    it = iter(argv)
    for arg in it:
        if arg in ("--local", "--slurm"):
            if opts["mode"] not in (None, arg[2:]):
                raise InputError(f"{command}: give one of --local or --slurm, not both")
            opts["mode"] = arg[2:]
        elif arg in flags:
            opts[arg[2:]] = True
        elif arg in valued:
            value = next(it, None)
            if value is None:
                raise InputError(f"{command}: {arg} needs a value")
            opts[arg[2:]] = value
        elif arg.startswith("--"):
            raise InputError(f"{command}: unknown option {arg} (see `leaklab {command} --help`)")
        else:
            positional(arg)


def parse_sweep_args(argv: list[str]) -> dict[str, Any]:
    """The sweep's command line: recipe, axes (ordered), fixed overrides and options."""
    spec: dict[str, Any] = {"recipe": "tiny_cpt", "axes": {}, "fixed": []}
    spec |= {"mode": None, "out": None, "gpus": 8, "time": "24:00:00", "partition": None}

    def grid(arg: str) -> None:
        if "=" not in arg:
            raise InputError(f"sweep: expected key=value, got {arg!r}")
        key, _, raw = arg.partition("=")
        # `1:1,1:5` is two values; a bracketed YAML list or a quoted value is one.
        values = [raw] if raw.startswith(("[", "{", "'", '"')) else [v for v in raw.split(",") if v] or [raw]
        if key == "recipe":
            spec["recipe"] = raw
        elif key == "seeds" or len(values) > 1:
            spec["axes"][key] = values
        else:
            spec["fixed"].append(arg)

    parse_options(argv, "sweep", spec, grid, valued=("--out", "--gpus", "--time", "--partition"))
    if spec["mode"] is None:
        raise InputError("sweep: say where the runs go: --local (here, one after another) or --slurm")
    try:
        spec["gpus"] = int(spec["gpus"])
    except ValueError:
        raise InputError(f"sweep: --gpus takes a number, got {spec['gpus']!r}") from None
    return spec


def point_overrides(point: dict[str, str], pinned: dict[str, str] | None = None) -> list[str]:
    """A grid point's overrides; `seeds=v` sets SEED_KEYS, and `pinned` (`pinned_seeds`) keeps each other
    section seed whose value differs from v, which the top-level seed would otherwise set to v."""
    out = []
    for key, value in point.items():
        if key == "seeds":
            out += [f"{k}={value}" for k in SEED_KEYS]
            out += [f"{k}={v}" for k, v in (pinned or {}).items() if v != value]
        else:
            out.append(f"{key}={value}")
    return out


def pinned_seeds(spec: dict[str, Any]) -> dict[str, str]:
    """Every section seed outside SEED_KEYS at its value without the sweep's seed: a seeds axis varies
    the training's randomness, never the member split (data.seed) or the evaluation's seeds."""
    if "seeds" not in spec["axes"]:
        return {}
    recipe = load_recipe(spec["recipe"], spec["fixed"])
    return {k: str(get_key(recipe, k)) for k in SPREAD_SEEDS if k not in SEED_KEYS}


def run_name(recipe: str, point: dict[str, str]) -> str:
    """A readable directory name: tiny_cpt-mix.ratio=1_5-train.epochs=3-seed=0."""
    parts = [f"{'seed' if k == 'seeds' else k}={v}" for k, v in point.items()]
    return re.sub(r"[^\w.=+-]", "_", "-".join([recipe, *parts]))


def expand(spec: dict[str, Any]) -> list[dict[str, str]]:
    keys = list(spec["axes"])
    return [dict(zip(keys, combo)) for combo in itertools.product(*(spec["axes"][k] for k in keys))]


def grid_id(spec: dict[str, Any]) -> str:
    what = {"recipe": spec["recipe"], "axes": spec["axes"], "fixed": spec["fixed"]}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:8]


def validate(spec: dict[str, Any]) -> None:
    """Every axis value alone, then every grid point, through the recipe loader: a bad value exits 2
    with the key and the value before any run starts."""

    def load(overrides: list[str], where: str) -> None:
        try:
            load_recipe(spec["recipe"], [*spec["fixed"], *overrides])
        except RecipeError as err:
            raise InputError(f"sweep: {where}{err.problems[0]}") from None

    load([], "")
    pinned = pinned_seeds(spec)
    for key, values in spec["axes"].items():
        for value in values:
            load(point_overrides({key: value}, pinned), f"{key}={value}: ")
    for point in expand(spec):
        combo = " ".join(f"{k}={v}" for k, v in point.items())
        load(point_overrides(point, pinned), f"the combination {combo}: ")


# --------------------------------------------------------------------------- the sweep directory


def plan_sweep(spec: dict[str, Any]) -> dict[str, Any]:
    """sweep.json's content: the grid and each run's name, overrides and directory."""
    recipe = load_recipe(spec["recipe"], spec["fixed"])
    name = f"{recipe.name}-{grid_id(spec)}"
    # Absolute: array tasks start wherever Slurm puts them.
    root = Path(spec["out"] or Path(recipe.output_dir) / "sweeps" / name).expanduser().absolute()
    runs = []
    pinned = pinned_seeds(spec)
    for point in expand(spec):
        rname = run_name(recipe.name, point)
        overrides = [
            *spec["fixed"],
            *point_overrides(point, pinned),
            f"output_dir={root / 'runs'}",
            f"run_name={rname}",
            f"tracking.wandb.group={name}",
        ]
        runs.append(
            {"name": rname, "point": point, "overrides": overrides, "run_dir": str(root / "runs" / rname)}
        )
    return {
        "sweep": name,
        "id": grid_id(spec),
        "recipe": spec["recipe"],
        "axes": spec["axes"],
        "fixed": spec["fixed"],
        "root": str(root),
        "runs": runs,
    }


def claim_directory(plan: dict[str, Any]) -> Path:
    """Write sweep.json, or check that the directory holds this same sweep; refuse another one."""
    root = Path(plan["root"])
    root.mkdir(parents=True, exist_ok=True)
    with locked(root / ".sweep.lock"):
        path = root / "sweep.json"
        if path.exists():
            old = read_json(path)
            if old.get("id") != plan["id"] or old.get("recipe") != plan["recipe"]:
                raise InputError(
                    f"sweep: {root} already holds another sweep ({old.get('recipe')}, axes "
                    f"{', '.join(old.get('axes', {}))}); choose another --out"
                )
        elif any(p.name not in (".sweep.lock",) for p in root.iterdir()):
            raise InputError(f"sweep: {root} is not empty and holds no sweep; choose another --out")
        else:
            write_json(path, plan)
    return root


def run_local(plan: dict[str, Any], log=print) -> int:
    """Each run in its own process, one after another; a failed run is reported and the rest go on."""
    root = Path(plan["root"])
    # Held for the whole sweep: a second `--local` on the same directory would train the same runs.
    fd = os.open(root / ".running.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise InputError(f"sweep: another sweep process is running in {root}; wait for it to end") from None
    failed = []
    try:
        for i, run in enumerate(plan["runs"], 1):
            log(f"[leaklab] sweep {plan['sweep']}: run {i}/{len(plan['runs'])} {run['name']}")
            cmd = [
                sys.executable,
                "-m",
                "leaklab.cli",
                "train",
                f"recipe={plan['recipe']}",
                *run["overrides"],
            ]
            if subprocess.run(cmd).returncode != 0:
                failed.append(run["name"])
    finally:
        os.close(fd)
    if failed:
        log(f"[leaklab] sweep: {len(failed)} of {len(plan['runs'])} runs failed: {', '.join(failed)}")
        return 1
    log(f"[leaklab] sweep done: {root}; compare with `leaklab compare {root}`")
    return 0


def slurm_script(plan: dict[str, Any], gpus: int, time_limit: str, partition: str | None) -> str:
    """A job array, one task per run on one node; cluster settings follow launch/slurm_multinode.sh and
    launch/ddp.yaml (data-parallel over the node's GPUs)."""
    root = Path(plan["root"])
    repo = Path(__file__).resolve().parents[1]
    # One GPU needs no data-parallel config; several use launch/ddp.yaml (absolute: tasks start anywhere).
    config = repo / "launch" / ("single.yaml" if gpus == 1 else "ddp.yaml")
    train = repo / "leaklab" / "train.py"
    cases = []
    for i, run in enumerate(plan["runs"]):
        args = " ".join(shlex.quote(a) for a in [f"recipe={plan['recipe']}", *run["overrides"]])
        cases.append(f"  {i}) ARGS=({args}) ;;")
    lines = [
        "#!/usr/bin/env bash",
        f"# leaklab sweep {plan['sweep']}: {len(plan['runs'])} runs, one array task each.",
        f"#   sbatch {root / 'slurm' / 'sweep.sbatch'}",
        f"#SBATCH --job-name={plan['sweep']}",
        f"#SBATCH --array=0-{len(plan['runs']) - 1}",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={gpus}",
        f"#SBATCH --cpus-per-task={8 * gpus}",
        f"#SBATCH --time={time_limit}",
        *([f"#SBATCH --partition={partition}"] if partition else []),
        f"#SBATCH --output={root / 'slurm'}/%x-%A_%a.out",
        "set -euo pipefail",
        # Where the sweep was written: relative recipe files and paths in the overrides resolve here.
        f"cd {shlex.quote(str(Path.cwd().absolute()))}",
        'case "$SLURM_ARRAY_TASK_ID" in',
        *cases,
        '  *) echo "no run for array task $SLURM_ARRAY_TASK_ID" >&2; exit 2 ;;',
        "esac",
        f'accelerate launch --config_file {config} --num_processes {gpus} {train} "${{ARGS[@]}}"',
        "",
    ]
    return "\n".join(lines)


def write_slurm(plan: dict[str, Any], gpus: int, time_limit: str, partition: str | None) -> Path:
    path = Path(plan["root"]) / "slurm" / "sweep.sbatch"
    write_atomic(path, slurm_script(plan, gpus, time_limit, partition))
    path.chmod(0o755)
    return path


def command(argv: list[str], log=print) -> int:
    if any(a in ("-h", "--help", "help") for a in argv):
        print(HELP, end="")
        return 0
    spec = parse_sweep_args(argv)
    if not spec["axes"]:
        raise InputError("sweep: no axis: give at least one key=V1,V2 (or seeds=0,1,2)")
    validate(spec)
    plan = plan_sweep(spec)
    root = claim_directory(plan)
    log(f"[leaklab] sweep {plan['sweep']}: {len(plan['runs'])} runs in {root}")
    if spec["mode"] == "local":
        return run_local(plan, log)
    path = write_slurm(plan, spec["gpus"], spec["time"], spec["partition"])
    log(f"sbatch {path}")
    return 0


# --------------------------------------------------------------------------- compare a sweep


def last_detection(run_dir: str | Path) -> dict[str, dict[str, float]]:
    """column -> metric -> value at the run's last evaluated checkpoint (detection rows)."""
    rows = detection_rows(read_rows(Path(run_dir) / "results.jsonl"))
    scored = [r for r in rows if r.get("column") and isinstance(r.get("value"), (int, float))]
    if not scored:
        return {}
    last = max(r["step"] for r in scored)
    out: dict[str, dict[str, float]] = {}
    for r in scored:
        if r["step"] == last:
            out.setdefault(r["column"], {})[r["metric"]] = float(r["value"])
    return out


def t_quantile(df: int) -> float:
    """The 97.5% point of Student's t (two-sided 95% interval of a mean)."""
    from scipy.stats import t  # scipy comes with scikit-learn

    return float(t.ppf(0.975, df))


# The sweep's interval: a Student-t interval of the mean over seeds, which assumes the seeds' values are
# roughly normal; with few seeds its t quantile is large (12.7 for 2 seeds, 4.3 for 3), so it says little.
INTERVAL = "95% Student-t interval of the mean over seeds"
MIN_SEEDS = 3  # below this the interval is reported with a warning
METRIC_RANGE = {"auroc": (0.0, 1.0), "f1": (0.0, 1.0)}  # metrics that cannot leave [0, 1]


def mean_interval(
    values: list[float], bounds: tuple[float, float] | None = None
) -> tuple[float, float, float]:
    """Mean and its 95% t-interval over seeds (the mean itself twice for one seed); with `bounds`, the
    interval is cut to them: a metric such as AUROC cannot leave [0, 1], so the part of a symmetric t
    interval beyond its range holds no possible value."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, mean, mean
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(n - 1) * sd / math.sqrt(n)
    low, high = mean - half, mean + half
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return mean, low, high


def summarise(sweep_dir: str | Path, metrics=("auroc", "f1")) -> list[dict[str, Any]]:
    """One row per grid point (seeds pooled) x detector column x metric: mean, interval, seeds."""
    plan = read_json(Path(sweep_dir) / "sweep.json")
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for run in plan["runs"]:
        point = {k: v for k, v in run["point"].items() if k != "seeds"}
        groups.setdefault(tuple(point.items()), []).append(run)
    out = []
    for point, runs in groups.items():
        found = [last_detection(r["run_dir"]) for r in runs]
        columns = sorted({c for f in found for c in f})
        for column in columns:
            for metric in metrics:
                values = [f[column][metric] for f in found if metric in f.get(column, {})]
                if not values:
                    continue
                mean, low, high = mean_interval(values, METRIC_RANGE.get(metric))
                out.append(
                    {
                        **dict(point),
                        "column": column,
                        "metric": metric,
                        "mean": mean,
                        "ci_low": low,
                        "ci_high": high,
                        "interval": INTERVAL,
                        "seeds": len(values),
                        "runs": len(runs),
                    }
                )
    return out


def interval_notes(rows: list[dict[str, Any]]) -> list[str]:
    """What the table's interval is, and a warning when some grid point has too few seeds for it."""
    notes = [f"interval: {INTERVAL}, cut to [0, 1] for AUROC and F1 (values outside cannot occur)"]
    fewest = min(r["seeds"] for r in rows)
    if fewest < MIN_SEEDS:
        width = "no interval at all" if fewest < 2 else f"a t quantile of {t_quantile(fewest - 1):.1f}"
        notes.append(
            f"warning: some grid points have {fewest} seed{'s' if fewest > 1 else ''} ({width}): the "
            f"interval says little; run at least {MIN_SEEDS} seeds (seeds=0,1,2)"
        )
    return notes


def format_summary(rows: list[dict[str, Any]], axes: list[str]) -> str:
    head = [*axes, "detector", "metric", "mean", "95% t-interval", "seeds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [str(r.get(a, "")) for a in axes]
        interval = f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
        cells += [r["column"], r["metric"], f"{r['mean']:.3f}", interval, f"{r['seeds']}/{r['runs']}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def compare_sweep(sweep_dir: str | Path, out: str | None = None) -> int:
    """`leaklab compare SWEEP_DIR`: the seed-pooled table (also summary.md / summary.json in the sweep
    directory), then the runs side by side through `leaklab compare` (curves, F1 vs ratio)."""
    plan = read_json(Path(sweep_dir) / "sweep.json")
    axes = [a for a in plan["axes"] if a != "seeds"]
    rows = summarise(sweep_dir)
    if not rows:
        print(f"leaklab: {sweep_dir}: no run of the sweep has detection results yet", file=sys.stderr)
        return 1
    table = format_summary(rows, axes)
    notes = interval_notes(rows)
    write_atomic(Path(sweep_dir) / "summary.md", table + "\n\n" + "\n".join(notes) + "\n")
    write_json(Path(sweep_dir) / "summary.json", rows)
    print(table)
    print("\n".join(notes))
    if axes == ["mix.ratio"]:
        # SrDetection's Fig. 3 from the seed means (compare's own figure takes one run per ratio).
        from leaklab.report.compare import web_share
        from leaklab.report.figures import plot_ratio

        points: dict[str, dict[str, float]] = {}
        for r in rows:
            if r["metric"] == "f1":
                points.setdefault(r["mix.ratio"], {})[r["column"]] = r["mean"]
        ratios = sorted(points, key=web_share)
        title = f"{plan['sweep']}: macro-F1 vs code:web ratio, mean over seeds"
        for path in plot_ratio(points, ratios, Path(sweep_dir) / "ratio_figure.png", title):
            print(f"figure: {path}")
    done = [r["run_dir"] for r in plan["runs"] if (Path(r["run_dir"]) / "results.jsonl").exists()]

    return compare_main([*done, "--out", out or str(Path(sweep_dir) / "compare")])


def positional_args(argv: list[str], takes_value: tuple[str, ...]) -> list[str]:
    """The arguments that are neither options nor an option's value (`--out DIR`: DIR is not a run)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in takes_value:
            skip = True
        elif not arg.startswith("-"):
            out.append(arg)
    return out


def compare_command(argv: list[str]) -> int:
    """`leaklab compare`: a sweep directory gets the seed-pooled summary; run directories go as before."""
    dirs = positional_args(argv, takes_value=("--out", "--step"))
    if len(dirs) == 1 and (Path(dirs[0]) / "sweep.json").is_file():
        out = argv[argv.index("--out") + 1] if "--out" in argv[:-1] else None
        return compare_sweep(dirs[0], out)

    return compare_main(argv)
