"""Per-conversation logins (evalbench.backends.logins) against real servers and files: the login
reads the evaluation database, every write is refused, another database is out of reach, and
after revoke() (or its expiry) it cannot connect. PostgreSQL on EVALBENCH_TEST_PG_URL and the
embedded server, MySQL / MariaDB on EVALBENCH_TEST_MYSQL_URL (skipped when absent), SQLite and
DuckDB files."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import duckdb
import psycopg
import pytest
from psycopg import sql

from evalbench.backends import logins
from evalbench.backends.base import SandboxLimits
from evalbench.backends.logins import Lent, LentLogin, lend_login
from evalbench.backends.postgres.backend import open_sandbox
from evalbench.backends.postgres.clones import template_name
from evalbench.backends.postgres.lending import reader_group
from evalbench.backends.postgres.meta import META_DATABASE
from evalbench.backends.postgres.provision import find_setup, provision
from evalbench.backends.postgres.target import libpq_conninfo, resolve_target
from evalbench.config import DatabaseConfig
from evalbench.core.errors import LendingError

LIMITS = SandboxLimits(pool_size=1, statement_timeout_s=3, max_rows=100)
WRITES = ["INSERT INTO pets (name) VALUES ('x')", "UPDATE pets SET name = 'x'", "CREATE TABLE more (a int)",
          "CREATE TEMP TABLE scratch (a int)", "DROP TABLE pets"]


def _refused_after(check: Callable[[], object], within_s: float = 4.0) -> Exception:
    """Wait (a little) until ``check()`` raises; the exception."""
    end = time.monotonic() + within_s
    while True:
        try:
            check()
        except Exception as exc:  # noqa: BLE001 - any refusal
            return exc
        if time.monotonic() > end:
            raise AssertionError("still accepted")
        time.sleep(0.1)


# ------------------------------------------------------------------------------------ PostgreSQL


def _pg_provision(root: Path, url: str | None, pgdata: Path | None, name: str) -> Any:
    (root / name / "postgres").mkdir(parents=True)
    (root / name / "postgres" / "setup.sql").write_text(
        "CREATE TABLE pets (id serial PRIMARY KEY, name text NOT NULL);\nINSERT INTO pets (name) VALUES ('rex');\n")
    target = resolve_target(DatabaseConfig(database_name=name, url=url), pgdata)
    return target, provision(target, find_setup(root, name, "postgres"))


def _pg_drop(target: Any, names: list[str]) -> None:
    with psycopg.connect(libpq_conninfo(target.admin), autocommit=True) as conn:
        for name in names:
            for database in (name, template_name(name)):
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(reader_group(name))))
    with psycopg.connect(libpq_conninfo(target.url(META_DATABASE)), autocommit=True) as conn:
        conn.execute("DELETE FROM provisioned WHERE database = ANY(%s)", (names,))


@pytest.fixture(scope="module", params=["external", "embedded"])
def pg(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, str]]:
    """(target, sandbox, another provisioned database) on the external or the embedded server."""
    url = os.environ.get("EVALBENCH_TEST_PG_URL") if request.param == "external" else None
    if request.param == "external" and not url:
        pytest.skip("EVALBENCH_TEST_PG_URL is not set")
    pgdata = request.getfixturevalue("pgdata") if request.param == "embedded" else None
    root = tmp_path_factory.mktemp("pgsetup")
    names = [f"eb_lend_{uuid.uuid4().hex[:10]}" for _ in range(2)]
    target, report = _pg_provision(root, url, pgdata, names[0])
    try:
        _pg_provision(root, url, pgdata, names[1])
        box = open_sandbox(target, report, LIMITS)
        try:
            yield target, box, names[1]
        finally:
            box.close()
    finally:
        _pg_drop(target, names)


def _pg_connect(login: LentLogin, **kwargs: Any) -> psycopg.Connection:
    return psycopg.connect(login.url, autocommit=True, connect_timeout=5, **kwargs)


def test_pg_login_reads_its_database_and_can_write_nothing(pg) -> None:
    target, box, _ = pg
    login = lend_login(box, ttl_s=60, label="conv-1 / item 7")
    try:
        assert login.fields["user"].startswith("evalbench_lent_") and login.fields["database"] == target.name
        assert login.fields["password"] in login.url and "password" not in repr(login)
        assert time.time() + 55 < login.expires_at <= time.time() + 60
        f = login.fields
        with psycopg.connect(host=f["host"], port=f.get("port", "5432"), user=f["user"], password=f["password"],
                             dbname=f["database"], connect_timeout=5) as conn:  # the fields alone connect too
            assert conn.execute("SELECT current_user").fetchone() == (f["user"],)
        with _pg_connect(login) as conn:
            assert conn.execute("SELECT name FROM pets").fetchall() == [("rex",)]
            assert conn.execute("SHOW default_transaction_read_only").fetchone() == ("on",)
            assert conn.execute("SHOW statement_timeout").fetchone() == ("3s",)
            conn.execute("SET default_transaction_read_only = off")  # the setting is a default: privileges refuse
            for statement in WRITES:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement)
            for role in ("evalbench_sandbox_write", "evalbench_golden", "evalbench_owner", target.admin.username or "postgres"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
        with psycopg.connect(libpq_conninfo(target.admin), autocommit=True) as admin:
            limit, until, attrs = admin.execute(
                "SELECT rolconnlimit, rolvaliduntil IS NOT NULL, rolsuper OR rolcreatedb OR rolcreaterole OR rolbypassrls "
                "FROM pg_roles WHERE rolname = %s", (login.fields["user"],)).fetchone()
            assert (limit, until, attrs) == (3, True, False)
    finally:
        login.revoke()


def test_pg_lending_is_not_taken_for_an_outsiders_change_by_the_next_run(pg, tmp_path) -> None:
    """The reader group's grants change the database's privileges: its setup record follows, so
    the next provisioning reuses the database instead of refusing it as changed."""
    target, box, _ = pg
    lend_login(box, ttl_s=60, label="before the next run").revoke()
    (tmp_path / target.name / "postgres").mkdir(parents=True)
    (tmp_path / target.name / "postgres" / "setup.sql").write_text(
        "CREATE TABLE pets (id serial PRIMARY KEY, name text NOT NULL);\nINSERT INTO pets (name) VALUES ('rex');\n")
    assert provision(target, find_setup(tmp_path, target.name, "postgres")).action == "reused"


def test_pg_login_cannot_read_another_database(pg) -> None:
    target, box, other = pg
    table = f"eb_secret_{uuid.uuid4().hex[:8]}"
    login = lend_login(box, ttl_s=60, label="conv-2")
    maintenance = target.admin.database or "postgres"
    try:
        with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
            _pg_connect(login, dbname=other)
        # a database PUBLIC may connect to (not evalbench's): its tables stay unreadable
        with psycopg.connect(libpq_conninfo(target.admin), autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE TABLE {} (a int)").format(sql.Identifier(table)))
        try:
            with _pg_connect(login, dbname=maintenance) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(table)))
        finally:
            with psycopg.connect(libpq_conninfo(target.admin), autocommit=True) as admin:
                admin.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
    finally:
        login.revoke()


def test_pg_revoke_ends_the_login_and_its_sessions_and_may_be_repeated(pg) -> None:
    target, box, _ = pg
    login = lend_login(box, ttl_s=60, label="conv-3")
    conn = _pg_connect(login)
    started = time.monotonic()
    login.revoke()
    login.revoke()
    assert time.monotonic() - started < 10
    with pytest.raises(psycopg.OperationalError):
        conn.execute("SELECT 1")  # its session was terminated
    conn.close()
    with pytest.raises(psycopg.OperationalError):
        _pg_connect(login)
    with psycopg.connect(libpq_conninfo(target.admin), autocommit=True) as admin:
        assert admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (login.fields["user"],)).fetchone() is None


def test_pg_login_left_alone_expires(pg) -> None:
    _, box, _ = pg
    login = lend_login(box, ttl_s=1, label="conv-4")
    with _pg_connect(login) as conn:
        assert conn.execute("SELECT count(*) FROM pets").fetchone() == (1,)
    _refused_after(lambda: _pg_connect(login).close())


def test_pg_logins_a_dead_process_left_behind_are_dropped_by_the_next_lend(pg) -> None:
    target, box, _ = pg
    left = lend_login(box, ttl_s=60, label="conv-5")
    user = left.fields["user"]
    conn = _pg_connect(left)
    with psycopg.connect(libpq_conninfo(target.admin), autocommit=True) as admin:  # as if its process died long ago
        admin.execute(sql.SQL("ALTER ROLE {} VALID UNTIL {}").format(sql.Identifier(user), sql.Literal("2000-01-01")))
    fresh = lend_login(box, ttl_s=60, label="conv-6")
    try:
        with psycopg.connect(libpq_conninfo(target.admin), autocommit=True) as admin:
            assert admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (user,)).fetchone() is None
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
        conn.close()
        left.revoke()  # already gone: nothing to do, no error
    finally:
        fresh.revoke()


# ------------------------------------------------------------------------------------ MySQL / MariaDB

MYSQL_URL = os.environ.get("EVALBENCH_TEST_MYSQL_URL")


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    """A MySQL sandbox on a provisioned database, and another provisioned database's name."""
    if not MYSQL_URL:
        pytest.skip("EVALBENCH_TEST_MYSQL_URL is not set")
    from evalbench.backends import get_backend
    from evalbench.backends.mysql.provision import drop_database
    from evalbench.backends.mysql.target import resolve_target as mysql_target
    from evalbench.backends.setup import find_setup as find

    backend = get_backend("mysql")
    root = tmp_path_factory.mktemp("mysqlsetup")
    names = [f"evb_lend_{uuid.uuid4().hex[:10]}" for _ in range(2)]
    sandboxes = []
    try:
        for name in names:
            (root / name / "mysql").mkdir(parents=True)
            (root / name / "mysql" / "setup.sql").write_text(
                "CREATE TABLE pets (id INT PRIMARY KEY, name VARCHAR(20)) ENGINE=InnoDB;\nINSERT INTO pets VALUES (1, 'rex');\n")
            config = DatabaseConfig(database_name=name, db_type="mariadb", dialect="mysql", url=MYSQL_URL)
            provisioned = backend.provision(config, find(root, name, "mysql", backend.setup_dialects()), None)
            sandboxes.append(backend.open_sandbox(config, provisioned, LIMITS, None))
        yield sandboxes[0], names[1]
    finally:
        for box in sandboxes:
            box.close()
        admin = mysql_target(DatabaseConfig(database_name="x", dialect="mysql", url=MYSQL_URL)).connect()
        try:
            for name in names:
                drop_database(admin, name)
        finally:
            admin.close()


