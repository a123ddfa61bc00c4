"""HTTP for the network agents and model clients: the conversation deadline on every socket
read, and a cap on the size of a reply.

httpx's timeouts are per read: an agent that sends its reply a byte at a time never times out.
:class:`DeadlineBackend` (an httpcore network backend) shortens every connect, read and write
to the time left before the conversation's deadline (:mod:`evalbench.core.deadline`), so the whole
request — headers and body — ends by it; :func:`request_bounded` brings that deadline closer
for one request (the adapter's ``timeout_s``). Reads wait in short slices so that a cancelled run
(Ctrl-C) does not wait for a slow agent.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable, Mapping

import httpcore
import httpx

from evalbench.core import deadline

SLICE_S = deadline.SLICE_S  # a blocked read looks at the deadline and at cancellation this often
MAX_REPLY_BYTES = 32 * 1024 * 1024  # an agent's HTTP reply, decoded; larger is a protocol failure


class ReplyTooLarge(Exception):
    """The reply's body is larger than the cap; it was not read further."""


def _left(limit: float | None) -> float | None:
    """Seconds left before ``limit`` (a monotonic time) and the deadline, whichever is first."""
    left = deadline.remaining()
    if limit is not None:
        mine = limit - time.monotonic()
        left = mine if left is None else min(left, mine)
    return left


def _clamped(timeout: float | None, error: type[Exception]) -> float | None:
    left = deadline.remaining()
    if left is None:
        return timeout
    if left <= 0:
        raise error("the conversation deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        limit = None if timeout is None else time.monotonic() + timeout
        while True:
            if deadline.cancelled():
                raise httpcore.ReadError("the run was cancelled")
            left = _left(limit)
            if left is not None and left <= 0:
                raise httpcore.ReadTimeout("no reply in time" if limit is not None and time.monotonic() >= limit
                                           else "the conversation deadline has passed")
            try:
                return self._inner.read(max_bytes, SLICE_S if left is None else min(SLICE_S, left))
            except httpcore.ReadTimeout:
                continue  # nothing consumed: look at the deadline and at cancellation, then wait again

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _clamped(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, _clamped(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> object:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.SyncBackend):
    """httpcore's socket backend, with every stream bounded by the conversation deadline."""

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None) -> httpcore.NetworkStream:
        stream = super().connect_tcp(host, port, _clamped(timeout, httpcore.ConnectTimeout), local_address, socket_options)
        return _DeadlineStream(stream)

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(super().connect_unix_socket(path, _clamped(timeout, httpcore.ConnectTimeout), socket_options))


# One pool per endpoint, shared by every runner: httpx keeps at most 20 idle connections by
# default, so with more runners than that each call beyond the 20th would connect again.
POOL_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=512)


def deadline_transport(*, verify: ssl.SSLContext | str | bool = True, limits: httpx.Limits = POOL_LIMITS) -> httpx.HTTPTransport:
    """An ``httpx.HTTPTransport(verify=..., limits=...)`` whose connections honour the conversation
    deadline (and, unless ``limits`` is given, keep up to 512 connections open for reuse)."""
    transport = httpx.HTTPTransport(verify=verify, limits=limits)
    pool = getattr(transport, "_pool", None)
    # httpx does not take a network backend; its connection pool keeps one (httpcore >= 1.0)
    if isinstance(pool, httpcore.ConnectionPool) and hasattr(pool, "_network_backend"):
        pool._network_backend = DeadlineBackend()
    return transport


def request_bounded(client: httpx.Client, method: str, url: str, *, total_s: float | None,
                    max_bytes: int = MAX_REPLY_BYTES, content: bytes | None = None, json: object = None,
                    headers: Mapping[str, str] | None = None) -> httpx.Response:
    """``client.request(...)`` ending within ``total_s`` seconds (and by the deadline) however
    slowly the reply comes (``httpx.ReadTimeout`` after), reading at most ``max_bytes`` of
    decoded body (:class:`ReplyTooLarge` beyond; a gzip bomb stops there too). The client must
    use :func:`deadline_transport`."""
    with deadline.capped(total_s), client.stream(method, url, content=content, json=json, headers=headers) as response:
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > max_bytes:
                raise ReplyTooLarge(f"the reply is larger than {max_bytes} bytes")
            chunks.append(chunk)
    kept = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
    return httpx.Response(response.status_code, headers=kept, content=b"".join(chunks), request=response.request)
