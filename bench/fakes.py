"""Fast fake servers for the benchmarks, each in a process of its own.

    python bench/fakes.py adk --dataset F [--port P] [--latency L]
    python bench/fakes.py gemini [--port P]

adk:    an ADK ``api_server`` that answers like an oracle, in EvalBench's GDA convention (the
        ``cloud_gda_query_tool_alloydb`` tool's response holds ``disambiguationQuestion`` or
        ``generatedQuery``, what the ``adk`` adapter reads by default): for an item with a
        critical or knowledge ambiguity it asks one clarification question per session, then
        answers with the item's golden SQL (the follow-up's golden SQL for its follow-up
        question). ``POST /apps/{app}/users/{user}/sessions``, ``POST /run`` and ``/run_sse``,
        ``DELETE`` of a session, ``GET /list-apps``. ``--latency L``: each ``/run`` answers after
        L seconds.
gemini: the Gemini API (``POST /v1beta/models/{model}:generateContent``) for the ``llm`` virtual
        user: its encode prompt is answered with ``labeled("<first listed term>")`` (or
        ``unanswerable()`` when none is listed), its decode prompt with a short answer that
        leaks nothing.

The adk fake loads the dataset (any format evalbench reads) to know each item's golden SQL and
ambiguities (the gemini fake reads the terms from the encode prompt itself). Both count what they served: ``GET /stats`` returns the counts, ``POST
/stats/reset`` sets them to zero. From Python, :func:`start` launches one and returns its URL
and process. The first line a fake prints is ``listening on http://127.0.0.1:PORT``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from http11 import Response, serve

APP = "benchagent"
GDA_TOOL = "cloud_gda_query_tool_alloydb"


# --------------------------------------------------------------------------- what the oracle knows


@dataclass(frozen=True)
class Answer:
    """What the oracle agent says to an item's opening question and to its follow-up question."""

    term: str | None  # the first critical/knowledge ambiguity: asked about once per session
    sql: str
    follow_up_question: str | None
    follow_up_sql: str | None


def load_book(dataset: Path) -> dict[str, Answer]:
    """Opening question -> answer, from the dataset (parsed by evalbench's own loader)."""
    from evalbench.dataset import load_items

    items, _errors = load_items(dataset, dialects=["postgres", "sqlite", "duckdb", "mysql"])
    book = {}
    for item in items:
        term = next((a.term for a in item.ambiguities if a.kind != "non_critical"), None)
        follow = item.follow_up
        book[item.opening_question] = Answer(term, item.golden_sql[0], follow.question if follow else None,
                                             follow.golden_sql[0] if follow else None)
    return book


def _json(value: Any, status: int = 200, delay_s: float = 0.0) -> Response:
    return Response(status, json.dumps(value).encode(), delay_s=delay_s)


