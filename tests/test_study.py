"""`leaklab study`: the clean control's data (`inject.withhold`), the study file's plan and validation, the
leaderboard's statistics against hand-computed values, the findings' verdicts, the Slurm array script,
and the smoke study end to end."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from leaklab import leaderboard
from leaklab.data.doses import assign_doses
from leaklab.data.mixing import Packing, build_dosed_mixture
from leaklab.errors import InputError
from leaklab.recipe import InjectConfig, RecipeError, load_recipe, run_dir_of, run_hash
from leaklab.study import claim_folder, load_study, plan_study, study_path
from leaklab.study import command as study_command

REPO = Path(__file__).resolve().parents[1]


class CharTokenizer:
    """One token per character (ids 1..200; EOS 0)."""

    eos_token_id = 0

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [1 + (ord(c) % 200) for c in text]}


def _members(n):
    return {f"t/{i}": f"def member_{i}(x):\n    return x * {i} + {i * 7}\n" for i in range(n)}


# --------------------------------------------------------------------------- the clean control's data


def test_withhold_keeps_the_layout_and_trains_no_member():
    texts = _members(8)
    doses = assign_doses(list(texts), [1, 4], seed=0)
    web = [f"# corpus line {i}\n" * 20 for i in range(40)]
    packing = Packing(code=1, web=3, block_len=128, seed=5)
    window = [0.5, 1.0]
    dosed, dosed_info = build_dosed_mixture(
        texts, doses, web, CharTokenizer(), packing, InjectConfig(window=window)
    )
    clean, clean_info = build_dosed_mixture(
        texts, doses, web, CharTokenizer(), packing, InjectConfig(window=window, withhold=True)
    )
    assert clean.shape == dosed.shape  # the same steps
    assert sum(dosed_info["exposures"].values()) == sum(doses.values())
    assert clean_info["exposures"] == {task_id: 0 for task_id in texts}  # counted in the blocks themselves
    assert clean_info["member_tokens"] == 0 and clean_info["withheld"] is True
    assert clean_info["web_tokens"] == clean.size
    # Where no member was planned the two streams hold the same corpus blocks up to the first member block.
    first = min(b for at in dosed_info["exposure_blocks"].values() for b in at)
    assert (clean[:first] == dosed[:first]).all()
    assert "withheld" not in dosed_info


def test_withhold_is_in_the_run_identity_only_when_set_and_only_for_cpt():
    dosed = load_recipe("tiny_dose")
    clean = load_recipe("tiny_dose", ["inject.withhold=true"])
    assert run_hash(dosed) != run_hash(clean)
    assert run_hash(load_recipe("tiny_dose", ["inject.withhold=false"])) == run_hash(dosed)
    with pytest.raises(RecipeError, match="inject.withhold: only train.stage cpt"):
        load_recipe("tiny_sft", ["inject.withhold=true"])


# --------------------------------------------------------------------------- the study file and its plan


def _plan(tmp_path, *args, smoke=False):
    study = load_study(study_path("detectors"))
    return study, plan_study(study, list(args), smoke, str(tmp_path / "s"))


def test_the_plan_shares_the_shipped_runs_and_places_the_others_in_the_study(tmp_path):
    _, plan = _plan(tmp_path)
    runs = {r["name"]: r for c in plan["conditions"].values() for r in c["runs"]}
    assert list(runs) == [
        "clean",
        "dose",
        "timing",
        "dilution/1_1",
        "dilution/1_8",
        "rephrased",
        "file/file",
        "file/document",
        "sft",
        "rl",
    ]
    # dose, sft and rl are tiny_dose, tiny_sft and tiny_grpo themselves: their own run directories
    for name, recipe in (("dose", "tiny_dose"), ("sft", "tiny_sft"), ("rl", "tiny_grpo")):
        assert runs[name]["shared"]
        assert runs[name]["run_dir"] == str(run_dir_of(load_recipe(recipe)).absolute())
    for name in ("clean", "timing", "dilution/1_8"):
        assert not runs[name]["shared"]
        assert runs[name]["run_dir"].startswith(str(tmp_path / "s" / "runs"))
    # timing is one run: half of the members exposed in the first quarter, half in the last
    timing = load_recipe("tiny_dose", runs["timing"]["overrides"])
    assert timing.inject.windows == {"early": [0.0, 0.25], "late": [0.75, 1.0]}
    assert timing.inject.window is None and timing.inject.doses == [4] and timing.mix.ratio == "1:8"
    assert load_recipe("tiny_dose", runs["clean"]["overrides"]).inject.withhold
    assert plan["conditions"]["rl"]["after"] == "sft"
    forms = [
        load_recipe("tiny_dose", runs[n]["overrides"]) for n in ("rephrased", "file/file", "file/document")
    ]
    assert [(r.inject.form, r.inject.doses) for r in forms] == [
        ("rephrased", [16]),
        ("file", [16]),
        ("document", [16]),
    ]
    assert [r.evaluate.dataset_tests for r in forms] == [[], ["sharded_likelihood"], ["sharded_likelihood"]]


def test_the_folder_is_claimed_again_while_a_shared_run_is_not_yet_trained(tmp_path):
    """The link to a shipped recipe's run dangles until that run exists; claiming the folder again (a
    second `--leaderboard` or a rerun) must keep the link, not fail on it."""
    _, plan = _plan(tmp_path)
    for cond in plan["conditions"].values():
        for run in cond["runs"]:
            if run["shared"]:
                run["run_dir"] = str(tmp_path / "not-trained-yet" / run["name"])
    first = claim_folder(plan)
    link = first / "runs" / "sft"
    assert link.is_symlink() and not link.exists()  # dangling: tiny_sft has not been trained here
    assert claim_folder(plan) == first
    assert link.is_symlink()


def test_smoke_keeps_every_condition_and_starts_rl_from_the_smoke_sft_run(tmp_path):
    _, plan = _plan(tmp_path, smoke=True)
    runs = {r["name"]: r for c in plan["conditions"].values() for r in c["runs"]}
    assert len(runs) == 10 and not any(r["shared"] for r in runs.values())
    assert f"train.rl.init_from={runs['sft']['run_dir']}" in runs["rl"]["overrides"]
    assert plan["root"] == str(tmp_path / "s") and "smoke" in plan["study"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["train.epochs=0"], "study: clean: train.epochs: must be at least 1"),
        (["mix.ratio=1:x"], "study: clean: mix.ratio: expected code:web"),
    ],
)
def test_a_bad_value_names_the_run_and_key_before_anything_is_written(tmp_path, args, says):
    with pytest.raises(InputError) as err:
        study_command(["detectors", *args, "--local", "--out", str(tmp_path / "s")], log=lambda *_: None)
    assert says in str(err.value)
    assert not (tmp_path / "s").exists()


def test_a_bad_study_file_names_the_section_or_finding(tmp_path):
    text = study_path("detectors").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("a: timing@late", "a: timming@late"))
    with pytest.raises(InputError, match="finding late_beats_early: a: 'timming@late' names no condition"):
        load_study(bad)
    bad.write_text(text.replace("conditions:", "condition:"))
    with pytest.raises(InputError, match="unknown section 'condition'"):
        load_study(bad)


def test_the_cli_exits_2_with_one_line_on_an_unknown_study(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "leaklab.cli", "study", "detector", "--local"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip() == "leaklab: study: no study named 'detector'; did you mean 'detectors'?"


def test_slurm_writes_one_array_per_condition_and_rl_waits_for_sft(tmp_path):
    lines: list[str] = []
    out = tmp_path / "s"
    assert study_command(["detectors", "--slurm", "--out", str(out), "--gpus", "2"], log=lines.append) == 0
    submit = out / "SUBMIT.sh"
    assert lines[-1] == f"bash {submit}"
    body = submit.read_text().splitlines()
    plan = json.loads((out / "study.json").read_text())
    scripts = {c: Path(cond["root"]) / "slurm" / "sweep.sbatch" for c, cond in plan["conditions"].items()}
    assert body[3:11] == [
        f"JOB_CLEAN=$(sbatch --parsable {scripts['clean']})",
        f"JOB_DOSE=$(sbatch --parsable {scripts['dose']})",
        f"JOB_TIMING=$(sbatch --parsable {scripts['timing']})",
        f"JOB_DILUTION=$(sbatch --parsable {scripts['dilution']})",
        f"JOB_REPHRASED=$(sbatch --parsable {scripts['rephrased']})",
        f"JOB_FILE=$(sbatch --parsable {scripts['file']})",
        f"JOB_SFT=$(sbatch --parsable {scripts['sft']})",
        f"JOB_RL=$(sbatch --parsable --dependency=afterok:${{JOB_SFT}} {scripts['rl']})",
    ]
    dilution = scripts["dilution"].read_text()
    assert "#SBATCH --array=0-1" in dilution and "#SBATCH --gpus-per-node=2" in dilution
    assert "recipe=tiny_dose" in dilution and "mix.ratio=1:8" in dilution
    # timing is one run (its window groups in one recipe): one array task
    timing = scripts["timing"].read_text()
    assert "#SBATCH --array=0-0" in timing
    assert "'inject.windows.early=[0.0,0.25]' 'inject.windows.late=[0.75,1.0]'" in timing
    for path in [submit, *scripts.values()]:
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0


# --------------------------------------------------------------------------- the leaderboard, by hand


# Members m0 (dose 1), m1 and m2 (dose 4); non-members n0..n2. Column `a`: members 0.3, 0.9, 0.8 and
# non-members 0.5, 0.2, 0.1. Pairs member > non-member: 0.9 and 0.8 beat all three, 0.3 beats two: 8 of 9.
# TPR at 1% FPR: above every non-member (0.5) are 0.9 and 0.8: 2 of 3. Dose 1 (m0 alone): 2 of 3 pairs;
# dose 4: 6 of 6. Column `b` ranks the samples the other way round: 1 - 8/9.
SCORES = {"m0": (1, 0.3), "m1": (1, 0.9), "m2": (1, 0.8), "n0": (0, 0.5), "n1": (0, 0.2), "n2": (0, 0.1)}


def _fake_run(root, name, scores=SCORES, doses=None, flags=None):
    run = root / name
    (run / "scores" / "step-3").mkdir(parents=True)
    (run / "scores" / "step-1").mkdir(parents=True)  # an earlier step: the last one is read
    records = [
        {"task_id": t, "label": y, "a": s, "b": -s, **({"r@10:leak": flags[t]} if flags else {}), "r@10": s}
        for t, (y, s) in scores.items()
    ]
    (run / "scores" / "step-3" / "detection.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "scores" / "step-1" / "detection.jsonl").write_text("")
    manifest = {"member_ids": [t for t, (y, _) in scores.items() if y], "non_member_ids": []}
    if doses:
        manifest["doses"] = doses
    (run / "manifest.json").write_text(json.dumps(manifest))
    return str(run)


def _board_plan(tmp_path, runs, fixed=("tracking.wandb.enabled=false",)):
    conditions = {
        n: {"recipe": "tiny_dose", "runs": [{"name": n, "run_dir": d}], "after": None}
        for n, d in runs.items()
    }
    return {"study": "hand", "root": str(tmp_path / "board"), "conditions": conditions, "fixed": list(fixed)}


def test_cells_auroc_tpr_dose_and_best_by_hand(tmp_path):
    doses = {"m0": 1, "m1": 4, "m2": 4}
    flags = {"m0": 0, "m1": 1, "m2": 1, "n0": 0, "n1": 0, "n2": 0}
    plan = _board_plan(tmp_path, {"dose": _fake_run(tmp_path, "dose", doses=doses, flags=flags)})
    measured = leaderboard.measure(plan, {"dose": {"state": "done"}})
    table = measured["table"]
    assert set(table) == {"dose", "dose@1", "dose@4"}
    assert table["dose"]["a"]["auroc"] == pytest.approx(8 / 9)
    assert table["dose"]["b"]["auroc"] == pytest.approx(1 / 9)
    assert table["dose"]["a"]["tpr@1%fpr"] == pytest.approx(2 / 3)
    assert table["dose@1"]["a"]["auroc"] == pytest.approx(2 / 3)
    assert table["dose@4"]["a"]["auroc"] == 1.0
    assert table["dose@4"]["a"]["auroc_ci_low"] == 1.0  # every resample keeps the perfect ranking
    assert table["dose"]["a"]["auroc_ci_low"] <= 8 / 9 <= table["dose"]["a"]["auroc_ci_high"]
    # dose 1: its one member always scores 0.3, below 0.5 whenever n0 is drawn thrice: interval reaches 0
    assert table["dose@1"]["a"]["auroc_ci_low"] == 0.0
    assert measured["detection_dose"]["dose"]["a"] == 4
    assert measured["detection_dose"]["dose"]["b"] == math.inf
    assert measured["detection_dose"]["dose"]["r@10 (flags)"] == 4  # flags both dose-4 members, no other
    best = measured["best"]["dose@4"]
    assert best["best"] in ("a", "r@10") and best["second"] in ("a", "r@10")
    assert best["lead"] == 0 and not best["significant"]  # a and r@10 are the same scores: lead exactly 0
    assert measured["best"]["dose"]["lead_ci_low"] == 0.0  # a vs r@10 again, paired: every draw 0


def test_a_run_scored_at_step_0_adds_the_base_models_cell_outside_the_control_family(tmp_path):
    run = Path(_fake_run(tmp_path, "clean"))
    flipped = {t: (y, -s) for t, (y, s) in SCORES.items()}
    (run / "scores" / "step-0").mkdir()
    records = [{"task_id": t, "label": y, "a": s, "b": -s, "r@10": s} for t, (y, s) in flipped.items()]
    (run / "scores" / "step-0" / "detection.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    measured = leaderboard.measure(_board_plan(tmp_path, {"clean": str(run)}), {})
    assert set(measured["table"]) == {"clean", "clean@base"}
    assert measured["table"]["clean"]["a"]["auroc"] == pytest.approx(8 / 9)  # the last step's scores
    assert measured["table"]["clean@base"]["a"]["auroc"] == pytest.approx(1 / 9)  # step 0's
    assert measured["cells"]["clean@base"]["base"] and "base" not in measured["cells"]["clean"]
    control = leaderboard.control_report(measured, "clean", {})
    assert {r["cell"] for r in control["intervals"]} == {"clean"}


def test_findings_are_paired_on_the_same_texts_and_judged_by_their_criterion(tmp_path):
    flags = {"m0": 0, "m1": 1, "m2": 1, "n0": 0, "n1": 0, "n2": 0}
    same = {"late": _fake_run(tmp_path, "late"), "early": _fake_run(tmp_path, "early", flags=flags)}
    flipped = {t: (y, -s) for t, (y, s) in SCORES.items()}
    runs = {**same, "other": _fake_run(tmp_path, "other", scores=flipped)}
    measured = leaderboard.measure(_board_plan(tmp_path, runs), {})
    control = leaderboard.control_report(measured, "early", {"r": 0.1})
    base = {"id": "f", "claim": "c", "source": "s", "detector": "a"}
    findings = [
        {**base, "kind": "difference", "a": "late", "b": "early"},  # the same scores, paired: exactly 0
        {**base, "kind": "difference", "a": "late", "b": "other"},  # 8/9 - 1/9
        {**base, "kind": "difference", "a": "late", "b": "missing"},
        {**base, "kind": "chance", "expect": "equal", "than": 0},
    ]
    out = leaderboard.evaluate_findings(findings, measured, control)
    assert (out[0]["value"], out[0]["ci_low"], out[0]["ci_high"]) == (0.0, 0.0, 0.0)
    assert out[0]["verdict"] == "inconclusive" and "paired" in out[0]["note"]
    assert out[1]["value"] == pytest.approx(7 / 9) and out[1]["verdict"] in ("reproduced", "inconclusive")
    assert "independent" not in out[1]["note"]  # the same texts and labels: paired
    assert out[2]["verdict"] == "not measured"
    # the rule r flags n0..n2 never, m1 and m2 always (flags of _fake_run): 2 of 6 on the control
    (rate,) = control["flag_rates"]
    assert (rate["column"], rate["flag_rate"], rate["nominal"]) == ("r@10", 2 / 6, 0.1)
    assert rate["ci_low"] < 2 / 6 < rate["ci_high"]
    # control `early`: column a's interval holds 0.5? (its AUROC is 8/9 on 6 samples)
    a_row = next(r for r in control["intervals"] if r["column"] == "a")
    assert out[3]["verdict"] == (
        "reproduced" if all(r["holds_chance"] for r in control["intervals"]) else "not reproduced"
    )
    assert a_row["ci_high"] == 1.0


def test_the_control_chance_pvalues_are_holm_adjusted_and_counted(tmp_path):
    from leaklab.metrics import auroc_chance_pvalue, holm_adjusted

    flags = {"m0": 0, "m1": 1, "m2": 1, "n0": 0, "n1": 0, "n2": 0}
    measured = leaderboard.measure(
        _board_plan(tmp_path, {"clean": _fake_run(tmp_path, "clean", flags=flags)}), {}
    )
    control = leaderboard.control_report(measured, "clean", {})
    cell = measured["cells"]["clean"]
    rows = control["intervals"]
    expected = [auroc_chance_pvalue(cell["columns"][r["column"]], cell["labels"]) for r in rows]
    assert [r["p_value"] for r in rows] == pytest.approx(expected)
    assert [r["p_holm"] for r in rows] == pytest.approx(holm_adjusted(expected).tolist())
    finding = {"id": "h", "claim": "c", "source": "s", "kind": "chance_holm", "expect": "equal", "than": 0}
    (out,) = leaderboard.evaluate_findings([finding], measured, control)
    # 3 members against 3 non-members cannot reach 0.05 after the adjustment: nothing is rejected
    assert (out["value"], out["verdict"]) == (0.0, "reproduced")
    assert out["note"].startswith(f"{len(rows)} AUROCs, Holm-adjusted")
    # a control whose one AUROC is far from 0.5 after the adjustment is counted, and named
    fake = {
        "intervals": [
            {"cell": "clean", "column": "x", "p_holm": 0.01},
            {"cell": "clean", "column": "y", "p_holm": 0.2},
        ]
    }
    (out,) = leaderboard.evaluate_findings([finding], measured, fake)
    assert (out["value"], out["verdict"]) == (1.0, "not reproduced") and "clean:x (p 0.01)" in out["note"]


@pytest.mark.parametrize(
    ("expect", "low", "high", "verdict"),
    [
        ("greater", 0.01, 0.2, "reproduced"),
        ("greater", -0.1, 0.2, "inconclusive"),
        ("greater", -0.3, -0.01, "not reproduced"),
        ("less", -0.3, -0.01, "reproduced"),
        ("less", 0.01, 0.3, "not reproduced"),
        ("equal", 0.0, 0.0, "reproduced"),
        ("equal", 2.0, 2.0, "not reproduced"),
    ],
)
def test_verdicts(expect, low, high, verdict):
    assert leaderboard.verdict({"expect": expect, "than": 0}, low, high) == verdict


def test_the_leaderboard_files_name_a_failed_condition_with_its_line(tmp_path):
    plan = _board_plan(tmp_path, {"dose": _fake_run(tmp_path, "dose"), "rl": str(tmp_path / "never")})
    status = {
        "dose": {"state": "done"},
        "rl": {"state": "failed", "line": "leaklab: no run of recipe tiny_sft"},
    }
    board = leaderboard.write_leaderboard(plan, {"findings": []}, status)
    root = tmp_path / "board"
    saved = json.loads((root / "leaderboard.json").read_text())
    assert saved["missing"] == {"rl": "failed: leaklab: no run of recipe tiny_sft"}
    assert "| rl | failed: leaklab: no run of recipe tiny_sft |" in (root / "leaderboard.md").read_text()
    assert board["table"]["dose"]["a"]["auroc"] == pytest.approx(8 / 9)
    assert (root / "index.html").exists()


def test_the_leaderboard_and_findings_are_a_wandb_table_when_tracking_is_on(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    plan = _board_plan(tmp_path, {"dose": _fake_run(tmp_path, "dose")}, ["tracking.wandb.mode=offline"])
    finding = {"id": "f", "claim": "c", "source": "s", "kind": "chance", "expect": "equal", "than": 0}
    leaderboard.write_leaderboard(
        plan, {"findings": [finding], "control": "dose"}, {"dose": {"state": "done"}}
    )
    (offline,) = (tmp_path / "board" / "wandb").glob("offline-run-*")
    (cells,) = (offline / "files" / "media" / "table").glob("leaderboard_*.table.json")
    table = json.loads(cells.read_text())
    rows = {(r[0], r[1]): dict(zip(table["columns"], r)) for r in table["data"]}
    assert rows[("dose", "a")]["auroc"] == pytest.approx(8 / 9) and rows[("dose", "b")][
        "auroc"
    ] == pytest.approx(1 / 9)
    (findings,) = (offline / "files" / "media" / "table").glob("findings_*.table.json")
    assert [r[0] for r in json.loads(findings.read_text())["data"]] == ["f"]


# --------------------------------------------------------------------------- the smoke study, end to end


@pytest.mark.slow
@pytest.mark.timeout(2100)  # about 3 CPU-minutes of work; a busy shared machine took 10 minutes wall
def test_the_smoke_study_runs_every_condition_and_the_clean_control_holds(leaklab_cache, tmp_path):
    import os

    env = {**os.environ, "LEAKLAB_CACHE": leaklab_cache, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    env.pop("WORLD_SIZE", None)
    out = tmp_path / "study"
    cmd = [sys.executable, "-m", "leaklab.cli", "study", "detectors", "--smoke", "--local", "--out", str(out)]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=2000)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    board = json.loads((out / "leaderboard.json").read_text())
    runs = ["clean", "dose", "timing", "dilution/1_1", "dilution/1_8", "sft", "rl"]
    runs += ["rephrased", "file/file", "file/document"]
    forms = ["rephrased@verbatim", "rephrased@rephrased"]
    windows = ["timing@early", "timing@late"]  # one run's window groups
    bases = ["clean@base", "sft@base", "rl@base"]  # the runs scored at step 0 too
    assert set(board["table"]) == {*runs, "clean@1", "clean@4", "dose@1", "dose@4", *forms, *windows, *bases}
    assert board["missing"] == {} and all(s["state"] == "done" for s in board["status"].values())
    cpt_columns = {"ppl", "zlib", "lowercase", "mink@0.2", "minkpp@0.2", "srdetection_gray@n=10", "blind"}
    cpt_columns |= {"pac_log", "conrecall@gamma=0.5", "gradnorm", "codec_drop", "pacost_gap"}
    cpt_columns |= {"samia@n=1", "samia_zlib@n=1"}
    for cell in ("clean", "dose@4", *windows, "dilution/1_8", *forms, "file/file"):
        assert set(board["table"][cell]) == cpt_columns, cell
    for cell in runs:
        for stats in board["table"][cell].values():
            assert stats["auroc_ci_low"] <= stats["auroc"] <= stats["auroc_ci_high"]
    # The clean control: no member in the stream it trained on, and an interval per clean cell x detector.
    mixture = json.loads((out / "runs" / "clean" / "mixture.json").read_text())
    assert mixture["withheld"] and set(mixture["exposures"].values()) == {0}
    clean = board["control"]["intervals"]
    assert {(r["cell"], r["column"]) for r in clean} == {
        (cell, c) for cell in ("clean", "clean@1", "clean@4") for c in cpt_columns
    }
    assert [r["column"] for r in board["control"]["flag_rates"]].count("srdetection_gray@n=10") == 3
    verdicts = {f["id"]: f["verdict"] for f in board["findings"]}
    assert len(verdicts) == 10
    # The file condition's runs carry the sharded test of their members and non-members.
    for cell in ("file/file", "file/document"):
        assert set(board["set_tests"][cell]) >= {
            "sharded_likelihood:members",
            "sharded_likelihood:non_members",
        }
    manifest = json.loads((out / "runs" / "rephrased" / "manifest.json").read_text())
    assert set(manifest["forms"].values()) <= {"verbatim", "rephrased"}
    assert isinstance(manifest["inject"]["rephrased_fallback"], list)
    timing = json.loads((out / "runs" / "timing" / "manifest.json").read_text())
    assert sorted(timing["windows"]) == sorted(timing["member_ids"])
    assert set(timing["windows"].values()) == {"early", "late"}
    assert set(verdicts.values()) <= {"reproduced", "not reproduced", "inconclusive"}
    chance = next(f for f in board["findings"] if f["id"] == "clean_at_chance")
    assert chance["value"] == sum(not r["holds_chance"] for r in clean)
    holm = next(f for f in board["findings"] if f["id"] == "clean_at_chance_holm")
    assert holm["value"] == sum(r["p_holm"] < 0.05 for r in clean)
    # The untrained model (the clean run's step 0) has a cell of its own, outside the control's family.
    assert set(board["table"]["clean@base"]) == cpt_columns
    assert "## Findings (pre-registered)" in (out / "leaderboard.md").read_text()


def test_a_failed_condition_is_told_by_the_line_that_says_why(tmp_path):
    from leaklab.study import last_error_line

    log = tmp_path / "train.log"
    log.write_text(
        "[leaklab] sweep s-rl: run 1/1 rl\n[leaklab] run directory: /x\n"
        "leaklab: train.rl.init_from: /nowhere is not a directory\n"
        "[leaklab] sweep: 1 of 1 runs failed: rl\n"
    )
    assert last_error_line(log) == "leaklab: train.rl.init_from: /nowhere is not a directory"


def test_editing_a_finding_keeps_the_study_folder_but_a_condition_change_does_not(tmp_path):
    text = study_path("detectors").read_text()
    edited = tmp_path / "detectors.yaml"
    edited.write_text(text.replace("claim: exposures late in training", "claim: late exposures"))
    names = {plan_study(load_study(p), [], False, None)["study"] for p in (study_path("detectors"), edited)}
    assert len(names) == 1
    edited.write_text(text.replace("mix.ratio=1:8]", "mix.ratio=1:9]"))
    assert plan_study(load_study(edited), [], False, None)["study"] not in names


def _fake_condition(cond):
    """In place of study.run_condition, in the pool's forked process: what it was given, no training."""
    threads = os.environ.get("LEAKLAB_CPU_THREADS")
    if cond["sweep"] == "sft":
        return {"state": "failed", "line": "leaklab: out of memory", "threads": threads}
    return {"state": "done", "threads": threads}


