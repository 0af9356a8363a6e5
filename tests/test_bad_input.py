"""Bad input, one table: every row is a command line a user could type, with the exit code it must end
with and the words its message must contain (the offending key, file, line or id). For every row the
test also checks that stderr holds no traceback, and that an earlier run directory next to it is
byte-for-byte unchanged and no half-made run directory appears. Cases that need a model are `slow`.

Calls go through `leaklab.cli.main([...])` in this process (the same path as the `leaklab` command);
one subprocess checks the installed entry point and `--debug`.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import SMALL_RUN, SMALL_TINY
from leaklab.cli import main as cli_main
from leaklab.hardware import gpu_state

ROW = {
    "task_id": "T/0",
    "prompt": "def add(a, b):\n",
    "canonical_solution": "    return a + b\n",
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
}


def rows_file(tmp: Path, rows: list[dict] | None = None, raw: bytes | None = None) -> Path:
    path = tmp / "bench.jsonl"
    if raw is None:
        raw = "".join(json.dumps(r) + "\n" for r in rows).encode()
    path.write_bytes(raw)
    return path


def good(i: int, **change) -> dict:
    row = {**ROW, "task_id": f"T/{i}", **change}
    return {k: v for k, v in row.items() if v is not ...}


def make_run(root: Path) -> Path:
    """A run directory as training leaves it (recipe, manifest, results), without training."""
    from leaklab.recipe import load_recipe, to_yaml

    recipe = load_recipe("tiny_cpt", [*SMALL_RUN, "evaluate.detectors=[ppl]", "evaluate.base_model=false"])
    root.mkdir(parents=True)
    (root / "recipe.yaml").write_text(to_yaml(recipe))
    members, non = ["HumanEval/0", "HumanEval/1"], ["HumanEval/2", "HumanEval/3"]
    manifest = {"benchmark": "humaneval", "member_ids": members, "non_member_ids": non}
    (root / "manifest.json").write_text(json.dumps(manifest))
    rows = []
    for step, auroc in ((1, 0.61), (2, 0.74)):
        head = {"step": step, "epoch": float(step), "evaluation": "detection", "detector": "ppl"}
        rows += [
            {**head, "params": {}, "column": "ppl", "metric": "auroc", "value": auroc},
            {**head, "params": {}, "column": "ppl", "metric": "f1", "value": auroc - 0.1},
        ]
    (root / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@dataclass
class Case:
    id: str
    # tmp dir, the earlier run (in tmp/runs), monkeypatch -> argv
    argv: Callable[[Path, Path, pytest.MonkeyPatch], list[str]]
    code: int
    names: list[str]  # substrings of stderr (or stdout for exit 0) naming the input; {tmp} is replaced
    slow: bool = False
    run_dir_target: bool = False  # the command reads the earlier run itself (report / evaluate)
    extra: Callable[[Path, Path, str], None] | None = None  # more checks: (tmp, run, err)
    marks: list = field(default_factory=list)


def train(*keys: str):
    return lambda tmp, run, mp: ["train", "recipe=tiny_cpt", f"output_dir={tmp / 'runs'}", *SMALL_RUN, *keys]


def train_data(rows=None, raw=None):
    return lambda tmp, run, mp: [
        "train",
        "recipe=tiny_cpt",
        f"output_dir={tmp / 'runs'}",
        *SMALL_RUN,
        f"data.path={rows_file(tmp, rows, raw)}",
    ]


def _full_disk(tmp, run, mp):
    """A fake writer: every fsync says the disk is full (a tmpfs needs root and a mount)."""
    import leaklab.rundir

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    mp.setattr(leaklab.rundir.os, "fsync", full)
    return ["report", str(run)]


def _interrupted_report(tmp, run, mp):
    """Ctrl-C after the report's first file is written."""
    import leaklab.rundir

    real, calls = leaklab.rundir.os.replace, []

    def replace_then_interrupt(src, dst):
        calls.append(dst)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return real(src, dst)

    mp.setattr(leaklab.rundir.os, "replace", replace_then_interrupt)
    return ["report", str(run)]


def _corrupted_results(tmp, run, mp):
    lines = (run / "results.jsonl").read_bytes().splitlines(keepends=True)
    lines.insert(1, b'{"step": 1, "metric": "auroc", "val\n')
    (run / "results.jsonl").write_bytes(b"".join(lines))
    return ["report", str(run)]


