"""The DuckDB and MySQL/MariaDB builds of the greenleaf demo dataset (datasets/demo/make_builds.py).

Per engine: the generated files must be what the generator makes now, every CSV row must load,
and every generated golden must give the PostgreSQL golden's rows (normalised as in
tests/e2e/test_demo_sqlite.py) when ``EVALBENCH_TEST_PG_URL`` names a PostgreSQL server. DuckDB's tests
skip when duckdb is not importable; MySQL's when no server answers at ``EVALBENCH_TEST_MYSQL_URL``
(default ``mysql://root@127.0.0.1:3306``; its user must create and drop a scratch database).
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.e2e import test_demo_sqlite
from tests.e2e.test_demo_sqlite import DEMO, PG_RECORDS, _pg_run, _records, assert_same_ambiguities, make_builds, rows_of, same_rows

pg_conn = test_demo_sqlite.pg_conn  # the scratch PostgreSQL database, loaded from the postgres build

ENGINES = ("duckdb", "mysql")
# Items a build leaves out, with the reason (README "Dialect differences").
EXCLUDED = {"duckdb": set(), "mysql": {"greenleaf_43"}}


class _Cursors:
    """``execute`` returning a cursor (as sqlite3 and duckdb do) over a pymysql connection."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str) -> Any:
        cursor = self.conn.cursor()
        cursor.execute(sql)
        return _ListRows(cursor)


class _ListRows:
    """A pymysql cursor whose ``fetchall`` returns a list, as sqlite3's and duckdb's do."""

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor
        self.description = cursor.description

    def fetchall(self) -> list[tuple[Any, ...]]:
        return list(self.cursor.fetchall())


def _duckdb() -> Iterator[Any]:
    pytest.importorskip("duckdb", reason="duckdb is not installed (pip install 'evalbench[duckdb]')")
    conn = make_builds.duckdb_database(DEMO)
    yield conn
    conn.close()


def _mysql() -> Iterator[Any]:
    pymysql = pytest.importorskip("pymysql", reason="pymysql is not installed (pip install 'evalbench[mysql]')")
    url = urlsplit(os.environ.get("EVALBENCH_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306"))
    login = {"host": url.hostname or "127.0.0.1", "port": url.port or 3306, "user": url.username or "root", "password": url.password or ""}
    try:
        admin = pymysql.connect(**login, autocommit=True)
    except pymysql.Error as exc:
        pytest.skip(f"no MySQL server at {url.hostname}:{url.port}: {exc}")
    name = f"eb_demo_mysql_{uuid.uuid4().hex[:12]}"
    admin.cursor().execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        conn = pymysql.connect(**login, database=name, charset="utf8mb4")
        make_builds.provision(_Cursors(conn).execute, DEMO, "mysql")
        conn.commit()
        yield _Cursors(conn)
        conn.close()
    finally:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.close()


@pytest.fixture(scope="module", params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any]]:
    """(target name, a connection to a database provisioned from that build)."""
    opener = _duckdb if request.param == "duckdb" else _mysql
    for conn in opener():
        yield request.param, conn


def _rolled_back(engine: tuple[str, Any], run: Any) -> Any:
    """``run(conn)`` inside a transaction that is rolled back (management goldens change data)."""
    name, conn = engine
    if name == "duckdb":
        conn.execute("BEGIN TRANSACTION")
    try:
        return run(conn)
    finally:
        conn.execute("ROLLBACK")


# --------------------------------------------------------------------------- the builds alone


@pytest.mark.parametrize("target", ENGINES)
def test_generated_files_are_up_to_date(tmp_path, target):
    if make_builds.generated_with(DEMO, target) != make_builds.GENERATOR:
        pytest.skip(f"the {target} build was generated with {make_builds.generated_with(DEMO, target)}, this is {make_builds.GENERATOR}")
    files = make_builds.generate(DEMO, target)
    make_builds.write(files, tmp_path)
    assert sorted(files) == [f"greenleaf_{target}.jsonl"] + [
        f"setup/greenleaf/{target}/{n}.sql" for n in ("post_setup", "pre_setup", "setup")
    ]
    for rel in files:
        assert (tmp_path / rel).read_bytes() == (DEMO / rel).read_bytes(), f"{rel} is stale: run make_builds.py {target}"


@pytest.mark.parametrize("target", ENGINES)
def test_records_are_the_source_items_in_the_targets_dialect(target):
    records = _records(f"greenleaf_{target}.jsonl")
    assert [r["instance_id"] for r in records] == [r["instance_id"] for r in PG_RECORDS if r["instance_id"] not in EXCLUDED[target]]
    source = {r["instance_id"]: r for r in PG_RECORDS}
    for record in records:
        pg = source[record["instance_id"]]
        assert record["dialect"] == target and record["test_cases"] == []
        sql_keys = ("sol_sql", "preprocess_sql", "clean_up_sqls", "test_cases", "follow_up", "dialect",
                    "user_query_ambiguity", "knowledge_ambiguity")
        assert {k: v for k, v in record.items() if k not in sql_keys} == {k: v for k, v in pg.items() if k not in sql_keys}
        assert_same_ambiguities(record, pg)


