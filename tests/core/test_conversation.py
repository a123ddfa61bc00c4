"""The conversation state machine: every outcome, sticky sessions, the follow-up phase, and the
pooled scheduler completing every item exactly once."""

from __future__ import annotations

import threading
import time

import pytest

from evalbench.agents import build_agent
from evalbench.config import RulesVUserConfig, SimulatedAgentConfig
from evalbench.core.conversation import AgentReply, Outcome, ReplyKind, Stage, VUserAction, VUserReply
from evalbench.run.scheduler import Scheduler
from evalbench.run.stages import Parts, StageWork, new_conversation, run_conversation
from evalbench.scoring import build_scorers
from evalbench.vuser import build_vuser
from tests.helpers import FixedVUser, ScriptedAgent, ask, make_item, sql

GOLDEN = "SELECT store_name FROM stores ORDER BY store_id"
ANSWER = VUserReply(action=VUserAction("labeled", terms=["the shops"]), text="All of our stores.")
SCORERS = {"exec_match": {}, "executable": {}, "turn_count": {}}


def parts(agent, sandbox, vuser=None):
    return Parts(agent=agent, vuser=vuser or FixedVUser(ANSWER), sandbox=sandbox, scorers=build_scorers(SCORERS))


def test_scored_when_the_agent_answers_right(demo_sandbox):
    conv = run_conversation(make_item(), parts(ScriptedAgent(lambda s, t, text: sql(GOLDEN)), demo_sandbox))
    assert conv.outcome is Outcome.SCORED
    assert conv.phases[0].scores["exec_match"].passed is True
    assert conv.phases[0].generated.row_count == 5


def test_scored_as_failure_when_the_answer_is_wrong(demo_sandbox):
    agent = ScriptedAgent(lambda s, t, text: sql("SELECT store_name FROM stores ORDER BY store_id DESC"))
    conv = run_conversation(make_item(), parts(agent, demo_sandbox))
    assert conv.outcome is Outcome.SCORED
    score = conv.phases[0].scores["exec_match"]
    assert score.passed is False and "order" in score.detail


def test_max_turns_when_the_clarification_budget_is_exceeded(demo_sandbox):
    agent = ScriptedAgent(lambda s, t, text: ask())
    conv = run_conversation(make_item(ambiguous=True), parts(agent, demo_sandbox), patience=2)
    assert conv.outcome is Outcome.MAX_TURNS
    # budget = 1 annotated ambiguity + patience 2 = 3 answered; the 4th question ends the phase
    assert conv.phases[0].clarifications == 4
    assert len(conv.turns) == 4
    assert conv.phases[0].scores["exec_match"].passed is False  # still scored, as a failure


def test_max_turns_hard_cap(demo_sandbox):
    agent = ScriptedAgent(lambda s, t, text: ask())
    conv = run_conversation(make_item(ambiguous=True), parts(agent, demo_sandbox), patience=50, max_turns=3)
    assert conv.outcome is Outcome.MAX_TURNS
    assert len(conv.turns) == 3


def test_agent_error_from_an_error_reply_and_from_an_exception(demo_sandbox):
    agent = ScriptedAgent(lambda s, t, text: AgentReply(ReplyKind.ERROR, error="HTTP 500", error_kind="http_500"))
    conv = run_conversation(make_item(), parts(agent, demo_sandbox))
    assert conv.outcome is Outcome.AGENT_ERROR and "HTTP 500" in conv.error

    def boom(s, t, text):
        raise ConnectionError("agent went away")

    conv = run_conversation(make_item(), parts(ScriptedAgent(boom), demo_sandbox))
    assert conv.outcome is Outcome.AGENT_ERROR and "agent went away" in conv.error
    assert conv.phases[0].scores["exec_match"].passed is False


def test_timeout_from_the_agent_and_from_the_conversation_deadline(demo_sandbox):
    agent = ScriptedAgent(lambda s, t, text: AgentReply(ReplyKind.ERROR, error="read timeout", error_kind="timeout"))
    conv = run_conversation(make_item(), parts(agent, demo_sandbox))
    assert conv.outcome is Outcome.TIMEOUT

    def slow(s, t, text):
        time.sleep(0.2)
        return ask()

    conv = run_conversation(make_item(ambiguous=True), parts(ScriptedAgent(slow), demo_sandbox), timeout_s=0.1)
    assert conv.outcome is Outcome.TIMEOUT
    assert "conversation timeout" in conv.error


def test_vuser_error(demo_sandbox):
    conv = run_conversation(make_item(ambiguous=True), parts(ScriptedAgent(lambda s, t, text: ask()), demo_sandbox,
                                                             vuser=FixedVUser(RuntimeError("simulator down"))))
    assert conv.outcome is Outcome.VUSER_ERROR and "simulator down" in conv.error
    conv = run_conversation(make_item(ambiguous=True), parts(ScriptedAgent(lambda s, t, text: ask()), demo_sandbox,
                                                             vuser=FixedVUser(VUserReply(None, "", error="invalid action"))))
    assert conv.outcome is Outcome.VUSER_ERROR