def _checkpoint_deleted(tmp, run, mp):
    """A checkpoint listed when the evaluation starts and deleted before its turn comes."""
    import leaklab.evaluate

    ckpt = run / "checkpoints" / "checkpoint-3"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text('{"epoch": 3.0}')
    mp.setattr(leaklab.evaluate.Evaluator, "prepare", lambda self: shutil.rmtree(ckpt))
    return ["evaluate", str(run)]


def _hub_unreachable(tmp, run, mp):
    """Not offline mode, but no route to the hub: fails in seconds, before a minute of retries."""
    mp.delenv("HF_HUB_OFFLINE", raising=False)
    if "huggingface_hub.constants" in sys.modules:  # read at import; conftest set it offline
        mp.setattr(sys.modules["huggingface_hub.constants"], "HF_HUB_OFFLINE", False)
    mp.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens, refused at once
    for proxy in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        mp.delenv(proxy, raising=False)
    return ["train", "model.name_or_path=someorg/some-model", f"output_dir={tmp / 'runs'}", *SMALL_RUN]


def _damaged_manifest(tmp, run, mp):
    (run / "manifest.json").write_text('{"benchmark": "humaneval", "member_ids": ["Hum')
    return ["evaluate", str(run)]


def _report_kept(tmp, run, err):
    assert (run / "report" / "report.md").read_text() == "earlier report\n"


def _results_untouched_by_corruption(tmp, run, err):
    assert err.count("results.jsonl:2") == 1  # once, not once per read


def _yaml_recipe(tmp, run, mp):
    (tmp / "broken.yaml").write_text("train:\n  epochs: [1,\n")
    return ["train", f"recipe={tmp / 'broken.yaml'}", f"output_dir={tmp / 'runs'}"]


def _output_dir_under_a_file(tmp, run, mp):
    (tmp / "a_file").write_text("")
    return ["train", "recipe=tiny_cpt", f"output_dir={tmp / 'a_file' / 'runs'}", *SMALL_RUN]


def _audit_readme_form(tmp, run, mp):
    """The README's audit with the default detectors (ref among them); small model, three tasks, and
    DC-PDD's frequencies from a small text file instead of the whole standard library (20 s)."""
    (tmp / "corpus.txt").write_text("def f(x):\n    return x + 1\n" * 50)
    return ["audit", "model=builtin:tiny", "benchmark=humaneval", f"output_dir={tmp / 'runs'}", *SMALL_TINY,
            "data.max_samples=3", f"evaluate.dcpdd_corpus={tmp / 'corpus.txt'}"]  # fmt: skip


_HAS_GPU = gpu_state()[0]

