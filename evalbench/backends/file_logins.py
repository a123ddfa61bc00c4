"""Per-conversation "logins" on a file database (SQLite, DuckDB; :mod:`evalbench.backends.logins`).

A file engine has no server and no users: what is lent is a private **copy** of the database
file, ``0444`` in a folder of its own (``0700``, under the temporary folder, named
``evalbench-login-<expiry>-*``), and a URL that opens it read-only. The sandbox's own file is
never handed out, so nothing done through the login reaches it or another conversation. What
the agent's own library does with the copy is its own (it runs as this machine's user: it could
open it read-write after a ``chmod``, make temporary tables in its memory, or write other files):
the read-only open is a request the library honours, not a server's refusal.

Revoking deletes the folder (a connection already open keeps reading the deleted copy until it
closes); so does expiry, and a folder whose process died is deleted by the next lend a minute past its expiry.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from evalbench.backends.logins import Lent

PREFIX = "evalbench-login-"


class FileLender:
    """Lends read-only copies of one database file; ``copy(source, target)`` makes a consistent
    copy (the engine's way), ``url(path)`` the URL that opens ``path`` read-only."""

    def __init__(self, path: Path, copy: Callable[[Path, Path], None], url: Callable[[Path], str]) -> None:
        self.path, self.copy, self.url = path, copy, url

    def lend(self, ttl_s: float, label: str) -> Lent:
        sweep()
        expires_at = time.time() + ttl_s
        folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{int(expires_at)}-"))  # 0700
        copy = folder / self.path.name
        try:
            self.copy(self.path, copy)
            for made in folder.iterdir():
                made.chmod(0o444)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        fields = {"path": str(copy), "database": self.path.stem}
        return Lent(folder.name, self.url(copy), fields, expires_at, lambda: remove(folder))


def remove(folder: Path) -> None:
    """Delete a lent copy's folder (gone already: nothing to do)."""
    shutil.rmtree(folder, ignore_errors=True)
    if folder.exists():
        raise OSError(f"{folder} could not be deleted")


def sweep(grace_s: float = 60.0) -> None:
    """Delete this user's lent copies a minute past their expiry (their process died)."""
    now = time.time()
    with contextlib.suppress(OSError):
        for entry in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
            stamp = entry.name.removeprefix(PREFIX).split("-", 1)[0]
            with contextlib.suppress(OSError):
                if stamp.isdigit() and int(stamp) < now - grace_s and entry.stat().st_uid == os.getuid():
                    shutil.rmtree(entry, ignore_errors=True)
