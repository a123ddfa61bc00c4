"""A model or agent call that failed, as one exception every adapter and judge understands.

:class:`CallFailed` carries the ``error_kind`` a turn records and whether the call may be sent
again; :func:`transport_failure` reads an httpx exception as one, with the conversation deadline
deciding between a ``timeout`` and a ``connection`` failure. :func:`truncate` and the two limits
keep what a failure or a raw response puts on the turn bounded.
"""

from __future__ import annotations

from evalbench.core import deadline
from evalbench.core.conversation import ToolCall

__all__ = ["BODY_KEPT", "RAW_MAX_CHARS", "CallFailed", "transport_failure", "truncate"]

RAW_MAX_CHARS = 20_000  # characters of a raw model response kept on the turn
BODY_KEPT = 2_000  # characters of an error body kept in the error message


class CallFailed(Exception):
    """A model call failed. ``kind`` becomes the reply's error_kind; ``retryable`` says whether
    it may be sent again (429, 503, connection errors). ``calls``: the tool calls the turn had
    made before it failed (they are recorded on the error reply)."""

    def __init__(self, message: str, kind: str, retryable: bool = False, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind, self.retryable, self.retry_after = kind, retryable, retry_after
        self.calls: list[ToolCall] = []


def transport_failure(exc: BaseException, base_url: str, timeout_s: float) -> CallFailed | None:
    """An httpx (or httpx2) exception as a :class:`CallFailed`, or None if it is none of theirs.
    Only a failure to connect is retried (nothing was sent); once the request may have reached
    the server — a read timeout, a connection dropped mid-request or mid-reply — it is not sent
    again. After the conversation deadline everything is a ``timeout``."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if not type(exc).__module__.startswith("httpx") or "TransportError" not in names:
        return None
    if deadline.passed():
        return CallFailed("no complete answer before the conversation deadline", "timeout")
    if "ConnectTimeout" in names:
        return CallFailed(f"connect timeout ({base_url})", "connection", retryable=True)
    if "ConnectError" in names:
        return CallFailed(f"cannot connect to {base_url}: {exc}", "connection", retryable=True)
    if "TimeoutException" in names:
        return CallFailed(f"no complete answer within {timeout_s} s", "timeout")
    return CallFailed(f"connection lost during the request ({base_url}): {type(exc).__name__}: {exc}", "connection")


def truncate(text: str | None, limit: int = RAW_MAX_CHARS) -> str | None:
    if text is None:
        return None
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"
