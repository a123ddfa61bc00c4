"""Lent copies of a SQLite database (:mod:`evalbench.backends.file_logins`)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote

from evalbench.backends.file_logins import FileLender


def copy(source: Path, target: Path) -> None:
    """A consistent copy, by SQLite's backup API (a journal or WAL of the source included)."""
    src = sqlite3.connect(f"file:{quote(str(source))}?mode=ro", uri=True)
    try:
        dst = sqlite3.connect(target)
        try:
            src.backup(dst)
            dst.execute("PRAGMA journal_mode = DELETE")  # no -wal / -shm beside the read-only copy
        finally:
            dst.close()
    finally:
        src.close()


def url(path: Path) -> str:
    """A SQLite URI filename (``sqlite3.connect(url, uri=True)``) that opens ``path`` read-only."""
    return f"file:{quote(str(path))}?mode=ro"


def lender(path: Path) -> FileLender:
    return FileLender(path, copy, url)
