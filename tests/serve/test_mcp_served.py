"""The harness's MCP server, reached by an agent that brings its own tools: a JSON endpoint (the
generic ``http`` agent) whose server calls the tools at ``{mcp_url}`` with the official ``mcp``
client while it works on a turn, asks its questions through ``ask_user``, and replies in words
only, so that its answer is what it ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalbench.cli import main
from tests.agents.test_http_agent import AMBIGUOUS, GOLDEN, Endpoint, records
from tests.conftest import ROOT
from tests.serve.mcp_client import call_tools, tool_names

MANAGEMENT = ["greenleaf_41", "greenleaf_42", "greenleaf_43"]
CHOSEN = sorted({"greenleaf_1", "greenleaf_2", *AMBIGUOUS[:3], *MANAGEMENT})
REQUEST = {"message": "{message}", "item": "{item_id}", "phase": "{phase}", "turn": "{turn}", "mcp": "{mcp_url}"}
SERVE = {"address": "127.0.0.1:0"}


def config_file(tmp_path: Path, url: str, serve: dict[str, object] = SERVE, **run: object) -> Path:
    model = {"agent": "http", "url": url, "request": REQUEST, "reply": {"text": "text", "sql": "sql"},
             "retry": {"max_retries": 0}}
    text = (ROOT / "configs" / "quickstart.yaml").read_text()
    text = text.replace("../datasets", str(ROOT / "datasets")).replace("../results", str(tmp_path / "results"))
    text = text.replace("model_config: agents/noisy.yaml", f"model_config: {json.dumps(model)}")
    text += f"\nserve: {json.dumps(serve)}\n" + "".join(f"{k}: {json.dumps(v)}\n" for k, v in run.items())
    path = tmp_path / "served.yaml"
    path.write_text(text)
    return path


class ToolUser:
    """Per turn: looks at the tables, asks on an ambiguous item's first turn, runs the golden SQL
    through run_sql, and answers "done" (no SQL). ``seen`` keeps every tool result."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str, int], list[object]] = {}
        self.urls: list[str] = []

    def __call__(self, body: dict[str, object]) -> tuple[int, object]:
        item, phase, turn, url = (str(body[k]) for k in ("item", "phase", "turn", "mcp"))
        self.urls.append(url)
        calls: list[tuple[str, dict[str, object]]] = [("list_tables", {})]
        if turn == "1" and item in AMBIGUOUS:
            calls.append(("ask_user", {"question": "Which one do you mean exactly?"}))
        calls.append(("run_sql", {"sql": GOLDEN[(item, phase)]}))
        done = call_tools(url, calls)
        self.seen[(item, phase, int(turn))] = [(c.name, c.is_error, c.value) for c in done]
        return 200, {"text": "done"}


def test_an_agent_using_the_served_tools_is_judged_on_what_it_ran(tmp_path, pgdata):
    agent = ToolUser()
    server = Endpoint(agent)
    try:
        code = main(["run", "--config", str(config_file(tmp_path, server.url)), "--run-id", "r", "--no-progress",
                     "--item-ids", *CHOSEN])
    finally:
        server.close()
    run_dir = tmp_path / "results" / "r"
    assert code == 0, (run_dir / "summary.md").read_text()
    done = {r["item_id"]: r for r in records(run_dir)}
    assert set(done) == set(CHOSEN) and all(r["outcome"] == "scored" for r in done.values()), done
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["success"]["main"]["rate"] == 1.0  # management writes judged by their test cases
    # a question asked through ask_user mid-turn is a clarification turn of its own, answered by the vuser
    for item in AMBIGUOUS[:3]:
        record = done[item]
        assert record["phases"][0]["clarifications"] == 1
        question, answer = record["turns"][0], record["turns"][1]
        assert question["reply"]["kind"] == "clarification" and question["reply"]["text"] == "Which one do you mean exactly?"
        assert question["vuser"]["text"] and answer["user_role"] == "vuser" and answer["user_text"] == question["vuser"]["text"]
        assert [c["name"] for c in question["reply"]["tool_calls"]] == ["list_tables", "ask_user"]
        assert agent.seen[(item, "main", 1)][1][2] == {"answer": question["vuser"]["text"]}
    assert summary["conversation"]["vuser_replies"] >= 3
    # every served call is journaled with its outcome, as the built-in agents' tool calls are
    calls = done["greenleaf_1"]["turns"][0]["reply"]["tool_calls"]
    assert [(c["name"], c["outcome"]) for c in calls] == [("list_tables", "ok"), ("run_sql", "ok")]
    assert done["greenleaf_1"]["phases"][0]["sql"] == GOLDEN[("greenleaf_1", "main")]
    # a management task's writes happen in a disposable copy: the next conversation sees none of them
    (state,) = [rows for name, _, rows in agent.seen[("greenleaf_42", "main", 1)] if name == "run_sql"]
    assert state["columns"] == [] or "rows" in state  # the INSERT ran
    assert done["greenleaf_42"]["phases"][0]["sql"].startswith("INSERT INTO suppliers")



