"""The database identities SQL runs as. PostgreSQL roles are the server's, shared by its databases:

- ``evalbench_owner`` (NOLOGIN) owns what setup made in every database evalbench provisions;
- ``evalbench_golden`` runs golden (dataset) SQL; a member of the owner, so that a golden
  management script may change the database (in a transaction that is always rolled back);
- ``evalbench_sandbox`` runs agent SQL that reads (questions, tool calls): CONNECT, USAGE on the
  schemas and SELECT, nothing else — no CREATE on any schema, no TEMPORARY, no sequence USAGE,
  no object of its own; checked every time provisioning logs it in (:func:`verify_reader`);
- ``evalbench_sandbox_write`` runs agent SQL that writes (management tasks, ``state_match``,
  test cases); a member of the owner; its work is always rolled back, or done on a throwaway copy.

Neither sandbox role is a member of the golden role, and PostgreSQL shows a session's statement
(``pg_stat_activity``) only to roles holding that session's privileges: golden SQL's text is
hidden from agent SQL on any server. Where the admin is a superuser, the three login roles also
publish no statement text at all (``track_activities = off``, a setting only a superuser may
change), and provisioned databases revoke the statistics views and functions from PUBLIC
(:mod:`.privileges`), so that no conversation's agent SQL sees another's.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass, field, replace
from pathlib import Path

import psycopg
from psycopg import sql

from evalbench.backends.postgres.target import (
    GOLDEN_ROLE,
    OWNER_ROLE,
    SANDBOX_ROLE,
    SANDBOX_WRITE_ROLE,
    DatabaseTarget,
    pg_message,
)
from evalbench.core.errors import SandboxError

# What only a superuser may set, set on the login roles: their sessions publish no statement text.
QUIET_SETTINGS = {"track_activities": "off"}
_ROLE_LOCK = "evalbench:sandbox-role"


@dataclass(frozen=True)
class Login:
    user: str
    password: str | None = field(default=None, repr=False)  # never written anywhere


@dataclass(frozen=True)
class Logins:
    """Who runs what on one database (all three the configured user when it may not create roles)."""

    reader: Login  # agent SQL that reads
    writer: Login  # agent SQL that writes, always undone
    golden: Login
    warning: str | None = None


def admin_rights(admin: psycopg.Connection) -> tuple[bool, bool]:
    """(is a superuser, may create roles) of the admin connection's user."""
    row = admin.execute("SELECT rolsuper, rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user").fetchone()
    return bool(row and row[0]), bool(row and row[1])


# Rights that let a role escape the sandbox (run programs, read or write server files, signal
# other backends, bypass row security, create roles or databases).
_UNSAFE = """
SELECT rolsuper OR rolcreaterole OR rolcreatedb OR rolreplication OR rolbypassrls
       OR pg_has_role(current_user, 'pg_signal_backend', 'MEMBER')
       OR pg_has_role(current_user, 'pg_execute_server_program', 'MEMBER')
       OR pg_has_role(current_user, 'pg_read_server_files', 'MEMBER')
       OR pg_has_role(current_user, 'pg_write_server_files', 'MEMBER')
FROM pg_roles WHERE rolname = current_user
"""
# ... and, for agent SQL, rights to observe other sessions or to act as golden SQL does.
_AGENT_UNSAFE = f"""
SELECT ({_UNSAFE.strip()})
       OR pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')
       OR pg_has_role(current_user, 'pg_write_all_data', 'USAGE')
       OR EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = '{GOLDEN_ROLE}' AND r.rolname <> current_user
                  AND pg_has_role(current_user, r.oid, 'USAGE'))
"""


