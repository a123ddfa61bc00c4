"""The database identities golden and agent SQL run as on a MySQL / MariaDB database.

A user without ``PROCESS`` still sees the threads of its own user (``SHOW PROCESSLIST``,
``information_schema.PROCESSLIST`` with the statement text, MariaDB's ``SHOW EXPLAIN FOR``), so
who runs what is decided by user:

- **Golden SQL** runs as two users of the database, named by a hash of its name, with random
  passwords kept in ``evalbench_meta.logins``: ``evalbench_gr_<hash>`` (``SELECT, SHOW VIEW``) for
  reads and ``evalbench_gw_<hash>`` (``SELECT, INSERT, UPDATE, DELETE``) for writes.
- **Agent SQL** runs as one user per pooled connection, ``evalbench_a<n>_<hash>``, leased by the
  sandbox for its life: created afresh with a random password that only the leasing process
  knows, and dropped when the sandbox closes. So no agent statement shares a user with golden
  SQL or with a statement another conversation runs at the same time.

A lease is a named lock (``GET_LOCK``) held by the sandbox's harness connection, never by a
connection agent SQL runs on; the server releases it when that connection ends, so an agent user
whose lock is free belongs to no live sandbox (its process died): the next lease drops it.

None of these users has a global privilege or any privilege outside its database, nor one to
create or change an object (MySQL commits DDL at once); grants that reach every user (an
anonymous user's database grants, MariaDB's ``PUBLIC``, MySQL's ``mandatory_roles``) are refused.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field

import pymysql

from evalbench.backends.base import HarnessRow, QueryParams
from evalbench.backends.mysql.target import MySQLConnection, quote
from evalbench.core.errors import SandboxError

META = "evalbench_meta"
USER_PREFIX = "evalbench_"
READ_PRIVILEGES = "SELECT, SHOW VIEW"
WRITE_PRIVILEGES = "SELECT, INSERT, UPDATE, DELETE"
MAX_AGENT_USERS = 1000  # agent users of one database at a time (every live sandbox's pool)


@dataclass(frozen=True)
class Identity:
    """A user SQL runs as, and its password."""

    user: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class Logins:
    """The golden identities of one database, and what the server is."""

    golden_read: Identity
    golden_write: Identity
    mariadb: bool  # MariaDB (its timeout variable and its sequences differ from MySQL's)

    @property
    def lock_key(self) -> str:
        """A secret part of the harness's lock names (from a password only the admin can read), so
        agent SQL cannot take a lock the harness waits on (named locks are server-wide)."""
        return hashlib.sha256(f"lock:{self.golden_write.password}".encode()).hexdigest()[:16]


def suffix(database: str) -> str:
    """What names a database's users and locks (MySQL user names have at most 32 characters)."""
    return hashlib.sha256(database.encode()).hexdigest()[:12]


def golden_users(database: str) -> tuple[str, str]:
    return f"{USER_PREFIX}gr_{suffix(database)}", f"{USER_PREFIX}gw_{suffix(database)}"


def agent_user(database: str, index: int) -> str:
    return f"{USER_PREFIX}a{index}_{suffix(database)}"


def agent_pattern(database: str) -> str:
    """A LIKE pattern matching every agent user of ``database``."""
    return f"{USER_PREFIX}a%\\_{suffix(database)}".replace("evalbench_", "evalbench\\_")


def _legacy_users(database: str) -> tuple[str, str]:
    """The read and write users of evalbench before golden and agent SQL had identities of their own."""
    return f"{USER_PREFIX}r_{suffix(database)}", f"{USER_PREFIX}w_{suffix(database)}"


def golden_logins(admin: MySQLConnection, database: str) -> Logins:
    """Create (or repair) the golden users of ``database``; refuses an admin that may not create
    users (no SQL may run as the admin) and a server whose grants reach every user."""
    require_user_admin(admin)
    refuse_shared_grants(admin)
    read_user, write_user = golden_users(database)
    identities = []
    for user, privileges in ((read_user, READ_PRIVILEGES), (write_user, WRITE_PRIVILEGES)):
        password = _stored_password(admin, user)
        create_user(admin, user, password, database, privileges)
        identities.append(Identity(user, password))
    for legacy in _legacy_users(database):
        drop_user(admin, legacy)
    return Logins(identities[0], identities[1], is_mariadb(admin))


