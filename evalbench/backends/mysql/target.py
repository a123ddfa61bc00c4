"""Where a MySQL / MariaDB database lives and how to connect to it, as admin (provisioning) and
as the sandbox users (golden and agent SQL)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from evalbench.core.errors import ProvisioningError

if TYPE_CHECKING:
    import pymysql.connections
    import pymysql.cursors

    from evalbench.config import DatabaseConfig

# a pymysql connection as :meth:`MySQLTarget.connect` opens it (its cursors buffered, unless asked)
MySQLConnection: TypeAlias = "pymysql.connections.Connection[pymysql.cursors.Cursor]"

DEFAULT_PORT = 3306
_SCHEMES = ("mysql", "mariadb", "mysql+pymysql", "mariadb+pymysql", "mysql+mysqldb", "mariadb+mariadbconnector")
# the server's own schemas (and ours): never dropped, never provisioned into
SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys", "evalbench_meta"})


@dataclass(frozen=True)
class MySQLTarget:
    """Connection facts for one database: the server, the admin login, the database name."""

    name: str  # the database (schema) name on the server
    host: str
    port: int
    user: str
    password: str | None

    def connect(self, user: str | None = None, password: str | None = None, database: str | None = None,
                timeout_s: float = 10, **options: Any) -> MySQLConnection:
        """A pymysql connection (as admin unless ``user`` is given); autocommit, utf8mb4."""
        import pymysql

        return pymysql.connect(host=self.host, port=self.port, user=user or self.user,
                               password=(password if user else self.password) or "", database=database,
                               charset="utf8mb4", autocommit=True, connect_timeout=max(1, round(timeout_s)),
                               local_infile=False, **options)

    def describe(self) -> str:
        """A log-safe description (no password)."""
        return f"mysql/{self.name} on {self.user}@{self.host}:{self.port}"


def resolve_target(config: DatabaseConfig) -> MySQLTarget:
    """The server and admin login of ``config``: ``url: mysql://user:pass@host:port`` or
    host/port/user_name/password (EvalBench's ``database_path`` is read as host[:port])."""
    user, password = config.user_name, config.password.get_secret_value() if config.password else None
    if config.url is not None:
        from sqlalchemy.engine import make_url

        try:
            url = make_url(config.url.get_secret_value())
        except Exception:  # noqa: BLE001 - sqlalchemy raises ArgumentError, ValueError...
            raise ProvisioningError("url of a mysql database must look like mysql://user:password@host:port") from None
        if url.drivername not in _SCHEMES:
            raise ProvisioningError(f"url of a mysql database must start with mysql:// or mariadb://, got {url.drivername}://")
        host, port = url.host or "127.0.0.1", url.port or DEFAULT_PORT
        user, password = url.username or user, url.password if url.password is not None else password
    elif config.host is not None:
        host, port = config.host, config.port or DEFAULT_PORT
    else:
        raise ProvisioningError(f"database {config.database_name!r} (mysql) names no server: set url: mysql://user@host:port, "
                                "or database_path: host:port (or host and port) with user_name and password")
    if config.database_name.lower() in SYSTEM_SCHEMAS:
        raise ProvisioningError(f"database {config.database_name!r} is a system schema of the server; evaluate another database")
    return MySQLTarget(config.database_name, host, int(port), user or "root", password)


def quote(name: str) -> str:
    """A MySQL identifier, backquoted."""
    return "`" + name.replace("`", "``") + "`"
