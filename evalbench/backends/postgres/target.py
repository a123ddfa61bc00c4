"""Where a database lives and how to connect to it, as admin (provisioning) and as sandbox
(golden and agent SQL)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import URL, make_url

from evalbench.backends.postgres.embedded import embedded_url
from evalbench.config import DatabaseConfig

# The server's roles SQL runs as (roles are cluster-wide; see evalbench.backends.postgres.roles).
SANDBOX_ROLE = "evalbench_sandbox"  # agent SQL that reads: questions, tool calls
SANDBOX_WRITE_ROLE = "evalbench_sandbox_write"  # agent SQL that writes, always undone: management tasks, test cases
GOLDEN_ROLE = "evalbench_golden"  # golden (dataset) SQL
OWNER_ROLE = "evalbench_owner"  # owns what setup made (NOLOGIN); the golden and sandbox-write roles are its members


@dataclass(frozen=True)
class DatabaseTarget:
    """Connection facts for one database. ``admin`` may create databases; the sandbox role is
    created by provisioning where the admin may create roles."""

    name: str  # the database name on the server
    dialect: str
    admin: URL  # points at the maintenance database
    embedded: bool
    config: DatabaseConfig
    # Google's AlloyDB / Cloud SQL connector: (database, user, password, **psycopg kwargs) -> a
    # connection through the instance's TLS tunnel (evalbench.backends.postgres.connectors)
    connector: Callable[..., psycopg.Connection] | None = None

    def connect(self, database: str | None = None, user: str | None = None, password: str | None = None,
                **kwargs: Any) -> psycopg.Connection:
        """A connection to ``database`` (default: this target's) as ``user`` (default: the admin)."""
        if self.connector is not None:
            return self.connector(database or self.name, user or self.admin.username,
                                  password if user is not None else self.admin.password, **kwargs)
        return psycopg.connect(libpq_conninfo(self.url(database, user, password)), **kwargs)

    def connect_admin(self, **kwargs: Any) -> psycopg.Connection:
        """A connection to the maintenance database as the admin user."""
        return self.connect(self.admin.database or "postgres", **kwargs)

    def url(self, database: str | None = None, user: str | None = None, password: str | None = None) -> URL:
        url = self.admin.set(database=database or self.name)
        if user is not None:
            url = url.set(username=user, password=password)
        return url

    def describe(self) -> str:
        """A log-safe description (no password)."""
        where = "embedded PostgreSQL" if self.embedded else self.admin.render_as_string(hide_password=True)
        if self.connector is not None:
            where = f"{self.config.backend} instance {self.config.instance}"
        return f"{self.dialect}/{self.name} on {where}"


def resolve_target(config: DatabaseConfig, embedded_dir: Path | None) -> DatabaseTarget:
    if config.is_embedded:
        admin = make_url(embedded_url(embedded_dir, "postgres"))
    elif config.url is not None:
        admin = make_url(config.url.get_secret_value())
    else:
        admin = URL.create(
            "postgresql",
            username=config.user_name,
            password=config.password.get_secret_value() if config.password else None,
            host=config.host,
            port=config.port,
            database="postgres",
        )
    if config.user_name and config.url is not None and not admin.username:
        admin = admin.set(username=config.user_name)
    if config.password and config.url is not None and admin.password is None:
        admin = admin.set(password=config.password.get_secret_value())
    admin = admin.set(drivername="postgresql")
    if not admin.database:
        admin = admin.set(database="postgres")
    return DatabaseTarget(
        name=config.database_name, dialect=config.dialect, admin=admin, embedded=config.is_embedded, config=config
    )


def libpq_conninfo(url: URL) -> str:
    """A libpq connection string for psycopg (query arguments such as host=/socket/dir kept)."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def pg_message(exc: BaseException) -> str:
    """The server's one-line message of a psycopg error."""
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    if primary:
        return str(primary)
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