class Stats:
    """Counts of served requests, by kind (the /stats endpoints themselves are not counted), and
    ``cpu_s``: the CPU seconds this server used since the last reset."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.cpu_at_reset = time.process_time()

    def handle(self, method: str, path: str) -> Response | None:
        if path == "/stats" and method == "GET":
            return _json(dict(self.counts) | {"cpu_s": round(time.process_time() - self.cpu_at_reset, 3)})
        if path == "/stats/reset" and method == "POST":
            self.counts.clear()
            self.cpu_at_reset = time.process_time()
            return _json({})
        return None


# --------------------------------------------------------------------------- the ADK api_server


@dataclass
class _Session:
    answer: Answer | None = None
    asked: bool = False


class FakeAdk:
    def __init__(self, book: dict[str, Answer], latency_s: float = 0.0) -> None:
        self.book = book
        self.latency_s = latency_s
        self.sessions: dict[str, _Session] = {}
        self.ids = itertools.count(1)
        self.stats = Stats()

    def __call__(self, method: str, path: str, body: bytes) -> Response:
        served = self.stats.handle(method, path)
        if served is not None:
            return served
        count = self.stats.counts
        if method == "POST" and path.endswith("/sessions"):
            count["adk.create"] += 1
            session_id = f"s{next(self.ids)}"
            self.sessions[session_id] = _Session()
            return _json({"id": session_id, "appName": APP, "userId": path.split("/")[4], "state": {}, "events": []})
        if method == "POST" and path in ("/run", "/run_sse"):
            count["adk.run"] += 1
            return self._run(json.loads(body), sse=path == "/run_sse")
        if method == "DELETE" and "/sessions/" in path:
            count["adk.delete"] += 1
            found = self.sessions.pop(path.rsplit("/", 1)[1], None)
            return Response(200, b"null") if found else _json({"detail": "Session not found"}, 404)
        if method == "GET" and path == "/list-apps":
            count["adk.list_apps"] += 1
            return _json([APP])
        return _json({"detail": "Not Found"}, 404)

    def _run(self, body: dict[str, Any], sse: bool) -> Response:
        session = self.sessions.get(body.get("sessionId", ""))
        if session is None:
            return _json({"detail": "Session not found"}, 404)
        text = body["newMessage"]["parts"][0].get("text", "")
        session.answer = session.answer or self.book.get(text)
        answer = session.answer
        if answer is not None and answer.term is not None and not session.asked:
            session.asked = True
            result: dict[str, Any] = {"disambiguationQuestion": [f'When you say "{answer.term}", what do you mean?']}
        elif answer is not None and answer.follow_up_sql is not None and text == answer.follow_up_question:
            result = {"generatedQuery": answer.follow_up_sql}
        else:
            result = {"generatedQuery": answer.sql if answer is not None else "SELECT 1"}
        events = [
            {"author": "agent", "invocationId": "i", "content": {"role": "model", "parts": [
                {"functionCall": {"id": "c1", "name": GDA_TOOL, "args": {"prompt": text}}}]}},
            {"author": "agent", "invocationId": "i", "content": {"role": "user", "parts": [
                {"functionResponse": {"id": "c1", "name": GDA_TOOL, "response": {"result": json.dumps(result)}}}]}},
            {"author": "agent", "invocationId": "i", "content": {"role": "model", "parts": [{"text": "Here is what I found."}]},
             "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}},
        ]
        if sse:
            payload = "".join(f"data: {json.dumps(event)}\n\n" for event in events).encode()
            return Response(200, payload, b"text/event-stream", self.latency_s)
        return _json(events, delay_s=self.latency_s)


# --------------------------------------------------------------------------- the Gemini API

ENCODE_MARK = "Reply with EXACTLY ONE of these actions"  # prompts/vuser_encode.txt
_FIRST_TERM = re.compile(r'^- "(.+?)" ->', re.MULTILINE)
DECODE_REPLY = "I mean the one I usually look at; nothing else changes."


def completion(text: str) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 50, "candidatesTokenCount": 8, "totalTokenCount": 58},
            "modelVersion": "fake"}


class FakeGemini:
    def __init__(self) -> None:
        self.stats = Stats()

    def __call__(self, method: str, path: str, body: bytes) -> Response:
        served = self.stats.handle(method, path)
        if served is not None:
            return served
        if method != "POST" or not path.endswith(":generateContent"):
            return _json({"error": {"code": 404, "message": "not found", "status": "NOT_FOUND"}}, 404)
        prompt = json.loads(body)["contents"][0]["parts"][0]["text"]
        if ENCODE_MARK in prompt:
            self.stats.counts["gemini.encode"] += 1
            term = _FIRST_TERM.search(prompt)
            text = f'labeled("{term.group(1)}")' if term else "unanswerable()"
        elif "labeled(" in prompt or "unlabeled(" in prompt:
            self.stats.counts["gemini.decode"] += 1
            text = DECODE_REPLY
        else:
            self.stats.counts["gemini.other"] += 1
            text = "EQUIVALENT"
        return _json(completion(text))


# --------------------------------------------------------------------------- processes


@dataclass
class Fake:
    """A fake server running in a child process."""

    kind: str
    url: str
    process: subprocess.Popen[str]

    def stats(self) -> dict[str, float]:
        return httpx.get(f"{self.url}/stats", timeout=10).json()

    def reset(self) -> None:
        httpx.post(f"{self.url}/stats/reset", timeout=10).raise_for_status()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def start(kind: str, dataset: Path | None = None, *, latency_s: float = 0.0, port: int = 0) -> Fake:
    """Launch ``python bench/fakes.py KIND`` and wait until it listens."""
    args = [sys.executable, str(Path(__file__).resolve()), kind, "--port", str(port)]
    if dataset is not None:
        args += ["--dataset", str(dataset)]
    if latency_s:
        args += ["--latency", str(latency_s)]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline() if process.stdout else ""
    if not line.startswith("listening on "):
        process.kill()
        raise RuntimeError(f"the fake {kind} server did not start (exit {process.wait()}): {line!r}")
    return Fake(kind, line.split()[-1], process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["adk", "gemini"])
    parser.add_argument("--dataset", type=Path, help="the dataset file (golden SQL, ambiguities); adk only")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    parser.add_argument("--latency", type=float, default=0.0, help="adk: seconds before each /run answers")
    args = parser.parse_args()
    if args.kind == "adk" and args.dataset is None:
        parser.error("adk needs --dataset")
    handler = FakeAdk(load_book(args.dataset), args.latency) if args.kind == "adk" else FakeGemini()

    def ready(port: int) -> None:
        print(f"listening on http://{args.host}:{port}", flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(handler, args.host, args.port, ready))


if __name__ == "__main__":
    main()
