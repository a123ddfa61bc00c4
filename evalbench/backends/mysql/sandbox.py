"""Sandboxed SQL on a MySQL / MariaDB database.

Golden and agent SQL run as identities of their own (:mod:`.identities`): golden SQL as the
database's golden users, agent SQL as a user leased for each pooled connection, so no agent
statement can see golden statements or another conversation's in the process list. Reads run
in ``START TRANSACTION READ ONLY`` transactions as a read user (``SELECT`` only); writes
(management tasks, preprocess SQL) as a write user (DML only) in transactions; every transaction
is rolled back and the session reset (``COM_RESET_CONNECTION``: user variables, temporary tables,
prepared statements, named locks), so nothing one execution leaves on a pooled connection reaches
the next. Writes take turns across processes and the counters rolled-back work advanced are put
back after each (:class:`~.harness.Harness`). MySQL commits DDL at once, so DDL is refused in
write mode (and no user may run it), as are writes when a table's engine cannot roll back
(MyISAM...). The time budget is the server's own (MariaDB ``max_statement_time``, MySQL
``max_execution_time``, set before each statement to what is left), with a ``KILL QUERY`` from a
second connection of the same user as a backstop. Rows are read one at a time from an unbuffered
cursor into a :class:`~evalbench.backends.result_cap.ResultCap` (row and byte caps), and a
connection whose result was cut is closed rather than drained.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext, suppress
from itertools import pairwise
from typing import Any, TypeVar

import pymysql
import pymysql.cursors
from sqlglot import TokenType  # explicitly re-exported there (sqlglot.tokens only imports it)
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import TokenError

from evalbench.backends.admission import admit, rate_limiter
from evalbench.backends.base import (
    Actor,
    Clones,
    DatabaseUnavailable,
    ErrorKind,
    ExecutionResult,
    HarnessRow,
    Mode,
    PreprocessErrors,
    QueryParams,
    SandboxLimits,
)
from evalbench.backends.fingerprint import SCHEMA_KEY, Fingerprint, rows_digest
from evalbench.backends.mysql.counters import Counters
from evalbench.backends.mysql.harness import Harness
from evalbench.backends.mysql.identities import READ_PRIVILEGES, WRITE_PRIVILEGES, Identity, Logins
from evalbench.backends.mysql.lending import MySQLLender
from evalbench.backends.mysql.target import MySQLConnection, MySQLTarget, quote
from evalbench.backends.pool import Checkout
from evalbench.backends.result_cap import ResultCap
from evalbench.backends.watchdog import Watchdog
from evalbench.core import deadline
from evalbench.sql.statements import WRITE_KEYWORDS, split_statements, statement_kind

DDL = frozenset({"CREATE", "ALTER", "DROP", "TRUNCATE", "COMMENT", "RENAME"})
_TIMEOUT_CODES = {1969, 3024, 1317, 1028}  # max_statement_time, max_execution_time, interrupted, sort aborted
_LOST_CODES = {2003, 2006, 2013, 2055}
_BACKSTOP_S = 1.0  # the KILL QUERY comes this long after the server's own timeout
_MYSQL = Dialect.get_or_raise("mysql")
_LOCKING = re.compile(r"\bFOR\s+(UPDATE|SHARE)\b|\bLOCK\s+IN\s+SHARE\s+MODE\b", re.IGNORECASE)
_EXECUTABLE_COMMENT = re.compile(r"/\*M?!", re.IGNORECASE)
_RESET_CONNECTION = 0x1F  # COM_RESET_CONNECTION (MySQL 5.7+, MariaDB 10.2+; pymysql's COMMAND.COM_END)
T = TypeVar("T")


class _Conn:
    """One pooled connection and the identity it logs in as."""

    def __init__(self, target: MySQLTarget, identity: Identity) -> None:
        self.target, self.identity = target, identity
        self.conn: MySQLConnection | None = None
        self.dirty = False  # an unread result, or a lost connection: replaced before its next use

    def get(self) -> MySQLConnection:
        if self.conn is None or self.dirty:
            self.discard()
            self.conn = self.target.connect(self.identity.user, self.identity.password, self.target.name)
        return self.conn

    def discard(self) -> None:
        if self.conn is not None:
            with suppress(Exception):  # a connection already broken is closed all the same
                self.conn.close()  # an unread result is not drained: the server stops sending it
        self.conn, self.dirty = None, False

    def kill_query(self) -> None:
        """KILL QUERY from a second connection of the same user (no PROCESS privilege needed)."""
        conn = self.conn
        if conn is None:
            return
        try:
            killer = self.target.connect(self.identity.user, self.identity.password, timeout_s=5)
            try:
                with killer.cursor() as cursor:
                    cursor.execute(f"KILL QUERY {int(conn.thread_id())}")  # type: ignore[no-untyped-call]  # unannotated in pymysql's stubs
            finally:
                killer.close()
        except pymysql.Error:
            pass


class MySQLSandbox:
    """Runs golden and agent SQL on one MySQL / MariaDB database, never leaving a change behind."""

    dialect = "mysql"
    runs_test_cases = False
    conninfo = ""  # test cases hold a psycopg connection: they cannot run here

    def __init__(self, target: MySQLTarget, logins: Logins, limits: SandboxLimits, non_transactional: Sequence[str] = (),
                 setup_counters: Counters | None = None) -> None:
        self.target, self.logins = target, logins
        self.timeout_s = limits.statement_timeout_s
        self.max_rows, self.max_bytes = limits.max_rows, limits.max_result_bytes
        self.non_transactional = list(non_transactional)
        self.write_lock = threading.RLock()
        self.clones: Clones | None = None
        self.lender = MySQLLender(target, logins, limits.statement_timeout_s)  # per-conversation logins
        self._limiter = rate_limiter(limits)
        readers = max(1, limits.pool_size)
        self.harness = Harness(target, logins, setup_counters or {})
        try:
            agents = self.harness.lease([READ_PRIVILEGES] * readers + [WRITE_PRIVILEGES])
        except BaseException:
            self.harness.close()
            raise
        leased = iter(agents[:-1])
        self._pools: dict[str, Checkout[_Conn]] = {
            "agent": Checkout(lambda: _Conn(target, next(leased)), readers, _Conn(target, agents[-1])),
            "golden": Checkout(lambda: _Conn(target, logins.golden_read), readers, _Conn(target, logins.golden_write)),
        }

    def close(self) -> None:
        for pool in self._pools.values():
            for conn in pool.drain():
                conn.discard()
        self.harness.close()

    def interrupt(self) -> None:
        """Interrupt the statements running now (the run is being cancelled)."""
        for pool in self._pools.values():
            for conn in pool.busy():
                conn.kill_query()

    def rows(self, query: str, params: QueryParams = None) -> list[HarnessRow]:
        """A harness query (trusted SQL, e.g. the schema) as the golden read user."""
        with self._pools["golden"](False) as pooled:
            try:
                with pooled.get().cursor() as cursor:
                    cursor.execute(query, params)
                    return list(cursor.fetchall())
            finally:
                _end(pooled)

    def execute(self, sql: str | Sequence[str], *, mode: Mode = "read", preprocess: Sequence[str] = (),
                preprocess_errors: PreprocessErrors = "fail", actor: Actor = "agent") -> ExecutionResult:
        """Run ``sql`` after the trusted ``preprocess`` SQL, as ``actor``'s identity; the result of
        the last statement."""
        admission = admit(sql, mode, self.dialect, self.timeout_s)
        if admission.refused:
            return admission.result
        result = admission.result
        refusal = self.refuse(admission.statements, mode)
        if refusal is not None:
            result.error, result.error_kind = refusal, "forbidden"
            return result
        if self._limiter:
            self._limiter.acquire()
        started = time.perf_counter()
        writes = mode == "write" or bool(preprocess)
        try:
            with self._writing() if writes else nullcontext(), self._pools[actor](writes) as pooled:
                end = time.monotonic() + _budget(self.timeout_s)  # from when the SQL can start (not a wait for a turn)
                self._transaction(pooled, writes, preprocess, preprocess_errors, admission.statements, result, end)
        except DatabaseUnavailable as exc:  # the harness's connection (the write lock, the counters)
            result.columns, result.rows, result.truncated = [], [], False
            result.error, result.error_kind = str(exc), "timeout" if deadline.passed() else "connection"
        result.elapsed_s = time.perf_counter() - started
        return result

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """A write: one at a time in this process and across processes, counters settled around it."""
        with self.write_lock, self.harness.writing():
            yield

    def _transaction(self, pooled: _Conn, writes: bool, preprocess: Sequence[str], errors: PreprocessErrors,
                     statements: list[str], result: ExecutionResult, end: float) -> None:
        try:
            _begin(pooled, "START TRANSACTION" if writes else "START TRANSACTION READ ONLY")
        except pymysql.Error as exc:
            pooled.dirty = True
            result.error, result.error_kind = f"cannot connect: {_message(exc)}", "connection"
            return
        try:
            if self._preprocess(pooled, preprocess, result, errors, end):
                self._run_statements(pooled, statements, result, end)
        finally:
            _end(pooled)

    def refuse(self, statements: Sequence[str], mode: Mode) -> str | None:
        """Why statements the shared admission allowed cannot run on MySQL in ``mode``, or None."""
        if mode != "write":
            if any(_locking_read(statement) for statement in statements):
                return ("locking reads (FOR UPDATE, FOR SHARE, LOCK IN SHARE MODE) are not allowed here: they would "
                        "hold up other conversations' writes (read-only execution)")
            return None
        for statement in statements:
            verb, _ = statement_kind(statement, self.dialect)
            if verb in DDL:
                return (f"{verb} statements are not allowed here: MySQL commits DDL at once, so it could not be "
                        "rolled back (management tasks on MySQL may only change rows)")
            if verb not in WRITE_KEYWORDS:
                return f"{verb or 'this'} statements are not allowed here (write-only execution)"
        if self.non_transactional:
            return (f"writes are not allowed on this database: table(s) {', '.join(self.non_transactional)} use an engine "
                    "that cannot roll back (use InnoDB)")
        return None

    @contextmanager
    def write_transaction(self, preprocess: Sequence[str] = (),
                          preprocess_errors: PreprocessErrors = "fail", actor: Actor = "agent") -> Iterator[MySQLWriteTransaction]:
        """One transaction as ``actor``'s write user, after ``preprocess``, for work that runs
        several scripts on the same starting state (``state_match``): always rolled back."""
        with self._writing(), self._pools[actor](True) as pooled:
            tx = MySQLWriteTransaction(self, pooled, list(preprocess), preprocess_errors)
            try:
                tx.start()
                yield tx
            finally:
                _end(pooled)

    def _limit(self, pooled: _Conn, end: float) -> float:
        """Set the server's time limit to what is left of the budget; the seconds left."""
        left = max(0.001, end - time.monotonic())
        if self.logins.mariadb:
            _plain(pooled.get(), f"SET SESSION max_statement_time = {left:.3f}")
        else:  # MySQL: SELECT only, in milliseconds (the backstop covers the rest)
            _plain(pooled.get(), f"SET SESSION max_execution_time = {max(1, int(left * 1000))}")
        return left

    def _preprocess(self, pooled: _Conn, texts: Sequence[str], result: ExecutionResult, errors: PreprocessErrors,
                    end: float) -> bool:
        """Run the trusted preprocess SQL; False (with the error on ``result``) when it failed."""
        for index, text in enumerate(texts):
            if errors == "stop":
                _plain(pooled.get(), f"SAVEPOINT evalbench_pre_{index}")
            backstop = Watchdog(pooled.kill_query, self._limit(pooled, end) + _BACKSTOP_S)
            try:
                for statement in split_statements(text, self.dialect):
                    _plain(pooled.get(), statement)
            except pymysql.Error as exc:
                if errors == "stop":  # undone alone; the texts after it are not run (execute_queries)
                    _plain(pooled.get(), f"ROLLBACK TO SAVEPOINT evalbench_pre_{index}")
                    return True
                verb = "timed out" if _code(exc) in _TIMEOUT_CODES or backstop.fired else "failed"
                result.error, result.error_kind = f"preprocess_sql {verb}: {_message(exc)}", "preprocess"
                return False
            finally:
                backstop.cancel()
        return True

    def _run_statements(self, pooled: _Conn, statements: list[str], result: ExecutionResult, end: float) -> None:
        """Run the statements in the open transaction within ``end``; the last one's rows go to
        ``result``; the first error stops them."""
        for index, statement in enumerate(statements):
            if time.monotonic() >= end:
                result.columns, result.rows, result.truncated = [], [], False
                result.error, result.error_kind = f"the execution's time budget is spent after {index} statement(s)", "timeout"
                return
            backstop: Watchdog | None = None
            cursor: pymysql.cursors.SSCursor | None = None
            try:
                backstop = Watchdog(pooled.kill_query, self._limit(pooled, end) + _BACKSTOP_S)
                cursor = pooled.get().cursor(pymysql.cursors.SSCursor)
                cursor.execute(statement)
                if index < len(statements) - 1:
                    _drain(cursor)  # a query that is not the last still runs to its end (and is timed)
                    if _cut_short(cursor, end):
                        raise _TimedOut
                    continue
                cap = ResultCap(self.max_rows, self.max_bytes)
                _read(cursor, cap)
                cap.fill(result)
                result.columns = [c[0] for c in cursor.description] if cursor.description is not None else []
                if result.truncated:
                    pooled.dirty = True  # the rest of the result is not drained: the connection is closed
                if _cut_short(cursor, end):
                    raise _TimedOut
            except _TimedOut:
                result.columns, result.rows, result.truncated = [], [], False
                result.error, result.error_kind = "canceling statement due to statement timeout", "timeout"
                return
            except pymysql.Error as exc:
                result.columns, result.rows, result.truncated = [], [], False
                result.error, result.error_kind = classify(exc, backstop is not None and backstop.fired)
                if result.error_kind == "connection":
                    pooled.dirty = True
                return
            finally:
                if backstop is not None:
                    backstop.cancel()
                if cursor is not None and not pooled.dirty:
                    cursor.close()


