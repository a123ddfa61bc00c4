"""The discovery tools (evalbench.agents.tools) on the demo database behind a real sandbox, and
the openai_compat agent using them against a local fake model server."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalbench.agents import AgentContext, build_agent
from evalbench.agents.config import OpenAICompatAgentConfig, ToolLimits
from evalbench.agents.knowledge_index import Document, KnowledgeIndex
from evalbench.agents.tools import ToolKit
from evalbench.core.conversation import ReplyKind, ToolCall
from evalbench.core.items import Ambiguity
from evalbench.dataset.column_meanings import load_column_meanings
from evalbench.dataset.knowledge import load_knowledge
from evalbench.run.catalogs import QueryCatalog
from evalbench.run.stages import new_conversation
from tests.conftest import DEMO
from tests.fake_llm_server import FakeLLMServer, Scripted
from tests.fake_llm_server import chat_completion as completion
from tests.helpers import make_item

KNOWLEDGE = load_knowledge(DEMO / "knowledge")
MEANINGS = load_column_meanings(DEMO / "knowledge")


@pytest.fixture(scope="module")
def context(demo_sandbox) -> AgentContext:
    catalog = QueryCatalog()
    catalog.register("postgres", "greenleaf", demo_sandbox)
    return AgentContext(seed=1, knowledge=KNOWLEDGE, query=catalog, execute=catalog.execute, tables=catalog.tables,
                        column_meanings=MEANINGS)


def toolbox(context: AgentContext, *names: str, item: Any = None, **limits: Any):
    kit = ToolKit(names or ("list_tables", "describe_table", "sample_rows", "search_knowledge", "run_sql"),
                  ToolLimits(**limits), context)
    return kit.session(item or make_item())


def run(box: Any, name: str, **args: Any) -> tuple[dict[str, Any], ToolCall]:
    call = ToolCall(name=name, args=args, id="c1")
    return box.run(call), call


def admin_rows(demo_sandbox: Any, sql: str) -> list[tuple[Any, ...]]:
    result = demo_sandbox.execute(sql, mode="read")
    assert result.error is None, result.error
    return result.rows


def test_list_and_describe_tables_match_the_database(context, demo_sandbox):
    box = toolbox(context)
    listed, call = run(box, "list_tables")
    assert call.outcome == "ok" and call.result_bytes == len(json.dumps(listed, ensure_ascii=False).encode())
    names = sorted(r[0] for r in admin_rows(demo_sandbox, "SELECT table_name FROM information_schema.tables "
                                                          "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"))
    assert sorted(t["table"] for t in listed["tables"]) == names
    for entry in listed["tables"]:
        assert entry["rows"] == admin_rows(demo_sandbox, f'SELECT count(*) FROM "{entry["table"]}"')[0][0]
    described, _ = run(box, "describe_table", table="STORES")  # names are matched case-insensitively
    columns = admin_rows(demo_sandbox, "SELECT column_name, data_type FROM information_schema.columns "
                                       "WHERE table_name = 'stores' ORDER BY ordinal_position")
    assert [(c["name"], c["type"]) for c in described["columns"]] == [tuple(c) for c in columns]
    manager = next(c for c in described["columns"] if c["name"] == "manager_name")
    assert manager["description"] == MEANINGS["greenleaf"][("stores", "manager_name")]  # the dataset's column meaning
    missing, call = run(box, "describe_table", table="stores; DROP TABLE stores")
    assert call.outcome == "error" and "no table" in missing["error"] and "stores" in missing["error"]


def test_sample_rows_is_capped_and_never_runs_a_name_it_was_given(context):
    box = toolbox(context, max_rows=3)
    sample, call = run(box, "sample_rows", table="customers", limit=50)
    assert call.outcome == "ok" and len(sample["rows"]) == 3 and sample["columns"][0] == "customer_id"
    injected, call = run(box, "sample_rows", table='customers" ; DELETE FROM customers; --')
    assert call.outcome == "error" and "no table" in injected["error"]
    bad, call = run(box, "sample_rows", table="customers", limit="many")
    assert call.outcome == "error" and "whole number" in bad["error"]


def test_a_writing_run_sql_is_refused_by_the_sandbox(context, demo_sandbox):
    box = toolbox(context)
    before = admin_rows(demo_sandbox, "SELECT count(*) FROM stores")[0][0]
    for sql in ("DELETE FROM stores", "SELECT 1; DROP TABLE stores", "UPDATE stores SET city = 'x' RETURNING *",
                "CREATE TABLE t_owned (x int)"):
        result, call = run(box, "run_sql", sql=sql)
        assert call.outcome == "error" and result["error_kind"] in {"forbidden", "sql"}, (sql, result)
    assert admin_rows(demo_sandbox, "SELECT count(*) FROM stores")[0][0] == before
    assert admin_rows(demo_sandbox, "SELECT to_regclass('public.t_owned')") == [(None,)]
    rows, call = run(box, "run_sql", sql="SELECT count(*) AS n FROM stores")
    assert call.outcome == "ok" and rows == {"columns": ["n"], "rows": [[before]], "truncated": False}


def test_search_knowledge_ranks_by_bm25_and_hides_deleted_entries(context):
    box = toolbox(context)
    found, call = run(box, "search_knowledge", query="realized orders")  # stemmed: "orders" finds "order"
    assert call.outcome == "ok"
    top = found["results"][0]
    assert top["kind"] == "knowledge" and top["id"] == 1 and top["name"] == "Realized Order"
    columns, _ = run(box, "search_knowledge", query="unit price")
    top_columns = {(r["table"], r["column"]) for r in columns["results"][:2] if r["kind"] == "column"}
    assert top_columns == {("order_items", "unit_price"), ("products", "unit_price")}  # "unit price" finds unit_price
    watering, _ = run(box, "search_knowledge", query="watering rhythm")  # words of a column's description only
    assert (watering["results"][0]["table"], watering["results"][0]["column"]) == ("products", "care_info")
    assert "fields_meaning" in watering["results"][0]["description"]
    deleted = make_item(ambiguous=True).model_copy(update={"ambiguities": [Ambiguity(term="realized", kind="knowledge",
                                                                                     knowledge_id=1)]})
    hidden, _ = run(toolbox(context, item=deleted), "search_knowledge", query="realized order")
    assert 1 not in [r.get("id") for r in hidden["results"] if r["kind"] == "knowledge"]
    for query in ('"', "NEAR(a b", "status:*", "-", "AND OR NOT"):  # FTS5 syntax is read as words
        result, call = run(box, "search_knowledge", query=query)
        assert call.outcome == "ok" and isinstance(result["results"], list)


def test_column_meanings_are_read_as_bird_interact_reads_them(tmp_path, caplog) -> None:
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "shop_column_meaning_base.json").write_text(json.dumps({
        "shop|Orders|Status": "order status", "shop|orders|meta": {"column_meaning": "JSON", "fields_meaning": {"a": "b"}},
        "other|orders|x": "another database", "shop|orders": "two parts"}))
    (tmp_path / "broken_column_meaning_base.json").write_text("[1, 2")
    (tmp_path / "list_column_meaning_base.json").write_text("[1, 2]")
    found = load_column_meanings(tmp_path)
    assert found["shop"] == {("orders", "status"): "order status",
                             ("orders", "meta"): '{"column_meaning": "JSON", "fields_meaning": {"a": "b"}}'}
    assert found["broken"] == {} and found["list"] == {}
    warnings = caplog.text
    assert "broken_column_meaning_base.json: column descriptions not read" in warnings
    assert "expected a JSON object, got list" in warnings and "'other|orders|x' skipped" in warnings
    assert load_column_meanings(tmp_path / "missing") == {}


def test_bm25_prefers_the_rarer_word() -> None:
    docs = [Document("knowledge", str(i), f"d{i}", body) for i, body in enumerate(
        ["order order order", "order refund", "refund policy for a refunded order"])]
    index = KnowledgeIndex(docs)
    assert [d.key for d, _ in index.search("policy", 5)] == ["2"]
    assert [d.key for d, _ in index.search("refund", 1)] in (["1"], ["2"])
    assert index.search("", 5) == [] and index.search("zebra", 5) == []


def test_budgets_and_byte_caps(context):
    box = toolbox(context, per_turn=2, per_conversation=3, max_bytes=256)
    box.start_turn()
    assert run(box, "list_tables")[1].outcome == "ok"
    sample, call = run(box, "sample_rows", table="products", limit=20)
    assert call.outcome == "ok" and sample["truncated"] is True and call.result_bytes <= 256
    refused, call = run(box, "list_tables")
    assert call.outcome == "budget" and "budget exhausted (turn)" in refused["error"]
    box.start_turn()
    assert run(box, "list_tables")[1].outcome == "ok"
    assert run(box, "list_tables")[1].outcome == "budget"  # 3 per conversation


# --------------------------------------------------------------------------- the agent loop


def agent_for(server: FakeLLMServer, context: AgentContext, **options: Any) -> Any:
    options = {"tools": ["describe_table", "search_knowledge"]} | options
    config = OpenAICompatAgentConfig(agent="openai_compat", base_url=server.url + "/v1", model="m", **options)
    return build_agent(config, context)


def test_the_agent_explores_then_answers_in_one_turn(context):
    with FakeLLMServer() as server:
        server.push(completion(calls=[("describe_table", {"table": "orders"}), ("search_knowledge", {"query": "realized"})]))
        server.push(completion(calls=[("run_sql", {"sql": "SELECT count(*) FROM orders WHERE status = 'completed'"})]))
        agent = agent_for(server, context)
        conv = new_conversation(make_item(), seed=1, max_turns=5, patience=1, timeout_s=60)
        reply = agent.open_session(conv).send("How many realized orders?")
        agent.close()
        offered = [t["function"]["name"] for t in server.requests[0].json()["tools"]]
        second = server.requests[1].json()["messages"]
    assert offered == ["run_sql", "ask_user", "describe_table", "search_knowledge"]
    assert reply.kind is ReplyKind.SQL and "completed" in reply.sql
    assert [(c.name, c.outcome) for c in reply.tool_calls] == [("describe_table", "ok"), ("search_knowledge", "ok"),
                                                                ("run_sql", None)]
    assert reply.usage.total == 24  # both model calls
    tool_messages = [m for m in second if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_0", "call_1"]
    assert json.loads(tool_messages[1]["content"])["results"][0]["name"] == "Realized Order"


def test_a_model_that_never_stops_calling_tools_ends_the_turn(context):
    endless = completion(calls=[("search_knowledge", {"query": "order"})])
    with FakeLLMServer(responder=lambda _: Scripted(body=endless)) as server:
        agent = agent_for(server, context, tool_limits={"per_turn": 2})
        conv = new_conversation(make_item(), seed=1, max_turns=5, patience=1, timeout_s=60)
        reply = agent.open_session(conv).send("Orders?")
        agent.close()
        calls_made = len(server.requests)
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "tool_budget"
    assert calls_made == 4  # two allowed calls, a refusal, one more reply
    assert [c.outcome for c in reply.tool_calls] == ["ok", "ok", "budget", "budget"]


def test_run_sql_in_tools_shows_rows_and_the_last_query_answers(context):
    with FakeLLMServer() as server:
        server.push(completion(calls=[("run_sql", {"sql": "SELECT count(*) FROM stores"})]))
        server.push(completion(calls=[("run_sql", {"sql": "DELETE FROM stores"})]))
        server.push(completion(content="Done."))
        agent = agent_for(server, context, tools=["run_sql"])
        conv = new_conversation(make_item(), seed=1, max_turns=5, patience=1, timeout_s=60)
        reply = agent.open_session(conv).send("How many stores?")
        agent.close()
        results = [json.loads(m["content"]) for m in server.requests[2].json()["messages"] if m["role"] == "tool"]
    assert results[0]["rows"] and results[1]["error_kind"] == "forbidden"
    assert reply.kind is ReplyKind.SQL and reply.sql == "DELETE FROM stores"  # judged as the answer, never run
    assert [c.outcome for c in reply.tool_calls] == ["ok", "error"]


def test_tools_need_function_calling() -> None:
    with pytest.raises(ValueError, match="tools need clarification: function_calling"):
        OpenAICompatAgentConfig(agent="openai_compat", base_url="http://x", model="m", tools=["list_tables"],
                                clarification="tagged_text")
    with pytest.raises(ValueError, match="list_tables"):
        OpenAICompatAgentConfig(agent="openai_compat", base_url="http://x", model="m", tools=["drop_table"])


# --------------------------------------------------------------------------- the knowledge quickstarts


def _needs_knowledge(record: dict[str, Any]) -> bool:
    """From the dataset file alone: the item's main question cites a knowledge entry that no
    ambiguity deleted (an agent that does not know the knowledge base needs to find it)."""
    deleted = {a.get("deleted_knowledge") for a in record.get("knowledge_ambiguity") or []}
    return bool(set(record.get("external_knowledge") or []) - deleted)


@pytest.mark.slow  # end to end: make test-slow (CI) runs it
def test_the_knowledge_quickstarts_differ_by_what_search_knowledge_finds(tmp_path, pgdata):
    from evalbench.cli import main
    from evalbench.results.journal.lines import phase_passed
    from evalbench.results.journal.reader import read_journal

    verdicts, records = {}, {}
    for name in ("quickstart", "quickstart_knowledge", "quickstart_no_knowledge"):
        config = DEMO.parent.parent / "configs" / f"{name}.yaml"
        assert main(["run", "--config", str(config), "--output-dir", str(tmp_path), "--run-id", name, "--no-progress"]) == 0
        records[name] = {r["item_id"]: r for r in read_journal(tmp_path / name)}
        verdicts[name] = {i: phase_passed(r["phases"][0]) if r["phases"] else False for i, r in records[name].items()}
    items = {json.loads(line)["instance_id"]: json.loads(line) for line in (DEMO / "greenleaf.jsonl").read_text().splitlines()}
    needs = {i for i, r in items.items() if _needs_knowledge(r)}
    assert 10 <= len(needs) < len(items)
    # with search_knowledge the agent finds what it needs: the quickstart's verdicts, item by item
    assert verdicts["quickstart_knowledge"] == verdicts["quickstart"]
    # without it, exactly the items that need knowledge and passed in the quickstart now fail
    lost = {i for i in items if verdicts["quickstart"][i] and not verdicts["quickstart_no_knowledge"][i]}
    assert lost and lost <= needs
    assert all(verdicts["quickstart_no_knowledge"][i] == verdicts["quickstart"][i] for i in items if i not in needs)
    for item_id in needs:  # each needed entry was searched for, by the harness, and found
        calls = [c for t in records["quickstart_knowledge"][item_id]["turns"] for c in (t["reply"] or {}).get("tool_calls") or []]
        searched = [c for c in calls if c["name"] == "search_knowledge"]
        assert searched and all(c["outcome"] == "ok" and c["result_bytes"] > 0 for c in searched), item_id
    summary = json.loads((tmp_path / "quickstart_knowledge" / "summary.json").read_text())
    assert summary["conversation"]["tools"]["calls"] >= len(needs) and "tools" not in json.loads(
        (tmp_path / "quickstart_no_knowledge" / "summary.json").read_text())["conversation"]
    # a rescore replays the recorded calls: the same tool metrics, nothing run again
    assert main(["rescore", str(tmp_path / "quickstart_knowledge"), "--output-dir", str(tmp_path), "--run-id", "again",
                 "--no-progress"]) == 0
    again = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert again["conversation"]["tools"] == summary["conversation"]["tools"]


def test_report_shows_each_tool_call_in_headless_chromium(tmp_path, pgdata):
    from evalbench.cli import main
    from evalbench.results.journal.reader import read_journal
    from tests.results.test_html_report import CHROMIUM_FLAGS, chromium_binary

    binary = chromium_binary()
    if binary is None:
        pytest.skip("no Chromium binary (chromium on PATH, /usr/bin/chromium or EVALBENCH_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    config = DEMO.parent.parent / "configs" / "quickstart_knowledge.yaml"
    assert main(["run", "--config", str(config), "--output-dir", str(tmp_path), "--run-id", "r", "--no-progress"]) == 0
    records = list(read_journal(tmp_path / "r"))
    index, record = next((i, r) for i, r in enumerate(records) if (r.get("tools") or {}).get("calls", 0) >= 3)
    ran = [c for t in record["turns"] for c in (t["reply"] or {}).get("tool_calls") or [] if c.get("outcome")]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=binary, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            page.goto((tmp_path / "r" / "report.html").as_uri())
            page.wait_for_selector("html[data-ready]", timeout=10_000)
            assert "Discovery tools" in page.inner_text("body")
            page.click(f'#conv-body tr[data-index="{index}"]')
            page.wait_for_selector("#detail[open]")
            summaries = page.locator("#detail details.tool summary").all_inner_texts()
        finally:
            browser.close()
    shown = [s for s in summaries if " · " in s]  # the calls the harness ran carry outcome · latency · size
    assert [s.split()[2] for s in shown] == [c["name"] for c in ran]
    assert all(f"{c['outcome']} · " in s and f"{c['result_bytes']} B" in s for s, c in zip(shown, ran, strict=True))


def test_the_simulated_agent_describes_the_tables_its_answer_reads() -> None:
    from evalbench.agents.simulated import tables_read

    assert tables_read("CREATE VIEW v AS SELECT a FROM products p JOIN reviews r ON p.id = r.id", "postgres") == \
        ["products", "reviews"]  # not the view it creates
    assert sorted(tables_read("WITH x AS (SELECT 1 FROM orders) SELECT * FROM x, stores", "postgres")) == ["orders", "stores"]
    assert tables_read("SELECT (((", "postgres") == []


@given(rows=st.lists(st.lists(st.one_of(st.integers(), st.text(max_size=60), st.none()), min_size=1, max_size=3), max_size=40),
       max_bytes=st.integers(256, 3000))
def test_a_result_keeps_the_longest_prefix_of_rows_that_fits(rows: list[list[Any]], max_bytes: int) -> None:
    from evalbench.agents.tools import _fit

    response = {"columns": ["a", "b", "c"], "rows": rows, "truncated": False}
    cut, size = _fit(response, max_bytes)
    assert size == len(json.dumps(cut, ensure_ascii=False).encode()) and size <= max_bytes
    if cut is response:
        return
    assert cut["truncated"] is True and cut["rows"] == rows[:len(cut["rows"])]
    if len(cut["rows"]) == len(rows):
        return  # "truncated": true is one byte shorter than false: the whole result may then fit
    one_more = cut | {"rows": rows[:len(cut["rows"]) + 1]}
    assert len(json.dumps(one_more, ensure_ascii=False).encode()) > max_bytes
