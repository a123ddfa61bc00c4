"""Provisioning a MySQL / MariaDB database from a setup directory.

Which databases evalbench built, and from which setup, is kept in a schema of its own,
``evalbench_meta`` (a table per fact; no sandbox user has a grant on it), because MySQL has no
database comment (MariaDB's ``COMMENT`` is not in MySQL). An unchanged setup is reused, a
changed one rebuilt, and a database evalbench did not create is never dropped unless the db
config says ``allow_destructive_setup``. A database is marked "being built" before it is
dropped and given its checksum when whole, so a crash leaves one that is rebuilt.

Once setup is done, its catalog fingerprint (:mod:`.catalog`) and its counters
(:mod:`.counters`) are recorded in ``evalbench_meta.setups``. Before a database is reused, its
catalog must be the one recorded: a changed database is refused (rebuilt under
``allow_destructive_setup``), and its counters are put back where setup left them (a run stopped
mid-write leaves them advanced). Golden and agent SQL run as users of their own
(:mod:`.identities`), never as the configured admin.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pymysql

from evalbench.backends.base import DatabaseUnavailable
from evalbench.backends.mysql import catalog, counters, identities
from evalbench.backends.mysql.identities import META, Logins, execute, rows
from evalbench.backends.mysql.target import MySQLConnection, MySQLTarget, quote
from evalbench.backends.setup import SetupFiles, value_batches
from evalbench.core.errors import ProvisioningError
from evalbench.sql.statements import split_statements

if TYPE_CHECKING:
    from evalbench.config import DatabaseConfig

PROVISIONING_VERSION = "mysql-2"
_BUILDING = "building"
_INSERT_BATCH = 500
_LOCK_WAIT_S = 600  # provisioning of the same database by another run
_SHOWN_CHANGES = 8


@dataclass
class Report:
    action: str
    checksum: str | None = None
    tables_loaded: int = 0
    rows_loaded: int = 0
    non_transactional: list[str] = field(default_factory=list)
    counters: counters.Counters = field(default_factory=dict)  # where setup left them: every write puts them back


def admin_connection(target: MySQLTarget, timeout_s: float = 10) -> MySQLConnection:
    try:
        return target.connect(timeout_s=timeout_s)
    except pymysql.Error as exc:
        raise DatabaseUnavailable(f"cannot connect to {target.describe()} ({exc.args[-1] if exc.args else exc}); start "
                                  "the server, or fix this database's db config (url, or database_path/user_name/password)") from None


def provision(config: DatabaseConfig, target: MySQLTarget, setup: SetupFiles | None) -> tuple[Report, Logins]:
    """Create, check and reuse, or rebuild the database, and its golden logins (see the module's docstring)."""
    admin = admin_connection(target)
    try:
        identities.require_user_admin(admin)
        identities.refuse_shared_grants(admin)
        ensure_meta(admin)
        logins = identities.golden_logins(admin, target.name)
        counters.live_statistics(admin, logins.mariadb)
        with named_lock(admin, f"evalbench:db:{target.name}"):
            report = _database(admin, config, target, setup)
            with named_lock(admin, identities.write_lock_name(target.name, logins.lock_key)):  # no other write is open
                report.counters = _settled_counters(admin, target.name, report)
        report.non_transactional = non_transactional_tables(admin, target.name)
    finally:
        admin.close()
    return report, logins


def _database(admin: MySQLConnection, config: DatabaseConfig, target: MySQLTarget, setup: SetupFiles | None) -> Report:
    exists = bool(rows(admin, "SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (target.name,)))
    if setup is None:
        if not exists:
            raise ProvisioningError(f"database {target.name!r} does not exist on {target.describe()} and there is no setup "
                                    "for it; set setup_directory to a folder holding a sub-folder with this name")
        return Report("external")
    checksum = setup.checksum(PROVISIONING_VERSION)
    mark = read_mark(admin, target.name)
    if exists and mark == checksum:
        changed = _catalog_changes(admin, target.name)
        if not changed:
            return Report("reused", checksum)
        if not config.allow_destructive_setup:
            shown = ", ".join(changed[:_SHOWN_CHANGES]) + (f" and {len(changed) - _SHOWN_CHANGES} more"
                                                           if len(changed) > _SHOWN_CHANGES else "")
            raise ProvisioningError(f"database {target.name!r} on {target.describe()} was changed after evalbench set it up "
                                    f"({shown}); a changed database is not evaluated: set allow_destructive_setup: true in "
                                    "its db config to rebuild it from its setup, or drop it")
    elif exists and mark is None and not config.allow_destructive_setup:
        raise ProvisioningError(f"database {target.name!r} exists on {target.describe()} and was not created by evalbench; "
                                "set allow_destructive_setup: true in its db config to let evalbench drop and re-create it, "
                                "or leave it out of setup_directory to use it as is")
    return _build(admin, target, setup, checksum, exists)


def _build(admin: MySQLConnection, target: MySQLTarget, setup: SetupFiles, checksum: str, exists: bool) -> Report:
    _set_mark(admin, target.name, _BUILDING)
    execute(admin, f"DROP DATABASE IF EXISTS {quote(target.name)}")
    execute(admin, f"CREATE DATABASE {quote(target.name)} CHARACTER SET utf8mb4")
    admin.select_db(target.name)
    for script in (setup.pre_setup, setup.setup):
        if script:
            run_script(admin, script)
    loaded = sum(_load_csv(admin, data) for data in setup.data)
    if setup.post_setup:
        run_script(admin, setup.post_setup)
    counters.settle_sequences(admin, target.name)
    execute(admin, f"REPLACE INTO {META}.setups (name, catalog, counters) VALUES (%s, %s, %s)",
            (target.name, json.dumps(catalog.fingerprint(admin, target.name)),
             json.dumps(counters.read(admin, target.name))))
    _set_mark(admin, target.name, checksum)
    return Report("rebuilt" if exists else "created", checksum, len(setup.data), loaded)


def _recorded(admin: MySQLConnection, name: str) -> tuple[catalog.Catalog, counters.Counters] | None:
    found = rows(admin, f"SELECT catalog, counters FROM {META}.setups WHERE name = %s", (name,))
    return (json.loads(found[0][0]), json.loads(found[0][1])) if found else None


def _catalog_changes(admin: MySQLConnection, name: str) -> list[str]:
    """What differs from the catalog setup made (everything, when none was recorded)."""
    recorded = _recorded(admin, name)
    if recorded is None:
        return ["no catalog was recorded at setup"]
    return catalog.changes(recorded[0], catalog.fingerprint(admin, name))


def _settled_counters(admin: MySQLConnection, name: str, report: Report) -> counters.Counters:
    """The counters every write puts back: setup's (restored now if a stopped run left them
    advanced); a database evalbench did not set up keeps the ones it has now."""
    recorded = _recorded(admin, name) if report.action != "external" else None
    if recorded is None:
        return counters.read(admin, name)
    counters.restore(admin, name, recorded[1])
    return recorded[1]


def ensure_meta(admin: MySQLConnection) -> None:
    execute(admin, f"CREATE DATABASE IF NOT EXISTS {META}")
    execute(admin, f"CREATE TABLE IF NOT EXISTS {META}.databases (name VARCHAR(64) PRIMARY KEY, "
                   "checksum VARCHAR(64) NOT NULL, provisioned_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP) ENGINE=InnoDB")
    execute(admin, f"CREATE TABLE IF NOT EXISTS {META}.logins (user VARCHAR(32) PRIMARY KEY, "
                   "password VARCHAR(64) NOT NULL) ENGINE=InnoDB")
    execute(admin, f"CREATE TABLE IF NOT EXISTS {META}.setups (name VARCHAR(64) PRIMARY KEY, "
                   "catalog MEDIUMTEXT NOT NULL, counters MEDIUMTEXT NOT NULL) ENGINE=InnoDB")


def read_mark(admin: MySQLConnection, name: str) -> str | None:
    found = rows(admin, f"SELECT checksum FROM {META}.databases WHERE name = %s", (name,))
    return found[0][0] if found else None


def _set_mark(admin: MySQLConnection, name: str, checksum: str) -> None:
    execute(admin, f"REPLACE INTO {META}.databases (name, checksum) VALUES (%s, %s)", (name, checksum))


def drop_database(admin: MySQLConnection, name: str) -> None:
    """Drop a database evalbench created, what it recorded of it, and its users."""
    execute(admin, f"DROP DATABASE IF EXISTS {quote(name)}")
    execute(admin, f"DELETE FROM {META}.databases WHERE name = %s", (name,))
    execute(admin, f"DELETE FROM {META}.setups WHERE name = %s", (name,))
    identities.drop_all_users(admin, name)


@contextmanager
def named_lock(admin: MySQLConnection, name: str) -> Iterator[None]:
    """A server-wide lock (GET_LOCK): two runs provisioning the same database take turns."""
    key = name[:64]
    if not rows(admin, "SELECT GET_LOCK(%s, %s)", (key, _LOCK_WAIT_S))[0][0]:
        raise ProvisioningError(f"timed out waiting for another run to finish provisioning ({key})")
    try:
        yield
    finally:
        rows(admin, "SELECT RELEASE_LOCK(%s)", (key,))


def non_transactional_tables(admin: MySQLConnection, database: str) -> list[str]:
    """Tables whose engine cannot roll back (MyISAM, MEMORY, Aria...): writes to them would stay."""
    return [r[0] for r in rows(admin, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                                       "TABLE_TYPE = 'BASE TABLE' AND ENGINE NOT IN ('InnoDB', 'XtraDB') ORDER BY 1",
                                (database,))]


def run_script(admin: MySQLConnection, path: Path) -> None:
    """Run a setup script statement by statement; an error names the file and the line."""
    text = path.read_text(encoding="utf-8-sig")
    position = 0
    for statement in split_statements(text, "mysql"):
        found = text.find(statement, position)
        position = found if found >= 0 else position
        try:
            execute(admin, statement)
        except pymysql.Error as exc:
            line = text.count("\n", 0, position) + 1
            raise ProvisioningError(f"{path}:{line}: {exc.args[-1] if exc.args else exc}") from None


def _load_csv(admin: MySQLConnection, path: Path) -> int:
    head = f"INSERT INTO {quote(path.stem)} VALUES "
    count = 0
    for batch in value_batches(path, _INSERT_BATCH):
        try:
            execute(admin, head + ", ".join(values for _, values in batch))
        except pymysql.Error as exc:
            raise ProvisioningError(f"{path}:{_offending_line(admin, head, batch)}: {exc.args[-1] if exc.args else exc}") from None
        count += len(batch)
    return count


def _offending_line(admin: MySQLConnection, head: str, batch: list[tuple[int, str]]) -> str:
    """The line of the first row of a failed batch that fails alone (tried in a transaction
    rolled back, so nothing of the search stays)."""
    execute(admin, "START TRANSACTION")
    try:
        for line, values in batch:
            try:
                execute(admin, head + values)
            except pymysql.Error:
                return str(line)
    finally:
        execute(admin, "ROLLBACK")
    return f"{batch[0][0]}-{batch[-1][0]}"