class MySQLWriteTransaction:
    """What :meth:`MySQLSandbox.write_transaction` yields. Each script runs on the starting state
    and is undone whole: the transaction rolled back, the counters it advanced put back, and the
    preprocess SQL run again, so two identical scripts leave identical states (ids included)."""

    def __init__(self, sandbox: MySQLSandbox, pooled: _Conn, preprocess: list[str], errors: PreprocessErrors) -> None:
        self.sandbox, self.pooled = sandbox, pooled
        self.preprocess, self.errors = preprocess, errors
        self.preprocess_error: str | None = None

    def start(self) -> None:
        """Begin the transaction and run the preprocess SQL (the starting state)."""
        _begin(self.pooled, "START TRANSACTION")
        failed = ExecutionResult()
        self.sandbox._preprocess(self.pooled, self.preprocess, failed, self.errors, time.monotonic() + self.sandbox.timeout_s)
        self.preprocess_error = failed.error

    def run(self, texts: Sequence[str], inspect: Callable[[MySQLWriteTransaction], T] | None = None
            ) -> tuple[ExecutionResult, T | None]:
        """Run a script (write-mode statements, no DDL), then ``inspect(self)``; both undone."""
        statements = [s for text in texts for s in split_statements(text, "mysql")]
        result = ExecutionResult(statements=len(statements))
        if not statements:
            result.error, result.error_kind = "no SQL statement to run", "sql"
            return result, None
        refusal = self.sandbox.refuse(statements, "write")
        if refusal is not None:
            result.error, result.error_kind = refusal, "forbidden"
            return result, None
        inspected: T | None = None
        try:
            self.sandbox._run_statements(self.pooled, statements, result, time.monotonic() + self.sandbox.timeout_s)
            if result.error is None and inspect is not None:
                inspected = inspect(self)
        finally:
            self._restart()
        return result, inspected

    def _restart(self) -> None:
        """Back to the starting state (the counters' DDL commits: nothing of ours may be open)."""
        _end(self.pooled)
        self.sandbox.harness.settle()
        self.start()

    def rows(self, query: str, params: QueryParams = None) -> list[HarnessRow]:
        """A harness query (trusted SQL) in the current state."""
        with self.pooled.get().cursor() as cursor:
            cursor.execute(query, params)
            return list(cursor.fetchall())

    def fingerprint(self, statements: Sequence[str]) -> Fingerprint:
        """The whole database: the schema (tables, columns) and every table's rows."""
        schema = self.rows("SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, ORDINAL_POSITION FROM information_schema.COLUMNS "
                           "WHERE TABLE_SCHEMA = DATABASE()")
        state: Fingerprint = {SCHEMA_KEY: rows_digest(schema)}
        for (table,) in self.rows("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
                                  "AND TABLE_TYPE = 'BASE TABLE'"):
            state[table.lower()] = rows_digest(self.rows(f"SELECT * FROM {quote(table)}"))
        return state


