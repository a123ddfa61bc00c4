"""Per-turn state (``state_each_turn``, sent as ADK's ``state_delta``) and per-kind message
templates (``messages``) of the adk agent, against a real ``adk api_server`` serving the offline
test apps; and the apps that bring their own tools (mcp_agent, bird_like_agent) with no endpoint
served to them."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import yaml

from evalbench.agents import AgentContext, build_agent
from evalbench.agents.adk import AdkAgent, AdkSession
from evalbench.agents.adk_turns import MessageKind, message_kind, turn_message
from evalbench.agents.config import AdkAgentConfig
from evalbench.config import RulesVUserConfig
from evalbench.core.conversation import DEBUG_MESSAGE, Conversation, Outcome, after_prompt, follow_up_phase
from evalbench.dataset.schema_files import SchemaFiles
from evalbench.dataset.session_state import StateFacts, render_state
from evalbench.run.stages import Parts, new_conversation, run_conversation
from evalbench.scoring import build_scorers
from evalbench.vuser import build_vuser
from tests.conftest import SHARED
from tests.helpers import make_item

ROOT = Path(__file__).resolve().parents[2]
FOLLOW_UP = "SELECT store_name FROM stores ORDER BY store_id LIMIT 2"
BIRD = yaml.safe_load((ROOT / "configs" / "bird_interact_adk.yaml").read_text())["model_config"]
ECHO_MESSAGES = {"main": "Q[{phase}/{turn}/{database}]: {text}", "follow_up": "FU: {text}",
                 "clarification_answer": "A: {text}", "debug": "DBG: {text}"}


def echo(session, conv: Conversation, text: str, role: str = "user") -> dict:
    """Send ``text`` as the conversation's next turn to the state_agent; what it saw."""
    after_prompt(conv, text, role)
    reply = session.send(conv.last_turn.user_text)
    assert reply.kind.value == "answer", reply
    return json.loads(reply.text)


@contextlib.contextmanager
def opened(config: AdkAgentConfig, conv: Conversation, context: AgentContext | None = None) -> Iterator[AdkSession]:
    """A session of ``conv``, deleted (and its client closed) however the test ends."""
    session = AdkAgent(config, context or AgentContext(seed=1)).open_session(conv)
    try:
        yield session
    finally:
        session.close()


def conversation(item=None) -> Conversation:
    return new_conversation(item or make_item(follow_up=FOLLOW_UP), seed=1, max_turns=10, patience=3, timeout_s=60)


def test_state_each_turn_arrives_before_every_turn_and_each_kind_of_message_is_wrapped(adk_server):
    config = AdkAgentConfig(agent="adk", base_url=adk_server, app_name="state_agent", messages=ECHO_MESSAGES,
                            state_each_turn={"_submitted_this_phase": False, "phase": "{phase}", "turn": "{turn}"})
    conv = conversation()
    with opened(config, conv) as session:
        seen = [echo(session, conv, "ECHO question"), echo(session, conv, "ECHO answer", "vuser"),
                echo(session, conv, f"{DEBUG_MESSAGE} ECHO")]
        conv.phases.append(follow_up_phase(conv.item, 3))
        seen.append(echo(session, conv, "ECHO follow-up"))
        with httpx.Client(base_url=adk_server) as client:
            kept = client.get(f"/apps/state_agent/users/evalbench/sessions/{session.session_id}").json()["state"]
    assert [s["message"] for s in seen] == ["Q[main/1/greenleaf]: ECHO question", "A: ECHO answer",
                                            f"DBG: {DEBUG_MESSAGE} ECHO", "FU: ECHO follow-up"]
    # the agent sets the flag after each turn; the delta has reset it before the next one
    assert [(s["state"]["_submitted_this_phase"], s["state"]["phase"], s["state"]["turn"]) for s in seen] == [
        (False, "main", 1), (False, "main", 2), (False, "main", 3), (False, "follow_up", 4)]
    assert kept["_submitted_this_phase"] is True and kept["database"] == "greenleaf"


