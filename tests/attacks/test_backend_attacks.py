"""The red-team attacks of the sandbox, run against every backend that claims one: the same
hostile SQL (with each engine's own file and session escapes) on a small database, and after
each attack the database must be exactly as before.

PostgreSQL runs on the embedded server; SQLite always; DuckDB when the package is installed;
MySQL/MariaDB when a server answers (EVALBENCH_TEST_MYSQL_URL, default mysql://root@127.0.0.1:3306).
The PostgreSQL-only attacks (roles, signals, server files, test-case jails) stay in
tests/attacks/test_attacks_sql.py."""

from __future__ import annotations

import importlib.util
import os
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from evalbench.backends import get_backend
from evalbench.backends.base import SandboxLimits
from evalbench.backends.setup import find_setup
from evalbench.config import DatabaseConfig
from tests.backends.test_backend_connectors import ALLOYDB, fake_connector_modules, socket_dir  # noqa: F401  (fixtures)

SETUP = "CREATE TABLE items (id INTEGER PRIMARY KEY, name VARCHAR(40), price NUMERIC(10,2));\n"
ROWS = "".join(f"{i}, 'item {i}', {i}.50\n" for i in range(1, 21))
LIMITS = SandboxLimits(pool_size=2, statement_timeout_s=1.0, max_rows=50)
RUNAWAY = {
    "postgres": "SELECT count(*) FROM generate_series(1, 1000000000000)",
    "sqlite": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n",
    "duckdb": "SELECT count(*) FROM range(1000000000000) a, range(1000) b",
    "mysql": "SELECT BENCHMARK(10000000000, MD5('x'))",
}
RUNAWAY["alloydb"] = RUNAWAY["postgres"]
MANY_ROWS = {
    "postgres": "SELECT i FROM generate_series(1, 1000) AS i",
    "sqlite": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) SELECT i FROM n",
    "duckdb": "SELECT i FROM range(1000) t(i)",
    "mysql": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) SELECT i FROM n",
}
MANY_ROWS["alloydb"] = MANY_ROWS["postgres"]
# reading or writing the machine's files, loading code, opening other databases
ESCAPES = {
    "postgres": ["SELECT pg_read_file('/etc/passwd')", "COPY items TO '/tmp/evalbench_attack.csv'",
                 "SELECT lo_import('/etc/passwd')", "CREATE EXTENSION IF NOT EXISTS file_fdw"],
    "sqlite": ["ATTACH DATABASE '/tmp/evalbench_attack.db' AS x", "SELECT load_extension('/tmp/evalbench_attack.so')",
               "SELECT writefile('/tmp/evalbench_attack.csv', 'x')", "VACUUM INTO '/tmp/evalbench_attack.db'"],
    "duckdb": ["SELECT * FROM read_csv('/etc/passwd')", "COPY items TO '/tmp/evalbench_attack.csv'",
               "ATTACH '/tmp/evalbench_attack.db' AS x", "INSTALL httpfs", "SET enable_external_access = true"],
    "mysql": ["SELECT * FROM items INTO OUTFILE '/tmp/evalbench_attack.csv'",
              "LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE items", "SET GLOBAL max_connections = 1"],
}


ESCAPES["alloydb"] = ESCAPES["postgres"]


def _mysql_url() -> str | None:
    url = os.environ.get("EVALBENCH_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306")
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 3306), timeout=1).close()
    except OSError:
        return None
    return url


def _config(name: str, database: str, tmp_path: Path) -> DatabaseConfig:
    if name in ("sqlite", "duckdb"):
        return DatabaseConfig(database_name=database, dialect=name, database_path=str(tmp_path / "dbs"))
    if name == "mysql":
        return DatabaseConfig(database_name=database, dialect="mysql", db_type="mysql", url=_mysql_url())
    if name == "alloydb":
        return DatabaseConfig(database_name=database, dialect="postgres", db_type="alloydb", instance=ALLOYDB,
                              user_name="postgres")
    return DatabaseConfig(database_name=database, dialect="postgres")


