"""The offline ADK test agents (tests/adk_apps) behind a real ``adk api_server``, spoken to with
plain httpx: sessions, /run and /run_sse events, the GDA query tool (convention a), the
long-running ``adk_request_input`` round trip (convention b), sticky sessions, errors."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from tests.conftest import DEMO

STORES_SQL = "SELECT store_name FROM stores ORDER BY store_id"
FIRST_TWO_SQL = "SELECT store_name FROM stores ORDER BY store_id LIMIT 2"
COUNT_SQL = "SELECT count(*) FROM stores"
DONT_KNOW = "I don't know what you are referring to."
GDA_TOOL = "cloud_gda_query_tool_alloydb"
USER = "tester"


@pytest.fixture
def client(adk_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=adk_server, timeout=30.0) as http:
        yield http


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def new_session(client: httpx.Client, app: str) -> str:
    response = client.post(f"/apps/{app}/users/{USER}/sessions")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["appName"] == app and body["userId"] == USER and body["events"] == []
    return body["id"]


def run_body(app: str, session_id: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"appName": app, "userId": USER, "sessionId": session_id, "newMessage": {"role": "user", "parts": parts}}


def run(client: httpx.Client, app: str, session_id: str, text: str | None = None, *, parts=None) -> list[dict[str, Any]]:
    response = client.post("/run", json=run_body(app, session_id, parts or [{"text": text}]))
    assert response.status_code == 200, response.text
    events = response.json()
    assert isinstance(events, list) and events
    return events


def parts_of(events: list[dict[str, Any]], key: str) -> list[Any]:
    return [p[key] for e in events for p in (e.get("content") or {}).get("parts", []) if key in p]


def tool_payloads(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [json.loads(r["response"]["result"]) for r in parts_of(events, "functionResponse") if r["name"] == GDA_TOOL]


def final_text(events: list[dict[str, Any]]) -> str:
    texts = parts_of(events, "text")
    assert texts, events
    return texts[-1]


def fenced_sql(text: str) -> list[str]:
    return [block.strip() for block in re.findall(r"```sql\n(.*?)```", text, flags=re.S)]


def demo_items() -> list[dict[str, Any]]:
    with open(DEMO / "greenleaf.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def ambiguous_item_with_follow_up() -> dict[str, Any]:
    return next(i for i in demo_items() if i["amb_user_query"] != i["query"] and i.get("follow_up"))


def store_names(db_url: str, limit: int | None = None) -> list[str]:
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(STORES_SQL + (f" LIMIT {limit}" if limit else "")).fetchall()
    return [r[0] for r in rows]


# ---------------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------------


def test_list_apps(client: httpx.Client) -> None:
    assert client.get("/list-apps").json() == ["bird_like_agent", "gda_agent", "input_agent", "mcp_agent", "state_agent"]


def test_gda_tool_call_runs_sql_on_the_demo_database(client: httpx.Client, adk_db_url: str) -> None:
    session = new_session(client, "gda_agent")
    events = run(client, "gda_agent", session, "List the stores.")
    assert [e["author"] for e in events] == ["gda_agent"] * 3
    call_event, response_event, answer_event = events
    (call,) = parts_of([call_event], "functionCall")
    assert call["name"] == GDA_TOOL and call["args"] == {"question": "List the stores."}
    assert call["id"].startswith("adk-")
    assert call_event["content"]["role"] == "model"
    assert call_event.get("longRunningToolIds", []) == []
    (response,) = parts_of([response_event], "functionResponse")
    assert response["id"] == call["id"] and response["name"] == GDA_TOOL
    assert response_event["content"]["role"] == "user"
    assert set(response["response"]) == {"result"} and isinstance(response["response"]["result"], str)
    payload = json.loads(response["response"]["result"])
    assert payload["generatedQuery"] == STORES_SQL
    result = payload["queryResult"]
    names = store_names(adk_db_url)
    assert result["columns"] == [{"name": "store_name", "type": "varchar"}]
    assert [row["values"][0]["value"] for row in result["rows"]] == names
    assert result["totalRowCount"] == str(len(names)) and result["partialResult"] is False
    assert final_text([answer_event]) == payload["naturalLanguageAnswer"]
    assert names[0] in payload["naturalLanguageAnswer"]
    for event in (call_event, answer_event):  # model responses carry token usage
        usage = event["usageMetadata"]
        assert usage["promptTokenCount"] > 0 and usage["candidatesTokenCount"] > 0
        assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]
    assert "usageMetadata" not in response_event
    assert all(e["invocationId"] == call_event["invocationId"] for e in events)


def test_gda_session_is_sticky_and_a_new_session_is_not(client: httpx.Client, adk_db_url: str) -> None:
    session = new_session(client, "gda_agent")
    run(client, "gda_agent", session, "List the stores.")
    events = run(client, "gda_agent", session, "Now only the first two.")
    (payload,) = tool_payloads(events)
    assert payload["generatedQuery"] == FIRST_TWO_SQL
    assert [r["values"][0]["value"] for r in payload["queryResult"]["rows"]] == store_names(adk_db_url, 2)
    (call,) = parts_of(events, "functionCall")
    assert call["args"]["question"] == "Now only the first two.\nEarlier question: List the stores."

    other = new_session(client, "gda_agent")
    events = run(client, "gda_agent", other, "Now only the first two.")
    assert parts_of(events, "functionCall") == [] and final_text(events) == DONT_KNOW
    assert len(events) == 1 and "usageMetadata" in events[0]


def test_gda_disambiguation_then_answer(client: httpx.Client) -> None:
    session = new_session(client, "gda_agent")
    events = run(client, "gda_agent", session, "List the shops.")
    (payload,) = tool_payloads(events)
    assert payload == {"disambiguationQuestion": ["Which shops do you mean?"]}
    assert final_text(events) == "Which shops do you mean?"
    events = run(client, "gda_agent", session, "The stores, please.")
    (call,) = parts_of(events, "functionCall")
    assert call["args"]["question"] == "List the shops.\nClarification: The stores, please."
    (payload,) = tool_payloads(events)
    assert payload["generatedQuery"] == STORES_SQL


def test_gda_twice_makes_two_tool_calls_in_one_turn(client: httpx.Client) -> None:
    session = new_session(client, "gda_agent")
    events = run(client, "gda_agent", session, "TWICE: list the stores")
    calls = parts_of(events, "functionCall")
    assert [c["args"]["question"] for c in calls] == ["How many stores are there?", "TWICE: list the stores"]
    assert [p["generatedQuery"] for p in tool_payloads(events)] == [COUNT_SQL, STORES_SQL]
    assert [r["id"] for r in parts_of(events, "functionResponse")] == [c["id"] for c in calls]
    assert len(events) == 5


def test_gda_demo_item_with_clarification_and_follow_up(client: httpx.Client) -> None:
    item = ambiguous_item_with_follow_up()
    session = new_session(client, "gda_agent")
    (payload,) = tool_payloads(run(client, "gda_agent", session, item["amb_user_query"]))
    assert payload["disambiguationQuestion"][0].startswith("Could you clarify what you mean by")
    (payload,) = tool_payloads(run(client, "gda_agent", session, "I mean what the full question says."))
    assert payload["generatedQuery"] == item["sol_sql"][0]
    assert "queryExecutionError" not in payload["queryResult"], payload  # the golden SQL really ran
    (payload,) = tool_payloads(run(client, "gda_agent", session, item["follow_up"]["query"]))
    assert payload["generatedQuery"] == item["follow_up"]["sol_sql"][0]


def test_input_agent_request_input_round_trip(client: httpx.Client) -> None:
    session = new_session(client, "input_agent")
    events = run(client, "input_agent", session, "List the shops.")
    assert len(events) == 1
    (event,) = events
    (call,) = parts_of(events, "functionCall")
    assert call["name"] == "adk_request_input" and call["args"] == {"message": "Which shops do you mean?"}
    assert event["longRunningToolIds"] == [call["id"]]
    assert event["author"] == "input_agent" and "usageMetadata" in event

    answer = {"functionResponse": {"id": call["id"], "name": "adk_request_input", "response": {"result": "The stores."}}}
    events = run(client, "input_agent", session, parts=[answer])
    assert parts_of(events, "functionCall") == [] and parts_of(events, "functionResponse") == []
    assert fenced_sql(final_text(events)) == [STORES_SQL]
    assert events[-1]["invocationId"] == event["invocationId"]  # the paused invocation resumes

    events = run(client, "input_agent", session, "Now only the first two.")  # sticky here too
    assert fenced_sql(final_text(events)) == [FIRST_TWO_SQL]


def test_input_agent_plain_answers(client: httpx.Client) -> None:
    session = new_session(client, "input_agent")
    events = run(client, "input_agent", session, "List the stores.")
    assert len(events) == 1 and "longRunningToolIds" not in events[0]
    assert fenced_sql(final_text(events)) == [STORES_SQL]
    events = run(client, "input_agent", session, "TWICE, the stores again")
    assert fenced_sql(final_text(events)) == [COUNT_SQL, STORES_SQL]
    events = run(client, "input_agent", new_session(client, "input_agent"), "Now only the first two.")
    assert final_text(events) == DONT_KNOW


def test_input_agent_demo_item(client: httpx.Client) -> None:
    item = ambiguous_item_with_follow_up()
    session = new_session(client, "input_agent")
    (call,) = parts_of(run(client, "input_agent", session, item["amb_user_query"]), "functionCall")
    answer = {"functionResponse": {"id": call["id"], "name": "adk_request_input", "response": {"result": item["query"]}}}
    assert fenced_sql(final_text(run(client, "input_agent", session, parts=[answer]))) == [item["sol_sql"][0].strip()]
    events = run(client, "input_agent", session, item["follow_up"]["query"])
    assert fenced_sql(final_text(events)) == [item["follow_up"]["sol_sql"][0].strip()]
    # the follow-up alone, in a fresh session, is not understood
    events = run(client, "input_agent", new_session(client, "input_agent"), item["follow_up"]["query"])
    assert final_text(events) == DONT_KNOW
    # the unambiguous wording is answered at once
    events = run(client, "input_agent", new_session(client, "input_agent"), item["query"])
    assert fenced_sql(final_text(events)) == [item["sol_sql"][0].strip()]


def test_crash_is_http_500_and_the_session_survives(adk_server: str) -> None:
    with httpx.Client(base_url=adk_server, timeout=30.0) as http:
        session = new_session(http, "gda_agent")
        response = http.post("/run", json=run_body("gda_agent", session, [{"text": "CRASH now"}]))
    assert response.status_code == 500
    assert response.text == "Internal Server Error"
    assert response.headers["content-type"].startswith("text/plain")
    # uvicorn closes that connection after the error: go on with a fresh one
    with httpx.Client(base_url=adk_server, timeout=30.0) as http:
        events = run(http, "gda_agent", session, "List the stores.")
        assert tool_payloads(events)[0]["generatedQuery"] == STORES_SQL
        stored = http.get(f"/apps/gda_agent/users/{USER}/sessions/{session}").json()["events"]
    assert stored[0]["content"]["parts"] == [{"text": "CRASH now"}]


def test_slow_answers_after_five_seconds(client: httpx.Client) -> None:
    session = new_session(client, "input_agent")
    started = time.monotonic()
    events = run(client, "input_agent", session, "SLOW: list the stores")
    assert time.monotonic() - started >= 5.0
    assert fenced_sql(final_text(events)) == [STORES_SQL]


def test_run_sse_streams_one_data_line_per_event(client: httpx.Client) -> None:
    session = new_session(client, "gda_agent")
    body = run_body("gda_agent", session, [{"text": "List the stores."}])
    with client.stream("POST", "/run_sse", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = response.read().decode()
    chunks = [c for c in raw.split("\n\n") if c.strip()]
    assert all(c.startswith("data: ") and "\n" not in c for c in chunks)
    events = [json.loads(c[len("data: "):]) for c in chunks]
    assert [list(e["content"]["parts"][0]) for e in events] == [["functionCall"], ["functionResponse"], ["text"]]
    assert tool_payloads(events)[0]["generatedQuery"] == STORES_SQL
    # a crash mid-stream: HTTP 200, an error event, then a bare {"error": ...} line
    body = run_body("gda_agent", session, [{"text": "CRASH"}])
    with client.stream("POST", "/run_sse", json=body) as response:
        assert response.status_code == 200
        raw = response.read().decode()
    events = [json.loads(c[len("data: "):]) for c in raw.split("\n\n") if c.strip()]
    assert events[0]["errorCode"] == "RuntimeError" and "CRASH" in events[0]["errorMessage"]
    assert events[-1]["error"].startswith("RuntimeError: ")


def test_unknown_and_deleted_sessions(client: httpx.Client) -> None:
    response = client.post("/run", json=run_body("gda_agent", f"missing-{uuid.uuid4()}", [{"text": "List the stores."}]))
    assert response.status_code == 404 and response.json()["detail"].startswith("Session not found")
    session = new_session(client, "gda_agent")
    run(client, "gda_agent", session, "List the stores.")
    path = f"/apps/gda_agent/users/{USER}/sessions/{session}"
    assert client.get(path).status_code == 200
    deleted = client.delete(path)
    assert deleted.status_code == 200 and deleted.json() is None
    assert client.get(path).status_code == 404
    assert client.delete(path).status_code == 200  # deleting again is not an error
    response = client.post("/run", json=run_body("gda_agent", session, [{"text": "List the stores."}]))
    assert response.status_code == 404