def test_conditions_run_side_by_side_and_one_after_a_failed_one_is_failed_too(tmp_path, monkeypatch):
    from leaklab import side_by_side, study

    monkeypatch.setattr(study, "run_condition", _fake_condition)
    monkeypatch.setattr(side_by_side.os, "cpu_count", lambda: 4)
    monkeypatch.setenv("LEAKLAB_CPU_THREADS", "4")
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    conditions = {
        c: {"sweep": c, "root": str(tmp_path / c), "after": "sft" if c == "rl" else None}
        for c in ("dose", "sft", "rl")
    }
    plan = {"study": "s", "root": str(tmp_path), "conditions": conditions}
    status = study.run_local(plan, jobs=2, log=lambda *_: None)
    assert status["dose"]["threads"] == "2" and status["dose"]["wall_s"] >= 0  # 4 cores over 2 jobs, timed
    assert status["sft"]["line"] == "leaklab: out of memory"
    assert status["rl"] == {"state": "failed", "line": "needs sft, which failed"}
    assert json.loads((tmp_path / "status.json").read_text()) == status
    assert (
        os.environ["LEAKLAB_CPU_THREADS"] == os.environ["OMP_NUM_THREADS"] == "4"
    )  # this process's own again


def _timed_condition(cond):
    """In place of study.run_condition: sleeps its share, then says when it started and ended."""
    import time

    started = time.monotonic()
    time.sleep(cond["sleep_s"])
    return {"state": "done", "started": started, "ended": time.monotonic()}


