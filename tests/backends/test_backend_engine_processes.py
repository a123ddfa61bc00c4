"""The in-process engines (SQLite, DuckDB) against an agent that attacks their budgets and the
file, at the backend level: one expensive built-in function call must be stopped within a small
multiple of its budget (the engine runs in a child process killed at its deadline), without
growing the harness's memory; a result is cut at its byte cap before it is held; nothing a read
tries persists; golden work on a connection is not observable by the agent's SQL after it;
sequences and AUTOINCREMENT counters do not leak between executions nor into the file; and a
file changed after it was built is refused by the next provisioning, naming what changed.

The end-to-end versions, through a real ``evalbench run``, are in tests/attacks/test_attacks_files.py."""

from __future__ import annotations

import importlib.util
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalbench.backends import get_backend
from evalbench.backends.base import SandboxLimits
from evalbench.backends.setup import find_setup
from evalbench.config import DatabaseConfig
from evalbench.core.errors import ProvisioningError

BUDGET_S = 1.0
LIMITS = SandboxLimits(pool_size=2, statement_timeout_s=BUDGET_S, max_rows=1000, max_result_bytes=4 << 20)
STOPPED_WITHIN_S = 10 * BUDGET_S  # a small multiple of the budget (kill at budget + 1 s), on a loaded machine
SETUP = {
    "sqlite": "CREATE TABLE items (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, price NUMERIC);\n",
    "duckdb": "CREATE SEQUENCE item_ids START 100;\n"
              "CREATE TABLE items (id INTEGER DEFAULT nextval('item_ids') PRIMARY KEY, name VARCHAR, price DECIMAL(10, 2));\n",
}
ROWS = "".join(f"{i}, 'item {i}', {i}.5\n" for i in range(1, 21))
BUILT_COUNTERS = {"sqlite": [("items", 20)], "duckdb": [("item_ids", None)]}  # as setup leaves them
INSERT = "INSERT INTO items (name, price) VALUES ('new', 2.5)"
# one call of a built-in function that never looks at the engine's interrupt, each far past 1 s
# (minutes, or gigabytes, when run in the harness's process)
EXPENSIVE = {
    "sqlite": [
        "SELECT instr(printf('%.*c', 16000000, 'a'), printf('%.*c', 8000000, 'a') || 'b')",
        "SELECT replace(printf('%.*c', 4000000, 'a'), printf('%.*c', 2000000, 'a') || 'b', 'x') IS NULL",
        "SELECT printf('%.*c', 16000000, 'a') LIKE '%' || printf('%.*c', 40000, 'a') || 'b'",
        "SELECT instr(hex(zeroblob(8000000)), hex(zeroblob(4000000)) || '1')",
    ],
    "duckdb": [
        "SELECT damerau_levenshtein(repeat('a', 40000), repeat('b', 40000))",
        "SELECT jaro_similarity(repeat('ab', 3000000), repeat('ba', 3000000))",
        "SELECT length(repeat('ab', 1500000000))",
        "SELECT length(format('{:>1900000000}', 'x'))",
        "SELECT length(lpad('x', 2000000000, 'ab'))",
        "SELECT regexp_replace(repeat('a', 100000000), 'a', 'bb', 'g') IS NULL",
        "SELECT len(list_sort(range(300000000)))",
    ],
}
BUSY = {"sqlite": EXPENSIVE["sqlite"][0], "duckdb": EXPENSIVE["duckdb"][1]}  # minutes of CPU, little memory
# statements that try to leave an object, a row or a counter behind from a read
PERSIST = {
    "sqlite": ["CREATE TEMP TABLE stolen AS SELECT 1", "EXPLAIN CREATE TABLE stolen AS SELECT 1",
               "WITH x AS (SELECT 1) INSERT INTO items (name) SELECT 'stolen' FROM x"],
    "duckdb": ["EXPLAIN ANALYZE CREATE TABLE stolen AS SELECT 1", "EXPLAIN ANALYZE CREATE TEMP TABLE stolen AS SELECT 1",
               "EXPLAIN ANALYZE INSERT INTO items (name) VALUES ('stolen')", "SELECT nextval('item_ids')",
               "EXPLAIN ANALYZE CREATE TEMP MACRO stolen() AS 1", "EXPLAIN ANALYZE CREATE SEQUENCE stolen",
               "EXPLAIN ANALYZE CREATE VIEW stolen AS SELECT 1", "SELECT * INTO stolen FROM items"],
}
OBJECTS = {
    "sqlite": "SELECT (SELECT count(*) FROM sqlite_master WHERE name = 'stolen') + "
              "(SELECT count(*) FROM sqlite_temp_master WHERE name = 'stolen') + "
              "(SELECT count(*) FROM items WHERE name = 'stolen')",
    "duckdb": "SELECT (SELECT count(*) FROM duckdb_tables() WHERE table_name = 'stolen') + "
              "(SELECT count(*) FROM duckdb_views() WHERE view_name = 'stolen') + "
              "(SELECT count(*) FROM duckdb_functions() WHERE function_name = 'stolen') + "
              "(SELECT count(*) FROM duckdb_sequences() WHERE sequence_name = 'stolen') + "
              "(SELECT count(*) FROM items WHERE name = 'stolen')",
}


