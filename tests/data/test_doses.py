"""Exposure doses (`inject.doses`, `inject.window`, `inject.windows`): the seeded groups, the planned positions (computed
by hand), the counts read back from the packed data, the order the Trainer keeps, and bad input."""

import json
import math
import random

import numpy as np
import pytest

from leaklab.cli import main as cli_main
from leaklab.data.doses import (
    LayoutError,
    assign_doses,
    assign_windows,
    count_in_stream,
    layout_groups,
    member_ranks,
    plan_groups,
    plan_positions,
    slots_for_groups,
    window_slots,
)
from leaklab.data.mixing import Packing, build_dosed_mixture
from leaklab.data.splits import Split
from leaklab.data.tasks import Task
from leaklab.errors import InputError
from leaklab.recipe import InjectConfig, RecipeError, config_hash, load_recipe, run_hash, run_identity
from leaklab.rundir import make_manifest, member_doses


class CharTokenizer:
    """One token per character (no EOS clash: ids 1..200, EOS 0)."""

    eos_token_id = 0

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [1 + (ord(c) % 200) for c in text]}


# --------------------------------------------------------------------------- the plan, by hand


# Doses {a: 2, b: 1}, two members: the one ranked first (member_ranks) has phase 0.25, the other 0.75.
# The keys (j + phase) / d, the order by key, and the i-th of C = 3 copies at first + (2i + 1) * L // 6:
#   a first: a 0.125, 0.625; b 0.75   -> order a, a, b
#   b first: b 0.25; a 0.375, 0.875   -> order b, a, a
#   whole stream, n = 10, L = 10: slots 10//6, 30//6, 50//6 = 1, 5, 8
#   early [0, 0.5]: slots 0..4, L = 5: 5//6, 15//6, 25//6 = 0, 2, 4
#   late [0.5, 1]: slots 5..9: 5, 7, 9
#   middle [0.25, 0.75]: 2.5 and 7.5 round up, slots 3..7: 3, 5, 7
@pytest.mark.parametrize(
    "window, slots",
    [(None, [1, 5, 8]), ([0.0, 0.5], [0, 2, 4]), ([0.5, 1.0], [5, 7, 9]), ([0.25, 0.75], [3, 5, 7])],
)
def test_plan_positions_by_hand(window, slots):
    seen = set()
    for seed in range(4):
        first = member_ranks(["a", "b"], seed)[0]
        seen.add(first)
        s1, s2, s3 = slots
        expected = {"a": [s1, s2], "b": [s3]} if first == "a" else {"b": [s1], "a": [s2, s3]}
        assert plan_positions({"a": 2, "b": 1}, 10, window, seed=seed) == expected
    assert seen == {"a", "b"}  # both orders were checked


def test_copies_longer_than_a_slot_push_the_later_ones_back():
    # a takes 3 slots a copy: the layout is made over 12 - 2 * 2 = 8 slots (1, 4, 6 as the i-th of 3 at
    # (2i + 1) * 8 // 6), then each copy moves back by the further slots of the copies before it.
    for seed in range(4):
        plan = plan_positions({"a": 2, "b": 1}, 12, None, seed=seed, spans={"a": 3})
        if member_ranks(["a", "b"], seed)[0] == "a":  # order a, a, b
            assert plan == {"a": [1, 6], "b": [10]}
        else:  # order b, a, a
            assert plan == {"b": [1], "a": [4, 8]}


def test_window_slots_round_halves_up():
    assert window_slots(10, [0.25, 0.75]) == (3, 8)
    assert window_slots(20, [0.0, 0.25]) == (0, 5)
    assert window_slots(7, None) == (0, 7)


def test_members_of_one_dose_are_spread_in_a_seeded_order():
    # Three members of dose 1 have keys 1/6, 3/6, 5/6 by rank: slots 1, 5, 8 of 10 in a seeded order.
    orders = set()
    for seed in range(6):
        plan = plan_positions({"a": 1, "b": 1, "c": 1}, 10, None, seed=seed)
        assert sorted(s for slots in plan.values() for s in slots) == [1, 5, 8]
        assert plan == plan_positions({"a": 1, "b": 1, "c": 1}, 10, None, seed=seed)
        order = tuple(sorted(plan, key=plan.get))
        assert order == tuple(member_ranks(["a", "b", "c"], seed))
        orders.add(order)
    assert len(orders) > 1


