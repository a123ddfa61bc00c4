"""Limits and retries shared by the network agents.

A :class:`CallLimiter` bounds calls per minute (a real rate, spaced by a token bucket) and calls in
flight (a semaphore). :func:`backoff_delay` gives exponential backoff with full jitter that
honours ``Retry-After``. Which failures may be retried is the adapter's decision: only requests
that cannot have reached the agent (connection refused, 429, 503 before processing).
"""

from __future__ import annotations

import email.utils
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from evalbench.core import deadline
from evalbench.core.ratelimit import RateLimiter, WaitTooLong, concurrency_share

# Statuses that say the request was not processed: safe to send again after a backoff.
RETRY_STATUSES = frozenset({429, 503})


class CallLimiter:
    def __init__(self, per_minute: float | None = None, max_concurrency: int | None = None) -> None:
        self._rate = RateLimiter(per_minute) if per_minute else None
        self._slots = threading.BoundedSemaphore(concurrency_share(max_concurrency)) if max_concurrency else None

    @contextmanager
    def slot(self) -> Iterator[float]:
        """Hold a concurrency slot and a rate token for one call; yields the seconds waited.
        Waits end at the deadline: :class:`~evalbench.core.deadline.Expired` (the call is not made)."""
        started = time.monotonic()
        slots = self._slots
        if slots is not None:
            deadline.wait_for(lambda timeout_s: slots.acquire(timeout=timeout_s), "a call slot (max_concurrency)")
        try:
            if self._rate is not None:
                try:
                    self._rate.acquire(deadline.remaining())
                except WaitTooLong as exc:
                    raise deadline.Expired(f"the rate limit (execs_per_minute) would hold the call past the deadline: {exc}") from None
            yield time.monotonic() - started
        finally:
            if slots is not None:
                slots.release()


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def backoff_delay(attempt: int, base_s: float, max_s: float, retry_after: float | None = None,
                  rng: random.Random | None = None) -> float:
    """Delay before retry number ``attempt`` (0-based): full jitter over an exponential window,
    never shorter than the server's ``Retry-After``, never longer than ``max_s``."""
    window = min(max_s, base_s * (2**attempt))
    delay = (rng or random).uniform(0, window)
    if retry_after is not None:
        delay = max(delay, retry_after)
    left = deadline.remaining()  # never sleep past the conversation's deadline: the next try then times out
    return min(delay, max_s) if left is None else min(delay, max_s, left)