class _TimedOut(Exception):
    """A statement the time limit stopped without an error (see :func:`_cut_short`)."""


def _cut_short(cursor: pymysql.cursors.Cursor, end: float) -> bool:
    """Whether a statement that returned normally was stopped by the time limit: MariaDB ends
    ``SLEEP()`` and ``BENCHMARK()`` with a result (and a warning) rather than an error. A
    statement that ends after the budget is spent is a timeout either way."""
    if time.monotonic() >= end:
        return True
    result = getattr(cursor, "_result", None)
    if result is None or not getattr(result, "warning_count", 0) or getattr(result, "unbuffered_active", False):
        return False  # no warning, or the result is not read to its end (cut at the row cap)
    with cursor.connection.cursor() as warnings:
        warnings.execute("SHOW WARNINGS")
        return any(row[1] in _TIMEOUT_CODES for row in warnings.fetchall())


_PARSE_ERROR = 1064  # ER_PARSE_ERROR: "You have an error in your SQL syntax"


def classify(exc: pymysql.Error, killed: bool) -> tuple[str, ErrorKind]:
    """(message, error kind) of a pymysql error."""
    code = _code(exc)
    if code in _TIMEOUT_CODES or killed:
        return "canceling statement due to statement timeout", "timeout"
    if code in _LOST_CODES or isinstance(exc, pymysql.err.InterfaceError):
        return _message(exc), "connection"
    return _message(exc), "syntax" if code == _PARSE_ERROR else "sql"


