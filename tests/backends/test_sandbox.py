"""Sandboxed execution of golden and agent SQL, and the statement splitter/classifier."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from evalbench.backends.base import SandboxLimits
from evalbench.backends.postgres.backend import open_sandbox
from evalbench.backends.postgres.provision import ProvisionReport, find_setup, provision
from evalbench.backends.postgres.sandbox import Sandbox
from evalbench.backends.postgres.target import SANDBOX_ROLE, DatabaseTarget, libpq_conninfo, resolve_target
from evalbench.config import DatabaseConfig
from evalbench.sql.statements import split_statements, statement_kind

SETUP_SQL = """\
CREATE TABLE t (id serial PRIMARY KEY, v text NOT NULL, n int);
"""
T_CSV = "1,'a',10\n2,'b',20\n3,'c',NULL\n"
T_ROWS = [(1, "a", 10), (2, "b", 20), (3, "c", None)]


@pytest.fixture(scope="module")
def provisioned(pgdata: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[DatabaseTarget, ProvisionReport]:
    name = f"eb_sandbox_{uuid.uuid4().hex[:12]}"
    root = tmp_path_factory.mktemp("sandbox_setup")
    (root / name / "postgres").mkdir(parents=True)
    (root / name / "data").mkdir()
    (root / name / "postgres" / "setup.sql").write_text(SETUP_SQL, encoding="utf-8")
    (root / name / "data" / "t.csv").write_text(T_CSV, encoding="utf-8")
    target = resolve_target(DatabaseConfig(database_name=name), pgdata)
    report = provision(target, find_setup(root, name, "postgres"))
    assert report.sandbox_user == SANDBOX_ROLE
    return target, report


def make_sandbox(provisioned, *, pool_size: int = 2, statement_timeout_s: float = 5.0, max_rows: int = 1000) -> Sandbox:
    target, report = provisioned
    return open_sandbox(target, report, SandboxLimits(pool_size=pool_size, statement_timeout_s=statement_timeout_s,
                                                      max_rows=max_rows))


@pytest.fixture
def sandbox(provisioned) -> Iterator[Sandbox]:
    box = make_sandbox(provisioned, statement_timeout_s=0.5, max_rows=10)
    try:
        yield box
    finally:
        box.close()


def admin_rows(target: DatabaseTarget, query: str = "SELECT id, v, n FROM t ORDER BY id") -> list[tuple]:
    """Rows of ``query`` on a fresh admin connection."""
    with psycopg.connect(libpq_conninfo(target.url()), autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(query)  # type: ignore[arg-type]
        return cur.fetchall()


# --------------------------------------------------------------------------- reads


def test_select_returns_columns_with_duplicates_and_rows(sandbox):
    result = sandbox.execute("SELECT id, v AS x, n AS x FROM t ORDER BY id")
    assert result.ok, result.error
    assert result.error_kind is None
    assert result.columns == ["id", "x", "x"]
    assert result.rows == T_ROWS
    assert result.row_count == 3
    assert result.truncated is False
    assert result.statements == 1
    assert result.elapsed_s > 0


@pytest.mark.parametrize("sql", ["SELECT id, v AS \"Wert\", n AS x FROM t WHERE false",
                                 "WITH e AS (SELECT * FROM t WHERE id < 0) SELECT id, v AS \"Wert\", n AS x FROM e",
                                 "SELECT 1 AS a; SELECT id, v AS \"Wert\", n AS x FROM t WHERE false"])
def test_an_empty_result_keeps_its_columns(sandbox, sql):
    # a streamed query that yields no row has no description: the columns still come back
    result = sandbox.execute(sql)
    assert result.ok, result.error
    assert result.rows == [] and result.columns == ["id", "Wert", "x"]


def test_several_statements_return_the_last_result(sandbox):
    result = sandbox.execute(["SELECT 1", "SELECT v FROM t WHERE id = 2; SELECT n FROM t WHERE id = 2"])
    assert result.ok, result.error
    assert result.statements == 3
    assert result.columns == ["n"]
    assert result.rows == [(20,)]


@pytest.mark.parametrize(
    ("agent_sql", "kind"),
    [
        ("DROP TABLE t", "forbidden"),
        ("UPDATE t SET v = 'hacked'", "forbidden"),
        ("DELETE FROM t", "forbidden"),
        ("TRUNCATE t", "forbidden"),
        ("INSERT INTO t (v) VALUES ('x')", "forbidden"),
        ("WITH x AS (SELECT 1) UPDATE t SET v = 'hacked'", "forbidden"),
        # a SELECT with a data-modifying CTE gets through the verb check; READ ONLY stops it
        ("WITH d AS (DELETE FROM t RETURNING id) SELECT count(*) FROM d", "sql"),
        ("SELECT 1; COMMIT; DROP TABLE t", "forbidden"),
        ("SELECT 1; END; DELETE FROM t", "forbidden"),
    ],
)
def test_changes_in_read_mode_are_refused_and_leave_data_unchanged(sandbox, provisioned, agent_sql, kind):
    result = sandbox.execute(agent_sql)
    assert not result.ok
    assert result.error_kind == kind
    assert result.rows == [] and result.columns == []
    if kind == "sql":
        assert "read-only transaction" in result.error
    else:
        assert "not allowed" in result.error
    assert admin_rows(provisioned[0]) == T_ROWS
    assert sandbox.execute("SELECT count(*) FROM t").rows == [(3,)]


def test_session_setting_does_not_survive_into_a_later_execution(provisioned):
    box = make_sandbox(provisioned, pool_size=1, statement_timeout_s=0.5)
    try:
        first = box.execute("SELECT set_config('statement_timeout', '0', false), set_config('work_mem', '1234kB', false)")
        assert first.ok, first.error
        assert first.rows == [("0", "1234kB")]
        started = time.perf_counter()
        later = box.execute("SELECT pg_sleep(5)")
        assert later.error_kind == "timeout"
        assert time.perf_counter() - started < 2.5
        assert box.execute("SELECT current_setting('work_mem')").rows != [("1234kB",)]
    finally:
        box.close()


def test_timeout_is_rearmed_for_every_statement(sandbox):
    started = time.perf_counter()
    result = sandbox.execute("SELECT set_config('statement_timeout', '0', true); SELECT pg_sleep(5)")
    assert result.error_kind == "timeout"
    assert time.perf_counter() - started < 2.5


def test_statement_timeout_and_pool_stays_usable(sandbox):
    started = time.perf_counter()
    result = sandbox.execute("SELECT pg_sleep(3)")
    elapsed = time.perf_counter() - started
    assert result.error_kind == "timeout"
    assert "statement timeout" in result.error
    assert result.rows == []
    assert elapsed < 2.5
    for _ in range(3):  # more executions than connections in the pool
        after = sandbox.execute("SELECT 41 + 1 AS answer")
        assert after.ok, after.error
        assert after.rows == [(42,)]


def test_session_advisory_lock_does_not_outlive_the_execution(provisioned):
    """Every execution must leave its connection as it found it: a session-level advisory lock
    taken by agent SQL would otherwise block later executions (golden SQL too) until timeout."""
    target, _ = provisioned
    box = make_sandbox(provisioned, pool_size=1, statement_timeout_s=0.5)
    try:
        assert box.execute("SELECT pg_advisory_lock(424242)").ok
        with psycopg.connect(libpq_conninfo(target.url()), autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(424242)")
            acquired = cur.fetchone()
            cur.execute("SELECT pg_advisory_unlock_all()")
        assert acquired == (True,)
    finally:
        box.close()


# --------------------------------------------------------------------------- write mode, preprocess


def test_write_mode_runs_changes_that_never_persist(sandbox, provisioned):
    result = sandbox.execute("UPDATE t SET v = 'changed' WHERE id = 1; SELECT v FROM t WHERE id = 1", mode="write")
    assert result.ok, result.error
    assert result.rows == [("changed",)]
    returning = sandbox.execute("UPDATE t SET n = n + 1 RETURNING id, n", mode="write")
    assert returning.ok, returning.error
    assert sorted(returning.rows, key=lambda r: r[0]) == [(1, 11), (2, 21), (3, None)]
    dropped = sandbox.execute("DROP TABLE t", mode="write")
    assert dropped.ok, dropped.error
    assert dropped.columns == [] and dropped.rows == []
    assert admin_rows(provisioned[0]) == T_ROWS
    assert sandbox.execute("SELECT v FROM t WHERE id = 1").rows == [("a",)]


def test_write_mode_inserts_do_not_consume_ids(sandbox, provisioned):
    """Golden and generated SQL of a management task both run; an INSERT must see the same
    database (including the next serial id) each time, or identical SQL gives different rows."""
    first = sandbox.execute("INSERT INTO t (v) VALUES ('new') RETURNING id", mode="write")
    second = sandbox.execute("INSERT INTO t (v) VALUES ('new') RETURNING id", mode="write")
    assert first.ok and second.ok, (first.error, second.error)
    assert first.rows == [(4,)]
    assert second.rows == first.rows
    assert admin_rows(provisioned[0]) == T_ROWS


def test_preprocess_is_visible_in_the_same_execution_only(sandbox, provisioned):
    result = sandbox.execute("SELECT v FROM t WHERE id = 1", preprocess=["UPDATE t SET v = 'pre' WHERE id = 1"])
    assert result.ok, result.error
    assert result.rows == [("pre",)]
    assert sandbox.execute("SELECT v FROM t WHERE id = 1").rows == [("a",)]
    assert admin_rows(provisioned[0]) == T_ROWS
    # the agent's SQL still runs read-only after the preprocess SQL
    sneaky = sandbox.execute(
        "WITH d AS (DELETE FROM t RETURNING id) SELECT count(*) FROM d", preprocess=["SELECT 1"]
    )
    assert sneaky.error_kind == "sql"
    assert "read-only transaction" in sneaky.error
    assert admin_rows(provisioned[0]) == T_ROWS


def test_failing_preprocess_is_reported(sandbox):
    result = sandbox.execute("SELECT 1", preprocess=["UPDATE nowhere SET x = 1"])
    assert result.error_kind == "preprocess"
    assert "nowhere" in result.error
    assert sandbox.execute("SELECT 1").rows == [(1,)]


# --------------------------------------------------------------------------- limits and errors


@pytest.mark.parametrize(("count", "rows", "truncated"), [(100, 10, True), (11, 10, True), (10, 10, False), (9, 9, False)])
def test_row_cap(sandbox, count, rows, truncated):
    result = sandbox.execute(f"SELECT g FROM generate_series(1, {count}) AS g")
    assert result.ok, result.error
    assert result.rows == [(i,) for i in range(1, rows + 1)]
    assert result.truncated is truncated


def test_row_cap_stops_a_huge_result_quickly(sandbox):
    started = time.perf_counter()
    # an SRF in the select list streams (in FROM it would be materialised before the first row)
    result = sandbox.execute("SELECT generate_series(1, 50000000) AS g, repeat('x', 100) AS pad")
    elapsed = time.perf_counter() - started
    assert result.ok, result.error
    assert [r[0] for r in result.rows] == list(range(1, 11))
    assert result.truncated is True
    assert elapsed < 2.5
    assert sandbox.execute("SELECT 7").rows == [(7,)]


def test_row_cap_applies_to_returning_in_write_mode(provisioned):
    box = make_sandbox(provisioned, max_rows=2)
    try:
        result = box.execute("UPDATE t SET n = 0 RETURNING id", mode="write")
        assert result.ok, result.error
        assert len(result.rows) == 2
        assert result.truncated is True
    finally:
        box.close()


def test_sql_error_gives_server_message(sandbox):
    missing = sandbox.execute("SELECT * FROM no_such_table")
    assert missing.error_kind == "sql"
    assert missing.error == 'relation "no_such_table" does not exist'
    assert missing.columns == [] and missing.rows == []
    zero = sandbox.execute("SELECT 1 / 0")
    assert zero.error_kind == "sql"
    assert zero.error == "division by zero"
    syntax = sandbox.execute("SELECT 1 FROM")
    assert syntax.error_kind == "syntax"
    assert syntax.error == "syntax error at end of input"
    assert sandbox.execute("SELECT 2").rows == [(2,)]


@pytest.mark.parametrize("mode", ["read", "write"])
def test_copy_to_program_is_forbidden(sandbox, mode):
    result = sandbox.execute("COPY (SELECT 1) TO PROGRAM 'true'", mode=mode)
    assert result.error_kind == "forbidden"
    assert "COPY" in result.error


def test_reading_server_files_fails(sandbox):
    result = sandbox.execute("SELECT pg_read_file('/etc/passwd')")
    assert not result.ok
    assert result.error_kind == "sql"
    assert "permission denied" in result.error
    assert result.rows == []


@pytest.mark.parametrize("text", ["", "   ", ";", " ; ;", "-- nothing but a comment", "/* a; b */"])
def test_empty_sql_is_an_error(sandbox, text):
    result = sandbox.execute(text)
    assert not result.ok
    assert result.error == "no SQL statement to run"
    assert result.error_kind == "sql"
    assert result.statements == 0


@pytest.mark.parametrize(
    "text",
    [
        "SELECT count(*) AS c FROM t -- how many rows?\n;",
        "SELECT count(*) AS c FROM t; -- done; really",
        "  SELECT count(*) AS c FROM t /* ; */ ;\n\n",
        "-- leading comment\nSELECT count(*) AS c FROM t;",
    ],
)
def test_select_with_comments_and_semicolon(sandbox, text):
    result = sandbox.execute(text)
    assert result.ok, result.error
    assert result.statements == 1
    assert result.columns == ["c"]
    assert result.rows == [(3,)]


def test_dead_port_gives_connection_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    box = Sandbox(
        f"host=127.0.0.1 port={port} dbname=nothing user=nobody",
        pool_size=1,
        statement_timeout_s=1,
        max_rows=10,
        connect_timeout_s=2,
    )
    try:
        result = box.execute("SELECT 1")
    finally:
        box.close()
    assert result.error_kind == "connection"
    assert result.error.startswith("cannot connect")
    assert result.rows == []


# --------------------------------------------------------------------------- split_statements


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SELECT 1", ["SELECT 1"]),
        ("SELECT 1;", ["SELECT 1"]),
        ("SELECT 1; SELECT 2;", ["SELECT 1", "SELECT 2"]),
        ("SELECT $$a;b$$; SELECT 2", ["SELECT $$a;b$$", "SELECT 2"]),
        ("SELECT $tag$ x; $$ ; y $tag$ AS v; SELECT 3", ["SELECT $tag$ x; $$ ; y $tag$ AS v", "SELECT 3"]),
        ("SELECT E'it\\'s; ok' AS v; SELECT 2", ["SELECT E'it\\'s; ok' AS v", "SELECT 2"]),
        ("SELECT 'a;b'; SELECT 'c''d;'", ["SELECT 'a;b'", "SELECT 'c''d;'"]),
        ('SELECT "a;b" FROM t; SELECT 2', ['SELECT "a;b" FROM t', "SELECT 2"]),
        ("SELECT 1 -- c;omment\n; SELECT 2 /* x; y */", ["SELECT 1", "SELECT 2"]),
        ("SELECT 1 /* ; */ + 1", ["SELECT 1 /* ; */ + 1"]),
        ("SELECT 1; -- trailing; comment", ["SELECT 1"]),
        ("SELECT 1; COMMIT; DROP TABLE t", ["SELECT 1", "COMMIT", "DROP TABLE t"]),
        ("CREATE FUNCTION f() RETURNS int AS $$ BEGIN RETURN 1; END $$ LANGUAGE plpgsql; SELECT f()",
         ["CREATE FUNCTION f() RETURNS int AS $$ BEGIN RETURN 1; END $$ LANGUAGE plpgsql", "SELECT f()"]),
        ("", []),
        (";; ;", []),
        ("-- only a comment", []),
    ],
)
def test_split_statements(text, expected):
    assert split_statements(text) == expected


# --------------------------------------------------------------------------- statement_kind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SELECT 1", ("SELECT", False)),
        ("select * from t", ("SELECT", False)),
        ("(SELECT 1) UNION (SELECT 2)", ("(", False)),
        ("VALUES (1), (2)", ("VALUES", False)),
        ("TABLE t", ("TABLE", False)),
        ("EXPLAIN SELECT 1", ("EXPLAIN", False)),
        ("SHOW work_mem", ("SHOW", False)),
        ("WITH x AS (SELECT 1) SELECT * FROM x", ("SELECT", False)),
        ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT n FROM r", ("SELECT", False)),
        ("WITH x AS (SELECT 1) UPDATE t SET v = 'a'", ("UPDATE", True)),
        ("with x as (select 1) delete from t", ("DELETE", True)),
        ("WITH x AS (SELECT 1), y AS (SELECT 2) INSERT INTO t SELECT * FROM x", ("INSERT", True)),
        ("WITH d AS (DELETE FROM t RETURNING id) SELECT count(*) FROM d", ("SELECT", True)),
        ("WITH u AS (UPDATE t SET v = 'x' RETURNING *) TABLE u", ("TABLE", True)),
        ("SELECT * FROM t FOR UPDATE", ("SELECT", False)),
        ("SELECT * FROM t FOR UPDATE OF t SKIP LOCKED", ("SELECT", False)),
        ("UPDATE t SET v = 'a'", ("UPDATE", True)),
        ("DELETE FROM t", ("DELETE", True)),
        ("INSERT INTO t VALUES (1)", ("INSERT", True)),
        ("MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE", ("MERGE", True)),
        ("DROP TABLE t", ("DROP", False)),
        ("COPY (SELECT 1) TO PROGRAM 'true'", ("COPY", False)),
        ("COMMIT", ("COMMIT", False)),
        ("", ("", False)),
    ],
)
def test_statement_kind(text, expected):
    assert statement_kind(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "SELECT 'delete' AS word",
        'SELECT "update" FROM t',
        "SELECT * FROM t FOR NO KEY UPDATE",
    ],
)
def test_statement_kind_reads_that_only_mention_a_write_verb(text):
    """Only a data-modifying verb makes a statement modify: not a string literal, a quoted
    identifier or a row-locking clause (such reads are not streamed: the sandbox fetches their
    whole result before applying the row cap)."""
    assert statement_kind(text) == ("SELECT", False)


def test_statement_splitting_is_thread_safe():
    """sqlglot's tokenizer keeps state while it runs: each thread must use its own."""
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"WITH a{i} AS (SELECT {i} AS x) SELECT x FROM a{i} WHERE x = {i}; SELECT {i}" for i in range(200)]
    expected = [[t.split("; ")[0], t.split("; ")[1]] for t in texts]
    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in range(5):
            assert list(pool.map(split_statements, texts)) == expected
            assert set(pool.map(lambda t: statement_kind(t.split("; ")[0]), texts)) == {("SELECT", False)}


