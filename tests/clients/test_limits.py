"""Limits and retry delays of the network agents."""

from __future__ import annotations

import itertools
import random
import threading
import time

from evalbench.clients.limits import CallLimiter, backoff_delay, parse_retry_after


def test_rate_is_spaced_not_slotted():
    limiter = CallLimiter(per_minute=600)  # one call every 0.1 s
    starts = []
    for _ in range(4):
        with limiter.slot():
            starts.append(time.monotonic())
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(gap >= 0.095 for gap in gaps), gaps  # a lower bound: sleeps never end early


def test_concurrency_is_bounded():
    limiter = CallLimiter(max_concurrency=2)
    active, peak = 0, 0
    lock = threading.Lock()

    def call():
        nonlocal active, peak
        with limiter.slot():
            with lock:
                active += 1
                peak = max(peak, active)
            time.sleep(0.02)
            with lock:
                active -= 1

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak == 2


def test_backoff_honours_retry_after_and_caps():
    rng = random.Random(0)
    assert all(0 <= backoff_delay(a, 0.5, 30, None, rng) <= min(30, 0.5 * 2**a) for a in range(10))
    assert backoff_delay(0, 0.5, 30, retry_after=7, rng=rng) == 7
    assert backoff_delay(0, 0.5, 30, retry_after=120, rng=rng) == 30


def test_parse_retry_after():
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past
