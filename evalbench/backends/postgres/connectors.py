"""AlloyDB and Cloud SQL for PostgreSQL through Google's Python connectors.

Both are PostgreSQL: everything is the Postgres backend's (provisioning, the sandbox role, the
sandbox) except how a connection is opened. A db config with ``instance`` (or EvalBench's
``database_path`` naming one) connects through the connector — ``google-cloud-alloydb-connector``
(``pip install 'evalbench[alloydb]'``) or ``cloud-sql-python-connector`` (``evalbench[cloudsql]``)
— which opens a TLS tunnel to the instance (IAM-authorised, with ``enable_iam_auth`` also the
database login) and hands back a psycopg connection (its ``"psycopg"`` driver). Without
``instance`` the database is reached at ``host`` / ``database_path`` like any PostgreSQL server
(through an Auth Proxy, or AlloyDB Omni). EvalBench builds the same connection in
``databases/alloydb.py::AlloyDB`` (with the pg8000 driver).

Not covered: test cases (a child process connects with a libpq connection string, which the
tunnel does not offer) — Management items are judged by ``state_match`` there.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from sqlalchemy.engine import URL

from evalbench.backends.base import Provisioned, SandboxLimits
from evalbench.backends.postgres.backend import PostgresBackend, open_sandbox
from evalbench.backends.postgres.sandbox import Sandbox
from evalbench.backends.postgres.target import DatabaseTarget, resolve_target
from evalbench.backends.setup import SetupFiles
from evalbench.core.errors import ConfigError

if TYPE_CHECKING:
    from evalbench.config import DatabaseConfig


class ConnectorBackend(PostgresBackend):
    """PostgreSQL on a Google Cloud instance, reached through its connector when given one."""

    connector_module = ""  # the connector's Python module (it exposes ``Connector``)
    extra = ""  # the pip extra that installs it

    def new_connector(self) -> Any:
        """A Connector of the installed package (one per database: closed with its sandbox)."""
        try:
            factory = importlib.import_module(self.connector_module).Connector
        except ImportError:
            raise ConfigError(f"db_type {self.name} with an instance needs {self.connector_module}: "
                              f"pip install 'evalbench[{self.extra}]'", key="database_configs.db_type") from None
        return factory()

    def target(self, config: DatabaseConfig, embedded_dir: Path | None) -> DatabaseTarget:
        if config.instance is None:
            return resolve_target(config, embedded_dir)
        connector = self.new_connector()
        instance = config.instance

        def connect(database: str, user: str | None, password: str | None, **kwargs: Any) -> psycopg.Connection:
            conn: psycopg.Connection = connector.connect(instance, "psycopg", user=user, password=password, db=database,
                                                         enable_iam_auth=config.enable_iam_auth, ip_type=config.ip_type, **kwargs)
            return conn

        password = config.password.get_secret_value() if config.password else None
        admin = URL.create("postgresql", username=config.user_name or "postgres", password=password, database="postgres")
        connect.close = connector.close  # type: ignore[attr-defined]  # when the database is done with
        return DatabaseTarget(name=config.database_name, dialect=config.dialect, admin=admin, embedded=False,
                              config=config, connector=connect)

    def provision(self, config: DatabaseConfig, setup: SetupFiles | None, embedded_dir: Path | None) -> Provisioned:
        target = self.target(config, embedded_dir)
        try:
            return self._provision(target, setup)
        except BaseException:
            close_connector(target)  # no sandbox will own it
            raise

    def probe(self, config: DatabaseConfig, setup: SetupFiles | None, embedded_dir: Path | None, timeout_s: float) -> str:
        with _closing(self.target(config, embedded_dir)) as target:
            return self._probe(target, setup, timeout_s)

    def open_sandbox(self, config: DatabaseConfig, provisioned: Provisioned, limits: SandboxLimits,
                     embedded_dir: Path | None) -> Sandbox:
        target, report = provisioned.handle
        sandbox = open_sandbox(target, report, limits)
        if target.connector is not None:
            sandbox.runs_test_cases = False
            sandbox.on_close = lambda: close_connector(target)
        return sandbox


@contextmanager
def _closing(target: DatabaseTarget) -> Iterator[DatabaseTarget]:
    try:
        yield target
    finally:
        close_connector(target)


def close_connector(target: DatabaseTarget) -> None:
    close = getattr(target.connector, "close", None)
    if close is not None:
        close()


class AlloyDBBackend(ConnectorBackend):
    name = "alloydb"
    connector_module = "google.cloud.alloydbconnector"
    extra = "alloydb"

    def setup_dialects(self) -> tuple[str, ...]:
        return ("alloydb", "postgres", "postgresql")


class CloudSQLBackend(ConnectorBackend):
    name = "cloudsql"
    connector_module = "google.cloud.sql.connector"
    extra = "cloudsql"

    def setup_dialects(self) -> tuple[str, ...]:
        return ("cloudsql", "postgres", "postgresql")
