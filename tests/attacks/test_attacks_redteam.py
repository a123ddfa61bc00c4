"""Variants of issue 24's attacks that broke the merged work, through the public interface: a
real ``evalbench run`` with a hostile agent over HTTP (:mod:`tests.attack_agent`, or a fake ADK
API server), on the embedded PostgreSQL (and the external one, ``external_pg``), DuckDB and
SQLite. What an outsider sees:

- **results nested deeper than Python goes** (a JSON document thousands of levels deep, built
  by agent SQL) no longer stop the whole run, and values nested past a few levels no longer
  hide their size from the byte cap (300 rows of a megabyte inside a nested document or list);
- **golden work beside the agent's is invisible through locks**: agent SQL (an answer or a
  ``run_sql`` tool call) polling ``pg_locks`` and the snapshot functions while golden SQL reads
  a table learns nothing of it;
- **reported token usage** that is negative, infinite, fractional or not a number neither
  lowers the tokens metric nor turns a usable reply into an ``agent_error``;
- **ADK events of any shape** (a tool response nested hundreds of levels deep, parts that are
  not objects, counts that are text) give every conversation an outcome, and the run goes on.
"""

from __future__ import annotations

import importlib.util
import json
import re
import secrets
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalbench.agents.adk import classify, pending_input
from evalbench.agents.config import ReplyConvention
from evalbench.backends.base import SandboxLimits
from evalbench.core.conversation import AgentReply
from evalbench.results import read_journal
from tests.attack_agent import AttackAgent, completion, item, write_run
from tests.attacks.test_attacks_files import _item as file_item
from tests.attacks.test_attacks_files import _run as file_run
from tests.attacks.test_attacks_pg_integrity import database, on, run, server  # noqa: F401  (fixtures)
from tests.attacks.test_attacks_sql import generated, phase, run_evalbench
from tests.fake_llm_server import FakeLLMServer, Received, Scripted

pytestmark = pytest.mark.slow  # whole runs per attack: CI runs them in `make test-slow`

MB = 1_000_000
CAP = 8 * MB


def _nested_json(levels: int) -> str:
    return f"(repeat('[', {levels}) || repeat(']', {levels}))"


def _wide(record: dict[str, Any], cap: int = CAP) -> None:
    """300 rows of a megabyte hidden inside nested values: cut at the byte cap like flat ones."""
    result = generated(record)
    assert record["outcome"] == "scored" and result["error"] is None, (record["outcome"], result.get("error"))
    assert result["truncated"] is True and 0 < result["row_count"] <= cap // MB, result["row_count"]


# ----------------------------------------------------------------------------- deep results

PG_DEEP = {
    "json_900": f"SELECT {_nested_json(900)}::json AS doc",
    "jsonb_3000": f"SELECT {_nested_json(3000)}::jsonb AS doc",
    "json_array_3000": f"SELECT ARRAY[{_nested_json(3000)}::json, '1'::json] AS docs",
    "json_in_a_tool_call": f"SELECT {_nested_json(950)}::json AS doc",
}
PG_WIDE = ("SELECT i, (repeat('{\"a\": ', 20) || repeat('[', 20) || '\"' || repeat('x', 1000000) || '\"' "
           "|| repeat(']', 20) || repeat('}', 20))::jsonb AS doc FROM generate_series(1, 300) AS i")


def test_results_nested_deeper_than_python_goes_do_not_stop_the_run(server: Any, database: tuple[str, Path],  # noqa: F811
                                                                   tmp_path: Path) -> None:
    name, _ = database
    count = "SELECT count(*) AS n FROM stores"
    items = [on(name, key, count) for key in PG_DEEP] + [on(name, "wide", count), on(name, "after", count)]
    result = run(server, database, tmp_path, items, PG_DEEP | {"wide": PG_WIDE, "after": count},
                 statement_timeout_s=20, execution={"max_result_bytes": CAP})
    assert result.code == 0, "one deep document stopped the run"
    assert sorted(result.order) == sorted(item["instance_id"] for item in items), "items were dropped"
    for key in PG_DEEP:
        record = result.records[key]
        assert record["outcome"] == "scored" and generated(record)["error"] is None, (key, record["error"])
        assert phase(record)["passed"] is False
    _wide(result.records["wide"])
    assert phase(result.records["after"])["passed"] is True


