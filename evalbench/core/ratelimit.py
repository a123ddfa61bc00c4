"""A thread-safe limiter for a real rate (requests per minute), not a sleep in a slot; and the
share of every limit that this process may use when it is one of several shards of a run."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

# A shard of a run split n ways (``--shard i/n``, ``--workers n``, ``--executor ray``) runs beside
# the others against the same agent, model API and databases: a configured limit (a quota) is
# theirs together, so each takes 1/n of every rate and of every concurrency limit.
_SHARES = 1


@contextmanager
def split_between(shards: int) -> Iterator[None]:
    """Within this block, every limit built is this process's 1/``shards`` share."""
    global _SHARES
    before, _SHARES = _SHARES, max(1, shards)
    try:
        yield
    finally:
        _SHARES = before


def rate_share(per_minute: float) -> float:
    return per_minute / _SHARES


def concurrency_share(limit: int) -> int:
    return max(1, limit // _SHARES)


class WaitTooLong(Exception):
    """A rate-limited request could not start within the time it had."""


class RateLimiter:
    """Spaces acquisitions so that at most ``per_minute`` start in any minute on average,
    allowing a burst of up to ``burst`` at once."""

    def __init__(self, per_minute: float, burst: int = 1) -> None:
        if per_minute <= 0:
            raise ValueError("per_minute must be positive")
        self.interval = 60.0 / rate_share(per_minute)
        self.burst = max(1, burst)
        self._lock = threading.Lock()
        self._next = time.monotonic()

    def acquire(self, max_wait_s: float | None = None) -> float:
        """Block until a request may start; returns the seconds waited. A wait longer than
        ``max_wait_s`` is not begun: :class:`WaitTooLong` is raised and no request is counted."""
        with self._lock:
            now = time.monotonic()
            # allow up to `burst` requests of credit, never more
            self._next = max(self._next, now - self.interval * (self.burst - 1))
            start = self._next
            if max_wait_s is not None and start - now > max_wait_s:
                raise WaitTooLong(f"the next request may start in {start - now:.1f} s, past the {max_wait_s:.1f} s left")
            self._next = start + self.interval
        wait = start - now
        if wait > 0:
            time.sleep(wait)
            return wait
        return 0.0
