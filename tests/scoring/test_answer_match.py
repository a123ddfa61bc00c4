"""answer_match: a question answered in words, judged against the golden result; the pinned LLM
judge that may confirm it (real google-genai SDK against the local fake Gemini API); and the
quickstart, whose noisy agent answers some questions in words."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from evalbench.backends.base import ExecutionResult
from evalbench.core.conversation import Conversation, Outcome, PhaseRecord
from evalbench.core.errors import ConfigError
from evalbench.run.stages import new_conversation
from evalbench.scoring import SCORERS, build_scorers
from evalbench.scoring.primary import PrimaryPolicy
from tests.fake_llm_server import FakeLLMServer
from tests.helpers import make_item
from tests.scoring.test_llmrater import FAST, KEY_ENV, MODEL, prompt_of, verdict


def phase_with(answer: str | None, rows: list[tuple[Any, ...]], *, sql: str | None = None, columns: list[str] | None = None,
               outcome: Outcome | None = None, category: str = "Query") -> tuple[Conversation, PhaseRecord]:
    conv = new_conversation(make_item(category=category), seed=0, max_turns=10, patience=0, timeout_s=60)
    phase = conv.phase
    phase.answer, phase.sql, phase.outcome = answer, sql, outcome
    width = len(rows[0]) if rows else 1
    phase.golden = [ExecutionResult(columns=columns or [f"c{i}" for i in range(width)], rows=rows)]
    return conv, phase


def judge(answer: str | None, rows: list[tuple[Any, ...]], **kw: Any):
    scorer = build_scorers({"answer_match": kw.pop("options", {})})[0]
    return scorer.score(*phase_with(answer, rows, **kw))


@pytest.mark.parametrize("answer, rows", [
    ("There are 42 stores.", [(42,)]),
    ("The total is 1,234.50 dollars.", [(Decimal("1234.5"),)]),
    ("Average rating: 3.14", [(3.14159,)]),  # rounded as written, within 1 %
    ("About 45% of orders.", [(Decimal("0.4523"),)]),
    ("Riverside and Lakeside", [*[("Greenleaf Riverside",), ("Greenleaf Lakeside",)][:0], ("riverside",), ("LAKESIDE",)]),
    ("It opened on March 5, 2024.", [(dt.date(2024, 3, 5),)]),
    ("It opened on 5 Mar 2024.", [(dt.date(2024, 3, 5),)]),
    ("First order: 2025-04-03 10:15.", [(dt.datetime(2025, 4, 3, 10, 15),)]),
    ("Yes, it has a greenhouse.", [(True,)]),
    ("Parlor Palm (2023-03-01) and Pruning Shears (2023-02-10)", [("Parlor Palm", dt.date(2023, 3, 1)), ("Pruning Shears", dt.date(2023, 2, 10))]),
    ("Only one: 7.", [(7,), (None,)]),  # NULL cells need not be stated
])
def test_answers_that_give_the_golden_values_pass(answer, rows):
    score = judge(answer, rows)
    assert score.passed is True, score.detail


@pytest.mark.parametrize("answer, rows, why", [
    ("There are 41 stores.", [(42,)], "not in the answer: 42"),
    ("Average rating: 3", [(3.14159,)], "not in the answer"),  # too coarse
    ("About 1.", [(0.5,)], "not in the answer"),  # rounds to 1, but is 100 % off
    ("Riverside", [("Riverside",), ("Lakeside",)], "'Lakeside'"),
    ("It opened on March 6, 2024.", [(dt.date(2024, 3, 5),)], "not in the answer"),
    ("No, it does not.", [(True,)], "not in the answer"),
    ("I'm sorry, I cannot answer that.", [(42,)], "refusal"),
    ("I could not find that information in the database.", [(42,)], "refusal"),
    (" ".join(str(i) for i in range(40)), [(7,)], "numbers for 1 golden"),  # a dump of numbers
    ("Riverside, Lakeside, Old Town, Hillcrest and Harbor Point", [("Lakeside",)], "lists 5 entries"),  # every candidate
    ("Here they are.", [(i,) for i in range(60)], "max_cells"),
    ("", [(1,)], "no answer"),
    (None, [(1,)], "no answer"),
])
def test_wrong_answers_refusals_and_dumps_fail(answer, rows, why):
    score = judge(answer, rows)
    assert score.passed is False and why in score.detail, score.detail


def test_applicability_and_empty_golden_policy():
    assert judge(None, [(1,)], sql="SELECT 1").applicable is False  # SQL alone: judged by exec_match
    assert judge("It is 1.", [(1,)], sql="SELECT 1").passed is True  # SQL with an answer: the answer is judged
    assert judge("x", [(1,)], category="Management").applicable is False
    assert judge(None, [(1,)], outcome=Outcome.TIMEOUT).applicable is False  # no answer in words at all
    empty = judge("There are none.", [])
    assert empty.passed is False and empty.flags == ("empty_gold",)
    assert judge("There are none.", [], options={"empty_gold": "n/a"}).applicable is False
    with pytest.raises(ValueError, match="unknown"):
        build_scorers({"answer_match": {"tolerance": 1}})


def test_the_primary_verdict_of_a_question_answered_in_words():
    conv, phase = phase_with("There are 42.", [(42,)])
    phase.outcome = None
    for scorer in build_scorers({"exec_match": {}, "answer_match": {}}):
        phase.scores[scorer.name] = scorer.score(conv, phase)
    assert phase.scores["exec_match"].passed is False  # no SQL
    assert PrimaryPolicy(accept_nl_answers=True).choose(phase) == "answer_match"
    assert PrimaryPolicy(accept_nl_answers=False).choose(phase) == "exec_match"
    phase.sql = "SELECT 42"  # SQL and words: the SQL decides
    assert PrimaryPolicy(accept_nl_answers=True).choose(phase) == "exec_match"


# --------------------------------------------------------------------------- the pinned LLM judge


@pytest.fixture
def judge_options(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeLLMServer, dict[str, Any]]]:
    monkeypatch.setenv(KEY_ENV, "judge-key-789")
    for name in ("GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with FakeLLMServer() as server:
        yield server, {"model": MODEL, "api_key_env": KEY_ENV, "base_url": server.url, "seed": 7} | FAST


def test_a_deterministic_pass_is_confirmed_by_the_judge(judge_options):
    server, options = judge_options
    scorer = SCORERS.get("answer_match")({"llmrater": options})
    try:
        server.push(verdict("correct", "states the 42 stores"))
        score = scorer.score(*phase_with("There are 42 stores.", [(42,)]))
        assert score.passed is True and "the judge agrees" in score.detail
        request = server.requests[0].json()
        assert request["generationConfig"]["temperature"] == 0 and request["generationConfig"]["seed"] == 7
        prompt = prompt_of(server.requests[0])
        assert "<answer>\nThere are 42 stores.\n</answer>" in prompt and "1 row; 1 column: c0" in prompt
        server.push(verdict("incorrect", "counts shops, not stores"))
        score = scorer.score(*phase_with("There are 42 stores.", [(42,)]))
        assert score.passed is False and "judge_disagrees" in score.flags and "counts shops" in score.detail
        calls = len(server.requests)
        assert scorer.score(*phase_with("There are 41 stores.", [(42,)])).passed is False
        assert len(server.requests) == calls  # a deterministic failure is not sent to the judge
        described = scorer.describe()["judge"]
        assert described["model"] == MODEL and described["prompt_file"].endswith("answer_rater.txt")
    finally:
        scorer.close()


def test_judge_option_errors_name_the_key(judge_options):
    _, options = judge_options
    with pytest.raises(ConfigError) as info:
        SCORERS.get("answer_match")({"llmrater": options | {"votes": 2}})
    assert info.value.key == "scorers.answer_match.llmrater.votes"


# --------------------------------------------------------------------------- the quickstart


def test_the_quickstart_shows_answers_in_words_judged_correctly(tmp_path, pgdata, capsys):
    from evalbench.cli import main
    from evalbench.results import read_journal

    assert main(["run", "--config", "configs/quickstart.yaml", "--output-dir", str(tmp_path), "--run-id", "qs",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "answer_match" in out and "natural-language answers accepted" in out
    words = [(r["item_id"], p) for r in read_journal(tmp_path / "qs") for p in r["phases"] if p["answer"] and not p["sql"]]
    right = [(i, p) for i, p in words if p["scores"]["answer_match"]["passed"]]
    refused = [(i, p) for i, p in words if "refusal" in p["scores"]["answer_match"]["flags"]]
    assert right and refused, words
    for _, phase in right:  # judged by answer_match, and counted as a success
        assert phase["primary"] == "answer_match" and phase["passed"] is True
        assert phase["scores"]["exec_match"]["passed"] is False  # there was no SQL to run
    for _, phase in refused:
        assert phase["primary"] == "answer_match" and phase["passed"] is False
    summary = json.loads((tmp_path / "qs" / "summary.json").read_text())
    assert summary["primary"]["main"]["answer_match"] == len([w for w in words if w[1]["phase"] == "main"])


def test_under_bird_interact_the_answer_is_judged_against_the_golden_sql_as_written(demo_sandbox):
    """BIRD-Interact's comparison strips ROUND from the golden SQL; an answer in words states the
    rounded value the question asks for, so answer_match runs the golden SQL as written."""
    from evalbench.core.conversation import AgentReply, ReplyKind
    from evalbench.run.stages import Parts, run_conversation
    from evalbench.scoring.primary import PrimaryPolicy
    from evalbench.scoring.semantics import ResultRules
    from tests.helpers import FixedVUser, ScriptedAgent

    golden = "SELECT ROUND(AVG(unit_price), 1) FROM products"
    rounded = demo_sandbox.execute(golden).rows[0][0]
    unrounded = demo_sandbox.execute("SELECT AVG(unit_price) FROM products").rows[0][0]
    assert rounded != unrounded
    item = make_item(golden=golden, order=False).model_copy(update={"format": "bird-interact"})
    agent = ScriptedAgent(lambda s, t, text: AgentReply(ReplyKind.ANSWER, text=f"The average price is {rounded}."))
    parts = Parts(agent=agent, vuser=FixedVUser(RuntimeError("unused")), sandbox=demo_sandbox,
                  scorers=build_scorers({"exec_match": {"semantics": "bird_interact"}, "answer_match": {}}),
                  rules=ResultRules("bird_interact"), primary=PrimaryPolicy(accept_nl_answers=True))
    phase = run_conversation(item, parts).phases[0]
    assert phase.golden_run_sql == [["SELECT AVG(unit_price) FROM products"]]  # what exec_match compares
    assert phase.scores["answer_match"].passed is True, phase.scores["answer_match"].detail
    assert phase.primary == "answer_match" and phase.passed
