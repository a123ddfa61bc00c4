"""The conversation deadline, seen by everything that waits on the conversation's behalf.

Cancelling a run (Ctrl-C, SIGTERM) is process-wide: :func:`cancel` makes every such wait end
soon (an HTTP read within a fraction of a second), and no new test-case process starts.

A conversation's deadline starts when it is admitted (not when it is queued). The stage that
works for it sets the deadline for its thread with :func:`within`; the agent's HTTP reads, the
sandbox's statement timeouts, the virtual user's model calls and the test-case runner take
:func:`remaining` as their budget, so one deadline bounds the whole conversation however its time
is spent (a reply sent a byte at a time, a script of many slow statements, ...).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_CANCELLED = threading.Event()
_AT: ContextVar[float | None] = ContextVar("evalbench_deadline", default=None)  # time.monotonic() value


@contextmanager
def within(at: float | None) -> Iterator[None]:
    """Work done in this block (this thread) must end by ``at`` (a ``time.monotonic()`` value;
    None: no deadline)."""
    token = _AT.set(at)
    try:
        yield
    finally:
        _AT.reset(token)


def remaining() -> float | None:
    """Seconds left before the current deadline (never negative), or None without a deadline."""
    at = _AT.get()
    return None if at is None else max(0.0, at - time.monotonic())


def budget(limit: float | None) -> float | None:
    """``limit`` (seconds, None: unlimited) shortened to the time left before the deadline."""
    left = remaining()
    if left is None:
        return limit
    return left if limit is None else min(limit, left)


def passed() -> bool:
    left = remaining()
    return left is not None and left <= 0.0


def cancel() -> None:
    """The run is being cancelled: waits on its behalf end as soon as they look."""
    _CANCELLED.set()


def cancelled() -> bool:
    return _CANCELLED.is_set()


def reset_cancel() -> None:
    """A new run starts in this process."""
    _CANCELLED.clear()
