"""Write executions of one database, one at a time across threads, processes and machines, and
the sequences put back after each.

A sequence is not transactional: ``nextval`` in a transaction that is rolled back still advances
it. Two write executions side by side (two ``--workers``, two runs) would each see the other's
draws — an agent script identical to the golden one could get other ids — and putting the values
back after one would undo the other's mid-script. So a write execution holds a lock of the server
(an advisory lock on the evaluation database) taken on a harness connection of its own, which
agent SQL neither runs on nor can release; when the outermost holder lets go, every sequence whose
value changed is put back to the value it had when the lock was taken, through that connection —
also when the execution's own connection was lost or its test-case process killed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

import psycopg
from psycopg import sql

from evalbench.backends.base import DatabaseUnavailable
from evalbench.backends.postgres.target import pg_message

log = logging.getLogger(__name__)

WRITES_LOCK = "evalbench:writes"  # the advisory lock's key (hashtextextended of it), per database
# The sequences the current role may put back: (name, value, is_called) for setval().
SEQUENCE_STATE = """
SELECT format('%I.%I', schemaname, sequencename), COALESCE(last_value, start_value), last_value IS NOT NULL
FROM pg_sequences WHERE has_sequence_privilege(format('%I.%I', schemaname, sequencename), 'UPDATE')
"""
SequenceState = list[tuple[str, int, bool]]  # (name, value, is_called), as SEQUENCE_STATE reads them


def setval_query(state: SequenceState) -> sql.Composed:
    """One statement that puts every sequence of ``state`` back."""
    names, values, called = zip(*state, strict=True) if state else ((), (), ())
    return sql.SQL("SELECT setval(s::regclass, v, c) FROM unnest({}::text[], {}::bigint[], {}::bool[]) AS x(s, v, c)").format(
        sql.Literal(list(names)), sql.Literal(list(values)), sql.Literal(list(called)))


def restore_sequences(conn: psycopg.Connection, state: SequenceState) -> int:
    """Put back (outside any transaction) the sequences whose value differs from ``state``;
    how many were."""
    current = {name: (value, called) for name, value, called in conn.execute(SEQUENCE_STATE).fetchall()}
    changed = [(n, v, c) for n, v, c in state if n in current and current[n] != (v, c)]
    if changed:
        conn.execute(setval_query(changed))
    return len(changed)


class SerialWrites:
    """The lock write executions of one database hold (a context manager, re-entrant in a
    thread: scorers run SQL while they hold it). ``connect()`` opens the harness connection."""

    def __init__(self, connect: Callable[[], psycopg.Connection]) -> None:
        self._connect = connect
        self._thread = threading.RLock()
        self._depth = 0
        self._conn: psycopg.Connection | None = None
        self._sequences: SequenceState = []

    def __enter__(self) -> SerialWrites:
        self._thread.acquire()
        if self._depth == 0:
            try:
                self._take()
            except BaseException:
                self._thread.release()
                raise
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        try:
            if self._depth == 0:
                self._give_back()
        finally:
            self._thread.release()

    def _take(self) -> None:
        for attempt in (1, 2):  # a connection kept from an earlier write may have been closed by the server since
            fresh = self._conn is None or self._conn.closed
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                self._conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (WRITES_LOCK,))
                self._sequences = self._conn.execute(SEQUENCE_STATE).fetchall()
                return
            except psycopg.Error as exc:
                self.close()
                if fresh or attempt == 2 or not isinstance(exc, psycopg.OperationalError):
                    raise DatabaseUnavailable(f"cannot take the write lock: {pg_message(exc)}") from exc

    def interrupt(self) -> None:
        """Stop waiting for the lock (the run is being cancelled)."""
        conn = self._conn
        if conn is not None and not conn.closed:
            with contextlib.suppress(psycopg.Error):
                conn.cancel_safe(timeout=2.0)

    def _give_back(self) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            restored = restore_sequences(conn, self._sequences)
            if restored:
                log.debug("put back %d sequence(s) after a write execution", restored)
            conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (WRITES_LOCK,))
        except psycopg.Error as exc:  # the session ends: the server releases its lock
            log.warning("could not put the sequences back after a write execution (%s)", pg_message(exc))
            self.close()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
