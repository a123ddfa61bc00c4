"""Backend names: the registry of backend factories (built in, or declared by other packages
under the ``evalbench.backends`` entry point group), their aliases, and which backend a database
config selects.

Apart from :mod:`evalbench.backends` (which also makes the backend instances) so that the config
schema can check a ``db_type`` without the ``Backend`` interface, which itself takes configs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from evalbench.core.registry import Registry

BACKENDS: Registry[Callable[[], Any]] = Registry("backend", group="evalbench.backends")

# name -> "module:class"; imported on first use
_BUILT_IN = {
    "postgres": "evalbench.backends.postgres.backend:PostgresBackend",
    "alloydb": "evalbench.backends.postgres.connectors:AlloyDBBackend",
    "cloudsql": "evalbench.backends.postgres.connectors:CloudSQLBackend",
    "sqlite": "evalbench.backends.sqlite.backend:SQLiteBackend",
    "duckdb": "evalbench.backends.duckdb.backend:DuckDBBackend",
    "mysql": "evalbench.backends.mysql.backend:MySQLBackend",
}
# other spellings of a built-in backend's name (EvalBench's db_type values among them)
ALIASES = {"postgresql": "postgres", "pg": "postgres", "psql": "postgres", "mariadb": "mysql",
           "cloud_sql": "cloudsql", "cloudsql_postgres": "cloudsql", "sqlite3": "sqlite"}


def _lazy(target: str) -> Callable[[], Any]:
    def factory() -> Any:
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)()

    return factory


for _name, _target in _BUILT_IN.items():
    BACKENDS.register(_name)(_lazy(_target))


def backend_name(db_type: str | None, dialect: str) -> str:
    """The backend a database config selects: its ``db_type``, else its dialect's own."""
    name = (db_type or dialect).strip().lower()
    return ALIASES.get(name, name)


# Built-in backends whose database is a file: EvalBench's ``database_path`` is then the folder
# of the ``<database>.db`` files (databases/sqlite.py::SQLiteDB), not a server's host:port.
FILE_BACKENDS = frozenset({"sqlite", "duckdb"})


def is_file_backend(name: str) -> bool:
    """Whether ``database_path`` names a file or folder for this backend: the built-in SQLite
    and DuckDB, and a plugin whose class says ``file_database = True``."""
    if name in FILE_BACKENDS or name in _BUILT_IN:
        return name in FILE_BACKENDS
    try:
        return bool(getattr(BACKENDS.get(name), "file_database", False))
    except Exception:  # noqa: BLE001  # an unknown or broken plugin is reported by the db_type check
        return False
