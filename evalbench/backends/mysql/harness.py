"""The harness's own connection to a MySQL / MariaDB server, one per sandbox, as the configured
admin; no agent or golden SQL ever runs on it. It holds the leases of the sandbox's agent
identities (:mod:`.identities`), takes the database's write lock across processes (runs with
``--workers`` and other runs on the same database take turns), and puts the counters back
(:mod:`.counters`) before and after every write."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TypeVar

import pymysql

from evalbench.backends.base import DatabaseUnavailable
from evalbench.backends.mysql import counters, identities
from evalbench.backends.mysql.identities import Identity, Logins, execute, rows
from evalbench.backends.mysql.provision import admin_connection
from evalbench.backends.mysql.target import MySQLConnection, MySQLTarget
from evalbench.core import deadline

log = logging.getLogger(__name__)
T = TypeVar("T")
_WRITE_WAIT_S = 600  # for another process's write (its statements are bounded by their budget)
_LOST = {2006, 2013, 2055}


class Harness:
    def __init__(self, target: MySQLTarget, logins: Logins, setup_counters: counters.Counters) -> None:
        self.target, self.mariadb, self.counters = target, logins.mariadb, dict(setup_counters)
        self._key = logins.lock_key
        self._write_lock = identities.write_lock_name(target.name, self._key)
        self.leased: list[Identity] = []
        self._lock = threading.RLock()  # one thread at a time on the connection
        self._conn = self._connect()

    def _connect(self) -> MySQLConnection:
        conn = admin_connection(self.target)
        execute(conn, "SET SESSION wait_timeout = 31536000")  # the leases last as long as this connection
        execute(conn, f"SET SESSION lock_wait_timeout = {_WRITE_WAIT_S}")
        counters.live_statistics(conn, self.mariadb)
        return conn

    def lease(self, privileges: Sequence[str]) -> list[Identity]:
        """Agent identities, one per entry of ``privileges``, held until :meth:`close`."""
        with self._lock:
            leased = self._call(lambda conn: identities.lease(conn, self.target.name, self._key, privileges))
            self.leased += leased
            return leased

    @contextmanager
    def writing(self) -> Iterator[None]:
        """The database's write lock across processes, the counters settled before and after."""
        name = self._write_lock
        wait = deadline.budget(_WRITE_WAIT_S) or 0.0  # never past the conversation's deadline
        with self._lock:
            if not self._call(lambda conn: rows(conn, "SELECT GET_LOCK(%s, %s)", (name, wait))[0][0]):
                raise DatabaseUnavailable(f"timed out waiting for another run's write to {self.target.describe()}")
            try:
                self.settle()
                yield
            finally:
                try:
                    self.settle()
                finally:
                    with suppress(pymysql.Error):
                        rows(self._conn, "SELECT RELEASE_LOCK(%s)", (name,))

    def settle(self) -> None:
        """Put the counters back where setup left them (no write of ours may be open)."""
        with self._lock:
            restored = self._call(lambda conn: counters.restore(conn, self.target.name, self.counters))
        if restored:
            log.debug("%s: counters put back: %s", self.target.describe(), ", ".join(restored))

    def close(self) -> None:
        """Drop the leased agent users and end the connection."""
        with self._lock:
            try:
                self._call(lambda conn: identities.release(conn, self._key, self.leased))
            except DatabaseUnavailable as exc:  # they are stale now: the next lease drops them
                log.warning("%s: agent users not dropped (%s)", self.target.describe(), exc)
            self.leased = []
            with suppress(Exception):
                self._conn.close()

    def _call(self, work: Callable[[MySQLConnection], T]) -> T:
        """``work(connection)``; a lost connection is replaced once (and the leases taken again)."""
        try:
            return work(self._conn)
        except pymysql.Error as exc:
            if not _lost(exc):
                raise DatabaseUnavailable(f"{self.target.describe()}: {exc.args[-1] if exc.args else exc}") from None
        with suppress(Exception):
            self._conn.close()
        self._conn = self._connect()
        if not identities.relock(self._conn, self._key, self.leased):
            raise DatabaseUnavailable(f"{self.target.describe()}: the harness connection was lost and another run "
                                      "took over an agent user of this sandbox")
        try:
            return work(self._conn)
        except pymysql.Error as exc:
            raise DatabaseUnavailable(f"{self.target.describe()}: {exc.args[-1] if exc.args else exc}") from None


def _lost(exc: pymysql.Error) -> bool:
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    return code in _LOST or isinstance(exc, pymysql.err.InterfaceError)
