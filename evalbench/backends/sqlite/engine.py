"""SQLite inside an engine process (:mod:`evalbench.backends.engine_server`): one connection,
one request at a time.

A reader opens the database file ``mode=ro`` with ``PRAGMA query_only`` (the library refuses
every write, temporary objects included); the writer first copies the file (SQLite's backup API)
and opens the copy read-write, every execution in a transaction that is rolled back. On every
connection an authorizer refuses ``ATTACH``/``DETACH``, ``PRAGMA``, transaction control and
savepoints from the SQL it runs, and the functions that reach files or load code; no other
database may be attached and one value may not exceed ``MAX_LENGTH`` bytes. The time budget is
a progress handler that interrupts the statement (the harness kills the process when a single
function call never lets it run); results are read within the row and byte caps.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from evalbench.backends.engine_server import EngineFailure, collect, reply_of
from evalbench.backends.fingerprint import SCHEMA_KEY, Fingerprint, rows_digest
from evalbench.backends.result_cap import ResultCap
from evalbench.core.execution_result import ErrorKind, ExecutionResult

if TYPE_CHECKING:
    from evalbench.backends.base import HarnessRow, QueryParams

MAX_LENGTH = 16 * 1024 * 1024  # bytes of one string or blob (randomblob(1e9) is refused, not allocated)
_PROGRESS_STEPS = 2_000  # virtual machine steps between two looks at the clock
# what the authorizer refuses in SQL that is not the harness's own
_DENIED = {sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH, sqlite3.SQLITE_PRAGMA, sqlite3.SQLITE_TRANSACTION,
           sqlite3.SQLITE_SAVEPOINT}
DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}
# the database's state, not the SQL: another process holds the file, or left a hot journal
_CONTENTION = ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_READONLY_ROLLBACK", "SQLITE_READONLY_RECOVERY", "SQLITE_IOERR")


class _Guard:
    """Per-connection state the authorizer and the progress handler read."""

    def __init__(self) -> None:
        self.trusted = False  # the harness's own statements (BEGIN, ROLLBACK, PRAGMA)
        self.end = float("inf")  # monotonic time at which the running statement is interrupted

    def authorize(self, action: int, arg1: str | None, arg2: str | None, _db: str | None, _source: str | None) -> int:
        if self.trusted:
            return sqlite3.SQLITE_OK
        if action in _DENIED:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION and str(arg2).lower() in DENIED_FUNCTIONS:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def progress(self) -> int:
        return 1 if time.monotonic() > self.end else 0


class SQLiteEngine:
    """One connection: a reader of the file, or the writer of a private copy of it."""

    def __init__(self, path: str, copy: str | None, max_rows: int, max_bytes: int, timeout_s: float, **_: object) -> None:
        self.max_rows, self.max_bytes, self.busy_s = max_rows, max_bytes, max(1.0, timeout_s)
        self.write = copy is not None
        self.file = Path(copy) if copy is not None else Path(path)
        if copy is not None:
            _copy(Path(path), Path(copy))
        self.guard = _Guard()
        self.conn = self._connect()
        self.actor: str | None = None
        self._savepoints = 0

    def _connect(self) -> sqlite3.Connection:
        uri = f"file:{quote(str(self.file))}?mode={'rw' if self.write else 'ro'}"
        try:
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=self.busy_s)
            if not self.write:
                conn.execute("PRAGMA query_only = ON")
        except sqlite3.Error as exc:
            raise EngineFailure(f"cannot open {self.file}: {exc}") from None
        if sys.version_info >= (3, 11):  # Connection.setlimit; on 3.10 the authorizer alone refuses ATTACH
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_LENGTH)
        conn.set_authorizer(self.guard.authorize)
        conn.set_progress_handler(self.guard.progress, _PROGRESS_STEPS)
        return conn

    def _as(self, actor: str) -> None:
        """A new connection when another actor's SQL ran on this one (``changes()``,
        ``last_insert_rowid()`` and the like would tell one about the other's work)."""
        if self.actor not in (None, actor):
            self.conn.close()
            self.conn = self._connect()
        self.actor = actor

    # ---------------------------------------------------------------- requests

    def op_execute(self, statements: list[str], mode: str, preprocess: list[list[str]], preprocess_errors: str,
                   budget_s: float, actor: str) -> dict[str, object]:
        self._as(actor)
        result = ExecutionResult(statements=len(statements))
        end = time.monotonic() + budget_s
        self._transaction("BEGIN")
        try:
            if self._preprocess(preprocess, result, preprocess_errors, end):
                if self.write and mode == "read":
                    self._trusted("PRAGMA query_only = ON")
                self._run_statements(statements, result, end)
        finally:
            self._transaction("ROLLBACK")
            if self.write and mode == "read":
                self._trusted("PRAGMA query_only = OFF")
        return reply_of(result)

    def op_begin(self, preprocess: list[list[str]], errors: str, budget_s: float, actor: str) -> str | None:
        self._as(actor)
        self._transaction("BEGIN")
        failed = ExecutionResult()
        self._preprocess(preprocess, failed, errors, time.monotonic() + budget_s)
        return failed.error

    def op_script(self, statements: list[str], budget_s: float) -> dict[str, object]:
        self._savepoints += 1
        self._trusted(f"SAVEPOINT evalbench_run_{self._savepoints}")
        result = ExecutionResult(statements=len(statements))
        self._run_statements(statements, result, time.monotonic() + budget_s)
        return reply_of(result)

    def op_undo(self) -> None:
        self._trusted(f"ROLLBACK TO SAVEPOINT evalbench_run_{self._savepoints}")

    def op_end(self) -> None:
        self._transaction("ROLLBACK")

    def op_rows(self, query: str, params: QueryParams) -> list[HarnessRow]:
        cap = ResultCap(2**62, self.max_bytes)
        self.guard.trusted = True
        try:
            cap.read(self.conn.execute(query, params or ()))
        finally:
            self.guard.trusted = False
        if cap.truncated:
            raise EngineFailure(f"the result of a harness query is over the byte cap ({self.max_bytes} bytes)")
        return cap.rows

    def op_fingerprint(self) -> Fingerprint:
        """The whole database (SQLite databases are small): the schema and every table's rows."""
        schema = sorted(tuple(r) for r in self._all(
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"))
        state: Fingerprint = {SCHEMA_KEY: rows_digest(schema)}
        for (table,) in self._all("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"):
            quoted = '"' + table.replace('"', '""') + '"'
            state[table.lower()] = rows_digest(self._all(f"SELECT * FROM {quoted}"))
        return state

    # ---------------------------------------------------------------- running SQL

    def _all(self, query: str) -> sqlite3.Cursor:
        self.guard.trusted = True  # the authorizer reads it when the statement is prepared, here
        try:
            return self.conn.execute(query)
        finally:
            self.guard.trusted = False

    def _trusted(self, statement: str) -> None:
        self._all(statement)

    def _transaction(self, statement: str) -> None:
        if statement == "ROLLBACK" and not self.conn.in_transaction:
            return  # e.g. a statement error that ended it
        try:
            self._trusted(statement)
        except sqlite3.OperationalError as exc:
            raise EngineFailure(f"{self.file}: {exc}") from exc

    def _preprocess(self, texts: Sequence[list[str]], result: ExecutionResult, errors: str, end: float) -> bool:
        """Run the trusted preprocess SQL; False (with the error on ``result``) when it failed."""
        for index, statements in enumerate(texts):
            if errors == "stop":
                self._trusted(f"SAVEPOINT evalbench_pre_{index}")
            self.guard.end = end
            try:
                for statement in statements:
                    for _ in self.conn.execute(statement):
                        pass
            except sqlite3.Error as exc:
                if errors == "stop":  # undone alone; the texts after it are not run (execute_queries)
                    self._trusted(f"ROLLBACK TO SAVEPOINT evalbench_pre_{index}")
                    return True
                verb = "timed out" if _interrupted(exc) else "failed"
                result.error, result.error_kind = f"preprocess_sql {verb}: {exc}", "preprocess"
                return False
            finally:
                self.guard.end = float("inf")
        return True

    def _run_statements(self, statements: list[str], result: ExecutionResult, end: float) -> None:
        """Run the statements in the open transaction within ``end``; the last one's rows go to
        ``result``; the first error stops them."""
        self.guard.end = end
        try:
            for index, statement in enumerate(statements):
                cursor = self.conn.execute(statement)
                if index < len(statements) - 1:
                    for _ in cursor:  # a query that is not the last still runs to its end (and is timed)
                        pass
                    continue
                collect(cursor, result, self.max_rows, self.max_bytes)
                cursor.close()
        except sqlite3.Error as exc:
            result.columns, result.rows, result.truncated = [], [], False
            if _interrupted(exc):
                result.error, result.error_kind = "canceling statement due to statement timeout", "timeout"
            else:
                result.error, result.error_kind = _message(exc), _sql_kind(exc)
        except (OverflowError, ValueError, MemoryError) as exc:  # a value Python cannot hold
            result.columns, result.rows = [], []
            result.error, result.error_kind = f"{type(exc).__name__}: {exc}", "sql"
        finally:
            self.guard.end = float("inf")


def _copy(source: Path, target: Path) -> None:
    """A consistent copy of the database (its journal or WAL included), by SQLite's backup API."""
    target.unlink(missing_ok=True)
    try:
        src = sqlite3.connect(f"file:{quote(str(source))}?mode=ro", uri=True)
        try:
            dst = sqlite3.connect(target)
            try:
                src.backup(dst)
            finally:
                dst.close()
        finally:
            src.close()
    except sqlite3.Error as exc:
        raise EngineFailure(f"cannot copy {source} to work on: {exc}") from None


def _sql_kind(exc: sqlite3.Error) -> ErrorKind:
    """``syntax`` when SQLite could not parse the statement, ``connection`` when the file was busy
    or being recovered (a ``db_error`` that ``--resume`` runs again), else ``sql``."""
    if str(getattr(exc, "sqlite_errorname", "")).startswith(_CONTENTION):
        return "connection"
    text = str(exc).lower()
    return "syntax" if "syntax error" in text or "incomplete input" in text or "unrecognized token" in text else "sql"


def _interrupted(exc: sqlite3.Error) -> bool:
    return "interrupted" in str(exc).lower()


def _message(exc: sqlite3.Error) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
