"""Where a DuckDB database file lives and how it is built from a setup directory.

DuckDB has no per-file user field (``COMMENT ON DATABASE`` / ``ON SCHEMA`` are not implemented),
and a marker table would be visible to agents, so a database built by evalbench is marked by its
sidecar record ``<file>.evalbench`` (:mod:`evalbench.backends.build_record`): the setup's checksum
and the catalog the build left. An unchanged setup is reused when the catalog is still the one
built (else refused, naming what changed, or rebuilt with ``allow_destructive_setup``), a changed
setup is rebuilt, and a file with no sidecar is never overwritten unless the db config says
``allow_destructive_setup``. A build goes to a temporary file renamed into place; the sidecar is
marked "ours, being rebuilt" before the rename and given the checksum after it, so a crash in
between leaves a file that is rebuilt, never one that is wrongly reused or refused.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from evalbench.backends import build_record, dbfile
from evalbench.backends.base import Provisioned
from evalbench.backends.build_record import BUILDING, Catalog, definition
from evalbench.backends.setup import SetupFiles, load_csv
from evalbench.core.errors import ProvisioningError
from evalbench.sql.statements import split_statements

if TYPE_CHECKING:
    import duckdb

    from evalbench.config import DatabaseConfig

PROVISIONING_VERSION = "duckdb-1"
EXTENSIONS = (".duckdb", ".ddb", ".db")
_INSERT_BATCH = 500
_OURS = "database_name = current_database() AND NOT internal"
# (kind, query of (qualified name, definition)) of what setup can create
_DEFINITIONS = (
    ("schema", f"SELECT schema_name, schema_name FROM duckdb_schemas() WHERE {_OURS}"),
    ("table", f"SELECT schema_name || '.' || table_name, sql FROM duckdb_tables() WHERE {_OURS} AND NOT temporary"),
    ("view", f"SELECT schema_name || '.' || view_name, sql FROM duckdb_views() WHERE {_OURS} AND NOT temporary"),
    ("index", "SELECT schema_name || '.' || index_name, sql FROM duckdb_indexes() WHERE database_name = current_database()"),
    ("sequence", "SELECT schema_name || '.' || sequence_name, sql FROM duckdb_sequences() "
                 "WHERE database_name = current_database() AND NOT temporary"),
    ("macro", f"SELECT schema_name || '.' || function_name, function_type || parameters::VARCHAR || macro_definition "
              f"FROM duckdb_functions() WHERE {_OURS}"),
    ("type", f"SELECT schema_name || '.' || type_name, logical_type || coalesce(labels::VARCHAR, '') "
             f"FROM duckdb_types() WHERE {_OURS}"),
)


def database_file(config: DatabaseConfig, embedded_dir: Path | None) -> Path:
    """The file of ``config``'s database (:func:`evalbench.backends.dbfile.database_file`)."""
    return dbfile.database_file(config, embedded_dir, "duckdb", EXTENSIONS)


def catalog(path: Path) -> Catalog:
    """What the database holds: each object's definition, each table's rows, each sequence's value."""
    import duckdb

    try:
        conn = duckdb.connect(str(path), read_only=True, config={"enable_external_access": False})
    except duckdb.Error as exc:
        raise ProvisioningError(f"{path} cannot be opened as a DuckDB database: {str(exc).splitlines()[0]}") from None
    try:
        found: Catalog = {}
        for kind, query in _DEFINITIONS:
            for name, sql in conn.execute(query).fetchall():
                found[f"{kind} {name}"] = definition(sql)
        for schema, table in conn.execute("SELECT schema_name, table_name FROM duckdb_tables() "
                                          f"WHERE {_OURS} AND NOT temporary").fetchall():
            (rows,) = conn.execute(f"SELECT count(*) FROM {_quote(schema)}.{_quote(table)}").fetchone() or (0,)
            found[f"rows of {schema}.{table}"] = f"{rows} rows"
        for name, value in conn.execute("SELECT schema_name || '.' || sequence_name, last_value FROM duckdb_sequences() "
                                        "WHERE database_name = current_database() AND NOT temporary").fetchall():
            found[f"counter of sequence {name}"] = f"last value {value}"
        return found
    finally:
        conn.close()


def is_current(config: DatabaseConfig, path: Path, setup: SetupFiles) -> bool:
    """Whether ``path`` was built from ``setup`` and is unchanged since; ProvisioningError naming
    what changed when it was changed (unless ``allow_destructive_setup``: then False)."""
    record = build_record.read(path, "duckdb") if path.exists() else None
    return record is not None and record.get("checksum") == setup.checksum(PROVISIONING_VERSION) and \
        build_record.check(path, record, catalog(path), config.allow_destructive_setup)


