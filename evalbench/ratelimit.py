"""A thread-safe limiter for a real rate (requests per minute), not a sleep in a slot."""

from __future__ import annotations

import threading
import time


class RateLimiter:
    """Spaces acquisitions so that at most ``per_minute`` start in any minute on average,
    allowing a burst of up to ``burst`` at once."""

    def __init__(self, per_minute: float, burst: int = 1) -> None:
        if per_minute <= 0:
            raise ValueError("per_minute must be positive")
        self.interval = 60.0 / per_minute
        self.burst = max(1, burst)
        self._lock = threading.Lock()
        self._next = time.monotonic()

    def acquire(self) -> float:
        """Block until a request may start; returns the seconds waited."""
        with self._lock:
            now = time.monotonic()
            # allow up to `burst` requests of credit, never more
            self._next = max(self._next, now - self.interval * (self.burst - 1))
            start = self._next
            self._next = start + self.interval
        wait = start - now
        if wait > 0:
            time.sleep(wait)
            return wait
        return 0.0
