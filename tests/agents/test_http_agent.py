"""The generic HTTP agent (``agent: http``): a JSON endpoint evaluated from a config file alone.

The endpoint here is a plain ``http.server`` in a style of its own: a nested request
(``{"input": {"utterance": ...}, "context": {...}}``), a nested reply with a server-made
conversation id, a clarification question asked before it answers an ambiguous item, and the
golden SQL of the demo dataset as its answers (an oracle), so that its verdicts are known.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from evalbench.cli import main
from evalbench.config.agents import HttpAgentConfig
from tests.conftest import ROOT

DEMO = ROOT / "datasets" / "demo" / "greenleaf.jsonl"
GOLDEN = {(r["instance_id"], phase): sql
          for r in map(json.loads, DEMO.read_text().splitlines())
          for phase, sql in (("main", r["sol_sql"][0]), ("follow_up", (r.get("follow_up") or {}).get("sol_sql", [None])[0]))}
AMBIGUOUS = sorted(json.loads(line)["instance_id"] for line in DEMO.read_text().splitlines()
                   if json.loads(line)["user_query_ambiguity"]["critical_ambiguity"])
CHOSEN = sorted({"greenleaf_1", "greenleaf_2", "greenleaf_3", *AMBIGUOUS[:5]})

REQUEST = {"input": {"utterance": "{message}"}, "context": {"conversation": "{session_id}", "item": "{item_id}",
                                                         "db": "{database}", "phase": "{phase}", "turn": "{turn}"}}
REPLY = {"text": "data.say", "sql": "data.query", "question": "data.clarify", "session_id": "conversation.id"}

Handler = Callable[[dict[str, object]], tuple[int, object]]


class Endpoint:
    """A JSON endpoint on a free port; ``received`` holds every request body."""

    def __init__(self, answer: Handler) -> None:
        self.received: list[dict[str, object]] = []
        endpoint = self

        class _Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.received.append(body)
                status, reply = answer(body)
                data = (reply if isinstance(reply, str) else json.dumps(reply)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/agent/turn"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[Callable[[Handler], Endpoint]]:
    started: list[Endpoint] = []

    def start(answer: Handler) -> Endpoint:
        started.append(Endpoint(answer))
        return started[-1]

    yield start
    for server in started:
        server.close()


def oracle(body: dict[str, object]) -> tuple[int, object]:
    """Asks once on an ambiguous item's first turn, then answers with the golden SQL; its
    conversation id is the one it made on the first turn."""
    context = body["context"]
    assert isinstance(context, dict)
    conversation = context["conversation"] if context["turn"] != 1 else f"srv-{context['item']}"
    if context["turn"] == 1 and context["item"] in AMBIGUOUS:
        return 200, {"data": {"clarify": "Which one do you mean?"}, "conversation": {"id": conversation}}
    sql = GOLDEN[(str(context["item"]), str(context["phase"]))]
    return 200, {"data": {"query": sql, "say": "here it is"}, "conversation": {"id": conversation}}


def config_file(tmp_path: Path, url: str, **agent: object) -> Path:
    """The quickstart's config with the http agent as model_config: a file, as a user writes it."""
    model = {"agent": "http", "url": url, "request": REQUEST, "reply": REPLY,
             "retry": {"max_retries": 2, "backoff_s": 0.01, "max_backoff_s": 0.05}} | agent
    text = (ROOT / "configs" / "quickstart.yaml").read_text()
    text = text.replace("../datasets", str(ROOT / "datasets")).replace("../results", str(tmp_path / "results"))
    text = text.replace("model_config: agents/noisy.yaml", f"model_config: {json.dumps(model)}")
    path = tmp_path / "http_agent.yaml"
    path.write_text(text)
    return path


def records(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run_dir / "conversations.jsonl").read_text().splitlines()]


def test_the_quickstart_is_evaluated_from_a_config_file_alone(tmp_path, pgdata, endpoint):
    server = endpoint(oracle)
    code = main(["run", "--config", str(config_file(tmp_path, server.url)), "--run-id", "r", "--no-progress",
                 "--item-ids", *CHOSEN])
    run_dir = tmp_path / "results" / "r"
    assert code == 0, (run_dir / "summary.md").read_text() if (run_dir / "summary.md").exists() else code
    done = records(run_dir)
    assert len(done) == len(CHOSEN) == 8 and all(r["outcome"] == "scored" for r in done)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["success"]["main"]["rate"] == 1.0  # the oracle's answers pass
    asked = [r for r in done if r["item_id"] in AMBIGUOUS]
    assert len(asked) == 5 and all(r["phases"][0]["clarifications"] == 1 for r in asked)
    assert summary["conversation"]["vuser_replies"] == 5
    # the request template was rendered per turn; the server's own conversation id came back
    first = {b["context"]["item"]: b for b in server.received if b["context"]["turn"] == 1}
    assert first["greenleaf_1"]["context"]["db"] == "greenleaf" and first["greenleaf_1"]["input"]["utterance"]
    later = [b for b in server.received if b["context"]["turn"] != 1]
    assert later and all(b["context"]["conversation"] == f"srv-{b['context']['item']}" for b in later)
    assert {b["context"]["phase"] for b in later} == {"main", "follow_up"}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["agent"]["agent"] == "http" and manifest["agent"]["url"] == server.url


def test_a_turn_that_reached_the_agent_is_never_sent_again(tmp_path, pgdata, endpoint):
    server = endpoint(lambda body: (500, {"error": "boom"}))
    main(["run", "--config", str(config_file(tmp_path, server.url)), "--run-id", "r", "--no-progress",
          "--limit", "2", "--no-preflight"])
    done = records(tmp_path / "results" / "r")
    assert [r["outcome"] for r in done] == ["agent_error", "agent_error"]
    assert "HTTP 500" in str(done[0]["turns"][0]["reply"]["error"])
    assert len(server.received) == 2  # one POST per conversation: a 500 may have reached the agent


def test_busy_answers_are_retried_and_a_reply_without_its_parts_is_a_protocol_error(tmp_path, pgdata, endpoint):
    calls: list[int] = []

    def busy_then_empty(body: dict[str, object]) -> tuple[int, object]:
        calls.append(1)
        return (503, "busy") if len(calls) % 2 else (200, {"data": {}})

    server = endpoint(busy_then_empty)
    main(["run", "--config", str(config_file(tmp_path, server.url)), "--run-id", "r", "--no-progress",
          "--limit", "1", "--no-preflight"])
    (record,) = records(tmp_path / "results" / "r")
    reply = record["turns"][0]["reply"]
    assert record["outcome"] == "agent_error" and reply["error_kind"] == "protocol", reply
    assert len(server.received) == 2  # the 503 was sent again, once


@pytest.mark.parametrize("bad, message", [
    ({"request": {"q": "{mesage}"}}, "unknown placeholder {mesage}"),
    ({"reply": {"sql": "data.[query"}}, "not a JMESPath expression"),
])
def test_a_wrong_template_or_path_is_a_config_error_naming_it(bad, message):
    with pytest.raises(ValueError, match=message):
        HttpAgentConfig.model_validate({"agent": "http", "url": "http://x"} | bad)


def test_preflight_names_an_endpoint_nothing_listens_on(tmp_path, pgdata, capsys):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/agent/turn"
    assert main(["check", "--config", str(config_file(tmp_path, closed))]) == 3
    assert f"FAIL  agent http: cannot connect to {closed}" in capsys.readouterr().out
