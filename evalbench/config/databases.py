"""One database's config (EvalBench's db-config keys and ours): which backend serves it, and how it is reached."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BeforeValidator,
    Field,
    SecretStr,
    model_validator,
)

from evalbench.config.compat import (
    database_path,
)
from evalbench.config.types import (
    StrictModel,
)
from evalbench.core.registries import BACKENDS
from evalbench.dataset.formats import normalise_dialect

# other spellings of a built-in backend's name (EvalBench's db_type values among them)
ALIASES = {"postgresql": "postgres", "pg": "postgres", "psql": "postgres", "mariadb": "mysql",
           "cloud_sql": "cloudsql", "cloudsql_postgres": "cloudsql", "sqlite3": "sqlite"}

# Built-in backends whose database is a file: EvalBench's ``database_path`` is then the folder
# of the ``<database>.db`` files (databases/sqlite.py::SQLiteDB), not a server's host:port.
FILE_BACKENDS = frozenset({"sqlite", "duckdb"})


def backend_name(db_type: str | None, dialect: str) -> str:
    """The backend a database config selects: its ``db_type``, else its dialect's own."""
    name = (db_type or dialect).strip().lower()
    return ALIASES.get(name, name)


def is_file_backend(name: str) -> bool:
    """Whether ``database_path`` names a file or folder for this backend: the built-in SQLite
    and DuckDB, and a plugin whose class says ``file_database = True`` (its entry point is loaded
    to read it; a built-in is never imported here)."""
    if name in BACKENDS.builtins:
        return name in FILE_BACKENDS
    try:
        return bool(getattr(BACKENDS.get(name), "file_database", False))
    except Exception:  # noqa: BLE001  # an unknown or broken plugin is reported by the db_type check
        return False


def _normalise_db_type(value: object) -> object:
    """A backend's name (``postgresql`` is ``postgres``, ``mariadb`` is ``mysql``...); one no
    backend is registered under (built in, or an ``evalbench.backends`` entry point) is refused."""
    if not isinstance(value, str):
        return value
    name = backend_name(value, "")
    if name not in BACKENDS:
        raise ValueError(f"unknown db_type {value!r} (known: {', '.join(BACKENDS.names())})")
    return name


# Backends that reach a Google Cloud instance through its Python connector when given one.
CONNECTOR_BACKENDS = frozenset({"alloydb", "cloudsql"})


def is_instance_name(path: str) -> bool:
    """An AlloyDB instance URI (projects/...) or a Cloud SQL connection name (project:region:instance)."""
    return path.startswith("projects/") or path.count(":") >= 2


def _normalise_dialect(value: object) -> object:
    return normalise_dialect(value) if isinstance(value, str) else value


Dialect = Annotated[str, BeforeValidator(_normalise_dialect)]


