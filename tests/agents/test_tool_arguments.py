"""Tool-call arguments of any JSON value (or none: text that is not JSON, a value that is not an
object, an unknown tool) are a tool error the model sees and may recover from, never an
``agent_error``: through a whole ``evalbench run`` with the openai_compat agent against a fake
model server sending hostile arguments, and fuzzed with hypothesis over arbitrary JSON values
and every tool, on openai_compat (arguments as a JSON string) and gemini (``functionCall.args``
as a mapping, through the real google-genai SDK).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from evalbench.agents import AgentContext, build_agent, tool_args
from evalbench.agents.config import GeminiAgentConfig, OpenAICompatAgentConfig
from evalbench.agents.tools import RUN_SQL_SPEC, SPECS
from evalbench.cli import main
from evalbench.core.conversation import Outcome, ReplyKind
from evalbench.dataset.knowledge import load_knowledge
from evalbench.results import read_journal
from evalbench.run.catalogs import QueryCatalog
from evalbench.run.stages import new_conversation
from tests.attack_agent import DEMO_SETUP, TAG, item
from tests.conftest import DEMO
from tests.fake_llm_server import FakeLLMServer, Received, Scripted, chat_completion
from tests.helpers import make_item

pytestmark = pytest.mark.slow  # whole runs per attack: CI runs them in `make test-slow`

GOLDEN = "SELECT count(*) FROM stores"
TOOLS = ["list_tables", "describe_table", "sample_rows", "search_knowledge", "run_sql"]
DEEP = "[" * 100_000 + "]" * 100_000

# item id -> (tool name, the raw arguments text the model sends)
HOSTILE: dict[str, tuple[str, str]] = {
    "inf": ("sample_rows", '{"table": "stores", "limit": 1e999}'),
    "minus_inf": ("sample_rows", '{"table": "stores", "limit": -1e999}'),
    "nan": ("search_knowledge", '{"query": "stores", "limit": NaN}'),
    "huge_int": ("sample_rows", '{"table": "stores", "limit": 1' + "0" * 5000 + "}"),
    "huge_int_text": ("sample_rows", '{"table": "stores", "limit": "' + "9" * 5000 + '"}'),
    "deep": ("sample_rows", '{"table": "stores", "limit": ' + DEEP + "}"),
    "deep_object": ("describe_table", '{"table": ' + '{"a": ' * 50_000 + "1" + "}" * 50_000 + "}"),
    "array_table": ("describe_table", '{"table": ["stores"]}'),
    "null_table": ("describe_table", '{"table": null}'),
    "bool_limit": ("sample_rows", '{"table": "stores", "limit": true}'),
    "float_limit": ("sample_rows", '{"table": "stores", "limit": 2.5}'),
    "object_query": ("search_knowledge", '{"query": {"q": "orders"}}'),
    "number_sql": ("run_sql", '{"sql": 5}'),
    "not_an_object": ("describe_table", '["stores"]'),
    "a_string": ("describe_table", '"stores"'),
    "null": ("describe_table", "null"),
    "invalid_json": ("describe_table", '{"table": "stores"'),
    "unknown_tool": ("drop_everything", '{"table": "stores"}'),
    "oversized": ("describe_table", '{"table": "' + "x" * 2_000_000 + '"}'),
    "surrogate_table": ("describe_table", '{"table": "st\\ud800ores"}'),
    "surrogate_query": ("search_knowledge", '{"query": "orders \\udfff \\u0000"}'),  # a string: may be searched
    "nul_sql": ("run_sql", '{"sql": "SELECT 1 \\u0000"}'),
    "surrogate_sql": ("run_sql", '{"sql": "SELECT \'\\ud800\'"}'),
}
SEARCHED = {"surrogate_query"}  # any string is a query


def hostile_call(name: str, arguments: str) -> dict[str, Any]:
    body = chat_completion(calls=[(name, {})])
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = arguments
    return body


class HostileModel:
    """Each item's first reply calls a tool with the item's hostile arguments; after a tool
    result it answers with the golden SQL (run_sql, which ``tools`` runs too), then in text."""

    def __init__(self) -> None:
        self.results: dict[str, list[str]] = {}  # item -> the tool results sent back to the model

    def __call__(self, request: Received) -> Scripted:
        body = request.json()
        if not isinstance(body, dict):  # the preflight's GET /models
            return Scripted(404, {"error": {"message": "no models listed"}})
        messages = body["messages"]
        name = TAG.search(next(m["content"] for m in messages if m["role"] == "user")).group(1)
        results = [m["content"] for m in messages if m["role"] == "tool"]
        self.results[name] = results
        if not results:
            return Scripted(200, hostile_call(*HOSTILE[name]))
        if len(results) == 1:
            return Scripted(200, chat_completion(calls=[("run_sql", {"sql": GOLDEN})]))
        return Scripted(200, chat_completion("Done: the last query answers it."))


def write_config(tmp: Path, url: str) -> Path:
    dataset = tmp / "hostile.jsonl"
    dataset.write_text("".join(json.dumps(item(name, GOLDEN)) + "\n" for name in HOSTILE), encoding="utf-8")
    model = {"agent": "openai_compat", "base_url": url, "model": "hostile", "timeout_s": 60,
             "retry": {"max_retries": 0}, "tools": TOOLS, "tool_limits": {"per_turn": 4}}
    config = {"dataset_config": str(dataset), "dataset_format": "bird-interact", "setup_directory": str(DEMO_SETUP),
              "dialects": ["postgres"], "model_config": model, "vuser_model_config": {"vuser": "rules"},
              "scorers": {"exec_match": {}}, "max_in_flight": 4, "seed": 1}
    path = tmp / "hostile.yaml"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def test_hostile_tool_arguments_are_tool_errors_in_a_whole_run(tmp_path: Path):
    model = HostileModel()
    with FakeLLMServer(responder=model) as server:
        config = write_config(tmp_path, server.url + "/v1")
        code = main(["run", "--config", str(config), "--output-dir", str(tmp_path), "--run-id", "hostile", "--no-progress"])
    assert code == 0
    records = {r["item_id"]: r for r in read_journal(tmp_path / "hostile")}
    assert sorted(records) == sorted(HOSTILE)
    wrong = {name: problem for name, record in records.items() if (problem := _not_a_tool_error(record, model.results[name]))}
    assert not wrong, "\n".join(f"{k}: {v[:300]}" for k, v in wrong.items())


def _not_a_tool_error(record: dict[str, Any], results: list[str]) -> str | None:
    """What is wrong with a conversation whose first tool call had hostile arguments, if anything."""
    if record["outcome"] != Outcome.SCORED.value or not record["phases"][0]["scores"]["exec_match"]["passed"]:
        return f"{record['outcome']}: {record.get('error')}"
    first = next(c for t in record["turns"] for c in (t["reply"] or {}).get("tool_calls") or [])
    if record["item_id"] in SEARCHED and first["outcome"] == "ok":
        return None
    if first["outcome"] != "error" or "error" not in first["response"]:
        return f"the call is recorded as {first['outcome']}: {first['response']}"
    sent = json.loads(results[0])  # what the model was told about its call
    if not isinstance(sent.get("error"), str) or not sent["error"] or re.search(r"Traceback|Error\b", sent["error"]):
        return f"the model was told {sent}"  # a message, not an exception
    return None


# --------------------------------------------------------------------------- fuzzing


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Any value JSON (as Python reads and writes it) can hold: NaN and infinities, any text
    (lone surrogates too), integers up to what Python converts, nesting."""
    scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-(10**4000), max_value=10**4000)
               | st.floats() | st.text() | st.sampled_from(["stores", "orders", "SELECT 1", " ", ""]))
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                        max_leaves=max_leaves)


