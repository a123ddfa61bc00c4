"""The adk agent through the whole pipeline, against a real `adk api_server` serving the offline
test agents of tests/adk_apps (the `adk_server` fixture)."""

from __future__ import annotations

import json

import httpx
import pytest

from evalbench.agents import AgentContext, build_agent
from evalbench.agents.config import AdkAgentConfig
from evalbench.config import RulesVUserConfig, load_run_config
from evalbench.core.conversation import Outcome
from evalbench.core.items import Ambiguity
from evalbench.dataset.knowledge import KnowledgeEntry
from evalbench.results import read_journal
from evalbench.run import run
from evalbench.run.stages import Parts, new_conversation, run_conversation
from evalbench.scoring import build_scorers
from evalbench.vuser import build_vuser
from tests.conftest import DEMO
from tests.helpers import make_item

SCORERS = {"exec_match": {}, "executable": {}, "turn_count": {}}
FOLLOW_UP = "SELECT store_name FROM stores ORDER BY store_id LIMIT 2"


def adk_parts(url, demo_sandbox, app="gda_agent", **options):
    config = AdkAgentConfig(agent="adk", base_url=url, app_name=app, **options)
    agent = build_agent(config, AgentContext(seed=1))
    return Parts(agent, build_vuser(RulesVUserConfig(), 1), demo_sandbox, build_scorers(SCORERS))


def user_events(url: str, app: str, session_id: str) -> int:
    with httpx.Client(base_url=url) as client:
        response = client.get(f"/apps/{app}/users/evalbench/sessions/{session_id}")
    if response.status_code == 404:
        return -1
    return sum(1 for e in response.json()["events"] if (e.get("content") or {}).get("role") == "user"
               and any("text" in p for p in e["content"]["parts"]))


@pytest.mark.parametrize("app", ["gda_agent", "input_agent"])
def test_direct_sql_answer(adk_server, demo_sandbox, app):
    conv = run_conversation(make_item(), adk_parts(adk_server, demo_sandbox, app))
    assert conv.outcome is Outcome.SCORED, conv.error
    turn = conv.turns[0]
    assert turn.reply.kind.value == "sql" and turn.reply.sql.startswith("SELECT store_name FROM stores")
    assert conv.phases[0].scores["exec_match"].passed
    assert turn.reply.usage.total > 0 and turn.reply.latency_s > 0 and turn.reply.raw
    if app == "gda_agent":
        assert [c.name for c in turn.reply.tool_calls] == ["cloud_gda_query_tool_alloydb"]


@pytest.mark.parametrize("app", ["gda_agent", "input_agent"])
def test_clarification_then_sql_then_sticky_follow_up(adk_server, demo_sandbox, app):
    """Convention (a) asks through the GDA tool, (b) through adk_request_input; the answer and
    the follow-up go to the same ADK session."""
    conv = run_conversation(make_item(ambiguous=True, follow_up=FOLLOW_UP), adk_parts(adk_server, demo_sandbox, app))
    assert conv.outcome is Outcome.SCORED, conv.error
    kinds = [t.reply.kind.value for t in conv.turns]
    assert kinds == ["clarification", "sql", "sql"]
    assert conv.turns[0].reply.text == "Which shops do you mean?"
    assert conv.turns[1].user_role == "vuser" and conv.turns[1].user_text
    assert [p.phase.value for p in conv.phases] == ["main", "follow_up"]
    assert all(p.scores["exec_match"].passed for p in conv.phases)
    assert conv.sessions_opened == 1


def test_per_turn_sessions_fail_the_follow_up(adk_server, demo_sandbox):
    conv = run_conversation(make_item(follow_up=FOLLOW_UP), adk_parts(adk_server, demo_sandbox, session="per_turn"))
    assert conv.sessions_opened == 2
    follow_up = conv.phases[1]
    assert follow_up.scores["exec_match"].passed is False  # the new session does not know the question
    assert conv.turns[1].reply.kind.value == "answer"


def test_agent_exception_is_an_http_500_turn_error_never_resent(adk_server, demo_sandbox):
    parts = adk_parts(adk_server, demo_sandbox)
    item = make_item().model_copy(update={"question": "List the stores. CRASH"})
    session = parts.agent.open_session(new_conversation(item, seed=1, max_turns=5, patience=1, timeout_s=60))
    reply = session.send(item.question)
    assert reply.kind.value == "error" and reply.error_kind == "http_500"
    assert user_events(adk_server, "gda_agent", session.session_id) == 1  # sent exactly once
    # the session still works after the 500 (a fresh connection is used)
    assert session.send("List the stores.").kind.value == "sql"
    session.close()
    assert user_events(adk_server, "gda_agent", session.session_id) == -1  # deleted

    conv = run_conversation(item, parts)
    assert conv.outcome is Outcome.AGENT_ERROR and "HTTP 500" in conv.error


