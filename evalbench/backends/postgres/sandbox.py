"""Sandboxed SQL execution: golden and agent SQL alike.

Every execution runs in its own transaction that is always rolled back, as the non-superuser
sandbox role, then ``DISCARD ALL`` resets the session; the statement timeout is the budget of
the whole execution (re-armed before every statement with what is left of it, and never beyond
the conversation's deadline: :mod:`evalbench.deadline`), a row cap (rows are
streamed and the query cancelled after ``cap + 1``, to detect truncation), and only the
statement kinds allowed in its mode: ``read`` (queries; the transaction is READ ONLY after
``preprocess_sql``) or ``write`` (data and schema changes of management tasks). Statements go
through the extended query protocol one at a time, which refuses a string of several commands.
"""

from __future__ import annotations

import contextlib
import logging
import select
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy.pool import QueuePool

from evalbench import deadline
from evalbench.backends.admission import admit, admit_script
from evalbench.backends.base import Actor, DatabaseUnavailable, ErrorKind, ExecutionResult, Mode, PreprocessErrors
from evalbench.backends.fingerprint import Fingerprint, written_tables
from evalbench.backends.postgres import state
from evalbench.backends.postgres.pgtypes import register_loaders
from evalbench.ratelimit import RateLimiter
from evalbench.statements import (
    STREAM_KEYWORDS,
    statement_kind,
)

log = logging.getLogger(__name__)

# Every sequence and the value it would restart from: (name, value, is_called) for setval().
_SEQUENCE_STATE = """
SELECT format('%I.%I', schemaname, sequencename), COALESCE(last_value, start_value), last_value IS NOT NULL
FROM pg_sequences
"""

