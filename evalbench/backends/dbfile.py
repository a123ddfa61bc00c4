"""Where a file backend's database lives (SQLite, DuckDB): ``url: <engine>:///PATH``;
``database_path`` naming a file, or a folder holding ``<database><extension>`` (EvalBench's
databases/sqlite.py::SQLiteDB); else a cache folder beside the embedded PostgreSQL's data."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from evalbench.core.errors import ProvisioningError

if TYPE_CHECKING:
    from evalbench.config import DatabaseConfig


def database_file(config: DatabaseConfig, embedded_dir: Path | None, engine: str, extensions: Sequence[str]) -> Path:
    """The file of ``config``'s database; a new file takes the first of ``extensions``."""
    if config.url is not None:
        url = config.url.get_secret_value()
        if not url.startswith(f"{engine}:///"):
            raise ProvisioningError(f"url of a {engine} database must be {engine}:///PATH, got {url.split(':', 1)[0]}:...")
        return Path(url.removeprefix(f"{engine}:///"))
    if config.database_path:
        path = Path(config.database_path)
        if path.suffix in extensions and not path.is_dir():
            return path
        existing = next((path / (config.database_name + ext) for ext in extensions
                         if (path / (config.database_name + ext)).is_file()), None)
        return existing or path / f"{config.database_name}{extensions[0]}"
    return cache_folder(embedded_dir, engine) / f"{config.database_name}{extensions[0]}"


def cache_folder(embedded_dir: Path | None, engine: str) -> Path:
    """Where database files built with no ``database_path`` go: beside the embedded PostgreSQL's
    data directory (``embedded.data_dir``, or EVALBENCH_PGDATA), else ~/.cache/evalbench/<engine>."""
    base = embedded_dir or (Path(os.environ["EVALBENCH_PGDATA"]) if os.environ.get("EVALBENCH_PGDATA") else None)
    if base is not None:
        return Path(f"{base}-{engine}")
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "evalbench" / engine
