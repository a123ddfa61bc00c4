"""Provisioning and sandboxed execution against an external PostgreSQL server.

Runs only when ``EVALBENCH_TEST_PG_URL`` names a server whose user may create databases, e.g.
``EVALBENCH_TEST_PG_URL=postgresql://postgres@127.0.0.1:5432/test``. The test database gets a
unique name and is dropped at the end.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from evalbench.backends.base import SandboxLimits
from evalbench.backends.postgres.backend import open_sandbox
from evalbench.backends.postgres.clones import template_name
from evalbench.backends.postgres.meta import META_DATABASE
from evalbench.backends.postgres.provision import find_setup, provision
from evalbench.backends.postgres.target import GOLDEN_ROLE, SANDBOX_ROLE, libpq_conninfo, resolve_target
from evalbench.config import DatabaseConfig

pytestmark = pytest.mark.external_pg

SETUP_SQL = "CREATE TABLE pets (id serial PRIMARY KEY, name text NOT NULL, info jsonb);\n"
PETS_CSV = "1,'rex',\"'{\"\"legs\"\": 4}'\"\n2,'tweety',NULL\n"


def test_provision_and_sandbox_on_external_server(external_pg_url, tmp_path):
    name = f"eb_ext_{uuid.uuid4().hex[:12]}"
    (tmp_path / name / "postgres").mkdir(parents=True)
    (tmp_path / name / "data").mkdir()
    (tmp_path / name / "postgres" / "setup.sql").write_text(SETUP_SQL, encoding="utf-8")
    (tmp_path / name / "data" / "pets.csv").write_text(PETS_CSV, encoding="utf-8")

    config = DatabaseConfig(database_name=name, url=external_pg_url)
    assert not config.is_embedded
    target = resolve_target(config, None)
    assert target.embedded is False
    assert target.name == name
    assert target.admin.database  # the maintenance database of the URL (or postgres)
    setup = find_setup(tmp_path, name, "postgres")

    try:
        report = provision(target, setup)
        assert report.action == "created"
        assert report.rows_loaded == 2 and report.tables_loaded == 1
        assert report.sandbox_user in (SANDBOX_ROLE, target.admin.username or "postgres")
        if report.sandbox_user == SANDBOX_ROLE:
            assert report.warning is None
        else:
            assert report.warning  # says why agent SQL does not run as the sandbox role

        assert provision(target, find_setup(tmp_path, name, "postgres")).action == "reused"

        box = open_sandbox(target, report, SandboxLimits(pool_size=2, statement_timeout_s=5, max_rows=100))
        try:
            selected = box.execute("SELECT id, name, info->>'legs' AS legs FROM pets ORDER BY id")
            assert selected.ok, selected.error
            assert selected.columns == ["id", "name", "legs"]
            assert selected.rows == [(1, "rex", "4"), (2, "tweety", None)]
            assert box.execute("SELECT current_user").rows == [(report.sandbox_user,)]
            assert box.execute("SELECT current_user", actor="golden").rows == [(GOLDEN_ROLE,)]
            # what agent SQL reads as may create nothing; what it writes as works in rolled-back transactions
            assert "permission denied for schema public" in box.execute("EXPLAIN ANALYZE CREATE TABLE x AS SELECT 1").error
            assert box.execute("INSERT INTO pets (name) VALUES ('new') RETURNING id", mode="write").rows == [(3,)]
            assert box.execute("INSERT INTO pets (name) VALUES ('new') RETURNING id", mode="write").rows == [(3,)]

            forbidden = box.execute("UPDATE pets SET name = 'hacked'")
            assert forbidden.error_kind == "forbidden"
            assert not forbidden.ok
        finally:
            box.close()

        with psycopg.connect(libpq_conninfo(target.url()), autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("SELECT id, name FROM pets ORDER BY id")
            assert cur.fetchall() == [(1, "rex"), (2, "tweety")]
    finally:
        with psycopg.connect(libpq_conninfo(target.admin), autocommit=True) as conn, conn.cursor() as cur:
            for database in (name, template_name(name)):
                cur.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
            cur.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,))
            assert cur.fetchone() == (0,)
        with psycopg.connect(libpq_conninfo(target.url(META_DATABASE)), autocommit=True) as conn:
            conn.execute("DELETE FROM provisioned WHERE database = %s", (name,))
