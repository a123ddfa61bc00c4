"""Provisioning a database from an EvalBench-style setup directory.

Layout: ``<setup_directory>/<database>/<dialect>/{pre_setup,setup,post_setup}.sql`` and
``<setup_directory>/<database>/data/<table>.csv``. Each CSV cell is a SQL literal (no header
row, bare ``NULL``, strings and JSON single-quoted), inlined into ``INSERT ... VALUES`` exactly
as EvalBench's loader does; COPY cannot read such files, so rows go in as multi-row INSERTs.

Provisioning is idempotent: a checksum of the setup files is kept in the database's comment
(``COMMENT ON DATABASE``, so no extra table is visible to agents) and an unchanged setup is not
redone. Only databases the harness created (marked by that comment) are ever dropped, unless the
db config sets ``allow_destructive_setup``.

What setup made is recorded (:mod:`.meta`): the catalog fingerprint (:mod:`.catalog`) and the
sequences. A database is reused only when its catalog is still that: a changed one is refused,
naming what changed ("new table public.pwned"), unless ``allow_destructive_setup`` lets it be
rebuilt; its sequences are put back to what setup left. Who may do what in it: :mod:`.roles`,
:mod:`.privileges`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

from evalbench.backends.postgres import meta
from evalbench.backends.postgres.catalog import catalog_fingerprint, changes, describe_changes
from evalbench.backends.postgres.clones import make_template, template_mark, template_name
from evalbench.backends.postgres.privileges import grant_as_is, grant_provisioned
from evalbench.backends.postgres.roles import Logins, admin_rights, logins, verify_reader
from evalbench.backends.postgres.serial import SEQUENCE_STATE, WRITES_LOCK, restore_sequences
from evalbench.backends.postgres.target import DatabaseTarget, pg_message
from evalbench.backends.setup import SetupFiles, value_batches
from evalbench.backends.setup import find_setup as _find_setup
from evalbench.core.errors import ProvisioningError

log = logging.getLogger(__name__)

# Bump when provisioning itself changes what it leaves behind, so old databases are rebuilt.
PROVISIONING_VERSION = "5"  # 4: owner, golden and sandbox-write roles; PUBLIC's defaults revoked; catalog fingerprint;
# 5: pg_locks and the snapshot functions revoked from PUBLIC
_MARK = "evalbench:"
_INSERT_BATCH = 500
DIALECT_DIRS = {"postgres": ("postgres", "postgresql"), "alloydb": ("alloydb", "postgres", "postgresql")}


@dataclass(frozen=True)
class ProvisionReport:
    database: str
    action: str  # "created", "rebuilt", "reused", "external" (used as is)
    checksum: str | None
    logins: Logins = field(repr=False)
    tables_loaded: int = 0
    rows_loaded: int = 0
    warning: str | None = None
    template: str | None = None  # the copy test cases are run on copies of (evalbench.backends.postgres.clones)

    @property
    def sandbox_user(self) -> str:
        """The role agent SQL that reads runs as (what the manifest names)."""
        return self.logins.reader.user

    @property
    def sandbox_password(self) -> str | None:
        return self.logins.reader.password


def find_setup(setup_directory: Path | None, database: str, dialect: str) -> SetupFiles | None:
    """The setup files of ``database`` for a PostgreSQL-family dialect (see
    :func:`evalbench.backends.setup.find_setup`)."""
    return _find_setup(setup_directory, database, dialect, DIALECT_DIRS.get(dialect, (dialect,)))


def provision(target: DatabaseTarget, setup: SetupFiles | None) -> ProvisionReport:
    """Make sure ``target`` exists and matches ``setup``, and that the roles SQL runs as log in."""
    try:
        admin = target.connect_admin(autocommit=True, connect_timeout=15)
    except psycopg.Error as exc:
        raise ProvisioningError(f"cannot connect to {target.describe()}: {pg_message(exc)}") from None
    with admin:
        if setup is None:
            return _use_as_is(target, admin)
        checksum = setup.checksum(PROVISIONING_VERSION)
        meta.ensure(target, admin)
        # Serialise provisioning of one database across processes (parallel test runs, CI).
        admin.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (_MARK + target.name,))
        try:
            return _provision(target, admin, setup, checksum)
        finally:
            admin.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (_MARK + target.name,))


def _provision(target: DatabaseTarget, admin: psycopg.Connection, setup: SetupFiles, checksum: str) -> ProvisionReport:
    row = admin.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
                        (target.name,)).fetchone()
    comment = row[0] if row else None
    if row is not None and comment == f"{_MARK}ok:{checksum}":
        roles = logins(target, admin)  # first: settings the sandbox roles gave themselves are reset
        changed = _verify(target, checksum)
        if not changed:
            warning = _joined(verify_reader(target, roles.reader), roles.warning)
            return ProvisionReport(target.name, "reused", checksum, roles, warning=warning,
                                   template=_template(admin, target, checksum, fresh=False))
        if not target.config.allow_destructive_setup:
            raise ProvisioningError(
                f"database {target.name!r} on {target.describe()} is not what its setup made: {describe_changes(changed)}; "
                "something changed it outside evalbench's sandbox. Set allow_destructive_setup: true in its db config "
                "to let evalbench rebuild it from its setup")
        log.warning("rebuilding %s: %s", target.describe(), describe_changes(changed))
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
        meta.forget(target)
        action = "rebuilt"
    admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(target.name)))
    _comment(admin, target.name, f"{_MARK}provisioning")
    tables, rows = _load(target, setup)
    roles = logins(target, admin)
    warning = grant_provisioned(target, admin_rights(admin)[0])
    _record(target, checksum)
    _comment(admin, target.name, f"{_MARK}ok:{checksum}")
    template = _template(admin, target, checksum, fresh=True)
    warning = _joined(verify_reader(target, roles.reader), warning, roles.warning)
    log.info("provisioned %s (%d tables, %d rows)", target.describe(), tables, rows)
    return ProvisionReport(target.name, action, checksum, roles, tables, rows, warning, template)


def _record(target: DatabaseTarget, checksum: str) -> None:
    """Keep what setup made: the catalog fingerprint and the sequences."""
    with target.connect(autocommit=True, connect_timeout=15) as conn:
        record = meta.Record(checksum, catalog_fingerprint(conn), conn.execute(SEQUENCE_STATE).fetchall())
    meta.write(target, record)


def _verify(target: DatabaseTarget, checksum: str) -> list[str]:
    """What changed in the database since setup made it (nothing: its sequences are then put back
    to what setup left, under the write lock, so no write execution of a run in progress is cut)."""
    record = meta.read(target)
    if record is None or record.checksum != checksum:
        return ["no record of what its setup made"]
    with target.connect(autocommit=True, connect_timeout=15) as conn:
        conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (WRITES_LOCK,))
        try:
            changed = changes(record.catalog, catalog_fingerprint(conn))
            if not changed and restore_sequences(conn, record.sequences):
                log.info("put the sequences of %s back to what its setup left", target.describe())
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (WRITES_LOCK,))
    return changed


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


def _use_as_is(target: DatabaseTarget, admin: psycopg.Connection) -> ProvisionReport:
    """A database evalbench did not create: agent SQL reads it as the sandbox role (SELECT only),
    refused when that role could create anything there; golden SQL reads it as the golden role."""
    exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (target.name,)).fetchone()
    if not exists:
        raise ProvisioningError(
            f"database {target.name!r} does not exist on {target.describe()} and there is no setup for it "
            "(set setup_directory to a folder holding a sub-folder with this name)"
        )
    roles = logins(target, admin, database_ready=False)  # logged in to the maintenance database: no grant here yet
    if roles.golden.user != roles.reader.user:
        grant_as_is(target)
    warning = _joined(verify_reader(target, roles.reader), roles.warning,
                      "the sandbox role may cancel its own other connections on a database evalbench did not create "
                      "(signal functions are revoked only on provisioned databases)")
    return ProvisionReport(target.name, "external", None, roles, warning=warning)


def _joined(*warnings: str | None) -> str | None:
    return "; ".join(w for w in warnings if w) or None


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
