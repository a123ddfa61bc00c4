"""Per-conversation logins on a PostgreSQL database (:mod:`evalbench.backends.logins`).

A lent login is a role of its own, ``evalbench_lent_<random>``, with a random password, ``VALID
UNTIL`` its expiry, ``CONNECTION LIMIT`` a few, no attribute (no superuser, CREATEDB, CREATEROLE,
REPLICATION, BYPASSRLS), and the reading sandbox role's session defaults as role settings
(``default_transaction_read_only``, ``statement_timeout``, and — by a superuser admin —
``track_activities = off``). Its only membership is the database's **reader group**
``evalbench_read_<hash of the database>`` (NOLOGIN), which holds what ``evalbench_sandbox`` holds
on this database and nothing on any other: CONNECT, USAGE on the schemas, SELECT on the
relations (:mod:`.privileges`' grant, re-run at every lend so that a rebuilt database is covered).
It is not a member of ``evalbench_sandbox`` itself, which may connect to every database
evalbench provisioned on the server. After it is made, it logs in and is checked like the
sandbox role (:func:`.roles.verify_reader`): it may create nothing.

Revoking: ``NOLOGIN`` first (no new session), its sessions terminated, then ``DROP ROLE``. A role
that cannot be dropped (it made a large object in a database where PUBLIC may) stays NOLOGIN.
Roles past their ``VALID UNTIL`` (a process that died before revoking) are dropped by the next
lend on the server.

Not covered (PostgreSQL grants no per-role denial): a database whose ACL still gives PUBLIC
CONNECT (and TEMPORARY) — ``postgres`` and databases made by hand usually do, databases
evalbench provisions do not — is open to a lent login as it is to ``evalbench_sandbox``: it may
connect there, make temporary tables and read what PUBLIC may read, not the tables.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import secrets
import time
from datetime import datetime, timezone

import psycopg
from psycopg import sql

from evalbench.backends.logins import Lent
from evalbench.backends.postgres import meta
from evalbench.backends.postgres.catalog import catalog_fingerprint, changes
from evalbench.backends.postgres.privileges import grant_reader_group
from evalbench.backends.postgres.roles import QUIET_SETTINGS, Login, admin_rights, verify_reader
from evalbench.backends.postgres.target import DatabaseTarget, pg_message
from evalbench.core.errors import LendingError, SandboxError

PREFIX = "evalbench_lent_"
CONNECTION_LIMIT = 3
_ROLE_LOCK = "evalbench:sandbox-role"  # the lock roles.py takes: the roles are the server's
_ADMIN_OPTIONS = "-c statement_timeout=10000 -c lock_timeout=5000"


def reader_group(database: str) -> str:
    """The NOLOGIN role holding a database's read rights (63 bytes at most, like every name)."""
    return f"evalbench_read_{hashlib.sha256(database.encode()).hexdigest()[:12]}"


def _grant_group(admin: psycopg.Connection, target: DatabaseTarget, group: str) -> meta.Record | None:
    """Give ``group`` the sandbox's read rights. The first time, that changes the database's
    privileges, which its setup record (:mod:`.meta`) fingerprints: the record of a database that
    matched it is returned updated (to write once committed), so that the next run does not take
    the harness's own grants for an outsider's change."""
    record = meta.read(target)
    before = catalog_fingerprint(admin)
    grant_reader_group(admin, target.name, group)
    after = catalog_fingerprint(admin)
    if record is None or after == before or changes(record.catalog, before):
        return None
    return dataclasses.replace(record, catalog=after)


