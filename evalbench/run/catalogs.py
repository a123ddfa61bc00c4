"""What agents may learn about a database once it is provisioned: its schema as text, and the
results of read-only queries through its sandbox (the simulated agents ask for them)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from evalbench.backends.base import Sandbox
from evalbench.backends.tables import TableInfo, read_tables
from evalbench.core.errors import EvalbenchError
from evalbench.core.execution_result import ExecutionResult

log = logging.getLogger(__name__)


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
        self._sandboxes: dict[tuple[str, str], Sandbox] = {}
        self._tables: dict[tuple[str, str], list[TableInfo]] = {}
        self._lock = threading.Lock()

    def register(self, dialect: str, database: str, sandbox: Sandbox) -> None:
        self._sandboxes[(dialect, database)] = sandbox

    def __call__(self, dialect: str, database: str, sql: str) -> list[tuple[object, ...]] | None:
        """The rows of ``sql``; None when it failed, was cut at the row cap or the database is unknown."""
        result = self.execute(dialect, database, sql)
        return None if result is None or result.error is not None or result.truncated else result.rows

    def execute(self, dialect: str, database: str, sql: str) -> ExecutionResult | None:
        """``sql`` run in read mode (a write is refused by the sandbox); None: unknown database."""
        sandbox = self._sandboxes.get((dialect, database))
        return None if sandbox is None else sandbox.execute(sql, mode="read")

    def tables(self, dialect: str, database: str) -> list[TableInfo]:
        """The database's tables, read once (the first asker waits; [] for an unknown database or
        one whose tables cannot be listed)."""
        key = (dialect, database)
        with self._lock:
            if key not in self._tables:
                sandbox = self._sandboxes.get(key)
                try:
                    self._tables[key] = read_tables(sandbox) if sandbox is not None else []
                except EvalbenchError as exc:
                    log.warning("%s/%s: the discovery tools cannot list its tables: %s", dialect, database, exc)
                    self._tables[key] = []
            return self._tables[key]