NAMES = st.sampled_from([*TOOLS, "ask_user", "drop_everything", ""]) | st.text(max_size=12)
# the parameters every tool reads, with any value; or any other object
ARGUMENT_OBJECTS = (st.fixed_dictionaries({}, optional=dict.fromkeys(("table", "limit", "query", "sql", "question"), json_values()))
                    | st.dictionaries(st.text(max_size=8), json_values(), max_size=4))


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# what an OpenAI-compatible server may send as "arguments": JSON of any value, or any text
ARGUMENT_TEXTS = (ARGUMENT_OBJECTS.map(json.dumps) | json_values().map(json.dumps) | st.text()
                  | st.integers(4000, 6000).map(lambda n: '{"limit": ' + "7" * n + "}")
                  | st.integers(30, 5000).map(lambda n: '{"table": ' + _nested(n) + "}"))
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@given(arguments=ARGUMENT_TEXTS | ARGUMENT_OBJECTS | json_values(), parameters=st.sampled_from([*SPECS.values(), RUN_SQL_SPEC]))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_decoding_and_checking_any_arguments_never_raises_anything_but_an_argument_error(arguments, parameters):
    decoded = tool_args.decode(arguments)
    assert isinstance(decoded, dict)
    json.dumps(decoded)  # what is kept on the call can be written (the journal, the history)
    try:
        checked = tool_args.check(parameters["parameters"], decoded)
    except tool_args.ArgumentError as exc:
        assert str(exc)
    else:
        kinds = {name: spec["type"] for name, spec in parameters["parameters"]["properties"].items()}
        assert all(isinstance(value, int if kinds[name] == "integer" else str) for name, value in checked.items())


