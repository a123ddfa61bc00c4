"""Process-side expiry of lent logins (:mod:`evalbench.backends.logins`): one daemon thread runs
each login's ``revoke`` when its wall-clock expiry comes. Engines that expire a login themselves
(PostgreSQL's ``VALID UNTIL``) do it only for new password logins; this also ends the sessions
already open, and covers engines with no expiry of their own (MySQL / MariaDB, file copies)."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

_due: list[tuple[float, int, Callable[[], None]]] = []
_order = itertools.count()
_wake = threading.Condition()
_thread: threading.Thread | None = None


def at(when: float, action: Callable[[], None]) -> None:
    """Run ``action`` (in a thread of its own) once the wall clock reaches ``when``."""
    global _thread
    with _wake:
        heapq.heappush(_due, (when, next(_order), action))
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_loop, name="evalbench-login-expiry", daemon=True)
            _thread.start()
        _wake.notify()


def _loop() -> None:
    while True:
        with _wake:
            while not _due or _due[0][0] > time.time():
                _wake.wait(None if not _due else max(0.01, _due[0][0] - time.time()))
            _, _, action = heapq.heappop(_due)
        # a thread each: one slow revoke does not hold up the next login's expiry
        threading.Thread(target=_run, args=(action,), name="evalbench-login-revoke", daemon=True).start()


def _run(action: Callable[[], None]) -> None:
    try:
        action()
    except Exception:
        log.warning("a lent login's expiry failed", exc_info=True)