def test_every_csv_row_loads_and_every_golden_runs(engine):
    name, conn = engine
    for table, count in {"products": 44, "order_items": 287, "orders": 132}.items():
        assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchall() == [(count,)]
    light = "care_info ->> '$.light'" if name == "duckdb" else "JSON_UNQUOTE(JSON_EXTRACT(care_info, '$.light'))"
    assert conn.execute(f"SELECT {light} FROM products WHERE product_id = 1").fetchall() == [("bright_indirect",)]
    for record in _records(f"greenleaf_{name}.jsonl"):
        results = _rolled_back(engine, lambda c, record=record: make_builds.run_item(c, record))
        if record["category"] == "Query":
            assert all(results.values()), f"{record['instance_id']}: empty golden result"


def test_an_insert_gets_the_next_id_and_a_rollback_gives_it_again(engine):
    """greenleaf_42's golden: max(id) + 1, the same id however often it is rolled back."""
    record = next(r for r in _records(f"greenleaf_{engine[0]}.jsonl") if r["instance_id"] == "greenleaf_42")
    for _ in range(2):
        ids = _rolled_back(
            engine,
            lambda c: make_builds.run_sqls(
                c, [*record["sol_sql"], "SELECT supplier_id FROM suppliers WHERE supplier_name = 'Fernhollow Farms'"]
            ),
        )
        assert ids == [(9,)]


# --------------------------------------------------------------------------- against PostgreSQL


def test_tables_hold_the_same_rows_as_postgres(pg_conn, engine):
    for table in [p.stem for p in sorted((DEMO / "setup" / "greenleaf" / "data").glob("*.csv"))]:
        pg_rows = pg_conn.execute(f"SELECT * FROM public.{table} ORDER BY 1").fetchall()
        rows = engine[1].execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
        assert rows_of(pg_rows, -1) == rows_of(list(rows), -1), table
    pg_conn.rollback()


def test_query_goldens_match_postgres(pg_conn, engine):
    """Every Query item's golden (and follow-up golden) gives the same rows on both engines."""
    built = {r["instance_id"]: r for r in _records(f"greenleaf_{engine[0]}.jsonl")}
    matched, mismatched = 0, []
    for pg in PG_RECORDS:
        if pg["category"] != "Query":
            continue
        pg_results = {"main": _pg_run(pg_conn, pg["preprocess_sql"] + pg["sol_sql"])}
        if pg.get("follow_up"):
            pg_results["follow_up"] = _pg_run(pg_conn, pg["follow_up"]["sol_sql"])
        pg_conn.rollback()
        results = _rolled_back(engine, lambda c, record=built[pg["instance_id"]]: make_builds.run_item(c, record))
        for phase, pg_rows in pg_results.items():
            conditions = (pg["follow_up"] or {}).get("conditions", {}) if phase == "follow_up" else pg["conditions"]
            if same_rows(pg_rows, results[phase], conditions):
                matched += 1
            else:
                mismatched.append(f"{pg['instance_id']} {phase}: {pg_rows[:3]} != {results[phase][:3]}")
    assert mismatched == []
    assert matched == 40 + 11  # 40 Query items, 11 follow-ups


SETVALS = [s for s in (DEMO / "setup" / "greenleaf" / "postgres" / "post_setup.sql").read_text().split(";") if "setval" in s]


def _state(run: Any, tables: list[str]) -> dict[str, Counter]:
    return {t: Counter(rows_of(list(run(f"SELECT * FROM {t}")), 2)) for t in tables}


def test_management_goldens_leave_the_same_state_as_postgres(pg_conn, engine):
    """What state_match compares: every table after the golden, on both engines."""
    tables = [p.stem for p in sorted((DEMO / "setup" / "greenleaf" / "data").glob("*.csv"))]
    built = {r["instance_id"]: r for r in _records(f"greenleaf_{engine[0]}.jsonl")}
    compared = 0
    for pg in PG_RECORDS:
        if pg["category"] != "Management" or pg["instance_id"] not in built:
            continue
        _pg_run(pg_conn, SETVALS + pg["sol_sql"])  # sequences are not rolled back: an earlier run took id 9
        pg_state = _state(lambda q: pg_conn.execute(f"{q.replace('FROM ', 'FROM public.')}").fetchall(), tables)
        pg_conn.rollback()

        def after_golden(conn: Any, record: dict[str, Any] = built[pg["instance_id"]]) -> dict[str, Counter]:
            make_builds.run_sqls(conn, record["sol_sql"])
            return _state(lambda q: conn.execute(q).fetchall(), tables)

        assert _rolled_back(engine, after_golden) == pg_state, pg["instance_id"]
        compared += 1
    assert compared == 3 - len(EXCLUDED[engine[0]])