def _config(name: str, tmp_path: Path, **extra: Any) -> DatabaseConfig:
    return DatabaseConfig(database_name="shop", dialect=name, database_path=str(tmp_path / "dbs"), **extra)


def _setup(name: str, tmp_path: Path) -> Any:
    root = tmp_path / "setup" / "shop"
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    (root / name / "setup.sql").write_text(SETUP[name])
    (root / "data" / "items.csv").write_text(ROWS)
    return find_setup(tmp_path / "setup", "shop", name, get_backend(name).setup_dialects())


def _open(name: str, tmp_path: Path) -> tuple[Any, Any]:
    if name == "duckdb" and importlib.util.find_spec("duckdb") is None:
        pytest.skip("duckdb is not installed (pip install 'evalbench[duckdb]')")
    backend = get_backend(name)
    config = _config(name, tmp_path)
    provisioned = backend.provision(config, _setup(name, tmp_path), None)
    return backend.open_sandbox(config, provisioned, LIMITS, None), provisioned


@pytest.fixture(params=["sqlite", "duckdb"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Any, Any]]:
    """A sandbox of its own (the test may close it)."""
    sandbox, provisioned = _open(request.param, tmp_path)
    try:
        yield request.param, sandbox, provisioned
    finally:
        sandbox.close()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One sandbox per engine for the attacks that leave it as it was."""
    opened: dict[str, Any] = {}
    try:
        for name in ("sqlite", "duckdb"):
            if name == "duckdb" and importlib.util.find_spec("duckdb") is None:
                continue
            opened[name] = _open(name, tmp_path_factory.mktemp(name))[0]
        yield opened
    finally:
        for sandbox in opened.values():
            sandbox.close()


def _high_water_mb() -> int:
    """The most memory this process (the harness, here) has held (VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    return 0


def _count(sandbox: Any) -> int:
    result = sandbox.execute("SELECT count(*) FROM items")
    assert result.ok, result.error
    return result.rows[0][0]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "sql"), [(name, sql) for name, attacks in EXPENSIVE.items() for sql in attacks])
def test_an_expensive_function_call_is_stopped_within_a_small_multiple_of_its_budget(shared: dict[str, Any], name: str,
                                                                                    sql: str) -> None:
    if name not in shared:
        pytest.skip("duckdb is not installed")
    sandbox = shared[name]
    memory = _high_water_mb()
    started = time.monotonic()
    result = sandbox.execute(sql)
    elapsed = time.monotonic() - started
    assert elapsed < STOPPED_WITHIN_S, f"{sql}: ran {elapsed:.1f}s on a {BUDGET_S}s budget"
    assert not result.ok and result.error_kind in ("timeout", "sql"), result
    if result.error_kind == "sql":
        assert "memory" in result.error.lower() or "ended" in result.error, result.error
    assert _high_water_mb() - memory < 300, "the harness's own memory grew with the attack"
    assert _count(sandbox) == 20  # the sandbox goes on


def test_interrupt_stops_a_function_call_that_never_looks(engine: Any, tmp_path: Path) -> None:
    name, _, provisioned = engine
    backend = get_backend(name)
    patient = backend.open_sandbox(_config(name, tmp_path), provisioned,
                                   SandboxLimits(pool_size=1, statement_timeout_s=120.0, max_rows=10), None)
    try:
        threading.Timer(0.5, patient.interrupt).start()
        started = time.monotonic()
        result = patient.execute(EXPENSIVE[name][0])
        assert time.monotonic() - started < 10 and result.error_kind == "timeout", result
        assert _count(patient) == 20
    finally:
        patient.close()