def test_a_condition_starts_as_soon_as_the_one_it_needs_is_done(tmp_path, monkeypatch):
    # Two slots; `slow` takes 1.5 s, `sft` 0.1 s, `rl` needs sft. rl must take the slot sft frees, not
    # wait for slow; and sft, the one rl waits for, starts first although the file lists it last.
    from leaklab import study

    monkeypatch.setattr(study, "run_condition", _timed_condition)
    sleeps = {"slow": 1.5, "other": 0.1, "sft": 0.1, "rl": 0.1}
    conditions = {
        c: {"sleep_s": s, "root": str(tmp_path / c), "after": "sft" if c == "rl" else None}
        for c, s in sleeps.items()
    }
    # then the conditions with the most runs (the longest, as a rule), so none is left alone at the end
    wide = {"sleep_s": 0.0, "root": str(tmp_path / "wide"), "after": None, "runs": [{}, {}]}
    assert study.run_order({**conditions, "wide": wide}) == ["wide", "slow", "other", "sft", "rl"]
    lines = []
    study.run_local(
        {"study": "s", "root": str(tmp_path), "conditions": {**conditions, "wide": wide}},
        jobs=1,
        log=lines.append,
    )
    started = [line.split()[3].rstrip(",") for line in lines if "output in" in line]
    assert started == ["sft", "rl", "wide", "slow", "other"]  # one slot: the start order, whole
    status = study.run_local(
        {"study": "s", "root": str(tmp_path), "conditions": conditions}, jobs=2, log=lambda *_: None
    )
    assert status["rl"]["started"] >= status["sft"]["ended"]
    assert status["rl"]["ended"] < status["slow"]["ended"]  # ran beside slow, in the slot sft freed
    assert status["other"]["ended"] < status["slow"]["ended"]


