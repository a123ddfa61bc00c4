"""The SQLite build of the greenleaf demo dataset (datasets/demo/make_builds.py).

The generated files must be what the generator makes now, every generated golden must run on
SQLite with a non-empty result (Query items), and, when ``EVALBENCH_TEST_PG_URL`` names a
PostgreSQL server whose user may create databases, every golden's SQLite result must equal the
PostgreSQL golden's result on a scratch database (given a random name, dropped at the end).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import sqlite3
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest

DEMO = Path(__file__).resolve().parents[2] / "datasets" / "demo"
SETUP = DEMO / "setup" / "greenleaf"


def _load_generator() -> Any:
    spec = importlib.util.spec_from_file_location("make_builds", DEMO / "make_builds.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


make_builds = _load_generator()


def _records(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DEMO / name).read_text().splitlines() if line.strip()]


PG_RECORDS = _records("greenleaf.jsonl")
SQLITE_RECORDS = _records("greenleaf_sqlite.jsonl")


# --------------------------------------------------------------------------- normalising results


def _number(value: Decimal | float, places: int) -> float:
    """``value`` rounded half-up to ``places``. A float is first rounded to 6 places: SQLite's
    REAL sums carry binary noise (greenleaf_30: 680.9849999999999 where PostgreSQL's numeric
    says 680.985), which would otherwise round a half cent the other way."""
    exact = value if isinstance(value, Decimal) else Decimal(repr(round(value, 6)))
    return float(exact.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP))


def normalise(value: Any, decimal: int) -> Any:
    """A cell as both engines' values compare: numbers as floats rounded to ``decimal`` places
    (2 when the item says -1), booleans as 0/1, dates as ISO text, JSON parsed and re-dumped."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (Decimal, float)):
        return _number(value, decimal if decimal >= 0 else 2)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.dumps(json.loads(value), sort_keys=True)
        except ValueError:
            return value
    return value


def rows_of(rows: list[tuple[Any, ...]], decimal: int) -> list[tuple[Any, ...]]:
    return [tuple(normalise(v, decimal) for v in row) for row in rows]


def same_rows(left: list[tuple[Any, ...]], right: list[tuple[Any, ...]], conditions: dict[str, Any]) -> bool:
    decimal = conditions.get("decimal", -1)
    left, right = rows_of(left, decimal), rows_of(right, decimal)
    # Counter, not sorted(): 1 and 1.0 are equal and hash alike, but do not sort alike by repr
    return left == right if conditions.get("order") else Counter(left) == Counter(right)


def test_normalise_equates_what_the_engines_return_differently():
    assert normalise(True, -1) == 1 and normalise(Decimal("59.00"), -1) == 59.0
    assert normalise(dt.datetime(2024, 1, 12, 12, 48), -1) == "2024-01-12 12:48:00"
    assert normalise({"b": 1, "a": False}, -1) == normalise('{"a": false, "b": 1}', -1)
    assert same_rows([(1, Decimal("2.50"))], [(1.0, 2.5000001)], {"decimal": 2, "order": True})
    assert round(680.9849999999999, 2) == 680.98  # what a plain round would make of SQLite's sum
    assert normalise(Decimal("680.985"), 2) == normalise(680.9849999999999, 2) == 680.99
    assert normalise(1106.8604999999998, 2) == 1106.86
    assert not same_rows([(1,), (2,)], [(2,), (1,)], {"order": True})
    assert same_rows([(1,), (2,)], [(2,), (1,)], {"order": False})


# --------------------------------------------------------------------------- SQLite only


def test_generated_files_are_up_to_date(tmp_path):
    """Running the generator into tmp gives the committed files' bytes (with the sqlglot version
    they were made with: another may write the same SQL differently)."""
    if make_builds.generated_with(DEMO) != make_builds.GENERATOR:
        pytest.skip(f"the SQLite build was generated with {make_builds.generated_with(DEMO)}, this is {make_builds.GENERATOR}")
    files = make_builds.generate(DEMO)
    make_builds.write(files, tmp_path)
    assert sorted(files) == [
        "greenleaf_sqlite.jsonl",
        "setup/greenleaf/sqlite/post_setup.sql",
        "setup/greenleaf/sqlite/pre_setup.sql",
        "setup/greenleaf/sqlite/setup.sql",
    ]
    for rel in files:
        assert (tmp_path / rel).read_bytes() == (DEMO / rel).read_bytes(), f"{rel} is stale: run make_builds.py"


def test_sqlite_records_are_the_source_items_in_sqlite():
    assert [r["instance_id"] for r in SQLITE_RECORDS] == [r["instance_id"] for r in PG_RECORDS]
    assert len(SQLITE_RECORDS) == 43
    for pg, lite in zip(PG_RECORDS, SQLITE_RECORDS, strict=True):
        assert lite["dialect"] == "sqlite" and "dialect" not in pg
        assert lite["test_cases"] == []  # psycopg test cases: the item is judged by state_match
        sql_keys = ("sol_sql", "preprocess_sql", "clean_up_sqls", "test_cases", "follow_up", "dialect",
                    "user_query_ambiguity", "knowledge_ambiguity")
        assert {k: v for k, v in lite.items() if k not in sql_keys} == {k: v for k, v in pg.items() if k not in sql_keys}
        assert_same_ambiguities(lite, pg)
        for key in ("sol_sql", "preprocess_sql", "clean_up_sqls"):
            assert len(lite[key]) == len(pg[key]), key
        assert bool(lite["follow_up"]) == bool(pg["follow_up"])
    assert sum(bool(r["test_cases"]) for r in PG_RECORDS) == 3