def test_copies_of_one_member_are_never_adjacent():
    doses = {f"m{i}": d for i, d in enumerate([1, 4, 16, 64] * 5)}
    for window, n in ((None, 900), ([0.0, 0.5], 900), ([0.8, 1.0], 2200), (None, 425)):
        plan = plan_positions(doses, n, window, seed=3)
        first, end = window_slots(n, window)
        every = [s for slots in plan.values() for s in slots]
        assert len(every) == len(set(every)) == sum(doses.values())
        assert all(first <= s < end for s in every)
        for task_id, slots in plan.items():
            assert len(slots) == doses[task_id]
            assert all(b - a >= 2 for a, b in zip(slots, slots[1:], strict=False)), task_id


def test_copies_that_would_touch_are_separated_by_the_next_other_copy():
    # {a: 2, b: 1, c: 1} in 4 slots (L = C: slots 0, 1, 2, 3). With a ranked in the middle (phase 1/2) its
    # keys are 0.25 and 0.75, the others' 1/6 and 5/6: order x, a, a, z -> z comes forward: x, a, z, a.
    checked = 0
    for seed in range(12):
        x, middle, z = member_ranks(["a", "b", "c"], seed)
        plan = plan_positions({"a": 2, "b": 1, "c": 1}, 4, None, seed=seed)
        assert plan["a"][1] - plan["a"][0] >= 2
        if middle == "a":
            assert plan == {"a": [1, 3], x: [0], z: [2]}
            checked += 1
    assert checked


def test_a_layout_that_must_put_copies_side_by_side_is_refused():
    with pytest.raises(LayoutError, match="adjacent"):
        plan_positions({"a": 2}, 2)
    with pytest.raises(LayoutError, match="do not fit"):
        plan_positions({"a": 2, "b": 2}, 6, [0.0, 0.5])


def test_dose_groups_are_equal_and_seeded():
    ids = [f"t/{i}" for i in range(10)]
    groups = assign_doses(ids, [1, 4, 16], seed=0)
    assert list(groups) == ids
    assert sorted(list(groups.values()).count(d) for d in (1, 4, 16)) == [3, 3, 4]
    # Independently: the sorted ids shuffled by the named seed, dealt in turn.
    shuffled = sorted(ids)
    random.Random("inject.doses:0").shuffle(shuffled)
    assert groups == {t: [1, 4, 16][shuffled.index(t) % 3] for t in ids}
    assert groups == assign_doses(list(reversed(ids)), [1, 4, 16], seed=0) | {}
    assert groups != assign_doses(ids, [1, 4, 16], seed=1)


# --------------------------------------------------------------------------- cpt: packed data


def _members(n):
    return {f"t/{i}": f"def member_{i}(x):\n    return x * {i} + {i * 7}\n" for i in range(n)}


@pytest.mark.parametrize("window", [None, [0.0, 0.3], [0.6, 1.0]])
def test_exposures_counted_in_the_packed_blocks_equal_the_plan(window):
    texts = _members(8)
    doses = assign_doses(list(texts), [1, 2, 4, 8], seed=0)
    web = [f"# some corpus text {i}\n" * 20 for i in range(40)]
    blocks, info = build_dosed_mixture(
        texts,
        doses,
        web,
        CharTokenizer(),
        Packing(code=1, web=3, block_len=128, seed=5),
        InjectConfig(window=window),
    )
    assert blocks.shape == (info["blocks"], 128)
    assert info["exposures"] == doses
    # Every member fits in a block, so a slot is a block: the blocks found are the planned slots.
    assert info["exposure_blocks"] == plan_positions(doses, info["blocks"], window, seed=5)
    first, end = window_slots(info["blocks"], window)
    assert all(first <= b < end for at in info["exposure_blocks"].values() for b in at)
    assert info["member_tokens"] == sum(doses[t] * (len(x) + 1) for t, x in texts.items())
    assert abs(info["web_tokens"] - 3 * info["member_tokens"]) <= 128 or window is not None
    json.dumps(info)  # mixture.json


