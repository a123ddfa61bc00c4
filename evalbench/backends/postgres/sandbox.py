"""Sandboxed SQL execution: golden and agent SQL alike.

Every execution runs in its own transaction that is always rolled back (read-only in ``read``
mode: queries; read-write in ``write`` mode: the data and schema changes of management tasks),
then ``DISCARD ALL`` resets the session. It runs as the database identity of its actor and mode
(:mod:`.roles`): agent SQL that reads as ``evalbench_sandbox``, which may create nothing anywhere;
agent SQL that writes as ``evalbench_sandbox_write``; golden SQL as ``evalbench_golden`` — each
through a lazy pool of its own. Executions that may write hold the database's write lock
(:mod:`.serial`), which puts the sequences back.

The statement timeout is the budget of the whole execution (re-armed before every statement with
what is left of it, and never beyond the conversation's deadline: :mod:`evalbench.core.deadline`).
Rows are streamed a few at a time and kept up to the row and byte caps
(:class:`~evalbench.backends.result_cap.ResultCap`): a query is then cancelled on the server; the
rows of other statements are dropped as they arrive. Statements go through the extended query
protocol one at a time, which refuses a string of several commands.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, cast

import psycopg
from psycopg.rows import TupleRow
from sqlalchemy.pool import PoolProxiedConnection, QueuePool

from evalbench.backends.admission import admit, admit_script
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
from evalbench.backends.fingerprint import Fingerprint, written_tables
from evalbench.backends.logins import Lender
from evalbench.backends.postgres import state
from evalbench.backends.postgres.pgtypes import register_loaders
from evalbench.backends.postgres.serial import SEQUENCE_STATE, SequenceState, SerialWrites, setval_query
from evalbench.backends.postgres.target import pg_message
from evalbench.backends.result_cap import ResultCap
from evalbench.backends.watchdog import Watchdog
from evalbench.core import deadline
from evalbench.core.ratelimit import RateLimiter
from evalbench.sql.statements import STREAM_KEYWORDS, statement_kind

if TYPE_CHECKING:
    from sqlalchemy.engine.interfaces import DBAPIConnection

log = logging.getLogger(__name__)
T = TypeVar("T")

Connect = Callable[..., psycopg.Connection]
BACKSTOP_S = 2.0  # past the execution's budget, a statement the server did not stop is abandoned
# Rows fetched at a time: a chunk is held whole, so rows of a megabyte cost a few megabytes.
_CHUNK_ROWS = 16 if psycopg.capabilities.has_stream_chunked() else 1


@dataclass(frozen=True)
class Identities:
    """How to connect (``connect(**psycopg kwargs)``) as each role SQL runs as."""

    reader: Connect  # agent SQL that reads
    writer: Connect  # agent SQL that writes (management tasks, state_match)
    golden: Connect
    writer_conninfo: str  # the writer's libpq string, for test cases ("" through a cloud connector)


class Sandbox:
    """Runs SQL against one database through small connection pools, one per identity."""

    dialect = "postgres"
    runs_test_cases = True  # BIRD-Interact's test cases take a psycopg connection

    def __init__(
        self,
        conninfo: str,
        *,
        pool_size: int,
        statement_timeout_s: float,
        max_rows: int,
        max_result_bytes: int = SandboxLimits.max_result_bytes,
        executions_per_minute: int | None = None,
        connect_timeout_s: float = 15.0,
        connect: Connect | None = None,
        identities: Identities | None = None,
    ) -> None:
        """``conninfo`` / ``connect`` open a connection as one role that then runs everything,
        unless ``identities`` says how to connect as each."""
        if identities is None:
            one = connect or (lambda **kwargs: psycopg.connect(conninfo, **kwargs))
            identities = Identities(one, one, one, conninfo)
        self.conninfo = identities.writer_conninfo  # test cases run the agent's SQL as the writer
        self.open_connection = identities.reader  # what agents may see (the schema text)
        self.statement_timeout_ms = max(1, int(statement_timeout_s * 1000))
        self._busy: set[psycopg.Connection] = set()  # connections running an execution (see interrupt)
        self._busy_lock = threading.Lock()
        self.max_rows, self.max_result_bytes = max_rows, max_result_bytes
        self._limiter = RateLimiter(executions_per_minute, burst=pool_size) if executions_per_minute else None
        pools: dict[int, QueuePool] = {}  # one per distinct way of connecting; connections made when first needed
        self._pools = {name: pools.setdefault(id(open_), self._pool(open_, pool_size, statement_timeout_s, connect_timeout_s))
                       for name, open_ in (("reader", identities.reader), ("writer", identities.writer),
                                           ("golden", identities.golden))}
        self.write_lock = SerialWrites(lambda: identities.golden(
            autocommit=True, connect_timeout=int(connect_timeout_s),
            options=f"-c statement_timeout={int(max(60.0, statement_timeout_s * 4) * 1000)}"))
        self.on_close: Callable[[], None] | None = None  # e.g. the cloud connector this sandbox connects through
        self.clones: Clones | None = None  # evalbench.backends.postgres.clones.CloneFactory, when test cases can run on copies
        self.lender: Lender | None = None  # per-conversation logins (evalbench.backends.postgres.lending), where it can
        self._warned_sequences = False

    def _pool(self, open_: Connect, size: int, statement_timeout_s: float, connect_timeout_s: float) -> QueuePool:
        return QueuePool(
            # a psycopg connection is a DB-API connection, which SQLAlchemy's protocol of one does not recognise
            lambda: cast("DBAPIConnection", register_loaders(open_(
                autocommit=True,
                connect_timeout=int(connect_timeout_s),
                prepare_threshold=None,  # no server-side prepared statements: DISCARD ALL follows every execution
                # session defaults: every transaction is read-only unless begun READ WRITE
                options=f"-c statement_timeout={self.statement_timeout_ms} -c default_transaction_read_only=on",
            ))),
            pool_size=size,
            max_overflow=0,
            timeout=max(60.0, statement_timeout_s * 4),
            reset_on_return=None,  # every execution ends with its own ROLLBACK
        )

    def close(self) -> None:
        for pool in {id(p): p for p in self._pools.values()}.values():
            pool.dispose()
        self.write_lock.close()
        if self.on_close is not None:
            self.on_close()

    def interrupt(self) -> None:
        """Cancel the statements running now (the run is being cancelled); they end as timeouts."""
        with self._busy_lock:
            busy = list(self._busy)
        for conn in busy:
            with contextlib.suppress(Exception):  # already finished or closed
                conn.cancel_safe(timeout=2.0)  # the protocol's cancel request: no function call, no privilege
        self.write_lock.interrupt()

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
        # Executions that may write (write mode, or preprocess_sql) hold the write lock: sequences
        # are not transactional; they are put back when it is released.
        writes = mode == "write" or bool(preprocess)
        identity = "golden" if actor == "golden" else "writer" if writes else "reader"
        try:
            with self.write_lock if writes else nullcontext():
                self._execute(identity, statements, mode, preprocess, result, preprocess_errors, end)
        except DatabaseUnavailable as exc:
            result.error, result.error_kind = f"cannot connect: {exc}", "connection"
        return result

    @contextmanager
    def write_transaction(self, preprocess: Sequence[str] = (), preprocess_errors: PreprocessErrors = "fail",
                          actor: Actor = "agent") -> Iterator[WriteTransaction]:
        """One READ WRITE transaction, as the writer (or golden) role, after ``preprocess``, for
        work that runs several scripts on the same starting state (``state_match``): always
        rolled back, sequences put back, under the write lock. Raises DatabaseUnavailable when
        the database cannot be reached."""
        with self.write_lock:
            try:
                fairy, conn = self._checkout("golden" if actor == "golden" else "writer")
            except psycopg.Error as exc:
                raise DatabaseUnavailable(pg_message(exc)) from exc
            healthy = True
            try:
                sequences = conn.execute(SEQUENCE_STATE).fetchall()
                conn.execute(f"BEGIN READ WRITE; SET LOCAL statement_timeout = {self._left_ms(None)}")
                failed = ExecutionResult()
                self._preprocess(conn, preprocess, failed, preprocess_errors)
                yield WriteTransaction(self, conn, sequences, failed.error)
            except psycopg.OperationalError as exc:
                healthy = isinstance(exc, psycopg.errors.QueryCanceled)
                raise DatabaseUnavailable(pg_message(exc)) from exc
            finally:
                self._release(fairy, conn, healthy)

    def _checkout(self, identity: str) -> tuple[PoolProxiedConnection, psycopg.Connection]:
        """A pooled connection of ``identity`` that is alive: one the server closed while it sat
        in the pool (a restart, a terminated backend) is dropped for a new one, so a restart
        costs no item."""
        pool = self._pools[identity]
        for _ in range(pool.size() + 1):
            fairy = pool.connect()
            conn: psycopg.Connection = fairy.driver_connection  # type: ignore[assignment]  # SQLAlchemy types the pooled driver connection as Any-like DBAPI
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

    def _execute(self, identity: str, statements: list[str], mode: Mode, preprocess: Sequence[str],
                 result: ExecutionResult, preprocess_errors: PreprocessErrors, end: float) -> None:
        started = time.perf_counter()
        try:
            fairy, conn = self._checkout(identity)
        except Exception as exc:  # noqa: BLE001 (pool timeout or connection failure)
            result.error, result.error_kind = f"cannot connect: {pg_message(exc)}", "connection"
            result.elapsed_s = time.perf_counter() - started
            return
        healthy = True
        with self._busy_lock:
            self._busy.add(conn)
        try:
            self._run(conn, statements, mode, preprocess, result, preprocess_errors, end)
        except psycopg.Error as exc:  # the connection broke (any class: an idle timeout is an InternalError)
            if not isinstance(exc, psycopg.errors.QueryCanceled):
                healthy = False
                result.columns, result.rows = [], []
                result.error, result.error_kind = self._lost(exc) if conn.closed or isinstance(exc, psycopg.OperationalError) \
                    else (pg_message(exc), _sql_kind(exc))
        finally:
            with self._busy_lock:
                self._busy.discard(conn)
            self._release(fairy, conn, healthy)
        result.elapsed_s = time.perf_counter() - started

    def _release(self, fairy: PoolProxiedConnection, conn: psycopg.Connection, healthy: bool) -> None:
        """Roll the transaction back, reset the session and give the connection back (or drop
        it when it cannot be reset)."""
        if healthy:
            try:
                conn.execute("ROLLBACK")  # also undoes SET / set_config() made inside the transaction
                conn.execute("DISCARD ALL")  # and whatever outlives a transaction: advisory locks, ...
            except psycopg.Error:
                healthy = False  # the result stands; the connection is not reused
        if healthy:
            fairy.close()
        else:
            fairy.invalidate()

    def _restore_sequences(self, conn: psycopg.Connection, sequences: SequenceState) -> None:
        """Put every sequence back to ``sequences`` inside the open transaction (nextval is not
        undone by rolling back to a savepoint), under a savepoint of its own."""
        if not sequences:
            return
        conn.execute("SAVEPOINT evalbench_seq")
        try:
            conn.execute(setval_query(sequences))
            conn.execute("RELEASE SAVEPOINT evalbench_seq")
        except psycopg.errors.InsufficientPrivilege:
            conn.execute("ROLLBACK TO SAVEPOINT evalbench_seq")
            if not self._warned_sequences:
                self._warned_sequences = True
                log.warning("cannot put sequences back between two scripts (the role running them does not own them)")

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
        read_only = mode == "read"
        begin = "BEGIN READ ONLY" if read_only and not preprocess else "BEGIN READ WRITE"
        left = self._left_ms(end)
        # the session's default timeout (set at connect, reset by DISCARD ALL) is the whole budget
        # unless the conversation's deadline is nearer
        conn.execute(begin if left >= self.statement_timeout_ms - 50 else f"{begin}; SET LOCAL statement_timeout = {max(1, left)}")
        armed = True
        if preprocess:
            if not self._preprocess(conn, preprocess, result, preprocess_errors):
                return
            armed = False
            if read_only:
                conn.execute("SET TRANSACTION READ ONLY")
        self._run_statements(conn, statements, result, end, armed=armed, cancel_rest=True)

    def _run_statements(self, conn: psycopg.Connection, statements: list[str], result: ExecutionResult,
                        end: float | None = None, *, armed: bool = False, cancel_rest: bool = False) -> None:
        """Run statements in the open transaction, the statement timeout re-armed before each with
        what is left of the execution's budget (``end``; None: a whole statement timeout from
        now), so a script of many slow statements cannot multiply it; the last one's rows go to
        ``result``; the first error stops them. ``armed``: the timeout was just set for the first.
        ``cancel_rest``: a last query whose rows pass a cap is cancelled (the transaction is
        then over), rather than read to its end."""
        if end is None:
            end = time.monotonic() + self._left_ms(None) / 1000
        # the server's timeout is a cancel it acts on between steps; a single call that never looks
        # (libxml2's xpath over a huge document) runs on: past a grace, the harness hangs up
        backstop = Watchdog(lambda: _hang_up(conn), end - time.monotonic() + BACKSTOP_S)
        try:
            self._statements(conn, statements, result, end, armed, cancel_rest)
        except psycopg.OperationalError:
            if not backstop.fired:
                raise
            result.error = "canceling statement due to statement timeout (the server did not stop it: its connection was closed)"
            result.error_kind, result.columns, result.rows = "timeout", [], []
        finally:
            backstop.cancel()

    def _statements(self, conn: psycopg.Connection, statements: list[str], result: ExecutionResult, end: float,
                    armed: bool, cancel_rest: bool) -> None:
        for index, statement in enumerate(statements):
            last = index == len(statements) - 1
            left = self._left_ms(end)
            if left <= 0:
                result.error, result.error_kind = f"the execution's time budget is spent after {index} statement(s)", "timeout"
                result.columns, result.rows = [], []
                return
            try:
                if index or not armed:
                    conn.execute(f"SET LOCAL statement_timeout = {left}")  # re-arm: a statement may have changed it
                self._fetch(conn, statement, result if last else None, cancel_rest)
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

    def _fetch(self, conn: psycopg.Connection, statement: str, result: ExecutionResult | None, cancel_rest: bool) -> None:
        """Run one statement, its rows streamed a chunk at a time (never a whole result in
        memory). The last statement's rows (``result``) are kept up to the row and byte caps; past
        them a query is cancelled on the server (with ``cancel_rest``), a statement that writes
        runs to its end, its rows dropped. Other statements' rows are dropped as they arrive."""
        verb, modifies = statement_kind(statement)
        query = verb in STREAM_KEYWORDS and not modifies
        cap = ResultCap(self.max_rows, self.max_result_bytes) if result is not None else None
        keeping = cap is not None
        cursor = conn.cursor()
        try:
            rows = _stream(cursor, statement)
            try:
                for row in rows:
                    if keeping and not cap.add(row):  # type: ignore[union-attr]  # cap is set whenever keeping is true
                        keeping = False
                        if cancel_rest and query:
                            break
            finally:
                rows.close()  # cancels the statement if rows are left
            description = cursor.description
        finally:
            cursor.close()
        if result is None or cap is None:
            return
        # a streamed empty result has no description: the server describes the statement
        result.columns = [c.name for c in description] if description is not None else _describe(conn, statement)
        cap.fill(result)