class PostgresLender:
    """Lends logins on one database of a server whose admin may create roles."""

    def __init__(self, target: DatabaseTarget, statement_timeout_s: float) -> None:
        self.target = target
        self.statement_timeout_ms = max(1, int(statement_timeout_s * 1000))

    def lend(self, ttl_s: float, label: str) -> Lent:
        user, password = PREFIX + secrets.token_hex(6), secrets.token_urlsafe(24)
        expires_at = time.time() + ttl_s
        with self._admin(self.target.name) as admin:
            superuser, can_create_roles = admin_rights(admin)
            if not can_create_roles:
                raise LendingError(f"the admin of {self.target.describe()} may not create roles: no login can be lent")
            with admin.transaction():
                admin.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (_ROLE_LOCK,))
                _drop_expired(admin)
                group = reader_group(self.target.name)
                rerecorded = _grant_group(admin, self.target, group)
                self._create(admin, user, password, group, expires_at, superuser, label)
            if rerecorded is not None:
                meta.write(self.target, rerecorded)
        try:  # its warnings are the ones provisioning logged for evalbench_sandbox: the same rights
            verify_reader(self.target, Login(user, password))
        except (SandboxError, psycopg.Error) as exc:
            with contextlib.suppress(Exception):  # the refusal is what matters; the role is NOLOGIN or swept later
                self.revoke(user)
            message = str(exc) if isinstance(exc, SandboxError) else pg_message(exc)
            raise LendingError(f"the lent login cannot be used safely on {self.target.describe()}: {message}") from None
        url = self.target.url(user=user, password=password)
        fields = {key: str(value) for key, value in (("host", url.host or url.query.get("host")), ("port", url.port),
                                                     ("user", user), ("password", password),
                                                     ("database", self.target.name)) if value}
        return Lent(user, url.set(drivername="postgresql").render_as_string(hide_password=False), fields, expires_at,
                    lambda: self.revoke(user))

    def _create(self, admin: psycopg.Connection, user: str, password: str, group: str, expires_at: float,
                superuser: bool, label: str) -> None:
        ident = sql.Identifier(user)
        until = datetime.fromtimestamp(expires_at, timezone.utc).isoformat()
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN INHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS "
                              "CONNECTION LIMIT {} PASSWORD {} VALID UNTIL {} IN ROLE {}").format(
            ident, sql.Literal(CONNECTION_LIMIT), sql.Literal(password), sql.Literal(until), sql.Identifier(group)))
        settings = {"default_transaction_read_only": "on", "statement_timeout": str(self.statement_timeout_ms),
                    "idle_in_transaction_session_timeout": str(max(60_000, self.statement_timeout_ms * 4))}
        if superuser:
            settings.update(QUIET_SETTINGS)
        for name, value in settings.items():
            admin.execute(sql.SQL("ALTER ROLE {} SET {} = {}").format(ident, sql.Identifier(name), sql.Literal(value)))
        admin.execute(sql.SQL("COMMENT ON ROLE {} IS {}").format(
            ident, sql.Literal(f"evalbench lent login ({label}), on {self.target.name}, until {until}")))

    def revoke(self, user: str) -> None:
        """No new session, its sessions ended, the role dropped (left NOLOGIN when it cannot be)."""
        ident = sql.Identifier(user)
        with self._admin(None) as admin:
            if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (user,)).fetchone() is None:
                return  # dropped already (by another process's sweep of expired logins)
            admin.execute(sql.SQL("ALTER ROLE {} NOLOGIN").format(ident))
            alive = _terminate(admin, user)
            try:
                admin.execute(sql.SQL("DROP ROLE {}").format(ident))
            except psycopg.Error as exc:
                raise LendingError(f"{user} is NOLOGIN but not dropped: {pg_message(exc)}") from None
        if alive:
            raise LendingError(f"{user} is dropped, but {alive} of its sessions could not be terminated")

    def _admin(self, database: str | None) -> psycopg.Connection:
        """The admin's connection (every statement bounded): to ``database``, or the maintenance one."""
        name = database or self.target.admin.database or "postgres"
        return self.target.connect(name, autocommit=True, connect_timeout=5, options=_ADMIN_OPTIONS)


def _terminate(admin: psycopg.Connection, user: str) -> int:
    """End ``user``'s sessions, waiting up to 2 s for each; how many could not be ended (an
    admin that is not a superuser may lack the right to signal them)."""
    pids = [row[0] for row in admin.execute("SELECT pid FROM pg_stat_activity WHERE usename = %s", (user,)).fetchall()]
    failed = 0
    for pid in pids:
        try:
            with admin.transaction():  # a savepoint when called inside a transaction
                admin.execute("SELECT pg_terminate_backend(%s, 2000)", (pid,))
        except psycopg.Error:
            failed += 1
    return failed


def _drop_expired(admin: psycopg.Connection) -> None:
    """Drop the lent roles a minute past their expiry (their process died before revoking them)."""
    expired = admin.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE %s AND rolvaliduntil < now() - interval '1 minute'",
                            (PREFIX.replace("_", r"\_") + "%",)).fetchall()
    for (user,) in expired:
        admin.execute(sql.SQL("ALTER ROLE {} NOLOGIN").format(sql.Identifier(user)))
        _terminate(admin, user)
        try:
            with admin.transaction():  # a savepoint: the lend goes on
                admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(user)))
        except psycopg.Error:  # it owns something somewhere: it cannot log in all the same
            pass
