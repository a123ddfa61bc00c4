"""Provisioning an EvalBench-style setup directory into the (private) embedded PostgreSQL."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from evalbench.backends.postgres.provision import PROVISIONING_VERSION, find_setup, provision
from evalbench.backends.postgres.target import (
    GOLDEN_ROLE,
    OWNER_ROLE,
    SANDBOX_ROLE,
    SANDBOX_WRITE_ROLE,
    DatabaseTarget,
    libpq_conninfo,
    resolve_target,
)
from evalbench.config import DatabaseConfig
from evalbench.core.errors import ProvisioningError, SandboxError
from tests.conftest import shared_dataset

SETUP_SQL = """\
-- items: the one table of the tiny test database (café ✓)
CREATE TABLE items (
  id serial PRIMARY KEY,
  name text NOT NULL,
  price numeric(8,2),
  meta jsonb,
  created date
);
CREATE TABLE empty_things (id serial PRIMARY KEY, label text);
"""

ITEMS_CSV = """\
1,'apple',1.50,"'{""a"": 1}'",'2024-01-02'
2,'pear',NULL,NULL,NULL
5,"'it''s, quoted'",3,"'{""tags"": [""x"", ""y""]}'",'2024-03-04'
"""

ITEMS_ROWS = [
    (1, "apple", Decimal("1.50"), {"a": 1}, dt.date(2024, 1, 2)),
    (2, "pear", None, None, None),
    (5, "it's, quoted", Decimal("3.00"), {"tags": ["x", "y"]}, dt.date(2024, 3, 4)),
]


def unique_name() -> str:
    return f"eb_test_{uuid.uuid4().hex[:12]}"


def write_setup(
    root: Path,
    database: str,
    *,
    pre: str | None = "DROP TABLE IF EXISTS items;\n",
    setup: str | None = SETUP_SQL,
    post: str | None = "CREATE INDEX items_name_idx ON items (name);\n",
    data: dict[str, str] | None = None,
    dialect_dir: str = "postgres",
) -> Path:
    """``<root>/<database>/<dialect_dir>/{pre_setup,setup,post_setup}.sql`` and ``data/<table>.csv``."""
    base = root / database
    (base / dialect_dir).mkdir(parents=True, exist_ok=True)
    for name, text in (("pre_setup", pre), ("setup", setup), ("post_setup", post)):
        if text is not None:
            (base / dialect_dir / f"{name}.sql").write_text(text, encoding="utf-8")
    if data is None:
        data = {"items": ITEMS_CSV}
    if data:
        (base / "data").mkdir(exist_ok=True)
        for table, text in data.items():
            (base / "data" / f"{table}.csv").write_text(text, encoding="utf-8")
    return root


def make_target(pgdata: Path, name: str, **kwargs: Any) -> DatabaseTarget:
    return resolve_target(DatabaseConfig(database_name=name, **kwargs), pgdata)


def fetch(target: DatabaseTarget, query: str, params: tuple = (), *, database: str | None = None) -> list[tuple]:
    """Rows of ``query`` run as admin on a fresh connection (the target database by default)."""
    url = target.url(database=database) if database != "postgres" else target.admin
    with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(query, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description is not None else []


def admin_exec(target: DatabaseTarget, statement: sql.Composable | str, *, database: str | None = None) -> None:
    url = target.admin if database is None else target.url(database=database)
    with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(statement)  # type: ignore[arg-type]


def database_exists(target: DatabaseTarget) -> bool:
    return bool(fetch(target, "SELECT 1 FROM pg_database WHERE datname = %s", (target.name,), database="postgres"))


# --------------------------------------------------------------------------- first, second, changed


def test_first_provisioning_creates_and_loads_rows_exactly(pgdata, tmp_path):
    name = unique_name()
    root = write_setup(tmp_path, name)
    setup = find_setup(root, name, "postgres")
    assert setup is not None
    assert setup.pre_setup and setup.setup and setup.post_setup
    assert [p.name for p in setup.data] == ["items.csv"]
    target = make_target(pgdata, name)
    assert not database_exists(target)

    report = provision(target, setup)

    assert report.action == "created"
    assert report.database == name
    assert report.checksum == setup.checksum(PROVISIONING_VERSION)
    assert report.tables_loaded == 1
    assert report.rows_loaded == 3
    assert report.sandbox_user == SANDBOX_ROLE
    assert report.warning is None
    assert database_exists(target)
    assert fetch(target, "SELECT id, name, price, meta, created FROM items ORDER BY id") == ITEMS_ROWS
    # NULL is a real NULL (not the string 'NULL'), JSON is jsonb, post_setup ran.
    assert fetch(target, "SELECT count(*) FROM items WHERE price IS NULL AND meta IS NULL AND created IS NULL") == [(1,)]
    assert fetch(target, "SELECT meta->'tags'->>1 FROM items WHERE id = 5") == [("y",)]
    assert fetch(target, "SELECT pg_typeof(meta)::text FROM items WHERE id = 1") == [("jsonb",)]
    assert fetch(target, "SELECT indexname FROM pg_indexes WHERE indexname = 'items_name_idx'") == [("items_name_idx",)]
    assert fetch(target, "SELECT count(*) FROM empty_things") == [(0,)]
    comment = fetch(target, "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s", (name,))
    assert comment == [(f"evalbench:ok:{setup.checksum(PROVISIONING_VERSION)}",)]


def test_unchanged_setup_is_reused_without_reloading(pgdata, tmp_path):
    name = unique_name()
    root = write_setup(tmp_path, name)
    target = make_target(pgdata, name)
    first = provision(target, find_setup(root, name, "postgres"))
    assert first.action == "created"
    admin_exec(target, "INSERT INTO items (id, name) VALUES (100, 'marker')", database=name)

    second = provision(target, find_setup(root, name, "postgres"))

    assert second.action == "reused"
    assert second.checksum == first.checksum
    assert second.rows_loaded == 0 and second.tables_loaded == 0
    assert second.sandbox_user == SANDBOX_ROLE
    assert fetch(target, "SELECT id, name FROM items ORDER BY id") == [
        (1, "apple"), (2, "pear"), (5, "it's, quoted"), (100, "marker")
    ]


@pytest.mark.parametrize("change", ["csv", "setup_sql", "new_csv"])
def test_changed_setup_is_rebuilt(pgdata, tmp_path, change):
    name = unique_name()
    root = write_setup(tmp_path, name)
    target = make_target(pgdata, name)
    first = provision(target, find_setup(root, name, "postgres"))
    assert first.action == "created"
    admin_exec(target, "INSERT INTO items (id, name) VALUES (100, 'marker')", database=name)

    expected_ids = [1, 2, 5]
    if change == "csv":
        (root / name / "data" / "items.csv").write_text(ITEMS_CSV + "7,'plum',NULL,NULL,NULL\n", encoding="utf-8")
        expected_ids = [1, 2, 5, 7]
    elif change == "setup_sql":
        (root / name / "postgres" / "setup.sql").write_text(SETUP_SQL + "CREATE TABLE extra (x int);\n", encoding="utf-8")
    else:
        (root / name / "data" / "empty_things.csv").write_text("3,'three'\n", encoding="utf-8")
    setup = find_setup(root, name, "postgres")
    assert setup is not None and setup.checksum(PROVISIONING_VERSION) != first.checksum

    second = provision(target, setup)

    assert second.action == "rebuilt"
    assert second.checksum == setup.checksum(PROVISIONING_VERSION)
    assert fetch(target, "SELECT id FROM items ORDER BY id") == [(i,) for i in expected_ids]  # marker gone
    if change == "setup_sql":
        assert fetch(target, "SELECT count(*) FROM extra") == [(0,)]
    if change == "new_csv":
        assert second.tables_loaded == 2 and second.rows_loaded == 4
        assert fetch(target, "SELECT id, label FROM empty_things") == [(3, "three")]
    third = provision(target, find_setup(root, name, "postgres"))
    assert third.action == "reused"


# --------------------------------------------------------------------------- foreign databases


def test_database_not_created_by_evalbench_is_refused(pgdata, tmp_path):
    name = unique_name()
    root = write_setup(tmp_path, name)
    target = make_target(pgdata, name)
    admin_exec(target, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    admin_exec(target, "CREATE TABLE precious (x int); INSERT INTO precious VALUES (42)", database=name)

    with pytest.raises(ProvisioningError) as info:
        provision(target, find_setup(root, name, "postgres"))

    message = str(info.value)
    assert name in message
    assert "not created by evalbench" in message
    assert "allow_destructive_setup" in message
    assert fetch(target, "SELECT x FROM precious") == [(42,)]  # untouched

    destructive = make_target(pgdata, name, allow_destructive_setup=True)
    report = provision(destructive, find_setup(root, name, "postgres"))
    assert report.action == "rebuilt"
    assert fetch(target, "SELECT count(*) FROM pg_tables WHERE tablename = 'precious'") == [(0,)]
    assert fetch(target, "SELECT count(*) FROM items") == [(3,)]


def test_database_with_a_foreign_comment_is_refused(pgdata, tmp_path):
    name = unique_name()
    root = write_setup(tmp_path, name)
    target = make_target(pgdata, name)
    admin_exec(target, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    admin_exec(target, sql.SQL("COMMENT ON DATABASE {} IS 'production, do not touch'").format(sql.Identifier(name)))
    with pytest.raises(ProvisioningError, match="not created by evalbench"):
        provision(target, find_setup(root, name, "postgres"))
    assert database_exists(target)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("bad_csv", "line", "fragment"),
    [
        # wrong type on line 3 (a batch fails, then the row is found one by one)
        ("1,'a',1,NULL,NULL\n2,'b',2,NULL,NULL\n3,'c','not a number',NULL,NULL\n4,'d',4,NULL,NULL\n", 3, "numeric"),
        # too many cells on line 2
        ("1,'a',1,NULL,NULL\n2,'b',2,NULL,NULL,99\n", 2, "more expressions"),
        # an empty cell on line 2
        ("1,'a',1,NULL,NULL\n2,'b',,NULL,NULL\n", 2, "empty cell"),
        # duplicate primary key on line 4 (after a blank line 3)
        ("1,'a',1,NULL,NULL\n2,'b',2,NULL,NULL\n\n1,'again',3,NULL,NULL\n", 4, "duplicate key"),
        # invalid JSON on line 1
        ("1,'a',1,\"'{not json}'\",NULL\n", 1, "json"),
    ],
)
def test_bad_csv_row_names_file_and_line(pgdata, tmp_path, bad_csv, line, fragment):
    name = unique_name()
    root = write_setup(tmp_path, name, data={"items": bad_csv})
    target = make_target(pgdata, name)
    csv_path = root / name / "data" / "items.csv"

    with pytest.raises(ProvisioningError) as info:
        provision(target, find_setup(root, name, "postgres"))

    message = str(info.value)
    assert message.startswith(f"{csv_path}:{line}: "), message
    assert fragment.lower() in message.lower()

    # The half-made database is ours: fixing the CSV rebuilds it.
    csv_path.write_text(ITEMS_CSV, encoding="utf-8")
    report = provision(target, find_setup(root, name, "postgres"))
    assert report.action == "rebuilt"
    assert fetch(target, "SELECT id FROM items ORDER BY id") == [(1,), (2,), (5,)]


def test_rows_with_mixed_literal_types_in_one_column_load(pgdata, tmp_path):
    """A bare number and a quoted string in one text column: INSERT coerces each VALUES cell to
    its target column, so batching rows must not make the file fail."""
    name = unique_name()
    setup_sql = "CREATE TABLE phones (id int PRIMARY KEY, phone text);\n"
    csv_text = "1,5551234\n2,'555-1234'\n"
    root = write_setup(tmp_path, name, pre=None, setup=setup_sql, post=None, data={"phones": csv_text})
    target = make_target(pgdata, name)

    report = provision(target, find_setup(root, name, "postgres"))

    assert report.rows_loaded == 2
    assert fetch(target, "SELECT id, phone FROM phones ORDER BY id") == [(1, "5551234"), (2, "555-1234")]


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("-- café ✓ line 1\nCREATE TABLE a (id int);\n\nCREAT TABLE b (id int);\n", 4, "syntax error"),
        ("CREATE TABLE a (id int);\nCREATE TABLE b (id int);\n-- ✓\n\nSELECT * FROM nowhere;\n", 5, "nowhere"),
    ],
)
def test_error_in_setup_sql_names_file_and_line(pgdata, tmp_path, text, line, fragment):
    name = unique_name()
    root = write_setup(tmp_path, name, pre=None, setup=text, post=None, data={})
    target = make_target(pgdata, name)
    setup_path = root / name / "postgres" / "setup.sql"

    with pytest.raises(ProvisioningError) as info:
        provision(target, find_setup(root, name, "postgres"))

    message = str(info.value)
    assert message.startswith(f"{setup_path}:{line}: "), message
    assert fragment in message


def test_error_in_post_setup_sql_names_that_file(pgdata, tmp_path):
    name = unique_name()
    root = write_setup(tmp_path, name, post="CREATE INDEX bad_idx ON items (no_such_column);\n")
    target = make_target(pgdata, name)
    with pytest.raises(ProvisioningError) as info:
        provision(target, find_setup(root, name, "postgres"))
    message = str(info.value)
    assert str(root / name / "postgres" / "post_setup.sql") in message
    assert "no_such_column" in message


# --------------------------------------------------------------------------- sequences and sandbox role


def test_serial_sequences_are_advanced_past_loaded_ids(pgdata, tmp_path):
    name = unique_name()
    root = write_setup(tmp_path, name)
    target = make_target(pgdata, name)
    provision(target, find_setup(root, name, "postgres"))

    with psycopg.connect(libpq_conninfo(target.url()), autocommit=True) as conn:
        with conn.transaction(force_rollback=True), conn.cursor() as cur:
            cur.execute("INSERT INTO items (name) VALUES ('new') RETURNING id")
            assert cur.fetchone() == (6,)  # max(id) = 5
            cur.execute("INSERT INTO empty_things (label) VALUES ('first') RETURNING id")
            assert cur.fetchone() == (1,)  # no rows loaded: the sequence starts at 1
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM items")
            assert cur.fetchone() == (3,)


def test_sandbox_user_can_log_in_and_is_not_superuser(pgdata, tmp_path):
    name = unique_name()
    root = write_setup(tmp_path, name)
    target = make_target(pgdata, name)
    report = provision(target, find_setup(root, name, "postgres"))
    assert report.sandbox_user == "evalbench_sandbox" == SANDBOX_ROLE

    with psycopg.connect(libpq_conninfo(target.url(user=report.sandbox_user))) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT current_user, rolsuper, rolcreatedb, rolcreaterole, rolcanlogin "
            "FROM pg_roles WHERE rolname = current_user"
        )
        assert cur.fetchone() == ("evalbench_sandbox", False, False, False, True)
        cur.execute("SELECT count(*) FROM items")  # may read the loaded tables
        assert cur.fetchone() == (3,)
        cur.execute("SELECT tableowner FROM pg_tables WHERE tablename = 'items'")
        assert cur.fetchone() == (OWNER_ROLE,)  # golden and sandbox-write SQL change it through the owner role
        # the role agent SQL reads as may create nothing, anywhere in the database
        cur.execute("SELECT has_database_privilege(current_database(), 'CREATE'), "
                    "has_database_privilege(current_database(), 'TEMPORARY'), "
                    "bool_or(has_schema_privilege(oid, 'CREATE')) FROM pg_namespace")
        assert cur.fetchone() == (False, False, False)
        conn.rollback()
    roles = {r.user for r in (report.logins.reader, report.logins.writer, report.logins.golden)}
    assert roles == {SANDBOX_ROLE, SANDBOX_WRITE_ROLE, GOLDEN_ROLE}


# --------------------------------------------------------------------------- find_setup, use as is


def test_find_setup_without_folder_returns_none(tmp_path):
    write_setup(tmp_path, "other_db")
    assert find_setup(tmp_path, "no_such_db", "postgres") is None
    assert find_setup(None, "other_db", "postgres") is None
    assert find_setup(tmp_path, "other_db", "postgres") is not None


def test_find_setup_accepts_postgresql_folder_and_rejects_empty_folder(tmp_path):
    write_setup(tmp_path, "pg_named", dialect_dir="postgresql", data={})
    files = find_setup(tmp_path, "pg_named", "postgres")
    assert files is not None
    assert files.setup == tmp_path / "pg_named" / "postgresql" / "setup.sql"
    assert files.data == ()
    (tmp_path / "empty_db").mkdir()
    with pytest.raises(ProvisioningError, match="no setup SQL"):
        find_setup(tmp_path, "empty_db", "postgres")


def test_using_a_missing_database_as_is_is_refused(pgdata):
    name = unique_name()
    target = make_target(pgdata, name)
    with pytest.raises(ProvisioningError) as info:
        provision(target, None)
    assert name in str(info.value)
    assert "does not exist" in str(info.value)
    assert not database_exists(target)


def test_using_an_existing_database_as_is(pgdata):
    name = unique_name()
    target = make_target(pgdata, name)
    admin_exec(target, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    admin_exec(target, sql.SQL("CREATE TABLE t (x int); INSERT INTO t VALUES (1)"), database=name)
    with pytest.raises(SandboxError) as info:  # PUBLIC may create temporary tables there (PostgreSQL's default)
        provision(target, None)
    assert f'TEMPORARY ON DATABASE {name}' in str(info.value) and "REVOKE" in str(info.value), info.value
    admin_exec(target, sql.SQL("REVOKE TEMPORARY ON DATABASE {} FROM PUBLIC").format(sql.Identifier(name)))
    report = provision(target, None)
    assert report.action == "external"
    assert report.checksum is None
    assert report.sandbox_user == SANDBOX_ROLE  # never the (superuser) admin connection
    assert report.warning is not None and "cancel its own other connections" in report.warning
    with psycopg.connect(libpq_conninfo(target.url(user=report.sandbox_user))) as conn:
        assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0] is False
        assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]  # it may read
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM t")  # and only read


# --------------------------------------------------------------------------- a real dataset


@pytest.mark.shared_data
def test_db_blog_setup_provisions(pgdata):
    setup_dir = shared_dataset("db_blog") / "setup"
    setup = find_setup(setup_dir, "db_blog", "postgres")
    assert setup is not None
    target = make_target(pgdata, unique_name())  # a private name: the files are db_blog's

    report = provision(target, setup)

    assert report.action == "created"
    assert report.tables_loaded == len(setup.data) >= 15
    assert report.rows_loaded > 100
    tables = fetch(
        target,
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'",
    )
    assert tables[0][0] >= 20
    assert fetch(target, "SELECT username FROM tbl_users WHERE user_id = 1") == [("john.doe",)]
    assert provision(target, setup).action == "reused"