def test_explain_shows_the_served_calls_and_the_question_asked_through_a_tool(tmp_path, pgdata, capsys):
    server = Endpoint(ToolUser())
    try:
        main(["run", "--config", str(config_file(tmp_path, server.url)), "--run-id", "r", "--no-progress",
              "--item-ids", AMBIGUOUS[0], "--no-preflight"])
    finally:
        server.close()
    capsys.readouterr()
    assert main(["explain", str(tmp_path / "results" / "r"), AMBIGUOUS[0]]) == 0
    shown = capsys.readouterr().out
    assert "agent → clarification" in shown and "Which one do you mean exactly?" in shown
    assert "tool call list_tables({}) [ok" in shown and "tool call run_sql(" in shown and "tool call ask_user(" in shown
    assert "Turn 2 · vuser:" in shown


def test_tools_refuse_writes_in_a_question_other_databases_and_ended_conversations(tmp_path, pgdata):
    urls: list[str] = []
    results: dict[str, list[object]] = {}

    def attacker(body: dict[str, object]) -> tuple[int, object]:
        url, item = str(body["mcp"]), str(body["item"])
        if urls:  # the second conversation tries the first one's token, which died with it
            results["late"] = call_tools(urls[0], [("list_tables", {})])  # type: ignore[assignment]
        urls.append(url)
        results[item] = call_tools(url, [  # type: ignore[assignment]
            ("run_sql", {"sql": "DELETE FROM stores"}),
            ("run_sql", {"sql": "SELECT 1", "database": "postgres"}),
            ("run_sql", {"sql": "SELECT count(*) FROM stores"}),
        ])
        return 200, {"text": "done"}

    server = Endpoint(attacker)
    try:
        main(["run", "--config", str(config_file(tmp_path, server.url, max_in_flight=1)), "--run-id", "r",
              "--no-progress", "--item-ids", "greenleaf_1", "greenleaf_2", "--no-preflight"])
    finally:
        server.close()
    write, other_db, read = results["greenleaf_1"]  # type: ignore[misc]
    assert write.is_error, write.text
    assert other_db.is_error and "no other database is reachable" in other_db.text
    assert not read.is_error and read.value["rows"][0][0] > 0
    record = {r["item_id"]: r for r in records(tmp_path / "results" / "r")}["greenleaf_1"]
    outcomes = [c["outcome"] for c in record["turns"][0]["reply"]["tool_calls"]]
    assert outcomes == ["error", "refused", "ok"]
    assert record["phases"][0]["sql"] == "SELECT count(*) FROM stores"
    (late,) = results["late"]
    assert late.is_error and "no conversation has this token" in late.text  # type: ignore[attr-defined]
    assert urls[0] != urls[1]


def test_a_management_tasks_writes_stay_in_its_conversation(tmp_path, pgdata):
    counts: dict[str, list[object]] = {}
    insert = "INSERT INTO suppliers (supplier_name, country, lead_time_days) VALUES ('Fernhollow Farms', 'Canada', 9)"
    count = "SELECT count(*) FROM suppliers WHERE supplier_name = 'Fernhollow Farms'"

    def writer(body: dict[str, object]) -> tuple[int, object]:
        item = str(body["item"])
        calls = [("run_sql", {"sql": insert}), ("run_sql", {"sql": count})] if item == "greenleaf_41" else [("run_sql", {"sql": count})]
        counts[item] = [c.value for c in call_tools(str(body["mcp"]), calls)]
        return 200, {"text": "done"}

    server = Endpoint(writer)
    try:
        main(["run", "--config", str(config_file(tmp_path, server.url, max_in_flight=1)), "--run-id", "r",
              "--no-progress", "--item-ids", "greenleaf_41", "greenleaf_42", "--no-preflight"])
    finally:
        server.close()
    assert counts["greenleaf_41"][1]["rows"] == [[1]]  # the conversation sees its own write
    assert counts["greenleaf_42"][0]["rows"] == [[0]]  # the next one does not: it was rolled back
    record = {r["item_id"]: r for r in records(tmp_path / "results" / "r")}["greenleaf_41"]
    assert record["phases"][0]["sql"] == insert  # its writes are its answer (its reads are not)