def test_form_groups_are_cells_and_a_p_value_finding_compares_two_runs(tmp_path):
    # rephrased: m0 and m2 trained verbatim, m1 as its variant. Column a: m0 0.3, m2 0.8 against the
    # non-members 0.5, 0.2, 0.1: 2 + 3 of 6 pairs; m1 0.9 alone: 3 of 3.
    run = _fake_run(tmp_path, "rephrased")
    manifest = json.loads((tmp_path / "rephrased" / "manifest.json").read_text())
    manifest["forms"] = {"m0": "verbatim", "m1": "rephrased", "m2": "verbatim"}
    (tmp_path / "rephrased" / "manifest.json").write_text(json.dumps(manifest))
    rows = [
        {"evaluation": "detection", "step": 3, "column": "sharded_likelihood", "metric": "p_value",
         "value": p, "params": {"set": side}}
        for side, p in (("members", 0.01), ("non_members", 0.6))
    ]  # fmt: skip
    for name in ("file", "document"):
        _fake_run(tmp_path, name)
    (tmp_path / "file" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    document_rows = [{**rows[0], "value": 0.4}, {**rows[0], "step": 1, "value": 0.0001}]  # step 1 is not read
    (tmp_path / "document" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in document_rows))
    plan = _board_plan(
        tmp_path, {"rephrased": run, "file": str(tmp_path / "file"), "document": str(tmp_path / "document")}
    )
    measured = leaderboard.measure(plan, {})
    assert measured["table"]["rephrased@verbatim"]["a"]["auroc"] == pytest.approx(5 / 6)
    assert measured["table"]["rephrased@rephrased"]["a"]["auroc"] == 1.0
    assert measured["set_tests"]["file"] == {
        "sharded_likelihood:members": {"p_value": 0.01},
        "sharded_likelihood:non_members": {"p_value": 0.6},
    }
    base = {"id": "f", "claim": "c", "source": "s"}
    findings = [
        {**base, "kind": "p_value", "a": "file", "b": "document", "test": "sharded_likelihood:members",
         "expect": "less", "than": 0},
        {**base, "kind": "p_value", "a": "file", "b": "rephrased", "test": "sharded_likelihood:members"},
        {**base, "kind": "difference", "a": "rephrased@verbatim", "b": "rephrased@rephrased", "detector": "a"},
    ]  # fmt: skip
    out = leaderboard.evaluate_findings(findings, measured, {})
    assert out[0]["value"] == pytest.approx(0.01 - 0.4) and out[0]["verdict"] == "reproduced"
    assert out[0]["ci_low"] == out[0]["ci_high"] == out[0]["value"]
    assert out[1]["verdict"] == "not measured" and "rephrased" in out[1]["note"]
    assert out[2]["value"] == pytest.approx(5 / 6 - 1) and "independent" in out[2]["note"]
    board = leaderboard.write_leaderboard(plan, {"findings": findings}, {})
    assert "| file | sharded_likelihood:members | 0.0100 | — |" in board["markdown"]


