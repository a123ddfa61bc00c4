"""Per-conversation logins on a MySQL / MariaDB database (:mod:`evalbench.backends.logins`).

A lent login is an agent user like those the sandbox leases for its pool (:mod:`.identities`):
``evalbench_a<n>_<hash>``@'%' with a random password and exactly ``SELECT, SHOW VIEW`` on this
database — no global privilege (no FILE, no PROCESS), nothing on another database, no CREATE
TEMPORARY TABLES. It is leased on an admin connection of its own (the *holder*, which runs no
other SQL): if the process dies, the holder's named lock goes with it and the next lease on this
database drops the user. Resource limits: ``MAX_USER_CONNECTIONS`` a few, and on MariaDB
``MAX_STATEMENT_TIME`` the sandbox's statement timeout (MySQL has no per-user statement limit).

Neither server expires a user by itself at a time of day (their password expiry counts whole
days): the login ends at ``revoke()`` — called by the harness's expiry timer at ``expires_at``
if not before. Revoking locks the account, kills its connections, drops the user, and releases
the lease.
"""

from __future__ import annotations

import logging
import time
from contextlib import suppress
from urllib.parse import quote as quote_url

import pymysql

from evalbench.backends.logins import Lent
from evalbench.backends.mysql import identities
from evalbench.backends.mysql.identities import READ_PRIVILEGES, Identity, Logins, execute, kill_sessions, rows
from evalbench.backends.mysql.target import MySQLConnection, MySQLTarget
from evalbench.core.errors import LendingError

log = logging.getLogger(__name__)
MAX_CONNECTIONS = 3
_IO_TIMEOUT_S = 10  # every statement of the holder (a revoke never waits longer on one)


class MySQLLender:
    """Lends logins on one MySQL / MariaDB database (its golden ``logins`` key the leases)."""

    def __init__(self, target: MySQLTarget, logins: Logins, statement_timeout_s: float) -> None:
        self.target, self.logins, self.statement_timeout_s = target, logins, statement_timeout_s

    def lend(self, ttl_s: float, label: str) -> Lent:
        expires_at = time.time() + ttl_s
        try:
            holder = self.target.connect(timeout_s=5, read_timeout=_IO_TIMEOUT_S, write_timeout=_IO_TIMEOUT_S)
        except pymysql.Error as exc:
            raise LendingError(f"cannot connect to {self.target.describe()}: {exc.args[-1] if exc.args else exc}") from None
        try:
            execute(holder, "SET SESSION wait_timeout = 31536000")  # the lease lasts as long as this connection
            identity = identities.lease(holder, self.target.name, self.logins.lock_key, [READ_PRIVILEGES])[0]
            limits = f"MAX_USER_CONNECTIONS {MAX_CONNECTIONS}"
            if self.logins.mariadb:
                limits += f" MAX_STATEMENT_TIME {max(0.001, self.statement_timeout_s):.3f}"
            execute(holder, f"ALTER USER %s@'%%' WITH {limits}", (identity.user,))
        except BaseException:
            with suppress(Exception):
                holder.close()  # its lease goes with it: the next lease drops the user
            raise
        url = (f"mysql://{quote_url(identity.user)}:{quote_url(identity.password, safe='')}@{self.target.host}:"
               f"{self.target.port}/{quote_url(self.target.name, safe='')}")
        fields = {"host": self.target.host, "port": str(self.target.port), "user": identity.user,
                  "password": identity.password, "database": self.target.name}
        return Lent(identity.user, url, fields, expires_at, lambda: self._revoke(holder, identity))

    def _revoke(self, holder: MySQLConnection, identity: Identity) -> None:
        """Lock, kill, drop, release — on the holder, or a new admin connection when it was lost."""
        try:
            _end(holder, identity, self.logins.lock_key)
        except pymysql.Error as exc:
            log.debug("the holder of %s is lost (%s): revoking on a new connection", identity.user, exc)
            admin = self.target.connect(timeout_s=5, read_timeout=_IO_TIMEOUT_S, write_timeout=_IO_TIMEOUT_S)
            try:
                _end(admin, identity, self.logins.lock_key)
            finally:
                admin.close()
        finally:
            with suppress(Exception):
                holder.close()


def _end(conn: MySQLConnection, identity: Identity, key: str) -> None:
    with suppress(pymysql.Error):  # MariaDB before 10.4, or the user is gone already
        execute(conn, "ALTER USER %s@'%%' ACCOUNT LOCK", (identity.user,))
    kill_sessions(conn, identity.user)
    execute(conn, "DROP USER IF EXISTS %s@'%%'", (identity.user,))
    kill_sessions(conn, identity.user)  # one that logged in between the first kill and the drop
    rows(conn, "SELECT RELEASE_LOCK(%s)", (identities.lease_lock(identity.user, key),))