def test_invalid_item_when_the_golden_sql_fails_and_the_agent_is_never_asked(demo_sandbox):
    item = make_item(golden="SELECT no_such_column FROM stores")
    agent = ScriptedAgent(lambda s, t, text: sql("SELECT 1"))
    conv = run_conversation(item, parts(agent, demo_sandbox))
    assert conv.outcome is Outcome.INVALID_ITEM  # the dataset's fault, not the database's nor the agent's
    assert "golden SQL failed" in conv.error and "no_such_column" in conv.error
    assert agent.sessions == [] and conv.turns == []
    assert conv.phases[0].scores == {} and conv.phases[0].primary is None  # judged by nothing


def test_db_error_when_the_database_is_down_at_the_golden_sql(demo_sandbox):
    from evalbench.backends.postgres.sandbox import Sandbox

    down = Sandbox("postgresql://nobody@127.0.0.1:1/none", pool_size=1, statement_timeout_s=1, max_rows=10,
                   connect_timeout_s=2)
    try:
        conv = run_conversation(make_item(), parts(ScriptedAgent(lambda s, t, text: sql(GOLDEN)), down))
    finally:
        down.close()
    assert conv.outcome is Outcome.DB_ERROR and "connection" in conv.error


def test_agent_sql_error_is_scored_not_db_error(demo_sandbox):
    conv = run_conversation(make_item(), parts(ScriptedAgent(lambda s, t, text: sql("SELECT nope FROM stores")), demo_sandbox))
    assert conv.outcome is Outcome.SCORED
    assert conv.phases[0].generated.error_kind == "sql"
    assert conv.phases[0].scores["executable"].passed is False


def test_answer_without_sql_is_a_failure(demo_sandbox):
    agent = ScriptedAgent(lambda s, t, text: AgentReply(ReplyKind.ANSWER, text="There are five stores."))
    conv = run_conversation(make_item(), parts(agent, demo_sandbox))
    assert conv.outcome is Outcome.SCORED
    assert conv.phases[0].scores["exec_match"].passed is False


def test_one_sticky_session_for_clarifications_and_follow_up(demo_sandbox):
    follow = "SELECT store_name FROM stores ORDER BY store_id LIMIT 2"

    def script(session, turn, text):
        if text == "Now only the first two.":
            return sql(follow)
        return ask() if turn == 0 else sql(GOLDEN)

    agent = ScriptedAgent(script)
    conv = run_conversation(make_item(ambiguous=True, follow_up=follow), parts(agent, demo_sandbox))
    assert conv.outcome is Outcome.SCORED
    assert len(agent.sessions) == 1 and conv.sessions_opened == 1
    session = agent.sessions[0]
    assert session.received == ["List the shops.", "All of our stores.", "Now only the first two."]
    assert session.closed  # closed once, at COMPLETE
    assert [p.phase.value for p in conv.phases] == ["main", "follow_up"]
    assert all(p.scores["exec_match"].passed for p in conv.phases)


def test_follow_up_is_not_asked_after_a_failed_main_phase(demo_sandbox):
    agent = ScriptedAgent(lambda s, t, text: sql("SELECT 1"))
    conv = run_conversation(make_item(follow_up="SELECT 1"), parts(agent, demo_sandbox))
    assert [p.phase.value for p in conv.phases] == ["main"]


def test_per_turn_sessions_forget(demo_sandbox):
    """session: per_turn exists to show the failure mode of an agent that forgets: the oracle
    asks its question again in every new session until the budget runs out."""
    agent = build_agent(SimulatedAgentConfig(agent="simulated:oracle", session="per_turn"), 0)
    vuser = build_vuser(RulesVUserConfig(), 0)
    conv = run_conversation(make_item(ambiguous=True), Parts(agent, vuser, demo_sandbox, build_scorers(SCORERS)), patience=1)
    assert conv.outcome is Outcome.MAX_TURNS
    assert conv.sessions_opened == len(conv.turns) == 3

    sticky = build_agent(SimulatedAgentConfig(agent="simulated:oracle"), 0)
    conv = run_conversation(make_item(ambiguous=True), Parts(sticky, vuser, demo_sandbox, build_scorers(SCORERS)), patience=1)
    assert conv.outcome is Outcome.SCORED and conv.sessions_opened == 1


