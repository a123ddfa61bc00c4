"""Real ``adk api_server`` apps that bring their own tools, evaluated through the harness's server:
``mcp_agent`` (ADK's McpToolset, the bearer token from its session state) and ``bird_like_agent``
(BIRD-Interact's c-interact protocol: ``ask_user`` and ``submit_sql`` over HTTP to the ports its
settings name). Both decide as ``input_agent`` does (the same offline rules), so their verdicts and
clarifications must be the ones ``input_agent`` gets asking through ADK's own convention."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalbench.cli import main
from tests.adk_server import APPS_DIR, free_port, start_adk_server, stop_adk_server
from tests.agents.test_http_agent import AMBIGUOUS, records
from tests.conftest import DEMO, ROOT, _adk_installed

pytestmark = pytest.mark.slow  # real api_server and whole runs: make test-slow (CI) runs them

ITEMS = sorted({"greenleaf_1", "greenleaf_2", "greenleaf_3", *AMBIGUOUS[:3], "greenleaf_41", "greenleaf_42"})


@pytest.fixture(scope="module")
def served_adk(request: pytest.FixtureRequest) -> Iterator[tuple[str, int]]:
    """(api_server URL, the port the apps expect the harness's server on)."""
    if not _adk_installed():
        pytest.skip("google-adk (the `adk` command) is not installed")
    port = free_port()
    env = {"EVALBENCH_TEST_AGENT_DB_URL": request.getfixturevalue("adk_db_url"),
           "EVALBENCH_TEST_AGENT_DATASET": str(DEMO / "greenleaf.jsonl"),
           "EVALBENCH_TEST_MCP_URL": f"http://127.0.0.1:{port}/mcp", "USER_SIM_PORT": str(port), "DB_ENV_PORT": str(port)}
    base_url, process = start_adk_server(APPS_DIR, env)
    yield base_url, port
    stop_adk_server(process)


def run_app(tmp_path: Path, name: str, model: dict[str, object], port: int | None, **run: object) -> dict[str, dict]:
    text = (ROOT / "configs" / "quickstart.yaml").read_text()
    text = text.replace("../datasets", str(ROOT / "datasets")).replace("../results", str(tmp_path / "results"))
    text = text.replace("model_config: agents/noisy.yaml", f"model_config: {json.dumps(model)}")
    if port is not None:
        text += f"serve: {json.dumps({'address': f'127.0.0.1:{port}'})}\n"
    text += "".join(f"{k}: {json.dumps(v)}\n" for k, v in run.items())
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    code = main(["run", "--config", str(path), "--run-id", name, "--no-progress", "--item-ids", *ITEMS])
    run_dir = tmp_path / "results" / name
    assert code in (0, 1), code
    return {r["item_id"]: r for r in records(run_dir)}


def verdicts(done: dict[str, dict]) -> dict[str, list[object]]:
    return {item: [(p["phase"], p["clarifications"], p["passed"]) for p in r["phases"]] for item, r in done.items()}


def adk(url: str, app: str, **more: object) -> dict[str, object]:
    return {"agent": "adk", "adkapi_server_url": url, "agent_id": app, "read_timeout_s": 60} | more


def test_an_adk_app_with_mcp_tools_is_judged_as_the_same_agent_asking_directly(served_adk, tmp_path, pgdata):
    url, port = served_adk
    direct = run_app(tmp_path, "direct", adk(url, "input_agent"), None)
    tools = run_app(tmp_path, "mcp", adk(url, "mcp_agent", session_state={"database": "{database}",
                                                                         "mcp_token": "{mcp_token}"}), port)
    assert verdicts(tools) == verdicts(direct)
    assert all(p["passed"] for r in tools.values() for p in r["phases"])  # the rules' SQL is the golden SQL
    assert all(r["outcome"] == "scored" for r in tools.values())
    asked = [tools[i] for i in AMBIGUOUS[:3]]
    assert all(r["phases"][0]["clarifications"] == 1 for r in asked)
    question = asked[0]["turns"][0]
    assert question["reply"]["kind"] == "clarification" and question["vuser"]["text"]
    served = [c for r in tools.values() for t in r["turns"] for c in t["reply"]["tool_calls"] if c.get("outcome")]
    assert {c["name"] for c in served} == {"list_tables", "ask_user", "run_sql"}
    assert all(c["outcome"] == "ok" for c in served)
    # ADK's own record of an MCP call is not counted twice: one entry per call, the harness's
    final = tools["greenleaf_1"]["turns"][0]["reply"]["tool_calls"]
    assert [(c["name"], c.get("outcome")) for c in final] == [("list_tables", "ok"), ("run_sql", "ok")]


def test_birds_protocol_asks_through_the_served_user_simulator(served_adk, tmp_path, pgdata):
    url, port = served_adk
    bird = adk(url, "bird_like_agent", reply={"sql_tool": "submit_sql", "sql_arg": "sql"},
               session_state={"task_id": "{task_id}", "db_name": "{database}"},
               state_each_turn={"_submitted_this_phase": False})
    direct = run_app(tmp_path, "direct", adk(url, "input_agent"), None, debug_attempts=1)
    birdlike = run_app(tmp_path, "bird", bird, port, debug_attempts=1)
    assert verdicts(birdlike) == verdicts(direct)
    assert all(p["passed"] for r in birdlike.values() for p in r["phases"])
    assert sum(len(r["phases"]) for r in birdlike.values()) > len(ITEMS)  # follow-ups reached and scored
    asked = birdlike[AMBIGUOUS[0]]
    assert asked["phases"][0]["clarifications"] == 1 and asked["turns"][0]["vuser"]["text"]
    submitted = [c for t in asked["turns"] for c in t["reply"]["tool_calls"] if c["name"] == "submit_sql"]
    assert submitted and all(c.get("outcome") == "ok" for c in submitted)
