"""The embedded PostgreSQL server (from the ``pgserver`` wheel), shared by all runs of a machine.

Its data directory lives in a cache folder and is reused across runs, so provisioned databases
survive and unchanged setups are not redone. pgserver reference-counts processes that use the
same data directory and stops the server when the last one exits.
"""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path
from typing import Protocol

from evalbench.core.errors import ProvisioningError

_lock = threading.Lock()
class _Server(Protocol):
    """What we use of a pgserver server (pgserver ships no types)."""

    def get_uri(self, database: str) -> str: ...


_servers: dict[Path, _Server] = {}


def default_data_dir() -> Path:
    if "EVALBENCH_PGDATA" in os.environ:
        return Path(os.environ["EVALBENCH_PGDATA"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "evalbench" / "pgdata"


def embedded_url(data_dir: Path | None = None, database: str = "postgres") -> str:
    """A libpq URL (Unix socket) for ``database`` on the embedded server, started if need be."""
    data_dir = (data_dir or default_data_dir()).resolve()
    with _lock:
        server = _servers.get(data_dir)
        if server is None:
            data_dir.parent.mkdir(parents=True, exist_ok=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR
                import pgserver

                try:
                    server = pgserver.get_server(data_dir, cleanup_mode="stop")  # type: ignore[attr-defined]  # pgserver exports it without __all__
                except Exception as exc:  # pgserver raises plain exceptions
                    raise ProvisioningError(f"cannot start the embedded PostgreSQL in {data_dir}: {exc}") from exc
            _servers[data_dir] = server
    return server.get_uri(database)