def provision_file(config: DatabaseConfig, path: Path, setup: SetupFiles | None) -> Provisioned:
    """Build ``path`` from ``setup`` unless it is already built from it and unchanged since; with
    no setup, the file must exist and is used as it is."""
    if setup is None:
        if not path.is_file():
            raise ProvisioningError(f"duckdb database {path} does not exist and there is no setup for "
                                    f"{config.database_name!r} (set setup_directory, or database_path to its file)")
        return Provisioned(action="external", handle=path)
    checksum = setup.checksum(PROVISIONING_VERSION)
    if is_current(config, path, setup):
        return Provisioned(action="reused", checksum=checksum, handle=path)
    record = build_record.read(path, "duckdb") if path.exists() else None
    if path.exists() and record is None and not config.allow_destructive_setup:
        raise ProvisioningError(f"{path} exists and was not built by evalbench (no DuckDB record "
                                f"{build_record.sidecar(path).name} beside it); set allow_destructive_setup: true in its db config to let evalbench "
                                "replace it, or leave it out of setup_directory to use it as is")
    action = "rebuilt" if path.exists() else "created"
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        _check_not_in_use(path)
    draft = path.with_name(f".{path.name}.{os.getpid()}.building")
    _remove(draft)
    try:
        tables, rows = build(draft, setup)
        built = catalog(draft)
        build_record.write(path, PROVISIONING_VERSION, BUILDING)
        Path(f"{path}.wal").unlink(missing_ok=True)  # a stale log of the old file would be replayed into the new one
        os.replace(draft, path)
        build_record.write(path, PROVISIONING_VERSION, checksum, built)
    finally:
        _remove(draft)
    return Provisioned(action=action, checksum=checksum, tables_loaded=tables, rows_loaded=rows, handle=path)


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)
    Path(f"{path}.wal").unlink(missing_ok=True)


def _check_not_in_use(path: Path) -> None:
    """Refuse to replace a file another process (or a sandbox of this one) has open."""
    import duckdb

    try:
        duckdb.connect(str(path)).close()
    except duckdb.Error as exc:
        message = str(exc).splitlines()[0]
        if "lock" in message.lower() or "different configuration" in message:
            raise ProvisioningError(f"{path} must be rebuilt (its setup changed) but is in use: {message}") from None
        # not a database this DuckDB can open: nothing can be using it as one


SETUP_CONFIG: dict[str, str | bool] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "lock_configuration": True,
}


def build(path: Path, setup: SetupFiles) -> tuple[int, int]:
    """Run the setup SQL and load the CSVs into a new file; errors name the file (and line)."""
    import duckdb

    # the setup SQL comes with the dataset: it may not read or write other files, nor load code
    conn = duckdb.connect(str(path), config=dict(SETUP_CONFIG))
    try:
        for script in (setup.pre_setup, setup.setup):
            if script:
                run_script(conn, script)
        rows = sum(load_csv(conn, data, partial(_insert, conn, data), _INSERT_BATCH) for data in setup.data)
        if setup.post_setup:
            run_script(conn, setup.post_setup)
        conn.execute("CHECKPOINT")
    finally:
        conn.close()
    return len(setup.data), rows


def run_script(conn: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Run a setup script statement by statement; an error names the file and the line."""
    import duckdb

    text = path.read_text(encoding="utf-8-sig")
    position = 0
    for statement in split_statements(text, "duckdb"):
        found = text.find(statement, position)
        position = found if found >= 0 else position
        try:
            conn.execute(statement)
        except duckdb.Error as exc:
            line = text.count("\n", 0, position) + 1
            raise ProvisioningError(f"{path}:{line}: {str(exc).splitlines()[0]}") from None


def _insert(conn: duckdb.DuckDBPyConnection, path: Path, head: str, batch: list[tuple[int, str]]) -> int:
    """Insert a batch; when it fails, find and name the offending row (DuckDB aborts the
    transaction on an error, so the search runs in a scratch transaction of its own)."""
    import duckdb

    try:
        conn.execute(head + ", ".join(values for _, values in batch))
        return len(batch)
    except duckdb.Error as exc:
        first = str(exc).splitlines()[0]
    conn.execute("ROLLBACK")
    conn.execute("BEGIN TRANSACTION")
    for line, values in batch:
        try:
            conn.execute(head + values)
        except duckdb.Error as exc:
            raise ProvisioningError(f"{path}:{line}: {str(exc).splitlines()[0]}") from None
    raise ProvisioningError(f"{path}: a batch of rows failed to load ({first}), but no single row did")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