def _locking_read(statement: str) -> bool:
    """``FOR UPDATE``, ``FOR SHARE`` or ``LOCK IN SHARE MODE`` outside strings and comments; in
    the text itself when the tokenizer cannot read it or it holds an executable comment (``/*!
    ... */``, ``/*M! ... */``: the server runs what the tokenizer takes for a comment)."""
    if _EXECUTABLE_COMMENT.search(statement):
        return _LOCKING.search(statement) is not None
    try:
        tokens = [(token.token_type, token.text.upper()) for token in _MYSQL.tokenize(statement)]
    except TokenError:
        return _LOCKING.search(statement) is not None
    for (kind, _), (next_kind, next_text) in pairwise(tokens):
        if kind == TokenType.FOR and (next_kind == TokenType.UPDATE or next_text == "SHARE"):
            return True
        if kind == TokenType.LOCK and next_kind == TokenType.IN:
            return True
    return False


def _budget(timeout_s: float) -> float:
    """The statement budget shortened to what is left of the conversation's deadline."""
    left = deadline.budget(timeout_s)
    return timeout_s if left is None else left


def _read(cursor: pymysql.cursors.Cursor, cap: ResultCap) -> None:
    """The result's rows, one at a time, into ``cap`` until it is full or the result ends."""
    if cursor.description is None:
        return
    row = cursor.fetchone()
    while row is not None and cap.add(row):
        row = cursor.fetchone()


