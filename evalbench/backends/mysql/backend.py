"""MySQL / MariaDB behind the :class:`~evalbench.backends.base.Backend` interface."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pymysql

from evalbench.backends.base import DatabaseUnavailable, Provisioned, SandboxLimits
from evalbench.backends.mysql import identities
from evalbench.backends.mysql.harness import Harness
from evalbench.backends.mysql.identities import READ_PRIVILEGES, Identity
from evalbench.backends.mysql.provision import admin_connection, ensure_meta, non_transactional_tables, provision
from evalbench.backends.mysql.sandbox import MySQLSandbox
from evalbench.backends.mysql.target import MySQLTarget, quote, resolve_target
from evalbench.backends.setup import SetupFiles
from evalbench.core.errors import ProvisioningError

if TYPE_CHECKING:
    from evalbench.config import DatabaseConfig


class MySQLBackend:
    name = "mysql"
    dialect = "mysql"

    def setup_dialects(self) -> Sequence[str]:
        return ("mysql", "mariadb")

    def provision(self, config: DatabaseConfig, setup: SetupFiles | None, embedded_dir: Path | None) -> Provisioned:
        target = resolve_target(config)
        report, logins = provision(config, target, setup)
        warning = None
        if report.non_transactional:
            warning = (f"table(s) {', '.join(report.non_transactional)} use an engine that cannot roll back: "
                       "management tasks (write mode) are refused on this database")
        return Provisioned(action=report.action, checksum=report.checksum,
                           sandbox_user=identities.agent_user(target.name, 0).replace("a0_", "a<n>_"),
                           tables_loaded=report.tables_loaded, rows_loaded=report.rows_loaded, warning=warning,
                           handle=(target, logins, report.non_transactional, report.counters))

    def open_sandbox(self, config: DatabaseConfig, provisioned: Provisioned, limits: SandboxLimits,
                     embedded_dir: Path | None) -> MySQLSandbox:
        target, logins, non_transactional, setup_counters = provisioned.handle
        return MySQLSandbox(target, logins, limits, non_transactional, setup_counters)

    def describe_schema(self, sandbox: MySQLSandbox) -> str:
        """``SHOW CREATE TABLE`` of each table and the definition of each view, as a read user sees them."""
        parts = []
        for table, kind in sandbox.rows("SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES "
                                        "WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME"):
            if kind == "VIEW":
                rows = sandbox.rows("SELECT VIEW_DEFINITION FROM information_schema.VIEWS WHERE TABLE_SCHEMA = DATABASE() "
                                    "AND TABLE_NAME = %s", (table,))
                parts.append(f"CREATE VIEW {quote(table)} AS {rows[0][0] if rows else '...'};")
            else:
                parts.append(sandbox.rows(f"SHOW CREATE TABLE {quote(table)}")[0][1] + ";")
        return "\n\n".join(parts)

    def probe(self, config: DatabaseConfig, setup: SetupFiles | None, embedded_dir: Path | None, timeout_s: float) -> str:
        """The server answers the admin login, the database exists (or has a setup), and the
        golden and agent users log in (created as provisioning and the sandbox do; an agent
        user leased for the probe is dropped after it)."""
        target = resolve_target(config)
        admin = admin_connection(target, timeout_s)
        try:
            with admin.cursor() as cursor:
                cursor.execute("SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (target.name,))
                exists = cursor.fetchone() is not None
                cursor.execute("SELECT VERSION()")
                version = cursor.fetchall()[0][0]  # one row
            if not exists and setup is None:
                raise ProvisioningError(f"database {target.name!r} does not exist on {target.describe()} and there is no "
                                        "setup for it; set setup_directory to a folder holding a sub-folder with this name")
            ensure_meta(admin)
            logins = identities.golden_logins(admin, target.name)
            warning = non_transactional_tables(admin, target.name) if exists else []
        finally:
            admin.close()
        _login(target, logins.golden_read, timeout_s)
        harness = Harness(target, logins, {})
        try:
            agent = harness.lease([READ_PRIVILEGES])[0]
            _login(target, agent, timeout_s)
        finally:
            harness.close()
        state = "exists" if exists else "will be created from its setup"
        extra = f"; write mode refused (non-transactional tables: {', '.join(warning)})" if warning else ""
        return (f"{target.describe()} ({version}) reachable; the database {state}; golden SQL runs as "
                f"{logins.golden_read.user!r}, agent SQL as a user of its own per connection (logged in){extra}")


def _login(target: MySQLTarget, identity: Identity, timeout_s: float) -> None:
    try:
        target.connect(identity.user, identity.password, timeout_s=timeout_s).close()
    except pymysql.Error as exc:
        raise DatabaseUnavailable(f"the sandbox user {identity.user!r} cannot log in to {target.host}:{target.port} "
                                  f"({exc.args[-1] if exc.args else exc}); check that the server accepts "
                                  f"{identity.user!r}@'%' from this host") from None
