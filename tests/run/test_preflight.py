"""Preflight (``evalbench check``, and ``evalbench run`` before item 1) and the circuit breaker,
through the command line, against real servers: the embedded PostgreSQL, small real HTTP servers
standing in for ADK and OpenAI-compatible agents and for a Gemini endpoint, and ports nobody
listens on."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from evalbench.cli import main
from evalbench.core.conversation import AgentReply, Outcome, Phase, ReplyKind, Turn
from evalbench.results import read_journal
from tests.conftest import DEMO, ROOT
from tests.fake_llm_server import FakeLLMServer, Received, Scripted

APP = "nl2sql"
MODEL = "tiny-sql"


def closed_port() -> int:
    """A port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def adk(url: str, **extra: Any) -> str:
    options = {"agent": "adk", "adkapi_server_url": url, "agent_id": APP} | extra
    return json.dumps(options)  # JSON is YAML


def write_config(tmp_path: Path, agent: str, *, vuser: str = "{vuser: rules, patience: 3}", extra: str = "") -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(
        f"dataset_config: {DEMO / 'greenleaf.jsonl'}\n"
        "dataset_format: bird-interact\n"
        f"setup_directory: {DEMO / 'setup'}\n"
        f"model_config: {agent}\n"
        f"vuser_model_config: {vuser}\n"
        f"reporting: {{csv: {{output_directory: '{tmp_path / 'out'}'}}}}\n" + extra,
        encoding="utf-8",
    )
    return path


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def adk_fake(apps: Any = (APP,), status: int = 200) -> FakeLLMServer:
    """A tiny ADK api_server: lists ``apps``, creates sessions, answers every turn with SQL."""

    def respond(request: Received) -> Scripted:
        if request.method == "GET" and request.path == "/list-apps":
            return Scripted(status, list(apps) if status == 200 else {"detail": "no"})
        if request.method == "POST" and request.path.endswith("/sessions"):
            return Scripted(200, {"id": f"s{len(server.requests)}"})
        if request.method == "POST" and request.path == "/run":
            return Scripted(200, [{"author": "agent", "content": {"role": "model", "parts": [{"text": "```sql\nSELECT 1\n```"}]}}])
        if request.method == "DELETE":
            return Scripted(200, {})
        return Scripted(404, {"detail": "Not Found"})

    server = FakeLLMServer(respond)
    return server


# ----------------------------------------------------------------------------- agent down: fail fast


@pytest.mark.parametrize("kind", ["adk", "openai_compat"])
def test_agent_endpoint_down_exits_3_within_seconds_before_item_1_with_one_line(tmp_path, pgdata, kind):
    url = f"http://127.0.0.1:{closed_port()}"
    agent = adk(url) if kind == "adk" else json.dumps({"agent": "openai_compat", "base_url": url + "/v1", "model": MODEL})
    config = write_config(tmp_path, agent)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "evalbench", "run", "--config", str(config), "--run-id", "r", "--no-progress"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    elapsed = time.monotonic() - started
    assert done.returncode == 3, done.stderr
    assert elapsed < 30, elapsed  # seconds, on a loaded 2-core machine; not the 43 items' retries
    lines = error_lines(done.stderr)
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: preflight: agent {kind}: cannot connect to {url}"), lines[0]
    assert "Connection refused" in lines[0] and "fix model_config" in lines[0]
    assert not (tmp_path / "out" / "r").exists()  # before item 1: no run directory, no journal line
    assert "evalbench: run" not in done.stdout