def test_the_tools_offered_are_the_configured_ones(tmp_path, pgdata):
    names: list[list[str]] = []

    def lister(body: dict[str, object]) -> tuple[int, object]:
        names.append(tool_names(str(body["mcp"])))
        return 200, {"text": "done"}

    server = Endpoint(lister)
    serve = {"tools": ["list_tables", "run_sql"]}
    try:
        main(["run", "--config", str(config_file(tmp_path, server.url, serve)), "--run-id", "r", "--no-progress",
              "--item-ids", "greenleaf_1", "--no-preflight"])
    finally:
        server.close()
    assert names and sorted(names[0]) == ["list_tables", "run_sql"]


def test_a_lent_login_reads_during_its_conversation_and_dies_with_it(tmp_path, pgdata):
    import psycopg

    seen: dict[str, object] = {}

    def connecting(body: dict[str, object]) -> tuple[int, object]:
        url = str(body["db"])
        seen["url"] = url
        with psycopg.connect(url, autocommit=True) as conn:
            seen["count"] = conn.execute("SELECT count(*) FROM stores").fetchone()
            try:
                conn.execute("INSERT INTO stores (store_name) VALUES ('x')")
            except psycopg.Error as exc:
                seen["write"] = type(exc).__name__
        return 200, {"text": "done", "sql": "SELECT count(*) FROM stores"}

    server = Endpoint(connecting)
    request = REQUEST | {"db": "{db_url}"}
    path = config_file(tmp_path, server.url, {"db_logins": True})
    path.write_text(path.read_text().replace(json.dumps(REQUEST), json.dumps(request)))
    try:
        code = main(["run", "--config", str(path), "--run-id", "r", "--no-progress", "--item-ids", "greenleaf_1",
                     "--no-preflight"])
    finally:
        server.close()
    assert code in (0, 1) and seen["count"][0] > 0 and seen["write"], seen  # type: ignore[index]
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(str(seen["url"]), connect_timeout=5).close()
    (record,) = records(tmp_path / "results" / "r")
    assert str(seen["url"]).split("@")[0].split(":")[-1] not in json.dumps(record)  # the password is not journaled


def test_a_template_naming_a_served_name_needs_serve(tmp_path):
    path = config_file(tmp_path, "http://127.0.0.1:9/x")
    path.write_text(path.read_text().split("\nserve:")[0] + "\n")
    assert main(["check", "--config", str(path)]) == 2


def test_an_address_in_use_or_shared_by_workers_is_a_config_error_naming_it(tmp_path, pgdata, capsys):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        path = config_file(tmp_path, "http://127.0.0.1:9/x", {"address": address})
        assert main(["check", "--config", str(path)]) in (2, 3)
        out = capsys.readouterr()
        assert f"cannot serve the agent's tools on {address}" in out.out + out.err, out
    path = config_file(tmp_path, "http://127.0.0.1:9/x", {"address": "127.0.0.1:6123"})
    assert main(["run", "--config", str(path), "--workers", "2", "--no-progress", "--no-preflight"]) == 2
    assert "a fixed port is one process's" in capsys.readouterr().err


@pytest.mark.slow  # a statement runs into the 10 s statement timeout: make test-slow (CI) runs it
def test_slow_huge_and_unauthenticated_calls_are_bounded(tmp_path, pgdata):
    call = call_tools

    results: dict[str, object] = {}

    def attacker(body: dict[str, object]) -> tuple[int, object]:
        url = str(body["mcp"])
        bare = url.replace("/c/", "/x/").split("/x/")[0] + "/mcp"  # the shared endpoint, without the token
        results["bare"] = call(bare, [("list_tables", {})])
        results["calls"] = call(url, [
            ("run_sql", {"sql": "SELECT pg_sleep(30)"}),  # past the statement timeout
            ("run_sql", {"sql": "SELECT '" + "x" * 70_000 + "'"}),  # over the SQL size limit
            ("sample_rows", {"table": "stores; DROP TABLE stores"}),
            ("search_knowledge", {"query": "greenhouse", "limit": 10**9}),
        ])
        return 200, {"text": "done"}

    server = Endpoint(attacker)
    try:
        main(["run", "--config", str(config_file(tmp_path, server.url, conversation_timeout_s=20)), "--run-id", "r",
              "--no-progress", "--item-ids", "greenleaf_1", "--no-preflight"])
    finally:
        server.close()
    (bare,) = results["bare"]  # type: ignore[misc]
    assert bare.is_error and "no conversation has this token" in bare.text
    slow, huge, injected, greedy = results["calls"]  # type: ignore[misc]
    assert slow.is_error and huge.is_error and injected.is_error and "no table" in injected.text
    assert not greedy.is_error and len(greedy.value["results"]) <= 5  # capped at tool_limits.max_results
    (record,) = records(tmp_path / "results" / "r")
    assert [c["outcome"] for c in record["turns"][0]["reply"]["tool_calls"]] == ["error", "error", "error", "ok"]
