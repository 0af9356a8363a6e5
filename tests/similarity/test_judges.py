"""LLM judges: prompts carry both functions; replies are parsed leniently and failures are counted."""

import pytest

from leaklab.signals.generation import Completion
from leaklab.similarity.judges import PROMPTS, SYSTEMS, Verdict, chat_messages, judge_pairs, parse, prompt


def test_prompts_hold_both_functions_and_ask_for_the_format():
    text = prompt("structural", "def a():\n    return 1\n", "def b():\n    return 2")
    assert "def a():" in text and "def b():" in text and "[[0.777]]" in text
    assert '{"equivalence_score": <0.0 to 1.0>, "reasoning": "<short explanation>"}' in prompt(
        "equivalence", "x", "y"
    )
    assert set(PROMPTS) == set(SYSTEMS) == {"structural", "rating", "equivalence", "clone_screen"}


def test_the_judges_ask_the_papers_questions_with_its_output_fields():
    # 000 App. C.1: each judge has a system role; Song's asks for a 0-1 score by grammar-parsing
    # structure between =====Code 1===== / =====Code 2===== / =====End===== as [[0.777]]; Nikiema's for a
    # JSON object with similarity_rating, category (equivalent / similar / opposed / unrelated) and
    # reasoning; the paper's own for equivalence_score and reasoning, weighing the same outputs for the
    # same inputs, the same algorithm or approach, and the same handling of edge cases.
    structural = prompt("structural", "REF", "GEN")
    assert "grammar parser" in structural and "three decimal places" in structural
    assert "=====Code 1=====\nREF\n=====Code 2=====\nGEN\n=====End=====" in structural
    rating = prompt("rating", "REF", "GEN")
    assert all(f'"{f}"' in rating for f in ("similarity_rating", "category", "reasoning"))
    assert all(f'"{c}"' in rating for c in ("equivalent", "similar", "opposed", "unrelated"))
    equivalence = prompt("equivalence", "REF", "GEN")
    for criterion in ("same outputs for the same inputs", "same algorithm or approach", "edge cases"):
        assert criterion in equivalence
    assert "Function A (Reference):\nREF" in equivalence and "Function B (Generated):\nGEN" in equivalence
    # the system role is its own turn for a chat template
    turns = chat_messages(equivalence)
    assert [t["role"] for t in turns] == ["system", "user"] and turns[0]["content"] == SYSTEMS["equivalence"]
    assert chat_messages("plain text") == [{"role": "user", "content": "plain text"}]
    # and the replies are read by those fields
    reply = '{"similarity_rating": 0.6, "category": "similar", "reasoning": "same loop"}'
    assert parse("rating", reply) == Verdict(0.6, "similar", "same loop")
    assert parse("equivalence", '{"equivalence_score": 0.9, "reasoning": "same"}') == Verdict(0.9)


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
        ("equivalence", '{"score": 7}', Verdict(None, failure="no 'equivalence_score' in [0, 1]")),
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
