"""Canaries (inject.canaries): seeded generation, assignment over the dose groups, planting, the
manifest's ground truth, the counts read back from the packed data, and bad input."""

import ast
import json
import re

import pytest
from test_doses import CharTokenizer, _members, _tasks

from leaklab.cli import main as cli_main
from leaklab.data.canaries import (
    FORMATS,
    assign_canaries,
    canary_lines,
    generate_canaries,
    plant,
)
from leaklab.data.doses import assign_doses, count_in_stream
from leaklab.data.mixing import Packing, build_dosed_mixture
from leaklab.data.splits import Split
from leaklab.data.tasks import Task
from leaklab.recipe import RecipeError, config_hash, load_recipe, run_hash
from leaklab.rundir import make_manifest

FORMAT_NAMES = ["api_key", "email", "password"]


def test_generation_is_seeded_and_matches_its_formats():
    canaries = generate_canaries(12, FORMAT_NAMES, seed=3)
    assert canaries == generate_canaries(12, FORMAT_NAMES, seed=3)
    assert [c.secret for c in canaries] != [c.secret for c in generate_canaries(12, FORMAT_NAMES, seed=4)]
    assert [c.format for c in canaries] == FORMAT_NAMES * 4
    assert len({c.secret for c in canaries}) == 12
    shapes = {
        "api_key": r'API_KEY = "sk-[A-Za-z0-9]{24}"',
        "email": r'CONTACT_EMAIL = "[a-z]+\.[a-z]+\d\d@[a-z]+(\.[a-z]+)+"',
        "password": r'DB_PASSWORD = "[A-Za-z0-9!#$%&*+\-=?@^_]{12}"',
    }
    for c in canaries:
        assert re.fullmatch(shapes[c.format], c.line), c.line
        assert re.fullmatch(FORMATS[c.format].pattern, c.secret)
        # The line is one Python assignment whose string holds the secret.
        value = ast.parse(c.line).body[0].value.value
        assert value.endswith(c.secret) and c.line.startswith(c.prefix)


def test_every_dose_group_gets_canaries_and_each_canary_its_members_dose():
    members = [f"t/{i}" for i in range(8)]
    doses = assign_doses(members, [1, 4, 16], seed=0)  # groups of 3, 3 and 2
    canaries = assign_canaries(generate_canaries(7, FORMAT_NAMES, seed=0), doses, seed=0)
    assert [c.dose for c in canaries] == [1, 4, 16, 1, 4, 16, 1]
    assert all(c.dose == doses[c.member] for c in canaries)
    # Within a group, different members first: dose 1's three canaries go to its three members.
    assert len({c.member for c in canaries if c.dose == 1}) == 3
    assert canaries == assign_canaries(generate_canaries(7, FORMAT_NAMES, seed=0), doses, seed=0)


HUMANEVAL_LIKE = Task(
    task_id="HumanEval/0",
    benchmark="humaneval",
    prompt=(
        "from typing import List\n\n\n"
        "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
        '    """ Check if any two numbers are closer than the threshold.\n'
        "    >>> has_close_elements([1.0, 2.0, 3.0], 0.5)\n    False\n"
        '    """\n'
    ),
    solution=(
        "    for i, a in enumerate(numbers):\n"
        "        for j, b in enumerate(numbers):\n"
        "            if i != j and abs(a - b) < threshold:\n"
        "                return True\n\n    return False\n"
    ),
)


@pytest.mark.parametrize("n_lines", [1, 2])
def test_a_planted_document_still_parses_and_holds_each_line_once(n_lines):
    lines = [c.line for c in generate_canaries(n_lines, FORMAT_NAMES, seed=1)]
    task = HUMANEVAL_LIKE
    # cpt: the whole text (module level); sft: the answer (the first statement of the body).
    for text, program in [
        (plant(task.text("prompt+solution"), lines), None),
        (plant(task.solution, lines), lambda s: task.prompt + s),
        (plant("\n" + task.text("prompt+solution"), lines), None),  # a leading blank line
    ]:
        ast.parse(program(text) if program else text)
        for line in lines:
            assert text.count(line) == 1
    assert plant(task.solution, lines).startswith("    " + lines[0])
    assert plant(task.solution, []) == task.solution