def test_scheduler_completes_every_item_exactly_once(demo_sandbox):
    """Mixed outcomes through the pooled stages, more items than the in-flight cap."""
    kinds = ["ok", "wrong", "ask", "error", "exception", "timeout", "answer", "badgolden"]

    def script(session, turn, text):
        first = agent.sessions[session].received[0]  # the opening question names the behaviour
        kind = first.split("#")[-1]
        return {
            "ok": lambda: sql(GOLDEN),
            "wrong": lambda: sql("SELECT 1"),
            "ask": lambda: ask(),
            "error": lambda: AgentReply(ReplyKind.ERROR, error="500", error_kind="http_500"),
            "timeout": lambda: AgentReply(ReplyKind.ERROR, error="slow", error_kind="timeout"),
            "answer": lambda: AgentReply(ReplyKind.ANSWER, text="no"),
            "badgolden": lambda: sql("SELECT 1"),
            "exception": lambda: (_ for _ in ()).throw(RuntimeError("x")),
        }[kind]()

    agent = ScriptedAgent(script)
    work = StageWork(parts(agent, demo_sandbox))
    completed: list[str] = []
    lock = threading.Lock()

    def on_complete(conv):
        with lock:
            completed.append(conv.item.id)

    sizes = {stage: 2 for stage in (Stage.PROMPT, Stage.GENERATE, Stage.VUSER, Stage.EXECUTE, Stage.SCORE)}
    scheduler = Scheduler(sizes, max_in_flight=5, on_complete=on_complete)
    convs = []
    for i in range(80):
        kind = kinds[i % len(kinds)]
        item = make_item(f"i{i}", golden="SELECT nope" if kind == "badgolden" else GOLDEN, ambiguous=kind == "ask")
        item = item.model_copy(update={"ambiguous_question": f"question #{kind}", "question": f"question #{kind}"})
        conv = new_conversation(item, seed=i, max_turns=10, patience=1, timeout_s=60)
        convs.append(conv)
        assert scheduler.admit(conv, work)
    scheduler.wait()
    scheduler.shutdown()
    assert sorted(completed) == sorted(f"i{i}" for i in range(80))
    outcomes = {c.outcome for c in convs}
    assert outcomes == {Outcome.SCORED, Outcome.MAX_TURNS, Outcome.AGENT_ERROR, Outcome.TIMEOUT, Outcome.INVALID_ITEM}
    assert all(s.closed for s in agent.sessions)


def test_cancel_marks_in_flight_conversations_cancelled(demo_sandbox):
    release = threading.Event()

    def script(session, turn, text):
        release.wait(5)
        return sql(GOLDEN)

    work = StageWork(parts(ScriptedAgent(script), demo_sandbox))
    done = []
    sizes = {stage: 2 for stage in (Stage.PROMPT, Stage.GENERATE, Stage.VUSER, Stage.EXECUTE, Stage.SCORE)}
    scheduler = Scheduler(sizes, max_in_flight=4, on_complete=done.append)
    for i in range(4):
        scheduler.admit(new_conversation(make_item(f"c{i}"), seed=i, max_turns=5, patience=1, timeout_s=60), work)
    scheduler.cancel()
    release.set()
    scheduler.wait()
    scheduler.shutdown()
    assert len(done) == 4
    assert {c.outcome for c in done} == {Outcome.CANCELLED}
    assert not scheduler.admit(new_conversation(make_item("late"), seed=9, max_turns=5, patience=1, timeout_s=60), work)


@pytest.mark.parametrize("agent_name", ["simulated:oracle", "simulated:noisy"])
def test_simulated_agents_are_deterministic(demo_sandbox, agent_name):
    from evalbench.dataset import load_items
    from tests.conftest import DEMO

    items, _ = load_items(DEMO / "greenleaf.jsonl")
    agent = build_agent(SimulatedAgentConfig(agent=agent_name), 7)
    vuser = build_vuser(RulesVUserConfig(), 7)

    def verdicts():
        return [run_conversation(item, Parts(agent, vuser, demo_sandbox, build_scorers(SCORERS)), seed=7).outcome for item in items[:15]]

    assert verdicts() == verdicts()


def test_debugging_attempt_after_a_wrong_answer(demo_sandbox):
    """BIRD-Interact: after a wrong answer the user says so and the agent may try once more;
    a phase solved that way is worth 0.5 (main) instead of 0.7."""
    from evalbench.core.conversation import DEBUG_MESSAGE
    from evalbench.results.journal.record import reward

    def script(session, turn, text):
        return sql("SELECT 1") if turn == 0 else sql(GOLDEN)

    conv = run_conversation(make_item(), parts(ScriptedAgent(script), demo_sandbox), debug_attempts=1)
    assert conv.outcome is Outcome.SCORED
    assert [t.user_text for t in conv.turns][1] == DEBUG_MESSAGE
    main = conv.phases[0]
    assert main.debug_used == 1 and main.passed and main.attempts[0]["scores"]["exec_match"] is False
    assert reward(conv) == 0.5

    conv = run_conversation(make_item(), parts(ScriptedAgent(script), demo_sandbox))  # no debugging offered
    assert not conv.phases[0].passed and len(conv.turns) == 1 and reward(conv) == 0.0

    conv = run_conversation(make_item(), parts(ScriptedAgent(lambda s, t, x: sql("SELECT 1")), demo_sandbox), debug_attempts=1)
    assert not conv.phases[0].passed and len(conv.turns) == 2  # one more try, then the phase fails