class DatabaseConfig(StrictModel):
    """One database. EvalBench's db-config keys plus ours (``url``, ``embedded``, limits)."""

    db_type: Annotated[str | None, BeforeValidator(_normalise_db_type)] = Field(
        None, description="the backend: postgres, alloydb, cloudsql, sqlite, duckdb, mysql (mariadb), or a plugin's name; "
                          "default: the one named like the dialect (postgresql is accepted as postgres)"
    )
    dialect: Dialect = Field("postgres", description="the dialect of the items this database serves (postgresql is postgres)")
    database_name: str = Field(description="the database name, as items name it (selected_database / database)")
    database_path: str | None = Field(None, description="EvalBench key: host or host:port (or a socket directory) of the server, read as host and port; "
                                                         "for sqlite and duckdb the folder of the <database>.db files (or one file)")
    db_name_suffix: str = Field("", description="appended to each item's database name to name the database on the server")
    secret_manager_path: str | None = Field(None, description="EvalBench key; not applied (password, PGPASSWORD or ~/.pgpass is used)")
    gcp_project_id: str | None = Field(None, description="EvalBench key (AlloyDB connector); not applied")
    gcp_region: str | None = Field(None, description="EvalBench key (AlloyDB connector); not applied")
    nl_config: Any = Field(None, description="EvalBench key (AlloyDB AI natural language); not applied")
    user_name: str | None = Field(None, description="login of an external server")
    password: SecretStr | None = Field(None, description="its password (use ${ENV_VAR}); never written to outputs")
    host: str | None = Field(None, description="host of an external server")
    port: int | None = Field(None, description="port of an external server")
    url: SecretStr | None = Field(None, description="SQLAlchemy/libpq URL of an external server; overrides host/user keys")
    instance: str | None = Field(None, description="db_type alloydb: the instance URI (projects/P/locations/R/clusters/C/instances/I); "
                                                   "db_type cloudsql: the connection name (P:R:I); reached through Google's Python connector")
    ip_type: Literal["public", "private", "psc"] = Field("public", description="alloydb/cloudsql: which of the instance's IP addresses the connector uses")
    enable_iam_auth: bool = Field(False, description="alloydb/cloudsql: log in with IAM database authentication (no password)")
    embedded: bool | None = Field(None, description="use the embedded PostgreSQL (default when no url or host is given)")
    max_executions_per_minute: int | None = Field(None, ge=1, description="rate limit of SQL executions on this database")
    statement_timeout_s: float | None = Field(None, gt=0, description="overrides execution.statement_timeout_s")
    max_rows: int | None = Field(None, ge=1, description="overrides execution.max_rows")
    allow_destructive_setup: bool = Field(
        False, description="allow dropping and re-creating a database the harness did not create"
    )

    NOT_APPLIED: ClassVar[dict[str, str]] = {
        "secret_manager_path": "GCP Secret Manager is not read: write password: ${VAR}, or let libpq read PGPASSWORD / ~/.pgpass",
        "gcp_project_id": "the project is part of the instance URI (instance, or database_path)",
        "gcp_region": "the region is part of the instance URI (instance, or database_path)",
        "nl_config": "AlloyDB AI natural language is not used",
    }

    @model_validator(mode="before")
    @classmethod
    def _evalbench_keys(cls, data: object) -> object:
        """EvalBench's ``database_path`` of a PostgreSQL server is its host[:port] (databases/postgres.py::PGDB)."""
        if not isinstance(data, dict) or data.get("database_path") in (None, ""):
            return data
        if is_file_backend(str(_normalise_db_type(data.get("db_type") or normalise_dialect(str(data.get("dialect") or "postgres"))))):
            return data  # a folder or a file, read by the backend
        if data.get("host") is not None or data.get("url") is not None:
            raise ValueError("database_path (EvalBench's host:port) cannot be combined with host or url: keep one")
        data = dict(data)
        path = str(data["database_path"]).strip()
        if _normalise_db_type(data.get("db_type") or "postgres") in CONNECTOR_BACKENDS and is_instance_name(path):
            data.setdefault("instance", path)  # an instance the connector reaches (databases/alloydb.py::AlloyDB)
            return data
        data.update(database_path(path, str(data.get("db_type") or "postgres")))
        return data

    @model_validator(mode="after")
    def _check(self) -> DatabaseConfig:
        if self.embedded and (self.url is not None or self.host is not None or self.instance is not None):
            raise ValueError("embedded: true cannot be combined with url, host or instance")
        if self.instance is not None and self.backend not in CONNECTOR_BACKENDS:
            raise ValueError(f"instance is reached through Google's connector: set db_type: alloydb or cloudsql (not {self.backend})")
        return self

    @property
    def is_embedded(self) -> bool:
        return self.embedded if self.embedded is not None else (self.url is None and self.host is None and self.instance is None)

    @property
    def backend(self) -> str:
        """The name of the backend that serves this database."""
        return backend_name(self.db_type, self.dialect)

    @property
    def serves_every_database(self) -> bool:
        """Names a server (or a folder of database files) holding every database of its dialect,
        as an EvalBench db config does (databases/__init__.py::get_database)."""
        return not self.is_embedded or (self.database_path is not None and is_file_backend(self.backend))


# --------------------------------------------------------------------------- run


def database_for(configs: Sequence[DatabaseConfig], dialect: str, database: str) -> DatabaseConfig:
    """The configured database, or the embedded default for a database with no config."""
    for db in configs:
        if db.database_name == database and db.dialect == dialect:
            return db.model_copy(update={"database_name": database + db.db_name_suffix}) if db.db_name_suffix else db
    for db in configs:
        # EvalBench's db config names a server that serves every database of its dialect
        # (databases/__init__.py::get_database replaces database_name by the item's database)
        if db.dialect == dialect and db.serves_every_database:
            return db.model_copy(update={"database_name": database + db.db_name_suffix})
    # a database with no config: the dialect's own backend, embedded (a file for sqlite...)
    return DatabaseConfig(database_name=database, dialect=dialect)
