"""Sandboxed SQL on a SQLite file.

Reads run on connections opened ``mode=ro`` (the library refuses every write) with
``PRAGMA query_only``; writes (management tasks, preprocess SQL) run on one read-write connection
inside a transaction that is always rolled back. On every connection an authorizer refuses
``ATTACH``/``DETACH`` (no other file can be opened), ``PRAGMA`` and transaction control from the
SQL it runs; extension loading is off (the library's default) and one value may not exceed
``MAX_LENGTH`` bytes. The time budget is enforced by a progress handler that interrupts the
statement; the row cap by fetching ``max_rows + 1`` rows.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any
from urllib.parse import quote

from evalbench import deadline
from evalbench.backends.admission import admit, admit_script, rate_limiter
from evalbench.backends.base import (
    Actor,
    DatabaseUnavailable,
    ExecutionResult,
    Mode,
    PreprocessErrors,
    SandboxLimits,
)
from evalbench.backends.fingerprint import SCHEMA_KEY, Fingerprint, rows_digest
from evalbench.backends.pool import Checkout, SharedExclusive
from evalbench.statements import split_statements

MAX_LENGTH = 16 * 1024 * 1024  # bytes of one string or blob (randomblob(1e9) is refused, not allocated)
_PROGRESS_STEPS = 2_000  # virtual machine steps between two looks at the clock
# what the authorizer refuses in SQL that is not the harness's own
_DENIED = {sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH, sqlite3.SQLITE_PRAGMA, sqlite3.SQLITE_TRANSACTION,
           sqlite3.SQLITE_SAVEPOINT}
DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}


class _Guard:
    """Per-connection state the authorizer and the progress handler read."""

    def __init__(self) -> None:
        self.trusted = False  # the harness's own statements (BEGIN, ROLLBACK, PRAGMA)
        self.end = float("inf")  # monotonic time at which the running statement is interrupted

    def authorize(self, action: int, arg1: Any, arg2: Any, _db: Any, _source: Any) -> int:
        if self.trusted:
            return sqlite3.SQLITE_OK
        if action in _DENIED:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION and str(arg2).lower() in DENIED_FUNCTIONS:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def progress(self) -> int:
        return 1 if time.monotonic() > self.end or deadline.cancelled() else 0


class SQLiteSandbox:
    """Runs golden and agent SQL on one SQLite file, never leaving a change behind."""

    dialect = "sqlite"
    runs_test_cases = False
    conninfo = ""  # no server: test cases (psycopg) cannot run here

    def __init__(self, path: Path, limits: SandboxLimits) -> None:
        self.path = path
        self.timeout_s = limits.statement_timeout_s
        self.max_rows = limits.max_rows
        self.write_lock = threading.RLock()
        self.clones: Any = None
        self._limiter = rate_limiter(limits)
        self._access = SharedExclusive()  # no read while a write transaction is open (see SharedExclusive)
        self._pool: Checkout[tuple[sqlite3.Connection, _Guard]] = Checkout(
            lambda: self._connect(write=False), limits.pool_size, self._connect(write=True))

    def _connect(self, write: bool) -> tuple[sqlite3.Connection, _Guard]:
        uri = f"file:{quote(str(self.path))}?mode={'rw' if write else 'ro'}"
        try:
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False,
                                   timeout=max(1.0, self.timeout_s))
        except sqlite3.Error as exc:
            raise DatabaseUnavailable(f"cannot open {self.path}: {exc}") from None
        guard = _Guard()
        if not write:
            conn.execute("PRAGMA query_only = ON")
        if sys.version_info >= (3, 11):  # Connection.setlimit; on 3.10 the authorizer alone refuses ATTACH
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_LENGTH)
        conn.set_authorizer(guard.authorize)
        conn.set_progress_handler(guard.progress, _PROGRESS_STEPS)
        return conn, guard

    def close(self) -> None:
        for conn, _ in self._pool.drain():
            conn.close()

    def interrupt(self) -> None:
        """Interrupt the statements running now (the run is being cancelled)."""
        for conn, _ in self._pool.busy():
            conn.interrupt()

    def execute(self, sql: str | Sequence[str], *, mode: Mode = "read", preprocess: Sequence[str] = (),
                preprocess_errors: PreprocessErrors = "fail", actor: Actor = "agent") -> ExecutionResult:
        """Run ``sql`` after the trusted ``preprocess`` SQL; the result of the last statement."""
        admission = admit(sql, mode, self.dialect, self.timeout_s)
        if admission.refused:
            return admission.result
        if self._limiter:
            self._limiter.acquire()
        result = admission.result
        end = time.monotonic() + admission.budget_s
        started = time.perf_counter()
        writes = mode == "write" or bool(preprocess)
        with self.write_lock if writes else nullcontext(), self._checkout(writes) as (conn, guard):
            self._transaction(conn, guard, "BEGIN")
            try:
                if self._preprocess(conn, guard, preprocess, result, preprocess_errors, end):
                    if writes and mode == "read":
                        self._trusted(conn, guard, "PRAGMA query_only = ON")
                    self._run_statements(conn, guard, admission.statements, result, end)
            finally:
                self._transaction(conn, guard, "ROLLBACK")
                if writes and mode == "read":
                    self._trusted(conn, guard, "PRAGMA query_only = OFF")
        result.elapsed_s = time.perf_counter() - started
        return result

    @contextmanager
    def write_transaction(self, preprocess: Sequence[str] = (),
                          preprocess_errors: PreprocessErrors = "fail", actor: Actor = "agent") -> Iterator[SQLiteWriteTransaction]:
        """One transaction on the read-write connection, after ``preprocess``, for work that runs
        several scripts on the same starting state (``state_match``): always rolled back."""
        with self.write_lock, self._checkout(True) as (conn, guard):
            self._transaction(conn, guard, "BEGIN")
            try:
                failed = ExecutionResult()
                self._preprocess(conn, guard, preprocess, failed, preprocess_errors, time.monotonic() + self.timeout_s)
                yield SQLiteWriteTransaction(self, conn, guard, failed.error)
            finally:
                self._transaction(conn, guard, "ROLLBACK")

    @contextmanager
    def _checkout(self, write: bool) -> Iterator[tuple[sqlite3.Connection, _Guard]]:
        with self._access.exclusive() if write else self._access.shared(), self._pool(write) as pair:
            try:
                yield pair
            finally:
                pair[1].end = float("inf")

    def _trusted(self, conn: sqlite3.Connection, guard: _Guard, statement: str) -> None:
        guard.trusted = True
        try:
            conn.execute(statement)
        finally:
            guard.trusted = False

    def _transaction(self, conn: sqlite3.Connection, guard: _Guard, statement: str) -> None:
        if statement == "ROLLBACK" and not conn.in_transaction:
            return  # e.g. a statement error that ended it
        try:
            self._trusted(conn, guard, statement)
        except sqlite3.OperationalError as exc:
            raise DatabaseUnavailable(f"{self.path}: {exc}") from exc

    def _preprocess(self, conn: sqlite3.Connection, guard: _Guard, texts: Sequence[str], result: ExecutionResult,
                    errors: PreprocessErrors, end: float) -> bool:
        """Run the trusted preprocess SQL; False (with the error on ``result``) when it failed."""
        for index, text in enumerate(texts):
            if errors == "stop":
                self._trusted(conn, guard, f"SAVEPOINT evalbench_pre_{index}")
            guard.end = end
            try:
                for statement in split_statements(text, self.dialect):
                    conn.execute(statement).fetchall()
            except sqlite3.Error as exc:
                if errors == "stop":  # undone alone; the texts after it are not run (execute_queries)
                    self._trusted(conn, guard, f"ROLLBACK TO SAVEPOINT evalbench_pre_{index}")
                    return True
                verb = "timed out" if _interrupted(exc) else "failed"
                result.error, result.error_kind = f"preprocess_sql {verb}: {exc}", "preprocess"
                return False
            finally:
                guard.end = float("inf")
        return True

    def _run_statements(self, conn: sqlite3.Connection, guard: _Guard, statements: list[str], result: ExecutionResult,
                        end: float) -> None:
        """Run the statements in the open transaction within ``end``; the last one's rows go to
        ``result``; the first error stops them."""
        guard.end = end
        try:
            for index, statement in enumerate(statements):
                cursor = conn.execute(statement)
                if index < len(statements) - 1:
                    for _ in cursor:  # a query that is not the last still runs to its end (and is timed)
                        pass
                    continue
                rows = cursor.fetchmany(self.max_rows + 1) if cursor.description is not None else []
                result.truncated = len(rows) > self.max_rows
                result.rows = [tuple(row) for row in rows[: self.max_rows]]
                result.columns = [c[0] for c in cursor.description] if cursor.description is not None else []
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
            guard.end = float("inf")


class SQLiteWriteTransaction:
    """What :meth:`SQLiteSandbox.write_transaction` yields: scripts run under savepoints."""

    def __init__(self, sandbox: SQLiteSandbox, conn: sqlite3.Connection, guard: _Guard, preprocess_error: str | None) -> None:
        self.sandbox, self.conn, self.guard = sandbox, conn, guard
        self.preprocess_error = preprocess_error
        self._savepoints = 0

    def run(self, texts: Sequence[str], inspect: Any = None) -> tuple[ExecutionResult, Any]:
        """Run a script (write-mode statements only), then ``inspect(self)``; both undone."""
        admission = admit_script(texts, "sqlite")
        statements, result = admission.statements, admission.result
        if admission.refused:
            return result, None
        self._savepoints += 1
        name = f"evalbench_run_{self._savepoints}"
        self.sandbox._trusted(self.conn, self.guard, f"SAVEPOINT {name}")
        inspected = None
        try:
            self.sandbox._run_statements(self.conn, self.guard, statements, result,
                                         time.monotonic() + self.sandbox.timeout_s)
            if result.error is None and inspect is not None:
                inspected = inspect(self)
        finally:
            self.sandbox._trusted(self.conn, self.guard, f"ROLLBACK TO SAVEPOINT {name}")
        return result, inspected

    def rows(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        """A harness query (trusted SQL) in the current state."""
        self.guard.trusted = True
        try:
            return self.conn.execute(query, params or ()).fetchall()
        finally:
            self.guard.trusted = False

    def fingerprint(self, statements: Sequence[str]) -> Fingerprint:
        """The whole database (SQLite databases are small): the schema and every table's rows."""
        schema = sorted(tuple(r) for r in self.rows(
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"))
        state: Fingerprint = {SCHEMA_KEY: rows_digest(schema)}
        for (table,) in self.rows("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"):
            quoted = '"' + table.replace('"', '""') + '"'
            state[table.lower()] = rows_digest(self.rows(f"SELECT * FROM {quoted}"))
        return state


# the database's state, not the SQL: another process holds the file, or left a hot journal
_CONTENTION = ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_READONLY_ROLLBACK", "SQLITE_READONLY_RECOVERY", "SQLITE_IOERR")


def _sql_kind(exc: sqlite3.Error) -> Any:
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