CASES = [
    # --- the table
    Case("model-missing-local-path", train("model.name_or_path=/nonexistent"), 2,
         ["model.name_or_path", "/nonexistent", "does not exist"]),
    Case("model-hub-id-offline", train("model.name_or_path=leaklab-tests/not-a-cached-model"), 1,
         ["hf download leaklab-tests/not-a-cached-model", "model.name_or_path=models/not-a-cached-model"],
         slow=True),
    Case("detector-param-not-a-number", train("evaluate.detectors=[mink:k=abc]"), 2,
         ["evaluate.detectors", "mink:k", "'abc'"]),
    Case("audit-readme-form-without-detectors", _audit_readme_form, 0, ["skipping 'ref'", "evaluate.reference_model"], slow=True),
    Case("recipe-file-missing", lambda tmp, run, mp: ["train", "recipe=/path/that/does/not/exist.yaml"], 2,
         ["/path/that/does/not/exist.yaml", "does not exist"]),
    Case("train-help", lambda tmp, run, mp: ["train", "--help"], 0, ["usage: leaklab train", "recipe=NAME"]),
    Case("evaluate-help", lambda tmp, run, mp: ["evaluate", "--help"], 0, ["usage: leaklab evaluate RUN_DIR"]),
    Case("audit-help", lambda tmp, run, mp: ["audit", "--help"], 0, ["usage: leaklab audit", "model=M"]),
    Case("benchmark-row-missing-canonical_solution",
         train_data([good(0), good(1, canonical_solution=...)]), 2, ["bench.jsonl:2", "canonical_solution"]),
    Case("benchmark-row-missing-test", train_data([good(0), good(1, test=...)]), 2, ["bench.jsonl:2", "test"]),
    Case("benchmark-row-missing-task_id", train_data([good(0, task_id=...)]), 2, ["bench.jsonl:1", "task_id"]),
    Case("benchmark-not-utf8", train_data(raw=(json.dumps(good(0)) + "\n").encode() + b'{"task_id": "\xff"}\n'),
         2, ["bench.jsonl:2", "UTF-8"]),
    Case("benchmark-duplicate-ids", train_data([good(0), good(1), good(1)]), 2, ["duplicate", "'T/1'"]),
    # tiny_cpt's SrDetection verifies its variants by running the tests (verify: tests).
    Case("benchmark-empty-test", train_data([good(0), good(1, test="  \n")]), 2,
         ["bench.jsonl", "T/1", "no tests", "evaluate.srdetection.verify: tests"]),
    Case("benchmark-prompt-null", train_data([good(0, prompt=None)]), 2, ["bench.jsonl:1", "prompt is null"]),
    # --- the additions
    Case("benchmark-empty-file", train_data(raw=b""), 2, ["bench.jsonl", "no humaneval tasks"]),
    Case("benchmark-broken-json-line", train_data(raw=(json.dumps(good(0)) + '\n{"task_id": "T/1",\n').encode()),
         2, ["bench.jsonl:2", "not valid JSON"]),
    Case("benchmark-row-missing-entry_point", train_data([good(0, entry_point=...)]), 2,
         ["bench.jsonl:1", "entry_point"]),
    Case("mix-ratio-0-to-1", train("mix.ratio=0:1"), 2, ["mix.ratio", "'0:1'"]),
    Case("train-epochs-negative", train("train.epochs=-1"), 2, ["train.epochs", "-1"]),
    Case("output-dir-unwritable", _output_dir_under_a_file, 2, ["output_dir", "a_file"]),
    Case("disk-full-during-report", _full_disk, 1, ["No space left on device", "report"],
         run_dir_target=True, extra=_report_kept),
    Case("report-interrupted", _interrupted_report, 130, ["interrupted"], run_dir_target=True),
    Case("results-jsonl-corrupted-line", _corrupted_results, 0, ["results.jsonl:2", "skipped"],
         run_dir_target=True, extra=_results_untouched_by_corruption),
    Case("manifest-json-damaged", _damaged_manifest, 2, ["manifest.json is damaged", "restore it"],
         run_dir_target=True),
    Case("checkpoint-deleted-mid-run", _checkpoint_deleted, 1, ["checkpoint-3", "is gone", "leaklab evaluate"],
         slow=True, run_dir_target=True),
    # --- more of the same kind
    Case("reference-model-hub-id-offline", lambda tmp, run, mp: ["audit", "model=builtin:tiny",
         f"output_dir={tmp / 'runs'}", *SMALL_TINY, "data.max_samples=2", "detectors=[ref]",
         "evaluate.reference_model=leaklab-tests/no-reference"], 1,
         ["evaluate.reference_model=models/no-reference", "hf download leaklab-tests/no-reference"], slow=True),
    Case("model-hub-unreachable", _hub_unreachable, 1,
         ["hf download someorg/some-model", "model.name_or_path=models/some-model"]),
    Case("data-path-missing", train("data.path=/no/such/bench.jsonl"), 2, ["data.path", "/no/such/bench.jsonl"]),
    # A GPU-only option on a CPU-only machine (CI's): one line in the preflight, nothing written.
    *([] if _HAS_GPU else [
        Case("train-bf16-on-cpu", train("train.bf16=true"), 2, ["train.bf16", "train.bf16=false", "no GPU"]),
        Case("train-deepspeed-on-cpu", train("train.deepspeed=launch/zero2.json"), 2,
             ["train.deepspeed", "needs a GPU"]),
    ]),
    Case("deepspeed-config-missing", train("train.deepspeed=/no/zero9.json"), 2, ["train.deepspeed", "/no/zero9.json"]),
    Case("unknown-recipe-key", train("train.lerning_rate=1e-3"), 2, ["train.lerning_rate", "train.learning_rate"]),
    Case("override-without-equals", train("epochs"), 2, ["'epochs'", "key=value"]),
    Case("recipe-not-yaml", _yaml_recipe, 2, ["broken.yaml", "not valid YAML"]),
    Case("report-not-a-run-dir", lambda tmp, run, mp: ["report", str(tmp)], 2, ["not a leaklab run directory"]),
    Case("audit-without-model", lambda tmp, run, mp: ["audit", "benchmark=humaneval", f"output_dir={tmp / 'runs'}"],
         2, ["model= is required", "builtin:tiny"]),
    Case("compare-out-is-a-file", lambda tmp, run, mp: (tmp / "a_file").write_text("") and None
         or ["compare", str(run), "--out", str(tmp / "a_file")], 2, ["--out", "a_file", "is a file"]),
    Case("compare-step-no-run-has", lambda tmp, run, mp: ["compare", str(run), "--step", "999"], 2,
         ["step 999", "steps with results: 1, 2"]),
    Case("report-out-elsewhere", lambda tmp, run, mp: ["report", str(run), "--out", str(tmp / "shared" / "r1")], 0,
         ["shared/r1/index.html"], extra=lambda tmp, run, err: (tmp / "shared" / "r1" / "report.md").is_file() or 1 / 0),
    Case("report-out-is-a-file", lambda tmp, run, mp: (tmp / "a_file").write_text("") and None
         or ["report", str(run), "--out", str(tmp / "a_file")], 2, ["--out", "a_file", "is a file"]),
    Case("build-tiny-help", lambda tmp, run, mp: ["build-tiny", "--help"], 0, ["usage: leaklab build-tiny"]),
    Case("version", lambda tmp, run, mp: ["--version"], 0, ["leaklab 0."]),
    Case("audit-unknown-detector", lambda tmp, run, mp: ["audit", "model=builtin:tiny", "detectors=[pll]",
         f"output_dir={tmp / 'runs'}"], 2, ["pll", "ppl"]),
    Case("data-name-without-data-path", train("data.name=my-bench"), 2, ["data.name", "data.path"]),
    Case("unknown-command", lambda tmp, run, mp: ["evalute", "x"], 2, ["'evalute'", "did you mean 'evaluate'"]),
]  # fmt: skip


