"""One database of a run, through its backend: which backend serves it, its setup files, and
its sandbox once provisioned. The orchestrator, ``validate`` and preflight all start here, so
none of them knows which engine is behind a database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evalbench.backends import backend_name, get_backend
from evalbench.backends.base import Backend, Provisioned, Sandbox, SandboxLimits
from evalbench.backends.setup import SetupFiles, find_setup
from evalbench.core.errors import ConfigError

if TYPE_CHECKING:
    from evalbench.config import DatabaseConfig, RunConfig


@dataclass
class Database:
    """A (dialect, database) group's database: its config and the backend that serves it."""

    dialect: str
    name: str  # as the items name it
    config: DatabaseConfig
    backend: Backend

    def setup(self, run: RunConfig) -> SetupFiles | None:
        return find_setup(run.setup_directory, self.name, self.dialect, self.backend.setup_dialects())

    def provision(self, run: RunConfig) -> Provisioned:
        return self.backend.provision(self.config, self.setup(run), run.embedded.data_dir)

    def open_sandbox(self, run: RunConfig, provisioned: Provisioned) -> Sandbox:
        execution = run.execution
        limits = SandboxLimits(
            pool_size=run.runners.sqlexec_runners,
            statement_timeout_s=self.config.statement_timeout_s or execution.statement_timeout_s,
            max_rows=self.config.max_rows or execution.max_rows,
            executions_per_minute=self.config.max_executions_per_minute,
            max_result_bytes=execution.max_result_bytes,
        )
        return self.backend.open_sandbox(self.config, provisioned, limits, run.embedded.data_dir)

    def probe(self, run: RunConfig, timeout_s: float) -> str:
        return self.backend.probe(self.config, self.setup(run), run.embedded.data_dir, timeout_s)


def database(run: RunConfig, dialect: str, name: str) -> Database:
    """The database ``name`` of ``dialect`` as the run config describes it. An unknown backend
    (``db_type``) is a ConfigError naming the known ones."""
    config = run.database_for(dialect, name)
    wanted = backend_name(config.db_type, config.dialect)
    try:
        backend = get_backend(wanted)
    except KeyError as exc:
        raise ConfigError(str(exc).strip("'\""), file=str(run.source) if run.source else None,
                          key="database_configs.db_type") from None
    except ImportError as exc:  # an optional backend whose driver is not installed
        raise ConfigError(f"backend {wanted!r} needs a package that is not installed ({exc.name or exc}); "
                          f"install evalbench[{wanted}]", file=str(run.source) if run.source else None,
                          key="database_configs.db_type") from None
    return Database(dialect, name, config, backend)


def provision_entry(provisioned: Provisioned) -> dict[str, Any]:
    """What the manifest and summary record of one provisioned database."""
    return {"action": provisioned.action, "checksum": provisioned.checksum, "sandbox_user": provisioned.sandbox_user,
            "tables_loaded": provisioned.tables_loaded, "rows_loaded": provisioned.rows_loaded,
            "warning": provisioned.warning}