def _my_connect(login: LentLogin, database: str | None = None) -> Any:
    import pymysql

    f = login.fields
    return pymysql.connect(host=f["host"], port=int(f["port"]), user=f["user"], password=f["password"],
                           database=database or f["database"], connect_timeout=5, autocommit=True)


def _my(conn: Any, statement: str) -> list[Any]:
    with conn.cursor() as cursor:
        cursor.execute(statement)
        return list(cursor.fetchall())


def test_mysql_login_reads_its_database_and_can_write_nothing(shop) -> None:
    import pymysql

    box, other = shop
    login = lend_login(box, ttl_s=60, label="conv-1")
    try:
        assert login.url.startswith(f"mysql://{login.fields['user']}:") and login.url.endswith(f"/{login.fields['database']}")
        conn = _my_connect(login)
        try:
            assert _my(conn, "SELECT name FROM pets") == [("rex",)]
            for statement in [*WRITES, "CREATE TEMPORARY TABLE scratch (a INT)", "SELECT 1 INTO OUTFILE '/tmp/evb_lend_x'",
                              f"SELECT * FROM `{other}`.pets", "SET GLOBAL max_connections = 1"]:
                with pytest.raises(pymysql.err.MySQLError):
                    _my(conn, statement)
            assert _my(conn, "SELECT LOAD_FILE('/etc/hostname')") == [(None,)]  # no FILE privilege
            grants = " ".join(row[0] for row in _my(conn, "SHOW GRANTS"))
            assert "SELECT, SHOW VIEW ON" in grants and "FILE" not in grants and "TEMPORARY" not in grants
            extra = [_my_connect(login) for _ in range(2)]
            with pytest.raises(pymysql.err.OperationalError):  # MAX_USER_CONNECTIONS 3
                _my_connect(login)
            for each in extra:
                each.close()
        finally:
            conn.close()
        with pytest.raises(pymysql.err.OperationalError):
            _my_connect(login, other)
    finally:
        login.revoke()


