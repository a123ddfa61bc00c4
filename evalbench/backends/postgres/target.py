"""Where a database lives and how to connect to it, as admin (provisioning) and as sandbox
(golden and agent SQL)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import URL, make_url

from evalbench.config import DatabaseConfig
from evalbench.backends.postgres.embedded import embedded_url

SANDBOX_ROLE = "evalbench_sandbox"


@dataclass(frozen=True)
class DatabaseTarget:
    """Connection facts for one database. ``admin`` may create databases; the sandbox role is
    created by provisioning where the admin may create roles."""

    name: str  # the database name on the server
    dialect: str
    admin: URL  # points at the maintenance database
    embedded: bool
    config: DatabaseConfig

    def url(self, database: str | None = None, user: str | None = None, password: str | None = None) -> URL:
        url = self.admin.set(database=database or self.name)
        if user is not None:
            url = url.set(username=user, password=password)
        return url

    def describe(self) -> str:
        """A log-safe description (no password)."""
        where = "embedded PostgreSQL" if self.embedded else self.admin.render_as_string(hide_password=True)
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