class FuzzModel:
    """A model whose first reply in a turn is ``first`` (set per example), then run_sql, then text."""

    def __init__(self, reply: Callable[[Any], Any], done: Any, answer: Any) -> None:
        self.reply, self.done, self.answer = reply, done, answer
        self.first: Any = None

    def __call__(self, request: Received) -> Scripted:
        body = request.json()
        sent = json.dumps(body)  # every request the agent sends is JSON, whatever the model sent before
        results = sent.count('"role": "tool"') + sent.count('"functionResponse"')
        return Scripted(200, self.reply(self.first) if results == 0 else self.answer if results == 1 else self.done)


@pytest.fixture(scope="module")
def tool_context(demo_sandbox) -> AgentContext:
    catalog = QueryCatalog()
    catalog.register("postgres", "greenleaf", demo_sandbox)
    return AgentContext(seed=1, knowledge=load_knowledge(DEMO / "knowledge"), query=catalog, execute=catalog.execute,
                        tables=catalog.tables)


def _fuzz_turn(agent: Any, model: FuzzModel, first: Any) -> None:
    model.first = first
    session = agent.open_session(new_conversation(make_item(), seed=1, max_turns=5, patience=1, timeout_s=600))
    reply = session.send("How many stores?")
    assert reply.kind in (ReplyKind.SQL, ReplyKind.CLARIFICATION), (reply.kind, reply.error_kind, reply.error)
    hostile = reply.tool_calls[0]
    assert hostile.outcome in (None, "ok", "error"), hostile  # None: ask_user or run_sql, which ends the turn
    if hostile.outcome == "error":
        assert isinstance(hostile.response, dict) and hostile.response["error"]


@pytest.fixture(scope="module")
def openai_fuzz(tool_context) -> Iterator[tuple[Any, FuzzModel]]:
    model = FuzzModel(lambda first: hostile_call(*first), chat_completion("Done."),
                      chat_completion(calls=[("run_sql", {"sql": GOLDEN})]))
    with FakeLLMServer(responder=model) as server:
        agent = build_agent(OpenAICompatAgentConfig(agent="openai_compat", base_url=server.url, model="m", tools=TOOLS,
                                                    retry={"max_retries": 0}), tool_context)
        yield agent, model
        agent.close()


@given(name=NAMES, arguments=ARGUMENT_TEXTS)
@example(name="sample_rows", arguments=HOSTILE["inf"][1])
@example(name="ask_user", arguments='{"question": 1e999}')
@FUZZ
def test_openai_compat_any_arguments_text_is_a_tool_result_never_an_agent_error(openai_fuzz, name, arguments):
    _fuzz_turn(*openai_fuzz, (name, arguments))


def gemini_call(name: str, args: Any) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": name, "args": args}}]},
                            "finishReason": "STOP", "index": 0}]}


@pytest.fixture(scope="module")
def gemini_fuzz(tool_context) -> Iterator[tuple[Any, FuzzModel]]:
    done = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Done."}]}, "finishReason": "STOP"}]}
    model = FuzzModel(lambda first: gemini_call(*first), done, gemini_call("run_sql", {"sql": GOLDEN}))
    with pytest.MonkeyPatch.context() as patch, FakeLLMServer(responder=model) as server:
        patch.setenv("TEST_FUZZ_GEMINI_KEY", "fuzz-key")
        for name in ("GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE", "GOOGLE_API_KEY"):
            patch.delenv(name, raising=False)
        agent = build_agent(GeminiAgentConfig(agent="gemini", model="g", api_key_env="TEST_FUZZ_GEMINI_KEY", base_url=server.url,
                                              tools=TOOLS, retry={"max_retries": 0}), tool_context)
        yield agent, model
        agent.close()


@given(name=NAMES.filter(bool), args=ARGUMENT_OBJECTS | st.integers(30, 500).map(lambda n: {"table": json.loads(_nested(n))}))
@example(name="sample_rows", args={"table": "stores", "limit": math.inf})
@example(name="sample_rows", args={"table": "stores", "limit": -math.inf})
@example(name="search_knowledge", args={"query": "stores", "limit": math.nan})
@example(name="run_sql", args={"sql": "SELECT '\ud800'"})
@FUZZ
def test_gemini_any_arguments_mapping_is_a_tool_result_never_an_agent_error(gemini_fuzz, name, args):
    _fuzz_turn(*gemini_fuzz, (name, args))