def _drain(cursor: pymysql.cursors.Cursor) -> None:
    """Read a result to its end, holding one row at a time."""
    while cursor.description is not None and cursor.fetchone() is not None:
        pass


def _end(pooled: _Conn) -> None:
    """Roll back and reset the session; a connection where that fails is replaced."""
    if pooled.dirty or pooled.conn is None:
        pooled.discard()
        return
    try:
        _reset(pooled.conn)
    except pymysql.Error:
        pooled.discard()


def _reset(conn: Any) -> None:  # pymysql's private protocol calls: not in its stubs
    """COM_RESET_CONNECTION: the transaction rolled back, and user variables, temporary tables,
    prepared statements, HANDLERs, named locks and session variables gone, so a pooled connection
    carries nothing from one execution to the next (pymysql has no call for it)."""
    conn._execute_command(_RESET_CONNECTION, b"")
    conn._read_ok_packet()
    _plain(conn, "SET NAMES utf8mb4, autocommit = 1")  # as the connection was opened


def _begin(pooled: _Conn, statement: str) -> None:
    """Start a transaction; a pooled connection the server closed meanwhile (``wait_timeout``,
    a restart) is replaced once."""
    try:
        _plain(pooled.get(), statement)
    except pymysql.Error as exc:
        if _code(exc) not in _LOST_CODES and not isinstance(exc, pymysql.err.InterfaceError):
            raise
        pooled.discard()
        _plain(pooled.get(), statement)


def _plain(conn: MySQLConnection, statement: str) -> None:
    with conn.cursor() as cursor:
        cursor.execute(statement)


def _code(exc: pymysql.Error) -> int | None:
    return exc.args[0] if exc.args and isinstance(exc.args[0], int) else None


def _message(exc: pymysql.Error) -> str:
    text = str(exc.args[-1] if exc.args else exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