def logins(target: DatabaseTarget, admin: psycopg.Connection, database_ready: bool = True) -> Logins:
    """Create (or repair) the roles and log each in (to ``target``'s database when
    ``database_ready``, else to the maintenance database). When the admin may not create roles,
    the configured user runs everything, if it is itself unprivileged; otherwise provisioning
    fails and says what to grant (the run stops before its first item)."""
    superuser, can_create_roles = admin_rights(admin)
    where = target if database_ready else _maintenance(target)
    if not can_create_roles:
        return _configured_user(where, admin)
    # The roles are the server's: databases set up at once (parallel groups, preflight checks,
    # two runs) change them one at a time, or the catalog reports a concurrent update.
    admin.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (_ROLE_LOCK,))
    try:
        _ensure_roles(admin)
        passwords = {role: _log_in(where, admin, role) for role in (SANDBOX_ROLE, SANDBOX_WRITE_ROLE, GOLDEN_ROLE)}
    finally:
        admin.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (_ROLE_LOCK,))
    warning = None if superuser else (
        "the admin is not a superuser: sessions of the sandbox roles publish their statements (track_activities "
        "stays on), so agent SQL that can read pg_stat_activity may see other conversations' agent SQL (golden SQL "
        "runs as another role and stays hidden)")
    return Logins(Login(SANDBOX_ROLE, passwords[SANDBOX_ROLE]), Login(SANDBOX_WRITE_ROLE, passwords[SANDBOX_WRITE_ROLE]),
                  Login(GOLDEN_ROLE, passwords[GOLDEN_ROLE]), warning)


def _maintenance(target: DatabaseTarget) -> DatabaseTarget:
    return replace(target, name=target.admin.database or "postgres")


def _configured_user(target: DatabaseTarget, admin: psycopg.Connection) -> Logins:
    current = admin.execute("SELECT current_user").fetchone()[0]  # type: ignore[index]  # SELECT of one value always returns one row
    if admin.execute(_UNSAFE).fetchone()[0]:  # type: ignore[index]  # SELECT of one value always returns one row
        raise SandboxError(
            f"the configured user {current!r} may not create the sandbox role, and agent SQL must not run as "
            f"{current!r} (a superuser, or a role that may create roles or databases, signal backends or use "
            f"server files); give a user that may create roles (CREATEROLE), or create a login role with only "
            f"CONNECT and SELECT on {target.name!r} and configure it as user_name/password of this database"
        )
    login = Login(current, target.admin.password)
    warning = (f"agent SQL runs as the configured user {current!r} (unprivileged), not as {SANDBOX_ROLE!r}; golden SQL "
               "runs as the same user, so agent SQL that reads pg_stat_activity may see it (give a user that may "
               "create roles to separate them)")
    return Logins(login, login, login, warning)


def _ensure_roles(admin: psycopg.Connection) -> None:
    superuser, _ = admin_rights(admin)
    for role, can_log_in in ((OWNER_ROLE, False), (GOLDEN_ROLE, True), (SANDBOX_ROLE, True), (SANDBOX_WRITE_ROLE, True)):
        ident = sql.Identifier(role)
        attributes = sql.SQL(("LOGIN" if can_log_in else "NOLOGIN")
                             + " NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS")
        if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
            # created by a concurrent run (or a check of another database): the catalog's index says so
            with contextlib.suppress(psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
                admin.execute(sql.SQL("CREATE ROLE {} {}").format(ident, attributes))
        admin.execute(sql.SQL("ALTER ROLE {} {} CONNECTION LIMIT -1").format(ident, attributes))
        if can_log_in:
            reset_role(admin, role, superuser=superuser)  # settings it may have given itself in an earlier run
    for member in (GOLDEN_ROLE, SANDBOX_WRITE_ROLE):
        admin.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(OWNER_ROLE), sql.Identifier(member)))
    if not superuser:  # to give the owner what setup made, and put its sequences back, the admin acts as it
        admin.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(sql.Identifier(OWNER_ROLE)))


_ROLE_SETTINGS = """
SELECT d.datname FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase
JOIN pg_roles r ON r.oid = s.setrole WHERE r.rolname = %s
"""


