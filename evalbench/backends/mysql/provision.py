"""Provisioning a MySQL / MariaDB database from a setup directory, and the sandbox's logins.

Which databases evalbench built, and from which setup, is kept in a schema of its own,
``evalbench_meta`` (a table per fact; the sandbox users have no grant on it), because MySQL has
no database comment (MariaDB's ``COMMENT`` is not in MySQL). An unchanged setup is reused, a
changed one rebuilt, and a database evalbench did not create is never dropped unless the db
config says ``allow_destructive_setup``. A database is marked "being built" before it is
dropped and given its checksum when whole, so a crash leaves one that is rebuilt.

Agent SQL runs as two users of the database created here, never as the configured admin:
``evalbench_r_<hash>`` (``SELECT`` and ``SHOW VIEW`` on that database only) for reads and
``evalbench_w_<hash>`` (``SELECT, INSERT, UPDATE, DELETE``) for management tasks, so agent SQL
cannot reach another database of the server. Neither has a global privilege (``FILE``, ``SUPER``, ``PROCESS``...) nor any DDL privilege: MySQL
commits DDL at once, so no DDL may run where it would have to be rolled back.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalbench.backends.mysql.target import MySQLTarget, quote
from evalbench.backends.setup import SetupFiles, value_batches
from evalbench.errors import ProvisioningError, SandboxError
from evalbench.statements import split_statements

if TYPE_CHECKING:
    from evalbench.config import DatabaseConfig

PROVISIONING_VERSION = "mysql-1"
META = "evalbench_meta"
USER_PREFIX = "evalbench_"
_READ_PRIVILEGES = "SELECT, SHOW VIEW"
_WRITE_PRIVILEGES = "SELECT, INSERT, UPDATE, DELETE"
_BUILDING = "building"
_INSERT_BATCH = 500
_LOCK_WAIT_S = 600  # provisioning of the same database by another run


@dataclass(frozen=True)
class Logins:
    """The sandbox users of one database and their passwords (kept in ``evalbench_meta``,
    readable by admin only)."""

    read_user: str
    read_password: str
    write_user: str
    write_password: str
    mariadb: bool  # the server is MariaDB (its timeout variable differs from MySQL's)


def sandbox_users(database: str) -> tuple[str, str]:
    """(read user, write user) of ``database``: named by a hash of its name (MySQL user names
    have at most 32 characters)."""
    suffix = hashlib.sha256(database.encode()).hexdigest()[:12]
    return f"{USER_PREFIX}r_{suffix}", f"{USER_PREFIX}w_{suffix}"


@dataclass
class Report:
    action: str
    checksum: str | None = None
    tables_loaded: int = 0
    rows_loaded: int = 0
    non_transactional: list[str] = field(default_factory=list)


def admin_connection(target: MySQLTarget, timeout_s: float = 10) -> Any:
    import pymysql

    try:
        return target.connect(timeout_s=timeout_s)
    except pymysql.Error as exc:
        from evalbench.backends.base import DatabaseUnavailable

        raise DatabaseUnavailable(f"cannot connect to {target.describe()} ({exc.args[-1] if exc.args else exc}); start "
                                  "the server, or fix this database's db config (url, or database_path/user_name/password)") from None


def provision(config: DatabaseConfig, target: MySQLTarget, setup: SetupFiles | None) -> tuple[Report, Logins]:
    """Create or reuse the database and its sandbox logins (see the module's docstring)."""
    admin = admin_connection(target)
    try:
        ensure_meta(admin)
        with named_lock(admin, f"evalbench:db:{target.name}"):
            report = _database(admin, config, target, setup)
        logins = sandbox_logins(admin, target.name)
        report.non_transactional = non_transactional_tables(admin, target.name)
    finally:
        admin.close()
    return report, logins


def _database(admin: Any, config: DatabaseConfig, target: MySQLTarget, setup: SetupFiles | None) -> Report:
    exists = bool(_rows(admin, "SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (target.name,)))
    if setup is None:
        if not exists:
            raise ProvisioningError(f"database {target.name!r} does not exist on {target.describe()} and there is no setup "
                                    "for it; set setup_directory to a folder holding a sub-folder with this name")
        return Report("external")
    checksum = setup.checksum(PROVISIONING_VERSION)
    mark = read_mark(admin, target.name)
    if exists and mark == checksum:
        return Report("reused", checksum)
    if exists and mark is None and not config.allow_destructive_setup:
        raise ProvisioningError(f"database {target.name!r} exists on {target.describe()} and was not created by evalbench; "
                                "set allow_destructive_setup: true in its db config to let evalbench drop and re-create it, "
                                "or leave it out of setup_directory to use it as is")
    _set_mark(admin, target.name, _BUILDING)
    _execute(admin, f"DROP DATABASE IF EXISTS {quote(target.name)}")
    _execute(admin, f"CREATE DATABASE {quote(target.name)} CHARACTER SET utf8mb4")
    admin.select_db(target.name)
    for script in (setup.pre_setup, setup.setup):
        if script:
            run_script(admin, script)
    rows = sum(_load_csv(admin, data) for data in setup.data)
    if setup.post_setup:
        run_script(admin, setup.post_setup)
    _set_mark(admin, target.name, checksum)
    return Report("rebuilt" if exists else "created", checksum, len(setup.data), rows)


def ensure_meta(admin: Any) -> None:
    _execute(admin, f"CREATE DATABASE IF NOT EXISTS {META}")
    _execute(admin, f"CREATE TABLE IF NOT EXISTS {META}.databases (name VARCHAR(64) PRIMARY KEY, "
                    "checksum VARCHAR(64) NOT NULL, provisioned_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP) ENGINE=InnoDB")
    _execute(admin, f"CREATE TABLE IF NOT EXISTS {META}.logins (user VARCHAR(32) PRIMARY KEY, "
                    "password VARCHAR(64) NOT NULL) ENGINE=InnoDB")


def read_mark(admin: Any, name: str) -> str | None:
    rows = _rows(admin, f"SELECT checksum FROM {META}.databases WHERE name = %s", (name,))
    return rows[0][0] if rows else None


def _set_mark(admin: Any, name: str, checksum: str) -> None:
    _execute(admin, f"REPLACE INTO {META}.databases (name, checksum) VALUES (%s, %s)", (name, checksum))


def drop_database(admin: Any, name: str) -> None:
    """Drop a database evalbench created, its mark and its sandbox users."""
    import pymysql

    _execute(admin, f"DROP DATABASE IF EXISTS {quote(name)}")
    _execute(admin, f"DELETE FROM {META}.databases WHERE name = %s", (name,))
    for user in sandbox_users(name):
        with suppress(pymysql.Error):
            _execute(admin, "DROP USER IF EXISTS %s@'%%'", (user,))
        _execute(admin, f"DELETE FROM {META}.logins WHERE user = %s", (user,))


@contextmanager
def named_lock(admin: Any, name: str) -> Iterator[None]:
    """A server-wide lock (GET_LOCK): two runs provisioning the same database take turns."""
    key = name[:64]
    if not _rows(admin, "SELECT GET_LOCK(%s, %s)", (key, _LOCK_WAIT_S))[0][0]:
        raise ProvisioningError(f"timed out waiting for another run to finish provisioning ({key})")
    try:
        yield
    finally:
        _rows(admin, "SELECT RELEASE_LOCK(%s)", (key,))


def sandbox_logins(admin: Any, database: str) -> Logins:
    """Create (or repair) the two sandbox users of ``database``; refuses an admin that may not
    create users (agent SQL must not run as the admin)."""
    if not _may_create_users(admin):
        current = _rows(admin, "SELECT CURRENT_USER()")[0][0]
        raise SandboxError(f"the configured user {current!r} may not create users, and agent SQL must not run as it; "
                           "give a user with CREATE USER and GRANT OPTION (e.g. root)")
    read_user, write_user = sandbox_users(database)
    with named_lock(admin, "evalbench:logins"):
        passwords = {}
        for user, privileges in ((read_user, _READ_PRIVILEGES), (write_user, _WRITE_PRIVILEGES)):
            passwords[user] = _login(admin, user)
            _execute(admin, f"GRANT {privileges} ON {quote(database)}.* TO %s@'%%'", (user,))
    version = _rows(admin, "SELECT VERSION()")[0][0]
    return Logins(read_user, passwords[read_user], write_user, passwords[write_user], "mariadb" in str(version).lower())


def _login(admin: Any, user: str) -> str:
    """The user's password (created with a random one when missing); global privileges revoked."""
    rows = _rows(admin, f"SELECT password FROM {META}.logins WHERE user = %s", (user,))
    password = rows[0][0] if rows else secrets.token_urlsafe(24)
    if not rows:
        _execute(admin, f"INSERT INTO {META}.logins (user, password) VALUES (%s, %s)", (user, password))
    _execute(admin, "CREATE USER IF NOT EXISTS %s@'%%' IDENTIFIED BY %s", (user, password))
    _execute(admin, "ALTER USER %s@'%%' IDENTIFIED BY %s", (user, password))
    grantee = f"'{user}'@'%'"
    if _rows(admin, "SELECT 1 FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = %s AND PRIVILEGE_TYPE <> 'USAGE'",
             (grantee,)):
        # someone granted it more: global privileges go (its grants on evaluated databases stay)
        _execute(admin, "REVOKE ALL PRIVILEGES ON *.* FROM %s@'%%'", (user,))
        if _rows(admin, "SELECT 1 FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = %s AND IS_GRANTABLE = 'YES'",
                 (grantee,)):
            _execute(admin, "REVOKE GRANT OPTION ON *.* FROM %s@'%%'", (user,))
    return password


def _may_create_users(admin: Any) -> bool:
    grants = " ".join(row[0] for row in _rows(admin, "SHOW GRANTS")).upper()
    return "ON *.*" in grants and ("ALL PRIVILEGES" in grants or "CREATE USER" in grants)


def non_transactional_tables(admin: Any, database: str) -> list[str]:
    """Tables whose engine cannot roll back (MyISAM, MEMORY, Aria...): writes to them would stay."""
    return [r[0] for r in _rows(admin, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                                       "TABLE_TYPE = 'BASE TABLE' AND ENGINE NOT IN ('InnoDB', 'XtraDB') ORDER BY 1",
                                (database,))]


def run_script(admin: Any, path: Path) -> None:
    """Run a setup script statement by statement; an error names the file and the line."""
    import pymysql

    text = path.read_text(encoding="utf-8-sig")
    position = 0
    for statement in split_statements(text, "mysql"):
        found = text.find(statement, position)
        position = found if found >= 0 else position
        try:
            _execute(admin, statement)
        except pymysql.Error as exc:
            line = text.count("\n", 0, position) + 1
            raise ProvisioningError(f"{path}:{line}: {exc.args[-1] if exc.args else exc}") from None


def _load_csv(admin: Any, path: Path) -> int:
    import pymysql

    head = f"INSERT INTO {quote(path.stem)} VALUES "
    count = 0
    for batch in value_batches(path, _INSERT_BATCH):
        try:
            _execute(admin, head + ", ".join(values for _, values in batch))
        except pymysql.Error as exc:
            raise ProvisioningError(f"{path}:{_offending_line(admin, head, batch)}: {exc.args[-1] if exc.args else exc}") from None
        count += len(batch)
    return count


def _offending_line(admin: Any, head: str, batch: list[tuple[int, str]]) -> str:
    """The line of the first row of a failed batch that fails alone (tried in a transaction
    rolled back, so nothing of the search stays)."""
    import pymysql

    _execute(admin, "START TRANSACTION")
    try:
        for line, values in batch:
            try:
                _execute(admin, head + values)
            except pymysql.Error:
                return str(line)
    finally:
        _execute(admin, "ROLLBACK")
    return f"{batch[0][0]}-{batch[-1][0]}"


def _execute(conn: Any, statement: str, params: Any = None) -> None:
    with conn.cursor() as cursor:
        cursor.execute(statement, params)


def _rows(conn: Any, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor() as cursor:
        cursor.execute(statement, params)
        return list(cursor.fetchall())
