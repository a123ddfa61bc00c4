"""A timer that stops a running statement at the end of its budget, for engines with no
statement timeout of their own (DuckDB) or as a backstop to the server's (MySQL)."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Watchdog:
    """Calls ``stop`` once ``after_s`` seconds have passed, unless cancelled first; ``fired``
    says whether it did (the statement then ended as a timeout, whatever error it raised)."""

    def __init__(self, stop: Callable[[], None], after_s: float) -> None:
        self.fired = False
        self._stop = stop
        self._timer = threading.Timer(max(0.0, after_s), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        self._stop()

    def cancel(self) -> None:
        self._timer.cancel()