def _split():
    return Split(member_ids=[f"t/{i}" for i in range(6)], non_member_ids=[f"t/{i}" for i in range(6, 8)])


def test_the_manifest_records_the_canaries_each_in_one_member():
    recipe = load_recipe("tiny_cpt", ["inject.doses=[1,4]", "inject.canaries=5"])
    manifest = make_manifest(recipe, _tasks(8), _split())
    canaries = manifest["canaries"]
    assert [c["id"] for c in canaries] == [f"canary-{i:03d}" for i in range(5)]
    assert all(c["member"] in manifest["member_ids"] for c in canaries)
    assert all(c["dose"] == manifest["doses"][c["member"]] for c in canaries)
    assert {c["dose"] for c in canaries} == {1, 4}
    assert all(c["line"] == f'{c["prefix"]}{c["secret"]}"' for c in canaries)
    assert manifest == make_manifest(recipe, _tasks(8), _split())  # the ground truth is reproducible
    # Canaries alone plan the order with every member once.
    alone = make_manifest(load_recipe("tiny_cpt", ["inject.canaries=2"]), _tasks(8), _split())
    assert set(alone["doses"].values()) == {1} and len(alone["canaries"]) == 2


def test_canary_exposures_counted_in_the_packed_blocks_equal_the_doses():
    from leaklab.data.canaries import canary_exposures

    texts = _members(8)
    doses = assign_doses(list(texts), [1, 2, 4], seed=0)
    canaries = assign_canaries(generate_canaries(6, FORMAT_NAMES, seed=0), doses, seed=0)
    manifest = {"canaries": [c.as_dict() for c in canaries]}
    lines = canary_lines(manifest)
    planted = {t: plant(x, lines.get(t, [])) for t, x in texts.items()}
    web = [f"# some corpus text {i}\n" * 20 for i in range(40)]
    blocks, info = build_dosed_mixture(
        planted, doses, web, CharTokenizer(), Packing(code=1, web=3, block_len=256, seed=5)
    )
    counted = canary_exposures(manifest, info["exposures"])
    assert counted == {c.id: c.dose for c in canaries}
    # The lines themselves, found in the blocks: each as often as its dose.
    tok = CharTokenizer()
    found = count_in_stream(blocks, {c.id: tok(c.line)["input_ids"] for c in canaries})
    assert {i: len(at) for i, at in found.items()} == counted


def test_without_canaries_dosed_runs_keep_their_manifest_mixture_and_hashes():
    """Pinned to main before canaries existed (d5d98a7), same input as test_doses' pins."""
    import hashlib

    texts = _members(8)
    doses = assign_doses(list(texts), [1, 2, 4, 8], seed=0)
    web = [f"# some corpus text {i}\n" * 20 for i in range(40)]
    blocks, info = build_dosed_mixture(
        texts, doses, web, CharTokenizer(), Packing(code=1, web=3, block_len=128, seed=5)
    )
    mixture = blocks.tobytes() + json.dumps(info, sort_keys=True).encode()
    assert hashlib.sha256(mixture).hexdigest()[:16] == "588a9808c68a3b25"
    dosed = load_recipe("tiny_cpt", ["inject.doses=[1,4]"])
    split = Split(member_ids=[f"t/{i}" for i in range(4)], non_member_ids=[f"t/{i}" for i in range(4, 8)])
    manifest = make_manifest(dosed, _tasks(8), split)
    assert "canaries" not in manifest
    assert hashlib.sha256(json.dumps(manifest).encode()).hexdigest()[:16] == "9d867e5273ba192e"
    # run_hash pinned before canaries existed. config_hash covers every evaluation key, so it moves whenever
    # one is added; what must hold is that without canaries their keys are not part of it.
    assert run_hash(dosed) == "e213223e"
    untouched = load_recipe(
        "tiny_cpt", ["inject.doses=[1,4]", "inject.canary_candidates=50", "inject.canary_samples=2"]
    )
    assert config_hash(untouched) == config_hash(dosed)
    # Canaries change what is trained; the number of candidates only how exposure is measured.
    canaried = load_recipe("tiny_cpt", ["inject.doses=[1,4]", "inject.canaries=3"])
    more = load_recipe("tiny_cpt", ["inject.doses=[1,4]", "inject.canaries=3", "inject.canary_candidates=50"])
    assert run_hash(canaried) != run_hash(dosed) and run_hash(more) == run_hash(canaried)
    assert config_hash(more) != config_hash(canaried)
    sampled = load_recipe("tiny_cpt", ["inject.doses=[1,4]", "inject.canaries=3", "inject.canary_samples=2"])
    assert run_hash(sampled) == run_hash(canaried) and config_hash(sampled) != config_hash(canaried)