def test_session_settings_changed_by_a_single_query_do_not_leak(sandbox):
    """The single-query path commits its implicit transaction, so session changes are reset."""
    for changer in (
        "SELECT set_config('statement_timeout', '0', false)",
        'SELECT U&"set\\005Fconfig"(\'statement_timeout\', \'0\', false)',
    ):
        assert sandbox.execute(changer).ok
        for _ in range(3):  # whichever pooled connection runs next
            assert sandbox.execute("SHOW statement_timeout").rows != [("0",)]


def test_the_pool_reconnects_after_the_server_dropped_every_connection(sandbox, provisioned):
    """What a server restart does to the pool: every pooled connection is dead. The next
    execution reconnects instead of failing as db_error."""
    target, _report = provisioned
    for _ in range(3):
        assert sandbox.execute("SELECT count(*) FROM t").rows == [(3,)]  # connections in the pool
    with psycopg.connect(libpq_conninfo(target.url()), autocommit=True) as admin:
        pids = [pid for (pid,) in admin.execute("SELECT pid FROM pg_stat_activity WHERE usename = %s AND datname = %s",
                                                 (SANDBOX_ROLE, target.name)).fetchall()]
        assert pids
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    time.sleep(0.2)
    result = sandbox.execute("SELECT count(*) FROM t")
    assert result.error is None and result.rows == [(3,)], result
    assert sandbox.execute("SELECT v FROM t WHERE id = 2; SELECT 1").rows == [(1,)]