def test_window_groups_are_cells_of_one_run(tmp_path):
    # timing: m0 and m2 exposed early, m1 late. Column a: m0 0.3, m2 0.8 against the non-members 0.5,
    # 0.2, 0.1: 2 + 3 of 6 pairs; m1 0.9 alone: 3 of 3. The late-minus-early finding reads both cells.
    run = _fake_run(tmp_path, "timing")
    manifest = json.loads((tmp_path / "timing" / "manifest.json").read_text())
    manifest["windows"] = {"m0": "early", "m1": "late", "m2": "early"}
    (tmp_path / "timing" / "manifest.json").write_text(json.dumps(manifest))
    cells = leaderboard.run_cells("timing", run)
    assert set(cells) == {"timing", "timing@early", "timing@late"}
    assert cells["timing@late"]["window"] == "late" and cells["timing@late"]["run"] == "timing"
    assert cells["timing@early"]["task_ids"] == ["m0", "m2", "n0", "n1", "n2"]
    measured = leaderboard.measure(_board_plan(tmp_path, {"timing": run}), {})
    assert measured["table"]["timing@early"]["a"]["auroc"] == pytest.approx(5 / 6)
    assert measured["table"]["timing@late"]["a"]["auroc"] == 1.0
    finding = {"id": "f", "claim": "c", "source": "s", "kind": "difference", "a": "timing@late"}
    finding |= {"b": "timing@early", "detector": "a", "expect": "greater", "than": 0}
    (out,) = leaderboard.evaluate_findings([finding], measured, {})
    assert out["value"] == pytest.approx(1 - 5 / 6) and out["verdict"] != "not measured"