def reset_role(admin: psycopg.Connection, role: str, password: str | None = None, superuser: bool | None = None) -> None:
    """Put back what a role may change of itself beyond any transaction or database copy: its
    settings (``ALTER ROLE CURRENT_USER [IN DATABASE d] SET ...``, reachable through a function
    the statement check cannot see) and its password. In one transaction, with the quiet
    settings put back in it (by a superuser admin): no session ever logs in without them."""
    if superuser is None:
        superuser = admin_rights(admin)[0]
    ident = sql.Identifier(role)
    with admin.transaction():  # one at a time (copies dropped at once), or the catalog reports a concurrent update
        admin.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (_ROLE_LOCK,))
        admin.execute(sql.SQL("ALTER ROLE {} RESET ALL").format(ident))
        for (database,) in admin.execute(_ROLE_SETTINGS, (role,)).fetchall():
            admin.execute(sql.SQL("ALTER ROLE {} IN DATABASE {} RESET ALL").format(ident, sql.Identifier(database)))
        for name, value in QUIET_SETTINGS.items() if superuser else ():
            admin.execute(sql.SQL("ALTER ROLE {} SET {} = {}").format(ident, sql.Identifier(name), sql.Literal(value)))
        if password is not None:
            admin.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(ident, sql.Literal(password)))


def _log_in(target: DatabaseTarget, admin: psycopg.Connection, role: str) -> str | None:
    """Log ``role`` in (without a password, else with the one derived for it, set now); its
    password. Raises SandboxError when it cannot log in or holds rights it must not."""
    error = ""
    for password in (None, sandbox_password(target, role)):
        if password is not None:
            admin.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(role), sql.Literal(password)))
        try:
            with target.connect(user=role, password=password, connect_timeout=15) as conn:
                unsafe = conn.execute(_UNSAFE if role == GOLDEN_ROLE else _AGENT_UNSAFE).fetchone()[0]  # type: ignore[index]  # SELECT of one value always returns one row
        except psycopg.Error as exc:
            error = pg_message(exc)
            continue
        if unsafe:  # e.g. someone granted it pg_signal_backend or pg_read_server_files
            raise SandboxError(f"the sandbox role {role!r} has rights agent SQL must not have (membership of "
                               "pg_signal_backend, pg_read_all_stats, pg_*_server_*, the golden role or a privileged "
                               "role); revoke them")
        return password
    raise SandboxError(
        f"the sandbox role {role!r} cannot log in to {target.describe()} ({error}); allow it in the "
        "server's pg_hba.conf (password or trust authentication) — agent SQL never runs as the admin user"
    )