def test_sql_that_is_not_text_is_an_sql_error_not_a_crash(sandbox):
    for sql, why in (("SELECT '\ud800'", "not valid text"), ("SELECT 'a\x00b'", "NUL")):
        result = sandbox.execute(sql)
        assert result.error_kind == "sql" and why in result.error, result


def test_nothing_a_query_changes_in_the_session_reaches_the_next_execution(provisioned):
    target, report = provisioned
    one = Sandbox(libpq_conninfo(target.url(user=report.sandbox_user, password=report.sandbox_password)),
                  pool_size=1, statement_timeout_s=5, max_rows=100)  # one connection: every execution reuses it
    baseline = one.execute("SELECT current_setting('search_path'), current_setting('statement_timeout'), "
                           "current_setting('default_transaction_read_only'), current_setting('work_mem')").rows
    for attack in ("SELECT set_config('search_path', 'pg_catalog', false)",
                   "SELECT set_config('statement_timeout', '1', false)",
                   "SELECT set_config('default_transaction_read_only', 'off', false)",
                   "SELECT * FROM ts_stat('SELECT to_tsvector(set_config(''work_mem'', ''64kB'', false))')",
                   "SELECT pg_advisory_lock(42)",
                   "SELECT 1; SELECT set_config('search_path', 'pg_catalog', false)"):
        one.execute(attack)
        after = one.execute("SELECT current_setting('search_path'), current_setting('statement_timeout'), "
                            "current_setting('default_transaction_read_only'), current_setting('work_mem')").rows
        assert after == baseline, attack
        assert one.execute("SELECT pg_advisory_unlock(42)").rows == [(False,)], attack  # not held (pg_locks is revoked)
    one.close()