@pytest.fixture(params=["postgres", "alloydb", "sqlite", "duckdb", "mysql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    name = request.param
    if name == "duckdb" and importlib.util.find_spec("duckdb") is None:
        pytest.skip("duckdb is not installed (pip install 'evalbench[duckdb]')")
    if name == "mysql" and (_mysql_url() is None or importlib.util.find_spec("pymysql") is None):
        pytest.skip("no MySQL/MariaDB server answers (EVALBENCH_TEST_MYSQL_URL) or pymysql is not installed")
    if name in ("postgres", "alloydb"):
        request.getfixturevalue("pgdata")
    if name == "alloydb":  # through Google's connector API, a double that reaches the embedded server
        request.getfixturevalue("fake_connector_modules")
    backend = get_backend(name)
    database = f"attack_{secrets.token_hex(3)}"
    root = tmp_path / "setup" / database
    (root / backend.setup_dialects()[0]).mkdir(parents=True)
    (root / backend.setup_dialects()[0] / "setup.sql").write_text(SETUP)
    (root / "data").mkdir()
    (root / "data" / "items.csv").write_text(ROWS)
    config = _config(name, database, tmp_path)
    dialect = "postgres" if name == "alloydb" else name
    provisioned = backend.provision(config, find_setup(tmp_path / "setup", database, dialect, backend.setup_dialects()), None)
    sandbox = backend.open_sandbox(config, provisioned, LIMITS, None)
    try:
        yield name, sandbox
    finally:
        sandbox.close()
        _drop(name, config, database)


def _drop(name: str, config: DatabaseConfig, database: str) -> None:
    if name == "mysql":
        import pymysql

        from evalbench.backends.mysql.provision import drop_database

        parts = urlsplit(_mysql_url() or "")
        with pymysql.connect(host=parts.hostname, port=parts.port or 3306, user=parts.username or "root",
                             password=parts.password or "", autocommit=True) as conn:
            drop_database(conn, database)  # its mark and its sandbox users too
    elif name in ("postgres", "alloydb"):
        import psycopg

        from evalbench.backends.postgres.target import libpq_conninfo, resolve_target

        target = resolve_target(DatabaseConfig(database_name=database, dialect="postgres"), None)
        with psycopg.connect(libpq_conninfo(target.admin), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            conn.execute(f'DROP DATABASE IF EXISTS "{database}_evalbench_template" WITH (FORCE)')


def _state(sandbox: Any) -> list[tuple[Any, ...]]:
    result = sandbox.execute("SELECT id, name, price FROM items ORDER BY id")
    assert result.ok, result.error
    return [(row[0], row[1], float(row[2])) for row in result.rows]


def _unchanged(sandbox: Any, before: list[tuple[Any, ...]]) -> None:
    assert _state(sandbox) == before
    for leftover in ("/tmp/evalbench_attack.csv", "/tmp/evalbench_attack.db"):
        assert not Path(leftover).exists(), leftover


@pytest.mark.parametrize("sql", [
    "INSERT INTO items VALUES (99, 'x', 1)",
    "UPDATE items SET price = 0",
    "DELETE FROM items",
    "DROP TABLE items",
    "TRUNCATE TABLE items",
    "CREATE TABLE stolen (x INTEGER)",
    "ALTER TABLE items ADD COLUMN y INTEGER",
    "SELECT 1; DROP TABLE items",
    "SELECT 1 /* ; */; DELETE FROM items",
    "COMMIT; DELETE FROM items",
    "ROLLBACK; UPDATE items SET price = 0",
    "WITH gone AS (DELETE FROM items RETURNING id) SELECT count(*) FROM gone",
])
def test_read_mode_changes_nothing(target: tuple[str, Any], sql: str) -> None:
    _, sandbox = target
    before = _state(sandbox)
    result = sandbox.execute(sql)
    assert not result.ok, f"{sql!r} ran: {result}"
    _unchanged(sandbox, before)


def test_engine_escapes_are_refused(target: tuple[str, Any]) -> None:
    name, sandbox = target
    before = _state(sandbox)
    for sql in ESCAPES[name]:
        result = sandbox.execute(sql)
        leaked = any("root:" in str(cell) for row in result.rows for cell in row)
        assert not result.ok or not leaked, f"{sql!r}: {result}"
        assert not leaked
    _unchanged(sandbox, before)


def test_write_mode_is_always_rolled_back(target: tuple[str, Any]) -> None:
    _, sandbox = target
    before = _state(sandbox)
    for sql in ("DELETE FROM items", "UPDATE items SET price = price * 2", "INSERT INTO items VALUES (99, 'x', 1)"):
        result = sandbox.execute(sql, mode="write")
        assert result.ok, f"{sql!r}: {result.error}"
        _unchanged(sandbox, before)
    seen = sandbox.execute("SELECT count(*) FROM items", preprocess=["DELETE FROM items WHERE id > 10"])
    assert seen.ok and seen.rows[0][0] == 10  # the preprocess SQL was seen, then undone
    _unchanged(sandbox, before)


def test_a_runaway_query_times_out_and_the_sandbox_goes_on(target: tuple[str, Any]) -> None:
    name, sandbox = target
    started = time.monotonic()
    result = sandbox.execute(RUNAWAY[name])
    assert result.error_kind == "timeout", result
    assert time.monotonic() - started < 10
    assert sandbox.execute("SELECT 1").rows[0][0] == 1


def test_the_row_cap_truncates(target: tuple[str, Any]) -> None:
    name, sandbox = target
    result = sandbox.execute(MANY_ROWS[name])
    assert result.ok and result.truncated and result.row_count == LIMITS.max_rows


def test_a_state_match_transaction_undoes_every_script(target: tuple[str, Any]) -> None:
    _, sandbox = target
    before = _state(sandbox)
    with sandbox.write_transaction() as tx:
        start = tx.fingerprint([])
        _, changed = tx.run(["UPDATE items SET price = 0 WHERE id = 3"], lambda t: t.fingerprint(["UPDATE items SET price = 0"]))
        assert changed != start
        assert tx.fingerprint([]) == start
    _unchanged(sandbox, before)


def test_errors_are_classified_syntax_or_sql(target: tuple[str, Any]) -> None:
    """A statement the engine cannot parse is a ``syntax`` error; any other failure of the SQL
    (an unknown column, a type error) is ``sql``; neither is the database's fault."""
    _, sandbox = target
    assert sandbox.execute("SELECT FROM WHERE items").error_kind == "syntax"
    assert sandbox.execute("SELECT price FROM items WHERE price >").error_kind == "syntax"
    assert sandbox.execute("SELECT no_such_column FROM items").error_kind == "sql"
    assert sandbox.execute("SELECT * FROM no_such_table").error_kind == "sql"


TEMP_ANSWER = {  # a question answered through a temporary table of its own, as agents write them
    "postgres": "CREATE TEMP TABLE cheap AS SELECT id, name FROM items WHERE price < 5; SELECT name FROM cheap ORDER BY id",
    "sqlite": "CREATE TEMP TABLE cheap AS SELECT id, name FROM items WHERE price < 5; SELECT name FROM cheap ORDER BY id",
    "duckdb": "CREATE TEMP TABLE cheap AS SELECT id, name FROM items WHERE price < 5; SELECT name FROM cheap ORDER BY id",
    "mysql": "CREATE TEMPORARY TABLE cheap AS SELECT id, name FROM items WHERE price < 5; SELECT name FROM cheap ORDER BY id",
}
TEMP_ANSWER["alloydb"] = TEMP_ANSWER["postgres"]


def test_a_question_may_use_temporary_tables_that_never_outlive_it(target: tuple[str, Any]) -> None:
    """BIRD-Interact's evaluator lets an answer fill a temporary table first: it runs here in a
    rolled-back write transaction, gets the rows, and the table is gone after (the next answer,
    on any pooled connection, cannot read it). A temporary table beside a real write stays in
    read mode and is refused. MySQL refuses CREATE in write mode (not covered there: its DDL
    would need CREATE TEMPORARY TABLES for the write users)."""
    from evalbench.core.conversation import Phase, PhaseRecord
    from evalbench.dataset import Conditions
    from evalbench.scoring.semantics import ResultRules, execute_generated

    name, sandbox = target
    before = _state(sandbox)
    for _ in range(3):  # every pooled connection
        phase = PhaseRecord(phase=Phase.MAIN, question="q", golden_sql=["SELECT 1"], conditions=Conditions(),
                            conditions_explicit=True, is_query=True, clarification_budget=0, sql=TEMP_ANSWER[name])
        execute_generated(sandbox, phase, ResultRules())
        assert phase.generated is not None
        if name == "mysql":
            assert phase.generated.error_kind == "forbidden" and "CREATE" in (phase.generated.error or "")
            continue
        assert phase.generated.ok, phase.generated
        assert [row[0] for row in phase.generated.rows] == ["item 1", "item 2", "item 3", "item 4"]
        assert not sandbox.execute("SELECT * FROM cheap").ok  # nothing outlived the answer
    phase = PhaseRecord(phase=Phase.MAIN, question="q", golden_sql=["SELECT 1"], conditions=Conditions(),
                        conditions_explicit=True, is_query=True, clarification_budget=0,
                        sql=TEMP_ANSWER[name].replace("; SELECT", "; DELETE FROM items; SELECT"))
    execute_generated(sandbox, phase, ResultRules())
    assert phase.generated is not None and not phase.generated.ok
    _unchanged(sandbox, before)