def test_every_csv_row_loads_into_sqlite():
    conn = sqlite3.connect(":memory:")
    conn.executescript((SETUP / "sqlite" / "setup.sql").read_text())
    counts = make_builds.load_csvs(conn.execute, SETUP / "data")
    assert sum(counts.values()) == 599
    for table, count in counts.items():
        assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == count
    # the literals land as the types the queries expect: JSON text, ISO dates, REAL money, 0/1
    assert conn.execute(
        "SELECT typeof(care_info), typeof(added_on), typeof(unit_price), is_active FROM products WHERE product_id = 1"
    ).fetchone() == ("text", "text", "real", 1)
    assert conn.execute("SELECT json_extract(care_info, '$.light') FROM products WHERE product_id = 1").fetchone() == ("bright_indirect",)


def test_every_sqlite_golden_runs_with_a_non_empty_result():
    problems = make_builds.check(DEMO)
    if make_builds.generated_with(DEMO) != make_builds.GENERATOR:  # staleness is the test above's
        problems = [p for p in problems if "stale" not in p]
    assert problems == []


def test_an_insert_without_an_id_gets_the_next_id():
    """INTEGER PRIMARY KEY stands in for serial + setval (greenleaf_42's INSERT)."""
    conn = make_builds.sqlite_database(DEMO)
    make_builds.run_sqls(conn, next(r for r in SQLITE_RECORDS if r["instance_id"] == "greenleaf_42")["sol_sql"])
    assert conn.execute("SELECT supplier_id FROM suppliers WHERE supplier_name = 'Fernhollow Farms'").fetchone() == (9,)


def test_a_changed_source_golden_stops_the_hand_rewrite(tmp_path):
    """A hand rewrite (OVERRIDES) is tied to the PostgreSQL text it replaces."""
    record = dict(next(r for r in PG_RECORDS if r["instance_id"] == "greenleaf_28"))
    record["sol_sql"] = [record["sol_sql"][0].replace("0.5", "0.9")]
    with pytest.raises(make_builds.GenerationError, match="greenleaf_28 sol_sql"):
        make_builds.sqlite_record(record)


# --------------------------------------------------------------------------- against PostgreSQL


@pytest.fixture(scope="module")
def pg_conn() -> Iterator[Any]:
    """A scratch PostgreSQL database loaded from the postgres setup and the CSVs (README's recipe)."""
    url = os.environ.get("EVALBENCH_TEST_PG_URL")
    if not url:
        pytest.skip("EVALBENCH_TEST_PG_URL is not set")
    psycopg = pytest.importorskip("psycopg")
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    name = f"eb_demo_sqlite_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        with psycopg.connect(make_conninfo(url, dbname=name)) as conn:
            for step in ("pre_setup", "setup"):
                conn.execute((SETUP / "postgres" / f"{step}.sql").read_text())
            make_builds.load_csvs(conn.execute, SETUP / "data", "public.")
            conn.execute((SETUP / "postgres" / "post_setup.sql").read_text())
            conn.commit()
            yield conn
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _pg_run(conn: Any, sqls: list[str]) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for text in sqls:
        cursor = conn.execute(text)
        rows = cursor.fetchall() if cursor.description else []
    return rows


def _pg_item(conn: Any, record: dict[str, Any]) -> dict[str, list[tuple[Any, ...]]]:
    """The PostgreSQL golden results, like make_builds.run_item, rolled back afterwards."""
    try:
        _pg_run(conn, record["preprocess_sql"])
        results = {"main": _pg_run(conn, record["sol_sql"])}
        if record.get("follow_up"):
            results["follow_up"] = _pg_run(conn, record["follow_up"]["sol_sql"])
        return results
    finally:
        conn.rollback()


def _fresh_sqlite(template: sqlite3.Connection) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    template.backup(conn)
    return conn


@pytest.fixture(scope="module")
def sqlite_template() -> sqlite3.Connection:
    return make_builds.sqlite_database(DEMO)


def test_tables_hold_the_same_rows_on_both_engines(pg_conn, sqlite_template):
    tables = [p.stem for p in sorted((SETUP / "data").glob("*.csv"))]
    for table in tables:
        pg_rows = pg_conn.execute(f"SELECT * FROM public.{table} ORDER BY 1").fetchall()
        lite_rows = sqlite_template.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
        assert rows_of(pg_rows, -1) == rows_of(lite_rows, -1), table
    pg_conn.rollback()