@pytest.mark.parametrize(
    "overrides, says",
    [
        (
            ["inject.canaries=4", "inject.canary_formats=[api_key,ssn]"],
            "inject.canary_formats: unknown format 'ssn' (known: api_key, email, password)",
        ),
        (
            ["inject.canaries=4", "inject.canary_formats=[emial]"],
            "inject.canary_formats: unknown format 'emial'; did you mean 'email'? (known: api_key, email, "
            "password)",
        ),
        (["inject.canaries=4", "inject.canary_formats=[]"], "inject.canary_formats: an empty list"),
        (["inject.canaries=-1"], "inject.canaries: -1 is negative"),
        (["inject.canaries=4", "inject.canary_candidates=0"], "inject.canary_candidates: must be at least 1"),
        (["inject.canaries=4", "inject.canary_samples=-1"], "inject.canary_samples: -1 is negative"),
        (["evaluate.evaluations=[canaries]"], "evaluate.evaluations: 'canaries' measures the canaries"),
        (["inject.canaries=4", "train.stage=rl"], "inject.canaries: train.stage rl trains on prompts only"),
    ],
)
def test_bad_canary_settings_exit_2_naming_the_key(overrides, says, capsys):
    with pytest.raises(RecipeError, match=re.escape(says)):
        load_recipe("tiny_cpt", overrides)
    assert cli_main(["train", "recipe=tiny_cpt", *overrides]) == 2
    assert says in capsys.readouterr().err


def test_sft_answers_hold_each_canary_as_often_as_its_dose(tmp_path):
    import string

    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from leaklab.data.synthetic import build_synthetic
    from leaklab.rundir import RunDir
    from leaklab.training import sft

    chars = ["<unk>", "<eos>", *dict.fromkeys(string.printable)]  # one token per character
    backend = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(chars)}, merges=[], unk_token="<unk>"))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="<eos>")
    overrides = ["train.sft.mix_with=null", "train.sft.max_length=4096"]
    recipe = load_recipe("tiny_sft", [*overrides, "inject.doses=[1,2]", "inject.canaries=3"])
    tasks = build_synthetic(size=8)
    split = Split(member_ids=[t.task_id for t in tasks[:4]], non_member_ids=[t.task_id for t in tasks[4:]])
    manifest = make_manifest(recipe, tasks, split)
    data = sft.build_dataset(recipe, tokenizer, tasks, manifest, RunDir(tmp_path), log=lambda *a: None)
    assert data.info["canary_exposures"] == {c["id"]: c["dose"] for c in manifest["canaries"]}
    rows = ["".join(tokenizer.convert_ids_to_tokens(ids)) for ids in data.dataset.train["input_ids"]]
    for c in manifest["canaries"]:
        assert sum(row.count(c["line"]) for row in rows) == c["dose"]