@pytest.mark.parametrize("name", ["sqlite", "duckdb"])
def test_a_result_is_cut_at_its_byte_cap_before_it_is_held(shared: dict[str, Any], name: str) -> None:
    if name not in shared:
        pytest.skip("duckdb is not installed")
    sandbox = shared[name]
    rows = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300) "
            "SELECT i, printf('%.*c', 1000000, 'x') FROM n") if name == "sqlite" else \
        "SELECT i, repeat('x', 1000000) FROM range(300) t(i)"
    memory = _high_water_mb()
    result = sandbox.execute(rows)
    assert result.ok and result.truncated and result.truncated_at_bytes, result.error
    assert 1 <= len(result.rows) <= LIMITS.max_result_bytes // 1000000
    assert _high_water_mb() - memory < 100, "300 MB of rows were held before the cap"


def _counters(name: str, path: Path) -> list[tuple[Any, ...]]:
    """The file's sequences (DuckDB) or AUTOINCREMENT counters (SQLite), read beside the harness."""
    if name == "sqlite":
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            found = conn.execute("SELECT name, seq FROM sqlite_sequence ORDER BY name").fetchall()
        conn.close()
        return found
    import duckdb

    with duckdb.connect(str(path), read_only=True) as conn:
        return conn.execute("SELECT sequence_name, last_value FROM duckdb_sequences() ORDER BY ALL").fetchall()


def test_nothing_a_read_tries_persists(engine: Any, tmp_path: Path) -> None:
    name, sandbox, provisioned = engine
    for sql in PERSIST[name]:
        sandbox.execute(sql)  # refused, or it ran in a transaction that was rolled back
        sandbox.execute(sql, preprocess=["SELECT 1"])  # a read after preprocess SQL runs on the writer
        for mode in ("read", "read", "read", "write"):  # every reader of the pool, and the writer
            seen = sandbox.execute(OBJECTS[name], mode=mode)
            assert seen.ok and seen.rows == [(0,)], (sql, mode, seen)
    sandbox.close()
    assert _counters(name, provisioned.handle) == BUILT_COUNTERS[name]
    reused = get_backend(name).provision(_config(name, tmp_path), _setup(name, tmp_path), None)
    assert reused.action == "reused"  # the file's catalog is as it was built


def test_golden_work_on_a_connection_is_not_observable_after_it(engine: Any) -> None:
    name, sandbox, _ = engine
    assert sandbox.execute(INSERT, mode="write", actor="golden").ok
    if name == "sqlite":
        seen = sandbox.execute("SELECT changes(), total_changes(), last_insert_rowid()", mode="write", actor="agent")
        assert seen.rows == [(0, 0, 0)], "the agent's connection counts the golden INSERT"
    else:  # a sequence's current value is the instance's: the golden INSERT's id, rolled back or not
        seen = sandbox.execute("SELECT currval('item_ids')", mode="write", actor="agent")
        assert not seen.ok and "currval" in seen.error, "the agent reads the id the golden INSERT took"
        # the buffers a golden read loads are the instance's too (which tables it read, how much)
        buffers = "SELECT sum(memory_usage_bytes) FROM duckdb_memory() WHERE tag = 'BASE_TABLE'"
        before = sandbox.execute(buffers)
        assert sandbox.execute("SELECT count(*) FROM items i, items j, range(100) WHERE i.name < j.name",
                               actor="golden").ok
        assert sandbox.execute(buffers).rows == before.rows, "the agent sees the buffers of the golden read"


def test_a_running_golden_query_is_invisible_to_agent_sql(engine: Any) -> None:
    """DuckDB shows every connection of an instance, and its statistics, in
    duckdb_live_query_metrics(): golden SQL running beside the agent's must not be among them
    (an engine process holds the harness's default connection and the one executing, nothing else)."""
    name, sandbox, _ = engine
    if name == "sqlite":
        pytest.skip("SQLite has no view of other connections")
    connections = "SELECT count(DISTINCT connection_id) FROM duckdb_live_query_metrics()"
    alone = sandbox.execute(connections)
    slow = threading.Thread(target=sandbox.execute, args=("SELECT count(*) FROM range(100000000000)",),
                            kwargs={"actor": "golden"})
    slow.start()
    try:
        time.sleep(0.3)
        beside = sandbox.execute(connections)
    finally:
        slow.join()
    assert alone.ok and beside.rows == alone.rows and beside.rows[0][0] <= 2, (alone, beside)


