"""The SQLite backend for real: provisioning a file from a setup directory, the sandbox's
refusals and limits, rollback of writes, and the state fingerprint."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from evalbench.backends import get_backend
from evalbench.backends.base import SandboxLimits
from evalbench.backends.setup import find_setup
from evalbench.config import DatabaseConfig
from evalbench.core.errors import ProvisioningError

ROOT = Path(__file__).resolve().parents[2]
DEMO_SETUP = ROOT / "datasets" / "demo" / "setup"
LIMITS = SandboxLimits(pool_size=2, statement_timeout_s=1.0, max_rows=50)


def _setup(tmp_path: Path, rows: int = 3) -> Path:
    root = tmp_path / "setup" / "shop"
    (root / "sqlite").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "sqlite" / "setup.sql").write_text("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL);\n")
    (root / "data" / "items.csv").write_text("".join(f"{i}, 'item {i}', {i}.5\n" for i in range(1, rows + 1)))
    return tmp_path / "setup"


@pytest.fixture
def shop(tmp_path: Path):
    backend = get_backend("sqlite")
    config = DatabaseConfig(database_name="shop", dialect="sqlite", database_path=str(tmp_path / "dbs"))
    setup = find_setup(_setup(tmp_path), "shop", "sqlite", backend.setup_dialects())
    provisioned = backend.provision(config, setup, None)
    sandbox = backend.open_sandbox(config, provisioned, LIMITS, None)
    yield backend, config, setup, provisioned, sandbox
    sandbox.close()


def test_provisioning_builds_reuses_and_rebuilds_the_file(tmp_path: Path, shop) -> None:
    backend, config, setup, provisioned, _ = shop
    assert provisioned.action == "created" and provisioned.rows_loaded == 3
    assert (tmp_path / "dbs" / "shop.db").is_file()
    assert backend.provision(config, setup, None).action == "reused"
    (tmp_path / "setup" / "shop" / "data" / "items.csv").write_text("1, 'only', 1.0\n")
    changed = find_setup(tmp_path / "setup", "shop", "sqlite", backend.setup_dialects())
    again = backend.provision(config, changed, None)
    assert again.action == "rebuilt" and again.rows_loaded == 1


def test_a_file_evalbench_did_not_build_is_never_overwritten(tmp_path: Path) -> None:
    backend = get_backend("sqlite")
    (tmp_path / "dbs").mkdir()
    with sqlite3.connect(tmp_path / "dbs" / "shop.db") as conn:
        conn.execute("CREATE TABLE precious (x)")
    config = DatabaseConfig(database_name="shop", dialect="sqlite", database_path=str(tmp_path / "dbs"))
    setup = find_setup(_setup(tmp_path), "shop", "sqlite", backend.setup_dialects())
    with pytest.raises(ProvisioningError, match="allow_destructive_setup"):
        backend.provision(config, setup, None)
    # with no setup it is used as it is, read-only
    provisioned = backend.provision(config, None, None)
    sandbox = backend.open_sandbox(config, provisioned, LIMITS, None)
    try:
        assert provisioned.action == "external"
        assert sandbox.execute("SELECT count(*) FROM precious").rows == [(0,)]
    finally:
        sandbox.close()


def test_a_bad_csv_row_names_file_and_line(tmp_path: Path) -> None:
    backend = get_backend("sqlite")
    setup_dir = _setup(tmp_path)
    (setup_dir / "shop" / "data" / "items.csv").write_text("1, 'a', 1.0\n2, 'b'\n")
    config = DatabaseConfig(database_name="shop", dialect="sqlite", database_path=str(tmp_path / "dbs"))
    with pytest.raises(ProvisioningError, match=r"items\.csv:2"):
        backend.provision(config, find_setup(setup_dir, "shop", "sqlite", backend.setup_dialects()), None)


def test_reads_return_typed_rows_and_the_row_cap_truncates(shop) -> None:
    *_, sandbox = shop
    result = sandbox.execute("SELECT id, name, price FROM items ORDER BY id")
    assert result.ok and result.columns == ["id", "name", "price"]
    assert result.rows[0] == (1, "item 1", 1.5)
    big = sandbox.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 500) SELECT i FROM n")
    assert big.ok and big.truncated and big.row_count == 50


@pytest.mark.parametrize("sql", [
    "INSERT INTO items VALUES (9, 'x', 1)",
    "UPDATE items SET price = 0",
    "DELETE FROM items",
    "DROP TABLE items",
    "SELECT 1; DROP TABLE items",
    "COMMIT",
    "ATTACH DATABASE '/tmp/evil.db' AS evil",
    "PRAGMA writable_schema = ON",
    "VACUUM INTO '/tmp/copy.db'",
])
def test_read_mode_refuses_every_change(shop, sql: str) -> None:
    *_, sandbox = shop
    result = sandbox.execute(sql)
    assert not result.ok and result.error_kind in ("forbidden", "sql"), result
    assert sandbox.execute("SELECT count(*) FROM items").rows == [(3,)]
    assert not Path("/tmp/evil.db").exists() and not Path("/tmp/copy.db").exists()


@pytest.mark.parametrize("sql", [
    "SELECT * FROM pragma_table_info('items') WHERE load_extension('x') IS NULL",
    "SELECT load_extension('/tmp/x.so')",
    "WITH x AS (SELECT 1) SELECT * FROM x; ATTACH '/tmp/evil2.db' AS e",
])
def test_the_authorizer_refuses_extensions_and_other_files(shop, sql: str) -> None:
    *_, sandbox = shop
    result = sandbox.execute(sql)
    assert not result.ok
    assert not Path("/tmp/evil2.db").exists()


def test_a_runaway_query_times_out_and_the_sandbox_goes_on(shop) -> None:
    *_, sandbox = shop
    started = time.monotonic()
    result = sandbox.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n")
    assert result.error_kind == "timeout" and time.monotonic() - started < 5
    assert sandbox.execute("SELECT 1").rows == [(1,)]


def test_a_huge_value_is_an_error_not_an_allocation(shop) -> None:
    *_, sandbox = shop
    result = sandbox.execute("SELECT length(randomblob(1000000000))")
    assert not result.ok and result.error_kind == "sql"


def test_syntax_and_runtime_errors_are_sql_errors(shop) -> None:
    *_, sandbox = shop
    assert sandbox.execute("SELECT 1 +").error_kind == "syntax"
    assert sandbox.execute("SELECT nope FROM items").error_kind == "sql"


def test_write_mode_changes_are_always_rolled_back(shop) -> None:
    *_, sandbox = shop
    result = sandbox.execute("INSERT INTO items VALUES (10, 'new', 2.0); SELECT count(*) FROM items", mode="write")
    assert result.ok and result.rows == [(4,)]
    assert sandbox.execute("DROP TABLE items", mode="write").ok
    assert sandbox.execute("SELECT count(*) FROM items").rows == [(3,)]
    # preprocess SQL is seen by the query, then undone too
    seen = sandbox.execute("SELECT count(*) FROM items", preprocess=["DELETE FROM items WHERE id = 1"])
    assert seen.rows == [(2,)] and sandbox.execute("SELECT count(*) FROM items").rows == [(3,)]


def test_write_transaction_fingerprints_tell_states_apart(shop) -> None:
    *_, sandbox = shop
    with sandbox.write_transaction() as tx:
        before = tx.fingerprint([])
        _, after_update = tx.run(["UPDATE items SET price = price + 1 WHERE id = 2"], lambda t: t.fingerprint([]))
        _, after_same = tx.run(["UPDATE items SET price = price + 1 WHERE id = 2"], lambda t: t.fingerprint([]))
        _, after_create = tx.run(["CREATE TABLE extra (x)"], lambda t: t.fingerprint([]))
        assert tx.fingerprint([]) == before  # every script was undone
    assert after_update == after_same != before
    assert after_create["schema"] != before["schema"]


def test_interrupt_stops_a_running_query(shop) -> None:
    slow = SandboxLimits(pool_size=1, statement_timeout_s=30.0, max_rows=10)
    backend, config, _, provisioned, _ = shop
    patient = backend.open_sandbox(config, provisioned, slow, None)
    try:
        threading.Timer(0.3, patient.interrupt).start()
        started = time.monotonic()
        result = patient.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n")
        assert not result.ok and time.monotonic() - started < 5
    finally:
        patient.close()


def test_schema_text_and_probe(shop) -> None:
    backend, config, setup, _, sandbox = shop
    assert "CREATE TABLE items" in backend.describe_schema(sandbox)
    assert "shop.db" in backend.probe(config, setup, None, 1.0)


def test_the_demo_database_builds_from_its_sqlite_setup(tmp_path: Path) -> None:
    backend = get_backend("sqlite")
    config = DatabaseConfig(database_name="greenleaf", dialect="sqlite", database_path=str(tmp_path))
    provisioned = backend.provision(config, find_setup(DEMO_SETUP, "greenleaf", "sqlite", backend.setup_dialects()), None)
    assert provisioned.tables_loaded == 8 and provisioned.rows_loaded == 599


@pytest.mark.parametrize("hostile", ["ATTACH DATABASE '{out}' AS x;", "VACUUM INTO '{out}';",
                                     "SELECT load_extension('{out}');"])
def test_hostile_setup_sql_cannot_reach_other_files(tmp_path: Path, hostile: str) -> None:
    """The setup SQL comes with the dataset: it builds its own database and nothing else."""
    backend = get_backend("sqlite")
    setup_dir = _setup(tmp_path)
    out = tmp_path / "elsewhere.db"
    (setup_dir / "shop" / "sqlite" / "post_setup.sql").write_text(hostile.format(out=out))
    config = DatabaseConfig(database_name="shop", dialect="sqlite", database_path=str(tmp_path / "dbs"))
    with pytest.raises(ProvisioningError, match=r"post_setup\.sql"):
        backend.provision(config, find_setup(setup_dir, "shop", "sqlite", backend.setup_dialects()), None)
    assert not out.exists() and not (tmp_path / "dbs" / "shop.db").exists()


def test_reads_beside_rolled_back_writes_never_fail(shop) -> None:
    """A read that starts while a write transaction is rolled back would find its journal hot
    ("attempt to write a readonly database" on a read-only connection): reads wait for writes."""
    *_, sandbox = shop
    errors: list[str] = []
    stop = time.monotonic() + 3

    def write() -> None:
        while time.monotonic() < stop:
            result = sandbox.execute("UPDATE items SET name = name || 'x'; CREATE VIEW v AS SELECT 1", mode="write")
            if not result.ok:
                errors.append(f"write: {result.error}")

    def read() -> None:
        while time.monotonic() < stop:
            result = sandbox.execute("SELECT id, name FROM items ORDER BY name")
            if not result.ok:
                errors.append(f"read: {result.error}")

    threads = [threading.Thread(target=write), *(threading.Thread(target=read) for _ in range(2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sandbox.execute("SELECT count(*) FROM items WHERE name LIKE '%x'").rows == [(0,)]


def test_a_file_locked_by_another_program_is_the_database_s_fault(tmp_path: Path, shop) -> None:
    """Another process holding the file is a ``connection`` error (db_error, run again on
    --resume), not the agent's SQL failing."""
    *_, sandbox = shop
    other = sqlite3.connect(tmp_path / "dbs" / "shop.db", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        result = sandbox.execute("SELECT count(*) FROM items")
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert result.error_kind == "connection", result
    assert sandbox.execute("SELECT count(*) FROM items").rows == [(3,)]
