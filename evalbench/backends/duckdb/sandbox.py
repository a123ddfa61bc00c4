"""Sandboxed SQL on a DuckDB file.

DuckDB lets one process open a file read-write, and within a process a file cannot be open
read-only and read-write at once. Management tasks need writes (always rolled back), so the
sandbox opens the file once, read-write, with a configuration that is locked at connect time:

* ``enable_external_access = false``: no other file or URL can be read or written
  (``read_csv('/etc/passwd')``, ``COPY ... TO``, ``ATTACH``, ``EXPORT DATABASE``, ``INSTALL`` /
  ``LOAD`` are refused by DuckDB), extensions are neither installed nor loaded automatically;
* ``memory_limit`` and ``threads`` bound one database's use of the machine;
* ``lock_configuration = true``: agent SQL cannot ``SET`` any of it back (``SET`` is refused
  before that anyway).

Reads run on a pool of cursors (connections to the same database instance), each execution in
a ``BEGIN TRANSACTION READ ONLY`` transaction that is rolled back: DuckDB itself refuses any
write in it. Writes (management tasks, preprocess SQL) run on one cursor in a read-write
transaction that is always rolled back. Every statement is admitted twice: by the shared
admission (sqlglot's split, the mode's verbs) and by DuckDB's own parser, which must see
exactly one statement of an allowed type, so a text the two split differently never runs a
second statement (``COMMIT`` included). The time budget is a timer that interrupts the cursor;
the row cap is ``fetchmany(max_rows + 1)`` on DuckDB's streamed result.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import duckdb

from evalbench.backends.admission import admit, rate_limiter
from evalbench.backends.base import Actor, DatabaseUnavailable, ExecutionResult, Mode, PreprocessErrors, SandboxLimits
from evalbench.backends.fingerprint import SCHEMA_KEY, Fingerprint, rows_digest
from evalbench.backends.pool import Checkout
from evalbench.backends.watchdog import Watchdog
from evalbench.statements import split_statements

MEMORY_LIMIT = "2GB"  # of one database (all its connections)
THREADS = 2  # DuckDB's worker threads for one database
CONFIG: dict[str, str | int | float | list[str]] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
    "memory_limit": MEMORY_LIMIT,
    "threads": THREADS,
    "lock_configuration": True,  # last: nothing can change the settings above afterwards
}
# DuckDB's statement types each mode allows (its parser's view; SHOW/DESCRIBE/SUMMARIZE are SELECT)
READ_TYPES = frozenset({"SELECT", "EXPLAIN"})
WRITE_TYPES = READ_TYPES | frozenset({"INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER"})
_FETCH = 10_000  # rows per fetch when a statement's rows are discarded
_parsers = threading.local()  # an in-memory connection per thread, for DuckDB's parser


def connect(path: Path) -> Any:
    """The database instance of ``path`` in this process, configured and locked."""
    try:
        return duckdb.connect(str(path), config=dict(CONFIG))
    except duckdb.Error as exc:
        raise DatabaseUnavailable(f"cannot open {path}: {_message(exc)}") from None


class DuckDBSandbox:
    """Runs golden and agent SQL on one DuckDB file, never leaving a change behind."""

    dialect = "duckdb"
    runs_test_cases = False
    conninfo = ""  # no server: test cases (psycopg) cannot run here

    def __init__(self, path: Path, limits: SandboxLimits) -> None:
        self.path = path
        self.timeout_s = limits.statement_timeout_s
        self.max_rows = limits.max_rows
        self.write_lock = threading.RLock()
        self.clones: Any = None
        self._limiter = rate_limiter(limits)
        self._db = connect(path)
        self._checkout: Checkout[Any] = Checkout(self._db.cursor, limits.pool_size, self._db.cursor())

    def close(self) -> None:
        for cursor in self._checkout.drain():
            cursor.close()
        self._db.close()

    def interrupt(self) -> None:
        """Interrupt the statements running now (the run is being cancelled)."""
        for cursor in self._checkout.busy():
            cursor.interrupt()

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        """A harness query (trusted SQL, e.g. the schema) in a read-only transaction."""
        with self._checkout(False) as cursor:
            _begin(cursor, read_only=True)
            try:
                return cursor.execute(query).fetchall()
            finally:
                _rollback(cursor)

    def execute(self, sql: str | Sequence[str], *, mode: Mode = "read", preprocess: Sequence[str] = (),
                preprocess_errors: PreprocessErrors = "fail", actor: Actor = "agent") -> ExecutionResult:
        """Run ``sql`` after the trusted ``preprocess`` SQL; the result of the last statement."""
        admission = admit(sql, mode, self.dialect, self.timeout_s)
        if admission.refused:
            return admission.result
        result = admission.result
        refusal = refuse(admission.statements, mode)
        if refusal is not None:
            result.error, result.error_kind = refusal, "forbidden"
            return result
        if self._limiter:
            self._limiter.acquire()
        end = time.monotonic() + admission.budget_s
        started = time.perf_counter()
        writes = mode == "write" or bool(preprocess)
        with self.write_lock if writes else nullcontext(), self._checkout(writes) as cursor:
            _begin(cursor, read_only=not writes)
            try:
                if run_preprocess(cursor, preprocess, result, preprocess_errors, end):
                    self._run_statements(cursor, admission.statements, result, end)
            finally:
                _rollback(cursor)
        result.elapsed_s = time.perf_counter() - started
        return result

    @contextmanager
    def write_transaction(self, preprocess: Sequence[str] = (),
                          preprocess_errors: PreprocessErrors = "fail", actor: Actor = "agent") -> Iterator[DuckDBWriteTransaction]:
        """One transaction on the writing cursor, after ``preprocess``, for work that runs several
        scripts on the same starting state (``state_match``): always rolled back."""
        with self.write_lock, self._checkout(True) as cursor:
            tx = DuckDBWriteTransaction(self, cursor, list(preprocess), preprocess_errors)
            try:
                tx.start()
                yield tx
            finally:
                _rollback(cursor)

    def _run_statements(self, cursor: Any, statements: list[str], result: ExecutionResult, end: float) -> None:
        """Run the statements in the open transaction within ``end``; the last one's rows go to
        ``result``; the first error stops them."""
        timer = Watchdog(cursor.interrupt, end - time.monotonic())
        try:
            for index, statement in enumerate(statements):
                cursor.execute(statement)
                if index < len(statements) - 1:
                    while cursor.description is not None and cursor.fetchmany(_FETCH):
                        pass  # a query that is not the last still runs to its end (and is timed)
                    continue
                rows = cursor.fetchmany(self.max_rows + 1) if cursor.description is not None else []
                result.truncated = len(rows) > self.max_rows
                result.rows = [tuple(row) for row in rows[: self.max_rows]]
                result.columns = [c[0] for c in cursor.description] if cursor.description is not None else []
        except duckdb.Error as exc:
            result.columns, result.rows, result.truncated = [], [], False
            result.error, result.error_kind = classify(exc, timer.fired)
        except (OverflowError, ValueError, MemoryError) as exc:  # a value Python cannot hold
            result.columns, result.rows = [], []
            result.error, result.error_kind = f"{type(exc).__name__}: {exc}", "sql"
        finally:
            timer.cancel()


class DuckDBWriteTransaction:
    """What :meth:`DuckDBSandbox.write_transaction` yields. DuckDB has no savepoints: a script
    is undone by rolling the transaction back and running the preprocess SQL again."""

    def __init__(self, sandbox: DuckDBSandbox, cursor: Any, preprocess: list[str], errors: PreprocessErrors) -> None:
        self.sandbox, self.cursor = sandbox, cursor
        self.preprocess, self.errors = preprocess, errors
        self.preprocess_error: str | None = None

    def start(self) -> None:
        """Begin the transaction and run the preprocess SQL (the starting state)."""
        _begin(self.cursor, read_only=False)
        failed = ExecutionResult()
        run_preprocess(self.cursor, self.preprocess, failed, self.errors, time.monotonic() + self.sandbox.timeout_s)
        self.preprocess_error = failed.error

    def run(self, texts: Sequence[str], inspect: Any = None) -> tuple[ExecutionResult, Any]:
        """Run a script (write-mode statements only), then ``inspect(self)``; both undone."""
        statements = [s for text in texts for s in split_statements(text, "duckdb")]
        result = ExecutionResult(statements=len(statements))
        if not statements:
            result.error, result.error_kind = "no SQL statement to run", "sql"
            return result, None
        refusal = refuse(statements, "write")
        if refusal is not None:
            result.error, result.error_kind = refusal, "forbidden"
            return result, None
        inspected = None
        try:
            self.sandbox._run_statements(self.cursor, statements, result, time.monotonic() + self.sandbox.timeout_s)
            if result.error is None and inspect is not None:
                inspected = inspect(self)
        finally:
            _rollback(self.cursor)
            self.start()
        return result, inspected

    def rows(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        """A harness query (trusted SQL) in the current state."""
        return self.cursor.execute(query, params or ()).fetchall() if params else self.cursor.execute(query).fetchall()

    def fingerprint(self, statements: Sequence[str]) -> Fingerprint:
        """The whole database: the schema (tables, columns, views) and every table's rows."""
        schema = self.rows("SELECT table_schema, table_name, table_type FROM information_schema.tables "
                           "WHERE table_catalog = current_database() UNION ALL "
                           "SELECT table_schema, table_name || '.' || column_name, data_type FROM information_schema.columns "
                           "WHERE table_catalog = current_database()")
        state: Fingerprint = {SCHEMA_KEY: rows_digest(schema)}
        for schema_name, table in self.rows("SELECT table_schema, table_name FROM information_schema.tables "
                                            "WHERE table_catalog = current_database() AND table_type = 'BASE TABLE'"):
            quoted = f"{_quote(schema_name)}.{_quote(table)}"
            key = table.lower() if schema_name == "main" else f"{schema_name}.{table}".lower()
            state[key] = rows_digest(self.rows(f"SELECT * FROM {quoted}"))
        return state