@pytest.mark.parametrize("name", ["duckdb"])
def test_a_file_engine_counts_what_nested_values_hold_against_the_byte_cap(tmp_path: Path, name: str) -> None:
    if importlib.util.find_spec("duckdb") is None:
        pytest.skip("duckdb is not installed (pip install 'evalbench[duckdb]')")
    nested = "[" * 12 + "repeat('x', 1000000)" + "]" * 12
    replies = {"wide": f"SELECT i, {nested} AS doc FROM range(300) t(i)",
               "struct": f"SELECT i, {{'a': {{'b': {{'c': {nested}}}}}}} AS doc FROM range(300) t(i)",
               "after": "SELECT count(*) FROM items"}
    count = "SELECT count(*) FROM items"
    items = [file_item(name, key, count) for key in replies]
    result = file_run(tmp_path, name, items, replies)
    assert result.code == 0 and sorted(result.order) == sorted(replies)
    for key in ("wide", "struct"):
        _wide(result.records[key], SandboxLimits(1, 1.0, 1).max_result_bytes)  # the default cap: 32 MiB
    assert phase(result.records["after"])["passed"] is True


# ----------------------------------------------------------------------------- locks of golden work

LOCK_SPY = """
SELECT coalesce(string_agg(DISTINCT seen, ','), 'nothing') AS seen
FROM generate_series(1, 25) AS g
CROSS JOIN LATERAL (SELECT pg_sleep(0.1) WHERE g > 0) AS w
CROSS JOIN LATERAL (SELECT 'SEE' || 'N:' || {seen} AS seen FROM {source} AND g > 0) AS a
"""
LOCK_SOURCES = {  # what a spy reads, and from where (a WHERE clause the poll's condition is added to)
    "spy_locks": ("l.relation::regclass::text", "pg_locks AS l WHERE l.pid <> pg_backend_pid() AND l.relation IS NOT NULL"),
    "spy_lock_status": ("s.relation::regclass::text",
                        "pg_lock_status() AS s WHERE s.pid <> pg_backend_pid() AND s.relation IS NOT NULL"),
    "spy_blocking": ("b.pids::text", "(SELECT pg_blocking_pids(p) AS pids FROM generate_series(1, 100000) AS p) AS b "
                     "WHERE cardinality(b.pids) > 0"),
    "spy_snapshot": ("pg_current_snapshot()::text || txid_current_snapshot()::text", "(SELECT 1) AS one WHERE TRUE"),
}


@pytest.mark.parametrize("as_a_tool", [False, True], ids=["answer", "run_sql_tool"])
def test_agent_sql_cannot_see_which_tables_golden_sql_beside_it_locks(server: Any, database: tuple[str, Path],  # noqa: F811
                                                                      tmp_path: Path, as_a_tool: bool) -> None:
    """Golden SQL reads ``notes`` for a few seconds; spies (the answer, or a ``run_sql`` tool
    call whose rows go back to the model) poll other sessions' locks and snapshots meanwhile."""
    name, _ = database
    spies = {key: LOCK_SPY.format(seen=seen, source=source) for key, (seen, source) in LOCK_SOURCES.items()}
    golden = "SELECT count(*) AS n FROM notes, pg_sleep(2.5)"
    items = [on(name, "slow_golden", golden)] + [on(name, key, "SELECT 'nothing' AS seen") for key in spies]
    tools = {"tools": ["run_sql"], "tool_limits": {"per_turn": 1, "per_conversation": 1}} if as_a_tool else None
    result = run(server, database, tmp_path, items, {"slow_golden": "SELECT 1 AS n"} | spies, sqlexec_runners=5,
                 max_in_flight=5, statement_timeout_s=8, model=tools)
    assert result.code == 0
    first: dict[str, float] = {}
    for key, when in result.agent.asked_at:
        first.setdefault(key, when)
    for key in spies:
        record = result.records[key]
        assert "SEEN:" not in json.dumps(record), f"{key} saw other sessions' locks: {generated(record).get('preview')}"
        assert first[key] < first["slow_golden"] - 1.0, "the spy ran while the golden SQL did"
        if not as_a_tool:
            assert "permission denied" in (generated(record)["error"] or ""), generated(record)
    assert not any("SEEN:" in json.dumps(request.json()) for request in result.agent.server.requests)


