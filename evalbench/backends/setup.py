"""An EvalBench-style setup directory, read the same way by every backend.

Layout: ``<setup_directory>/<database>/<dialect>/{pre_setup,setup,post_setup}.sql`` and
``<setup_directory>/<database>/data/<table>.csv``. Each CSV cell is a SQL literal (no header
row, bare ``NULL``, strings and JSON single-quoted), inlined into ``INSERT ... VALUES`` exactly
as EvalBench's loader does (``databases/*.py::DB.insert_data``).
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from evalbench.core.errors import ProvisioningError
from evalbench.dataset.loader import database_name_problem


@dataclass(frozen=True)
class SetupFiles:
    database: str
    pre_setup: Path | None
    setup: Path | None
    post_setup: Path | None
    data: tuple[Path, ...]

    def all(self) -> list[Path]:
        return [p for p in (self.pre_setup, self.setup, self.post_setup) if p] + list(self.data)

    def checksum(self, version: str) -> str:
        """Of every file's name and bytes, and of the backend's provisioning ``version``."""
        digest = hashlib.sha256(version.encode())
        for path in self.all():
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        return digest.hexdigest()[:32]


def find_setup(setup_directory: Path | None, database: str, dialect: str,
               folders: Sequence[str] | None = None) -> SetupFiles | None:
    """The setup files of ``database`` (its SQL from the first of ``folders`` that exists, by
    default the dialect's own), or None when the setup directory has no folder for it.

    ``database`` comes from the dataset (``selected_database`` / ``database``): it must name one
    folder *inside* the setup directory. A name that is empty, ``.`` or ``..``, holds a path
    separator or a NUL, or is absolute would read setup SQL from elsewhere (``../other``,
    ``/etc``): a :class:`ProvisioningError` naming it, and the group's items are recorded as
    ``db_error`` with that message; nothing outside the setup directory is read."""
    if setup_directory is None:
        return None
    problem = database_name_problem(database)  # the dataset loader refuses such records already
    if problem is not None:
        raise ProvisioningError(f"{problem} (the items' selected_database / database key, inside the setup directory "
                                f"{setup_directory})")
    root = setup_directory / database
    if not root.is_dir():
        return None
    sql_dir = next((root / d for d in (folders or (dialect,)) if (root / d).is_dir()), None)

    def pick(name: str) -> Path | None:
        path = sql_dir / f"{name}.sql" if sql_dir else None
        return path if path is not None and path.is_file() else None

    data_dir = root / "data"
    data = tuple(sorted(data_dir.glob("*.csv"))) if data_dir.is_dir() else ()
    files = SetupFiles(database, pick("pre_setup"), pick("setup"), pick("post_setup"), data)
    if not files.all():
        raise ProvisioningError(f"{root}: no setup SQL for dialect {dialect!r} and no data/*.csv")
    return files


class Executes(Protocol):
    """A connection that runs one SQL text (sqlite3's, DuckDB's)."""

    def execute(self, sql: str, /) -> object: ...


def load_csv(conn: Executes, path: Path, insert: Callable[[str, list[tuple[int, str]]], int], size: int = 500) -> int:
    """Every row of ``path`` into the table named like the file, in one transaction of ``conn`` (a
    connection in autocommit mode, with ``execute``): ``insert(head, batch)`` runs one batch of
    ``INSERT INTO "<table>" VALUES`` rows and names the offending row when it fails. Rows loaded."""
    head = f'INSERT INTO "{path.stem}" VALUES '
    conn.execute("BEGIN")
    try:
        count = sum(insert(head, batch) for batch in value_batches(path, size))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return count


def value_batches(path: Path, size: int = 500) -> Iterator[list[tuple[int, str]]]:
    """:func:`value_rows` in lists of at most ``size`` (one multi-row INSERT each)."""
    batch: list[tuple[int, str]] = []
    for row in value_rows(path):
        batch.append(row)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def value_rows(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, "(cell, cell, ...)")`` for every row of a CSV whose cells are SQL literals."""
    with path.open(newline="", encoding="utf-8-sig") as handle:  # a BOM is accepted
        reader = csv.reader(handle)
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if any(not cell.strip() for cell in row):
                raise ProvisioningError(f"{path}:{reader.line_num}: empty cell (write NULL for a missing value)")
            yield reader.line_num, "(" + ", ".join(row) + ")"