def test_counters_do_not_leak_between_executions_nor_into_the_file(engine: Any, tmp_path: Path) -> None:
    name, sandbox, provisioned = engine
    returning = f"{INSERT} RETURNING id"
    ids = [sandbox.execute(returning, mode="write").rows for _ in range(3)]
    assert ids[0] == ids[1] == ids[2] and ids[0], ids
    read_ids = [sandbox.execute("SELECT count(*) FROM items", preprocess=[INSERT]).rows for _ in range(2)]
    assert read_ids[0] == read_ids[1] == [(21,)]
    with sandbox.write_transaction() as tx:
        _, agent = tx.run([INSERT], lambda t: t.fingerprint([INSERT]))
        _, golden = tx.run([INSERT], lambda t: t.fingerprint([INSERT]))
        assert agent == golden, "an agent script identical to the golden one must leave the same state"
    assert sandbox.execute(returning, mode="write").rows == ids[0]
    sandbox.close()
    assert _counters(name, provisioned.handle) == BUILT_COUNTERS[name]
    reused = get_backend(name).provision(_config(name, tmp_path), _setup(name, tmp_path), None)
    assert reused.action == "reused"  # the file's counters are as setup left them


def _change(name: str, path: Path, sql: str) -> None:
    if name == "sqlite":
        with sqlite3.connect(path) as conn:
            conn.execute(sql)
        conn.close()
    else:
        import duckdb

        with duckdb.connect(str(path)) as conn:
            conn.execute(sql).fetchall()


@pytest.mark.parametrize("change", ["table", "rows", "counter"])
def test_a_file_changed_after_it_was_built_is_refused(engine: Any, tmp_path: Path, change: str) -> None:
    name, sandbox, provisioned = engine
    sandbox.close()
    backend, setup = get_backend(name), _setup(name, tmp_path)
    assert backend.provision(_config(name, tmp_path), setup, None).action == "reused"
    sql, named = {
        "table": ("CREATE TABLE stolen (x INTEGER)", "stolen was added"),
        "rows": ("DELETE FROM items WHERE id = 3", "20 rows when built, 19 rows now"),
        "counter": ("SELECT nextval('item_ids')" if name == "duckdb" else
                    "INSERT INTO items (name) VALUES ('x')", "counter of"),
    }[change]
    if change == "counter" and name == "sqlite":
        _change(name, provisioned.handle, sql)
        sql = "DELETE FROM items WHERE name = 'x'"  # the row goes, the AUTOINCREMENT counter stays
    _change(name, provisioned.handle, sql)
    with pytest.raises(ProvisioningError, match="was changed after evalbench built it") as refused:
        backend.provision(_config(name, tmp_path), setup, None)
    assert named in str(refused.value) and "allow_destructive_setup" in str(refused.value)
    rebuilt = backend.provision(_config(name, tmp_path, allow_destructive_setup=True), setup, None)
    assert rebuilt.action == "rebuilt"
    assert backend.provision(_config(name, tmp_path), setup, None).action == "reused"


def _engine_processes(harness: int) -> list[int]:
    """Live engine processes started by the process ``harness`` (its pid is on their command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = next(line for line in (entry / "status").read_text().splitlines() if line.startswith("State:"))
        except (OSError, StopIteration):
            continue
        if b"evalbench.backends.engine_server" in b" ".join(argv) and str(harness).encode() in argv and "Z" not in state:
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
@pytest.mark.parametrize("name", ["sqlite", "duckdb"])
def test_engine_processes_die_with_a_harness_killed_outright(tmp_path: Path, name: str) -> None:
    if name == "duckdb" and importlib.util.find_spec("duckdb") is None:
        pytest.skip("duckdb is not installed")
    # a harness whose reader is busy in a call that never looks at its interrupt (only the death
    # signal stops it; an idle engine process ends anyway when its pipe closes)
    script = ("import sys, threading, time\nfrom pathlib import Path\n"
              "from tests.backends.test_backend_engine_processes import BUSY, INSERT, _open\n"
              "sandbox, _ = _open(sys.argv[1], Path(sys.argv[2]))\nsandbox.execute(INSERT, mode='write')\n"
              "threading.Thread(target=sandbox.execute, args=(BUSY[sys.argv[1]],), daemon=True).start()\n"
              "time.sleep(0.3)\nprint('ready', flush=True)\ntime.sleep(120)\n")
    with subprocess.Popen([sys.executable, "-c", script, name, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                          cwd=Path(__file__).resolve().parents[2]) as harness:
        try:
            assert harness.stdout is not None and harness.stdout.readline().strip() == "ready"
            children = _engine_processes(harness.pid)
            assert len(children) >= 2, children  # a reader and the writer
        finally:
            harness.kill()
    give_up = time.monotonic() + 10
    while _engine_processes(harness.pid) and time.monotonic() < give_up:
        time.sleep(0.1)
    assert _engine_processes(harness.pid) == [], "engine processes outlived their harness"