# ----------------------------------------------------------------------------- token usage

SQL = "SELECT count(*) AS n FROM stores"


def _with_usage(usage: Any) -> dict[str, Any]:
    body = completion(SQL)
    body["usage"] = usage
    return body


def _raw_usage(usage: str) -> bytes:
    return json.dumps(completion(SQL)).removesuffix("}").encode() + b', "usage": ' + usage.encode() + b"}"


USAGE = {
    "negative": _with_usage({"prompt_tokens": -1_000_000, "completion_tokens": -5, "total_tokens": -1_000_005}),
    "infinite": _raw_usage('{"prompt_tokens": Infinity, "completion_tokens": NaN, "total_tokens": -Infinity}'),
    "fractional": _with_usage({"prompt_tokens": 0.5, "completion_tokens": 1e300, "total_tokens": True}),
    "structured": _with_usage({"prompt_tokens": [1], "completion_tokens": {"n": 2}, "total_tokens": "many"}),
}


def test_reported_token_usage_cannot_lower_the_metrics_nor_fail_a_usable_reply(tmp_path: Path, demo_sandbox: Any) -> None:
    items = [item(key, SQL) for key in USAGE] + [item("honest", SQL)]
    result = run_evalbench(tmp_path, items, USAGE | {"honest": SQL}, scorers={"exec_match": {}, "tokens": {}})
    assert result.code == 0
    for key in USAGE:
        record = result.records[key]
        assert record["outcome"] == "scored" and phase(record)["passed"] is True, (key, record["error"])
        assert all(turn["reply"]["usage"] == {"prompt": 0, "completion": 0, "total": 0} for turn in record["turns"]), key
        assert phase(record)["scores"]["tokens"]["value"] == 0
    assert phase(result.records["honest"])["scores"]["tokens"]["value"] == 2


@pytest.mark.parametrize(("value", "count"), [(12, 12), ("12", 12), (12.0, 12), (-1, 0), (1.5, 0), (float("nan"), 0),
                                              (float("inf"), 0), (True, 0), (None, 0), ([3], 0), (10**13, 0), ("1e3", 0)])
def test_token_count(value: Any, count: int) -> None:
    from evalbench.core.conversation import TokenUsage, token_count

    assert token_count(value) == count
    assert TokenUsage.reported(value, value, value) == TokenUsage(count, count, count)


# ----------------------------------------------------------------------------- ADK events of any shape

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(
                        ["content", "parts", "text", "functionCall", "functionResponse", "id", "name", "args",
                         "response", "role", "usageMetadata", "promptTokenCount", "longRunningToolIds",
                         "errorCode", "invocationId", "thought", "result"]), inner, max_size=5), max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(events=st.lists(JSON, max_size=4))
def test_adk_events_of_any_shape_are_read_as_one_reply(events: list[Any]) -> None:
    for convention in ("auto", "text", "gda", "request_input"):
        reply = classify(events, ReplyConvention(convention=convention))
        assert isinstance(reply, AgentReply)
        assert min(reply.usage.prompt, reply.usage.completion, reply.usage.total) >= 0
    pending_input(events)


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


ADK_SQL_TEXT = {"text": "```sql\nSELECT count(*) AS n FROM stores\n```"}
ADK_EVENTS = {  # item -> the /run body
    "response_600": '[{"content": {"role": "user", "parts": [{"functionResponse": {"id": "a", "name": "t", "response": '
                    + _deep(600) + '}}]}}, {"content": {"role": "model", "parts": [' + json.dumps(ADK_SQL_TEXT) + "]}}]",
    "response_900": '[{"content": {"role": "user", "parts": [{"functionResponse": {"id": "a", "name": "t", "response": '
                    + '{"a": ' * 900 + "1" + "}" * 900 + '}}]}}, {"content": {"role": "model", "parts": ['
                    + json.dumps(ADK_SQL_TEXT) + "]}}]",
    "args_900": '[{"content": {"role": "model", "parts": [{"functionCall": {"id": "a", "name": "t", "args": {"x": '
                + _deep(900) + "}}}, " + json.dumps(ADK_SQL_TEXT) + "]}}]",
    "events_5000": _deep(5000),
    "usage_text": json.dumps([{"usageMetadata": {"promptTokenCount": "abc", "totalTokenCount": -9},
                               "content": {"role": "model", "parts": [ADK_SQL_TEXT]}}]),
    "parts_not_objects": json.dumps([{"content": {"role": "model", "parts": ["SELECT 1", 5, None]}},
                                     {"content": "x", "longRunningToolIds": [{"a": 1}]},
                                     {"content": {"role": "model", "parts": [ADK_SQL_TEXT]}}]),
    "after": json.dumps([{"content": {"role": "model", "parts": [ADK_SQL_TEXT]}}]),
}


