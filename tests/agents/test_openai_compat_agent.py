"""The openai_compat agent: a real httpx client against a local fake OpenAI-compatible server."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from evalbench.agents import AgentContext, build_agent
from evalbench.agents.config import OpenAICompatAgentConfig
from evalbench.core.conversation import ReplyKind
from evalbench.core.errors import ConfigError
from evalbench.dataset.knowledge import KnowledgeEntry
from evalbench.run.stages import new_conversation
from tests.fake_llm_server import FakeLLMServer, Received, Scripted
from tests.helpers import make_item

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = "CREATE TABLE stores (\n  store_id integer NOT NULL,\n  store_name text\n);"
FAST_RETRY = {"max_retries": 2, "backoff_s": 0.01, "max_backoff_s": 0.05}


def completion(content: str | None = None, tool_calls: list[dict[str, Any]] | None = None,
               usage: tuple[int, int, int] | None = (12, 5, 17)) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {"id": "cmpl-1", "object": "chat.completion", "model": "m",
                            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}]}
    if usage:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": usage[2]}
    return body


def call(name: str, call_id: str = "call_1", **args: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


@pytest.fixture
def make_agent(server: FakeLLMServer) -> Iterator[Callable[..., Any]]:
    agents: list[Any] = []

    def make(context: AgentContext | None = None, **options: Any) -> Any:
        settings: dict[str, Any] = {"agent": "openai_compat", "base_url": server.url + "/v1", "model": "test-model",
                                    "retry": FAST_RETRY} | options
        agent = build_agent(OpenAICompatAgentConfig(**settings),
                            context or AgentContext(seed=7, schema=lambda dialect, database: SCHEMA))
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        agent.close()


def session(agent: Any, **item: Any) -> Any:
    conv = new_conversation(make_item(**item), seed=1, max_turns=10, patience=3, timeout_s=60)
    return agent.open_session(conv)


# --------------------------------------------------------------------------- replies


def test_run_sql_tool_call_is_sql_with_usage_and_the_request_is_complete(server, make_agent, monkeypatch):
    monkeypatch.setenv("TEST_LLM_TOKEN", "sekret")
    server.push(completion(tool_calls=[call("run_sql", sql="SELECT store_name FROM stores")]))
    agent = make_agent(api_key_env="TEST_LLM_TOKEN", temperature=0.2, max_output_tokens=300, headers={"X-Team": "qa"})
    reply = session(agent).send("List the stores.")
    assert reply.kind is ReplyKind.SQL
    assert reply.sql == "SELECT store_name FROM stores"
    assert [(c.name, c.args, c.id) for c in reply.tool_calls] == [("run_sql", {"sql": "SELECT store_name FROM stores"}, "call_1")]
    assert (reply.usage.prompt, reply.usage.completion, reply.usage.total) == (12, 5, 17)
    assert reply.latency_s > 0 and reply.raw and "chat.completion" in reply.raw
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == "Bearer sekret" and request.headers["x-team"] == "qa"
    body = request.json()
    assert body["model"] == "test-model" and body["temperature"] == 0.2 and body["seed"] == 7 and body["max_tokens"] == 300
    assert [t["function"]["name"] for t in body["tools"]] == ["run_sql", "ask_user"]
    assert body["tools"][0]["type"] == "function" and body["tools"][0]["function"]["parameters"]["required"] == ["sql"]
    system, user = body["messages"]
    assert system["role"] == "system" and SCHEMA in system["content"] and "ask_user" in system["content"]
    assert "{schema}" not in system["content"] and "{knowledge}" not in system["content"]
    assert user == {"role": "user", "content": "List the stores."}
    description = agent.describe()
    assert description["model"] == "test-model" and description["clarification"] == "function_calling"
    assert description["header_names"] == ["X-Team"] and "sekret" not in json.dumps(description) and "qa" not in json.dumps(description)


def test_ask_user_is_a_clarification_and_the_answer_goes_back_as_its_tool_result(server, make_agent):
    server.push(completion(tool_calls=[call("ask_user", call_id="q1", question="Which shops do you mean?")]))
    server.push(completion(tool_calls=[call("run_sql", call_id="s1", sql="SELECT 1")]))
    chat = session(make_agent())
    first = chat.send("List the shops.")
    assert first.kind is ReplyKind.CLARIFICATION and first.text == "Which shops do you mean?"
    second = chat.send("All of them, every store.")
    assert second.kind is ReplyKind.SQL and second.sql == "SELECT 1"
    messages = server.requests[1].json()["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[1]["content"] == "List the shops."
    assert messages[2]["tool_calls"][0]["id"] == "q1"
    assert messages[3]["tool_call_id"] == "q1" and json.loads(messages[3]["content"]) == {"answer": "All of them, every store."}
    assert first.tool_calls[0].response == {"answer": "All of them, every store."}


def test_history_is_sent_on_the_follow_up_turn(server, make_agent):
    server.push(completion(tool_calls=[call("run_sql", call_id="s1", sql="SELECT store_name FROM stores")]))
    server.push(completion(tool_calls=[call("run_sql", call_id="s2", sql="SELECT store_name FROM stores LIMIT 2")]))
    chat = session(make_agent())
    chat.send("List the stores.")
    reply = chat.send("Now only the first two.")
    assert reply.sql == "SELECT store_name FROM stores LIMIT 2"
    messages = server.requests[1].json()["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]
    assert messages[1]["content"] == "List the stores."
    assert json.loads(messages[2]["tool_calls"][0]["function"]["arguments"]) == {"sql": "SELECT store_name FROM stores"}
    assert messages[3]["tool_call_id"] == "s1" and json.loads(messages[3]["content"])["status"] == "done"
    assert messages[4] == {"role": "user", "content": "Now only the first two."}


def test_several_tool_calls_last_run_sql_wins_and_sql_wins_over_a_question(server, make_agent):
    server.push(completion(tool_calls=[call("run_sql", "a", sql="SELECT 1"), call("ask_user", "b", question="Which year?"),
                                       call("run_sql", "c", sql="SELECT 2")]))
    server.push(completion("ok"))
    chat = session(make_agent())
    reply = chat.send("Count the orders.")
    assert reply.kind is ReplyKind.SQL and reply.sql == "SELECT 2"
    assert [c.id for c in reply.tool_calls] == ["a", "b", "c"]
    assert "Which year?" in reply.text
    chat.send("And per store?")
    tool_messages = [m for m in server.requests[1].json()["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["a", "b", "c"]  # every call gets a result


@pytest.mark.parametrize(
    ("content", "kind", "expected"),
    [
        ("Here it is:\n<sql>\nSELECT 1;\n</sql>", ReplyKind.SQL, "SELECT 1;"),
        ("<question>Which region do you mean?</question>", ReplyKind.CLARIFICATION, "Which region do you mean?"),
        ("```sql\nSELECT 3\n```", ReplyKind.SQL, "SELECT 3"),
        ("<think>maybe <sql>SELECT 0</sql></think>I cannot answer that from this database.", ReplyKind.ANSWER,
         "I cannot answer that from this database."),
    ],
)
def test_tagged_text(server, make_agent, content, kind, expected):
    server.push(completion(content))
    reply = session(make_agent(clarification="tagged_text")).send("Question?")
    assert reply.kind is kind
    assert (reply.sql if kind is ReplyKind.SQL else reply.text) == expected
    body = server.requests[0].json()
    assert "tools" not in body and "<sql>" in body["messages"][0]["content"]


def test_tagged_text_sql_wins_over_a_question(server, make_agent):
    server.push(completion("<question>Did you mean 2024?</question>\n<sql>SELECT 2024</sql>"))
    reply = session(make_agent(clarification="tagged_text")).send("Orders this year?")
    assert reply.kind is ReplyKind.SQL and reply.sql == "SELECT 2024" and reply.text == "Did you mean 2024?"


# --------------------------------------------------------------------------- failures


def test_429_then_success_is_retried_once(server, make_agent):
    server.push({"error": {"message": "rate limited"}}, status=429, headers={"Retry-After": "0"})
    server.push(completion(tool_calls=[call("run_sql", sql="SELECT 1")]))
    reply = session(make_agent()).send("Count.")
    assert reply.kind is ReplyKind.SQL and reply.sql == "SELECT 1"
    assert len(server.requests) == 2


def test_retries_run_out(server, make_agent):
    for _ in range(3):
        server.push({"error": {"message": "overloaded"}}, status=503)
    reply = session(make_agent()).send("Count.")
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "http_503" and "3 attempts" in reply.error
    assert len(server.requests) == 3


def test_500_is_an_error_without_retry(server, make_agent):
    server.push({"error": {"message": "boom"}}, status=500)
    reply = session(make_agent()).send("Count.")
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "http_500" and "boom" in reply.error
    assert len(server.requests) == 1


def test_400_is_an_error_without_retry(server, make_agent):
    server.push({"error": {"message": "tools are not supported"}}, status=400)
    reply = session(make_agent()).send("Count.")
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "http_400" and len(server.requests) == 1


@pytest.mark.parametrize("body", ["not json{", {"object": "chat.completion"}, {"choices": []}, [1, 2]])
def test_malformed_response_is_an_error_not_an_exception(server, make_agent, body):
    server.push(body)
    reply = session(make_agent()).send("Count.")
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "protocol"
    assert len(server.requests) == 1


def test_an_unusable_tool_call_gets_a_tool_error_and_the_model_tries_again(server, make_agent):
    bad = {"id": "x", "type": "function", "function": {"name": "run_sql", "arguments": "{not json"}}
    server.push(completion(tool_calls=[bad]))
    server.push(completion(tool_calls=[call("run_sql", sql="SELECT 1")]))
    reply = session(make_agent()).send("Count.")
    assert reply.kind is ReplyKind.SQL and reply.sql == "SELECT 1"
    first = reply.tool_calls[0]
    assert first.args["_raw"] == "{not json" and first.outcome == "error" and "not valid JSON" in first.response["error"]
    messages = server.requests[1].json()["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[2]["tool_calls"][0]["function"]["arguments"] == "{not json"  # the model's call, as it sent it
    assert messages[3]["tool_call_id"] == "x" and "not valid JSON" in json.loads(messages[3]["content"])["error"]


def test_a_model_that_keeps_sending_unusable_calls_ends_the_turn_and_the_session_goes_on(server, make_agent):
    for _ in range(3):  # the first reply and two more tries
        server.push(completion(tool_calls=[call("no_such_tool")]))
    server.push(completion(tool_calls=[call("run_sql", sql="SELECT 1")]))
    chat = session(make_agent())
    reply = chat.send("Count.")
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "tool_budget" and len(server.requests) == 3
    assert all(c.outcome == "error" and "unknown tool" in c.response["error"] for c in reply.tool_calls)
    assert chat.send("Count, please.").kind is ReplyKind.SQL
    # the failed turn is not part of the history
    assert [m["role"] for m in server.requests[3].json()["messages"]] == ["system", "user"]


def test_empty_reply_is_an_error(server, make_agent):
    server.push(completion(""))
    reply = session(make_agent()).send("Count.")
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "empty"


def test_timeout_is_a_timeout_error(server, make_agent):
    server.push(completion("late"), delay_s=1.0)
    reply = session(make_agent(timeout_s=0.2)).send("Count.")
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "timeout"
    assert len(server.requests) == 1


def test_connection_refused_is_retried_then_an_error(make_agent):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    reply = session(make_agent(base_url=f"http://127.0.0.1:{port}/v1")).send("Count.")
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "connection" and "3 attempts" in reply.error


# --------------------------------------------------------------------------- configuration


def test_missing_api_key_names_the_environment_variable(make_agent, monkeypatch):
    monkeypatch.delenv("NO_SUCH_TOKEN_VAR", raising=False)
    with pytest.raises(ConfigError, match="NO_SUCH_TOKEN_VAR"):
        make_agent(api_key_env="NO_SUCH_TOKEN_VAR")


def test_per_turn_session_is_not_sticky(make_agent):
    assert make_agent().sticky is True
    assert make_agent(session="per_turn").sticky is False


def test_knowledge_is_shown_only_when_asked_and_never_a_deleted_entry(server, make_agent):
    from evalbench.dataset import Ambiguity

    entries = {
        1: KnowledgeEntry(1, "Realized Order", "An order that generated revenue.", ("orders.status = 'completed'",)),
        2: KnowledgeEntry(2, "Big Store", "A store with more than {50} staff.", ()),
    }
    context = AgentContext(seed=1, schema=lambda d, db: SCHEMA, knowledge={"greenleaf": entries})
    item = make_item().model_copy(update={
        "external_knowledge": [1, 2],
        "ambiguities": [Ambiguity(term="big", sql_snippet="staff > 50", kind="knowledge", knowledge_id=2)],
    })
    for include in (True, False):
        server.push(completion("no"))
        agent = make_agent(context, include_knowledge=include)
        agent.open_session(new_conversation(item, seed=1, max_turns=5, patience=1, timeout_s=60)).send("Q")
    shown, hidden = (r.json()["messages"][0]["content"] for r in server.requests)
    assert "Realized Order" in shown and "orders.status = 'completed'" in shown and "Big Store" not in shown
    assert "Realized Order" not in hidden and "Domain knowledge" not in hidden


def test_custom_system_prompt_keeps_other_braces(server, make_agent, tmp_path):
    prompt = tmp_path / "p.txt"
    prompt.write_text("Schema:\n{schema}\nExample: SELECT '{a,b}'::text[];\n{knowledge}")
    server.push(completion("<sql>SELECT 1</sql>"))
    session(make_agent(system_prompt=prompt, clarification="tagged_text")).send("Q")
    system = server.requests[0].json()["messages"][0]["content"]
    assert system.startswith("Schema:\n" + SCHEMA) and "'{a,b}'" in system
    assert system.rstrip().endswith("</question>\nPut nothing but the statement or the question inside the tags.")


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow  # end to end: make test-slow (CI) runs it
def test_demo_run_end_to_end_against_a_fake_server(tmp_path, pgdata):
    from evalbench.config import load_run_config
    from evalbench.run import run

    def responder(request: Received) -> Scripted:
        return Scripted(200, completion(tool_calls=[call("run_sql", sql="SELECT 1")]))

    with FakeLLMServer(responder) as fake:
        config = load_run_config(
            ROOT / "configs" / "openai_compat_agent.yaml",
            model_config={"agent": "openai_compat", "base_url": fake.url + "/v1", "model": "fake", "retry": FAST_RETRY},
            reporting={"csv": {"output_directory": str(tmp_path)}},
            run_id="r",
        )
        result = run(config, progress=False)
        requests = list(fake.requests)
    records = [json.loads(line) for line in (result.run_dir / "conversations.jsonl").read_text().splitlines()]
    assert len(records) == 43 and len({r["item_id"] for r in records}) == 43
    assert all(r["outcome"] for r in records)
    assert result.summary["total_items"] == 43 and sum(result.summary["outcomes"].values()) == 43
    assert len(requests) >= 43
    system = requests[0].json()["messages"][0]["content"]
    assert "CREATE TABLE stores" in system
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["agent"]["agent"] == "openai_compat" and manifest["agent"]["model"] == "fake"
