"""`make reproduce`: re-measure every number the docs state about the embedded testbed.

Each claim of `stated_numbers.yaml` (its header says the format) is read from its run's results row (a
study's: its leaderboard as rows) after training what is missing; docs/generated/ is written and a failed
claim exits 1. See docs/reproducibility.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from leaklab.errors import InputError
from leaklab.rundir import read_json, read_rows, write_atomic
from leaklab.side_by_side import Job, default_slots, run_jobs

STATED_NUMBERS = Path(__file__).with_name("stated_numbers.yaml")
TOLERANCES = ("interval", "abs", "at_least")
ROW_KEYS = ("evaluation", "step", "column", "metric", "dose", "cell")


@dataclass(frozen=True)
class Claim:
    name: str  # what the docs say, in a few words
    run: str  # a key of the file's `runs`
    where: str  # the docs page (and section) that states it
    row: dict[str, Any]  # which results.jsonl row holds the measurement ("step: last": the run's last)
    stated: float
    tolerance: str  # interval | abs | at_least
    bound: float | None = None  # abs: the largest difference; at_least: the smallest value


@dataclass(frozen=True)
class RunSpec:
    name: str
    recipe: str = ""  # a study (`study:`) names none
    overrides: list[str] = field(default_factory=list)
    smoke: list[str] | None = None  # overrides that make the run tiny (None: not run by --smoke)
    # Tables the docs show, one per entry: rows = steps, columns = the row's `column`s, of one metric.
    tables: list[dict[str, Any]] = field(default_factory=list)
    study: str | None = None  # a study's name: `leaklab study` instead of `leaklab train` (no recipe)
    after: str | None = None  # a run this one starts from (trained first when both are chosen)

    def command(self, smoke: bool, output_dir: str) -> list[str]:
        if self.study:
            return ["study", self.study, "--local", *(["--smoke"] if smoke else []), *self.overrides,
                    f"output_dir={output_dir}"]  # fmt: skip
        extra = (self.smoke or []) if smoke else []
        return ["train", f"recipe={self.recipe}", *self.overrides, *extra, f"output_dir={output_dir}"]


@dataclass(frozen=True)
class Measured:
    claim: Claim
    value: float | None  # None: the row is missing or its value is null (e.g. MRI below the rule)
    low: float | None = None
    high: float | None = None
    found: bool = True  # the row is in results.jsonl (its value may still be null: MRI N/A)

    @property
    def ok(self) -> bool:
        c = self.claim
        if self.value is None or (isinstance(self.value, float) and math.isnan(self.value)):
            return False
        if c.tolerance == "at_least":
            return self.value >= c.bound
        if c.tolerance == "abs":
            return abs(self.value - c.stated) <= c.bound
        return self.low is not None and self.high is not None and self.low <= c.stated <= self.high


def _claim(entry: dict[str, Any], runs: dict[str, RunSpec], where: str) -> Claim:
    tolerance = entry.get("tolerance", "interval")
    kind, bound = (tolerance, None) if isinstance(tolerance, str) else next(iter(tolerance.items()))
    problems = []
    if kind not in TOLERANCES:
        problems.append(f"tolerance {kind!r} (choose one of {', '.join(TOLERANCES)})")
    if entry.get("run") not in runs:
        problems.append(f"run {entry.get('run')!r} (known: {', '.join(runs)})")
    if set(entry.get("row", {})) - set(ROW_KEYS) or "metric" not in entry.get("row", {}):
        problems.append(f"row {entry.get('row')!r} (keys: {', '.join(ROW_KEYS)}; metric required)")
    if problems:
        raise InputError(f"{where}: claim {entry.get('claim')!r}: unknown {'; '.join(problems)}")
    stated = float(entry.get("stated", bound))
    return Claim(entry["claim"], entry["run"], entry["where"], dict(entry["row"]), stated, kind, bound)


def load_claims(path: Path = STATED_NUMBERS) -> tuple[dict[str, RunSpec], list[Claim]]:
    """The runs and claims of a stated-numbers file; a bad entry is one line naming it (InputError)."""
    data = yaml.safe_load(Path(path).read_text())
    runs = {name: RunSpec(name, **spec) for name, spec in (data.get("runs") or {}).items()}
    return runs, [_claim(entry, runs, str(path)) for entry in data.get("claims") or []]


def _matches(row: dict[str, Any], want: dict[str, Any], metric: str) -> bool:
    return all(row.get(k) == v for k, v in {**want, "metric": metric, "dose": want.get("dose")}.items())


def measure(claim: Claim, rows: list[dict[str, Any]]) -> Measured:
    """The claim's row in a run's results rows ("step: last": the last step its evaluation has rows at)."""
    want = dict(claim.row)
    if want.get("step") == "last":
        steps = [r["step"] for r in rows if r.get("evaluation") == want.get("evaluation")]
        want["step"] = max(steps) if steps else None
    found = [[r for r in rows if _matches(r, want, want["metric"] + x)] for x in ("", "_ci_low", "_ci_high")]
    return Measured(claim, *(f[-1]["value"] if f else None for f in found), found=bool(found[0]))


def at_smoke_steps(claim: Claim) -> Claim:
    """The claim read at a smoke run's last step: a smoke run saves fewer, earlier checkpoints, so a
    trained step the docs name (1000) is not there; step 0 (the base model) is."""
    if claim.row.get("step") in (0, "last"):
        return claim
    return dataclasses.replace(claim, row={**claim.row, "step": "last"})


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}" if x % 1 else f"{x:g}"


def _measured_text(m: Measured) -> str:
    interval = f" [{_fmt(m.low)}, {_fmt(m.high)}]" if m.low is not None else ""
    return _fmt(m.value) + interval


def _tolerance_text(c: Claim) -> str:
    if c.tolerance == "interval":
        return "in the interval"
    return f"± {c.bound:g}" if c.tolerance == "abs" else f">= {c.bound:g}"


def claims_table(measured: list[Measured]) -> str:
    lines = ["| claim | where | stated | measured | tolerance | ok |", "|---|---|---|---|---|---|"]
    for m in measured:
        c = m.claim
        ok = "yes" if m.ok else "**no**"
        lines.append(
            f"| {c.name} | {c.where} | {_fmt(c.stated)} | {_measured_text(m)} | {_tolerance_text(c)} | {ok} |"
        )
    return "\n".join(lines) + "\n"


def _cell(rows: list[dict[str, Any]], want: dict[str, Any]) -> str:
    """The value and interval of the row `want` names (a claim's `row`), as a table shows it."""
    return _measured_text(measure(Claim("", "", "", want, 0.0, "interval"), rows))


def step_table(rows: list[dict[str, Any]], spec: dict[str, Any]) -> str:
    """One metric of one evaluation per step (rows) and column, with intervals where the run has them."""
    evaluation, metric, columns = spec["evaluation"], spec["metric"], spec["columns"]
    mine = [r for r in rows if r.get("evaluation") == evaluation and r.get("dose") is None]
    steps = sorted({r["step"] for r in mine if r.get("metric") == metric})
    names = [metric if column is None else column for column in columns]  # a row without a column
    lines = [f"| step | {' | '.join(names)} |", "|---" * (len(columns) + 1) + "|"]
    for step in steps:
        want = {"evaluation": evaluation, "step": step, "metric": metric}
        cells = [_cell(mine, {**want, "column": column}) for column in columns]
        lines.append(f"| {step} | {' | '.join(cells)} |")
    return f"{spec.get('title', f'{evaluation} {metric}')}:\n\n" + "\n".join(lines) + "\n"


def dose_table(rows: list[dict[str, Any]], spec: dict[str, Any]) -> str:
    """One metric at the run's last step: a line per column, a cell per exposure dose and all members."""
    evaluation, metric, columns = spec["evaluation"], spec["metric"], spec["columns"]
    mine = [r for r in rows if r.get("evaluation") == evaluation and r.get("metric") == metric]
    doses = sorted({r["dose"] for r in mine if r.get("dose") is not None})
    lines = [
        "| | " + " | ".join(f"dose {d}" for d in doses) + " | all members |",
        "|---" * (len(doses) + 2) + "|",
    ]
    for column in columns:
        want = {"evaluation": evaluation, "step": "last", "column": column, "metric": metric}
        cells = [_cell(rows, {**want, "dose": dose}) for dose in (*doses, None)]
        lines.append(f"| {column} | {' | '.join(cells)} |")
    return f"{spec.get('title', f'{evaluation} {metric}')}:\n\n" + "\n".join(lines) + "\n"


def comparable(rows: list[dict[str, Any]]) -> dict[tuple, Any]:
    """A run's results rows less those that measure the machine, not the model (timing rows, wall times,
    throughputs, the `seconds` field), keyed by what each row is."""
    out = {}
    for r in rows:
        metric = str(r.get("metric", ""))
        if r.get("evaluation") == "timing" or "runtime" in metric or "per_second" in metric:
            continue
        key = (r.get("step"), r.get("evaluation"), r.get("column"), r.get("metric"), r.get("dose"))
        out[key + (json.dumps(r.get("params"), sort_keys=True),)] = {
            k: v for k, v in r.items() if k != "seconds"
        }
    return out


def differences(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[tuple[tuple, Any, Any]]:
    """(key, a's value, b's value) of every row that differs (None: the row is missing on that side)."""
    left, right = comparable(a), comparable(b)
    out = []
    for key in sorted(set(left) | set(right), key=str):
        x, y = left.get(key), right.get(key)
        if x != y:
            out.append((key, None if x is None else x.get("value"), None if y is None else y.get("value")))
    return out


def differences_table(moved: list[tuple[tuple, Any, Any]], n_rows: int) -> str:
    """Per evaluation and metric: how many rows differ and the largest difference (`--compare`)."""
    groups: dict[tuple[str, str], list[float]] = {}
    for (_, evaluation, _, metric, _, _), x, y in moved:
        both = isinstance(x, (int, float)) and isinstance(y, (int, float))
        groups.setdefault((str(evaluation), str(metric)), []).append(abs(x - y) if both else math.inf)
    lines = [f"{n_rows - len(moved)} of {n_rows} rows identical (timing left out)"]
    if groups:
        lines += ["", "| evaluation | metric | rows that differ | largest difference |", "|---|---|---|---|"]
        for (evaluation, metric), deltas in sorted(groups.items()):
            lines.append(f"| {evaluation} | {metric} | {len(deltas)} | {max(deltas):.3g} |")
    return "\n".join(lines) + "\n"


def compare_runs(a: Path, b: Path) -> str:
    rows_a, rows_b = read_rows(Path(a) / "results.jsonl"), read_rows(Path(b) / "results.jsonl")
    return differences_table(
        differences(rows_a, rows_b), len(set(comparable(rows_a)) | set(comparable(rows_b)))
    )


def run_dir(spec: RunSpec, smoke: bool, output_dir: str) -> Path:
    """The run's directory, or a study's folder (its leaderboard and runs)."""
    from leaklab.recipe import load_recipe, run_dir_of

    if spec.study:
        from leaklab import study

        fixed = [*spec.overrides, f"output_dir={output_dir}"]
        return Path(
            study.plan_study(study.load_study(study.study_path(spec.study)), fixed, smoke, None)["root"]
        )
    return run_dir_of(load_recipe(spec.recipe, spec.command(smoke, output_dir)[2:]))  # the overrides


def say(line: str) -> None:
    """print, flushed: lines from runs side by side reach a pipe (`make reproduce | tee`) in order."""
    print(line, flush=True)


def train(spec: RunSpec, smoke: bool, output_dir: str, log=say, log_file: Path | None = None) -> Path:
    """`leaklab train` for one run (it resumes, or evaluates what is missing), its output to `log_file`."""
    command = [sys.executable, "-m", "leaklab.cli", *spec.command(smoke, output_dir)]
    where = f" (output in {log_file})" if log_file else ""
    log(f"[reproduce] {spec.name}: leaklab {' '.join(command[3:])}{where}")
    with open(log_file, "w") if log_file else contextlib.nullcontext() as out:
        done = subprocess.run(command, check=False, stdout=out, stderr=subprocess.STDOUT if out else None)
    if done.returncode != 0:
        raise RuntimeError(f"{spec.name}: `leaklab {' '.join(command[3:])}` exited {done.returncode}{where}")
    return run_dir(spec, smoke, output_dir)


def _train_job(arg: tuple[RunSpec, bool, str, Path]) -> dict[str, Any]:
    spec, smoke, output_dir, log_file = arg
    try:
        train(spec, smoke, output_dir, say, log_file)
    except RuntimeError as err:
        return {"state": "failed", "line": str(err)}
    return {"state": "done"}


def train_all(chosen: list[RunSpec], smoke: bool, output_dir: str, log=say) -> dict[str, dict[str, Any]]:
    """The studies one at a time (each trains the shipped runs it shares), then the other runs side by
    side, logs in <output_dir>/logs/: run name -> state, `wall_s`, `resumed`; "(all)" -> the whole time."""
    status: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    for spec in (s for s in chosen if s.study):
        resumed = run_dir(spec, smoke, output_dir).exists()
        begun = time.monotonic()
        train(spec, smoke, output_dir, log)
        status[spec.name] = {
            "state": "done",
            "wall_s": round(time.monotonic() - begun, 1),
            "resumed": resumed,
        }
    others = [s for s in chosen if not s.study]
    # After the studies: a run a study trained (its shared runs) is there now, and gets only what it lacks.
    there = {s.name: run_dir(s, smoke, output_dir).exists() for s in others}
    names = {s.name for s in others}
    logs = Path(output_dir) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    jobs = [
        Job(s.name, _train_job, (s, smoke, output_dir, logs / f"{s.name}.log"), tuple({s.after} & names))
        for s in others
    ]
    status |= run_jobs(
        jobs,
        default_slots(),
        started=lambda job: log(f"[reproduce] {job.name}: started, output in {job.arg[3]}"),
        ended=lambda job, result: log(f"[reproduce] {job.name}: {result['state']}"),
    )
    failed = [f"{name}: {result['line']}" for name, result in status.items() if result["state"] != "done"]
    if failed:
        raise RuntimeError("; ".join(failed))
    status = {name: {"resumed": there.get(name), **result} for name, result in status.items()}
    return {**status, "(all)": {"state": "done", "wall_s": round(time.monotonic() - started, 1)}}


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def cost_page(chosen: list[RunSpec], status: dict[str, dict[str, Any]], smoke: bool, output_dir: str) -> str:
    """What this invocation took, run by run, so that the docs quote a measured cost, never a typed one."""
    lines = [
        "# What `make reproduce` took",
        "",
        f"Generated by `make reproduce` on {datetime.date.today().isoformat()}, from an invocation that "
        f"trained something: each run's wall time, on {os.cpu_count()} CPU cores, {default_slots()} runs side "
        f"by side after the studies (load average {os.getloadavg()[0]:.1f} at the end). A run marked "
        "*resumed* was there before it started (trained by a study above, or by an earlier invocation) and "
        "got only what it lacked.",
        "",
        "| run | wall | |",
        "|---|---|---|",
    ]
    for spec in sorted(chosen, key=lambda s: not s.study):  # in the order they ran: the studies first
        result = status[spec.name]
        lines.append(
            f"| {spec.name} | {_minutes(result['wall_s'])} | {'resumed' if result['resumed'] else ''} |"
        )
        if spec.study:
            conditions = read_json(run_dir(spec, smoke, output_dir) / "status.json")
            for cname, cond in conditions.items():
                wall = _minutes(cond["wall_s"]) if "wall_s" in cond else "-"
                lines.append(f"| &nbsp;&nbsp;{spec.name}: {cname} | {wall} | side by side |")
    whole = _minutes(status["(all)"]["wall_s"])
    return "\n".join([*lines, f"| all, side by side as above | {whole} | |", ""])


def leaderboard_rows(board: dict[str, Any]) -> list[dict[str, Any]]:
    """A study's leaderboard.json as rows: its cells' AUROC and TPR at 1% FPR, its findings' statistic."""
    from leaklab.rows import metric_rows

    suffixes = ("", "_ci_low", "_ci_high")
    rows = []
    for cell, stats in board.get("table", {}).items():
        for column, s in stats.items():
            metrics = {m + x: s.get(m + x) for m in ("auroc", "tpr@1%fpr") for x in suffixes}
            rows += metric_rows(metrics, column, context={"evaluation": "leaderboard", "cell": cell})
    for f in board.get("findings", []):
        metrics = {"statistic" + x: f.get(key) for x, key in zip(suffixes, ("value", "ci_low", "ci_high"))}
        rows += metric_rows(metrics, f["id"], context={"evaluation": "finding"})
    return rows


def generated_page(spec: RunSpec, root: Path, rows: list[dict], measured: list[Measured], smoke: bool) -> str:
    command = "leaklab " + " ".join(spec.command(smoke, "OUT")).replace(" output_dir=OUT", "")
    where = "study folder" if spec.study else "run directory"
    parts = [
        f"# Measured: `{spec.name}`\n",
        "Generated by `make reproduce` (leaklab/reproduce); do not edit by hand.\n",
        f"Command: `{command}`; {where} `{root.name}`.\n",
        claims_table(measured) if measured else "",
        *((dose_table if t.get("per") == "dose" else step_table)(rows, t) for t in spec.tables),
        # A study's whole leaderboard, its headings one level down
        *([("\n" + (root / "leaderboard.md").read_text()).replace("\n#", "\n##")] if spec.study else []),
    ]
    return "\n".join(p for p in parts if p)


def reproduce(args: argparse.Namespace, log=say) -> int:
    runs, claims = load_claims(Path(args.claims))
    chosen = [r for r in runs.values() if (not args.only or r.name in args.only)]
    if args.smoke:
        chosen = [r for r in chosen if r.smoke is not None]
    if not args.no_train:
        status = train_all(chosen, args.smoke, args.output_dir, log)
        if args.docs and not all(r.get("resumed", True) for r in status.values()):
            write_atomic(Path(args.docs) / "cost.md", cost_page(chosen, status, args.smoke, args.output_dir))
    everything: list[Measured] = []
    for spec in chosen:
        root = run_dir(spec, args.smoke, args.output_dir)
        if spec.study:
            rows = leaderboard_rows(read_json(root / "leaderboard.json"))
        else:
            rows = read_rows(root / "results.jsonl")
        mine = [c for c in claims if c.run == spec.name]
        measured = [measure(at_smoke_steps(c) if args.smoke else c, rows) for c in mine]
        everything += measured
        if args.docs:
            page = generated_page(spec, root, rows, measured, args.smoke)
            write_atomic(Path(args.docs) / f"{spec.name}.md", page)
    log(claims_table(everything))
    if args.docs:
        write_atomic(
            Path(args.docs) / "claims.md", "# Every stated number, re-measured\n\n" + claims_table(everything)
        )
    missing = [m.claim.name for m in everything if not m.found]
    if args.smoke:  # tiny sizes measure nothing worth comparing: the rows must be there (a null value,
        # such as the MRI of a side below the competence rule, is a row the claim will read at full size)
        log(
            f"[reproduce] smoke: {len(everything) - len(missing)} of {len(everything)} claims found their row"
        )
        return 1 if missing or not everything else 0
    failed = [m for m in everything if not m.ok]
    log(f"[reproduce] {len(everything) - len(failed)} of {len(everything)} claims reproduce")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leaklab.reproduce", description=__doc__.splitlines()[0])
    parser.add_argument("--claims", default=str(STATED_NUMBERS), help="the stated-numbers file")
    parser.add_argument("--output-dir", default="runs", help="where the runs go (default: runs)")
    parser.add_argument("--docs", default=None, help="write the generated pages here (docs/generated)")
    parser.add_argument("--only", nargs="*", default=None, help="these runs only")
    parser.add_argument("--smoke", action="store_true", help="each run's smoke sizes: check the machinery")
    parser.add_argument("--no-train", action="store_true", help="read the runs already there, train nothing")
    parser.add_argument("--compare", nargs=2, metavar="RUN_DIR", help="what two runs' results differ in")
    args = parser.parse_args(argv)
    if args.compare:
        print(compare_runs(*args.compare), end="")
        return 0
    try:
        return reproduce(args)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