def is_mariadb(conn: MySQLConnection) -> bool:
    return "mariadb" in str(rows(conn, "SELECT VERSION()")[0][0]).lower()


def _stored_password(admin: MySQLConnection, user: str) -> str:
    found = rows(admin, f"SELECT password FROM {META}.logins WHERE user = %s", (user,))
    if found:
        return str(found[0][0])
    password = secrets.token_urlsafe(24)
    execute(admin, f"INSERT INTO {META}.logins (user, password) VALUES (%s, %s)", (user, password))
    return password


def create_user(admin: MySQLConnection, user: str, password: str, database: str, privileges: str) -> None:
    """``user``@'%' with ``password`` and exactly ``privileges`` on ``database``. A user holding
    anything else (a global privilege, another database, a table, a role) is re-created."""
    expected = ("GRANT USAGE ON *.* TO ", f"GRANT {privileges} ON {quote(database)}.* TO ")
    held = _grants(admin, user)
    if held is not None and _holds_only(held, expected):
        execute(admin, "ALTER USER %s@'%%' IDENTIFIED BY %s", (user, password))
        return
    execute(admin, "DROP USER IF EXISTS %s@'%%'", (user,))
    execute(admin, "CREATE USER %s@'%%' IDENTIFIED BY %s", (user, password))
    execute(admin, f"GRANT {privileges} ON {quote(database)}.* TO %s@'%%'", (user,))


def _grants(admin: MySQLConnection, user: str) -> list[str] | None:
    """The lines of SHOW GRANTS for ``user``, or None when there is no such user."""
    try:
        return [str(row[0]) for row in rows(admin, "SHOW GRANTS FOR %s@'%%'", (user,))]
    except pymysql.Error:
        return None


def _holds_only(grants: list[str], expected: tuple[str, ...]) -> bool:
    return (len(grants) == len(expected) and all(line.startswith(prefix) for line, prefix in zip(grants, expected, strict=True))
            and not any("GRANT OPTION" in line for line in grants))


def drop_user(admin: MySQLConnection, user: str) -> None:
    """Drop ``user``, ending its sessions first (a dropped user's open sessions live on)."""
    kill_sessions(admin, user)
    execute(admin, "DROP USER IF EXISTS %s@'%%'", (user,))
    execute(admin, f"DELETE FROM {META}.logins WHERE user = %s", (user,))


def kill_sessions(admin: MySQLConnection, user: str) -> None:
    for (thread,) in rows(admin, "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = %s", (user,)):
        with suppress(pymysql.Error):  # it ended meanwhile
            execute(admin, f"KILL {int(thread)}")


def drop_all_users(admin: MySQLConnection, database: str) -> None:
    """Every user evalbench made for ``database`` (leased or not): for dropping the database."""
    users = [*golden_users(database), *_legacy_users(database)]
    users += [row[0] for row in rows(admin, "SELECT User FROM mysql.user WHERE User LIKE %s", (agent_pattern(database),))]
    for user in users:
        drop_user(admin, user)


def lease_lock(user: str, key: str) -> str:
    """The named lock that is ``user``'s lease (``key``: :attr:`Logins.lock_key`, so agent SQL
    cannot take it)."""
    return f"evalbench:lease:{user}:{key}"


def lease(holder: MySQLConnection, database: str, key: str, privileges: Sequence[str]) -> list[Identity]:
    """One fresh agent user per entry of ``privileges`` (what it may do), leased on ``holder``
    (the connection whose named locks keep the leases); stale agent users are dropped."""
    existing = {row[0] for row in rows(holder, "SELECT User FROM mysql.user WHERE User LIKE %s", (agent_pattern(database),))}
    leased: list[Identity] = []
    index = 0
    while len(leased) < len(privileges):
        if index >= MAX_AGENT_USERS:
            release(holder, key, leased)
            raise SandboxError(f"{MAX_AGENT_USERS} agent users of database {database!r} are in use by other runs")
        user = agent_user(database, index)
        index += 1
        if not _try_lock(holder, lease_lock(user, key)):
            continue  # another live sandbox holds it
        password = secrets.token_urlsafe(24)
        kill_sessions(holder, user)  # a stale user's sessions (its process died) end with it
        execute(holder, "DROP USER IF EXISTS %s@'%%'", (user,))
        create_user(holder, user, password, database, privileges[len(leased)])
        leased.append(Identity(user, password))
    for user in existing - {identity.user for identity in leased}:
        if _try_lock(holder, lease_lock(user, key)):  # no live sandbox holds it: stale
            drop_user(holder, user)
            rows(holder, "SELECT RELEASE_LOCK(%s)", (lease_lock(user, key),))
    return leased