class Sandbox:
    """Runs SQL against one database through a small connection pool."""

    dialect = "postgres"
    runs_test_cases = True  # BIRD-Interact's test cases take a psycopg connection

    def __init__(
        self,
        conninfo: str,
        *,
        pool_size: int,
        statement_timeout_s: float,
        max_rows: int,
        executions_per_minute: int | None = None,
        connect_timeout_s: float = 15.0,
        connect: Callable[..., psycopg.Connection] | None = None,
    ) -> None:
        """``connect(**psycopg kwargs)`` opens a connection as the sandbox role (default: libpq
        with ``conninfo``; a cloud connector's otherwise)."""
        self.conninfo = conninfo  # for work that must connect as the sandbox role itself (test cases)
        self.statement_timeout_ms = max(1, int(statement_timeout_s * 1000))
        self._busy: set[psycopg.Connection] = set()  # connections running an execution (see interrupt)
        self._busy_lock = threading.Lock()
        self.max_rows = max_rows
        self._chunk = min(max_rows + 1, 1000)
        self._limiter = RateLimiter(executions_per_minute, burst=pool_size) if executions_per_minute else None
        self.open_connection = connect or (lambda **kwargs: psycopg.connect(conninfo, **kwargs))
        self._pool = QueuePool(
            lambda: register_loaders(self.open_connection(
                autocommit=True,
                connect_timeout=int(connect_timeout_s),
                prepare_threshold=None,  # no server-side prepared statements: DISCARD ALL follows every execution
                # session defaults: every transaction is read-only unless begun READ WRITE
                options=f"-c statement_timeout={self.statement_timeout_ms} -c default_transaction_read_only=on",
            )),
            pool_size=pool_size,
            max_overflow=0,
            timeout=max(60.0, statement_timeout_s * 4),
            reset_on_return=None,  # every execution ends with its own ROLLBACK
        )
        self.write_lock = threading.RLock()  # re-entered by scorers that run SQL while it is held
        self.on_close: Callable[[], None] | None = None  # e.g. the cloud connector this sandbox connects through
        self.clones: Any = None  # evalbench.backends.postgres.clones.CloneFactory, when test cases can run on copies
        self._warned_sequences = False

    def close(self) -> None:
        self._pool.dispose()
        if self.on_close is not None:
            self.on_close()

    def interrupt(self) -> None:
        """Cancel the statements running now (the run is being cancelled); they end as timeouts."""
        with self._busy_lock:
            busy = list(self._busy)
        for conn in busy:
            with contextlib.suppress(Exception):  # already finished or closed
                conn.cancel_safe(timeout=2.0)  # the protocol's cancel request: no function call, no privilege

    def execute(self, sql: str | Sequence[str], *, mode: Mode = "read", preprocess: Sequence[str] = (),
                preprocess_errors: PreprocessErrors = "fail", actor: Actor = "agent") -> ExecutionResult:
        """Run ``sql`` (one text or several, each possibly holding several statements) after the
        trusted ``preprocess`` SQL, and return the result of the last statement. A failing
        preprocess text fails the execution, or with ``preprocess_errors="stop"`` (BIRD-Interact's
        ``execute_queries``) is undone alone and ends the preprocessing."""
        admission = admit(sql, mode, self.dialect, self.statement_timeout_ms / 1000)
        statements, result = admission.statements, admission.result
        if admission.refused:
            return result
        if self._limiter:
            self._limiter.acquire()
        end = time.monotonic() + admission.budget_s
        # the single-query path needs a SET only when the deadline is nearer than its session default
        near = admission.budget_s * 1000 < self.statement_timeout_ms
        # Executions that may write (write mode, or preprocess_sql) run one at a time per database:
        # sequences are not transactional, so their values are restored after the rollback, and
        # that must not race another writer.
        writes = mode == "write" or bool(preprocess)
        with self.write_lock if writes else nullcontext():
            self._execute(statements, mode, preprocess, result, writes, preprocess_errors, end, near)
        return result

    @contextmanager
    def write_transaction(self, preprocess: Sequence[str] = (), preprocess_errors: PreprocessErrors = "fail", actor: Actor = "agent") -> Iterator[WriteTransaction]:
        """One READ WRITE transaction, as the sandbox role, after ``preprocess``, for work that
        runs several scripts on the same starting state (``state_match``): always rolled back,
        sequences restored, one at a time per database. Raises DatabaseUnavailable when the
        database cannot be reached."""
        with self.write_lock:
            fairy, conn = self._checkout()
            healthy = True
            try:
                sequences = conn.execute(_SEQUENCE_STATE).fetchall()
                conn.execute(f"BEGIN READ WRITE; SET LOCAL statement_timeout = {self._left_ms(None)}")
                failed = ExecutionResult()
                self._preprocess(conn, preprocess, failed, preprocess_errors)
                yield WriteTransaction(self, conn, sequences, failed.error)
            except psycopg.OperationalError as exc:
                healthy = isinstance(exc, psycopg.errors.QueryCanceled)
                raise DatabaseUnavailable(pg_message(exc)) from exc
            finally:
                self._release(fairy, conn, healthy, healthy, sequences)

    def _checkout(self) -> tuple[Any, psycopg.Connection]:
        """A pooled connection that is alive: one the server closed while it sat in the pool (a
        restart, a terminated backend) is dropped for a new one, so a restart costs no item."""
        for _ in range(self._pool.size() + 1):
            fairy = self._pool.connect()
            conn: psycopg.Connection = fairy.driver_connection  # type: ignore[assignment]
            if not conn.closed and not _hung_up(conn):
                return fairy, conn
            fairy.invalidate()
        raise psycopg.OperationalError("every pooled connection was closed by the server")

    def _lost(self, exc: psycopg.Error) -> tuple[str, ErrorKind]:
        """The connection broke during an execution: the database's fault (``connection``: a
        restart, the server unreachable — a ``db_error`` that ``--resume`` runs again) or the
        SQL's (``sql``: it made the server end its session, e.g. ``set_config`` of an idle timeout;
        never run a second time)."""
        if isinstance(exc, (psycopg.errors.AdminShutdown, psycopg.errors.CrashShutdown, psycopg.errors.CannotConnectNow)):
            return pg_message(exc), "connection"
        try:
            with self.open_connection(connect_timeout=5) as probe:
                probe.execute("SELECT 1")
        except psycopg.Error:
            return pg_message(exc), "connection"
        return f"the server ended the session during this SQL: {pg_message(exc)}", "sql"

    def _left_ms(self, end: float | None) -> int:
        """Milliseconds left before ``end`` (or of a whole statement timeout, shortened by the
        conversation's deadline); 0 when none is left."""
        if end is None:
            left = deadline.budget(self.statement_timeout_ms / 1000)
            return self.statement_timeout_ms if left is None else max(0, min(self.statement_timeout_ms, int(left * 1000)))
        return max(0, min(self.statement_timeout_ms, int((end - time.monotonic()) * 1000)))

    def _execute(self, statements: list[str], mode: Mode, preprocess: Sequence[str], result: ExecutionResult, writes: bool,
                 preprocess_errors: PreprocessErrors, end: float, near: bool = False) -> None:
        started = time.perf_counter()
        try:
            fairy, conn = self._checkout()
        except Exception as exc:  # noqa: BLE001 (pool timeout or connection failure)
            result.error, result.error_kind = f"cannot connect: {pg_message(exc)}", "connection"
            result.elapsed_s = time.perf_counter() - started
            return
        healthy = True
        sequences = None
        finished = False  # the single-query path leaves no transaction to roll back
        with self._busy_lock:
            self._busy.add(conn)
        try:
            if writes:
                sequences = conn.execute(_SEQUENCE_STATE).fetchall()
            if not writes and len(statements) == 1 and _streamable(statements[0]):
                finished = self._run_single(conn, statements[0], result, end if near else None)
            else:
                self._run(conn, statements, mode, preprocess, result, preprocess_errors, end)
        except _SessionSpoiled:
            healthy = False  # the result stands; the connection is not reused
        except psycopg.Error as exc:  # the connection broke (any class: an idle timeout is an InternalError)
            if not isinstance(exc, psycopg.errors.QueryCanceled):
                healthy = False
                result.columns, result.rows = [], []
                result.error, result.error_kind = self._lost(exc) if conn.closed or isinstance(exc, psycopg.OperationalError) \
                    else (pg_message(exc), _sql_kind(exc))
        finally:
            with self._busy_lock:
                self._busy.discard(conn)
            self._release(fairy, conn, healthy, healthy and not finished, sequences)
        result.elapsed_s = time.perf_counter() - started

    def _release(self, fairy: Any, conn: psycopg.Connection, healthy: bool, roll_back: bool,
                 sequences: list[tuple[Any, ...]] | None) -> None:
        """End the transaction and give the connection back (or drop it when it is not healthy)."""
        if roll_back:
            try:
                conn.execute("ROLLBACK")  # also undoes SET / set_config() made inside the transaction
                if sequences:
                    self._restore_sequences(conn, sequences)
                conn.execute("DISCARD ALL")  # and whatever outlives a transaction: advisory locks, ...
            except psycopg.Error:
                healthy = False
        if healthy:
            fairy.close()
        else:
            fairy.invalidate()

    def _run_single(self, conn: psycopg.Connection, statement: str, result: ExecutionResult, end: float | None) -> bool:
        """The common case — one query, read mode, no preprocess_sql: the query runs in its own
        implicit transaction, read-only and timed out by the session defaults set at connect
        time, then ``DISCARD ALL`` resets the session (settings changed by ``set_config`` even
        through dynamic SQL, advisory locks, temporary objects). Returns True: nothing is left
        to roll back. ``end``: the conversation's deadline, when it is nearer than a statement timeout."""
        try:
            if end is not None:
                left = self._left_ms(end)
                if left <= 0:
                    raise psycopg.errors.QueryCanceled("the execution's time budget is spent")
                conn.execute(f"SET statement_timeout = {left}")  # undone by DISCARD ALL
            self._fetch(conn, statement, result)
        except psycopg.errors.QueryCanceled as exc:
            result.error, result.error_kind = pg_message(exc), "timeout"
            result.columns, result.rows = [], []
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError) and conn.closed:
                raise
            result.error, result.error_kind = pg_message(exc), _sql_kind(exc)
            result.columns, result.rows = [], []
        try:
            conn.execute("DISCARD ALL")  # whatever the query changed (even through dynamic SQL) is reset
        except psycopg.Error:
            raise _SessionSpoiled from None  # e.g. the query set an idle-session timeout that fired
        return True

    def _restore_sequences(self, conn: psycopg.Connection, state: list[tuple[Any, ...]], in_transaction: bool = False) -> None:
        """Put every sequence back to ``state`` (nextval is not undone by a rollback); inside an
        open transaction (between two scripts) under a savepoint, else in a transaction of its own."""
        if not state:
            return
        names, values, called = zip(*state, strict=True)
        begin, end, undo = ("SAVEPOINT evalbench_seq; ", "; RELEASE SAVEPOINT evalbench_seq", "ROLLBACK TO SAVEPOINT evalbench_seq") \
            if in_transaction else ("BEGIN READ WRITE; ", "; COMMIT", "ROLLBACK")  # the session default is read-only
        restore = sql.SQL(
            begin + "SELECT setval(s::regclass, v, c) FROM unnest({}::text[], {}::bigint[], {}::bool[]) AS x(s, v, c)" + end
        ).format(sql.Literal(list(names)), sql.Literal(list(values)), sql.Literal(list(called)))
        try:
            conn.execute(restore)
        except psycopg.errors.InsufficientPrivilege:
            conn.execute(undo)
            if not self._warned_sequences:
                self._warned_sequences = True
                log.warning("cannot restore sequences after write-mode executions (the sandbox user does not own them)")

    def _run(
        self,
        conn: psycopg.Connection,
        statements: list[str],
        mode: Mode,
        preprocess: Sequence[str],
        result: ExecutionResult,
        preprocess_errors: PreprocessErrors = "fail",
        end: float | None = None,
    ) -> None:
        timeout = f"SET LOCAL statement_timeout = {max(1, self._left_ms(end))}"
        read_only = mode == "read"
        conn.execute(("BEGIN READ ONLY; " if read_only and not preprocess else "BEGIN READ WRITE; ") + timeout)
        if not self._preprocess(conn, preprocess, result, preprocess_errors):
            return
        if read_only and preprocess:
            conn.execute("SET TRANSACTION READ ONLY")
        self._run_statements(conn, statements, result, end)

    def _run_statements(self, conn: psycopg.Connection, statements: list[str], result: ExecutionResult,
                        end: float | None = None) -> None:
        """Run statements in the open transaction, the statement timeout re-armed before each with
        what is left of the execution's budget (``end``; None: a whole statement timeout from
        now), so a script of many slow statements cannot multiply it; the last one's rows go to
        ``result``; the first error stops them."""
        if end is None:
            end = time.monotonic() + self._left_ms(None) / 1000
        for index, statement in enumerate(statements):
            last = index == len(statements) - 1
            left = self._left_ms(end)
            if left <= 0:
                result.error, result.error_kind = f"the execution's time budget is spent after {index} statement(s)", "timeout"
                result.columns, result.rows = [], []
                return
            try:
                conn.execute(f"SET LOCAL statement_timeout = {left}")  # re-arm: a statement may have changed it
                if last:
                    self._fetch(conn, statement, result)
                else:
                    conn.execute(statement, binary=True)  # extended protocol: one command
            except psycopg.errors.QueryCanceled as exc:
                result.error, result.error_kind = pg_message(exc), "timeout"
                result.columns, result.rows = [], []
                return
            except psycopg.Error as exc:
                if isinstance(exc, psycopg.OperationalError) and conn.closed:
                    raise
                result.error, result.error_kind = pg_message(exc), _sql_kind(exc)
                result.columns, result.rows = [], []
                return

    def _preprocess(self, conn: psycopg.Connection, texts: Sequence[str], result: ExecutionResult,
                    errors: PreprocessErrors) -> bool:
        """Run the trusted preprocess SQL; False (with the error on ``result``) when it failed."""
        for index, text in enumerate(texts):
            if errors == "stop":
                conn.execute(f"SAVEPOINT evalbench_pre_{index}")
            try:
                conn.execute(text)  # trusted dataset SQL
                continue
            except psycopg.Error as exc:
                if isinstance(exc, psycopg.OperationalError) and conn.closed:
                    raise
                if errors == "stop":  # undone alone; the texts after it are not run (execute_queries)
                    conn.execute(f"ROLLBACK TO SAVEPOINT evalbench_pre_{index}")
                    log.debug("preprocess_sql stopped at text %d: %s", index + 1, pg_message(exc))
                    return True
                verb = "timed out" if isinstance(exc, psycopg.errors.QueryCanceled) else "failed"
                result.error, result.error_kind = f"preprocess_sql {verb}: {pg_message(exc)}", "preprocess"
                return False
        return True

    def _fetch(self, conn: psycopg.Connection, statement: str, result: ExecutionResult) -> None:
        """Queries are streamed (extended protocol, chunked) and stopped at ``max_rows + 1``: the
        rest of a larger result is cancelled on the server instead of being transferred."""
        verb, modifies = statement_kind(statement)
        cursor = conn.cursor()
        try:
            if verb in STREAM_KEYWORDS and not modifies:
                rows: list[tuple[Any, ...]] = []
                stream = cursor.stream(statement, size=self._chunk)
                try:
                    for row in stream:
                        if len(rows) == self.max_rows:
                            result.truncated = True
                            break
                        rows.append(row)
                    description = cursor.description
                finally:
                    stream.close()  # type: ignore[attr-defined]  # a generator (typed Iterator): cancels the query if rows are left
            else:
                cursor.execute(statement, binary=True)  # extended protocol
                description = cursor.description
                rows = cursor.fetchmany(self.max_rows + 1) if description is not None else []
                if len(rows) > self.max_rows:
                    rows, result.truncated = rows[: self.max_rows], True
        finally:
            cursor.close()
        if description is None and verb in STREAM_KEYWORDS and not modifies:
            result.columns = _describe(conn, statement)  # a streamed empty result has no description
        else:
            result.columns = [c.name for c in description] if description is not None else []
        result.rows = [tuple(r) for r in rows]


