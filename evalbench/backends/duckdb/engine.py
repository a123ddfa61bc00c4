"""DuckDB inside an engine process (:mod:`evalbench.backends.engine_server`): one database
instance and one cursor, one request at a time.

A reader opens the database file ``read_only`` (DuckDB lets many processes do that at once, and
refuses every write to it), each execution in a ``READ ONLY`` transaction that is rolled back.
The writer copies the file into the sandbox's scratch folder and opens the copy read-write, each
execution in a transaction that is rolled back. A sequence advances even in rolled-back work, so
after every rollback the writer compares the sequences with what it opened; when one moved, the
copy is made again (each execution, and each script of a ``state_match`` transaction, starts from
the database exactly as setup left it).

The instance's configuration is locked at connect time: no other file or URL
(``enable_external_access = false``), no extension installed or loaded, ``memory_limit`` and
``threads`` per process, spill files in the scratch folder. Every statement is admitted twice: by
the shared admission (in the harness) and here by DuckDB's own parser, which must see exactly one
statement of an allowed type. The time budget is a timer that interrupts the cursor (the harness
kills the process when a single function call never looks at the interrupt).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from evalbench.backends.engine_server import EngineFailure, collect, reply_of
from evalbench.backends.fingerprint import SCHEMA_KEY, Fingerprint, rows_digest
from evalbench.backends.result_cap import ResultCap
from evalbench.backends.watchdog import Watchdog
from evalbench.core.execution_result import ErrorKind, ExecutionResult

if TYPE_CHECKING:
    from evalbench.backends.base import HarnessRow, QueryParams

# DuckDB's statement types each mode allows (its parser's view; SHOW/DESCRIBE/SUMMARIZE are SELECT)
READ_TYPES = frozenset({"SELECT", "EXPLAIN"})
WRITE_TYPES = READ_TYPES | frozenset({"INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER"})
_DRAIN = 64  # rows per fetch when a statement's rows are discarded
_SEQUENCES = "SELECT schema_name, sequence_name, last_value FROM duckdb_sequences() WHERE NOT temporary ORDER BY ALL"


def config(scratch: str, memory_limit: str, threads: int, max_temp: str) -> dict[str, str | bool | int]:
    """The locked configuration of an instance."""
    return {
        "enable_external_access": False,
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
        "allow_community_extensions": False,
        "allow_unsigned_extensions": False,
        "memory_limit": memory_limit,
        "threads": threads,
        "temp_directory": str(Path(scratch) / f"spill-{os.getpid()}"),  # not beside the database file
        "max_temp_directory_size": max_temp,
        "lock_configuration": True,  # last: nothing can change the settings above afterwards
    }


class DuckDBEngine:
    """One instance: a reader of the file, or the writer of a private copy of it."""

    def __init__(self, path: str, copy: str | None, scratch: str, max_rows: int, max_bytes: int, memory_limit: str,
                 threads: int, max_temp: str, **_: object) -> None:
        self.original, self.copy = Path(path), None if copy is None else Path(copy)
        self.max_rows, self.max_bytes = max_rows, max_bytes
        self.config = config(scratch, memory_limit, threads, max_temp)
        self.parser = duckdb.connect(":memory:", config={"enable_external_access": False, "lock_configuration": True})
        self.actor: str | None = None
        self.begun: tuple[list[list[str]], str, float] | None = None  # the open write transaction's preprocess
        self.sequences: list[tuple[object, ...]] = []
        self._open()

    def _open(self, fresh: bool = True) -> None:
        """Open the file (a reader), or the writer's copy of it (a ``fresh`` one: copied again)."""
        try:
            if self.copy is None:
                self.db = duckdb.connect(str(self.original), read_only=True, config=dict(self.config))
            else:
                for suffix in ("", ".wal") if fresh else ():
                    Path(f"{self.copy}{suffix}").unlink(missing_ok=True)
                    if Path(f"{self.original}{suffix}").exists():
                        shutil.copyfile(f"{self.original}{suffix}", f"{self.copy}{suffix}")
                self.db = duckdb.connect(str(self.copy), config=dict(self.config))
        except (duckdb.Error, OSError) as exc:
            raise EngineFailure(f"cannot open {self.original}: {_message(exc)}") from None
        self.cursor = self.db.cursor()
        if fresh and self.copy is not None:
            self.sequences = self.cursor.execute(_SEQUENCES).fetchall()

    def _as(self, actor: str) -> None:
        """The instance again when another actor's SQL ran in it: its caches, memory and
        statistics (``duckdb_memory()``, ``pragma_database_size()``) and a sequence's current
        value would tell one actor about the other's work. Only the shared writer switches."""
        if self.actor not in (None, actor):
            self.db.close()
            self._open(fresh=False)
        self.actor = actor

    # ---------------------------------------------------------------- requests

    def op_execute(self, statements: list[str], mode: str, preprocess: list[list[str]], preprocess_errors: str,
                   budget_s: float, actor: str) -> dict[str, object]:
        self._as(actor)
        result = ExecutionResult(statements=len(statements))
        refusal = self._refuse(statements, mode)
        if refusal is not None:
            result.error, result.error_kind = refusal, "forbidden"
            return reply_of(result)
        end = time.monotonic() + budget_s
        self._begin()
        try:
            if self._preprocess(preprocess, result, preprocess_errors, end):
                self._run_statements(statements, result, end)
        finally:
            self._rollback()
        return reply_of(result)

    def op_begin(self, preprocess: list[list[str]], errors: str, budget_s: float, actor: str) -> str | None:
        self._as(actor)
        self.begun = (preprocess, errors, budget_s)
        self._begin()
        failed = ExecutionResult()
        self._preprocess(preprocess, failed, errors, time.monotonic() + budget_s)
        return failed.error

    def op_script(self, statements: list[str], budget_s: float) -> dict[str, object]:
        result = ExecutionResult(statements=len(statements))
        refusal = self._refuse(statements, "write")
        if refusal is not None:
            result.error, result.error_kind = refusal, "forbidden"
        else:
            self._run_statements(statements, result, time.monotonic() + budget_s)
        return reply_of(result)

    def op_undo(self) -> None:
        """DuckDB has no savepoints: the transaction again, and its preprocess SQL."""
        self._rollback()
        assert self.begun is not None
        preprocess, errors, budget_s = self.begun
        self._begin()
        self._preprocess(preprocess, ExecutionResult(), errors, time.monotonic() + budget_s)

    def op_end(self) -> None:
        self.begun = None
        self._rollback()

    def op_rows(self, query: str, params: QueryParams) -> list[HarnessRow]:
        cap = ResultCap(2**62, self.max_bytes)
        if self.begun is None:  # a reader's harness query: in a transaction of its own
            self._begin()
        try:
            cap.read(self.cursor.execute(query, params) if params else self.cursor.execute(query))
        finally:
            if self.begun is None:
                self._rollback()
        if cap.truncated:
            raise EngineFailure(f"the result of a harness query is over the byte cap ({self.max_bytes} bytes)")
        return cap.rows

    def op_fingerprint(self) -> Fingerprint:
        """The whole database: the schema (tables, columns, views) and every table's rows."""
        schema = self.cursor.execute(
            "SELECT table_schema, table_name, table_type FROM information_schema.tables "
            "WHERE table_catalog = current_database() UNION ALL "
            "SELECT table_schema, table_name || '.' || column_name, data_type FROM information_schema.columns "
            "WHERE table_catalog = current_database()").fetchall()
        state: Fingerprint = {SCHEMA_KEY: rows_digest(schema)}
        tables = self.cursor.execute("SELECT table_schema, table_name FROM information_schema.tables "
                                     "WHERE table_catalog = current_database() AND table_type = 'BASE TABLE'").fetchall()
        for schema_name, table in tables:
            key = table.lower() if schema_name == "main" else f"{schema_name}.{table}".lower()
            state[key] = rows_digest(_stream(self.cursor.execute(f"SELECT * FROM {_quote(schema_name)}.{_quote(table)}")))
        return state

    # ---------------------------------------------------------------- running SQL

    def _refuse(self, statements: Sequence[str], mode: str) -> str | None:
        """Why DuckDB's own parser does not allow ``statements`` in ``mode`` (each must be
        exactly one statement of an allowed type), or None."""
        allowed = READ_TYPES if mode == "read" else WRITE_TYPES
        for statement in statements:
            try:
                parsed = self.parser.extract_statements(statement)
            except duckdb.Error:
                continue  # a syntax error: DuckDB reports it when the statement runs
            if len(parsed) != 1:
                return "one statement at a time: DuckDB reads several statements here"
            kind = str(parsed[0].type).rsplit(".", 1)[-1]
            if kind not in allowed:
                return f"{kind} statements are not allowed here ({mode}-only execution)"
        return None

    def _preprocess(self, texts: Sequence[list[str]], result: ExecutionResult, errors: str, end: float) -> bool:
        """Run the trusted preprocess SQL in the open transaction; False (with the error on
        ``result``) when it failed. With ``errors="stop"`` a failing text is undone alone (the
        transaction is restarted and the texts before it run again) and the texts after it are skipped."""
        for index, statements in enumerate(texts):
            timer = Watchdog(self.cursor.interrupt, end - time.monotonic())
            try:
                for statement in statements:
                    self.cursor.execute(statement)
            except duckdb.Error as exc:
                timer.cancel()
                if errors == "stop":
                    self._rollback()
                    self._begin()
                    return self._preprocess(texts[:index], result, "fail", end)
                verb = "timed out" if timer.fired else "failed"
                result.error, result.error_kind = f"preprocess_sql {verb}: {_message(exc)}", "preprocess"
                return False
            finally:
                timer.cancel()
        return True

    def _run_statements(self, statements: list[str], result: ExecutionResult, end: float) -> None:
        """Run the statements in the open transaction within ``end``; the last one's rows go to
        ``result``; the first error stops them."""
        timer = Watchdog(self.cursor.interrupt, end - time.monotonic())
        try:
            for index, statement in enumerate(statements):
                self.cursor.execute(statement)
                if index < len(statements) - 1:
                    while self.cursor.description is not None and self.cursor.fetchmany(_DRAIN):
                        pass  # a query that is not the last still runs to its end (and is timed)
                    continue
                collect(self.cursor, result, self.max_rows, self.max_bytes)
        except duckdb.Error as exc:
            result.columns, result.rows, result.truncated = [], [], False
            result.error, result.error_kind = classify(exc, timer.fired)
        except (OverflowError, ValueError, MemoryError) as exc:  # a value Python cannot hold
            result.columns, result.rows = [], []
            result.error, result.error_kind = f"{type(exc).__name__}: {exc}", "sql"
        finally:
            timer.cancel()

    def _begin(self) -> None:
        try:
            self.cursor.execute("BEGIN TRANSACTION READ ONLY" if self.copy is None else "BEGIN TRANSACTION")
        except duckdb.Error as exc:
            raise EngineFailure(f"cannot start a transaction: {_message(exc)}") from exc

    def _rollback(self) -> None:
        """Roll back the open transaction (none may be open: an error can end it); a timer that
        fired just as its statement ended may have left an interrupt pending: rolled back again.
        The writer then makes its copy again when a sequence moved."""
        for _ in range(2):
            try:
                self.cursor.execute("ROLLBACK")
                break
            except duckdb.InterruptException:
                continue
            except duckdb.TransactionException:
                break  # no transaction is active
            except duckdb.Error as exc:
                raise EngineFailure(f"cannot roll back: {_message(exc)}") from exc
        if self.copy is not None and self.cursor.execute(_SEQUENCES).fetchall() != self.sequences:
            self.db.close()
            self._open()


def classify(exc: Exception, timed_out: bool) -> tuple[str, ErrorKind]:
    """(message, error kind) of a DuckDB error."""
    if isinstance(exc, duckdb.InterruptException) or timed_out:
        return "canceling statement due to statement timeout", "timeout"
    if isinstance(exc, (duckdb.ConnectionException, duckdb.IOException, duckdb.FatalException)):
        return _message(exc), "connection"
    return _message(exc), "syntax" if isinstance(exc, duckdb.ParserException) else "sql"


def _stream(cursor: duckdb.DuckDBPyConnection) -> Iterator[tuple[object, ...]]:
    while rows := cursor.fetchmany(1024):
        yield from rows


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _message(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