def test_mysql_revoke_ends_the_login_and_may_be_repeated(shop) -> None:
    import pymysql

    box, _ = shop
    login = lend_login(box, ttl_s=60, label="conv-2")
    conn = _my_connect(login)
    login.revoke()
    login.revoke()
    with pytest.raises(pymysql.err.MySQLError):
        _my(conn, "SELECT 1")  # its connection was killed
    with pytest.raises(pymysql.err.OperationalError):
        _my_connect(login)
    assert box.execute("SELECT name FROM pets").rows == [("rex",)]  # the sandbox is unaffected


def test_mysql_login_left_alone_expires(shop) -> None:
    box, _ = shop
    login = lend_login(box, ttl_s=1, label="conv-3")
    _my_connect(login).close()
    _refused_after(lambda: _my_connect(login).close())


# ------------------------------------------------------------------------------------ SQLite and DuckDB


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sqlite_box(tmp_path: Path) -> Any:
    from evalbench.backends.sqlite.sandbox import SQLiteSandbox

    path = tmp_path / "pets.db"
    with sqlite3.connect(path) as conn:
        conn.executescript("CREATE TABLE pets (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO pets VALUES (1, 'rex');")
    conn.close()
    return SQLiteSandbox(path, LIMITS)


def _duckdb_box(tmp_path: Path) -> Any:
    from evalbench.backends.duckdb.sandbox import DuckDBSandbox

    path = tmp_path / "pets.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute("CREATE TABLE pets (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO pets VALUES (1, 'rex');")
    conn.close()
    return DuckDBSandbox(path, LIMITS)


def _sqlite_open(login: LentLogin) -> Any:
    return sqlite3.connect(login.url, uri=True)


def _duckdb_open(login: LentLogin) -> Any:
    parts = urlsplit(login.url)
    assert parts.scheme == "duckdb" and parse_qs(parts.query) == {"access_mode": ["read_only"]}
    return duckdb.connect(parts.path[1:], read_only=True)


FILES = {"sqlite": (_sqlite_box, _sqlite_open, sqlite3.Error), "duckdb": (_duckdb_box, _duckdb_open, duckdb.Error)}


@pytest.mark.parametrize("engine", FILES)
def test_file_login_is_a_read_only_copy_deleted_on_revoke(tmp_path: Path, engine: str) -> None:
    make, open_, error = FILES[engine]
    box = make(tmp_path)
    original = _digest(box.path)
    try:
        login = lend_login(box, ttl_s=60, label="conv-1")
        copy = Path(login.fields["path"])
        assert copy != box.path and copy.read_bytes() and _digest(copy) != "" and copy.parent.name == login.name
        assert stat.S_IMODE(copy.stat().st_mode) == 0o444 and stat.S_IMODE(copy.parent.stat().st_mode) == 0o700
        conn = open_(login)
        try:
            assert conn.execute("SELECT name FROM pets").fetchall() == [("rex",)]
            for statement in [w for w in WRITES if "TEMP" not in w]:
                with pytest.raises(error):
                    conn.execute(statement)
            conn.execute("CREATE TEMP TABLE scratch (a INT)")  # the library's own memory: not the copy
        finally:
            conn.close()
        assert [p.name for p in copy.parent.iterdir()] == [copy.name]
        login.revoke()
        login.revoke()
        assert not copy.parent.exists()
        with pytest.raises(error):
            open_(login)
        assert _digest(box.path) == original
    finally:
        box.close()


@pytest.mark.parametrize("engine", FILES)
def test_file_login_left_alone_expires(tmp_path: Path, engine: str) -> None:
    make, _, _ = FILES[engine]
    box = make(tmp_path)
    try:
        login = lend_login(box, ttl_s=1, label="conv-2")
        folder = Path(login.fields["path"]).parent
        assert folder.exists()
        _refused_after(lambda: folder.stat())
    finally:
        box.close()


# ------------------------------------------------------------------------------------ revoke() itself


class _Lender:
    """An engine's lender whose revoke fails or hangs (the Lender protocol, as a third-party engine could write it)."""

    def __init__(self, revoke: Callable[[], None]) -> None:
        self.revoke, self.calls = revoke, 0

    def lend(self, ttl_s: float, label: str) -> Lent:
        def revoke() -> None:
            self.calls += 1
            self.revoke()

        return Lent(f"fake-{label}", "fake://", {}, time.time() + ttl_s, revoke)


class _Box:
    def __init__(self, lender: _Lender) -> None:
        self.lender = lender


def test_revoke_never_raises_runs_once_and_is_bounded(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def fail() -> None:
        raise RuntimeError("server gone")

    failing = _Lender(fail)
    login = lend_login(_Box(failing), ttl_s=60, label="a b/c")
    assert login.name == "fake-a_b_c"  # the label reaches the engine with safe characters only
    login.revoke()
    login.revoke()
    assert failing.calls == 1 and "server gone" in caplog.text

    monkeypatch.setattr(logins, "REVOKE_TIMEOUT_S", 0.2)
    release = threading.Event()
    hanging = _Lender(lambda: release.wait(5))
    login = lend_login(_Box(hanging), ttl_s=60, label="x")
    started = time.monotonic()
    login.revoke()
    assert time.monotonic() - started < 1 and "takes more than" in caplog.text
    release.set()


def test_a_login_is_revoked_at_its_expiry_by_the_harness() -> None:
    done = threading.Event()
    login = lend_login(_Box(_Lender(done.set)), ttl_s=0.3, label="x")
    assert done.wait(3) and login.expires_at <= time.time()


# ------------------------------------------------------------------------------------ refusals


def test_a_sandbox_without_a_lender_or_a_bad_ttl_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LendingError, match="cannot lend"):
        lend_login(object(), ttl_s=5, label="x")
    box = _sqlite_box(tmp_path)
    try:
        for ttl in (0, -1, 10 ** 9):
            with pytest.raises(LendingError, match="ttl_s"):
                lend_login(box, ttl_s=ttl, label="x")
        box.path.unlink()
        with pytest.raises(LendingError, match="could not lend"):
            lend_login(box, ttl_s=5, label="x")
    finally:
        box.close()