class WriteTransaction:
    """What :meth:`Sandbox.write_transaction` yields: scripts run under savepoints, harness
    queries, and the sequences put back between two scripts."""

    def __init__(self, sandbox: Sandbox, conn: psycopg.Connection, sequences: SequenceState,
                 preprocess_error: str | None) -> None:
        self.sandbox, self.conn, self.sequences = sandbox, conn, sequences
        self.preprocess_error = preprocess_error  # preprocess_sql failed: nothing else can be trusted
        self._savepoints = 0

    def run(self, texts: Sequence[str], inspect: Callable[[WriteTransaction], T] | None = None
            ) -> tuple[ExecutionResult, T | None]:
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
        inspected: T | None = None
        try:
            self.sandbox._run_statements(self.conn, statements, result)  # rows past a cap read, not cancelled
            if result.error is None and inspect is not None:
                inspected = inspect(self)
        finally:
            self.conn.execute(f"ROLLBACK TO SAVEPOINT {name}")
            self.sandbox._restore_sequences(self.conn, self.sequences)
        return result, inspected

    def rows(self, query: str, params: QueryParams = None) -> list[HarnessRow]:
        """A harness query (trusted SQL) in the current state."""
        return self.conn.execute(query, params).fetchall()

    def fingerprint(self, statements: Sequence[str]) -> Fingerprint:
        """The state now, covering at least the tables ``statements`` may write."""
        return state.fingerprint(self, written_tables(statements, "postgres"))


def _stream(cursor: psycopg.Cursor[TupleRow], statement: str) -> Generator[TupleRow, None, None]:
    """The rows of ``statement`` as the server sends them (none for a statement without rows)."""
    try:
        yield from cursor.stream(statement, size=_CHUNK_ROWS)  # the extended protocol: one command
    except psycopg.ProgrammingError as exc:
        if exc.sqlstate is not None:  # the server's error, not "the statement returned no rows"
            raise


def _describe(conn: psycopg.Connection, statement: str) -> list[str]:
    """The column names of a query, from the server's description of it (not executed again)."""
    pgconn = conn.pgconn
    encoding = conn.info.encoding
    prepared = pgconn.prepare(b"", statement.encode(encoding))  # the unnamed statement, as psycopg uses
    if prepared.status != psycopg.pq.ExecStatus.COMMAND_OK:
        return []
    described = pgconn.describe_prepared(b"")
    return [(described.fname(i) or b"").decode(encoding) for i in range(described.nfields)]


def _hang_up(conn: psycopg.Connection) -> None:
    """Close the connection's socket under the statement waiting on it (which then fails at
    once); the server's backend ends when its call returns and finds no client."""
    with contextlib.suppress(OSError, ValueError, psycopg.Error):
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()


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
