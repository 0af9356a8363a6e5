"""`leaklab study NAME`: a matrix of training conditions scored by the same detectors, ending in a leaderboard
(leaklab/leaderboard.py). Each condition is a sweep plan (`sweep.run_local` or `sweep.write_slurm`); the
study file and folder: docs/study.md#the-study-file.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from leaklab import sweep
from leaklab.errors import InputError, closest
from leaklab.recipe import RecipeError, load_recipe, run_dir_of, yaml_load
from leaklab.rundir import read_json, text_sha256, write_json
from leaklab.side_by_side import Job, default_slots, run_jobs

SECTIONS = ("description", "evaluate", "control", "nominal_levels", "conditions", "smoke", "findings")
CONDITION_KEYS = ("recipe", "overrides", "runs", "after", "evaluate")

HELP = """usage: leaklab study NAME [--local | --slurm] [--smoke] [--jobs N] [--out DIR] [key=value ...]
                     [--gpus N] [--time HH:MM:SS] [--partition P]

Train every condition of the study recipes/studies/NAME.yaml (or a path), score its checkpoints with the
study's detectors, and write the leaderboard of each run's last checkpoint (leaderboard.md, .json,
index.html) in the study folder. key=value overrides apply to every run (model.name_or_path=..., say).

  --local        run the conditions here (the default); --jobs N runs N conditions side by side, each
                 with 1/N of the CPU threads (default: 2 without a GPU, 1 with one)
  --slurm        write one job array per condition and SUBMIT.sh (a condition that needs another is
                 submitted with a dependency on it); after the jobs, `leaklab study NAME --leaderboard`
  --smoke        the study's smoke overrides: fewer samples and steps, every condition, same code
  --leaderboard  only (re)write the leaderboard from the runs there are
"""


def study_path(name: str) -> Path:
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise InputError(f"study: the file {name} does not exist")
        return path
    known = available_studies()
    if name not in known:
        hint = closest(name, known) or f" (known: {', '.join(known) or 'none'})"
        raise InputError(f"study: no study named {name!r}{hint}")
    return known[name]


def available_studies() -> dict[str, Path]:
    package = Path(__file__).resolve().parent / "recipes" / "studies"
    found: dict[str, Path] = {}
    for folder in [Path.cwd() / "recipes" / "studies", package]:
        for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
            found.setdefault(path.stem, path)
    return found


def load_study(path: Path) -> dict[str, Any]:
    """The study file, its sections checked by name (a typo exits 2 with the closest name)."""
    study = yaml_load(path.read_text()) or {}
    for key in study:
        if key not in SECTIONS:
            raise InputError(f"study {path}: unknown section {key!r}; the sections are {', '.join(SECTIONS)}")
    if not study.get("conditions"):
        raise InputError(f"study {path}: no conditions")
    for name, cond in study["conditions"].items():
        unknown = [key for key in cond if key not in CONDITION_KEYS]
        if unknown:
            known = ", ".join(CONDITION_KEYS)
            raise InputError(f"study {path}: condition {name}: unknown key {unknown[0]!r}; known: {known}")
        if "recipe" not in cond:
            raise InputError(f"study {path}: condition {name} names no recipe")
        if cond.get("after") and cond["after"] not in study["conditions"]:
            raise InputError(f"study {path}: condition {name}: after {cond['after']!r} is no condition")
    check_findings(study, path)
    study["name"] = path.stem
    study["path"] = str(path)
    return study


FINDING_KINDS = {
    "difference": ("a", "b", "detector"),
    "versus_best": ("cell", "detector"),
    "chance": (),
    "chance_holm": (),
    "p_value": ("a", "b", "test"),
}
FINDING_KEYS = (
    *("id", "claim", "source", "kind", "expect", "than"),
    *("a", "b", "cell", "detector", "exclude", "test"),
)


def check_findings(study: dict[str, Any], path: Path) -> None:
    """Each finding's keys, kind and cells (`dilution/1_8`, `timing@late`): a typo exits 2 at once."""
    for i, finding in enumerate(study.get("findings") or []):
        where = f"study {path}: finding {finding.get('id', i + 1)}"
        unknown = [k for k in finding if k not in FINDING_KEYS]
        if unknown:
            raise InputError(f"{where}: unknown key {unknown[0]!r}; known: {', '.join(FINDING_KEYS)}")
        kind = finding.get("kind")
        if kind not in FINDING_KINDS:
            raise InputError(f"{where}: kind {kind!r} is not one of {', '.join(FINDING_KINDS)}")
        for key in ("id", "claim", "source", *FINDING_KINDS[kind]):
            if not finding.get(key):
                raise InputError(f"{where}: {key} is missing")
        if finding.get("expect", "greater") not in ("greater", "less", "equal"):
            raise InputError(f"{where}: expect {finding['expect']!r} is not one of greater, less, equal")
        for key in ("a", "b", "cell"):
            condition = str(finding.get(key, "")).partition("@")[0].partition("/")[0]
            if key in finding and condition not in study["conditions"]:
                raise InputError(f"{where}: {key}: {finding[key]!r} names no condition of the study")


