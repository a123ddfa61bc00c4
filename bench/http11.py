"""A minimal HTTP/1.1 keep-alive server on a bare asyncio protocol, for the benchmark fakes.

No thread per request and no framework: the fakes share the machine's cores with the harness
they serve, so each request should cost them as little CPU as possible. It understands what
httpx and google-genai send (a request line, headers, a ``Content-Length`` body; one request at
a time per connection) and nothing more; anything else gets a 400 and the connection closes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

_REASONS = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 405: b"Method Not Allowed"}
_MAX_HEAD = 64 * 1024


@dataclass
class Response:
    status: int
    body: bytes
    content_type: bytes = b"application/json"
    delay_s: float = 0.0  # answer after this long, without holding up other connections


Handler = Callable[[str, str, bytes], Response]  # (method, path, body) -> response


class _Connection(asyncio.Protocol):
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.waiting = False  # a delayed response is pending: read nothing more until it is sent

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.waiting:
            self._serve()

    def _serve(self) -> None:
        while self.transport is not None and not self.waiting:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > _MAX_HEAD:
                    self._fail()
                return
            head = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
            try:
                method, path, _version = head[0].split(" ", 2)
            except ValueError:
                return self._fail()
            length, close = 0, False
            for line in head[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value)
                elif name == "transfer-encoding":
                    return self._fail()  # chunked bodies are not needed by our clients
                elif name == "connection" and value.strip().lower() == "close":
                    close = True
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4:end + 4 + length])
            del self.buffer[:end + 4 + length]
            response = self.handler(method, path, body)
            if response.delay_s > 0:
                self.waiting = True
                asyncio.get_running_loop().call_later(response.delay_s, self._send_later, response, close)
                return
            self._send(response, close)

    def _send_later(self, response: Response, close: bool) -> None:
        self.waiting = False
        self._send(response, close)
        self._serve()

    def _send(self, response: Response, close: bool) -> None:
        if self.transport is None:
            return
        reason = _REASONS.get(response.status, b"Status")
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s\r\n"
            % (response.status, reason, response.content_type, len(response.body), b"connection: close\r\n" if close else b"")
            + response.body
        )
        if close:
            self.transport.close()
            self.transport = None

    def _fail(self) -> None:
        self._send(Response(400, b'{"error": "unsupported request"}'), close=True)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(handler: Handler, host: str, port: int, ready: Callable[[int], None]) -> None:
    """Serve forever on ``host:port`` (0: any free port); ``ready(port)`` once listening."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Connection(handler), host, port, backlog=1024)
    ready(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()
