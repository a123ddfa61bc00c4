"""The conversation deadline, seen by everything that waits on the conversation's behalf.

Cancelling a run (Ctrl-C, SIGTERM) is process-wide: :func:`cancel` makes every such wait end
soon (an HTTP read within a fraction of a second), and no new test-case process starts.

A conversation's deadline starts when it is admitted (not when it is queued). The stage that
works for it sets the deadline for its thread with :func:`within`; the agent's HTTP reads, the
sandbox's statement timeouts, the virtual user's model calls and the test-case runner take
:func:`remaining` as their budget, so one deadline bounds the whole conversation however its time
is spent (a reply sent a byte at a time, a script of many slow statements, ...).

One call (a model request, an agent's HTTP reply) may have a budget of its own (``timeout_s``):
:func:`capped` brings the deadline closer for the call, so the same waits end by whichever comes
first. :func:`call_abandoned_at_deadline` runs a call we cannot bound from inside (a third-party
SDK) in a thread that is given up at the deadline.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")
SLICE_S = 0.25  # a blocked wait looks at the deadline and at cancellation this often

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


@contextmanager
def capped(seconds: float | None) -> Iterator[None]:
    """Work done in this block must also end within ``seconds`` (None: no cap of its own)."""
    if seconds is None:
        yield
        return
    at = time.monotonic() + seconds
    current = _AT.get()
    with within(at if current is None else min(at, current)):
        yield


class Expired(Exception):
    """The deadline passed (or the run was cancelled) before a wait or a call ended."""


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


def wait_for(acquire: Callable[[float], bool], what: str) -> None:
    """``acquire(timeout_s)`` (e.g. a semaphore's) retried in short slices until it succeeds;
    :class:`Expired` when the deadline passes or the run is cancelled first."""
    while True:
        if cancelled():
            raise Expired(f"the run was cancelled while waiting for {what}")
        left = remaining()
        if left is not None and left <= 0:
            raise Expired(f"the deadline passed while waiting for {what}")
        if acquire(SLICE_S if left is None else min(SLICE_S, left)):
            return


def call_abandoned_at_deadline(call: Callable[[], T], what: str) -> T:
    """``call()`` in a daemon thread that sees this thread's deadline (its context is copied):
    its result, or its exception; :class:`Expired` when the deadline passes or the run is
    cancelled first — the thread is then left to finish on its own, its result unused."""
    done = threading.Event()
    outcome: list[tuple[bool, object]] = []

    def target() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # noqa: BLE001 (handed over to the caller)
            outcome.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=contextvars.copy_context().run, args=(target,), name=f"deadline: {what}", daemon=True).start()
    wait_for(done.wait, what)
    ok, value = outcome[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]  # outcome holds (True, the target's return value) here
