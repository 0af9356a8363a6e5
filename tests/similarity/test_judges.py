"""LLM judges: prompts carry both functions; replies are parsed leniently and failures are counted."""

import pytest

from leaklab.signals.generation import Completion
from leaklab.similarity.judges import PROMPTS, Verdict, judge_pairs, parse, prompt


def test_prompts_hold_both_functions_and_ask_for_the_format():
    text = prompt("structural", "def a():\n    return 1\n", "def b():\n    return 2")
    assert "def a():" in text and "def b():" in text and "[[0.350]]" in text
    assert '{"score": <number>}' in prompt("equivalence", "x", "y")
    assert set(PROMPTS) == {"structural", "rating", "equivalence", "clone_screen"}
    with pytest.raises(ValueError, match="unknown judge"):
        prompt("song", "x", "y")


@pytest.mark.parametrize(
    ("kind", "reply", "expected"),
    [
        ("structural", "Both loop the same way. [[0.820]]", Verdict(0.82)),
        ("structural", "first [[0.1]] then corrected: [[ .9 ]]", Verdict(0.9)),
        ("structural", "score 0.8", Verdict(None, failure="no [[score]] in the reply")),
        ("structural", "[[1.5]]", Verdict(None, failure="score outside [0, 1]")),
        ("rating", '```json\n{"score": 0.7, "category": "Similar", "reason": "same loop"}\n```',
         Verdict(0.7, "similar", "same loop")),
        ("rating", "score: 0.4, category: opposed, reason: inverted test", Verdict(0.4, "opposed", "inverted test")),
        ("rating", '{"score": 0.4, "category": "close"}', Verdict(0.4, None, None, failure="unknown category 'close'")),
        ("equivalence", 'Reasoning... {"score": 1}', Verdict(1.0)),
        ("equivalence", '{"score": "0.25"}', Verdict(0.25)),
        ("equivalence", '{"score": 7}', Verdict(None, failure="no 'score' in [0, 1]")),
        ("equivalence", "I cannot tell.", Verdict(None, failure="no JSON object in the reply")),
        ("equivalence", "   ", Verdict(None, failure="empty reply")),
        ("clone_screen", '{"clone": true}', Verdict(1.0)),
        ("clone_screen", "clone: no", Verdict(0.0)),
        ("clone_screen", '{"clone": "maybe"}', Verdict(None, failure="no true/false 'clone' field")),
    ],
)  # fmt: skip
def test_parse(kind, reply, expected):
    assert parse(kind, reply) == expected


class _Echo:
    """A back-end with the Generator signature that answers from a list."""

    def __init__(self, replies):
        self.replies = replies
        self.prompts = None

    def generate(self, prompts, max_new_tokens=256, stop=(), temperature=0.0, n=1, seed=0):
        self.prompts = list(prompts)
        return [[Completion(r, None, "stop")] for r in self.replies]


def test_judge_pairs_counts_failures_and_renders_for_chat_models():
    backend = _Echo(['{"score": 0.9}', "no idea", ""])
    verdicts, failures = judge_pairs(backend, "equivalence", [("a", "b")] * 3, render=lambda t: f"<chat>{t}")
    assert [v.score for v in verdicts] == [0.9, None, None]
    assert failures == {"no JSON object in the reply": 1, "empty reply": 1}
    assert all(p.startswith("<chat>") for p in backend.prompts)
