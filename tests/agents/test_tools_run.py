"""Acceptance test of the discovery tools (issue 16): the openai_compat agent, against a local
fake model server that behaves like a tool-using model, calls describe_table and
search_knowledge in a whole run on the demo database; the calls appear in the journal,
summary.json, report.html and ``evalbench explain``; a writing run_sql is refused by the sandbox.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import psycopg

from evalbench.cli import main
from evalbench.results.journal.lines import phase_passed
from evalbench.results.journal.reader import read_journal
from tests.adk_apps.evalbench_offline_llm import resolve
from tests.conftest import DEMO
from tests.fake_llm_server import FakeLLMServer, Received, Scripted
from tests.fake_llm_server import chat_completion as completion

# Unambiguous questions (amb_user_query == query) without a follow-up: the golden SQL answers them.
ITEMS = ["greenleaf_2", "greenleaf_3", "greenleaf_6"]
DISCOVERY = ["describe_table", "search_knowledge"]
WRITE = "DELETE FROM stores"


def golden(question: str) -> str:
    decision = resolve(question, [], None)
    assert decision.kind == "sql", (question, decision)
    return decision.sql


class ToolUsingModel:
    """A deterministic "model": explores with describe_table and search_knowledge, then answers
    with the golden SQL through run_sql. With ``writes`` (run_sql listed in ``tools``, so its
    rows come back) it first tries a DELETE, then runs the golden SQL, then ends the turn in text."""

    def __init__(self, writes: bool = False) -> None:
        self.writes = writes
        self.tool_results: list[dict[str, Any]] = []  # the tool results the harness sent back, once each

    def __call__(self, request: Received) -> Scripted:
        messages = request.json()["messages"]
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        question = messages[users[0]]["content"].strip()  # the item's question
        sql = golden(question)
        since = messages[users[-1] + 1:]  # this turn's model replies and tool results so far
        tail = len(messages)
        while tail and messages[tail - 1]["role"] == "tool":  # the results of the previous reply's calls
            tail -= 1
        self.tool_results.extend(json.loads(m["content"]) for m in messages[tail:])
        replies = sum(m["role"] == "assistant" for m in since)
        if len(users) > 1 and replies == 0:  # a later user message (a clarification answer): answer again
            return Scripted(200, completion(calls=[("run_sql", {"sql": sql})]))
        if replies == 0:  # the question: explore first
            table = re.search(r"\bFROM\s+(\w+)", sql, re.IGNORECASE).group(1)
            return Scripted(200, completion(calls=[("describe_table", {"table": table}),
                                                   ("search_knowledge", {"query": question})]))
        if not self.writes:
            return Scripted(200, completion(calls=[("run_sql", {"sql": sql})]))
        script = [("run_sql", {"sql": WRITE}), ("run_sql", {"sql": sql})]
        if replies <= len(script):
            return Scripted(200, completion(calls=[script[replies - 1]]))
        return Scripted(200, completion(content="Done: the last query answers your question."))


def write_config(path: Path, server: FakeLLMServer, tools: list[str]) -> Path:
    model = {"agent": "openai_compat", "base_url": server.url + "/v1", "model": "fake-tool-model",
             "retry": {"max_retries": 0}, "tools": tools, "tool_limits": {"per_turn": 6}}
    path.write_text(
        f"dataset_config: {DEMO / 'greenleaf.jsonl'}\n"
        "dataset_format: bird-interact\n"
        f"setup_directory: {DEMO / 'setup'}\n"
        f"knowledge_directory: {DEMO / 'knowledge'}\n"
        "dialects: [postgres]\n"
        f"model_config: {json.dumps(model)}\n"
        "vuser_model_config: {vuser: rules, patience: 3}\n"
        "scorers: {exec_match: {}, executable: {}, turn_count: {}}\n"
        f"subset: {{item_ids: {json.dumps(ITEMS)}}}\n"
        "runners: {sqlgen_runners: 3}\n"
        "execution: {statement_timeout_s: 10, max_rows: 10000}\n"
        "seed: 42\n"
        f"reporting: {{csv: {{output_directory: {path.parent}}}}}\n"
    )
    return path


def run_with_tools(tmp_path: Path, run_id: str, tools: list[str], model: ToolUsingModel) -> tuple[Path, list[dict]]:
    with FakeLLMServer(responder=model) as server:
        config = write_config(tmp_path / f"{run_id}.yaml", server, tools)
        code = main(["run", "--config", str(config), "--output-dir", str(tmp_path), "--run-id", run_id, "--no-progress"])
    assert code == 0
    run_dir = tmp_path / run_id
    records = {r["item_id"]: r for r in read_journal(run_dir)}
    assert sorted(records) == sorted(ITEMS)
    return run_dir, [records[i] for i in ITEMS]


def tool_calls(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for t in record["turns"] for c in ((t.get("reply") or {}).get("tool_calls") or [])]


def report_data(html: str) -> Any:
    """The JSON report.html embeds (its records) for its script."""
    found = re.search(r'<script type="application/json" id="evalbench-data">(.*?)</script>', html, re.DOTALL)
    assert found, "report.html embeds no data"
    return json.loads(found.group(1))


def walk(value: Any) -> list[dict[str, Any]]:
    """Every object inside ``value``."""
    if isinstance(value, dict):
        return [value] + [d for v in value.values() for d in walk(v)]
    if isinstance(value, list):
        return [d for v in value for d in walk(v)]
    return []


def passed_exec_match(record: dict[str, Any]) -> bool:
    main_phase = record["phases"][0]
    return main_phase["scores"]["exec_match"]["passed"] is True and phase_passed(main_phase) is True


def stores_count(pgdata: Path) -> int:
    from evalbench.backends.postgres.embedded import embedded_url

    with psycopg.connect(embedded_url(pgdata, "greenleaf"), autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM stores").fetchone()[0]


def test_discovery_calls_appear_in_the_journal_summary_report_and_explain(tmp_path, pgdata, capsys):
    run_dir, records = run_with_tools(tmp_path, "explore", DISCOVERY, ToolUsingModel())
    for record in records:
        assert passed_exec_match(record), record["item_id"]
        calls = tool_calls(record)
        ran = [c for c in calls if c.get("outcome") is not None]
        assert [c["name"] for c in ran] == DISCOVERY, record["item_id"]
        for call in ran:
            assert call["outcome"] == "ok" and call["latency_s"] >= 0 and call["result_bytes"] > 0, call
            assert call["response"] and "error" not in call["response"]
        assert record["tools"] == {"calls": 2, "errors": 0, "budget": 0}
        described = ran[0]["response"]
        assert described["table"] == ran[0]["args"]["table"] and described["columns"]
        assert ran[1]["args"]["query"] and ran[1]["response"]["results"]
        answer = [c for c in calls if c["name"] == "run_sql"]
        assert len(answer) == 1 and "outcome" not in answer[0]  # the answer is judged, not run as a tool

    summary = json.loads((run_dir / "summary.json").read_text())
    tools = summary["conversation"]["tools"]
    assert tools["calls"] == 2 * len(ITEMS) and tools["errors"] == 0 and tools["conversations_with_calls"] == len(ITEMS)
    assert summary["scorers"]["exec_match"]["main"]["rate"] == 1.0

    report = (run_dir / "report.html").read_text()
    assert "describe_table" in report and "search_knowledge" in report
    embedded = [c for c in walk(report_data(report)) if c.get("name") in DISCOVERY and "outcome" in c]
    assert len(embedded) == 2 * len(ITEMS)  # the records' tool calls, as the report's script shows them
    assert all(c["outcome"] == "ok" and "latency_s" in c and c["result_bytes"] > 0 for c in embedded)

    capsys.readouterr()
    assert main(["explain", str(run_dir), ITEMS[0]]) == 0
    explained = capsys.readouterr().out
    assert "tool call describe_table" in explained and "tool call search_knowledge" in explained
    assert "[ok," in explained


def test_a_writing_run_sql_is_refused_by_the_sandbox(tmp_path, pgdata, demo_sandbox, capsys):
    before = stores_count(pgdata)
    model = ToolUsingModel(writes=True)
    run_dir, records = run_with_tools(tmp_path, "writes", [*DISCOVERY, "run_sql"], model)
    assert stores_count(pgdata) == before > 0
    refused = [r for r in model.tool_results if r.get("error_kind")]
    assert len(refused) == len(ITEMS) and all(r["error_kind"] == "forbidden" for r in refused)  # what the model saw
    for record in records:
        assert passed_exec_match(record), record["item_id"]
        ran = [c for c in tool_calls(record) if c.get("outcome") is not None]
        assert [c["name"] for c in ran] == [*DISCOVERY, "run_sql", "run_sql"], record["item_id"]
        delete, answer = ran[2], ran[3]
        assert delete["args"] == {"sql": WRITE} and delete["outcome"] == "error"
        assert delete["response"]["error_kind"] == "forbidden"
        assert answer["outcome"] == "ok" and answer["response"]["rows"]
        assert record["turns"][0]["reply"]["sql"] == answer["args"]["sql"]  # the last run_sql is the answer
        assert record["tools"] == {"calls": 4, "errors": 1, "budget": 0}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["conversation"]["tools"]["errors"] == len(ITEMS)
    capsys.readouterr()
    assert main(["explain", str(run_dir), ITEMS[0]]) == 0
    explained = capsys.readouterr().out
    assert f'tool call run_sql({{"sql": "{WRITE}"}}) [error,' in explained and "forbidden" in explained
