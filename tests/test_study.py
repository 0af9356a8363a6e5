"""`leaklab study`: the clean control's data (`inject.withhold`), the study file's plan and validation, the
leaderboard's statistics against hand-computed values, the findings' verdicts, the Slurm array script,
and the smoke study end to end."""

from __future__ import annotations

import pytest

from leaklab.data.doses import assign_doses
from leaklab.data.mixing import build_dosed_mixture
from leaklab.recipe import RecipeError, load_recipe, run_hash


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
    kwargs = {"code": 1, "web": 3, "block_len": 128, "window": [0.5, 1.0], "seed": 5}
    dosed, dosed_info = build_dosed_mixture(texts, doses, web, CharTokenizer(), **kwargs)
    clean, clean_info = build_dosed_mixture(texts, doses, web, CharTokenizer(), withhold=True, **kwargs)
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