@pytest.mark.parametrize(
    "case", [pytest.param(c, id=c.id, marks=[pytest.mark.slow] if c.slow else []) for c in CASES]
)
def test_bad_input(case: Case, tmp_path, monkeypatch, capsys, leaklab_cache):
    monkeypatch.delenv("LEAKLAB_DEBUG", raising=False)
    run = make_run(tmp_path / "runs" / "earlier")
    (run / "report").mkdir()
    (run / "report" / "report.md").write_text("earlier report\n")
    argv = case.argv(tmp_path, run, monkeypatch)
    # After the setup: a file the user damaged is the input; the command must not change it either.
    before = {k: v for k, v in snapshot(run).items() if not k.startswith("checkpoints/")}

    code = cli_main(argv)
    out, err = capsys.readouterr()
    monkeypatch.undo()  # the fake writers go before the files are read back

    assert code == case.code, f"exit {code}, expected {case.code}\nstderr:\n{err}"
    shown = out + err if case.code == 0 else err
    for name in case.names:
        assert name in shown, f"{name!r} not in the message:\n{shown}"
    assert "Traceback" not in out + err
    if case.code != 0:
        problem_lines = [line for line in err.splitlines() if line.startswith("leaklab:")]
        assert 1 <= len(problem_lines) <= 3, err
    # Nothing earlier is lost or altered; a failed command leaves no new run directory.
    after = snapshot(run)
    # report/ is derived from results.jsonl: a report run (even an interrupted one) may rewrite its files,
    # each whole (no temporary file is left, checked below).
    report_written = case.run_dir_target and case.code in (0, 130)
    for key, data in before.items():
        if report_written and key.startswith("report/"):
            continue
        assert after.get(key) == data, f"{key} was changed or removed"
    assert not [k for k in after if k.endswith(".tmp")], "a temporary file was left behind"
    if case.code != 0:
        assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["earlier"]
    if case.extra:
        case.extra(tmp_path, run, err)


def test_the_matrix_covers_at_least_25_bad_inputs():
    bad = [c for c in CASES if c.code != 0 or c.id.startswith("results")]
    assert len({c.id for c in CASES}) == len(CASES) >= 25 + 3 and len(bad) >= 25


def test_debug_shows_the_traceback(tmp_path, capsys, monkeypatch):
    argv = ["train", "recipe=tiny_cpt", "train.epochs=-1", f"output_dir={tmp_path}"]
    assert cli_main([*argv, "--debug"]) == 2
    assert "Traceback" in capsys.readouterr().err
    monkeypatch.setenv("LEAKLAB_DEBUG", "1")
    assert cli_main(argv) == 2
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.slow
def test_the_installed_command_prints_one_line(tmp_path):
    """The console script and `accelerate launch leaklab/train.py` (the file) end the same way."""
    for cmd in (
        [
            sys.executable,
            "-m",
            "leaklab.cli",
            "train",
            "model.name_or_path=/nonexistent",
            f"output_dir={tmp_path}",
        ],
        [sys.executable, "leaklab/train.py", "model.name_or_path=/nonexistent", f"output_dir={tmp_path}"],
    ):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines() == [
            "leaklab: model.name_or_path: /nonexistent does not exist (a local path; check the spelling)"
        ]
    assert not any(tmp_path.iterdir())


