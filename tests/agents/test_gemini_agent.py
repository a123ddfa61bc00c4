"""The gemini agent: the real google-genai SDK pointed (base_url) at a local fake Gemini API.

The SDK POSTs ``{base_url}/v1beta/models/{model}:generateContent`` with the key in the
``x-goog-api-key`` header; the fake answers with REST (camelCase) JSON.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from evalbench.agents import AgentContext, build_agent
from evalbench.agents.config import GeminiAgentConfig
from evalbench.core.conversation import ReplyKind
from evalbench.core.errors import ConfigError
from evalbench.run.stages import new_conversation
from tests.fake_llm_server import FakeLLMServer
from tests.helpers import make_item

SCHEMA = "CREATE TABLE stores (\n  store_id integer NOT NULL,\n  store_name text\n);"
FAST_RETRY = {"max_retries": 2, "backoff_s": 0.01, "max_backoff_s": 0.05}
MODEL = "gemini-test"
PATH = f"/v1beta/models/{MODEL}:generateContent"


def generated(*parts: dict[str, Any], usage: tuple[int, int, int] | None = (20, 6, 26), finish: str = "STOP") -> dict[str, Any]:
    body: dict[str, Any] = {"candidates": [{"content": {"role": "model", "parts": list(parts)}, "finishReason": finish, "index": 0}],
                            "modelVersion": MODEL}
    if usage:
        body["usageMetadata"] = {"promptTokenCount": usage[0], "candidatesTokenCount": usage[1], "totalTokenCount": usage[2]}
    return body


def fcall(name: str, **args: Any) -> dict[str, Any]:
    return {"functionCall": {"name": name, "args": args}}


def api_error(code: int, status: str, message: str = "error", details: list[Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status, "details": details or []}}


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


@pytest.fixture
def make_agent(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:
    monkeypatch.setenv("TEST_GEMINI_KEY", "test-key-123")
    for name in ("GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    agents: list[Any] = []

    def make(**options: Any) -> Any:
        settings: dict[str, Any] = {"agent": "gemini", "model": MODEL, "api_key_env": "TEST_GEMINI_KEY",
                                    "base_url": server.url, "retry": FAST_RETRY} | options
        agent = build_agent(GeminiAgentConfig(**settings), AgentContext(seed=11, schema=lambda dialect, database: SCHEMA))
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        agent.close()


def session(agent: Any) -> Any:
    return agent.open_session(new_conversation(make_item(), seed=1, max_turns=10, patience=3, timeout_s=60))


# --------------------------------------------------------------------------- replies


def test_run_sql_function_call_is_sql_and_the_request_is_complete(server, make_agent):
    server.push(generated(fcall("run_sql", sql="SELECT store_name FROM stores")))
    agent = make_agent(temperature=0.3, max_output_tokens=256)
    reply = session(agent).send("List the stores.")
    assert reply.kind is ReplyKind.SQL and reply.sql == "SELECT store_name FROM stores"
    assert [(c.name, c.args) for c in reply.tool_calls] == [("run_sql", {"sql": "SELECT store_name FROM stores"})]
    assert (reply.usage.prompt, reply.usage.completion, reply.usage.total) == (20, 6, 26)
    assert reply.latency_s > 0 and '"functionCall"' in reply.raw
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", PATH)
    assert request.headers["x-goog-api-key"] == "test-key-123"
    body = request.json()
    assert body["contents"] == [{"role": "user", "parts": [{"text": "List the stores."}]}]
    system = body["systemInstruction"]["parts"][0]["text"]
    assert SCHEMA in system and "ask_user" in system and "{schema}" not in system
    declarations = body["tools"][0]["functionDeclarations"]
    assert [d["name"] for d in declarations] == ["run_sql", "ask_user"]
    assert declarations[0]["parameters"]["required"] == ["sql"]
    assert body["generationConfig"] == {"temperature": 0.3, "seed": 11, "maxOutputTokens": 256}
    description = agent.describe()
    assert description["model"] == MODEL and description["base_url"] == server.url and description["seed"] == 11
    assert description["clarification"] == "function_calling" and "test-key-123" not in json.dumps(description)


def test_ask_user_is_a_clarification_answered_by_a_function_response(server, make_agent):
    server.push(generated(fcall("ask_user", question="Which shops: open or all?")))
    server.push(generated(fcall("run_sql", sql="SELECT 1")))
    chat = session(make_agent())
    first = chat.send("List the shops.")
    assert first.kind is ReplyKind.CLARIFICATION and first.text == "Which shops: open or all?"
    second = chat.send("All of them.")
    assert second.kind is ReplyKind.SQL and second.sql == "SELECT 1"
    contents = server.requests[1].json()["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert contents[0]["parts"] == [{"text": "List the shops."}]
    assert contents[1]["parts"] == [{"functionCall": {"name": "ask_user", "args": {"question": "Which shops: open or all?"}}}]
    assert contents[2]["parts"] == [{"functionResponse": {"name": "ask_user", "response": {"answer": "All of them."}}}]


def test_history_is_sent_on_the_second_turn_with_thought_signatures(server, make_agent):
    signed = fcall("run_sql", sql="SELECT store_name FROM stores") | {"thoughtSignature": "c2lnbmF0dXJl"}
    server.push(generated({"text": "thinking...", "thought": True}, signed))
    server.push(generated(fcall("run_sql", sql="SELECT store_name FROM stores LIMIT 2")))
    chat = session(make_agent())
    first = chat.send("List the stores.")
    assert first.kind is ReplyKind.SQL and first.text == ""  # thought parts are not the reply's text
    assert chat.send("Now only the first two.").sql == "SELECT store_name FROM stores LIMIT 2"
    contents = server.requests[1].json()["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert contents[1]["parts"][1]["thoughtSignature"] == "c2lnbmF0dXJl"  # the model's content goes back unchanged
    response, text = contents[2]["parts"]
    assert response["functionResponse"]["name"] == "run_sql" and response["functionResponse"]["response"]["status"] == "done"
    assert text == {"text": "Now only the first two."}


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        ("<sql>SELECT count(*) FROM stores</sql>", ReplyKind.SQL, "SELECT count(*) FROM stores"),
        ("<question>Which year?</question>", ReplyKind.CLARIFICATION, "Which year?"),
        ("```sql\nSELECT 2\n```", ReplyKind.SQL, "SELECT 2"),
        ("There is no such data.", ReplyKind.ANSWER, "There is no such data."),
    ],
)
def test_tagged_text(server, make_agent, text, kind, expected):
    server.push(generated({"text": text}))
    reply = session(make_agent(clarification="tagged_text")).send("Question?")
    assert reply.kind is kind and (reply.sql if kind is ReplyKind.SQL else reply.text) == expected
    body = server.requests[0].json()
    assert "tools" not in body and "<question>" in body["systemInstruction"]["parts"][0]["text"]


def test_sql_wins_over_a_question_and_the_last_run_sql_wins(server, make_agent):
    server.push(generated(fcall("run_sql", sql="SELECT 1"), fcall("ask_user", question="Which year?"), fcall("run_sql", sql="SELECT 2")))
    reply = session(make_agent()).send("Orders?")
    assert reply.kind is ReplyKind.SQL and reply.sql == "SELECT 2" and reply.text == "Which year?"
    assert [c.name for c in reply.tool_calls] == ["run_sql", "ask_user", "run_sql"]


# --------------------------------------------------------------------------- failures


def test_429_then_success_is_retried_once(server, make_agent):
    server.push(api_error(429, "RESOURCE_EXHAUSTED", "quota"), status=429, headers={"Retry-After": "0"})
    server.push(generated(fcall("run_sql", sql="SELECT 1")))
    reply = session(make_agent()).send("Count.")
    assert reply.kind is ReplyKind.SQL and reply.sql == "SELECT 1"
    assert len(server.requests) == 2  # the SDK did not retry on its own, we did once


def test_429_retry_delay_from_the_error_body(server, make_agent):
    retry_info = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.01s"}]
    server.push(api_error(429, "RESOURCE_EXHAUSTED", "quota", retry_info), status=429)
    server.push(generated(fcall("run_sql", sql="SELECT 1")))
    assert session(make_agent()).send("Count.").kind is ReplyKind.SQL
    assert len(server.requests) == 2


def test_retries_run_out(server, make_agent):
    for _ in range(3):
        server.push(api_error(503, "UNAVAILABLE", "overloaded"), status=503)
    reply = session(make_agent()).send("Count.")
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "http_503" and "overloaded" in reply.error
    assert len(server.requests) == 3


def test_500_is_an_error_without_retry(server, make_agent):
    server.push(api_error(500, "INTERNAL", "boom"), status=500)
    reply = session(make_agent()).send("Count.")
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "http_500" and "boom" in reply.error
    assert len(server.requests) == 1


def test_400_is_an_error_without_retry(server, make_agent):
    server.push(api_error(400, "INVALID_ARGUMENT", "bad request"), status=400)
    reply = session(make_agent()).send("Count.")
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "http_400" and len(server.requests) == 1


def test_malformed_json_is_an_error_not_an_exception(server, make_agent):
    server.push("{not json")
    reply = session(make_agent()).send("Count.")
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "protocol"
    assert len(server.requests) == 1


def test_no_candidates_and_blocked_prompts_are_errors(server, make_agent):
    server.push({"modelVersion": MODEL})
    server.push({"promptFeedback": {"blockReason": "SAFETY"}})
    chat = session(make_agent())
    assert chat.send("Count.").error_kind == "protocol"
    blocked = chat.send("Count.")
    assert blocked.kind is ReplyKind.ERROR and blocked.error_kind == "blocked" and "SAFETY" in blocked.error


def test_empty_candidate_is_an_error_naming_the_finish_reason(server, make_agent):
    server.push({"candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS"}]})
    server.push(generated(fcall("run_sql", sql="SELECT 1")))
    chat = session(make_agent())
    reply = chat.send("Count.")
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "empty" and "MAX_TOKENS" in reply.error
    assert chat.send("Count.").kind is ReplyKind.SQL
    assert len(server.requests[1].json()["contents"]) == 1  # the failed turn is not in the history


def test_timeout_is_a_timeout_error(server, make_agent):
    server.push(generated({"text": "late"}), delay_s=1.0)
    reply = session(make_agent(timeout_s=0.3)).send("Count.")  # the SDK takes milliseconds
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "timeout"
    assert len(server.requests) == 1


# --------------------------------------------------------------------------- configuration


def test_missing_api_key_names_the_environment_variable(make_agent, monkeypatch):
    monkeypatch.delenv("NO_SUCH_GEMINI_KEY", raising=False)
    with pytest.raises(ConfigError, match="NO_SUCH_GEMINI_KEY"):
        make_agent(api_key_env="NO_SUCH_GEMINI_KEY")


def test_vertex_without_a_project_is_a_config_error(make_agent, monkeypatch):
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    with pytest.raises(ConfigError, match="GOOGLE_CLOUD_PROJECT"):
        make_agent(vertexai=True)


def test_per_turn_session_is_not_sticky(make_agent):
    assert make_agent(session="per_turn").sticky is False


def test_connection_refused_is_retried_then_an_error(make_agent):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    reply = session(make_agent(base_url=f"http://127.0.0.1:{port}")).send("Count.")
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "connection" and "3 attempts" in reply.error


def test_discovery_tools_are_declared_and_their_results_go_back_as_function_responses(server, make_agent):
    server.push(generated(fcall("sample_rows", table="stores", limit=2)))
    server.push(generated(fcall("run_sql", sql="SELECT store_name FROM stores")))
    reply = session(make_agent(tools=["sample_rows"], tool_limits={"max_rows": 1})).send("List the stores.")
    assert reply.kind is ReplyKind.SQL and [(c.name, c.outcome) for c in reply.tool_calls] == [("sample_rows", "error"),
                                                                                               ("run_sql", None)]
    declarations = server.requests[0].json()["tools"][0]["functionDeclarations"]
    assert [d["name"] for d in declarations] == ["run_sql", "ask_user", "sample_rows"]
    assert declarations[2]["parameters"]["properties"]["limit"]["type"] == "INTEGER"
    assert "discovery tools (sample_rows)" in server.requests[0].json()["systemInstruction"]["parts"][0]["text"]
    second = server.requests[1].json()["contents"]
    assert [c["role"] for c in second] == ["user", "model", "user"]
    response = second[2]["parts"][0]["functionResponse"]
    # no database behind this context: the tool says so, the model goes on
    assert response["name"] == "sample_rows" and "no table" in response["response"]["error"]
