"""SQLite behind the :class:`~evalbench.backends.base.Backend` interface."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from evalbench.backends.base import DatabaseUnavailable, Provisioned, SandboxLimits
from evalbench.backends.setup import SetupFiles
from evalbench.backends.sqlite.files import database_file, is_current, provision_file, read_marks
from evalbench.backends.sqlite.sandbox import SQLiteSandbox
from evalbench.core.errors import ProvisioningError

if TYPE_CHECKING:
    from evalbench.config import DatabaseConfig


class SQLiteBackend:
    name = "sqlite"
    file_database = True  # database_path names a file or a folder of files
    dialect = "sqlite"

    def setup_dialects(self) -> Sequence[str]:
        return ("sqlite", "sqlite3")

    def provision(self, config: DatabaseConfig, setup: SetupFiles | None, embedded_dir: Path | None) -> Provisioned:
        return provision_file(config, database_file(config, embedded_dir), setup)

    def open_sandbox(self, config: DatabaseConfig, provisioned: Provisioned, limits: SandboxLimits,
                     embedded_dir: Path | None) -> SQLiteSandbox:
        return SQLiteSandbox(provisioned.handle, limits)

    def describe_schema(self, sandbox: SQLiteSandbox) -> str:
        """The ``CREATE`` statements of the tables and views, as SQLite keeps them."""
        import sqlite3

        with sqlite3.connect(f"file:{sandbox.path}?mode=ro", uri=True) as conn:
            rows = conn.execute("SELECT sql FROM sqlite_master WHERE type IN ('table', 'view') AND sql IS NOT NULL "
                                "AND name NOT LIKE 'sqlite_%' ORDER BY name").fetchall()
        return "\n\n".join(f"{sql};" for (sql,) in rows)

    def probe(self, config: DatabaseConfig, setup: SetupFiles | None, embedded_dir: Path | None, timeout_s: float) -> str:
        path = database_file(config, embedded_dir)
        if path.exists():
            if read_marks(path) is None:
                raise DatabaseUnavailable(f"{path} is not a SQLite database")
            if setup is None:
                return f"sqlite/{config.database_name}: {path} used as is"
            current = is_current(config, path, setup)
            return f"sqlite/{config.database_name}: {path} {'is up to date' if current else 'will be rebuilt from its setup'}"
        if setup is None:
            raise ProvisioningError(f"sqlite database {path} does not exist and there is no setup for {config.database_name!r}")
        return f"sqlite/{config.database_name}: {path} will be created from its setup"