def test_keys_lists_every_key_with_type_value_and_meaning(capsys):
    import dataclasses

    from leaklab.keys import describe_keys
    from leaklab.recipe import Recipe

    assert cli_main(["keys", "recipe=tiny_cpt"]) == 0
    out = capsys.readouterr().out
    rows = describe_keys(Recipe())
    n_leaves = 0
    stack = [Recipe()]
    while stack:
        for f in dataclasses.fields(node := stack.pop()):
            value = getattr(node, f.name)
            if dataclasses.is_dataclass(value):
                stack.append(value)
            else:
                n_leaves += 1
    # One line a key; a value too long for its column follows on a line of its own ("    = ...").
    key_lines = [line for line in out.splitlines() if not line.startswith("    = ")]
    assert len(rows) == n_leaves == len(key_lines)
    assert [r[0] for r in rows if r[3] == "(no description)"] == []
    line = next(line for line in out.splitlines() if line.startswith("train.epochs "))
    assert line.split()[:3] == ["train.epochs", "int", "8"]  # tiny_cpt's value, not the schema's 3
    assert "passes over the training mixture" in line


def test_run_files_follow_the_umask(tmp_path):
    from leaklab.rundir import append_rows, write_atomic, write_json

    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "report.md", "x")
        write_json(tmp_path / "manifest.json", {})
        append_rows(tmp_path / "results.jsonl", [{"step": 0}])
        modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
        assert modes == dict.fromkeys(modes, 0o644) and len(modes) == 3
        os.umask(0o077)
        write_atomic(tmp_path / "private.md", "x")
        assert (tmp_path / "private.md").stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old)


def test_rows_checked_on_a_local_file_name_file_line_and_task(tmp_path):
    from leaklab.data.benchmarks import DataFormatError, load_benchmark

    path = rows_file(tmp_path, [good(0), good(1, prompt=7)])
    with pytest.raises(
        DataFormatError, match=r"bench.jsonl:2 \(task T/1\): field prompt is int, expected text"
    ):
        load_benchmark("humaneval", path=path)
    assert len(load_benchmark("humaneval", path=rows_file(tmp_path, [good(0), good(1)]))) == 2


def test_a_local_file_gets_its_own_benchmark_name(tmp_path, capsys):
    from leaklab.evaluate import load_tasks
    from leaklab.recipe import load_recipe
    from leaklab.rundir import make_manifest

    path = rows_file(tmp_path, [good(0), good(1)])
    recipe = load_recipe("tiny_cpt", [f"data.path={path}", "data.name=my-bench"])
    tasks = load_tasks(recipe)
    assert {t.benchmark for t in tasks} == {"my-bench"}

    class Split:
        member_ids, non_member_ids = ["T/0"], ["T/1"]

    manifest = make_manifest(recipe, tasks, Split)
    assert (manifest["benchmark"], manifest["benchmark_format"]) == ("my-bench", "humaneval")
    # Without data.name nothing changes (the manifests of existing runs stay byte-identical).
    plain = load_recipe("tiny_cpt", [f"data.path={path}"])
    assert make_manifest(plain, load_tasks(plain), Split)["benchmark"] == "humaneval"
    assert "benchmark_format" not in make_manifest(plain, load_tasks(plain), Split)


