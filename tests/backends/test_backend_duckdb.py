"""The DuckDB backend for real: provisioning a file from a setup directory (and its sidecar
mark), the sandbox's refusals (writes, smuggled statements, file and extension access) and
limits (row cap, timeout, interrupt), rollback of writes, and the state fingerprint."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

duckdb = pytest.importorskip("duckdb", reason="duckdb is not installed (pip install evalbench[duckdb])")

from evalbench.backends import get_backend  # noqa: E402
from evalbench.backends.base import SandboxLimits  # noqa: E402
from evalbench.backends.setup import find_setup  # noqa: E402
from evalbench.config import DatabaseConfig  # noqa: E402
from evalbench.core.errors import ProvisioningError  # noqa: E402

LIMITS = SandboxLimits(pool_size=2, statement_timeout_s=1.0, max_rows=50)
SLOW = ("WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 1000000000) "
        "SELECT count(*) FROM r")


def _setup(tmp_path: Path, rows: int = 3) -> Path:
    root = tmp_path / "setup" / "shop"
    (root / "duckdb").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "duckdb" / "setup.sql").write_text(
        "CREATE TABLE items (id INTEGER PRIMARY KEY, name VARCHAR, price DECIMAL(10, 2));\n"
        "CREATE TABLE notes (item_id INTEGER, note VARCHAR);\n")
    (root / "data" / "items.csv").write_text("".join(f"{i}, 'item {i}', {i}.5\n" for i in range(1, rows + 1)))
    (root / "data" / "notes.csv").write_text("1, 'fresh'\n")
    return tmp_path / "setup"


def _config(tmp_path: Path, **extra: object) -> DatabaseConfig:
    return DatabaseConfig(database_name="shop", dialect="duckdb", database_path=str(tmp_path / "dbs"), **extra)


@pytest.fixture
def shop(tmp_path: Path):
    backend = get_backend("duckdb")
    config = _config(tmp_path)
    setup = find_setup(_setup(tmp_path), "shop", "duckdb", backend.setup_dialects())
    provisioned = backend.provision(config, setup, None)
    sandbox = backend.open_sandbox(config, provisioned, LIMITS, None)
    yield backend, config, setup, provisioned, sandbox
    sandbox.close()


def _count(path: Path, table: str = "items") -> int:
    with duckdb.connect(str(path), read_only=True) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_provisioning_builds_reuses_and_rebuilds_the_file(tmp_path: Path) -> None:
    backend = get_backend("duckdb")
    config = _config(tmp_path)
    setup = find_setup(_setup(tmp_path), "shop", "duckdb", backend.setup_dialects())
    provisioned = backend.provision(config, setup, None)
    path = tmp_path / "dbs" / "shop.duckdb"
    assert provisioned.action == "created" and provisioned.rows_loaded == 4 and provisioned.tables_loaded == 2
    assert path.is_file() and (tmp_path / "dbs" / "shop.duckdb.evalbench").is_file()
    assert backend.provision(config, setup, None).action == "reused"
    assert "up to date" in backend.probe(config, setup, None, 5)
    (tmp_path / "setup" / "shop" / "data" / "items.csv").write_text("1, 'only', 1.0\n")
    changed = find_setup(tmp_path / "setup", "shop", "duckdb", backend.setup_dialects())
    assert "will be rebuilt" in backend.probe(config, changed, None, 5)
    again = backend.provision(config, changed, None)
    assert again.action == "rebuilt" and again.rows_loaded == 2
    assert _count(path) == 1


def test_postgres_setup_sql_is_not_read_in_place_of_duckdb(tmp_path: Path) -> None:
    root = tmp_path / "setup" / "shop"
    (root / "postgres").mkdir(parents=True)
    (root / "postgres" / "setup.sql").write_text("CREATE TABLE items (id int);\n")
    with pytest.raises(ProvisioningError, match="no setup SQL"):
        find_setup(tmp_path / "setup", "shop", "duckdb", get_backend("duckdb").setup_dialects())


def test_a_file_evalbench_did_not_build_is_never_overwritten(tmp_path: Path) -> None:
    backend = get_backend("duckdb")
    (tmp_path / "dbs").mkdir()
    with duckdb.connect(str(tmp_path / "dbs" / "shop.duckdb")) as conn:
        conn.execute("CREATE TABLE precious (x INTEGER)")
    config = _config(tmp_path)
    setup = find_setup(_setup(tmp_path), "shop", "duckdb", backend.setup_dialects())
    with pytest.raises(ProvisioningError, match="allow_destructive_setup"):
        backend.provision(config, setup, None)
    with pytest.raises(ProvisioningError, match="allow_destructive_setup"):
        backend.probe(config, setup, None, 5)
    provisioned = backend.provision(config, None, None)  # with no setup: used as it is
    sandbox = backend.open_sandbox(config, provisioned, LIMITS, None)
    try:
        assert provisioned.action == "external"
        assert sandbox.execute("SELECT count(*) FROM precious").rows == [(0,)]
        assert "CREATE TABLE precious" in backend.describe_schema(sandbox)
    finally:
        sandbox.close()
    replaced = backend.provision(_config(tmp_path, allow_destructive_setup=True), setup, None)
    assert replaced.action == "rebuilt" and _count(tmp_path / "dbs" / "shop.duckdb") == 3


def test_a_file_in_use_is_not_replaced(tmp_path: Path, shop) -> None:
    backend, config, _, _, sandbox = shop
    (tmp_path / "setup" / "shop" / "data" / "items.csv").write_text("1, 'only', 1.0\n")
    changed = find_setup(tmp_path / "setup", "shop", "duckdb", backend.setup_dialects())
    with pytest.raises(ProvisioningError, match="in use"):
        backend.provision(config, changed, None)
    assert sandbox.execute("SELECT count(*) FROM items").rows == [(3,)]


def test_a_bad_csv_row_or_setup_statement_names_file_and_line(tmp_path: Path) -> None:
    backend = get_backend("duckdb")
    setup_dir = _setup(tmp_path)
    (setup_dir / "shop" / "data" / "items.csv").write_text("1, 'a', 1.0\n2, 'b'\n")
    with pytest.raises(ProvisioningError, match=r"items\.csv:2"):
        backend.provision(_config(tmp_path), find_setup(setup_dir, "shop", "duckdb", backend.setup_dialects()), None)
    (setup_dir / "shop" / "duckdb" / "setup.sql").write_text("CREATE TABLE a (x INTEGER);\n\nCREATE TABLE oops (;\n")
    with pytest.raises(ProvisioningError, match=r"setup\.sql:3"):
        backend.provision(_config(tmp_path), find_setup(setup_dir, "shop", "duckdb", backend.setup_dialects()), None)
    assert not (tmp_path / "dbs" / "shop.duckdb").exists()


def test_reads_return_columns_typed_rows_and_respect_the_row_cap(shop) -> None:
    backend, _, _, _, sandbox = shop
    result = sandbox.execute("SELECT id, name, price FROM items ORDER BY id")
    assert result.ok and result.columns == ["id", "name", "price"]
    assert [(r[0], r[1], str(r[2])) for r in result.rows] == [(1, "item 1", "1.50"), (2, "item 2", "2.50"), (3, "item 3", "3.50")]
    capped = sandbox.execute("SELECT * FROM range(1000000000) r(i)")
    assert capped.ok and capped.truncated and len(capped.rows) == 50
    assert "CREATE TABLE items" in backend.describe_schema(sandbox)


def test_errors_are_classified(shop) -> None:
    _, _, _, _, sandbox = shop
    syntax = sandbox.execute("SELECT FROM WHERE")
    assert syntax.error_kind == "syntax" and "syntax error" in syntax.error
    runtime = sandbox.execute("SELECT CAST('x' AS INTEGER)")
    assert runtime.error_kind == "sql" and "Conversion" in runtime.error
    started = time.monotonic()
    slow = sandbox.execute(SLOW)
    assert slow.error_kind == "timeout" and time.monotonic() - started < 5
    assert sandbox.execute("SELECT 1").rows == [(1,)]  # the cursor is usable after the interrupt


@pytest.mark.parametrize("sql", [
    "INSERT INTO items VALUES (9, 'x', 1)", "UPDATE items SET price = 0", "DELETE FROM items", "DROP TABLE items",
    "SELECT 1; DROP TABLE items", "COMMIT", "SET memory_limit = '100GB'", "SET enable_external_access = true",
    "PRAGMA database_list", "CHECKPOINT", "ATTACH '/tmp/x.duckdb' AS x", "INSTALL httpfs", "LOAD httpfs",
    "COPY items TO '/tmp/evalbench-duckdb-leak.csv'", "EXPORT DATABASE '/tmp/evalbench-duckdb-leak'",
])
def test_read_mode_refuses_writes_and_everything_else(shop, sql: str) -> None:
    sandbox = shop[4]
    result = sandbox.execute(sql)
    assert result.error_kind == "forbidden", result
    assert _count_via(sandbox) == 3


def _count_via(sandbox) -> int:
    return sandbox.execute("SELECT count(*) FROM items").rows[0][0]


@pytest.mark.parametrize("sql", [
    "SELECT * FROM read_csv('/etc/passwd')", "SELECT * FROM read_text('/etc/hostname')", "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM '/etc/passwd'", "SELECT * FROM read_parquet('https://example.com/x.parquet')",
])
def test_no_file_or_network_is_read(shop, sql: str) -> None:
    result = shop[4].execute(sql)
    assert result.error_kind == "sql" and result.rows == []
    assert "disabled by configuration" in result.error or "does not exist" in result.error, result.error


def test_write_mode_and_write_paths_are_rolled_back(tmp_path: Path, shop) -> None:
    _, _, _, provisioned, sandbox = shop
    result = sandbox.execute(["INSERT INTO items VALUES (9, 'new', 1)", "SELECT count(*) FROM items"], mode="write")
    assert result.ok and result.rows == [(4,)]
    dropped = sandbox.execute("DROP TABLE notes", mode="write")
    assert dropped.ok
    assert sandbox.execute("COMMIT", mode="write").error_kind == "forbidden"
    assert sandbox.execute("COPY items TO '/tmp/evalbench-duckdb-leak.csv'", mode="write").error_kind == "forbidden"
    with_pre = sandbox.execute("SELECT count(*) FROM items", preprocess=["DELETE FROM items WHERE id = 1"])
    assert with_pre.rows == [(2,)]
    stopped = sandbox.execute("SELECT count(*) FROM items", preprocess=["DELETE FROM items WHERE id = 1", "SELECT nope",
                                                                         "DELETE FROM items"], preprocess_errors="stop")
    assert stopped.ok and stopped.rows == [(2,)]
    failed = sandbox.execute("SELECT 1", preprocess=["SELECT nope"])
    assert failed.error_kind == "preprocess"
    assert _count_via(sandbox) == 3 and sandbox.execute("SELECT count(*) FROM notes").rows == [(1,)]
    sandbox.close()
    assert _count(provisioned.handle) == 3 and _count(provisioned.handle, "notes") == 1


def test_write_transaction_fingerprints_changes_and_undoes_each_script(shop) -> None:
    _, _, _, _, sandbox = shop
    with sandbox.write_transaction(["DELETE FROM notes"]) as tx:
        assert tx.preprocess_error is None
        before = tx.fingerprint([])
        assert before["notes"][0] == 0
        result, after = tx.run(["UPDATE items SET price = 0 WHERE id = 2"], lambda t: t.fingerprint([]))
        assert result.ok and after["items"] != before["items"] and after["notes"] == before["notes"]
        _, same = tx.run(["UPDATE items SET price = price WHERE id = 2"], lambda t: t.fingerprint([]))
        assert same == before  # the first script was undone; the preprocess SQL still applies
        _, created = tx.run(["CREATE TABLE extra (x INTEGER)"], lambda t: t.fingerprint([]))
        assert created["schema"] != before["schema"] and "extra" in created
        refused, _ = tx.run(["COPY items TO '/tmp/evalbench-duckdb-leak.csv'"])
        assert refused.error_kind == "forbidden"
        assert tx.fingerprint([]) == before
    assert _count_via(sandbox) == 3


def test_interrupt_stops_running_statements(shop) -> None:
    slow_limits = SandboxLimits(pool_size=1, statement_timeout_s=60.0, max_rows=10)
    backend, config, _, provisioned, _ = shop
    long = backend.open_sandbox(config, provisioned, slow_limits, None)
    try:
        results = []
        worker = threading.Thread(target=lambda: results.append(long.execute(SLOW)))
        started = time.monotonic()
        worker.start()
        time.sleep(0.5)
        long.interrupt()
        worker.join(10)
        assert not worker.is_alive() and time.monotonic() - started < 10
        assert results[0].error_kind == "timeout"
    finally:
        long.close()


@pytest.mark.parametrize("mode", ["read", "write"])
def test_sql_run_from_inside_a_query_is_not_a_way_around(shop, mode: str) -> None:
    sandbox = shop[4]
    for sql in ("SELECT * FROM query('DROP TABLE items')", "SELECT * FROM query('COMMIT')",
                "SELECT * FROM force_checkpoint()", "SELECT * FROM sniff_csv('/etc/passwd')"):
        assert sandbox.execute(sql, mode=mode).error_kind in ("sql", "syntax"), sql  # refused, as the SQL's fault
    assert sandbox.execute("SELECT current_setting('lock_configuration')").rows == [(True,)]
    assert _count_via(sandbox) == 3


def test_a_whole_run_on_duckdb(tmp_path: Path) -> None:
    """``evalbench run`` with the oracle agent: a Query item (exec_match) and a Management item
    (state_match) both succeed, and the manifest records the provisioning."""
    import json
    import subprocess
    import sys

    _setup(tmp_path)
    golden = {"Query": "SELECT name FROM items ORDER BY price LIMIT 1", "Management": "UPDATE items SET price = 2 WHERE id = 3"}
    records = [{"instance_id": f"shop_{i}", "dialect": "duckdb", "selected_database": "shop", "query": "q", "amb_user_query": "q",
                "user_query_ambiguity": {}, "knowledge_ambiguity": [], "preprocess_sql": [], "clean_up_sqls": [],
                "test_cases": [], "category": category, "high_level": False, "sol_sql": [sql], "external_knowledge": [],
                "conditions": {"decimal": -1, "distinct": False, "order": False}, "difficulty_tier": "Simple"}
               for i, (category, sql) in enumerate(golden.items())]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "run.yaml").write_text(
        "dataset_config: data.jsonl\ndataset_format: bird-interact\nsetup_directory: setup\ndialects: [duckdb]\n"
        f"model_config: {Path(__file__).resolve().parents[2] / 'configs' / 'agents' / 'oracle.yaml'}\n"
        "vuser_model_config: {vuser: rules}\nscorers: {exec_match: {}, executable: {}}\n"
        "primary: {Query: exec_match, Management: [test_cases, state_match]}\n"
        f"database_configs:\n  - {{db_type: duckdb, dialect: duckdb, database_name: shop, database_path: {tmp_path / 'dbs'}}}\n")
    done = subprocess.run([sys.executable, "-m", "evalbench", "run", "--config", str(tmp_path / "run.yaml"), "--no-progress",
                           "--output-dir", str(tmp_path / "results")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = next((tmp_path / "results").iterdir())
    summary = (run_dir / "summary.csv").read_text()
    assert "exec_match,100,1,1" in summary and "state_match,100,1,1" in summary, summary
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["databases"]["duckdb/shop"]["action"] == "created"
    with duckdb.connect(str(tmp_path / "dbs" / "shop.duckdb"), read_only=True) as conn:  # the UPDATE was rolled back
        assert str(conn.execute("SELECT price FROM items WHERE id = 3").fetchone()[0]) == "3.50"


@pytest.mark.parametrize("hostile", ["COPY items TO '{out}';", "ATTACH '{out}' AS x;",
                                     "CREATE TABLE leak AS SELECT * FROM read_text('/etc/passwd');", "INSTALL httpfs;"])
def test_hostile_setup_sql_cannot_reach_other_files(tmp_path: Path, hostile: str) -> None:
    """The setup SQL comes with the dataset: it builds its own database and nothing else."""
    backend = get_backend("duckdb")
    setup_dir = _setup(tmp_path)
    out = tmp_path / "elsewhere.csv"
    (setup_dir / "shop" / "duckdb" / "post_setup.sql").write_text(hostile.format(out=out))
    with pytest.raises(ProvisioningError, match=r"post_setup\.sql"):
        backend.provision(_config(tmp_path), find_setup(setup_dir, "shop", "duckdb", backend.setup_dialects()), None)
    assert not out.exists()
