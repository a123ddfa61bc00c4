"""One database of a run, through its backend: which backend serves it, its setup files, and
its sandbox once provisioned. The orchestrator, ``validate``, preflight and ``evalbench db`` all
start here, so none of them knows which engine is behind a database."""

from __future__ import annotations

from dataclasses import dataclass

from evalbench.backends import backend_name, get_backend
from evalbench.backends.base import Backend, Provisioned, Sandbox
from evalbench.backends.setup import SetupFiles
from evalbench.core.errors import ConfigError
from evalbench.run.plan import DatabasePart, DatabasesSpec


@dataclass
class Database:
    """A (dialect, database) group's database: its part of the plan and the backend that serves it."""

    part: DatabasePart
    backend: Backend

    @property
    def dialect(self) -> str:
        return self.part.dialect

    @property
    def name(self) -> str:
        return self.part.name

    def setup(self) -> SetupFiles | None:
        return self.part.setup(self.backend.setup_dialects())

    def provision(self) -> Provisioned:
        return self.backend.provision(self.part.config, self.setup(), self.part.embedded_dir)

    def open_sandbox(self, provisioned: Provisioned) -> Sandbox:
        return self.backend.open_sandbox(self.part.config, provisioned, self.part.limits, self.part.embedded_dir)

    def probe(self, timeout_s: float) -> str:
        return self.backend.probe(self.part.config, self.setup(), self.part.embedded_dir, timeout_s)


def database(spec: DatabasesSpec, dialect: str, name: str) -> Database:
    """The database ``name`` of ``dialect`` as the run's databases describe it. An unknown backend
    (``db_type``) is a ConfigError naming the known ones."""
    part = spec.for_group(dialect, name)
    wanted = backend_name(part.config.db_type, part.config.dialect)
    try:
        backend = get_backend(wanted)
    except KeyError as exc:
        raise ConfigError(str(exc).strip("'\""), file=spec.where, key="database_configs.db_type") from None
    except ImportError as exc:  # an optional backend whose driver is not installed
        raise ConfigError(f"backend {wanted!r} needs a package that is not installed ({exc.name or exc}); "
                          f"install evalbench[{wanted}]", file=spec.where, key="database_configs.db_type") from None
    return Database(part, backend)


def provision_entry(provisioned: Provisioned) -> dict[str, object]:
    """What the manifest and summary record of one provisioned database."""
    return {"action": provisioned.action, "checksum": provisioned.checksum, "sandbox_user": provisioned.sandbox_user,
            "tables_loaded": provisioned.tables_loaded, "rows_loaded": provisioned.rows_loaded,
            "warning": provisioned.warning}