def test_slow_agent_times_out(adk_server, demo_sandbox):
    item = make_item().model_copy(update={"question": "List the stores. SLOW"})
    conv = run_conversation(item, adk_parts(adk_server, demo_sandbox, read_timeout_s=1.0))
    assert conv.outcome is Outcome.TIMEOUT
    assert conv.turns[0].reply.error_kind == "timeout"


def test_run_sse_endpoint(adk_server, demo_sandbox):
    conv = run_conversation(make_item(ambiguous=True), adk_parts(adk_server, demo_sandbox, "input_agent", endpoint="run_sse"))
    assert conv.outcome is Outcome.SCORED and [t.reply.kind.value for t in conv.turns] == ["clarification", "sql"]


def test_the_agent_learns_its_database_from_session_state(adk_server, demo_sandbox):
    """Each session is created with the item's database and dialect (model_config.session_state);
    an agent that reads them there answers, and without them it cannot."""
    parts = adk_parts(adk_server, demo_sandbox, "state_agent")
    conv = run_conversation(make_item(), parts)
    assert conv.outcome is Outcome.SCORED and conv.phases[0].scores["exec_match"].passed, conv.turns[0].reply
    session = parts.agent.open_session(conv)  # what the server holds for a session of this item
    with httpx.Client(base_url=adk_server) as client:
        state = client.get(f"/apps/state_agent/users/evalbench/sessions/{session.session_id}").json()["state"]
    session.close()
    assert state == {"database": "greenleaf", "dialect": "postgres"}
    blind = run_conversation(make_item(), adk_parts(adk_server, demo_sandbox, "state_agent", session_state={}))
    assert not blind.phases[0].scores["exec_match"].passed
    assert "do not know which database" in blind.turns[0].reply.text


def test_session_state_is_a_template_over_the_item() -> None:
    from evalbench.dataset.session_state import StateFacts, check_template, render_state

    deleted = Ambiguity(term="big", kind="knowledge", knowledge_id=9)  # the agent must ask about it
    item = make_item("t7", ambiguous=True).model_copy(update={"external_knowledge": [4, "2", "x", 9],
                                                              "ambiguities": [deleted]})
    template = {"db": "{database}@{dialect}", "ids": "{knowledge_ids}", "nested": ["{item_id}", {"n": 3}], "lit": "{{x}}",
                "schema": "{schema}"}
    entries = {i: KnowledgeEntry(i, f"k{i}", f"d{i}", (f"def{i}",)) for i in (2, 9, 4)}
    facts = StateFacts(item, 3, lambda dialect, database: f"schema of {database} ({dialect})", entries)
    rendered = render_state(template | {"kg": "{external_kg}", "max_turn": "{max_turn}"}, facts)
    assert rendered.pop("kg") == json.dumps([{"id": 2, "knowledge": "k2", "description": "d2", "definition": ["def2"]},
                                             {"id": 4, "knowledge": "k4", "description": "d4", "definition": ["def4"]}],
                                            indent=2)  # BIRD-Interact's get_knowledge: the base less deleted entries
    assert rendered == {"db": "greenleaf@postgres", "ids": [2, 4], "nested": ["t7", {"n": 3}], "lit": "{x}",
                        "schema": "schema of greenleaf (postgres)", "max_turn": 1 + 3}  # one knowledge ambiguity + patience
    with pytest.raises(ValueError, match=r"session_state.nested\[0\]: unknown placeholder \{host\}"):
        check_template({"nested": ["{host}"]})
    with pytest.raises(ValueError, match="session_state"):
        AdkAgentConfig(agent="adk", base_url="http://x", app_name="a", session_state={"db": "{database.name}"})


@pytest.mark.slow  # end to end: make test-slow (CI) runs it
def test_full_run_over_the_demo_dataset(adk_server, tmp_path, pgdata):
    config = tmp_path / "adk.yaml"
    config.write_text(
        f"dataset_config: {DEMO / 'greenleaf.jsonl'}\n"
        f"setup_directory: {DEMO / 'setup'}\n"
        f"model_config: {{generator: querydata, adkapi_server_url: '{adk_server}', agent_id: gda_agent, execs_per_minute: 6000}}\n"
        "runners: {sqlgen_runners: 4}\n"
        f"reporting: {{csv: {{output_directory: {tmp_path}}}}}\n"
        "run_id: adk\n"
    )
    result = run(load_run_config(config), progress=False)
    records = list(read_journal(result.run_dir))
    assert len(records) == 43 and len({r["item_id"] for r in records}) == 43
    assert sum(result.summary["outcomes"].values()) == 43
    # the offline agent answers every demo item with its golden SQL (after one clarification)
    assert result.summary["scorers"]["exec_match"]["main"]["rate"] == 1.0
    assert all(r["sessions_opened"] == 1 for r in records)
    assert result.summary["conversation"]["tokens"]["total"] > 0