def release(holder: MySQLConnection, key: str, identities: Sequence[Identity]) -> None:
    """Drop leased agent users and give their leases back."""
    for identity in identities:
        drop_user(holder, identity.user)
        rows(holder, "SELECT RELEASE_LOCK(%s)", (lease_lock(identity.user, key),))


def relock(holder: MySQLConnection, key: str, identities: Sequence[Identity]) -> bool:
    """Take the leases of ``identities`` again on a new holder connection (the old one was lost);
    False when one is held elsewhere (its user may have been re-created by another run)."""
    return all(_try_lock(holder, lease_lock(identity.user, key)) for identity in identities)


def _try_lock(conn: MySQLConnection, name: str) -> bool:
    return bool(rows(conn, "SELECT GET_LOCK(%s, 0)", (name,))[0][0])


def require_user_admin(admin: MySQLConnection) -> None:
    grants = " ".join(row[0] for row in rows(admin, "SHOW GRANTS")).upper()
    if "ON *.*" in grants and ("ALL PRIVILEGES" in grants or "CREATE USER" in grants):
        return
    current = rows(admin, "SELECT CURRENT_USER()")[0][0]
    raise SandboxError(f"the configured user {current!r} may not create users, and agent SQL must not run as it; "
                       "give a user with CREATE USER and GRANT OPTION (e.g. root)")


# grants to '' (any user, for database, table, column and routine grants) and to MariaDB's PUBLIC
_SHARED_GRANTS = " UNION ALL ".join(
    f"SELECT '{kind}', {column} FROM mysql.{table} WHERE User IN ('', 'PUBLIC')"
    for kind, table, column in (("database", "db", "Db"), ("table", "tables_priv", "CONCAT(Db, '.', Table_name)"),
                                ("column", "columns_priv", "CONCAT(Db, '.', Table_name, '.', Column_name)"),
                                ("routine", "procs_priv", "CONCAT(Db, '.', Routine_name)")))


def refuse_shared_grants(admin: MySQLConnection) -> None:
    """Refuse a server that grants privileges to every user: the sandbox users would hold them."""
    found = [f"{kind} {name}" for kind, name in rows(admin, _SHARED_GRANTS)]
    try:
        mandatory = rows(admin, "SELECT @@GLOBAL.mandatory_roles")[0][0]  # MySQL 8 only
    except pymysql.Error:
        mandatory = None
    if mandatory:
        found.append(f"mandatory_roles {mandatory}")
    if found:
        raise SandboxError("the server grants privileges to every user (anonymous-user or PUBLIC grants: "
                           f"{', '.join(sorted(found)[:5])}), so agent SQL would hold them too; revoke them "
                           "(e.g. DELETE FROM mysql.db WHERE User = ''; FLUSH PRIVILEGES) or evaluate on another server")


def execute(conn: MySQLConnection, statement: str, params: QueryParams = None) -> None:
    with conn.cursor() as cursor:
        cursor.execute(statement, params)


def rows(conn: MySQLConnection, statement: str, params: QueryParams = None) -> list[HarnessRow]:
    with conn.cursor() as cursor:
        cursor.execute(statement, params)
        return list(cursor.fetchall())


def write_lock_name(database: str, key: str) -> str:
    """The named lock every write to ``database`` holds, across processes: between two writes,
    the counters are back where setup left them (``key``: :attr:`Logins.lock_key`)."""
    return f"evalbench:write:{suffix(database)}:{key}"