def refuse(statements: Sequence[str], mode: Mode) -> str | None:
    """Why DuckDB's own parser does not allow ``statements`` in ``mode`` (each must be exactly
    one statement of an allowed type), or None."""
    allowed = READ_TYPES if mode == "read" else WRITE_TYPES
    for statement in statements:
        try:
            parsed = _parser().extract_statements(statement)
        except duckdb.Error:
            continue  # a syntax error: DuckDB reports it when the statement runs
        if len(parsed) != 1:
            return "one statement at a time: DuckDB reads several statements here"
        kind = str(parsed[0].type).rsplit(".", 1)[-1]
        if kind not in allowed:
            return f"{kind} statements are not allowed here ({mode}-only execution)"
    return None


def _parser() -> Any:
    parser = getattr(_parsers, "conn", None)
    if parser is None:
        parser = _parsers.conn = duckdb.connect(":memory:", config={"enable_external_access": False})
    return parser


def run_preprocess(cursor: Any, texts: Sequence[str], result: ExecutionResult, errors: PreprocessErrors,
                   end: float) -> bool:
    """Run the trusted preprocess SQL in the open transaction; False (with the error on
    ``result``) when it failed. With ``errors="stop"`` a failing text is undone alone (the
    transaction is restarted and the texts before it run again) and the texts after it are skipped."""
    for index, text in enumerate(texts):
        timer = Watchdog(cursor.interrupt, end - time.monotonic())
        try:
            for statement in split_statements(text, "duckdb"):
                cursor.execute(statement)
        except duckdb.Error as exc:
            timer.cancel()
            if errors == "stop":
                _rollback(cursor)
                _begin(cursor, read_only=False)
                return run_preprocess(cursor, texts[:index], result, "fail", end)
            verb = "timed out" if timer.fired else "failed"
            result.error, result.error_kind = f"preprocess_sql {verb}: {_message(exc)}", "preprocess"
            return False
        finally:
            timer.cancel()
    return True


