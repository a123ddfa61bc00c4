"""A small local HTTP server that stands in for a model API in tests: no network, no keys.

Responses come from a scripted queue (status, headers, body, optional delay), or — when the
queue is empty — from ``responder(request)``; every received request is logged. Use it as a
context manager (or call :meth:`close`) so its thread and socket are released.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Scripted:
    """One response of the fake server."""

    status: int = 200
    body: bytes | str | dict | list = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # wait before answering (to provoke client timeouts)
    drip_s: float = 0.0  # send the whole reply (status line, headers, body) a byte at a time, this far apart

    def payload(self) -> bytes:
        if isinstance(self.body, (dict, list)):
            return json.dumps(self.body).encode()
        if isinstance(self.body, str):
            return self.body.encode()
        return self.body


@dataclass
class Received:
    """One request the fake server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body or b"null")


class FakeLLMServer:
    def __init__(self, responder: Callable[[Received], Scripted] | None = None) -> None:
        self.responder = responder
        self.queue: deque[Scripted] = deque()
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                received = Received(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                reply = server._next(received)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                payload = reply.payload()
                if reply.drip_s:
                    self._drip(reply, payload)
                    return
                try:
                    self.send_response(reply.status)
                    headers = {"Content-Type": "application/json"} | reply.headers
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
                    self.close_connection = True

            def _drip(self, reply: Scripted, payload: bytes) -> None:
                """Each byte well within any read timeout; the whole reply far past it."""
                headers = {"Content-Type": "application/json"} | reply.headers | {"Content-Length": str(len(payload))}
                head = f"HTTP/1.1 {reply.status} OK\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
                self.close_connection = True
                for byte in head.encode() + payload:
                    if server._closed.is_set():
                        return
                    try:
                        self.wfile.write(bytes([byte]))
                    except OSError:  # the client gave up
                        return
                    time.sleep(reply.drip_s)

            do_GET = do_POST = do_DELETE = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-llm-server", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def push(self, body: Any = b"", status: int = 200, headers: dict[str, str] | None = None, delay_s: float = 0.0,
             drip_s: float = 0.0) -> None:
        """Queue the next response."""
        with self._lock:
            self.queue.append(Scripted(status, body, dict(headers or {}), delay_s, drip_s))

    def _next(self, received: Received) -> Scripted:
        with self._lock:
            self.requests.append(received)
            if self.queue:
                return self.queue.popleft()
        if self.responder is not None:
            return self.responder(received)
        return Scripted(500, {"error": {"code": 500, "message": "fake server: nothing scripted", "status": "INTERNAL"}})

    def close(self) -> None:
        self._closed.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLMServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def chat_completion(content: str | None = None, calls: Sequence[tuple[str, dict[str, Any]]] = ()) -> dict[str, Any]:
    """An OpenAI chat completion: ``content`` and/or tool ``calls`` (name, arguments), ids call_0, call_1..."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"id": f"call_{i}", "type": "function",
                                  "function": {"name": name, "arguments": json.dumps(args)}}
                                 for i, (name, args) in enumerate(calls)]
    return {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}