def test_check_passes_on_the_quickstart(tmp_path, pgdata, demo_config_path, capsys):
    assert main(["check", "--config", str(demo_config_path), "--output-dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out.splitlines()
    checks = {line[6:].split(": ")[0]: line for line in out if line.startswith(("ok", "FAIL"))}
    assert set(checks) == {"dataset", "scoring", "agent simulated:noisy", "virtual user rules", "database postgres/greenleaf",
                           "output directory"}, out
    assert all(line.startswith("ok    ") for line in checks.values()), out
    assert "43 items" in checks["dataset"]
    assert "evalbench_sandbox" in checks["database postgres/greenleaf"] and "logged in" in checks["database postgres/greenleaf"]
    assert out[-1].startswith("all 6 checks passed")
    assert not (tmp_path / "out").exists()  # checked, not created


def test_a_database_that_cannot_be_reached_or_has_no_setup_fails_before_item_1(tmp_path, pgdata, capsys):
    port = closed_port()
    down = f"database_configs:\n  - {{database_name: greenleaf, url: 'postgresql://postgres:sekrit@127.0.0.1:{port}/postgres'}}\n"
    config = write_config(tmp_path, "simulated:oracle", extra=down)
    assert main(["run", "--config", str(config), "--run-id", "r", "--no-progress"]) == 3
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and lines[0].startswith("error: preflight: database postgres/greenleaf: cannot connect to "), lines
    assert f"127.0.0.1:{port}" in lines[0] and "sekrit" not in lines[0] and "start the server" in lines[0]
    assert not (tmp_path / "out" / "r").exists()
    dataset = tmp_path / "nowhere.jsonl"
    dataset.write_text(json.dumps({"instance_id": "n1", "selected_database": "preflight_nowhere", "query": "How many?",
                                   "sol_sql": ["SELECT 1"], "category": "Query"}) + "\n", encoding="utf-8")
    config.write_text(config.read_text().replace(str(DEMO / "greenleaf.jsonl"), str(dataset)).replace(down, ""))
    assert main(["check", "--config", str(config)]) == 3  # no such database on the server, and no setup for it
    out = capsys.readouterr().out
    assert "FAIL  database postgres/preflight_nowhere" in out and "does not exist" in out and "set setup_directory" in out


# ----------------------------------------------------------------------------- gates


@pytest.mark.parametrize("preflight", [[], ["--no-preflight"]])
def test_a_misspelt_gate_metric_exits_2_before_the_run(tmp_path, pgdata, demo_config_path, capsys, preflight):
    args = ["run", "--config", str(demo_config_path), "--output-dir", str(tmp_path), "--run-id", "r", "--no-progress",
            "--fail-under", "success=0.1", "--fail-under", "exec_mach=60%", *preflight]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert error_lines(err) == [line for line in err.splitlines() if line.startswith("error: preflight: gates: --fail-under exec_mach=60%")]
    assert "unknown metric 'exec_mach'" in err and "did you mean exec_match?" in err
    assert not (tmp_path / "r").exists()


def test_gate_metric_names_are_those_the_run_summary_has(tmp_path, pgdata, demo_config_path, capsys):
    """Every name preflight accepts is one the gates can read in a real run's summary, and a
    phase or scorer the run does not have is refused."""
    from evalbench.results.gates import metric_value
    from evalbench.run.preflight import gate_metric_names

    args = ["run", "--config", str(demo_config_path), "--output-dir", str(tmp_path), "--run-id", "r", "--no-progress",
            "--limit", "4", "--fail-under", "turn_count.follow_up=0", "--fail-under", "success.main=0"]
    assert main(args) in (0, 1)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    names = gate_metric_names(manifest["scorers"])
    assert {"success", "success.follow_up", "mean_reward", "exec_match", "exec_match.main", "state_match.follow_up"} <= set(names)
    for name in names:
        metric_value(summary, name)  # raises ConfigError for a name the summary does not know
    assert "exec_match.followup" not in names and "llmrater" not in names
    capsys.readouterr()
    assert main(["check", "--config", str(demo_config_path), "--output-dir", str(tmp_path), "--max-regression", "llmrater=1%"]) == 2
    assert "unknown metric 'llmrater'" in capsys.readouterr().out


# ----------------------------------------------------------------------------- output directory


def test_an_unwritable_output_directory_exits_3_before_item_1(tmp_path, pgdata, demo_config_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    out = blocker / "results"  # cannot be made, even by root
    assert main(["run", "--config", str(demo_config_path), "--output-dir", str(out), "--run-id", "r", "--no-progress"]) == 3
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and lines[0].startswith("error: preflight: output directory: "), lines
    assert f"{blocker} is not a directory" in lines[0] and "--output-dir" in lines[0]
    assert main(["check", "--config", str(demo_config_path), "--output-dir", str(out)]) == 3
    assert "FAIL  output directory" in capsys.readouterr().out


# ----------------------------------------------------------------------------- ADK


def test_an_adk_app_the_server_does_not_list_is_a_config_error(tmp_path, pgdata, capsys):
    with adk_fake(apps=["other_app", "sales"]) as server:
        config = write_config(tmp_path, adk(server.url))
        assert main(["run", "--config", str(config), "--run-id", "r", "--no-progress"]) == 2
        assert [(r.method, r.path) for r in server.requests] == [("GET", "/list-apps")]  # no session was created
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and lines[0].startswith("error: preflight: agent adk: "), lines
    assert f"does not serve the app '{APP}'" in lines[0] and "other_app, sales" in lines[0]
    assert f"{config}: model_config.agent_id" in lines[0]
    assert not (tmp_path / "out" / "r").exists()


def test_an_adk_server_that_lists_the_app_passes_and_one_that_refuses_the_credentials_does_not(tmp_path, pgdata, capsys):
    with adk_fake() as server:
        config = write_config(tmp_path, adk(server.url))
        assert main(["check", "--config", str(config)]) == 0
        assert f"ok    agent adk: {server.url} lists the app '{APP}'" in capsys.readouterr().out
    with adk_fake(status=401) as server:
        config = write_config(tmp_path, adk(server.url, headers={"Authorization": "Bearer wrong"}))
        assert main(["check", "--config", str(config)]) == 2
        out = capsys.readouterr().out
        assert "FAIL  agent adk" in out and "HTTP 401" in out and "model_config.headers" in out and "wrong" not in out


def test_a_real_adk_api_server_lists_its_apps(adk_server, tmp_path, pgdata, capsys):
    """Against ``adk api_server tests/adk_apps``: its app passes, a misspelt one fails with the list."""
    config = write_config(tmp_path, json.dumps({"agent": "adk", "adkapi_server_url": adk_server, "agent_id": "gda_agent"}))
    assert main(["check", "--config", str(config)]) == 0
    assert f"ok    agent adk: {adk_server} lists the app 'gda_agent'" in capsys.readouterr().out
    config = write_config(tmp_path, json.dumps({"agent": "adk", "adkapi_server_url": adk_server, "agent_id": "gda_agnet"}))
    assert main(["run", "--config", str(config), "--run-id", "r", "--no-progress"]) == 2
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "does not serve the app 'gda_agnet'" in lines[0] and "gda_agent" in lines[0], lines


# ----------------------------------------------------------------------------- OpenAI-compatible


def openai_fake(models: list[str], chat_status: int) -> FakeLLMServer:
    def respond(request: Received) -> Scripted:
        if request.method == "GET" and request.path == "/v1/models":
            return Scripted(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in models]})
        if request.path == "/v1/chat/completions":
            if chat_status == 200:
                return Scripted(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"}}]})
            return Scripted(chat_status, {"error": {"message": f"status {chat_status}"}})
        return Scripted(404, {"error": "no such path"})

    return FakeLLMServer(respond)


@pytest.mark.parametrize("models, chat_status, code, calls, says", [
    ([MODEL, "other"], 200, 0, ["/v1/models"], f"lists the model '{MODEL}'"),
    (["served-alias"], 200, 0, ["/v1/models", "/v1/chat/completions"], "answered a one-token request"),
    (["other"], 404, 2, ["/v1/models", "/v1/chat/completions"], f"does not serve the model '{MODEL}'"),
    ([], 400, 0, ["/v1/models", "/v1/chat/completions"], "is up (a one-token request got HTTP 400"),
    ([], 401, 2, ["/v1/models", "/v1/chat/completions"], "refused the credentials"),
])
def test_an_openai_compatible_model_is_listed_or_answers(tmp_path, pgdata, capsys, models, chat_status, code, calls, says):
    with openai_fake(models, chat_status) as server:
        agent = json.dumps({"agent": "openai_compat", "base_url": server.url + "/v1", "model": MODEL})
        assert main(["check", "--config", str(write_config(tmp_path, agent))]) == code
        assert [r.path for r in server.requests] == calls
    line = next(line for line in capsys.readouterr().out.splitlines() if "agent openai_compat" in line)
    assert line.startswith("ok" if code == 0 else "FAIL") and says in line, line


# ----------------------------------------------------------------------------- the LLM virtual user


def test_the_llm_virtual_user_needs_credentials_and_a_reachable_endpoint_but_no_call(tmp_path, pgdata, capsys, monkeypatch):
    monkeypatch.setenv("PREFLIGHT_TEST_KEY", "k")
    with FakeLLMServer() as server:
        vuser = json.dumps({"vuser": "llm", "base_url": server.url, "api_key_env": "PREFLIGHT_TEST_KEY"})
        assert main(["check", "--config", str(write_config(tmp_path, "simulated:oracle", vuser=vuser))]) == 0
        assert server.requests == []  # a TCP connection, no request: a scripted fake loses no answer
    assert f"ok    virtual user llm: credentials present (an API key in $PREFLIGHT_TEST_KEY); {server.url} accepts" \
        in capsys.readouterr().out
    down = f"http://127.0.0.1:{closed_port()}"
    vuser = json.dumps({"vuser": "llm", "base_url": down, "api_key_env": "PREFLIGHT_TEST_KEY"})
    assert main(["run", "--config", str(write_config(tmp_path, "simulated:oracle", vuser=vuser)), "--no-progress"]) == 3
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and lines[0].startswith(f"error: preflight: virtual user llm: cannot connect to {down}"), lines
    assert "vuser_model_config base_url" in lines[0]
    vuser = json.dumps({"vuser": "llm", "api_key_env": "PREFLIGHT_NO_SUCH_KEY"})
    assert main(["check", "--config", str(write_config(tmp_path, "simulated:oracle", vuser=vuser))]) == 2
    assert "environment variable PREFLIGHT_NO_SUCH_KEY is not set" in capsys.readouterr().out


# ----------------------------------------------------------------------------- the circuit breaker


def test_the_breaker_stops_a_run_whose_agent_refuses_connections_and_resume_goes_on(tmp_path, pgdata, capsys):
    url = f"http://127.0.0.1:{closed_port()}"
    config = write_config(tmp_path, adk(url, retry={"max_retries": 0}), extra="max_in_flight: 8\n")
    started = time.monotonic()
    code = main(["run", "--config", str(config), "--run-id", "r", "--no-progress", "--no-preflight"])
    assert code == 3 and time.monotonic() - started < 30
    err = capsys.readouterr().err
    assert f"error: the agent at {url} is unreachable: 5 conversations in a row could not connect to it" in err, err
    run_dir = tmp_path / "out" / "r"
    assert f"--resume {run_dir} --retry-errors" in err
    records = list(read_journal(run_dir))
    outcomes = [r["outcome"] for r in records]
    assert set(outcomes) <= {"agent_error", "cancelled"} and outcomes.count("agent_error") >= 5, outcomes
    assert len(records) < 43 and len({r["item_id"] for r in records}) == len(records)  # stopped early, each once
    assert all(t["reply"]["error_kind"] == "connection" for r in records if r["outcome"] == "agent_error" for t in r["turns"])
    # the agent is back (at another address): the run goes on where it stopped, errors included
    with adk_fake() as server:
        write_config(tmp_path, adk(server.url, retry={"max_retries": 0}), extra="max_in_flight: 8\n")
        assert main(["run", "--config", str(config), "--resume", str(run_dir), "--retry-errors", "--no-progress"]) in (0, 1)
    final = {r["item_id"]: r["outcome"] for r in read_journal(run_dir)}
    assert len(final) == 43 and not {"agent_error", "cancelled"} & set(final.values()), final


def test_agent_down_after_0_never_stops_the_run(tmp_path, pgdata, capsys):
    config = write_config(tmp_path, adk(f"http://127.0.0.1:{closed_port()}", retry={"max_retries": 0}))
    assert main(["run", "--config", str(config), "--run-id", "r", "--no-progress", "--no-preflight",
                 "--agent-down-after", "0"]) == 0  # no gate: a 0 % run is not an infrastructure failure
    assert {r["outcome"] for r in read_journal(tmp_path / "out" / "r")} == {"agent_error"}
    assert len(list(read_journal(tmp_path / "out" / "r"))) == 43


def test_a_conversation_that_reached_the_agent_resets_the_count():
    from evalbench.run.breaker import AgentBreaker, could_not_reach
    from evalbench.run.stages import new_conversation
    from tests.helpers import make_item

    def conversation(reply: AgentReply | None, outcome: Outcome) -> Any:
        conv = new_conversation(make_item(), seed=1, max_turns=5, patience=1, timeout_s=60)
        if reply is not None:
            conv.turns.append(Turn(0, Phase.MAIN, "How many stores?", "user", reply=reply))
        conv.outcome = outcome
        return conv

    refused = conversation(AgentReply(ReplyKind.ERROR, error="cannot connect", error_kind="connection"), Outcome.AGENT_ERROR)
    reached = conversation(AgentReply(ReplyKind.ERROR, error="HTTP 500", error_kind="http_500"), Outcome.AGENT_ERROR)
    cancelled = conversation(AgentReply(ReplyKind.ERROR, error="the run was cancelled", error_kind="connection"),
                             Outcome.CANCELLED)
    no_turn = conversation(None, Outcome.DB_ERROR)
    assert [could_not_reach(c) for c in (refused, reached, cancelled, no_turn)] == [True, False, None, None]
    stops: list[int] = []
    breaker = AgentBreaker("http://agent", lambda: stops.append(1), after=3)
    try:
        for conv in (refused, refused, reached, refused, cancelled, no_turn, refused):
            breaker.observe(conv)
        assert not breaker.tripped and breaker.in_a_row == 2 and stops == []
        breaker.observe(refused)
        breaker.observe(refused)
        assert breaker.tripped and stops == [1]
        assert "the agent at http://agent is unreachable: 3 conversations in a row" in str(breaker.error(Path("r")))
    finally:
        from evalbench.core import deadline

        deadline.reset_cancel()  # the breaker cancels waits process-wide, as Ctrl-C does
