import json

import numpy as np
import pytest

from leaklab.data.benchmarks import DataUnavailableError, load_apps, load_humaneval
from leaklab.data.corpora import builtin_corpus_texts, corpus_texts, stdlib_source_files
from leaklab.data.mixing import build_mixture
from leaklab.data.splits import split_members
from leaklab.recipe import load_recipe
from leaklab.rundir import make_manifest


def test_split_is_seeded_balanced_and_order_independent():
    ids = [f"t/{i}" for i in range(11)]
    a = split_members(ids, seed=3)
    b = split_members(list(reversed(ids)), seed=3)
    c = split_members(ids, seed=4)
    assert a == b and a != c
    assert len(a.member_ids) == 6 and len(a.non_member_ids) == 5
    assert not set(a.member_ids) & set(a.non_member_ids)
    assert len(split_members(ids, seed=3, max_samples=4).member_ids) == 2


def test_manifest_is_byte_identical_for_the_same_seed():
    tasks = load_humaneval()
    recipe = load_recipe("tiny_cpt")
    split = split_members([t.task_id for t in tasks], seed=0)
    first = json.dumps(make_manifest(recipe, tasks, split))
    second = json.dumps(
        make_manifest(recipe, load_humaneval(), split_members([t.task_id for t in tasks], seed=0))
    )
    assert first == second
    manifest = json.loads(first)
    assert manifest["n_members"] == 82 and manifest["n_non_members"] == 82


def test_builtin_corpus_excludes_tests_and_is_ordered():
    files = stdlib_source_files()
    assert list(files) == sorted(files, key=lambda p: p.as_posix().split("/lib/python")[-1])
    assert not any("/test/" in p.as_posix() or p.name.startswith("test_") for p in files)
    texts = builtin_corpus_texts()
    assert any("def " in t for t in texts[:50])
    assert len(texts) > len(files) * 0.9  # pydoc topics appended after the sources


class CharTokenizer:
    """One token per character: enough to check the arithmetic of mixing."""

    eos_token_id = 0

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [1 + (ord(c) % 200) for c in text]}


def test_mixture_hits_the_ratio_and_keeps_members_whole():
    members = [f"MEMBER{i}" * (i % 5 + 2) for i in range(10)]  # all shorter than a block
    web = [f"web text {i} " * 30 for i in range(50)]
    blocks, stats = build_mixture(members, web, CharTokenizer(), code=1, web=5, block_len=64, seed=0)
    assert blocks.shape[1] == 64
    assert stats["member_tokens"] == sum(len(m) + 1 for m in members)
    assert abs(stats["web_tokens"] - 5 * stats["member_tokens"]) <= 64  # exact up to one block of rounding
    assert stats["web_tokens"] + stats["member_tokens"] == blocks.size
    flat = [" ".join(map(str, b)) for b in blocks.tolist()]
    tok = CharTokenizer()
    for m in members:
        ids = " ".join(map(str, tok(m)["input_ids"]))
        assert any(ids in b for b in flat), "every member sits whole inside one block"


def test_mixture_splits_only_members_longer_than_a_block():
    members = ["x" * 150, "short"]
    blocks, stats = build_mixture(members, ["w" * 500], CharTokenizer(), code=1, web=1, block_len=64, seed=0)
    assert stats["members_split_across_blocks"] == 1
    assert abs(stats["achieved_ratio"] - 1) < 0.3


def test_local_corpus_and_missing_paths(tmp_path):
    (tmp_path / "a.txt").write_text("alpha")
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": "beta"}) + "\n")
    assert list(corpus_texts(str(tmp_path))) == ["alpha", "beta"]
    with pytest.raises(DataUnavailableError, match="does not exist"):
        list(corpus_texts("./no/such/dir"))


def test_hub_corpus_offline_says_what_to_do():
    with pytest.raises(DataUnavailableError, match="mix.corpus="):
        list(corpus_texts("someone/some-web-corpus"))


def test_apps_offline_names_the_local_path_key():
    with pytest.raises(DataUnavailableError, match="data.path="):
        load_apps(hub_name="codeparrot/apps")


def test_humaneval_ships_with_the_package():
    tasks = load_humaneval()
    assert len(tasks) == 164 and tasks[0].task_id == "HumanEval/0"
    assert np.all([t.entry_point for t in tasks])