@pytest.mark.parametrize("window", [None, [0.5, 1.0], [0.2, 0.4]])
def test_a_member_longer_than_a_block_is_found_whole_in_its_blocks_inside_the_window(window):
    texts = {"long": "L" * 150 + "end", "short": "def s(): pass\n", "other": "def o(): return 1\n"}
    doses = {"long": 2, "short": 1, "other": 3}
    blocks, info = build_dosed_mixture(
        texts,
        doses,
        ["w" * 400],
        CharTokenizer(),
        Packing(code=1, web=4, block_len=64),
        InjectConfig(window=window),
    )
    assert info["exposures"] == doses
    assert info["members_split_across_blocks"] == 1
    spans = {"long": 3, "short": 1, "other": 1}  # 154 tokens: 2 full blocks and a filled third
    assert info["exposure_blocks"] == plan_positions(doses, info["blocks"], window, seed=0, spans=spans)
    first, end = window_slots(info["blocks"], window)
    for task_id, starts in info["exposure_blocks"].items():
        assert all(first <= b and b + spans[task_id] <= end for b in starts)


def test_count_in_stream_reads_the_data_not_the_plan():
    blocks = np.array([[5, 6, 7, 1], [9, 5, 6, 7], [0, 0, 5, 6], [7, 2, 2, 2]])
    # [5, 6, 7] starts in blocks 0, 1 and 2 (the last across the boundary); [6, 7, 9] only in block 0.
    assert count_in_stream(blocks, {"a": [5, 6, 7], "b": [7, 1, 9], "c": [3]}) == {
        "a": [0, 1, 2],
        "b": [0],
        "c": [],
    }


# --------------------------------------------------------------------------- manifest, identity


def _tasks(n):
    return [
        Task(task_id=f"t/{i}", benchmark="toy", prompt=f"def f{i}():\n", solution="    pass\n")
        for i in range(n)
    ]


def test_manifest_records_doses_only_when_inject_is_set(tmp_path):
    tasks = _tasks(8)
    split = Split(member_ids=[f"t/{i}" for i in range(4)], non_member_ids=[f"t/{i}" for i in range(4, 8)])
    plain = make_manifest(load_recipe("tiny_cpt"), tasks, split)
    assert "doses" not in plain and "inject" not in plain
    dosed = make_manifest(load_recipe("tiny_cpt", ["inject.doses=[1,4]"]), tasks, split)
    assert {k: v for k, v in dosed.items() if k not in ("doses", "inject")} == plain
    assert sorted(dosed["doses"].values()) == [1, 1, 4, 4]
    assert dosed["inject"] == {"doses": [1, 4], "window": [0.0, 1.0]}
    (tmp_path / "manifest.json").write_text(json.dumps(dosed))
    assert member_doses(tmp_path) == {**dosed["doses"], **{f"t/{i}": 0 for i in range(4, 8)}}
    (tmp_path / "manifest.json").write_text(json.dumps(plain))
    assert member_doses(tmp_path) == {f"t/{i}": int(i < 4) for i in range(8)}


def test_without_inject_the_mixture_and_manifest_are_those_of_before():
    """Pinned to what the code before `inject` existed (main at 9e81abc) gives on the same input."""
    import hashlib

    from leaklab.data.mixing import build_mixture
    from leaklab.data.splits import split_members

    members = list(_members(8).values())
    web = [f"# some corpus text {i}\n" * 20 for i in range(40)]
    blocks, stats = build_mixture(members, web, CharTokenizer(), code=1, web=3, block_len=128, seed=5)
    mixture = blocks.tobytes() + json.dumps(stats, sort_keys=True).encode()
    assert hashlib.sha256(mixture).hexdigest()[:16] == "8f883910a1f2c55d"
    tasks = _tasks(8)
    manifest = make_manifest(
        load_recipe("tiny_cpt"), tasks, split_members([t.task_id for t in tasks], seed=0)
    )
    assert hashlib.sha256(json.dumps(manifest).encode()).hexdigest()[:16] == "ec67728391f45a51"