def study_id(study: dict[str, Any], fixed: list[str], smoke: bool) -> str:
    """A hash of what is trained and scored only: editing a finding keeps the folder and its runs."""
    trained = {k: study.get(k) for k in ("conditions", "evaluate", "smoke")}
    fixed = [o for o in fixed if not o.startswith("output_dir=")]
    return text_sha256(json.dumps([trained, fixed, smoke], sort_keys=True))[:8]


def run_overrides(study, condition: str, own: list[str], fixed: list[str], smoke: bool) -> list[str]:
    """A run's overrides, its own first and the command line's last (the last wins)."""
    cond = study["conditions"][condition]
    extra = (study.get("smoke") or {}) if smoke else {}
    smoke_overrides = [*(extra.get("all") or []), *((extra.get("conditions") or {}).get(condition) or [])]
    return [*own, *(study.get("evaluate") or []), *(cond.get("evaluate") or []), *smoke_overrides, *fixed]


def plan_study(study: dict[str, Any], fixed: list[str], smoke: bool, out: str | None) -> dict[str, Any]:
    """study.json's content: per condition its sweep plan, every run loaded by the recipe loader first
    (a bad value exits 2 naming the condition and run before anything is written)."""
    first_name, first = next(iter(study["conditions"].items()))
    suffix = "-smoke" if smoke else ""
    name = f"{study['name']}{suffix}-{study_id(study, fixed, smoke)}"
    default_root = Path(_load(first["recipe"], fixed, first_name).output_dir) / "studies" / name
    root = Path(out or default_root).expanduser().absolute()
    conditions: dict[str, Any] = {}
    run_dirs: dict[str, str] = {}
    for cname in _ordered(study):
        cond = study["conditions"][cname]
        runs = []
        # `runs`: several runs, each with its own overrides after the condition's; else one run, `main`.
        for rname, extra in (cond.get("runs") or {"main": []}).items():
            own = [*(cond.get("overrides") or []), *(extra or [])]
            label = cname if rname == "main" else f"{cname}/{rname}"
            overrides = [_fill(o, run_dirs, label) for o in run_overrides(study, cname, own, fixed, smoke)]
            shared = not own and not smoke
            if not shared:
                overrides += [f"output_dir={root / 'runs'}", f"run_name={label.replace('/', '-')}"]
            recipe = _load(cond["recipe"], overrides, label)
            run_dir = str(run_dir_of(recipe).expanduser().absolute())
            runs.append({"name": label, "overrides": overrides, "run_dir": run_dir, "shared": shared})
        run_dirs[cname] = runs[-1]["run_dir"]
        conditions[cname] = {
            "sweep": f"{name}-{cname}",
            "recipe": cond["recipe"],
            "root": str(root / "conditions" / cname),
            "after": cond.get("after"),
            "runs": runs,
        }
    return {
        "study": name,
        "name": study["name"],
        "path": study["path"],
        "smoke": smoke,
        "root": str(root),
        "fixed": fixed,
        "conditions": conditions,
    }