def test_a_run_goes_on_whatever_shape_of_adk_events_comes_back(tmp_path: Path, demo_sandbox: Any) -> None:
    def respond(request: Received) -> Scripted:
        if not request.path.endswith("/run"):  # sessions
            return Scripted(200, {"id": f"s-{secrets.token_hex(4)}"})
        found = re.search(r"\[attack:([A-Za-z0-9_-]+)\]", request.body.decode())
        return Scripted(200, ADK_EVENTS[found.group(1)] if found else "[]")

    items = [item(key, SQL) for key in ADK_EVENTS]
    with FakeLLMServer(responder=respond) as adk, AttackAgent({}) as unused:
        path = write_run(tmp_path, items, unused)
        config = json.loads(path.read_text())
        config["model_config"] = {"agent": "adk", "adkapi_server_url": adk.url, "agent_id": "app",
                                  "retry": {"max_retries": 0}}
        path.write_text(json.dumps(config))
        from evalbench.cli import main

        code = main(["run", "--config", str(path), "--run-id", "adk", "--output-dir", str(tmp_path / "out"),
                     "--no-progress", "--no-preflight"])
    records = {r["item_id"]: r for r in read_journal(tmp_path / "out" / "adk")}
    assert code == 0 and sorted(records) == sorted(ADK_EVENTS), "a reply stopped the run or was dropped"
    for key in ("response_600", "response_900", "args_900", "usage_text", "parts_not_objects", "after"):
        assert records[key]["outcome"] == "scored" and phase(records[key])["passed"] is True, (key, records[key]["error"])
    assert records["events_5000"]["outcome"] == "agent_error"


# ----------------------------------------------------------------------------- a call the server does not stop

# ``&&`` of two arrays compares every pair without looking at the server's cancel flag: about 10 s
# here, whatever the statement timeout; libxml2's xpath over a huge document is another such call
UNSTOPPABLE = ("SELECT (SELECT array_agg(g) FROM generate_series(1, 60000) g) && "
               "(SELECT array_agg(-g) FROM generate_series(1, 60000) g) AS overlaps")


def test_a_call_the_server_does_not_stop_ends_at_the_budget_and_the_run_goes_on(
        server: Any, database: tuple[str, Path], tmp_path: Path) -> None:  # noqa: F811
    name, _ = database
    count = "SELECT count(*) AS n FROM stores"
    items = [on(name, "unstoppable", count), on(name, "in_a_script", count), on(name, "after", count)]
    replies = {"unstoppable": UNSTOPPABLE, "in_a_script": f"SELECT 1; {UNSTOPPABLE}", "after": count}
    try:
        result = run(server, database, tmp_path, items, replies, statement_timeout_s=1.0, sqlexec_runners=2,
                     max_in_flight=2)
        assert result.code == 0 and sorted(result.order) == sorted(replies)
        for key in ("unstoppable", "in_a_script"):
            record = result.records[key]
            assert record["outcome"] == "scored" and generated(record)["error_kind"] == "timeout", generated(record)
            assert generated(record)["elapsed_s"] < 6, generated(record)["elapsed_s"]  # 1 s budget, 2 s grace
        assert phase(result.records["after"])["passed"] is True
    finally:
        _wait_for_abandoned_backends(server, name)


def _wait_for_abandoned_backends(where: Any, name: str) -> None:
    """The server's backends go on until the call returns (then find no client): wait for them, so
    that the database can be dropped."""
    import time

    import psycopg

    with psycopg.connect(where.url("postgres"), autocommit=True) as conn:
        give_up = time.monotonic() + 120
        while time.monotonic() < give_up and conn.execute(  # the run's own connections are closed by now
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)).fetchone()[0]:  # type: ignore[index]
            time.sleep(0.5)
