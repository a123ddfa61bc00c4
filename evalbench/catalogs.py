"""What agents may learn about a database once it is provisioned: its schema as text, and the
results of read-only queries through its sandbox (the simulated agents ask for them)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class SchemaCatalog:
    """Schema text per (dialect, database), described once, when an agent first asks."""

    def __init__(self) -> None:
        self._sources: dict[tuple[str, str], Callable[[], str]] = {}
        self._cache: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def register(self, dialect: str, database: str, source: Callable[[], str]) -> None:
        self._sources[(dialect, database)] = source

    def __call__(self, dialect: str, database: str) -> str:
        key = (dialect, database)
        with self._lock:
            if key not in self._cache:
                source = self._sources.get(key)
                self._cache[key] = source() if source else ""
            return self._cache[key]


class QueryCatalog:
    """Read-only queries per (dialect, database) through its sandbox, once it is provisioned."""

    def __init__(self) -> None:
        self._sandboxes: dict[tuple[str, str], Any] = {}

    def register(self, dialect: str, database: str, sandbox: Any) -> None:
        self._sandboxes[(dialect, database)] = sandbox

    def __call__(self, dialect: str, database: str, sql: str) -> list[tuple[Any, ...]] | None:
        sandbox = self._sandboxes.get((dialect, database))
        if sandbox is None:
            return None
        result = sandbox.execute(sql, mode="read")
        return None if result.error is not None or result.truncated else result.rows