def test_a_canonical_solution_that_fails_its_tests_is_counted_reported_and_left_out(tmp_path):
    """A local benchmark whose canonical solution fails its own tests was accepted silently: a model
    could never pass that task, and its variants never verify."""
    from leaklab.errors import InputError
    from leaklab.evaluate import load_tasks
    from leaklab.recipe import load_recipe
    from leaklab.report.rundata import load_run
    from leaklab.report.sections import header_section
    from leaklab.rundir import write_json

    path = rows_file(tmp_path, [good(0), good(1, canonical_solution="    return a - b\n"), good(2)])
    recipe = load_recipe("tiny_cpt", [f"data.path={path}"])  # SrDetection verifies variants by tests
    said, left_out = [], []
    tasks = load_tasks(recipe, log=said.append, left_out=left_out)
    assert [t.task_id for t in tasks] == ["T/0", "T/2"]
    assert [d["task_id"] for d in left_out] == ["T/1"] and left_out[0]["reason"]
    assert len(said) == 1 and "bench.jsonl: the canonical solutions of 1 of 3 tasks fail" in said[0], said
    assert "(first: T/1: " in said[0] and said[0].endswith("those tasks are left out")
    # A run records them in its manifest; its report names them.
    write_json(tmp_path / "run" / "manifest.json", {"benchmark": "humaneval", "left_out": left_out})
    facts = dict(header_section(load_run(tmp_path / "run")).items[0].rows)
    assert facts["left out"].startswith("1 task(s) whose canonical solution fails its own tests (first: T/1")
    # Nothing in the recipe runs tests: nothing is run, all three load.
    assert len(load_tasks(load_recipe("tiny_cpt", [f"data.path={path}", "evaluate.detectors=[ppl]"]))) == 3
    # Every solution failing says the file is wrong, in one line.
    broken = rows_file(tmp_path, [good(0, canonical_solution="    return 0\n")])
    with pytest.raises(InputError, match="the canonical solution of every task fails its own tests"):
        load_tasks(load_recipe("tiny_cpt", [f"data.path={broken}"]))


@pytest.mark.parametrize(
    "recipe, keys",
    [
        ("tiny_cpt", ["evaluate.srdetection.verify=alpha"]),
        ("tiny_cpt", ["evaluate.srdetection.verify=none"]),
        ("tiny_cpt", ["evaluate.detectors=[ppl,zlib]"]),
        ("tiny_counterfactual", []),
        ("tiny_extraction", []),
    ],
)
def test_tasks_without_tests_load_when_nothing_runs_them(tmp_path, recipe, keys):
    from leaklab.evaluate import load_tasks, tests_needed_by
    from leaklab.recipe import load_recipe

    path = rows_file(tmp_path, [good(0), good(1, test="")])
    loaded = load_recipe(recipe, [f"data.path={path}", *keys])
    assert tests_needed_by(loaded) == []
    assert [t.tests for t in load_tasks(loaded)][1] == ""


@pytest.mark.parametrize(
    "recipe, keys, needing",
    [
        ("tiny_cpt", [], "evaluate.srdetection.verify: tests"),
        ("tiny_cpt", ["evaluate.srdetection.verify=alpha", "evaluate.evaluations=[detection,accuracy]"],
         "evaluate.evaluations: accuracy"),
        ("tiny_cpt", ["evaluate.srdetection.verify=alpha", "evaluate.evaluations=[mri]"], "evaluate.evaluations: mri"),
        ("tiny_grpo", ["data.benchmark=humaneval", "evaluate.evaluations=[extraction]"], "train.stage: rl"),
    ],
)  # fmt: skip
def test_tasks_without_tests_are_refused_by_name_where_tests_run(tmp_path, recipe, keys, needing):
    from leaklab.errors import InputError
    from leaklab.evaluate import load_tasks
    from leaklab.recipe import load_recipe

    path = rows_file(tmp_path, [good(0), good(1, test="   ")])
    with pytest.raises(InputError) as refused:
        load_tasks(load_recipe(recipe, [f"data.path={path}", *keys]))
    message = str(refused.value)
    assert "\n" not in message and needing in message and "T/1" in message and str(path) in message, message


def test_the_sandbox_changes_no_process_state_of_its_caller():
    """Programs set their umask and limits; judged tests chdir and set umask 0 (execution/harness.py):
    all of it must stay inside the workers."""
    import resource

    from leaklab.execution.sandbox import Sandbox
    from leaklab.rundir import current_umask

    limits = [getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_")]

    def state():
        return (
            current_umask(),
            os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getcwd(),
            [resource.getrlimit(lim) for lim in limits],
        )  # fmt: skip

    before = state()
    program = (
        "import os, resource\nos.umask(0)\nresource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))\nprint(1)\n"
    )
    tests = (
        "import os, unittest\nclass TestCases(unittest.TestCase):\n"
        "    def test_it(self):\n        os.umask(0)\n        self.assertEqual(task_func(), 1)\n"
    )
    with Sandbox(workers=1, timeout_s=10) as sb:
        assert sb.run(program).passed
        assert sb.run_unittest("def task_func():\n    return 1\n", tests).passed
        assert sb.check_function(
            "def f():\n    return 1\n", "f", "def check(c):\n    assert c() == 1\n"
        ).passed
        assert state() == before
    assert state() == before
