"""A conversation's port on the run's server: when a call may run, what is recorded, and how a
question asked through a tool becomes a clarification turn (the virtual user is the real rules
user; the tools run on no database: list_tables lists none)."""

from __future__ import annotations

from evalbench.agents import AgentContext
from evalbench.agents.tools import ToolKit
from evalbench.config.agents import ToolLimits
from evalbench.config.serve import ServeConfig
from evalbench.config.vusers import RulesVUserConfig
from evalbench.core.conversation import AgentReply, ReplyKind, Stage, after_golden, after_prompt, next_user_message
from evalbench.run.served_turns import ServedTurns
from evalbench.run.stages import new_conversation
from evalbench.serve.server import Served
from evalbench.vuser import build_vuser
from tests.helpers import make_item


def served_conversation(ambiguous: bool = True, patience: int = 0, per_turn: int = 8):
    served = Served(ServeConfig(), ToolKit(["list_tables", "run_sql"], ToolLimits(per_turn=per_turn), AgentContext()))
    vuser = build_vuser(RulesVUserConfig(), 1)
    turns = ServedTurns(served, None, "fail", lambda conv: vuser.answer(conv, conv.last_turn.reply.text))
    conv = new_conversation(make_item(ambiguous=ambiguous), seed=1, max_turns=10, patience=patience, timeout_s=60)
    after_golden(conv, None)
    after_prompt(conv, *next_user_message(conv))
    turns.open(conv)
    return turns, conv, served.lookup(conv.served["mcp_token"])


def test_calls_run_only_during_a_turn_and_the_token_dies_with_the_conversation():
    turns, conv, port = served_conversation()
    assert port is not None and "no turn in progress" in port.call("list_tables", {})["error"]
    reply = turns.turn(conv, lambda: (port.call("list_tables", {}), port.call("drop_tables", {}),
                                      port.call("list_tables", {"database": "other"}),
                                      AgentReply(ReplyKind.ANSWER, text="none"))[-1])
    assert [(c.name, c.outcome) for c in reply.tool_calls] == [("list_tables", "ok"), ("drop_tables", "refused"),
                                                               ("list_tables", "refused")]
    turns.close(conv)
    assert turns.served.lookup(port.token) is None and "has ended" in port.call("list_tables", {})["error"]


def test_a_question_asked_through_the_tool_is_a_clarification_turn_and_the_budget_holds():
    turns, conv, port = served_conversation(ambiguous=True, patience=0)  # budget: one question
    answers = []

    def agent_turn():
        answers.append(port.call("ask_user", {"question": "Which shops do you mean?"}))
        answers.append(port.call("ask_user", {"question": "And which year?"}))
        return AgentReply(ReplyKind.SQL, sql="SELECT 1", text="done")

    reply = turns.turn(conv, agent_turn)
    assert "answer" in answers[0] and "no more questions" in answers[1]["error"]
    question, after = conv.turns
    assert question.reply.kind is ReplyKind.CLARIFICATION and question.reply.text == "Which shops do you mean?"
    assert question.vuser is not None and question.vuser.text == answers[0]["answer"]
    assert after.user_role == "vuser" and after.user_text == answers[0]["answer"] and conv.stage is Stage.GENERATE
    assert conv.phase.clarifications == 1
    assert [(c.name, c.outcome) for c in reply.tool_calls] == [("ask_user", "budget")]
    assert [(c.name, c.outcome) for c in question.reply.tool_calls] == [("ask_user", "ok")]


def test_an_agent_that_loops_on_a_tool_is_cut_off():
    turns, conv, port = served_conversation(per_turn=2)
    results = []
    reply = turns.turn(conv, lambda: (results.extend(port.call("list_tables", {}) for _ in range(1005)),
                                      AgentReply(ReplyKind.ANSWER, text="x"))[-1])
    outcomes = [c.outcome for c in reply.tool_calls]
    assert outcomes[:2] == ["ok", "ok"] and set(outcomes[2:]) == {"budget"} and len(outcomes) == 1000
    assert "not run, not recorded" in results[-1]["error"]


def test_birds_user_simulator_routes_answer_by_task_id_and_refuse_what_is_not_theirs():
    import httpx

    turns, conv, port = served_conversation()
    served = turns.served
    served.start()
    try:
        url = served.base_url
        assert httpx.post(f"{url}/ask", json={"task_id": "nope", "question": "?"}).status_code == 404
        assert httpx.post(f"{url}/ask", content=b"{not json").status_code == 400
        assert httpx.post(f"{url}/ask", content=b" " * (2 << 20)).status_code == 413
        between = httpx.post(f"{url}/ask", json={"task_id": port.token, "question": "Which shops?"}).json()
        assert "no turn in progress" in between["error"]

        def agent_turn() -> AgentReply:
            answer = httpx.post(f"{url}/ask", json={"task_id": port.token, "question": "Which shops?"}).json()
            submitted = httpx.post(f"{url}/submit", json={"task_id": port.token, "sql": "SELECT 2"}).json()
            assert answer["answer"] and submitted["passed"] is False and "judges" in submitted["message"]
            assert httpx.post(f"{url}/phase_transition", json={"task_id": port.token}).json() == {"status": "ok"}
            return AgentReply(ReplyKind.ANSWER, text="submitted")

        reply = turns.turn(conv, agent_turn)
        assert reply.kind is ReplyKind.SQL and reply.sql == "SELECT 2"  # the submitted SQL is the answer
        assert conv.phase.clarifications == 1 and conv.turns[0].vuser is not None
    finally:
        served.stop()