def classify(exc: Exception, timed_out: bool) -> tuple[str, Any]:
    """(message, error kind) of a DuckDB error."""
    if isinstance(exc, duckdb.InterruptException) or timed_out:
        return "canceling statement due to statement timeout", "timeout"
    if isinstance(exc, (duckdb.ConnectionException, duckdb.IOException, duckdb.FatalException)):
        return _message(exc), "connection"
    return _message(exc), "syntax" if isinstance(exc, duckdb.ParserException) else "sql"


def _begin(cursor: Any, read_only: bool) -> None:
    try:
        cursor.execute("BEGIN TRANSACTION READ ONLY" if read_only else "BEGIN TRANSACTION")
    except duckdb.Error as exc:
        raise DatabaseUnavailable(f"cannot start a transaction: {_message(exc)}") from exc


def _rollback(cursor: Any) -> None:
    """Roll back the open transaction (none may be open: an error can end it). A timer that
    fired just as its statement ended may have left an interrupt pending: rolled back again."""
    for _ in range(2):
        try:
            cursor.execute("ROLLBACK")
            return
        except duckdb.InterruptException:
            continue
        except duckdb.TransactionException:
            return  # no transaction is active
        except duckdb.Error as exc:
            raise DatabaseUnavailable(f"cannot roll back: {_message(exc)}") from exc


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _message(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
