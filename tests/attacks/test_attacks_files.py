"""Attacks on the in-process engines (SQLite, DuckDB) through the public interface: a real
``evalbench run`` whose agent (:mod:`tests.attack_agent`, a fake model server over HTTP) answers
with SQL that one built-in function call makes run for minutes or allocate gigabytes, with reads
that try to leave objects or counters behind, and with management scripts identical to the golden
ones on a table whose ids come from a sequence (DuckDB) or AUTOINCREMENT (SQLite).

What an outsider sees: each attack ends as the SQL's timeout (or error) within a small multiple
of its budget, the other conversations go on and get their right verdicts, the harness's memory
stays bounded, every identical management script passes ``state_match``, the file's catalog and
counters are as setup left them (the next run reuses it), and a file changed beside the harness
is refused at the next run, naming what changed.

Backend-level versions: tests/backends/test_backend_engine_processes.py."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tests.attack_agent import item
from tests.attacks.test_attacks_sql import generated, phase, run_evalbench
from tests.backends.test_backend_engine_processes import BUILT_COUNTERS, EXPENSIVE, INSERT, ROWS, SETUP, _counters, _high_water_mb

pytestmark = pytest.mark.slow  # whole runs per attack: CI runs them in `make test-slow`

BUDGET_S = 1.0
COUNT = "SELECT count(*) FROM items"
PERSIST = {
    "sqlite": ["CREATE TEMP TABLE stolen AS SELECT 1", "WITH x AS (SELECT 1) INSERT INTO items (name) SELECT 'x' FROM x"],
    "duckdb": ["EXPLAIN ANALYZE CREATE TABLE stolen AS SELECT 1", "EXPLAIN ANALYZE INSERT INTO items (name) VALUES ('x')",
               "SELECT nextval('item_ids')", "EXPLAIN ANALYZE CREATE TEMP TABLE stolen AS SELECT 1"],
}


def _item(name: str, item_id: str, golden: str, category: str = "Query") -> dict[str, Any]:
    return {**item(item_id, golden, category=category, database="shop"), "dialect": name}


def _run(tmp: Path, name: str, items: list[dict[str, Any]], replies: dict[str, Any]) -> Any:
    """``run_evalbench`` on the engine's ``shop`` database (files under ``tmp``)."""
    setup = tmp / "setup" / "shop"
    (setup / name).mkdir(parents=True, exist_ok=True)
    (setup / "data").mkdir(exist_ok=True)
    (setup / name / "setup.sql").write_text(SETUP[name])
    (setup / "data" / "items.csv").write_text(ROWS)
    databases = [{"database_name": "shop", "dialect": name, "db_type": name, "database_path": str(tmp / "dbs")}]
    return run_evalbench(tmp / f"run{len(list(tmp.glob('run*')))}", items, replies, setup_directory=tmp / "setup",
                         database_configs=databases, dialect=name, statement_timeout_s=BUDGET_S, sqlexec_runners=2,
                         max_in_flight=2, conversation_timeout_s=60,
                         scorers={"exec_match": {}, "state_match": {}, "executable": {}})


@pytest.mark.parametrize("name", ["sqlite", "duckdb"])
def test_a_hostile_agent_on_a_file_engine(tmp_path: Path, name: str) -> None:
    if name == "duckdb" and importlib.util.find_spec("duckdb") is None:
        pytest.skip("duckdb is not installed (pip install 'evalbench[duckdb]')")
    attacks = {f"fn_{i}": sql for i, sql in enumerate(EXPENSIVE[name][:4])}
    attacks |= {f"persist_{i}": sql for i, sql in enumerate(PERSIST[name])}
    items = [_item(name, key, COUNT) for key in attacks] + [_item(name, "ok_after", COUNT)]
    items += [_item(name, f"insert_{i}", INSERT, category="Management") for i in range(3)]
    replies: dict[str, Any] = {**attacks, "ok_after": COUNT, **{f"insert_{i}": INSERT for i in range(3)}}
    memory = _high_water_mb()
    started = time.monotonic()
    run = _run(tmp_path, name, items, replies)
    assert run.code == 0 and sorted(run.order) == sorted(replies), (run.code, run.order)
    assert _high_water_mb() - memory < 400, "the harness's own memory grew with the attacks"
    for key in attacks:
        record = run.records[key]
        assert record["outcome"] == "scored" and phase(record)["passed"] is False, (key, record["outcome"])
        if key.startswith("fn_"):
            assert generated(record)["error_kind"] in ("timeout", "sql"), (key, generated(record))
            assert generated(record)["elapsed_s"] < 3 * BUDGET_S + 2, (key, generated(record)["elapsed_s"])
            assert record["elapsed_s"] < 10 * BUDGET_S + 5, (key, record["elapsed_s"])
    for key in ("ok_after", "insert_0", "insert_1", "insert_2"):
        assert phase(run.records[key])["passed"] is True, (key, phase(run.records[key])["scores"])
    assert time.monotonic() - started < 120
    database = tmp_path / "dbs" / f"shop.{'db' if name == 'sqlite' else 'duckdb'}"
    assert _counters(name, database) == BUILT_COUNTERS[name], "a counter of the file moved"

    again = _run(tmp_path, name, [_item(name, "ok_again", COUNT)], {"ok_again": COUNT})
    manifest = json.loads((again.run_dir / "manifest.json").read_text())
    assert json.dumps(manifest["databases"]).count('"reused"') == 1, manifest["databases"]
    assert phase(again.records["ok_again"])["passed"] is True

    _change_beside_the_harness(name, database)
    refused = _run(tmp_path, name, [_item(name, "after_change", COUNT)], {"after_change": COUNT})
    record = refused.records["after_change"]
    assert record["outcome"] == "db_error", record["outcome"]
    assert "was changed after evalbench built it" in record["error"] and "stolen was added" in record["error"]
    assert refused.agent.asked == []


def _change_beside_the_harness(name: str, path: Path) -> None:
    if name == "sqlite":
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE stolen (x INTEGER)")
        conn.close()
    else:
        import duckdb

        with duckdb.connect(str(path)) as conn:
            conn.execute("CREATE TABLE stolen (x INTEGER)")