def test_without_state_each_turn_the_agents_own_state_stays(adk_server):
    """What BIRD-Interact's agent meets behind a plain api_server: the flag it set stays set."""
    config = AdkAgentConfig(agent="adk", base_url=adk_server, app_name="state_agent")
    conv = conversation()
    with opened(config, conv) as session:
        first, second = echo(session, conv, "ECHO one"), echo(session, conv, "ECHO two", "vuser")
    assert first["message"] == "ECHO one" and "_submitted_this_phase" not in first["state"]
    assert second["message"] == "ECHO two" and second["state"]["_submitted_this_phase"] is True


def test_served_names_come_from_the_runs_server(adk_server):
    served = {"mcp_url": "http://127.0.0.1:6001/mcp", "mcp_token": "tok-1", "served_url": "http://127.0.0.1:6001",
              "task_id": "tok-1"}
    config = AdkAgentConfig(agent="adk", base_url=adk_server, app_name="state_agent",
                            session_state={"task_id": "{task_id}", "mcp_token": "{mcp_token}"},
                            state_each_turn={"mcp_url": "{mcp_url}"})
    conv = conversation()
    conv.served = served
    with opened(config, conv, AgentContext(seed=1)) as session:
        state = echo(session, conv, "ECHO")["state"]
    assert state == {"task_id": "tok-1", "mcp_token": "tok-1", "mcp_url": "http://127.0.0.1:6001/mcp"}
    unserved = build_agent(config, AgentContext(seed=1))
    with pytest.raises(ValueError, match=r"\{task_id\} is served by the harness: the run config needs a serve: section"):
        unserved.open_session(conversation())


def test_message_kinds_follow_the_conversation():
    conv = conversation()
    assert message_kind(conv) is MessageKind.MAIN  # no turn yet
    kinds = []
    for text, role in [("q", "user"), ("a", "vuser"), (DEBUG_MESSAGE, "user"), ("a2", "vuser")]:
        after_prompt(conv, text, role)
        kinds.append(message_kind(conv))
    conv.phases.append(follow_up_phase(conv.item, 3))
    for text, role in [("f", "user"), (DEBUG_MESSAGE, "user")]:
        after_prompt(conv, text, role)
        kinds.append(message_kind(conv))
    assert [k.value for k in kinds] == ["main", "clarification_answer", "debug", "clarification_answer",
                                        "follow_up", "debug"]


def test_templates_name_only_known_names():
    base = {"agent": "adk", "base_url": "http://x", "app_name": "a"}
    AdkAgentConfig(**base, state_each_turn={"t": "{turn}", "p": "{phase}", "id": "{task_id}"}, messages={"main": "{max_turn}: {text}"})
    with pytest.raises(ValueError, match=r"state_each_turn\n.*flag: unknown placeholder \{text\}"):
        AdkAgentConfig(**base, state_each_turn={"flag": "{text}"})
    with pytest.raises(ValueError, match=r"debug: unknown placeholder \{txt\}"):
        AdkAgentConfig(**base, messages={"debug": "{txt}"})
    with pytest.raises(ValueError, match=r"unknown placeholder \{turn\}"):
        AdkAgentConfig(**base, session_state={"t": "{turn}"})  # a session is opened once: no turn yet
    with pytest.raises(ValueError, match="Extra inputs"):
        AdkAgentConfig(**base, messages={"opening": "{text}"})