def _ordered(study: dict[str, Any]) -> list[str]:
    """The conditions, each after the one it names in `after`."""
    done: list[str] = []
    pending = list(study["conditions"])
    while pending:
        ready = [c for c in pending if study["conditions"][c].get("after") in (None, *done)]
        if not ready:
            raise InputError(
                f"study {study['path']}: the conditions' `after` form a cycle: {', '.join(pending)}"
            )
        done += ready
        pending = [c for c in pending if c not in ready]
    return done


def _fill(override: str, run_dirs: dict[str, str], label: str) -> str:
    """`{sft}` in an override -> the run directory of condition sft (planned before this one)."""
    try:
        return override.format(**run_dirs)
    except (KeyError, IndexError) as err:
        raise InputError(
            f"study: {label}: {override} names {err}, which is no condition planned before it "
            f"(set `after:` to it)"
        ) from None


def _load(recipe: str, overrides: list[str], label: str):
    try:
        return load_recipe(recipe, overrides)
    except RecipeError as err:
        raise InputError(f"study: {label}: {err.problems[0]}") from None


def claim_folder(plan: dict[str, Any]) -> Path:
    """Write study.json, or check that the folder holds this same study; refuse another one."""
    root = Path(plan["root"])
    path = root / "study.json"
    if path.exists():
        old = read_json(path)
        if old.get("study") != plan["study"]:
            raise InputError(f"study: {root} already holds study {old.get('study')}; choose another --out")
    elif root.exists() and any(root.iterdir()):
        raise InputError(f"study: {root} is not empty and holds no study; choose another --out")
    write_json(path, plan)
    runs = root / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    for cond in plan["conditions"].values():
        for run in cond["runs"]:
            link = runs / run["name"].replace("/", "-")
            # is_symlink: the link dangles until the shared run is trained, and exists() follows it.
            if run["shared"] and not link.is_symlink():
                link.symlink_to(run["run_dir"])  # the shipped recipe's own run, shared with its users
    return root


