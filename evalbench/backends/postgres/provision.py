"""Provisioning a database from an EvalBench-style setup directory.

Layout: ``<setup_directory>/<database>/<dialect>/{pre_setup,setup,post_setup}.sql`` and
``<setup_directory>/<database>/data/<table>.csv``. Each CSV cell is a SQL literal (no header
row, bare ``NULL``, strings and JSON single-quoted), inlined into ``INSERT ... VALUES`` exactly
as EvalBench's loader does; COPY cannot read such files, so rows go in as multi-row INSERTs.

Provisioning is idempotent: a checksum of the setup files is kept in the database's comment
(``COMMENT ON DATABASE``, so no extra table is visible to agents) and an unchanged setup is not
redone. Only databases the harness created (marked by that comment) are ever dropped, unless the
db config sets ``allow_destructive_setup``.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

from evalbench.backends.postgres.clones import make_template, reset_role, template_mark, template_name
from evalbench.backends.postgres.sandbox import pg_message
from evalbench.backends.postgres.target import SANDBOX_ROLE, DatabaseTarget
from evalbench.backends.setup import SetupFiles, value_batches
from evalbench.backends.setup import find_setup as _find_setup
from evalbench.errors import ProvisioningError, SandboxError

log = logging.getLogger(__name__)

# Bump when provisioning itself changes what it leaves behind, so old databases are rebuilt.
PROVISIONING_VERSION = "3"  # 3: signal functions revoked from PUBLIC, template for test-case copies
_MARK = "evalbench:"
_INSERT_BATCH = 500
DIALECT_DIRS = {"postgres": ("postgres", "postgresql"), "alloydb": ("alloydb", "postgres", "postgresql")}


@dataclass(frozen=True)
class ProvisionReport:
    database: str
    action: str  # "created", "rebuilt", "reused", "external" (used as is)
    checksum: str | None
    sandbox_user: str
    tables_loaded: int = 0
    rows_loaded: int = 0
    warning: str | None = None
    template: str | None = None  # the copy test cases are run on copies of (evalbench.backends.postgres.clones)
    sandbox_password: str | None = field(default=None, repr=False)  # never written anywhere


def find_setup(setup_directory: Path | None, database: str, dialect: str) -> SetupFiles | None:
    """The setup files of ``database`` for a PostgreSQL-family dialect (see
    :func:`evalbench.backends.setup.find_setup`)."""
    return _find_setup(setup_directory, database, dialect, DIALECT_DIRS.get(dialect, (dialect,)))


def provision(target: DatabaseTarget, setup: SetupFiles | None) -> ProvisionReport:
    """Make sure ``target`` exists and matches ``setup``; create the sandbox role."""
    try:
        admin = target.connect_admin(autocommit=True, connect_timeout=15)
    except psycopg.Error as exc:
        raise ProvisioningError(f"cannot connect to {target.describe()}: {pg_message(exc)}") from None
    with admin:
        can_create_roles = bool(
            admin.execute("SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user").fetchone()[0]  # type: ignore[index]
        )
        if setup is None:
            return _use_as_is(target, admin, can_create_roles)
        checksum = setup.checksum(PROVISIONING_VERSION)
        # Serialise provisioning of one database across processes (parallel test runs, CI).
        admin.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (_MARK + target.name,))
        try:
            row = admin.execute(
                "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s", (target.name,)
            ).fetchone()
            comment = row[0] if row else None
            if row is not None and comment == f"{_MARK}ok:{checksum}":
                login = sandbox_login(target, admin, can_create_roles)
                template = _template(admin, target, checksum, fresh=False)
                return ProvisionReport(target.name, "reused", checksum, login.user, warning=login.warning,
                                       template=template, sandbox_password=login.password)
            action = "created"
            if row is not None:
                ours = bool(comment and comment.startswith(_MARK))
                if not ours and not target.config.allow_destructive_setup:
                    raise ProvisioningError(
                        f"database {target.name!r} already exists on {target.describe()} and was not created by "
                        "evalbench; set allow_destructive_setup: true in its db config to let evalbench replace it, "
                        "or leave it out of setup_directory to use it as is"
                    )
                admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(target.name)))
                action = "rebuilt"
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(target.name)))
            _comment(admin, target.name, f"{_MARK}provisioning")
            tables, rows = _load(target, setup)
            login = sandbox_login(target, admin, can_create_roles, grants=_OWNER_GRANTS)
            warning = _revoke_signals(target) or login.warning
            _comment(admin, target.name, f"{_MARK}ok:{checksum}")
            template = _template(admin, target, checksum, fresh=True)
            log.info("provisioned %s (%d tables, %d rows)", target.describe(), tables, rows)
            return ProvisionReport(target.name, action, checksum, login.user, tables, rows, warning, template,
                                   login.password)
        finally:
            admin.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (_MARK + target.name,))


def _template(admin: psycopg.Connection, target: DatabaseTarget, checksum: str, fresh: bool) -> str | None:
    """The template test cases copy (made now when the database was just loaded, or is missing
    or outdated); None when it cannot be made (the database is in use): test cases then run
    inside one rolled-back transaction instead."""
    if target.connector is not None:
        return None  # test cases (a child process with a libpq connection string) cannot use the connector
    database = target.name
    mark = f"{_MARK}tpl:{checksum}"
    if not fresh and template_mark(admin, database) == mark:
        return template_name(database)
    try:
        return make_template(admin, database, mark)
    except psycopg.Error as exc:
        log.warning("no copy of %s for test cases (%s): they run in one rolled-back transaction instead, "
                    "so every statement shares one clock", database, pg_message(exc))
        return None


def _use_as_is(target: DatabaseTarget, admin: psycopg.Connection, can_create_roles: bool) -> ProvisionReport:
    """A database evalbench did not create: agent SQL runs as the sandbox role with SELECT only
    (or as the configured user when that user is itself unprivileged)."""
    exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (target.name,)).fetchone()
    if not exists:
        raise ProvisioningError(
            f"database {target.name!r} does not exist on {target.describe()} and there is no setup for it "
            "(set setup_directory to a folder holding a sub-folder with this name)"
        )
    login = sandbox_login(target, admin, can_create_roles, grants=_READ_GRANTS)
    warning = login.warning or ("the sandbox role may cancel its own other connections on a database evalbench "
                                "did not create (signal functions are revoked only on provisioned databases)")
    return ProvisionReport(target.name, "external", None, login.user, warning=warning, sandbox_password=login.password)


def _comment(admin: psycopg.Connection, database: str, text: str) -> None:
    admin.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(sql.Identifier(database), sql.Literal(text)))


# --------------------------------------------------------------------------- loading


def _load(target: DatabaseTarget, setup: SetupFiles) -> tuple[int, int]:
    try:
        conn = target.connect(autocommit=True, connect_timeout=15)
    except psycopg.Error as exc:
        raise ProvisioningError(f"cannot connect to {target.describe()}: {pg_message(exc)}") from None
    rows = 0
    with conn:
        for path in (setup.pre_setup, setup.setup):
            if path:
                _run_file(conn, path)
        for path in setup.data:
            rows += _load_csv(conn, path)
        if setup.post_setup:
            _run_file(conn, setup.post_setup)
        _advance_sequences(conn)
        conn.execute("ANALYZE")  # statistics from the start, so plans do not shift mid-run
    return len(setup.data), rows


def _run_file(conn: psycopg.Connection, path: Path) -> None:
    text = path.read_text(encoding="utf-8-sig")
    if not text.strip():
        return
    try:
        with conn.transaction():
            conn.execute(text)  # trusted setup SQL, may hold many statements
    except psycopg.Error as exc:
        position = getattr(exc.diag, "statement_position", None)
        line = text.count("\n", 0, int(position) - 1) + 1 if position else None
        where = f"{path}:{line}" if line else str(path)
        raise ProvisioningError(f"{where}: {pg_message(exc)}") from None


def _load_csv(conn: psycopg.Connection, path: Path) -> int:
    """Insert the rows of a CSV whose cells are SQL literals; errors name file and line."""
    table = sql.Identifier(path.stem)
    count = 0
    with conn.transaction():
        for batch in value_batches(path, _INSERT_BATCH):
            count += _insert(conn, path, table, batch)
    return count


def _insert(conn: psycopg.Connection, path: Path, table: sql.Identifier, batch: list[tuple[int, str]]) -> int:
    head = sql.SQL("INSERT INTO {} VALUES ").format(table).as_string(conn)
    try:
        with conn.transaction():
            conn.execute(head + ", ".join(values for _, values in batch))
        return len(batch)
    except psycopg.Error:
        pass
    for line, values in batch:  # find the offending row
        try:
            with conn.transaction():
                conn.execute(head + values)
        except psycopg.Error as exc:
            raise ProvisioningError(f"{path}:{line}: {pg_message(exc)}") from None
    raise ProvisioningError(f"{path}: a batch of rows failed to load, but no single row did")


_OWNED_SEQUENCES = """
SELECT s.oid::regclass::text, t.oid::regclass::text, quote_ident(a.attname)
FROM pg_class s
JOIN pg_depend d ON d.objid = s.oid AND d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
JOIN pg_class t ON t.oid = d.refobjid
JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = d.refobjsubid
WHERE s.relkind = 'S' AND d.deptype IN ('a', 'i')
"""


def _advance_sequences(conn: psycopg.Connection) -> None:
    """Leave serial/identity sequences past the loaded ids, as a dump would: rows loaded with
    explicit ids leave them at 1, and a later INSERT would collide on the primary key."""
    for seq, table, column in conn.execute(_OWNED_SEQUENCES).fetchall():
        conn.execute(
            f"SELECT setval(%s, COALESCE((SELECT max({column}) FROM {table}), 1), "
            f"(SELECT max({column}) FROM {table}) IS NOT NULL)",
            (seq,),
        )


# --------------------------------------------------------------------------- sandbox role


@dataclass(frozen=True)
class SandboxLogin:
    user: str
    password: str | None = field(default=None, repr=False)
    warning: str | None = None


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


def sandbox_login(target: DatabaseTarget, admin: psycopg.Connection, can_create_roles: bool,
                  grants: str = "") -> SandboxLogin:
    """The role agent SQL runs as: ``evalbench_sandbox`` — never a superuser, never the admin
    connection. Created when missing; when the server requires a password for it, one is set,
    derived from a key kept in the user's cache folder. When no such role can be had, the
    configured user is used only if it is itself unprivileged; otherwise provisioning fails and
    says what to grant (the run stops before its first item)."""
    if not can_create_roles:
        current = admin.execute("SELECT current_user").fetchone()[0]  # type: ignore[index]
        if admin.execute(_UNSAFE).fetchone()[0]:  # type: ignore[index]
            raise SandboxError(
                f"the configured user {current!r} may not create the sandbox role, and agent SQL must not run as "
                f"{current!r} (a superuser, or a role that may create roles or databases, signal backends or use "
                f"server files); give a user that may create roles (CREATEROLE), or create a login role with only "
                f"CONNECT and SELECT on {target.name!r} and configure it as user_name/password of this database"
            )
        return SandboxLogin(current, target.admin.password,
                            f"agent SQL runs as the configured user {current!r} (unprivileged), not as {SANDBOX_ROLE!r}")
    # The role is the server's, not the database's: databases set up at once (parallel groups,
    # preflight checks, two runs) change it one at a time, or the catalog reports a concurrent update.
    admin.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (_ROLE_LOCK,))
    try:
        return _sandbox_role(target, admin, grants)
    finally:
        admin.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (_ROLE_LOCK,))


_ROLE_LOCK = "evalbench:sandbox-role"


def _sandbox_role(target: DatabaseTarget, admin: psycopg.Connection, grants: str) -> SandboxLogin:
    """Create (or repair) ``evalbench_sandbox`` and log in as it; see :func:`sandbox_login`."""
    role = sql.Identifier(SANDBOX_ROLE)
    if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (SANDBOX_ROLE,)).fetchone():
        # created by a concurrent run (or a check of another database): the catalog's index says so
        with contextlib.suppress(psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS")
                          .format(role))
    admin.execute(sql.SQL("ALTER ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS "
                          "CONNECTION LIMIT -1").format(role))
    reset_role(admin, SANDBOX_ROLE)  # settings it may have given itself in an earlier run
    if grants:
        with target.connect(autocommit=True, connect_timeout=15) as conn:
            conn.execute(grants.replace("{role}", SANDBOX_ROLE).replace("{db}", _quote_ident(target.name)))
    for password in (None, sandbox_password(target)):
        if password is not None:
            admin.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(role, sql.Literal(password)))
        try:
            with target.connect(user=SANDBOX_ROLE, password=password, connect_timeout=15) as conn:
                unsafe = conn.execute(_UNSAFE).fetchone()[0]  # type: ignore[index]  # verified as it logs in
        except psycopg.Error as exc:
            error = pg_message(exc)
            continue
        if unsafe:  # e.g. someone granted it pg_signal_backend or pg_read_server_files
            raise SandboxError(f"the sandbox role {SANDBOX_ROLE!r} has rights agent SQL must not have (membership of "
                                    "pg_signal_backend, pg_*_server_* or a privileged role); revoke them")
        return SandboxLogin(SANDBOX_ROLE, password)
    raise SandboxError(
        f"the sandbox role {SANDBOX_ROLE!r} cannot log in to {target.describe()} ({error}); allow it in the "
        "server's pg_hba.conf (password or trust authentication) — agent SQL never runs as the admin user"
    )


def sandbox_password(target: DatabaseTarget) -> str:
    """The sandbox role's password on a server that asks for one: an HMAC of the server's address
    under a random key kept (0600) in the user's cache folder, so that every run of this machine
    agrees on it."""
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
    where = f"{host or 'local'}:{target.admin.port or 5432}:{SANDBOX_ROLE}".encode()
    return hmac.new(key, where, hashlib.sha256).hexdigest()


def _revoke_signals(target: DatabaseTarget) -> str | None:
    """Nobody but a superuser may cancel or terminate backends from this database: PostgreSQL lets
    a role signal its own other connections, which are the other conversations' (needs a
    superuser; the functions' ACL lives in each database). A warning when it cannot be done."""
    try:
        with target.connect(autocommit=True, connect_timeout=15) as conn:
            conn.execute(_REVOKE_SIGNALS)
    except psycopg.Error as exc:
        return f"could not revoke pg_cancel_backend/pg_terminate_backend from PUBLIC ({pg_message(exc)}): " \
               "agent SQL may cancel other conversations' queries"
    return None


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_REVOKE_SIGNALS = """
DO $$
DECLARE f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
           WHERE n.nspname = 'pg_catalog' AND p.proname IN ('pg_cancel_backend', 'pg_terminate_backend') LOOP
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
  END LOOP;
END $$;
"""

# A provisioned database: the sandbox role owns its objects, so management tasks can change them
# inside a transaction that is always rolled back.
_OWNER_GRANTS = """
GRANT CONNECT, TEMPORARY ON DATABASE {db} TO {role};
DO $$
DECLARE r record;
BEGIN
  FOR r IN SELECT nspname FROM pg_namespace
           WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema' LOOP
    EXECUTE format('GRANT USAGE, CREATE ON SCHEMA %I TO {role}', r.nspname);
  END LOOP;
  FOR r IN SELECT c.oid::regclass AS obj, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
             AND n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'
             AND NOT (c.relkind = 'S' AND EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid
                      AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i'))) LOOP
    EXECUTE format('ALTER %s %s OWNER TO {role}',
      CASE r.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'S' THEN 'SEQUENCE'
                     WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END, r.obj);
  END LOOP;
END $$;
"""

# A database used as it is: reading only.
_READ_GRANTS = """
GRANT CONNECT ON DATABASE {db} TO {role};
DO $$
DECLARE r record;
BEGIN
  FOR r IN SELECT nspname FROM pg_namespace
           WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema' LOOP
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO {role}', r.nspname);
    EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %I TO {role}', r.nspname);
  END LOOP;
END $$;
"""
