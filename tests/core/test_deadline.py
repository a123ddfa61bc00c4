"""One deadline per conversation, started at admission and enforced wherever it waits: agent
HTTP (the whole reply, not each read), the database (a script shares one budget), test cases,
and the queue (a conversation waiting for a slot does not spend its time)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalbench.agents import AgentContext, build_agent
from evalbench.agents.config import AdkAgentConfig, OpenAICompatAgentConfig
from evalbench.config import load_run_config
from evalbench.core import deadline
from evalbench.core.conversation import MAX_SQL_BYTES, Outcome, ReplyKind
from evalbench.results import read_journal
from evalbench.run import run
from evalbench.run.stages import new_conversation
from evalbench.scoring.test_case_runner import run_test_case
from tests.conftest import DEMO
from tests.helpers import make_item

COMPLETION = json.dumps({"id": "c", "object": "chat.completion", "model": "m", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "```sql\nSELECT 1\n```"}, "finish_reason": "stop"}]}).encode()


class SlowServer:
    """A raw HTTP server misbehaving in one of several ways on POST /run and /chat/completions;
    other requests (ADK session creation) get a normal JSON answer. Counts requests."""

    def __init__(self, mode: str) -> None:
        self.mode, self.requests, self._stop = mode, [], threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            while not self._stop.is_set():
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    head += chunk
                header, _, body = head.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in header.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
                while len(body) < length:
                    body += conn.recv(65536)
                path = header.split(b" ")[1].decode()
                self.requests.append(path)
                if not (path.endswith(("/run", "/chat/completions"))):
                    payload = b'{"id": "s1"}'
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
                    continue
                self._misbehave(conn)
                return

    def _misbehave(self, conn: socket.socket) -> None:
        try:
            if self.mode == "dribble_headers":
                conn.sendall(b"HTTP/1.1 200 OK\r\n")
                while not self._stop.is_set():
                    conn.sendall(b"X: y\r\n")
                    time.sleep(0.1)
            body = COMPLETION if self.mode != "huge" else b"[" + b"0," * 20_000_000 + b"0]"
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
            if self.mode == "cut_body":
                conn.sendall(body[: len(body) // 2])
                return  # closed mid-reply
            if self.mode == "huge":
                conn.sendall(body)
                return
            for byte in body:  # dribble_body: a byte at a time, each well within any read timeout
                if self._stop.is_set():
                    return
                conn.sendall(bytes([byte]))
                time.sleep(0.1)
        except OSError:
            pass

    def close(self) -> None:
        self._stop.set()
        self._sock.close()


@pytest.fixture
def slow_server(request) -> Iterator[SlowServer]:
    server = SlowServer(request.param)
    yield server
    server.close()


def _agent(kind: str, url: str) -> Any:
    context = AgentContext(seed=1, schema=lambda dialect, database: "CREATE TABLE t (x int);")
    if kind == "adk":
        config: Any = AdkAgentConfig(agent="adk", adkapi_server_url=url, agent_id="app", read_timeout_s=30,
                                     retry={"max_retries": 3, "backoff_s": 0.01, "max_backoff_s": 0.05})
    else:
        config = OpenAICompatAgentConfig(agent="openai_compat", base_url=url, model="m", timeout_s=30,
                                         retry={"max_retries": 3, "backoff_s": 0.01, "max_backoff_s": 0.05})
    return build_agent(config, context)


@pytest.mark.parametrize("kind", ["openai_compat", "adk"])
@pytest.mark.parametrize("slow_server", ["dribble_body", "dribble_headers"], indirect=True)
def test_a_reply_sent_a_byte_at_a_time_times_out_at_the_conversation_deadline(slow_server, kind):
    agent = _agent(kind, slow_server.url)
    conv = new_conversation(make_item(), seed=1, max_turns=5, patience=1, timeout_s=1.0)
    started = time.monotonic()
    with deadline.within(time.monotonic() + 1.0):
        session = agent.open_session(conv)
        reply = session.send("How many?")
    elapsed = time.monotonic() - started
    agent.close()
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "timeout", reply
    assert elapsed < 2.0, f"the deadline was 1 s, the call took {elapsed:.2f} s (each read was well within 30 s)"
    assert sum(path.endswith(("/run", "/chat/completions")) for path in slow_server.requests) == 1  # never re-sent


@pytest.mark.parametrize("kind", ["openai_compat", "adk"])
@pytest.mark.parametrize("slow_server", ["cut_body"], indirect=True)
def test_a_reply_cut_mid_body_is_not_sent_again(slow_server, kind):
    agent = _agent(kind, slow_server.url)
    session = agent.open_session(new_conversation(make_item(), seed=1, max_turns=5, patience=1, timeout_s=60))
    reply = session.send("How many?")
    agent.close()
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "connection", reply
    assert sum(path.endswith(("/run", "/chat/completions")) for path in slow_server.requests) == 1


@pytest.mark.parametrize("slow_server", ["huge"], indirect=True)
def test_a_reply_larger_than_the_cap_is_a_protocol_failure(slow_server):
    agent = _agent("openai_compat", slow_server.url)
    reply = agent.open_session(new_conversation(make_item(), seed=1, max_turns=5, patience=1, timeout_s=60)).send("Q")
    agent.close()
    assert reply.kind is ReplyKind.ERROR and reply.error_kind == "protocol" and "larger than" in reply.error


def test_a_script_of_slow_statements_shares_one_statement_timeout(demo_sandbox):
    from evalbench.backends.postgres.sandbox import Sandbox

    sandbox = Sandbox(demo_sandbox.conninfo, pool_size=1, statement_timeout_s=1.0, max_rows=10)
    budget = 1.0
    step = budget * 0.4
    started = time.monotonic()
    result = sandbox.execute(f"SELECT pg_sleep({step}); SELECT pg_sleep({step}); SELECT pg_sleep({step}); SELECT 1")
    elapsed = time.monotonic() - started
    assert result.error_kind == "timeout", result
    assert elapsed < budget + 0.5, f"{elapsed:.2f} s for a budget of {budget} s"
    assert sandbox.execute("SELECT 1").rows == [(1,)]  # the connection is clean after it
    sandbox.close()


def test_the_conversation_deadline_shortens_the_statement_timeout(demo_sandbox):
    for sql in ("SELECT pg_sleep(5)", "SELECT 1; SELECT pg_sleep(5)"):
        started = time.monotonic()
        with deadline.within(time.monotonic() + 0.5):
            result = demo_sandbox.execute(sql)
        assert result.error_kind == "timeout" and time.monotonic() - started < 1.5, (sql, result)
    with deadline.within(time.monotonic() - 1):
        late = demo_sandbox.execute("SELECT 1")
    assert late.error_kind == "timeout" and "deadline" in late.error


def test_test_cases_stop_at_the_conversation_deadline(demo_sandbox):
    case = "def test_case(pred_sqls, sol_sqls, db_name, conn):\n    import time\n    time.sleep(30)\n"
    started = time.monotonic()
    with deadline.within(time.monotonic() + 2.0):
        verdict = run_test_case(demo_sandbox.conninfo, case, ["SELECT 1"], ["SELECT 1"], timeout_s=30)
    assert not verdict.passed and verdict.kind == "timeout", verdict
    assert time.monotonic() - started < 4.0
    with deadline.within(time.monotonic() - 1):
        assert run_test_case(demo_sandbox.conninfo, case, ["SELECT 1"], ["SELECT 1"]).kind == "timeout"


def _run_config(tmp_path: Path, items: int, **extra: Any) -> Path:
    dataset = tmp_path / "few.jsonl"
    lines = (DEMO / "greenleaf.jsonl").read_text(encoding="utf-8").splitlines()
    dataset.write_text("\n".join(lines[:items]) + "\n", encoding="utf-8")
    lines = [f"dataset_config: {dataset}", f"setup_directory: {DEMO / 'setup'}",
             "scorers: {exec_match: {}}", f"reporting: {{csv: {{output_directory: {tmp_path}}}}}"]
    lines += [f"{key}: {json.dumps(value)}" for key, value in extra.items()]
    path = tmp_path / "run.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_deadline_starts_at_admission_not_in_the_queue(tmp_path, pgdata, embedded_admin_url):
    # one conversation at a time, each ~0.3 s of agent latency, 1.5 s each: queued ones would time out
    config = _run_config(tmp_path, 8, model_config={"agent": "simulated:oracle", "latency_s": 0.3}, max_in_flight=1,
                         conversation_timeout_s=1.5)
    result = run(load_run_config(config, run_id="queued"), progress=False)
    outcomes = [r["outcome"] for r in read_journal(result.run_dir)]
    assert len(outcomes) == 8 and Outcome.TIMEOUT.value not in outcomes, outcomes


def test_an_oversized_sql_reply_is_an_agent_failure_not_a_parser_stall():
    from evalbench.core.conversation import AgentReply, after_generate, after_prompt, next_user_message

    conv = new_conversation(make_item(), seed=1, max_turns=5, patience=1, timeout_s=60)
    after_prompt(conv, *next_user_message(conv))
    huge = "SELECT " + ", ".join(["1"] * MAX_SQL_BYTES)
    started = time.monotonic()
    after_generate(conv, AgentReply(ReplyKind.SQL, sql=huge))
    assert time.monotonic() - started < 0.5
    assert conv.phase.outcome is Outcome.AGENT_ERROR and "over the limit" in conv.phase.error
