"""DuckDB behind the :class:`~evalbench.backends.base.Backend` interface."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from evalbench.backends import build_record
from evalbench.backends.base import DatabaseUnavailable, Provisioned, SandboxLimits
from evalbench.backends.duckdb.files import database_file, is_current, provision_file
from evalbench.backends.duckdb.sandbox import DuckDBSandbox
from evalbench.backends.setup import SetupFiles
from evalbench.core.errors import ProvisioningError

if TYPE_CHECKING:
    from evalbench.config import DatabaseConfig


class DuckDBBackend:
    name = "duckdb"
    file_database = True  # database_path names a file or a folder of files
    dialect = "duckdb"

    def setup_dialects(self) -> Sequence[str]:
        return ("duckdb",)  # PostgreSQL's setup SQL is close but not the same: never read in its place

    def provision(self, config: DatabaseConfig, setup: SetupFiles | None, embedded_dir: Path | None) -> Provisioned:
        return provision_file(config, database_file(config, embedded_dir), setup)

    def open_sandbox(self, config: DatabaseConfig, provisioned: Provisioned, limits: SandboxLimits,
                     embedded_dir: Path | None) -> DuckDBSandbox:
        return DuckDBSandbox(provisioned.handle, limits)

    def describe_schema(self, sandbox: DuckDBSandbox) -> str:
        """The ``CREATE`` statements of the tables and views, as DuckDB keeps them."""
        rows = sandbox.rows("SELECT table_name AS name, sql FROM duckdb_tables() WHERE NOT internal AND NOT temporary "
                            "UNION ALL SELECT view_name, sql FROM duckdb_views() WHERE NOT internal AND NOT temporary "
                            "ORDER BY name")
        return "\n\n".join(sql.rstrip().rstrip(";") + ";" for _, sql in rows if sql)

    def probe(self, config: DatabaseConfig, setup: SetupFiles | None, embedded_dir: Path | None, timeout_s: float) -> str:
        path = database_file(config, embedded_dir)
        if path.exists():
            if not path.is_file():
                raise DatabaseUnavailable(f"{path} is not a file")
            try:  # opened read-only: a run holding it read-write in another process is reported, not disturbed
                duckdb.connect(str(path), read_only=True, config={"enable_external_access": False}).close()
            except duckdb.Error as exc:
                raise DatabaseUnavailable(f"{path} cannot be opened as a DuckDB database: {str(exc).splitlines()[0]}") from None
            if setup is None:
                return f"duckdb/{config.database_name}: {path} used as is"
            record = build_record.read(path, "duckdb")
            if record is None and not config.allow_destructive_setup:
                raise ProvisioningError(f"{path} exists and was not built by evalbench; set allow_destructive_setup: true "
                                        "in its db config to let evalbench replace it, or leave it out of setup_directory")
            current = is_current(config, path, setup)
            return f"duckdb/{config.database_name}: {path} {'is up to date' if current else 'will be rebuilt from its setup'}"
        if setup is None:
            raise ProvisioningError(f"duckdb database {path} does not exist and there is no setup for {config.database_name!r}")
        return f"duckdb/{config.database_name}: {path} will be created from its setup"
