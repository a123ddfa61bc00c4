"""Where a SQLite database file lives and how it is built from a setup directory.

A database built by evalbench is marked (``PRAGMA application_id``) and carries a short form of
its setup's checksum (``PRAGMA user_version``); its sidecar record ``<file>.evalbench``
(:mod:`evalbench.backends.build_record`) keeps the checksum and the catalog the build left. An
unchanged setup is reused when the catalog is still the one built (else refused, naming what
changed, or rebuilt with ``allow_destructive_setup``), a changed one is rebuilt, and a file
evalbench did not build is never overwritten unless the db config says ``allow_destructive_setup``. A build goes to a temporary file renamed into place, so a reader
never sees half a database and two runs building at once both end with a whole one.
"""

from __future__ import annotations

import os
import sqlite3
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from evalbench.backends import build_record, dbfile
from evalbench.backends.base import Provisioned
from evalbench.backends.build_record import Catalog, definition
from evalbench.backends.setup import SetupFiles, load_csv
from evalbench.backends.sqlite.engine import DENIED_FUNCTIONS
from evalbench.core.errors import ProvisioningError

if TYPE_CHECKING:
    from evalbench.config import DatabaseConfig

PROVISIONING_VERSION = "sqlite-1"
APPLICATION_ID = 0x45564231  # "EVB1": built by evalbench
_INSERT_BATCH = 500
EXTENSIONS = (".db", ".sqlite", ".sqlite3")


def database_file(config: DatabaseConfig, embedded_dir: Path | None) -> Path:
    """The file of ``config``'s database (:func:`evalbench.backends.dbfile.database_file`)."""
    return dbfile.database_file(config, embedded_dir, "sqlite", EXTENSIONS)


def stamp(checksum: str) -> int:
    """The checksum as ``user_version`` (a 32-bit signed integer)."""
    return int(checksum[:7], 16)


def read_marks(path: Path) -> tuple[int, int] | None:
    """(application_id, user_version) of a database file, None when it is not one."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            return conn.execute("PRAGMA application_id").fetchone()[0], conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.Error:
        return None


def catalog(path: Path) -> Catalog:
    """What the database holds: each object's definition, each table's rows, each
    ``AUTOINCREMENT`` counter, and the file's change counter (every commit moves it)."""
    try:
        conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
        try:
            found: Catalog = {f"{kind} {name}": definition(sql)
                              for kind, name, sql in conn.execute("SELECT type, name, sql FROM sqlite_master")}
            tables = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            for table in tables:
                (rows,) = conn.execute(f'SELECT count(*) FROM "{table.replace(chr(34), chr(34) * 2)}"').fetchone()
                found[f"rows of {table}"] = f"{rows} rows"
            if "sqlite_sequence" in tables:
                for name, value in conn.execute("SELECT name, seq FROM sqlite_sequence"):
                    found[f"counter of {name}"] = f"last value {value}"
        finally:
            conn.close()
        with path.open("rb") as handle:
            header = handle.read(100)
    except (sqlite3.Error, OSError) as exc:
        raise ProvisioningError(f"{path} cannot be read as a SQLite database: {exc}") from None
    if len(header) == 100 and header[18] == 1:  # a rollback journal: commits move the counter (not in WAL mode)
        found["file"] = f"change counter {int.from_bytes(header[24:28], 'big')}"
    return found


def is_current(config: DatabaseConfig, path: Path, setup: SetupFiles) -> bool:
    """Whether ``path`` was built from ``setup`` and is unchanged since; ProvisioningError naming
    what changed when it was changed (unless ``allow_destructive_setup``: then False)."""
    checksum = setup.checksum(PROVISIONING_VERSION)
    if not path.exists() or read_marks(path) != (APPLICATION_ID, stamp(checksum)):
        return False
    record = build_record.read(path, "sqlite")
    return record is not None and record.get("checksum") == checksum and \
        build_record.check(path, record, catalog(path), config.allow_destructive_setup)


def provision_file(config: DatabaseConfig, path: Path, setup: SetupFiles | None) -> Provisioned:
    """Build ``path`` from ``setup`` unless it is already built from it; with no setup, the file
    must exist and is used as it is."""
    if setup is None:
        if not path.is_file():
            raise ProvisioningError(f"sqlite database {path} does not exist and there is no setup for "
                                    f"{config.database_name!r} (set setup_directory, or database_path to its folder)")
        return Provisioned(action="external", handle=path)
    checksum = setup.checksum(PROVISIONING_VERSION)
    if is_current(config, path, setup):
        return Provisioned(action="reused", checksum=checksum, handle=path)
    marks = read_marks(path) if path.exists() else None
    if path.exists() and (marks is None or marks[0] != APPLICATION_ID) and not config.allow_destructive_setup:
        raise ProvisioningError(f"{path} exists and was not built by evalbench; set allow_destructive_setup: true in "
                                "its db config to let evalbench replace it, or leave it out of setup_directory to use it as is")
    action = "rebuilt" if path.exists() else "created"
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}.building")
    draft.unlink(missing_ok=True)
    try:
        tables, rows = build(draft, setup, checksum)
        built = catalog(draft)
        os.replace(draft, path)
        build_record.write(path, PROVISIONING_VERSION, checksum, built)  # missing or stale: the file is rebuilt
    finally:
        draft.unlink(missing_ok=True)
    return Provisioned(action=action, checksum=checksum, tables_loaded=tables, rows_loaded=rows, handle=path)


def build(path: Path, setup: SetupFiles, checksum: str) -> tuple[int, int]:
    """Run the setup SQL and load the CSVs into a new file; errors name the file (and line)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.set_authorizer(_setup_authorizer)  # the setup SQL comes with the dataset: no other file, no code
    try:
        for script in (setup.pre_setup, setup.setup):
            if script:
                _run_script(conn, script)
        rows = sum(load_csv(conn, data, partial(_insert, conn, data), _INSERT_BATCH) for data in setup.data)
        if setup.post_setup:
            _run_script(conn, setup.post_setup)
        conn.execute("ANALYZE")
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {stamp(checksum)}")
    finally:
        conn.close()
    return len(setup.data), rows


def _setup_authorizer(action: int, arg1: object, arg2: object, _db: object, _source: object) -> int:
    """Setup SQL may do anything to its own database, but not open another file (ATTACH, VACUUM
    INTO) nor load an extension."""
    if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and str(arg2).lower() in DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def _run_script(conn: sqlite3.Connection, path: Path) -> None:
    try:
        conn.executescript(path.read_text(encoding="utf-8-sig"))
    except sqlite3.Error as exc:
        raise ProvisioningError(f"{path}: {exc}") from None


def _insert(conn: sqlite3.Connection, path: Path, head: str, batch: list[tuple[int, str]]) -> int:
    try:
        conn.execute(head + ", ".join(values for _, values in batch))
        return len(batch)
    except sqlite3.Error:
        pass
    for line, values in batch:  # find the offending row
        try:
            conn.execute(head + values)
        except sqlite3.Error as exc:
            raise ProvisioningError(f"{path}:{line}: {exc}") from None
    raise ProvisioningError(f"{path}: a batch of rows failed to load, but no single row did")