def test_schema_file_is_the_datasets_schema_text(tmp_path):
    nested = tmp_path / "shop"
    nested.mkdir()
    (nested / "shop_schema.txt").write_text("CREATE TABLE shop (id int);\n")
    (tmp_path / "greenleaf_schema.txt").write_text("CREATE TABLE stores (store_id int);\n")
    files = SchemaFiles(tmp_path)
    assert files("shop") == "CREATE TABLE shop (id int);\n"  # BIRD-Interact's <db>/<db>_schema.txt
    facts = StateFacts(make_item(), 3, lambda d, db: "", {}, schema_file=files)
    assert render_state({"db_schema": "{schema_file}"}, facts) == {"db_schema": "CREATE TABLE stores (store_id int);\n"}
    with pytest.raises(ValueError, match=r"neither .*/absent_schema.txt nor .*/absent/absent_schema.txt exists"):
        files("absent")
    with pytest.raises(ValueError, match="set knowledge_directory"):
        SchemaFiles(None)("shop")
    blog = SHARED / "db_blog" / "knowledge"
    if blog.is_dir():  # where the shared BIRD-style dataset keeps it: knowledge/ beside the dataset
        assert SchemaFiles(blog)("db_blog").startswith(blog.joinpath("db_blog_schema.txt").read_text()[:200])


# --------------------------------------------------------------------------- apps with their own tools


def bird_parts(url, sandbox, **changes):
    options = {k: v for k, v in BIRD.items() if k not in ("agent", "adkapi_server_url", "agent_id")}
    options["session_state"] = {**options["session_state"], "task_id": "{item_id}", "db_schema": "{schema}"}
    config = AdkAgentConfig(agent="adk", base_url=url, app_name="bird_like_agent", **(options | changes))
    agent = build_agent(config, AgentContext(seed=1))
    scorers = build_scorers({"exec_match": {}, "turn_count": {}})
    return Parts(agent, build_vuser(RulesVUserConfig(), 1), sandbox, scorers)


def test_the_bird_config_says_birds_words():
    """configs/bird_interact_adk.yaml validates as written, and its messages are
    orchestrator/cinteract.py::run_single_task's, word for word."""
    config = AdkAgentConfig(**BIRD | {"adkapi_server_url": "http://x", "agent_id": "bird_cinteract"})
    assert config.state_each_turn == {"_submitted_this_phase": False}
    item = make_item(ambiguous=True, follow_up=FOLLOW_UP)
    conv = conversation(item)
    facts = StateFacts(item, 3, lambda d, db: "", {})
    said = []
    for text, role in [(item.opening_question, "user"), (DEBUG_MESSAGE, "user")]:
        after_prompt(conv, text, role)
        said.append(turn_message(config, conv, facts, text).text)
    conv.phases.append(follow_up_phase(item, 3))
    after_prompt(conv, "Now only the first two.", "user")
    said.append(turn_message(config, conv, facts, "Now only the first two.").text)
    assert said == [
        "User Query:\nList the shops.\n\nYou have 4 clarification turns. Ask questions with ask_user to resolve "
        "ambiguities, then call submit_sql with your final PostgreSQL query.",
        "Your SQL is not correct. You have one more chance. Please fix and call submit_sql.",
        "Phase 1 is complete. Here is a follow-up question:\n\nNow only the first two.\n\n"
        "Generate the PostgreSQL query and call submit_sql."]


def test_bird_protocol_passes_both_phases_with_the_per_turn_reset(adk_server, demo_sandbox):
    """BIRD-Interact's protocol with nothing served: ask_user and submit_sql answer "Error: ...",
    the SQL is read from the submit_sql call (reply convention sql_tool), the messages are BIRD's."""
    conv = run_conversation(make_item(ambiguous=True, follow_up=FOLLOW_UP), bird_parts(adk_server, demo_sandbox))
    assert conv.outcome is Outcome.SCORED, conv.error
    assert [p.scores["exec_match"].passed for p in conv.phases] == [True, True]
    first, follow = conv.turns[0].reply, conv.turns[1].reply
    assert [c.name for c in first.tool_calls] == ["ask_user", "submit_sql"]
    assert all(str(c.response).count("Error: ") for c in first.tool_calls)  # no user simulator, no database env
    assert first.text == follow.text == "SQL submitted. Awaiting result."
    assert follow.sql == FOLLOW_UP


