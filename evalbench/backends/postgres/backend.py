"""PostgreSQL behind the :class:`~evalbench.backends.base.Backend` interface: the embedded server
(pgserver) or an external one, provisioned from a setup directory, golden and agent SQL run as
roles of their own (:mod:`.roles`, :mod:`.sandbox`), test cases on throwaway copies (:mod:`.clones`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from evalbench.backends.base import DatabaseUnavailable, Provisioned, SandboxLimits
from evalbench.backends.postgres.clones import CloneFactory
from evalbench.backends.postgres.lending import PostgresLender
from evalbench.backends.postgres.provision import DIALECT_DIRS, ProvisionReport, provision
from evalbench.backends.postgres.roles import Login, logins
from evalbench.backends.postgres.sandbox import Identities, Sandbox
from evalbench.backends.postgres.schema import describe_schema
from evalbench.backends.postgres.target import DatabaseTarget, libpq_conninfo, resolve_target
from evalbench.backends.setup import SetupFiles
from evalbench.clients.probes import first_line
from evalbench.core.errors import ProvisioningError

if TYPE_CHECKING:
    from evalbench.config import DatabaseConfig


class PostgresBackend:
    name = "postgres"
    dialect = "postgres"

    def setup_dialects(self) -> Sequence[str]:
        return DIALECT_DIRS["postgres"]

    def target(self, config: DatabaseConfig, embedded_dir: Path | None) -> DatabaseTarget:
        """Where the database lives (starts the embedded server when it is the one)."""
        return resolve_target(config, embedded_dir)

    def provision(self, config: DatabaseConfig, setup: SetupFiles | None, embedded_dir: Path | None) -> Provisioned:
        return self._provision(self.target(config, embedded_dir), setup)

    def _provision(self, target: DatabaseTarget, setup: SetupFiles | None) -> Provisioned:
        report = provision(target, setup)
        return Provisioned(action=report.action, checksum=report.checksum, sandbox_user=report.sandbox_user,
                           tables_loaded=report.tables_loaded, rows_loaded=report.rows_loaded, warning=report.warning,
                           handle=(target, report))

    def open_sandbox(self, config: DatabaseConfig, provisioned: Provisioned, limits: SandboxLimits,
                     embedded_dir: Path | None) -> Sandbox:
        target, report = provisioned.handle
        return open_sandbox(target, report, limits)

    def describe_schema(self, sandbox: Sandbox) -> str:
        return describe_schema(sandbox.open_connection)

    def probe(self, config: DatabaseConfig, setup: SetupFiles | None, embedded_dir: Path | None, timeout_s: float) -> str:
        """The server is reachable as admin and the sandbox role logs in (created if missing, as
        provisioning does); the database itself exists, or has a setup to create it from."""
        return self._probe(self.target(config, embedded_dir), setup, timeout_s)

    def _probe(self, target: DatabaseTarget, setup: SetupFiles | None, timeout_s: float) -> str:
        import psycopg

        fix = "start the server, or fix this database's db config (url, or host/port/user_name/password)"
        try:
            admin = target.connect_admin(autocommit=True, connect_timeout=max(2, round(timeout_s)))
        except psycopg.Error as exc:
            raise DatabaseUnavailable(f"cannot connect to {target.describe()} ({first_line(exc)}); {fix}") from None
        with admin:
            exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (target.name,)).fetchone() is not None
            if not exists and setup is None:
                raise ProvisioningError(f"database {target.name!r} does not exist on {target.describe()} and there is no setup "
                                        "for it; set setup_directory to a folder holding a sub-folder with this name")
            # a database provisioning will create (or grant to) is not ready: the roles log in to the maintenance database
            reader = logins(target, admin, database_ready=exists and setup is not None).reader
        state = "exists" if exists else "will be created from its setup"
        return f"{target.describe()} reachable; the database {state}; agent SQL runs as {reader.user!r} (logged in)"


def open_sandbox(target: DatabaseTarget, report: ProvisionReport, limits: SandboxLimits) -> Sandbox:
    """The sandbox of a provisioned database: each role through its own login, never the admin's
    (test cases, when they can run on copies, on copies of its template)."""
    roles = report.logins
    opened: dict[str, Callable[..., psycopg.Connection]] = {}  # one per role (a configured user may be all three)

    def connect_as(login: Login) -> Callable[..., psycopg.Connection]:
        if target.connector is not None:  # Google's connector: no libpq connection string (no test cases)
            return opened.setdefault(login.user, lambda **kwargs: target.connect(user=login.user, password=login.password,
                                                                                 **kwargs))
        conninfo = libpq(login)
        return opened.setdefault(login.user, lambda **kwargs: psycopg.connect(conninfo, **kwargs))

    def libpq(login: Login) -> str:
        return libpq_conninfo(target.url(user=login.user, password=login.password))

    identities = Identities(connect_as(roles.reader), connect_as(roles.writer), connect_as(roles.golden),
                            "" if target.connector is not None else libpq(roles.writer))
    sandbox = Sandbox(identities.writer_conninfo, pool_size=limits.pool_size, statement_timeout_s=limits.statement_timeout_s,
                      max_rows=limits.max_rows, max_result_bytes=limits.max_result_bytes,
                      executions_per_minute=limits.executions_per_minute, identities=identities)
    if report.template is not None and target.connector is None:  # test cases run on throwaway copies, each statement committed
        sandbox.clones = CloneFactory(libpq_conninfo(target.admin), report.template, identities.writer_conninfo,
                                      roles.writer.user)
    if target.connector is None:  # a lent login is a connection string: none through a cloud connector
        sandbox.lender = PostgresLender(target, limits.statement_timeout_s)
    return sandbox