def test_query_goldens_match_postgres(pg_conn, sqlite_template):
    """Every Query item's golden (and follow-up golden) gives the same rows on both engines."""
    matched, mismatched = 0, []
    for pg, lite in zip(PG_RECORDS, SQLITE_RECORDS, strict=True):
        if pg["category"] != "Query":
            continue
        pg_results = _pg_item(pg_conn, pg)
        lite_results = make_builds.run_item(_fresh_sqlite(sqlite_template), lite)
        for phase, pg_rows in pg_results.items():
            conditions = (pg["follow_up"] or {}).get("conditions", {}) if phase == "follow_up" else pg["conditions"]
            assert pg_rows and lite_results[phase], f"{pg['instance_id']} {phase}: empty golden result"
            if same_rows(pg_rows, lite_results[phase], conditions):
                matched += 1
            else:
                mismatched.append(f"{pg['instance_id']} {phase}: {pg_rows[:3]} != {lite_results[phase][:3]}")
    assert mismatched == []
    assert matched == 40 + 11  # 40 Query items, 11 follow-ups


def _pg_state(conn: Any) -> dict[str, Counter]:
    names = [r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'").fetchall()]
    return {n: Counter(rows_of(conn.execute(f'SELECT * FROM public."{n}"').fetchall(), 2)) for n in names}


def _sqlite_state(conn: sqlite3.Connection) -> dict[str, Counter]:
    names = [
        r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%'").fetchall()
    ]
    return {n: Counter(rows_of(conn.execute(f'SELECT * FROM "{n}"').fetchall(), 2)) for n in names}


def test_management_goldens_leave_the_same_state(pg_conn, sqlite_template):
    """What state_match compares on SQLite: every table and view after the golden, on both engines."""
    for pg, lite in zip(PG_RECORDS, SQLITE_RECORDS, strict=True):
        if pg["category"] != "Management":
            continue
        try:
            _pg_run(pg_conn, pg["sol_sql"])
            pg_state = _pg_state(pg_conn)
        finally:
            pg_conn.rollback()
        conn = _fresh_sqlite(sqlite_template)
        make_builds.run_sqls(conn, lite["sol_sql"])
        lite_state = _sqlite_state(conn)
        assert sorted(pg_state) == sorted(lite_state), pg["instance_id"]
        for name in pg_state:
            assert pg_state[name] == lite_state[name], f"{pg['instance_id']}: {name} differs"
        assert lite_state != _sqlite_state(_fresh_sqlite(sqlite_template)), f"{pg['instance_id']} changed nothing"


# --------------------------------------------------------------------------- the noisy agent on SQLite


def test_noisy_agent_writes_its_wrong_sql_in_the_items_dialect():
    """The noisy simulated agent mutates a SQLite golden with sqlglot's sqlite dialect: read and
    written as postgres, GROUP_CONCAT would come back as STRING_AGG, which SQLite lacks."""
    from types import SimpleNamespace

    from evalbench.agents import AgentContext
    from evalbench.agents.config import SimulatedAgentConfig
    from evalbench.agents.simulated import SimulatedAgent, mutate
    from evalbench.dataset.formats import bird_interact_items

    golden = "SELECT state, GROUP_CONCAT(city, ', ') AS cities FROM stores WHERE has_greenhouse = TRUE GROUP BY state;"
    record = {"instance_id": "g", "selected_database": "greenleaf", "query": "q?", "sol_sql": [golden], "dialect": "sqlite"}
    item = bird_interact_items(record, "f:1", ["sqlite"])[0]
    config = SimulatedAgentConfig(agent="simulated:noisy", seed=7, failure_rates={"wrong_filter": 1.0})
    agent = SimulatedAgent(config, AgentContext(seed=7))
    reply = agent.open_session(SimpleNamespace(item=item, trial=1)).send("q?")

    conn = make_builds.sqlite_database(DEMO)
    wrong = conn.execute(reply.sql).fetchall()
    assert wrong and sorted(wrong) != sorted(conn.execute(golden).fetchall())
    assert "GROUP_CONCAT" in reply.sql
    with pytest.raises(sqlite3.OperationalError, match="STRING_AGG"):
        conn.execute(mutate(golden, "wrong_filter", "postgres"))


def assert_same_ambiguities(record: dict, pg: dict) -> None:
    """The same ambiguities; a snippet differs from the source only where the new golden quotes
    it in the target's dialect (datasets/demo/make_builds.py::_translate_snippets)."""
    def entries(r: dict) -> list[dict]:
        return [*r["user_query_ambiguity"]["critical_ambiguity"], *r["user_query_ambiguity"]["non_critical_ambiguity"],
                *r["knowledge_ambiguity"]]
    golden = " ".join(" ".join(record["sol_sql"]).lower().split())
    for new, old in zip(entries(record), entries(pg), strict=True):
        assert {k: v for k, v in new.items() if k != "sql_snippet"} == {k: v for k, v in old.items() if k != "sql_snippet"}
        if new.get("sql_snippet") != old.get("sql_snippet"):
            assert " ".join(new["sql_snippet"].lower().split()) in golden, new