def test_bird_protocol_fails_every_later_turn_without_the_reset(adk_server, demo_sandbox):
    conv = run_conversation(make_item(follow_up=FOLLOW_UP), bird_parts(adk_server, demo_sandbox, state_each_turn={}))
    assert [p.scores["exec_match"].passed for p in conv.phases] == [True, False]
    follow = conv.turns[1].reply
    assert follow.kind.value == "answer" and follow.tool_calls == [] and follow.text == "SQL submitted. Awaiting result."


def test_the_tool_apps_load_and_mcp_agent_runs_without_its_tools_when_nothing_is_served(adk_server):
    """ADK lists no tools of an MCP server it cannot reach: the calls fail as unknown tools, and
    the offline model still answers (a turn, not an HTTP error)."""
    assert {"mcp_agent", "bird_like_agent"} <= set(httpx.get(f"{adk_server}/list-apps").json())
    config = AdkAgentConfig(agent="adk", base_url=adk_server, app_name="mcp_agent", read_timeout_s=60,
                            session_state={"mcp_token": "tok-1"})
    conv = conversation()
    after_prompt(conv, "List the names of all stores, by store id.", "user")
    with opened(config, conv) as session:
        reply = session.send(conv.last_turn.user_text)
    assert reply.kind.value == "sql" and reply.sql == "SELECT store_name FROM stores ORDER BY store_id"
    assert [c.name for c in reply.tool_calls] == ["list_tables", "run_sql"]
    assert all("no tool with that name is available" in c.response["error"] for c in reply.tool_calls)
    assert "The query returned: " in reply.text


def test_mcp_agent_sends_the_sessions_token():
    from tests.adk_apps.mcp_agent.agent import bearer_from_state

    assert bearer_from_state(SimpleNamespace(state={"mcp_token": "tok-1"})) == {"Authorization": "Bearer tok-1"}
    assert bearer_from_state(SimpleNamespace(state={})) == {}


def test_a_run_gives_the_agent_the_schema_files_of_its_knowledge_folder(tmp_path):
    from evalbench.config import load_run_config
    from evalbench.run.items import Items
    from evalbench.run.parts import RunParts
    from evalbench.run.plan import RunPlan

    knowledge = tmp_path / "knowledge"
    (knowledge / "greenleaf").mkdir(parents=True)  # BIRD-Interact's layout: <dir>/<db>/<db>_schema.txt
    (knowledge / "greenleaf" / "greenleaf_schema.txt").write_text("CREATE TABLE stores (store_id int);\n")
    config = tmp_path / "run.yaml"
    config.write_text(f"dataset_config: {ROOT / 'datasets' / 'demo' / 'greenleaf.jsonl'}\n"
                      f"knowledge_directory: {knowledge}\n"
                      "model_config: {agent: adk, adkapi_server_url: 'http://127.0.0.1:9', agent_id: a, "
                      "session_state: {db_schema: '{schema_file}'}}\n")
    plan = RunPlan.resolve(load_run_config(config))
    with RunParts(plan, Items(plan.items)) as parts:
        agent = parts.agent
        assert isinstance(agent, AdkAgent)
        facts = agent.state_facts(conversation())
    assert render_state(agent.config.session_state, facts) == {"db_schema": "CREATE TABLE stores (store_id int);\n"}


def test_a_turns_state_may_name_its_phases_clarification_budget():
    config = AdkAgentConfig(agent="adk", base_url="http://x", app_name="a",
                            state_each_turn={"budget": "{clarification_budget}", "phase": "{phase}"})
    item = make_item(ambiguous=True, follow_up=FOLLOW_UP)
    conv = conversation(item)
    facts = StateFacts(item, 3, lambda d, db: "", {})
    after_prompt(conv, item.opening_question, "user")
    assert turn_message(config, conv, facts, "q").state_delta == {"budget": 1 + 3, "phase": "main"}
    conv.phases.append(follow_up_phase(item, 3))
    after_prompt(conv, "Now only the first two.", "user")
    assert turn_message(config, conv, facts, "f").state_delta == {"budget": 3, "phase": "follow_up"}