def test_tokens_trained_are_one_epochs_blocks_times_the_epochs(tmp_path):
    run = Path(_fake_run(tmp_path, "dose"))
    assert leaderboard.training_tokens(run) is None  # no packed blocks (an SFT or RL run)
    mixture = {"blocks": 10, "block_len": 512, "member_tokens": 1200, "web_tokens": 3920}
    (run / "mixture.json").write_text(json.dumps(mixture))
    (run / "recipe.yaml").write_text("train:\n  epochs: 3\n")
    assert leaderboard.training_tokens(run) == {
        "epochs": 3,
        "member_tokens": 1200,
        "corpus_tokens": 3920,
        "tokens_trained": 10 * 512 * 3,
    }
    board = leaderboard.measure(_board_plan(tmp_path, {"dose": str(run)}), {})
    assert board["training_tokens"] == {"dose": leaderboard.training_tokens(run)}


def test_each_set_level_test_is_computed_at_every_dose_from_the_scores(tmp_path):
    from leaklab.dataset_tests.rows import dataset_test_rows
    from leaklab.evaluations.detection import dataset_inference_rows

    rng = np.random.default_rng(0)
    members = [f"m{i}" for i in range(20)]
    scores = {t: (1, float(rng.normal(1.0))) for t in members} | {
        f"n{i}": (0, float(rng.normal())) for i in range(20)
    }
    doses = {t: (1 if i < 10 else 4) for i, t in enumerate(members)}
    run = Path(_fake_run(tmp_path, "dose", scores=scores, doses=doses))
    records = [
        json.loads(line) for line in (run / "scores" / "step-3" / "detection.jsonl").read_text().splitlines()
    ]
    for r in records:  # a PaCoST column too, so that its test runs beside dataset inference
        r["pacost_gap"] = r["a"] + 0.1
    (run / "scores" / "step-3" / "detection.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    cells = leaderboard.run_cells("dose", run)
    chosen = [r for r in records if not r["label"] or doses[r["task_id"]] == 4]
    y = np.array([r["label"] for r in chosen])
    # every score column but the blind baseline (r@10 has no flags here: a score column)
    columns = {c: np.array([r[c] for r in chosen]) for c in ("a", "b", "pacost_gap", "r@10")}
    expected = dataset_inference_rows(columns, y) + dataset_test_rows(columns, y)
    tests = cells["dose@4"]["tests"]
    assert {"dataset_inference:members", "pacost_test:members"} <= set(tests)
    for r in expected:
        key = f"{r['column']}:{(r.get('params') or {}).get('set', 'members')}"
        assert tests[key][r["metric"]] == pytest.approx(r["value"], nan_ok=True), (key, r["metric"])
    assert cells["dose@1"]["tests"] != tests  # each dose its own members


def test_jobs_default_to_two_side_by_side_on_cpu_and_one_with_a_gpu(monkeypatch):
    from leaklab import hardware, side_by_side, study

    monkeypatch.setattr(side_by_side.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(hardware, "gpu_state", lambda: (False, False))
    assert study.parse_args(["detectors"])["jobs"] == 2
    assert study.parse_args(["detectors", "--jobs", "1"])["jobs"] == 1
    monkeypatch.setattr(hardware, "gpu_state", lambda: (True, True))
    assert study.parse_args(["detectors"])["jobs"] == 1
    monkeypatch.setattr(hardware, "gpu_state", lambda: (False, False))
    monkeypatch.setattr(side_by_side.os, "cpu_count", lambda: 1)
    assert study.parse_args(["detectors"])["jobs"] == 1
