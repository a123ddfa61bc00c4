"""Throwaway copies of a provisioned database, for BIRD-Interact test cases.

BIRD-Interact's harness commits every statement (``perform_query_on_postgresql_databases``) and
resets the database afterwards; its test cases rely on that — each statement has its own
transaction clock (``NOW()``), and the golden and predicted SQL never share a transaction. To run
them the same way without anything persisting, each phase's test cases run on a fresh copy of the
database (``CREATE DATABASE ... TEMPLATE``), dropped afterwards.

A copy is made from a **template** that provisioning leaves beside the database (nobody connects
to it: PostgreSQL copies only a database without other sessions), refreshed whenever the setup
changes. Copying a database of a few MB takes some tens of milliseconds.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy.engine import make_url

from evalbench.backends.postgres.roles import reset_role
from evalbench.backends.postgres.target import SANDBOX_WRITE_ROLE

log = logging.getLogger(__name__)

_counter = itertools.count(1)
_lock = threading.Lock()


def template_name(database: str) -> str:
    """The template's name: recognisable, unique per database, within PostgreSQL's 63 bytes."""
    digest = hashlib.sha256(database.encode()).hexdigest()[:8]
    return f"{database[:40]}__evalbench_tpl_{digest}"


def make_template(admin: psycopg.Connection, database: str, mark: str) -> str:
    """(Re)create the template of ``database`` (no other session may be connected to it) and
    close it to connections; ``mark`` is kept in its comment. Returns its name."""
    name = template_name(database)
    ident = sql.Identifier(name)
    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
    admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(ident, sql.Identifier(database)))
    admin.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(ident))
    admin.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(ident, sql.Literal(mark)))
    return name


def template_mark(admin: psycopg.Connection, database: str) -> str | None:
    """The comment of ``database``'s template (None when there is no template)."""
    row = admin.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
                        (template_name(database),)).fetchone()
    return None if row is None else (row[0] or "")


class CloneFactory:
    """Makes and drops copies of one database's template; a copy is used by the sandbox-write role."""

    def __init__(self, admin_conninfo: str, template: str, sandbox_conninfo: str, sandbox_user: str) -> None:
        self.admin_conninfo = admin_conninfo
        self.template = template
        self.sandbox_conninfo = sandbox_conninfo
        self.sandbox_user = sandbox_user

    @contextmanager
    def clone(self) -> Iterator[str]:
        """A fresh copy of the database, as a conninfo of the sandbox-write role; dropped on exit."""
        with _lock:
            name = f"{self.template[:45]}_{os.getpid()}_{next(_counter)}"
        ident = sql.Identifier(name)
        with psycopg.connect(self.admin_conninfo, autocommit=True, connect_timeout=15) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(ident, sql.Identifier(self.template)))
            admin.execute(sql.SQL("GRANT CONNECT, TEMPORARY ON DATABASE {} TO {}").format(ident, sql.Identifier(self.sandbox_user)))
        try:
            yield make_url(self.sandbox_conninfo).set(database=name).render_as_string(hide_password=False)
        finally:
            try:
                with psycopg.connect(self.admin_conninfo, autocommit=True, connect_timeout=15) as admin:
                    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
                    if self.sandbox_user == SANDBOX_WRITE_ROLE:  # every statement was committed: undo what outlives the copy
                        password = conninfo_to_dict(self.sandbox_conninfo).get("password")
                        reset_role(admin, SANDBOX_WRITE_ROLE, None if password is None else str(password))
            except psycopg.Error as exc:  # left behind, not lost: named after its template and process
                log.warning("could not drop the test-case database %s or reset the sandbox role: %s", name, exc)
