"""Overhead of the adk adapter per turn, against an instant local server.

    python bench/adk_overhead.py [--turns 2000]

A local HTTP server answers session creation and /run instantly with a fixed SQL reply. The
same number of turns is sent (1) by a bare httpx loop posting the same body and (2) through
the adapter (session, limiter, retry wrapper, event classification, raw-event truncation).
The difference per turn is the adapter's overhead; the ratio is adapter time / bare time,
measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from evalbench.agents import AgentContext
from evalbench.agents.adk import AdkAgent
from evalbench.agents.config import AdkAgentConfig

EVENTS = json.dumps([
    {"author": "agent", "invocationId": "i", "content": {"role": "model", "parts": [
        {"functionCall": {"id": "c", "name": "cloud_gda_query_tool_alloydb", "args": {"question": "q"}}}]}},
    {"author": "agent", "invocationId": "i", "content": {"role": "user", "parts": [
        {"functionResponse": {"id": "c", "name": "cloud_gda_query_tool_alloydb",
                              "response": {"result": json.dumps({"generatedQuery": "SELECT 1"})}}}]}},
    {"author": "agent", "invocationId": "i", "content": {"role": "model", "parts": [{"text": "Done."}]},
     "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 2, "totalTokenCount": 12}},
]).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like a real server
    disable_nagle_algorithm = True  # or delayed ACKs add ~40 ms per request

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = b'{"id": "s1"}' if self.path.endswith("/sessions") else EVENTS
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=2000)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    body = {"appName": "app", "userId": "u", "sessionId": "s1", "newMessage": {"role": "user", "parts": [{"text": "q"}]}}

    client = httpx.Client(base_url=url)
    agent = AdkAgent(AdkAgentConfig(agent="adk", base_url=url, app_name="app"), AgentContext())
    session = agent.open_session(None)  # type: ignore[arg-type]

    def bare_turn() -> None:
        client.post("/run", json=body).json()

    def adapter_turn() -> None:
        assert session.send("q").sql == "SELECT 1"

    # Interleaved rounds so that warm-up and machine noise hit both alike; medians per turn.
    per_round = max(1, args.turns // 10)
    timings: dict[str, list[float]] = {"bare": [], "adapter": []}
    for turn in (bare_turn, adapter_turn):
        for _ in range(50):
            turn()
    for _ in range(10):
        for name, turn in (("bare", bare_turn), ("adapter", adapter_turn)):
            started = time.perf_counter()
            for _ in range(per_round):
                turn()
            timings[name].append((time.perf_counter() - started) / per_round)
    bare, adapter = statistics.median(timings["bare"]), statistics.median(timings["adapter"])
    agent.close()
    client.close()
    server.shutdown()
    print(f"{args.turns} turns each, in 10 interleaved rounds, against an instant local server (medians)")
    print(f"  bare httpx loop : {bare * 1000:.3f} ms per turn")
    print(f"  adk adapter     : {adapter * 1000:.3f} ms per turn")
    print(f"  overhead        : {(adapter - bare) * 1000:.3f} ms per turn ({adapter / bare:.2f}x the bare loop)")


if __name__ == "__main__":
    main()
