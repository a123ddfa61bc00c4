"""The adk adapter's pieces that need no ADK: reply classification (every convention and the
edge cases docs/agents.md defines) and the retry rules, against a local HTTP server that
answers with scripted statuses."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from evalbench.agents import AgentContext
from evalbench.agents.adk import AdkAgent, classify, parse_sse, pending_input
from evalbench.agents.config import AdkAgentConfig, ReplyConvention
from evalbench.core.conversation import ReplyKind
from tests.helpers import make_item

AUTO = ReplyConvention()


def model(*parts, **extra):
    return {"author": "agent", "invocationId": "inv-1", "content": {"role": "model", "parts": list(parts)}, **extra}


def gda_response(result, call_id="c1"):
    # ADK puts function responses in content with role "user"
    return {"author": "agent", "invocationId": "inv-1", "content": {"role": "user", "parts": [
        {"functionResponse": {"id": call_id, "name": "cloud_gda_query_tool_alloydb", "response": {"result": result}}}]}}


def gda_call(call_id="c1"):
    return model({"functionCall": {"id": call_id, "name": "cloud_gda_query_tool_alloydb", "args": {"question": "q"}}})


CASES = [
    ("gda sql", [gda_call(), gda_response(json.dumps({"generatedQuery": "SELECT 1"})), model({"text": "Here you go."})],
     AUTO, ReplyKind.SQL, "SELECT 1", "Here you go."),
    ("gda question (list)", [gda_call(), gda_response(json.dumps({"disambiguationQuestion": ["Which shops?"]}))],
     AUTO, ReplyKind.CLARIFICATION, None, "Which shops?"),
    ("gda both: sql wins", [gda_call(), gda_response(json.dumps({"generatedQuery": "SELECT 2", "disambiguationQuestion": "Sure?"}))],
     AUTO, ReplyKind.SQL, "SELECT 2", None),
    ("gda result as a dict", [gda_response({"generatedQuery": "SELECT 3"})], AUTO, ReplyKind.SQL, "SELECT 3", None),
    ("gda result not JSON", [gda_response("not json")], AUTO, ReplyKind.ERROR, None, None),
    ("gda twice: the last decides", [gda_response(json.dumps({"disambiguationQuestion": "Which?"}), "a"),
                                     gda_response(json.dumps({"generatedQuery": "SELECT 4"}), "b")],
     AUTO, ReplyKind.SQL, "SELECT 4", None),
    ("request_input", [model({"functionCall": {"id": "r1", "name": "adk_request_input", "args": {"message": "Which year?"}}},
                             longRunningToolIds=["r1"])],
     AUTO, ReplyKind.CLARIFICATION, None, "Which year?"),
    ("request_input not long-running is no question", [model({"functionCall": {"id": "r1", "name": "adk_request_input", "args": {"message": "x"}}})],
     ReplyConvention(convention="request_input"), ReplyKind.ANSWER, None, None),
    ("sql tool, last call wins", [model({"functionCall": {"id": "s1", "name": "run_sql", "args": {"query": "SELECT 5"}}},
                                        {"functionCall": {"id": "s2", "name": "run_sql", "args": {"query": "SELECT 6"}}})],
     ReplyConvention(sql_tool="run_sql", sql_arg="query"), ReplyKind.SQL, "SELECT 6", None),
    ("fenced sql in text", [model({"text": "Sure:\n```sql\nSELECT 7;\n```"})], AUTO, ReplyKind.SQL, "SELECT 7;", None),
    ("last fenced block wins", [model({"text": "```sql\nSELECT 8\n```\nor\n```sql\nSELECT 9\n```"})], AUTO, ReplyKind.SQL, "SELECT 9", None),
    ("a question in text", [model({"text": "Do you mean this year or last year?"})], AUTO, ReplyKind.CLARIFICATION, None, None),
    ("sql and a question: sql wins", [model({"text": "```sql\nSELECT 10\n```\nShould I also sort it?"})], AUTO, ReplyKind.SQL, "SELECT 10", None),
    ("plain answer", [model({"text": "There are five stores."})], AUTO, ReplyKind.ANSWER, None, "There are five stores."),
    ("thoughts are not text", [model({"text": "thinking?", "thought": True}, {"text": "Five."})], AUTO, ReplyKind.ANSWER, None, "Five."),
    ("no events", [], AUTO, ReplyKind.ERROR, None, None),
    ("events without content", [{"author": "agent"}, model()], AUTO, ReplyKind.ERROR, None, None),
    ("error event", [{"errorCode": "MALFORMED_FUNCTION_CALL", "errorMessage": "bad"}], AUTO, ReplyKind.ERROR, None, None),
    ("not a list", {"detail": "x"}, AUTO, ReplyKind.ERROR, None, None),
    ("user echo ignored", [{"content": {"role": "user", "parts": [{"text": "```sql\nSELECT 1\n```"}]}}, model({"text": "No idea."})],
     AUTO, ReplyKind.ANSWER, None, "No idea."),
    ("text convention ignores gda", [gda_response(json.dumps({"generatedQuery": "SELECT 1"})), model({"text": "Done."})],
     ReplyConvention(convention="text"), ReplyKind.ANSWER, None, "Done."),
]


@pytest.mark.parametrize("name, events, convention, kind, sql, text", CASES, ids=[c[0] for c in CASES])
def test_classify(name, events, convention, kind, sql, text):
    reply = classify(events, convention)
    assert reply.kind is kind, reply
    if sql is not None:
        assert reply.sql == sql
    if text is not None:
        assert reply.text == text


def test_classify_records_every_tool_call_and_usage():
    events = [
        gda_call("a"),
        {**gda_response(json.dumps({"generatedQuery": "SELECT 1"}), "a"), "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 3, "totalTokenCount": 13}},
        {**model({"text": "ok"}), "usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 4, "totalTokenCount": 24}},
    ]
    reply = classify(events, AUTO)
    assert [(c.name, c.id, c.args) for c in reply.tool_calls] == [("cloud_gda_query_tool_alloydb", "a", {"question": "q"})]
    assert reply.tool_calls[0].response == {"result": json.dumps({"generatedQuery": "SELECT 1"})}
    assert (reply.usage.prompt, reply.usage.completion, reply.usage.total) == (30, 7, 37)


def test_pending_input_and_sse():
    events = [model({"functionCall": {"id": "r1", "name": "adk_request_input", "args": {"message": "?"}}}, longRunningToolIds=["r1"])]
    pending = pending_input(events)
    assert pending is not None and (pending.call_id, pending.invocation_id) == ("r1", "inv-1")
    answered = [*events, {"content": {"role": "user", "parts": [{"functionResponse": {"id": "r1", "name": "adk_request_input"}}]}}]
    assert pending_input(answered) is None
    body = "data: " + json.dumps(events[0]) + "\n\n" + "data: " + json.dumps(model({"text": "x"})) + "\n\n"
    assert [e["content"]["parts"][0] for e in parse_sse(body)] == [events[0]["content"]["parts"][0], {"text": "x"}]


# --------------------------------------------------------------------------- retries


class Script:
    """Scripted answers of the fake server: (status, headers, body, delay_s) per request."""

    def __init__(self):
        self.responses: list[tuple[int, dict, object, float]] = []
        self.requests: list[tuple[str, str, dict]] = []


class JsonHandler(BaseHTTPRequestHandler):
    """A fake server's handler: ``answer`` handles every POST and DELETE."""

    def answer(self) -> None:
        raise NotImplementedError

    def do_POST(self) -> None:
        self.answer()

    do_DELETE = do_POST

    def read_json(self) -> object:
        length = int(self.headers.get("content-length") or 0)
        return json.loads(self.rfile.read(length) or b"null")

    def send_json(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_server():
    script = Script()

    class Handler(JsonHandler):
        def answer(self):
            body = self.read_json()
            script.requests.append((self.command, self.path, body))
            if self.path.endswith("/sessions") and self.command == "POST":
                status, headers, payload, delay = 200, {}, {"id": f"s{len(script.requests)}"}, 0.0
            elif self.command == "DELETE":
                status, headers, payload, delay = 200, {}, None, 0.0
            else:
                status, headers, payload, delay = script.responses.pop(0)
            time.sleep(delay)
            self.send_json(status, payload, headers)

    with serve(Handler) as url:
        yield url, script


@contextlib.contextmanager
def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on a free local port, in a thread; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def make_agent(base_url, **overrides):
    config = AdkAgentConfig(agent="adk", base_url=base_url, app_name="app",
                            retry={"max_retries": 2, "backoff_s": 0.01, "max_backoff_s": 0.05}, **overrides)
    return AdkAgent(config, AgentContext(seed=1))


class Conv:
    item = make_item()
    patience = 3
    served: ClassVar[dict[str, str]] = {}


SQL_EVENTS = [model({"text": "```sql\nSELECT 1\n```"})]


def run_calls(script):
    return [r for r in script.requests if r[1] == "/run"]


def test_429_and_503_are_retried_honouring_retry_after(fake_server):
    url, script = fake_server
    script.responses = [(429, {"Retry-After": "0"}, {"error": "slow down"}, 0), (503, {}, "busy", 0), (200, {}, SQL_EVENTS, 0)]
    agent = make_agent(url)
    session = agent.open_session(Conv())
    reply = session.send("How many stores?")
    assert reply.kind is ReplyKind.SQL and reply.sql == "SELECT 1"
    assert len(run_calls(script)) == 3
    session.close()
    agent.close()
    assert script.requests[-1][0] == "DELETE"


def test_http_500_is_never_resent(fake_server):
    url, script = fake_server
    script.responses = [(500, {}, {"detail": "agent raised ValueError"}, 0), (200, {}, SQL_EVENTS, 0)]
    agent = make_agent(url)
    reply = agent.open_session(Conv()).send("q")
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "http_500"
    assert "agent raised ValueError" in reply.error
    assert len(run_calls(script)) == 1
    agent.close()


def test_read_timeout_is_a_timeout_and_not_resent(fake_server):
    url, script = fake_server
    script.responses = [(200, {}, SQL_EVENTS, 1.0), (200, {}, SQL_EVENTS, 0)]
    agent = make_agent(url, read_timeout_s=0.2)
    reply = agent.open_session(Conv()).send("q")
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "timeout"
    assert len(run_calls(script)) == 1
    agent.close()


def test_retries_run_out(fake_server):
    url, script = fake_server
    script.responses = [(503, {}, "busy", 0)] * 3
    agent = make_agent(url)
    reply = agent.open_session(Conv()).send("q")
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "http_503"
    assert len(run_calls(script)) == 3  # the first try and max_retries=2
    agent.close()


def test_connection_refused_is_retried_then_fails():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    agent = make_agent(f"http://127.0.0.1:{port}")
    started = time.monotonic()
    with pytest.raises(Exception, match="cannot connect"):
        agent.open_session(Conv())
    assert time.monotonic() - started < 5
    agent.close()


def test_headers_are_sent_but_not_described(fake_server, monkeypatch):
    url, script = fake_server
    script.responses = [(200, {}, SQL_EVENTS, 0)]
    agent = make_agent(url, headers={"Authorization": "Bearer s3cret"})
    agent.open_session(Conv()).send("q")
    assert "s3cret" not in json.dumps(agent.describe())
    assert agent.describe()["header_names"] == ["Authorization"]
    agent.close()


def test_request_input_answer_goes_back_as_a_function_response(fake_server):
    url, script = fake_server
    ask = [model({"functionCall": {"id": "r9", "name": "adk_request_input", "args": {"message": "Which shops?"}}}, longRunningToolIds=["r9"])]
    script.responses = [(200, {}, ask, 0), (200, {}, SQL_EVENTS, 0)]
    agent = make_agent(url)
    session = agent.open_session(Conv())
    assert session.send("List the shops.").kind is ReplyKind.CLARIFICATION
    assert session.send("All of them.").kind is ReplyKind.SQL
    second = run_calls(script)[1][2]
    assert second["newMessage"]["parts"] == [
        {"functionResponse": {"id": "r9", "name": "adk_request_input", "response": {"result": "All of them."}}}
    ]
    assert second["invocationId"] == "inv-1" and second["sessionId"] == run_calls(script)[0][2]["sessionId"]
    agent.close()


def test_an_older_api_server_that_stores_the_whole_body_as_state_gets_the_bare_state():
    """Before CreateSessionRequest, POST .../sessions read the whole body as the state (so
    {"state": S} became state {"state": S}); POST .../sessions/{id} takes S as the bare body in
    every version. The client notices the wrapped state and makes the session again that way."""
    sessions: dict[str, dict] = {}
    calls: list[tuple[str, str]] = []

    class OldAdk(JsonHandler):
        def answer(self):
            body = self.read_json()
            calls.append((self.command, self.path))
            session_id = self.path.rsplit("/", 1)[1]
            if self.command == "POST":
                session_id = f"s{len(sessions)}" if session_id == "sessions" else session_id
                sessions[session_id] = body if isinstance(body, dict) else {}
                payload: object = {"id": session_id, "state": sessions[session_id]}
            else:
                sessions.pop(session_id, None)
                payload = None
            self.send_json(200, payload)

    with serve(OldAdk) as url:
        session = make_agent(url).open_session(Conv())
        assert sessions == {session.session_id: {"database": "greenleaf", "dialect": "postgres"}}
        assert [c[0] for c in calls] == ["POST", "DELETE", "POST"] and calls[1][1].endswith("/s0")
        # a state that has a "state" key of its own is never taken for a wrapped one
        make_agent(url, session_state={"state": "{database}"}).open_session(Conv())
        assert calls[-1] == ("POST", "/apps/app/users/evalbench/sessions")
