"""MRI's LLM judge of rewrites (alignment, difficulty): the reading of replies, and the optional filter
in the perturbed sets, through a fake OpenAI-compatible endpoint (no network)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from test_mri_sets import ADD  # add(a, b) with a HumanEval-style check

from leaklab.data.tasks import Task
from leaklab.evaluations.mri import MriConfig, llm_backend
from leaklab.execution.sandbox import Sandbox
from leaklab.perturb import mri_sets
from leaklab.perturb.mri_llm import Judgement, judge_prompt, read_judgement

TWICE = Task(
    task_id="toy/twice",
    benchmark="toy",
    prompt='def twice(x):\n    """Double x.\n    >>> twice(4)\n    8\n    """\n',
    solution="    return x * 2\n",
    entry_point="twice",
    tests="def check(candidate):\n    assert candidate(4) == 8\n    assert candidate(1) == 2\n",
)


@pytest.mark.parametrize(
    "reply, expected",
    [
        ('{"aligned": true, "difficulty": "same", "reason": "ok"}', Judgement(True, "same", "ok")),
        # fenced, with thinking before it; the last object is the answer
        (
            'I think {"aligned": false}.\n```json\n{"aligned": false, "difficulty": "harder", "reason": "r"}\n```',
            Judgement(False, "harder", "r"),
        ),
        ('{"Aligned": "yes", "difficulty": "Similar"}', Judgement(True, "same", "")),
        (
            "aligned: no\ndifficulty: easier\nreason: the examples disagree",
            Judgement(False, "easier", "the examples disagree"),
        ),  # fmt: skip
        (
            '{"aligned": true, "difficulty": "trivial"}',
            Judgement(True, None, "", "unknown difficulty 'trivial'"),
        ),
        (
            '{"aligned": "maybe", "difficulty": "same"}',
            Judgement(None, failure="no true/false 'aligned' field"),
        ),
        ("I cannot tell.", Judgement(None, failure="no JSON object in the reply")),
        ("  ", Judgement(None, failure="empty reply")),
    ],
)
def test_judge_replies_are_read_tolerantly(reply, expected):
    assert read_judgement(reply) == expected


def test_only_an_aligned_verdict_of_the_same_difficulty_passes_the_filter():
    assert Judgement(True, "same").keeps
    assert not Judgement(True, "harder").keeps
    assert not Judgement(False, "same").keeps
    assert not Judgement(True, None, failure="unknown difficulty").keeps
    assert not Judgement(None, failure="empty reply").keeps


def test_judge_prompt_shows_both_tasks_and_the_new_tests():
    rewrite = Task(
        task_id="toy/add/rewrite",
        benchmark="toy",
        prompt=ADD.prompt.replace("Add a and b.", "Subtract b from a."),
        solution="    return a - b\n",
        entry_point="add",
        test_type="call",
        test_cases=({"input": [2, 3], "output": -1},),
    )
    text = judge_prompt(ADD, rewrite)
    assert "Add a and b." in text and "Subtract b from a." in text
    assert "return a + b" in text and "return a - b" in text
    assert "add(2, 3) == -1" in text
    assert '{"aligned": true or false' in text  # the braces survive str.format


class _FakeServer(BaseHTTPRequestHandler):
    """An OpenAI-compatible /v1/completions that answers each prompt with `answer(prompt)`."""

    answer = staticmethod(lambda prompt: "")
    prompts: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).prompts.extend(body["prompt"])
        choices = [
            {"index": i, "text": type(self).answer(p), "finish_reason": "stop"}
            for i, p in enumerate(body["prompt"])
        ]
        payload = json.dumps({"choices": choices}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def _answer(prompt: str) -> str:
    """Refuse to paraphrase; pass the rewrite of `add`, find the rewrite of `twice` misaligned."""
    if "<new_task>" not in prompt:
        return "sorry, I cannot"
    original = prompt.split("<original_task>")[1]
    if "def add(" in original:
        return '{"aligned": true, "difficulty": "same", "reason": "the statement names the change"}'
    return 'Looking closely...\n{"aligned": false, "difficulty": "same", "reason": "the example is stale"}'


@pytest.fixture()
def endpoint():
    _FakeServer.answer, _FakeServer.prompts = staticmethod(_answer), []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _FakeServer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1, timeout_s=5.0) as sb:
        yield sb


def test_the_judge_filters_rewrites_and_every_verdict_is_recorded(endpoint, sandbox, tmp_path):
    cfg = MriConfig(llm_backend="openai", llm_model="judge", llm_base_url=endpoint, llm_judge="filter")
    assert cfg.check() == []
    sets = mri_sets.perturbed_sets_for(
        [ADD, TWICE], cache_dir=tmp_path, sandbox=sandbox, llm=llm_backend(cfg), log=lambda *a: None
    )
    judge_prompts = [p for p in _FakeServer.prompts if "<new_task>" in p]
    assert len(judge_prompts) == 2  # one per rewrite that passed the execution checks
    add, twice = sets
    assert add.rewrite is not None and add.judge["aligned"] is True and add.judge["mode"] == "filter"
    assert twice.rewrite is None and twice.judge["aligned"] is False
    assert (
        twice.rejections[-1]["reason"] == "judge" and "the example is stale" in twice.rejections[-1]["detail"]
    )
    info = mri_sets.summary(sets)
    assert info["rewritten"] == 1
    assert info["judge"] == {
        "judged": 2, "mode": "filter", "aligned": 1, "misaligned": 1, "difficulty": {"same": 2}, "kept": 1,
        "unreadable": {},
    }  # fmt: skip
    assert sum(n for reason, n in info["rejections"].items() if reason.endswith(": judge")) == 1

    # "record" keeps both rewrites with their verdicts, in another cache file than "filter"
    recorded = mri_sets.perturbed_sets_for(
        [ADD, TWICE], cache_dir=tmp_path, sandbox=sandbox,
        llm=llm_backend(MriConfig(**{**cfg.__dict__, "llm_judge": "record"})), log=lambda *a: None,
    )  # fmt: skip
    assert all(s.rewrite is not None for s in recorded)
    assert [s.judge["aligned"] for s in recorded] == [True, False]
    assert len(list(tmp_path.glob("perturbed/*.jsonl"))) == 2


def test_unreadable_verdicts_are_counted_and_filtered(endpoint, sandbox, tmp_path):
    _FakeServer.answer = staticmethod(lambda p: "no idea" if "<new_task>" in p else "")
    cfg = MriConfig(llm_backend="openai", llm_model="judge", llm_base_url=endpoint, llm_judge="filter")
    logs: list[str] = []
    sets = mri_sets.perturbed_sets_for([ADD], cache_dir=tmp_path, sandbox=sandbox, llm=llm_backend(cfg), log=logs.append)  # fmt: skip
    assert sets[0].rewrite is None and sets[0].judge["failure"] == "no JSON object in the reply"
    assert mri_sets.summary(sets)["judge"]["unreadable"] == {"no JSON object in the reply": 1}
    assert any("LLM judge of 1 rewrites" in line for line in logs)


def test_the_judge_needs_a_backend():
    assert MriConfig(llm_judge="record").check() == [
        "evaluate.mri.llm_judge: needs evaluate.mri.llm_backend (hf or openai)"
    ]