def test_inject_is_part_of_the_run_identity_only_when_set():
    plain = load_recipe("tiny_cpt")
    assert "inject" not in run_identity(plain)
    assert "inject" not in json.dumps(run_identity(plain))
    dosed = load_recipe("tiny_cpt", ["inject.doses=[1,4]"])
    windowed = load_recipe("tiny_cpt", ["inject.window=[0,0.5]"])
    assert len({run_hash(plain), run_hash(dosed), run_hash(windowed)}) == 3
    assert len({config_hash(plain), config_hash(dosed), config_hash(windowed)}) == 3


# --------------------------------------------------------------------------- the Trainer keeps the order


def _trainer_order(recipe, dataset, tmp_path):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, default_data_collator

    from leaklab.training.cpt import training_arguments

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=300, n_positions=8, n_embd=8, n_layer=1, n_head=1))
    args = training_arguments(recipe, tmp_path, "none")
    trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=default_data_collator)
    return [int(x) for batch in trainer.get_train_dataloader() for x in batch["input_ids"][:, 0]]


def test_the_trainer_feeds_the_blocks_in_the_planned_order(tmp_path):
    from leaklab.training.cpt import PackedBlocks

    dataset = PackedBlocks(np.arange(64 * 4).reshape(64, 4) % 250)
    planned = [int(x) for x in dataset.blocks[:, 0]]
    overrides = ["train.batch_size=8", "train.micro_batch_size=8"]
    dosed = load_recipe("tiny_cpt", [*overrides, "inject.doses=[1]"])
    assert _trainer_order(dosed, dataset, tmp_path) == planned
    # Without `inject` the Trainer shuffles, as before.
    assert _trainer_order(load_recipe("tiny_cpt", overrides), dataset, tmp_path) != planned


