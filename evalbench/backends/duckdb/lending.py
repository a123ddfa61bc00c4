"""Lent copies of a DuckDB database (:mod:`evalbench.backends.file_logins`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb

from evalbench.backends.file_logins import FileLender


def copy(source: Path, target: Path) -> None:
    """The file and its WAL, checkpointed into one file (a read-only open then needs nothing else)."""
    shutil.copyfile(source, target)
    wal = Path(f"{source}.wal")
    if wal.exists():
        shutil.copyfile(wal, f"{target}.wal")
        conn = duckdb.connect(str(target), config={"enable_external_access": False})
        try:
            conn.execute("CHECKPOINT")
        finally:
            conn.close()


def url(path: Path) -> str:
    """A duckdb-engine (SQLAlchemy) URL opening ``path`` read-only (``fields['path']`` for ``duckdb.connect``)."""
    return f"duckdb:///{path}?access_mode=read_only"


def lender(path: Path) -> FileLender:
    return FileLender(path, copy, url)