def sandbox_password(target: DatabaseTarget, role: str = SANDBOX_ROLE) -> str:
    """A role's password on a server that asks for one: an HMAC of the server's address and the
    role under a random key kept (0600) in the user's cache folder, so that every run of this
    machine agrees on it."""
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "evalbench"
    key_file = folder / "sandbox.key"
    if not key_file.exists():  # written whole, then linked into place: never overwritten, never read half
        folder.mkdir(parents=True, exist_ok=True)
        draft = folder / f".sandbox.key.{os.getpid()}.{secrets.token_hex(4)}"
        with os.fdopen(os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
            handle.write(secrets.token_hex(32))
        try:
            os.link(draft, key_file)
        except FileExistsError:
            pass  # another process made it first
        finally:
            draft.unlink()
    key = key_file.read_text().strip().encode()
    host = target.config.instance if target.connector is not None else target.admin.host
    where = f"{host or 'local'}:{target.admin.port or 5432}:{role}".encode()
    return hmac.new(key, where, hashlib.sha256).hexdigest()


# --------------------------------------------------------------------------- what agent SQL may do

# What the reading role could create with, named as a REVOKE would name it.
_CREATE_RIGHTS = r"""
SELECT ARRAY(
  SELECT what FROM (
    SELECT 1 AS o, 'CREATE ON DATABASE ' || quote_ident(current_database()) AS what
     WHERE has_database_privilege(current_database(), 'CREATE')
    UNION ALL SELECT 2, 'TEMPORARY ON DATABASE ' || quote_ident(current_database())
     WHERE has_database_privilege(current_database(), 'TEMPORARY')
    UNION ALL SELECT 3, 'CREATE ON SCHEMA ' || quote_ident(nspname) FROM pg_namespace
     WHERE nspname !~ '^pg_(toast_)?temp_[0-9]+$' AND has_schema_privilege(oid, 'CREATE')
    UNION ALL SELECT 4, 'EXECUTE ON FUNCTION ' || p.oid::regprocedure::text FROM pg_proc p
      JOIN pg_init_privs i ON i.objoid = p.oid AND i.classoid = 'pg_proc'::regclass AND i.objsubid = 0
     WHERE has_function_privilege(p.oid, 'EXECUTE')  -- a function only a superuser may run by default
       AND NOT EXISTS (SELECT 1 FROM aclexplode(i.initprivs) a WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
  ) AS rights ORDER BY o, what),
  (SELECT count(*) FROM pg_class WHERE relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user))
  + (SELECT count(*) FROM pg_proc WHERE proowner = (SELECT oid FROM pg_roles WHERE rolname = current_user))
  + (SELECT count(*) FROM pg_type WHERE typowner = (SELECT oid FROM pg_roles WHERE rolname = current_user))
"""

_LARGE_OBJECT_MAKERS = ("lo_create(0)", "lo_creat(-1)", "lo_from_bytea(0, '')")

_OBSERVES = """
SELECT (has_table_privilege('pg_catalog.pg_stat_activity', 'SELECT')
        OR has_function_privilege('pg_catalog.pg_stat_get_activity(integer)', 'EXECUTE'))
       AND current_setting('track_activities') = 'on',
       has_table_privilege('pg_catalog.pg_stat_user_tables', 'SELECT'),
       has_function_privilege('pg_catalog.pg_lock_status()', 'EXECUTE')
"""


def verify_reader(target: DatabaseTarget, reader: Login) -> str | None:
    """Log in as the role that runs agent SQL for questions and make sure it can create nothing
    in ``target``'s database: SandboxError naming what to revoke otherwise. Returns a warning
    when agent SQL can observe other sessions or make large objects (undone, since every
    execution is rolled back, but only a superuser can revoke them)."""
    with target.connect(user=reader.user, password=reader.password, connect_timeout=15, autocommit=True) as conn:
        rights, owned = conn.execute(_CREATE_RIGHTS).fetchone()  # type: ignore[misc]  # an aggregate query always returns one row
        if rights or owned:
            owns = [f"ownership of {owned} object(s) (ALTER ... OWNER TO another role)"] if owned else []
            raise SandboxError(
                f"agent SQL must not be able to create anything, but {reader.user!r} may on {target.describe()}: "
                f"{'; '.join([*rights, *owns])}. Revoke it, e.g. "
                + "; ".join(f"REVOKE {right} FROM PUBLIC" for right in rights[:3])
                + f" (and from {reader.user!r} and the roles it is a member of)")
        observes_statements, observes_statistics, observes_locks = conn.execute(_OBSERVES).fetchone()  # type: ignore[misc]  # an aggregate query always returns one row
        makers = _large_object_makers(conn)
    problems = []
    if observes_statements:
        problems.append("read the statements of other sessions of its role (pg_stat_activity): other conversations' agent SQL")
    if observes_statistics:
        problems.append("read table statistics (pg_stat_*), golden SQL's scans included")
    if observes_locks:
        problems.append("read other sessions' locks (pg_locks): which tables golden SQL running beside it reads")
    if makers:
        problems.append(f"make large objects ({', '.join(makers)}), which every execution's rollback undoes")
    if not problems:
        return None
    return (f"agent SQL ({reader.user!r}) may " + "; ".join(problems) + ". A superuser admin revokes these from PUBLIC "
            "in the databases evalbench provisions (see docs/backends.md)")


def _large_object_makers(conn: psycopg.Connection) -> list[str]:
    """The large-object functions that work in a read-only transaction (PostgreSQL before 16
    does not refuse them); each tried and undone."""
    made = []
    conn.execute("BEGIN READ ONLY")
    try:
        for call in _LARGE_OBJECT_MAKERS:
            conn.execute("SAVEPOINT evalbench_lo")
            try:
                conn.execute(f"SELECT {call}")
                made.append(call.split("(")[0])
            except psycopg.Error:
                pass
            conn.execute("ROLLBACK TO SAVEPOINT evalbench_lo")
    finally:
        conn.execute("ROLLBACK")
    return made