@contextlib.contextmanager
def output_to(path: Path):
    """This process's stdout and stderr (and its children's) appended to `path`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(fd) for fd in (1, 2)]
    with open(path, "a") as log_file:
        for fd in (1, 2):
            os.dup2(log_file.fileno(), fd)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)


def run_condition(cond: dict[str, Any]) -> dict[str, Any]:
    """One condition by `sweep.run_local`, its output in its train.log; its status (a failure: why)."""
    root = Path(cond["root"])
    root.mkdir(parents=True, exist_ok=True)
    log_path = root / "train.log"
    try:
        with output_to(log_path):
            code = sweep.run_local(cond, log=lambda line: print(line, flush=True))
    except InputError as err:
        return {"state": "failed", "line": str(err), "log": str(log_path)}
    if code == 0:
        return {"state": "done", "log": str(log_path)}
    return {"state": "failed", "line": last_error_line(log_path), "log": str(log_path)}


def last_error_line(log_path: Path) -> str:
    """The line that says why: the last `leaklab:` / `Error` line of the log, else its last line."""
    lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    lines = [line for line in lines if "sweep" not in line]  # the sweep's own summary says only "failed"
    said = [line for line in lines if line.startswith("leaklab:") or "Error" in line]
    return (said or lines or ["(empty log)"])[-1][:400]


def run_order(conditions: dict[str, dict[str, Any]]) -> list[str]:
    """The conditions with the most runs (the longest, as a rule) first, so that none is left alone on one
    slot at the end; ties as listed (run_jobs starts those others wait for first)."""
    return sorted(conditions, key=lambda c: -len(conditions[c].get("runs", ())))


def run_local(plan: dict[str, Any], jobs: int, log=print) -> dict[str, dict[str, Any]]:
    """Every condition, `jobs` side by side (leaklab/side_by_side.py); status.json is written as each ends."""
    conditions, status = plan["conditions"], {}

    def started(job: Job) -> None:
        log(f"[leaklab] study: condition {job.name}, output in {job.arg['root']}/train.log")

    def ended(job: Job, result: dict[str, Any]) -> None:
        status[job.name] = result
        line = result.get("line", "")
        log(f"[leaklab] study: condition {job.name} {result['state']}{': ' + line if line else ''}")
        write_json(Path(plan["root"]) / "status.json", status)

    order = [
        Job(c, run_condition, conditions[c], (conditions[c]["after"],) if conditions[c]["after"] else ())
        for c in run_order(conditions)
    ]
    run_jobs(order, jobs, started, ended)  # `ended` has written status.json once per condition
    return status


def write_slurm(plan: dict[str, Any], gpus: int, time_limit: str, partition: str | None) -> Path:
    """One job array per condition and SUBMIT.sh, a condition `after` another waiting for its success."""
    lines = [
        "#!/usr/bin/env bash",
        f"# leaklab study {plan['study']}: one job array per condition.",
        "set -euo pipefail",
    ]
    for cname, cond in plan["conditions"].items():
        script = sweep.write_slurm(cond, gpus, time_limit, partition)
        after = f"--dependency=afterok:${{{_var(cond['after'])}}} " if cond["after"] else ""
        lines.append(f"{_var(cname)}=$(sbatch --parsable {after}{script})")
    lines.append(f'echo "then: leaklab study {plan["path"]} --leaderboard --out {plan["root"]}"')
    path = Path(plan["root"]) / "SUBMIT.sh"
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


def _var(condition: str) -> str:
    return "JOB_" + "".join(ch if ch.isalnum() else "_" for ch in condition).upper()


def parse_args(argv: list[str]) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "name": None,
        "mode": None,
        "smoke": False,
        "jobs": "auto",
        "out": None,
        "fixed": [],
        "gpus": 8,
        "time": "24:00:00",
        "partition": None,
        "leaderboard": False,
    }

    def positional(arg: str) -> None:
        if "=" in arg:
            opts["fixed"].append(arg)
        elif opts["name"] is None:
            opts["name"] = arg
        else:
            raise InputError(f"study: expected key=value, got {arg!r}")

    flags, valued = ("--smoke", "--leaderboard"), ("--jobs", "--out", "--gpus", "--time", "--partition")
    sweep.parse_options(argv, "study", opts, positional, flags, valued)
    if opts["name"] is None:
        raise InputError(f"study: name a study ({', '.join(available_studies()) or 'none found'})")
    if opts["jobs"] == "auto":
        opts["jobs"] = default_slots()
    for key in ("jobs", "gpus"):
        try:
            opts[key] = int(opts[key])
        except ValueError:
            raise InputError(f"study: --{key} takes a number, got {opts[key]!r}") from None
        if opts[key] < 1:
            raise InputError(f"study: --{key} must be at least 1, got {opts[key]}")
    return opts


def command(argv: list[str], log=print) -> int:
    if any(a in ("-h", "--help", "help") for a in argv):
        print(HELP, end="")
        return 0
    from leaklab.leaderboard import write_leaderboard

    opts = parse_args(argv)
    study = load_study(study_path(opts["name"]))
    plan = plan_study(study, opts["fixed"], opts["smoke"], opts["out"])
    root = claim_folder(plan)
    runs = sum(len(c["runs"]) for c in plan["conditions"].values())
    log(f"[leaklab] study {plan['study']}: {len(plan['conditions'])} conditions, {runs} runs in {root}")
    if opts["mode"] == "slurm" and not opts["leaderboard"]:
        log(f"bash {write_slurm(plan, opts['gpus'], opts['time'], opts['partition'])}")
        return 0
    if opts["leaderboard"]:
        status = read_json(root / "status.json") if (root / "status.json").exists() else {}
    else:
        status = run_local(plan, opts["jobs"], log)
    board = write_leaderboard(plan, study, status)
    log(board["markdown"])
    log(
        f"[leaklab] leaderboard: {root / 'leaderboard.md'}, {root / 'leaderboard.json'}, {root / 'index.html'}"
    )
    return 0 if all(s["state"] == "done" for s in status.values()) else 1