class WriteTransaction:
    """What :meth:`Sandbox.write_transaction` yields: scripts run under savepoints, harness
    queries, and the sequences put back between two scripts."""

    def __init__(self, sandbox: Sandbox, conn: psycopg.Connection, sequences: list[tuple[Any, ...]],
                 preprocess_error: str | None) -> None:
        self.sandbox, self.conn, self.sequences = sandbox, conn, sequences
        self.preprocess_error = preprocess_error  # preprocess_sql failed: nothing else can be trusted
        self._savepoints = 0

    def run(self, texts: Sequence[str], inspect: Any = None) -> tuple[ExecutionResult, Any]:
        """Run a script (write-mode statements only) and then ``inspect(self)`` on the state it
        leaves; both are undone (rolled back to a savepoint) before this returns, and the sequences
        are put back. Returns the last statement's result and what ``inspect`` returned."""
        admission = admit_script(texts, self.sandbox.dialect)
        statements, result = admission.statements, admission.result
        if admission.refused:
            return result, None
        self._savepoints += 1
        name = f"evalbench_run_{self._savepoints}"
        self.conn.execute(f"SAVEPOINT {name}")
        inspected = None
        try:
            self.sandbox._run_statements(self.conn, statements, result)
            if result.error is None and inspect is not None:
                inspected = inspect(self)
        finally:
            self.conn.execute(f"ROLLBACK TO SAVEPOINT {name}")
            self.sandbox._restore_sequences(self.conn, self.sequences, in_transaction=True)
        return result, inspected

    def rows(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        """A harness query (trusted SQL) in the current state."""
        return self.conn.execute(query, params).fetchall()

    def fingerprint(self, statements: Sequence[str]) -> Fingerprint:
        """The state now, covering at least the tables ``statements`` may write."""
        return state.fingerprint(self, written_tables(statements, "postgres"))


def _describe(conn: psycopg.Connection, statement: str) -> list[str]:
    """The column names of a query, from the server's description of it (not executed again)."""
    pgconn = conn.pgconn
    encoding = conn.info.encoding
    prepared = pgconn.prepare(b"", statement.encode(encoding))  # the unnamed statement, as psycopg uses
    if prepared.status != psycopg.pq.ExecStatus.COMMAND_OK:
        return []
    described = pgconn.describe_prepared(b"")
    return [(described.fname(i) or b"").decode(encoding) for i in range(described.nfields)]


def _streamable(statement: str) -> bool:
    """A query that changes nothing: it can run on its own in the session's read-only default."""
    verb, modifies = statement_kind(statement)
    return verb in STREAM_KEYWORDS and not modifies


class _SessionSpoiled(Exception):
    """The execution is over and its result stands, but its connection cannot be reset."""


def _hung_up(conn: psycopg.Connection) -> bool:
    """Whether an idle connection has something to read: the server's goodbye (a termination
    message, or end of file) — nothing else arrives on an idle, reset session."""
    try:
        return bool(select.select([conn.fileno()], [], [], 0)[0])
    except (OSError, ValueError, psycopg.Error):
        return True


def _sql_kind(exc: BaseException) -> ErrorKind:
    """``syntax`` for SQLSTATE 42601 (the server could not parse the statement), else ``sql``."""
    return "syntax" if isinstance(exc, psycopg.errors.SyntaxError) else "sql"


def pg_message(exc: BaseException) -> str:
    """The server's one-line message of a psycopg error."""
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    if primary:
        return str(primary)
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