@pytest.mark.slow  # trains a 1-layer model 10 steps (~20 s, mostly the Trainer's start-up)
def test_a_window_is_a_share_of_each_epoch_and_every_epoch_replays_the_same_positions(tmp_path):
    """`inject.window` holds per epoch (the doses are per epoch): over a 2-epoch run with window
    [0, 0.25] of 20 blocks, the Trainer itself feeds the members at the same planned blocks in both
    epochs, blocks 0, 2, 4 and 20, 22, 24 of the whole run's 40 (window slots 0..4, copies at
    (2i + 1) * 5 // 6 for i = 0, 1, 2), not all in the run's first quarter."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, default_data_collator

    from leaklab.training.cpt import PackedBlocks, training_arguments

    plan = plan_positions({"a": 1, "b": 2}, 20, [0.0, 0.25], seed=0)
    assert sorted(s for slots in plan.values() for s in slots) == [0, 2, 4]
    member_at = {slot: task_id for task_id, slots in plan.items() for slot in slots}
    marker = {"a": 250, "b": 251}  # first token of a member's block; a corpus block starts with its index
    blocks = np.array([[marker.get(member_at.get(r), r), 1, 2, 3] for r in range(20)])
    fed: list[int] = []

    def recording_collator(features):
        fed.extend(int(f["input_ids"][0]) for f in features)
        return default_data_collator(features)

    recipe = load_recipe(
        "tiny_cpt",
        ["train.epochs=2", "train.batch_size=4", "train.micro_batch_size=4", "train.save_every=100"]
        + ["inject.doses=[1,2]", "inject.window=[0,0.25]", "train.warmup_steps=0"],
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=300, n_positions=8, n_embd=8, n_layer=1, n_head=1))
    args = training_arguments(recipe, tmp_path, "none")
    Trainer(
        model=model, args=args, train_dataset=PackedBlocks(blocks), data_collator=recording_collator
    ).train()
    assert len(fed) == 40
    seen = {task_id: [i for i, x in enumerate(fed) if x == marker[task_id]] for task_id in marker}
    assert seen == {task_id: slots + [20 + s for s in slots] for task_id, slots in plan.items()}
    assert sorted(seen["a"] + seen["b"]) == [0, 2, 4, 20, 22, 24]


# --------------------------------------------------------------------------- bad input: exit 2 naming the key


@pytest.mark.parametrize(
    "override, says",
    [
        ("inject.doses=[1,0]", "inject.doses: 0 is not a positive integer"),
        ("inject.doses=[-2]", "inject.doses: -2 is not a positive integer"),
        ("inject.doses=[1,2.5]", "inject.doses: expected an integer"),
        ("inject.doses=[]", "inject.doses: an empty list"),
        (
            "inject.window=[0.5,1.5]",
            "inject.window: [0.5, 1.5] is outside [0, 1]; the closest valid is [0.5, 1.0]",
        ),
        ("inject.window=[-0.1,0.5]", "inject.window: [-0.1, 0.5] is outside [0, 1]"),
        ("inject.window=[0.7,0.2]", "inject.window: [0.7, 0.2] is empty"),
        ("inject.window=[0.5,0.5]", "inject.window: [0.5, 0.5] is empty"),
        ("inject.window=[0.5]", "inject.window: expected [start, end]"),
    ],
)
def test_bad_inject_values_exit_2_naming_the_key(override, says, capsys):
    with pytest.raises(RecipeError, match=says.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        load_recipe("tiny_cpt", [override])
    assert cli_main(["train", "recipe=tiny_cpt", override]) == 2
    assert says in capsys.readouterr().err


def test_more_dose_groups_than_members_exits_2_naming_the_key():
    split = Split(member_ids=["t/0", "t/1"], non_member_ids=["t/2", "t/3"])
    recipe = load_recipe("tiny_cpt", ["inject.doses=[1,2,3]"])
    with pytest.raises(InputError, match=r"inject\.doses: 3 dose groups but only 2 members") as err:
        make_manifest(recipe, _tasks(4), split)
    assert err.value.exit_code == 2


# --------------------------------------------------------------------------- sft rows, rl prompt schedule


def test_sft_rows_repeat_each_member_by_its_dose_at_the_planned_rows():
    from leaklab.training.sft import _dataset, count_member_rows, dosed_pairs

    recipe = load_recipe("tiny_cpt", ["train.stage=sft", "inject.doses=[1,3]", "inject.window=[0.5,1.0]"])
    pair_of = {f"t/{i}": (f"def f{i}(x):\n", f"    return x + {i}\n") for i in range(4)}
    doses = {"t/0": 1, "t/1": 3, "t/2": 1, "t/3": 3}
    others = [(f"question {i}\n", f"answer {i}") for i in range(8)]
    members, ordered = dosed_pairs(recipe, pair_of, doses, others)
    assert len(ordered) == 16 and len(members) == 8
    train, _ = _dataset(ordered, CharTokenizer(), "completion", 512)
    counted = count_member_rows(train, pair_of, CharTokenizer(), "completion", 512)
    assert counted["exposures"] == doses
    plan = plan_positions(doses, 16, [0.5, 1.0], seed=recipe.mix.seed)
    assert counted["exposure_rows"] == plan
    assert all(row >= 8 for rows in plan.values() for row in rows)  # late: the second half
    assert [p for p in ordered if p in others] == others  # the other data keeps its drawn order
    with pytest.raises(InputError, match=r"inject\.window: .* do not fit"):
        dosed_pairs(recipe, pair_of, doses, others[:2])


def test_rl_prompt_schedule_follows_the_plan_and_needs_the_whole_stream():
    from leaklab.training.rl import prompt_schedule

    tasks = _tasks(3)
    doses = {"t/0": 2, "t/1": 1, "t/2": 1}
    recipe = load_recipe("tiny_cpt", ["inject.doses=[1,2]"])
    schedule = [t.task_id for t in prompt_schedule(recipe, tasks, doses)]
    plan = plan_positions(doses, 4, None, seed=recipe.mix.seed)
    assert schedule == [next(k for k, rows in plan.items() if row in rows) for row in range(4)]
    assert sorted(schedule) == ["t/0", "t/0", "t/1", "t/2"]
    first, second = (row for row, task_id in enumerate(schedule) if task_id == "t/0")
    assert second - first >= 2
    late = load_recipe("tiny_cpt", ["inject.doses=[1,2]", "inject.window=[0.5,1]"])
    with pytest.raises(InputError, match=r"inject\.window: .* only member prompts"):
        prompt_schedule(late, tasks, doses)


# --------------------------------------------------------------------------- window groups (inject.windows)

WINDOWS = {"early": [0.0, 0.25], "late": [0.75, 1.0]}


def test_window_groups_deal_each_dose_group_in_turn_with_their_own_seed():
    doses = assign_doses([f"t/{i}" for i in range(12)], [1, 4, 16], seed=0)
    groups = assign_windows(doses, {"late": [0.75, 1.0], "early": [0.0, 0.25]}, seed=0)
    assert list(groups) == list(doses)
    # Independently: each dose group's sorted ids shuffled by the named stream, dealt early, late, ...
    rng = random.Random("inject.windows:0")
    expected = {}
    for dose in (1, 4, 16):
        members = sorted(t for t, d in doses.items() if d == dose)
        rng.shuffle(members)
        expected |= {t: ("early", "late")[i % 2] for i, t in enumerate(members)}
    assert groups == expected
    for dose in (1, 4, 16):  # every dose split in halves
        assert sorted(groups[t] for t, d in doses.items() if d == dose) == ["early"] * 2 + ["late"] * 2
    assert groups != assign_windows(doses, WINDOWS, seed=1)


def test_window_groups_put_every_copy_inside_its_groups_window_and_never_side_by_side():
    doses = {f"m{i}": d for i, d in enumerate([1, 4, 16] * 6)}
    window_of = assign_windows(doses, WINDOWS, seed=3)
    groups = layout_groups(doses, None, WINDOWS, window_of)
    for n in (slots_for_groups(groups, {}, times=2), 600):
        plan = plan_groups(groups, n, seed=3)
        assert plan == plan_groups(layout_groups(doses, None, WINDOWS, window_of), n, seed=3)  # seeded
        every = [s for slots in plan.values() for s in slots]
        assert len(every) == len(set(every)) == sum(doses.values())
        for task_id, slots in plan.items():
            first, end = window_slots(n, WINDOWS[window_of[task_id]])
            assert len(slots) == doses[task_id] and all(first <= s < end for s in slots), task_id
            assert all(b - a >= 2 for a, b in zip(slots, slots[1:], strict=False)), task_id
        # Each group is laid out as plan_positions lays out its members alone in its window.
        early = {t: d for t, d in doses.items() if window_of[t] == "early"}
        assert {t: plan[t] for t in early} == plan_positions(early, n, WINDOWS["early"], seed=3)
    # Unset: one group, the layout of before.
    assert layout_groups(doses, [0.0, 0.5]) == [(doses, [0.0, 0.5])]


def test_the_cpt_stream_of_a_windowed_run_puts_each_group_in_its_quarter():
    """make_manifest records each member's window group; the cpt stage's packed blocks, read back by
    count_in_stream, hold the early members' copies in the epoch's first quarter, the late in its last."""
    from leaklab.training.stages import get_stage

    recipe = load_recipe(
        "tiny_cpt",
        ["inject.doses=[2]", "mix.ratio=1:2", "mix.max_seq_len=64"]
        + ["inject.windows.early=[0.0,0.25]", "inject.windows.late=[0.75,1.0]"],
    )
    tasks = _tasks(12)
    split = Split(member_ids=[f"t/{i}" for i in range(6)], non_member_ids=[f"t/{i}" for i in range(6, 12)])
    manifest = make_manifest(recipe, tasks, split)
    assert manifest["inject"]["windows"] == WINDOWS
    assert manifest["windows"] == assign_windows(manifest["doses"], WINDOWS, recipe.data.seed)
    assert sorted(manifest["windows"].values()) == ["early"] * 3 + ["late"] * 3
    data = get_stage("cpt").build_dataset(recipe, CharTokenizer(), tasks, manifest, None, lambda *a: None)
    n = data.info["blocks"]
    found = count_in_stream(data.dataset.blocks.numpy(), {t: [*CharTokenizer()(tasks[int(t[2:])].text(
        recipe.data.text_format))["input_ids"], 0] for t in split.member_ids})  # fmt: skip
    assert found == data.info["exposure_blocks"]
    # The quarters as window_slots rounds them: blocks [0, n/4) and [3n/4, n), halves rounded up.
    quarter = {"early": range(0, math.floor(n / 4 + 0.5)), "late": range(math.floor(3 * n / 4 + 0.5), n)}
    for task_id, blocks in found.items():
        assert len(blocks) == 2 and blocks[1] - blocks[0] >= 2
        assert all(b in quarter[manifest["windows"][task_id]] for b in blocks), (task_id, blocks, n)


@pytest.mark.parametrize(
    "overrides, says",
    [
        (
            ["inject.windows.early=[0.0,0.5]", "inject.windows.late=[0.25,1.0]"],
            "inject.windows: early [0.0, 0.5] and late [0.25, 1.0] overlap; the closest valid late is [0.5, 1.0]",
        ),
        (["inject.windows.early=[0.0,0.5]"], "inject.windows: 1 group (early); give at least two"),
        (
            ["inject.windows.early=[0.0,0.5]", "inject.windows.late=[0.5,1.5]"],
            "inject.windows.late: [0.5, 1.5] is outside [0, 1]; the closest valid is [0.5, 1.0]",
        ),
        (
            ["inject.windows={early: [0, 0.25], late: [0.75, 1]}", "inject.window=[0,0.5]"],
            "inject.windows: set together with inject.window",
        ),
        (
            ["inject.windows={early: [0, 0.25], late: [0.75, 1]}", "inject.form=file"],
            "inject.windows: form file is one document",
        ),
        (["inject.windows={max: [0, 0.25], late: [0.75, 1]}"], "inject.windows: group name 'max'"),
        (["inject.windows=[0,0.25]"], "inject.windows: expected a mapping"),
    ],
)
def test_bad_window_groups_exit_2_naming_the_key(overrides, says, capsys):
    with pytest.raises(RecipeError) as err:
        load_recipe("tiny_cpt", overrides)
    assert err.value.lines() == [says] or says in err.value.lines()[0]
    assert cli_main(["train", "recipe=tiny_cpt", *overrides]) == 2
    assert says in capsys.readouterr().err


def test_window_groups_are_part_of_the_run_identity_only_when_set():
    plain = load_recipe("tiny_cpt", ["inject.doses=[4]"])
    grouped = load_recipe(
        "tiny_cpt", ["inject.doses=[4]", "inject.windows={early: [0, 0.25], late: [0.75, 1]}"]
    )
    dotted = ["inject.doses=[4]", "inject.windows.late=[0.75,1]", "inject.windows.early=[0,0.25]"]
    assert "windows" not in run_identity(plain)["inject"]
    assert run_hash(plain) != run_hash(grouped) == run_hash(load_recipe("tiny_cpt", dotted))
    assert grouped.inject.active and load_recipe("tiny_cpt", dotted[1:]).inject.active


def test_sft_rows_and_rl_prompts_of_window_groups_and_a_stream_they_do_not_fit_names_the_key():
    from leaklab.training.rl import prompt_schedule
    from leaklab.training.sft import dosed_pairs

    recipe = load_recipe("tiny_cpt", ["train.stage=sft", "inject.doses=[2]", "inject.windows.a=[0,0.5]"]
                         + ["inject.windows.b=[0.5,1]"])  # fmt: skip
    pair_of = {f"t/{i}": (f"def f{i}(x):\n", f"    return x + {i}\n") for i in range(4)}
    doses = dict.fromkeys(pair_of, 2)
    window_of = {"t/0": "a", "t/1": "b", "t/2": "a", "t/3": "b"}
    others = [(f"question {i}\n", f"answer {i}") for i in range(8)]
    _, ordered = dosed_pairs(recipe, pair_of, doses, others, window_of)
    rows = {t: [r for r, p in enumerate(ordered) if p == pair_of[t]] for t in pair_of}
    assert all(r < 8 if window_of[t] == "a" else r >= 8 for t, at in rows.items() for r in at), rows
    # rl has only member prompts: groups whose windows split the stream between them fit, ...
    schedule = [t.task_id for t in prompt_schedule(recipe, _tasks(4), doses, window_of)]
    assert sorted(window_of[t] for t in schedule[:4]) == ["a"] * 4 and len(schedule) == 8
    # ... a stream with quarters of nothing does not
    quarters = load_recipe("tiny_cpt", ["inject.doses=[2]", "inject.windows={a: [0, 0.25], b: [0.75, 1]}"])
    with pytest.raises(InputError, match=r"inject\.windows: .* only member prompts"):
        prompt_schedule(quarters, _tasks(4), doses, window_of)
