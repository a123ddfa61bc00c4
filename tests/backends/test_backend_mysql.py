"""The MySQL / MariaDB backend for real, on the server EVALBENCH_TEST_MYSQL_URL names (default
mysql://root@127.0.0.1:3306; skipped when it does not answer): provisioning (and the mark in
evalbench_meta), the sandbox users' limits (no writes in read mode, no DDL in write mode, no
server files, no global settings), row cap, timeout, interrupt, rollback and the fingerprint.
Each test's databases get a random name and are dropped at the end."""

from __future__ import annotations

import os
import threading
import time
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

pymysql = pytest.importorskip("pymysql", reason="pymysql is not installed (pip install evalbench[mysql])")

from evalbench.backends import get_backend  # noqa: E402
from evalbench.backends.base import SandboxLimits  # noqa: E402
from evalbench.backends.mysql.identities import agent_user, golden_users  # noqa: E402
from evalbench.backends.mysql.provision import drop_database  # noqa: E402
from evalbench.backends.mysql.target import resolve_target  # noqa: E402
from evalbench.backends.setup import find_setup  # noqa: E402
from evalbench.config import DatabaseConfig  # noqa: E402
from evalbench.core.errors import ProvisioningError  # noqa: E402

URL = os.environ.get("EVALBENCH_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306")
LIMITS = SandboxLimits(pool_size=2, statement_timeout_s=1.0, max_rows=50)


def _server_answers() -> str | None:
    try:
        target = resolve_target(DatabaseConfig(database_name="x", dialect="mysql", url=URL))
        target.connect(timeout_s=2).close()
    except Exception as exc:  # noqa: BLE001 - any failure means: no server to test against
        return f"no MySQL/MariaDB server at {URL} ({exc})"
    return None


_UNAVAILABLE = _server_answers()
pytestmark = pytest.mark.skipif(_UNAVAILABLE is not None, reason=_UNAVAILABLE or "")


def _setup(tmp_path: Path, name: str, rows: int = 3) -> Path:
    root = tmp_path / "setup" / name
    (root / "mysql").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "mysql" / "setup.sql").write_text(
        "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(50), price DECIMAL(10, 2), added DATE) ENGINE=InnoDB;\n"
        "CREATE TABLE notes (item_id INT, note TEXT) ENGINE=InnoDB;\n"
        "CREATE VIEW cheap AS SELECT id FROM items WHERE price < 2;\n")
    (root / "data" / "items.csv").write_text("".join(f"{i}, 'item {i}', {i}.5, '2024-01-0{i}'\n" for i in range(1, rows + 1)))
    (root / "data" / "notes.csv").write_text("1, 'fresh'\n")
    return tmp_path / "setup"


def _admin() -> Any:
    return resolve_target(DatabaseConfig(database_name="x", dialect="mysql", url=URL)).connect()


@pytest.fixture
def name() -> Any:
    database = f"evb_test_{uuid.uuid4().hex[:10]}"
    yield database
    admin = _admin()
    try:
        drop_database(admin, database)
    finally:
        admin.close()


def _config(name: str, **extra: Any) -> DatabaseConfig:
    return DatabaseConfig(database_name=name, db_type="mariadb", dialect="mysql", url=URL, **extra)


@pytest.fixture
def shop(tmp_path: Path, name: str):
    backend = get_backend("mysql")
    config = _config(name)
    setup = find_setup(_setup(tmp_path, name), name, "mysql", backend.setup_dialects())
    provisioned = backend.provision(config, setup, None)
    sandbox = backend.open_sandbox(config, provisioned, LIMITS, None)
    yield backend, config, setup, provisioned, sandbox
    sandbox.close()


def _count(name: str, table: str = "items") -> int:
    admin = _admin()
    try:
        with admin.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM `{name}`.`{table}`")
            return cursor.fetchone()[0]
    finally:
        admin.close()


def test_provisioning_creates_reuses_and_rebuilds(tmp_path: Path, name: str) -> None:
    backend = get_backend("mariadb")
    config = _config(name)
    setup = find_setup(_setup(tmp_path, name), name, "mysql", backend.setup_dialects())
    assert "will be created" in backend.probe(config, setup, None, 5)
    provisioned = backend.provision(config, setup, None)
    assert provisioned.action == "created" and provisioned.rows_loaded == 4 and provisioned.sandbox_user == agent_user(name, 0).replace("a0_", "a<n>_")
    assert provisioned.warning is None
    assert backend.provision(config, setup, None).action == "reused"
    assert "logged in" in backend.probe(config, setup, None, 5)
    (tmp_path / "setup" / name / "data" / "items.csv").write_text("1, 'only', 1.0, NULL\n")
    again = backend.provision(config, find_setup(tmp_path / "setup", name, "mysql", backend.setup_dialects()), None)
    assert again.action == "rebuilt" and _count(name) == 1


def test_a_database_evalbench_did_not_create_is_never_dropped(tmp_path: Path, name: str) -> None:
    backend = get_backend("mysql")
    admin = _admin()
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}`")
        cursor.execute(f"CREATE TABLE `{name}`.precious (x INT) ENGINE=InnoDB")
        cursor.execute(f"INSERT INTO `{name}`.precious VALUES (7)")
    admin.close()
    setup = find_setup(_setup(tmp_path, name), name, "mysql", backend.setup_dialects())
    with pytest.raises(ProvisioningError, match="allow_destructive_setup"):
        backend.provision(_config(name), setup, None)
    provisioned = backend.provision(_config(name), None, None)  # no setup: used as it is
    sandbox = backend.open_sandbox(_config(name), provisioned, LIMITS, None)
    try:
        assert provisioned.action == "external" and sandbox.execute("SELECT x FROM precious").rows == [(7,)]
    finally:
        sandbox.close()
    assert backend.provision(_config(name, allow_destructive_setup=True), setup, None).action == "rebuilt"
    assert _count(name) == 3


def test_setup_errors_name_file_and_line(tmp_path: Path, name: str) -> None:
    backend = get_backend("mysql")
    setup_dir = _setup(tmp_path, name)
    (setup_dir / name / "data" / "items.csv").write_text("1, 'a', 1.0, NULL\n2, 'b'\n")
    with pytest.raises(ProvisioningError, match=r"items\.csv:2"):
        backend.provision(_config(name), find_setup(setup_dir, name, "mysql", backend.setup_dialects()), None)
    (setup_dir / name / "mysql" / "setup.sql").write_text("CREATE TABLE a (x INT);\n\nCREATE TABLE oops (;\n")
    with pytest.raises(ProvisioningError, match=r"setup\.sql:3"):
        backend.provision(_config(name), find_setup(setup_dir, name, "mysql", backend.setup_dialects()), None)


def test_reads_return_columns_typed_rows_and_respect_the_row_cap(shop) -> None:
    backend, _, _, _, sandbox = shop
    result = sandbox.execute("SELECT id, name, price, added FROM items ORDER BY id")
    assert result.ok and result.columns == ["id", "name", "price", "added"]
    first = result.rows[0]
    assert (first[0], first[1], str(first[2]), first[3].isoformat()) == (1, "item 1", "1.50", "2024-01-01")
    capped = sandbox.execute("WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 900) SELECT * FROM r")
    assert capped.ok and capped.truncated and len(capped.rows) == 50
    assert sandbox.execute("SELECT count(*) FROM items").rows == [(3,)]  # the cut connection was replaced
    schema = backend.describe_schema(sandbox)
    assert "CREATE TABLE `items`" in schema and "CREATE VIEW `cheap`" in schema


def test_errors_are_classified(shop) -> None:
    sandbox = shop[4]
    syntax = sandbox.execute("SELECT FROM WHERE")
    assert syntax.error_kind == "syntax" and "syntax" in syntax.error
    missing = sandbox.execute("SELECT * FROM nope")
    assert missing.error_kind == "sql" and "nope" in missing.error
    started = time.monotonic()
    slow = sandbox.execute("SELECT SLEEP(30)")
    assert slow.error_kind == "timeout" and time.monotonic() - started < 5, slow
    busy = sandbox.execute("SELECT BENCHMARK(10000000000, MD5('x'))")  # MariaDB ends it with a result and a warning
    assert busy.error_kind == "timeout" and busy.rows == [], busy
    warned = sandbox.execute("SELECT CAST('12abc' AS UNSIGNED)")  # a warning that is not the time limit
    assert warned.ok and warned.rows == [(12,)]
    assert sandbox.execute("SELECT 1").rows == [(1,)]


@pytest.mark.parametrize("sql", [
    "INSERT INTO items VALUES (9, 'x', 1, NULL)", "UPDATE items SET price = 0", "DELETE FROM items", "DROP TABLE items",
    "SELECT 1; DROP TABLE items", "COMMIT", "SET GLOBAL max_connections = 1", "SET SESSION max_statement_time = 0",
    "LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE notes", "LOCK TABLES items WRITE", "CALL mysql.nothing()",
    "SELECT * FROM items LOCK IN SHARE MODE", "SELECT * FROM items FOR SHARE", "SELECT id FROM (SELECT id FROM items FOR UPDATE) x",
    "SELECT * FROM (SELECT * FROM items /*! LOCK IN SHARE MODE */) x", "SELECT * FROM (SELECT * FROM items /*M!100000 FOR SHARE */) x",
])
@pytest.mark.slow
def test_read_mode_refuses_writes_and_everything_else(shop, sql: str) -> None:
    _, config, _, _, sandbox = shop
    result = sandbox.execute(sql)
    assert result.error_kind == "forbidden", result
    assert _count(config.database_name) == 3


def test_server_files_and_other_schemas_are_out_of_reach(shop) -> None:
    _, config, _, _, sandbox = shop
    assert sandbox.execute("SELECT LOAD_FILE('/etc/passwd')").rows == [(None,)]
    outfile = sandbox.execute("SELECT * FROM items INTO OUTFILE '/tmp/evalbench-mysql-leak.txt'")
    assert outfile.error_kind == "sql" and "FILE" in outfile.error
    assert sandbox.execute("SELECT * FROM mysql.user").error_kind == "sql"
    assert sandbox.execute("SELECT * FROM evalbench_meta.logins").error_kind == "sql"
    agent = sandbox.execute("SELECT CURRENT_USER()").rows[0][0]
    assert agent.split("@")[0] in {agent_user(config.database_name, i) for i in range(LIMITS.pool_size)}
    golden = sandbox.execute("SELECT CURRENT_USER()", actor="golden").rows[0][0]
    assert golden.startswith(golden_users(config.database_name)[0] + "@")


def test_write_mode_is_rolled_back_and_refuses_ddl(shop) -> None:
    _, config, _, _, sandbox = shop
    result = sandbox.execute(["INSERT INTO items VALUES (9, 'new', 1, NULL)", "SELECT count(*) FROM items"], mode="write")
    assert result.ok and result.rows == [(4,)]
    for ddl in ("DROP TABLE notes", "CREATE TABLE t2 (x INT)", "ALTER TABLE items ADD COLUMN y INT", "TRUNCATE TABLE notes"):
        refused = sandbox.execute(ddl, mode="write")
        assert refused.error_kind == "forbidden" and "DDL" in refused.error, refused
    assert sandbox.execute("COMMIT", mode="write").error_kind == "forbidden"
    assert sandbox.execute("SELECT count(*) FROM items", preprocess=["DELETE FROM items WHERE id = 1"]).rows == [(2,)]
    stopped = sandbox.execute("SELECT count(*) FROM items", preprocess=["DELETE FROM items WHERE id = 1", "SELECT nope",
                                                                         "DELETE FROM items"], preprocess_errors="stop")
    assert stopped.ok and stopped.rows == [(2,)]
    assert sandbox.execute("SELECT 1", preprocess=["SELECT nope"]).error_kind == "preprocess"
    assert _count(config.database_name) == 3 and _count(config.database_name, "notes") == 1


def test_write_transaction_fingerprints_changes_and_undoes_each_script(shop) -> None:
    _, config, _, _, sandbox = shop
    with sandbox.write_transaction(["DELETE FROM notes"]) as tx:
        assert tx.preprocess_error is None
        before = tx.fingerprint([])
        assert before["notes"][0] == 0 and before["items"][0] == 3
        result, after = tx.run(["UPDATE items SET price = 0 WHERE id = 2"], lambda t: t.fingerprint([]))
        assert result.ok and after["items"] != before["items"] and after["notes"] == before["notes"]
        _, same = tx.run(["UPDATE items SET price = price WHERE id = 2"], lambda t: t.fingerprint([]))
        assert same == before
        refused, _ = tx.run(["CREATE TABLE extra (x INT)"])
        assert refused.error_kind == "forbidden"
        assert tx.fingerprint([]) == before
    assert _count(config.database_name) == 3 and _count(config.database_name, "notes") == 1


def test_non_transactional_tables_refuse_write_mode(tmp_path: Path, name: str) -> None:
    backend = get_backend("mysql")
    setup_dir = _setup(tmp_path, name)
    (setup_dir / name / "mysql" / "setup.sql").write_text("CREATE TABLE items (id INT, name VARCHAR(50), price DECIMAL(10, 2), "
                                                          "added DATE) ENGINE=MyISAM;\nCREATE TABLE notes (item_id INT, note TEXT);\n")
    provisioned = backend.provision(_config(name), find_setup(setup_dir, name, "mysql", backend.setup_dialects()), None)
    assert provisioned.warning and "items" in provisioned.warning
    sandbox = backend.open_sandbox(_config(name), provisioned, LIMITS, None)
    try:
        assert sandbox.execute("DELETE FROM items", mode="write").error_kind == "forbidden"
        assert sandbox.execute("SELECT count(*) FROM items").rows == [(3,)]
    finally:
        sandbox.close()


def test_interrupt_stops_running_statements(shop) -> None:
    backend, config, _, provisioned, _ = shop
    long = backend.open_sandbox(config, provisioned, SandboxLimits(pool_size=1, statement_timeout_s=60.0, max_rows=10), None)
    try:
        results = []
        worker = threading.Thread(target=lambda: results.append(long.execute("SELECT SLEEP(30)")))
        started = time.monotonic()
        worker.start()
        time.sleep(0.5)
        long.interrupt()
        worker.join(10)
        assert not worker.is_alive() and time.monotonic() - started < 10
        assert results[0].error_kind == "timeout" or results[0].rows == [(1,)]  # SLEEP returns 1 when killed
    finally:
        long.close()


def test_another_evaluated_database_is_out_of_reach(tmp_path: Path, shop) -> None:
    backend, _, _, _, sandbox = shop
    other = f"evb_test_{uuid.uuid4().hex[:10]}"
    try:
        backend.provision(_config(other), find_setup(_setup(tmp_path / "other", other), other, "mysql",
                                                     backend.setup_dialects()), None)
        assert _count(other) == 3
        leak = sandbox.execute(f"SELECT count(*) FROM `{other}`.items")
        assert leak.error_kind == "sql" and "denied" in leak.error
    finally:
        admin = _admin()
        try:
            drop_database(admin, other)
        finally:
            admin.close()


def test_a_connection_the_server_closed_is_replaced(shop) -> None:
    sandbox = shop[4]
    thread = sandbox.execute("SELECT CONNECTION_ID()").rows[0][0]
    admin = _admin()
    try:
        with admin.cursor() as cursor:
            cursor.execute(f"KILL {int(thread)}")
    finally:
        admin.close()
    time.sleep(0.2)
    again = sandbox.execute("SELECT CONNECTION_ID(), count(*) FROM items")
    assert again.ok and again.rows[0][0] != thread and again.rows[0][1] == 3


def test_a_whole_run_on_mysql(tmp_path: Path, name: str) -> None:
    """``evalbench run`` with the oracle agent: a Query item (exec_match) and a Management item
    (state_match) both succeed, and the manifest records the provisioning."""
    import json
    import subprocess
    import sys

    _setup(tmp_path, name)
    golden = {"Query": "SELECT name FROM items ORDER BY price LIMIT 1", "Management": "UPDATE items SET price = 2 WHERE id = 3"}
    records = [{"instance_id": f"shop_{i}", "dialect": "mysql", "selected_database": name, "query": "q", "amb_user_query": "q",
                "user_query_ambiguity": {}, "knowledge_ambiguity": [], "preprocess_sql": [], "clean_up_sqls": [],
                "test_cases": [], "category": category, "high_level": False, "sol_sql": [sql], "external_knowledge": [],
                "conditions": {"decimal": -1, "distinct": False, "order": False}, "difficulty_tier": "Simple"}
               for i, (category, sql) in enumerate(golden.items())]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "run.yaml").write_text(
        "dataset_config: data.jsonl\ndataset_format: bird-interact\nsetup_directory: setup\ndialects: [mysql]\n"
        f"model_config: {Path(__file__).resolve().parents[2] / 'configs' / 'agents' / 'oracle.yaml'}\n"
        "vuser_model_config: {vuser: rules}\nscorers: {exec_match: {}, executable: {}}\n"
        "primary: {Query: exec_match, Management: [test_cases, state_match]}\n"
        f"database_configs:\n  - {{db_type: mysql, dialect: mysql, database_name: {name}, url: '{URL}'}}\n")
    done = subprocess.run([sys.executable, "-m", "evalbench", "run", "--config", str(tmp_path / "run.yaml"), "--no-progress",
                           "--output-dir", str(tmp_path / "results")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = next((tmp_path / "results").iterdir())
    summary = (run_dir / "summary.csv").read_text()
    assert "exec_match,100,1,1" in summary and "state_match,100,1,1" in summary, summary
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["databases"][f"mysql/{name}"]["action"] == "created"
    admin = _admin()
    try:
        with admin.cursor() as cursor:  # the management item's UPDATE was rolled back
            cursor.execute(f"SELECT price FROM `{name}`.items WHERE id = 3")
            assert str(cursor.fetchone()[0]) == "3.50"
    finally:
        admin.close()


# --------------------------------------------------------------------------- issue 24: identities, privileges, counters, fingerprint, byte cap

POLL = ("WITH RECURSIVE tick(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM tick WHERE n < {polls}) "
        "SELECT COALESCE(GROUP_CONCAT(DISTINCT seen SEPARATOR ' | '), '') FROM (SELECT n, SLEEP(0.1) AS pause, "
        "(SELECT GROUP_CONCAT(p.INFO SEPARATOR ' | ') FROM information_schema.PROCESSLIST p "
        "WHERE p.ID + n <> CONNECTION_ID() + n AND p.INFO LIKE CONCAT('%', 'MARK', 'ER', '%')) AS seen FROM tick) polled "
        "WHERE pause = 0")  # the pause is used: the merged derived table keeps it, so each row waits


def _threads_running(marker: str) -> list[int]:
    admin = _admin()
    try:
        with admin.cursor() as cursor:
            cursor.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE %s AND INFO NOT LIKE %s",
                           (f"%{marker}%", "%information_schema%"))
            return [row[0] for row in cursor.fetchall()]
    finally:
        admin.close()


def test_agent_sql_sees_no_golden_statement_and_no_other_connection(shop) -> None:
    """Golden SQL, another agent connection of the sandbox and an agent connection of another
    sandbox (another process) each run a slow statement with a marker; agent SQL polling the
    process list sees none of them, nor can it explain them (MariaDB's SHOW EXPLAIN FOR)."""
    backend, config, _, provisioned, _ = shop
    slow = SandboxLimits(pool_size=2, statement_timeout_s=10.0, max_rows=10)
    sandbox, other, spy_box = (backend.open_sandbox(config, provisioned, slow, None) for _ in range(3))
    try:
        results: dict[str, Any] = {}
        runs = {"golden": lambda: sandbox.execute("SELECT SLEEP(3), 'MARKER golden'", actor="golden"),
                "agent": lambda: sandbox.execute("SELECT SLEEP(3), 'MARKER agent'"),
                "other": lambda: other.execute("SELECT SLEEP(3), 'MARKER other'"),
                "spy": lambda: spy_box.execute(POLL.format(polls=25))}
        threads = [threading.Thread(target=lambda k=k, f=f: results.__setitem__(k, f())) for k, f in runs.items()]
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        golden_threads = _threads_running("MARKER golden")
        assert golden_threads, "the golden statement is not running: the test proves nothing"
        explain = spy_box.execute(f"SHOW EXPLAIN FOR {golden_threads[0]}")
        listed = spy_box.execute("SHOW FULL PROCESSLIST")
        for thread in threads:
            thread.join(30)
        assert results["spy"].ok and results["spy"].rows == [("",)], results["spy"]
        assert results["spy"].elapsed_s > 2  # it polled the whole time the others ran
        assert not explain.ok, explain
        assert all("MARKER" not in str(row) for row in listed.rows), listed.rows
        assert results["golden"].ok and results["agent"].ok and results["other"].ok
    finally:
        for box in (sandbox, other, spy_box):
            box.close()


def test_every_pooled_agent_connection_has_a_user_of_its_own(shop) -> None:
    backend, config, _, provisioned, sandbox = shop
    other = backend.open_sandbox(config, provisioned, LIMITS, None)
    try:
        def users(box: Any, actor: str) -> set[str]:
            found: list[str] = []
            threads = [threading.Thread(target=lambda: found.append(
                box.execute("SELECT CURRENT_USER(), SLEEP(0.5)", actor=actor).rows[0][0])) for _ in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
            found.append(box.execute("SELECT CURRENT_USER()", mode="write", actor=actor).rows[0][0])
            return {user.split("@")[0] for user in found}

        mine, theirs, golden = users(sandbox, "agent"), users(other, "agent"), users(sandbox, "golden")
        assert len(mine) == len(theirs) == 3 and not mine & theirs
        assert golden == set(golden_users(config.database_name))
    finally:
        other.close()
    assert not _agent_users(config.database_name) & theirs  # dropped at close


def _agent_users(database: str) -> set[str]:
    from evalbench.backends.mysql.identities import agent_pattern

    admin = _admin()
    try:
        with admin.cursor() as cursor:
            cursor.execute("SELECT User FROM mysql.user WHERE User LIKE %s", (agent_pattern(database),))
            return {row[0] for row in cursor.fetchall()}
    finally:
        admin.close()


# every form of creating or changing an object, sent straight to the server (no admission check)
CREATIONS = [
    "CREATE TEMPORARY TABLE t_tmp (x INT)", "CREATE TABLE t_new (x INT)", "CREATE TABLE t_copy AS SELECT * FROM items",
    "CREATE VIEW v_new AS SELECT 1", "CREATE PROCEDURE p_new() SELECT 1", "CREATE FUNCTION f_new() RETURNS INT RETURN 1",
    "CREATE TRIGGER tr_new BEFORE INSERT ON items FOR EACH ROW SET NEW.price = 0",
    "CREATE EVENT e_new ON SCHEDULE EVERY 1 DAY DO SELECT 1", "CREATE INDEX i_new ON items (name)",
    "ALTER TABLE items ADD COLUMN y INT", "DROP VIEW cheap", "RENAME TABLE notes TO notes2", "TRUNCATE TABLE notes",
    "CREATE DATABASE evb_attack_new", "CREATE TABLE test.t_elsewhere (x INT)", "CREATE TABLE evalbench_meta.t_meta (x INT)",
    "GRANT SELECT ON items TO CURRENT_USER()", "SELECT * FROM items INTO OUTFILE '/tmp/evb_attack_outfile.csv'",
    "CREATE USER evb_attack_user", "LOCK TABLES items READ",
]


def test_no_identity_may_create_or_change_an_object(shop) -> None:
    """Deliverable 1 by privilege: every identity SQL runs as (agent reads and writes, golden
    reads and writes) is refused every kind of DDL, in every database, even outside a transaction."""
    _, config, _, _, sandbox = shop
    identities = [*sandbox.harness.leased, sandbox.logins.golden_read, sandbox.logins.golden_write]
    for identity in identities:
        conn = sandbox.target.connect(identity.user, identity.password, config.database_name)
        try:
            with conn.cursor() as cursor:
                cursor.execute("SHOW GRANTS")
                grants = [row[0] for row in cursor.fetchall()]
                assert len(grants) == 2 and grants[0].startswith("GRANT USAGE ON *.*"), grants
                assert grants[1].startswith(("GRANT SELECT, SHOW VIEW ON", "GRANT SELECT, INSERT, UPDATE, DELETE ON")), grants
                for statement in CREATIONS:
                    with pytest.raises(pymysql.err.MySQLError):
                        cursor.execute(statement)
                for schema in ("performance_schema.threads", "sys.processlist", "mysql.user", "evalbench_meta.logins"):
                    with pytest.raises(pymysql.err.MySQLError):
                        cursor.execute(f"SELECT * FROM {schema}")
        finally:
            conn.close()
    assert not Path("/tmp/evb_attack_outfile.csv").exists()


@pytest.mark.parametrize("plant, read", [
    ("SELECT 'planted' INTO @stash", "SELECT @stash"),
    ("SELECT @stash := 'planted'", "SELECT @stash"),
    ("WITH x AS (SELECT 'planted' AS v) SELECT v FROM x INTO @stash", "SELECT @stash"),
    ("SELECT GET_LOCK('evb_attack_lock', 0)", "SELECT IS_USED_LOCK('evb_attack_lock') IS NOT NULL"),
])
def test_nothing_an_execution_sets_reaches_the_next_on_the_same_connection(shop, plant: str, read: str) -> None:
    backend, config, _, provisioned, _ = shop
    single = backend.open_sandbox(config, provisioned, SandboxLimits(pool_size=1, statement_timeout_s=5.0, max_rows=10), None)
    try:
        thread = single.execute("SELECT CONNECTION_ID()").rows[0][0]
        assert single.execute(plant).ok
        seen = single.execute(f"{read}, CONNECTION_ID()")
        assert seen.rows[0][1] == thread  # the same pooled connection
        assert seen.rows[0][0] in (None, 0), seen
    finally:
        single.close()


def _counter_setup(tmp_path: Path, name: str, mariadb: bool) -> Path:
    setup = _setup(tmp_path, name)
    script = setup / name / "mysql" / "setup.sql"
    script.write_text(script.read_text() + "CREATE TABLE log (id INT AUTO_INCREMENT PRIMARY KEY, note VARCHAR(20)) ENGINE=InnoDB;\n"
                      "INSERT INTO log (note) VALUES ('a'), ('b');\n" + ("CREATE SEQUENCE tick START WITH 100;\n" if mariadb else ""))
    return setup


def _counters(name: str) -> dict[str, Any]:
    """What the server says of the counters: information_schema, SHOW TABLE STATUS, the sequence."""
    admin = _admin()
    try:
        with admin.cursor() as cursor:
            with suppress(pymysql.err.MySQLError):
                cursor.execute("SET SESSION information_schema_stats_expiry = 0")  # MySQL 8
            cursor.execute("SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'log'",
                           (name,))
            found: dict[str, Any] = {"information_schema": cursor.fetchone()[0]}
            cursor.execute(f"SHOW TABLE STATUS FROM `{name}` LIKE 'log'")
            found["table_status"] = cursor.fetchone()[10]  # Auto_increment
            with suppress(pymysql.err.MySQLError):
                cursor.execute(f"SELECT next_not_cached_value FROM `{name}`.tick")
                found["sequence"] = cursor.fetchone()[0]
            return found
    finally:
        admin.close()


def _is_mariadb() -> bool:
    admin = _admin()
    try:
        with admin.cursor() as cursor:
            cursor.execute("SELECT VERSION()")
            return "mariadb" in cursor.fetchone()[0].lower()
    finally:
        admin.close()


def test_counters_are_where_setup_left_them_for_every_write(tmp_path: Path, name: str) -> None:
    """Deliverable 4: rolled-back inserts advance AUTO_INCREMENT (and NEXTVAL a sequence); each
    write, each state_match script, and each of two sandboxes (two processes) writing at once
    starts from setup's counters, and the server's counters are setup's afterwards."""
    mariadb = _is_mariadb()
    backend = get_backend("mysql")
    setup = find_setup(_counter_setup(tmp_path, name, mariadb), name, "mysql", backend.setup_dialects())
    provisioned = backend.provision(_config(name), setup, None)
    before = _counters(name)
    assert before["information_schema"] == 3 and before.get("sequence", 100) == 100
    insert = ["INSERT INTO log (note) VALUES ('x')", "SELECT LAST_INSERT_ID()"]
    tick = ["INSERT INTO log (id, note) VALUES (NEXT VALUE FOR tick, 'y')", "SELECT MAX(id) FROM log"]
    boxes = [backend.open_sandbox(_config(name), provisioned, LIMITS, None) for _ in range(2)]
    try:
        seen: list[Any] = []
        work = [lambda box=box: seen.append(box.execute(insert, mode="write").rows) for box in boxes for _ in range(3)]
        work += [lambda box=box: seen.append(box.execute(insert, actor="golden", mode="write").rows) for box in boxes]
        threads = [threading.Thread(target=job) for job in work]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert seen == [[(3,)]] * len(work)
        if mariadb:
            assert [boxes[0].execute(tick, mode="write").rows for _ in range(2)] == [[(100,)]] * 2
        with boxes[1].write_transaction() as tx:
            script = tick if mariadb else insert[:1]
            first = tx.run(script[:1], lambda t: t.fingerprint([]))
            second = tx.run(script[:1], lambda t: t.fingerprint([]))
            assert first[0].ok and first[1] == second[1] and first[1]["log"] != tx.fingerprint([])["log"]
    finally:
        for box in boxes:
            box.close()
    assert _counters(name) == before


def test_counters_a_stopped_run_left_advanced_are_put_back_at_provisioning(tmp_path: Path, name: str) -> None:
    mariadb = _is_mariadb()
    backend = get_backend("mysql")
    setup = find_setup(_counter_setup(tmp_path, name, mariadb), name, "mysql", backend.setup_dialects())
    backend.provision(_config(name), setup, None)
    before = _counters(name)
    admin = _admin()
    try:
        with admin.cursor() as cursor:
            cursor.execute("START TRANSACTION")
            cursor.execute(f"INSERT INTO `{name}`.log (note) VALUES ('lost'), ('lost')")
            if mariadb:
                cursor.execute(f"SELECT NEXTVAL(`{name}`.tick)")
            cursor.execute("ROLLBACK")
    finally:
        admin.close()
    assert _counters(name) != before
    assert backend.provision(_config(name), setup, None).action == "reused"
    assert _counters(name) == before


def test_a_database_changed_after_setup_is_refused_and_rebuilt_when_allowed(tmp_path: Path, name: str) -> None:
    backend = get_backend("mysql")
    setup = find_setup(_setup(tmp_path, name), name, "mysql", backend.setup_dialects())
    backend.provision(_config(name), setup, None)
    changes = [f"CREATE TABLE `{name}`.intruder (x INT)", f"CREATE OR REPLACE VIEW `{name}`.cheap AS SELECT 1 AS id",
               f"CREATE TRIGGER `{name}`.sneaky BEFORE INSERT ON `{name}`.notes FOR EACH ROW SET NEW.note = 'x'",
               f"ALTER TABLE `{name}`.items ADD COLUMN extra INT"]
    for change in changes:
        admin = _admin()
        try:
            with admin.cursor() as cursor:
                cursor.execute(change)
        finally:
            admin.close()
    with pytest.raises(ProvisioningError) as refused:
        backend.provision(_config(name), setup, None)
    message = str(refused.value)
    for named in ("table `intruder` added", "view `cheap` changed", "trigger `sneaky` added", "table `items` changed",
                  "allow_destructive_setup"):
        assert named in message, message
    assert backend.provision(_config(name, allow_destructive_setup=True), setup, None).action == "rebuilt"
    assert backend.provision(_config(name), setup, None).action == "reused"


def test_grants_that_reach_every_user_are_refused(tmp_path: Path, name: str) -> None:
    from evalbench.core.errors import SandboxError

    backend = get_backend("mysql")
    setup = find_setup(_setup(tmp_path, name), name, "mysql", backend.setup_dialects())
    admin = _admin()
    try:
        with admin.cursor() as cursor:
            cursor.execute("INSERT INTO mysql.db (Host, Db, User, Select_priv, Create_priv) VALUES ('%', 'evb\\_shared%', '', 'Y', 'Y')")
            cursor.execute("FLUSH PRIVILEGES")
        with pytest.raises(SandboxError, match="every user"):
            backend.provision(_config(name), setup, None)
    finally:
        with admin.cursor() as cursor:
            cursor.execute("DELETE FROM mysql.db WHERE User = '' AND Db = 'evb\\\\_shared%'")
            cursor.execute("FLUSH PRIVILEGES")
        admin.close()
    assert backend.provision(_config(name), setup, None).action == "created"


def test_agent_users_of_a_dead_process_are_dropped_by_the_next_sandbox(tmp_path: Path, name: str) -> None:
    import subprocess
    import sys

    backend = get_backend("mysql")
    setup_dir = _setup(tmp_path, name)
    backend.provision(_config(name), find_setup(setup_dir, name, "mysql", backend.setup_dialects()), None)
    script = ("import os, sys\nfrom pathlib import Path\nfrom evalbench.backends import get_backend\nfrom evalbench.backends.base import SandboxLimits\n"
              "from evalbench.backends.setup import find_setup\nfrom evalbench.config import DatabaseConfig\n"
              f"config = DatabaseConfig(database_name={name!r}, db_type='mysql', dialect='mysql', url={URL!r})\n"
              "backend = get_backend('mysql')\n"
              f"p = backend.provision(config, find_setup(Path({str(setup_dir)!r}), {name!r}, 'mysql', backend.setup_dialects()), None)\n"
              "box = backend.open_sandbox(config, p, SandboxLimits(pool_size=3, statement_timeout_s=5, max_rows=10), None)\n"
              "box.execute('SELECT 1')\nos._exit(0)  # killed: nothing closed\n")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60, env=os.environ | {"PYTHONPATH": str(Path.cwd())})
    stale = _agent_users(name)
    assert len(stale) == 4
    provisioned = backend.provision(_config(name), find_setup(setup_dir, name, "mysql", backend.setup_dialects()), None)
    sandbox = backend.open_sandbox(_config(name), provisioned, SandboxLimits(pool_size=1, statement_timeout_s=5, max_rows=10), None)
    try:
        assert _agent_users(name) == {identity.user for identity in sandbox.harness.leased}
        assert len(_agent_users(name)) == 2
    finally:
        sandbox.close()
    assert _agent_users(name) == set()


@pytest.mark.slow
def test_a_result_is_cut_at_the_byte_cap_while_it_is_read(tmp_path: Path, shop) -> None:
    """Deliverable 7: 300 rows of 1 MB, a 4 MB cap: the result stops at the cap and the rows past
    it are never held (traced allocations stay far below the result's size)."""
    import tracemalloc

    backend, config, _, provisioned, _ = shop
    capped = backend.open_sandbox(config, provisioned, SandboxLimits(pool_size=1, statement_timeout_s=30.0, max_rows=1000,
                                                                     max_result_bytes=4 * 1024 * 1024), None)
    big = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300) "
           "SELECT i, REPEAT('x', 1000000) AS payload FROM n")
    try:
        tracemalloc.start()
        try:
            result = capped.execute(big)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert result.ok and result.truncated and result.truncated_at_bytes and 1 <= result.row_count <= 4, result.error
        assert peak < 40 * 1024 * 1024, peak
        assert capped.execute("SELECT count(*) FROM items").rows == [(3,)]  # the cut connection was replaced
        drained = capped.execute([big, "SELECT 1"])  # a statement that is not the last is read a row at a time
        assert drained.ok and drained.rows == [(1,)]
    finally:
        capped.close()


@pytest.mark.slow
def test_agent_sql_cannot_take_the_lock_writes_wait_on(shop) -> None:
    """Named locks are server-wide: agent SQL holding what it can guess of the harness's write
    lock's name does not hold up a golden write (the name has a secret part)."""
    from evalbench.backends.mysql.identities import suffix

    backend, config, _, provisioned, _ = shop
    box = backend.open_sandbox(config, provisioned, SandboxLimits(pool_size=2, statement_timeout_s=10.0, max_rows=10), None)
    try:
        guess = f"evalbench:write:{suffix(config.database_name)}"
        holder = threading.Thread(target=lambda: box.execute(f"SELECT GET_LOCK('{guess}', 0), SLEEP(4)"))
        holder.start()
        time.sleep(0.5)
        started = time.monotonic()
        written = box.execute("UPDATE items SET price = 0", mode="write", actor="golden")
        assert written.ok and time.monotonic() - started < 3, written
        holder.join(10)
    finally:
        box.close()


def test_a_lost_harness_connection_is_replaced_with_its_leases(shop) -> None:
    """The server ends the harness connection (a restart, a KILL): the next write reconnects it
    and takes the leases again, so another sandbox cannot lease (and re-create) this one's users."""
    backend, config, _, provisioned, sandbox = shop
    assert sandbox.execute("SELECT 1").ok
    admin = _admin()
    try:
        with admin.cursor() as cursor:
            cursor.execute(f"KILL {int(sandbox.harness._conn.thread_id())}")
    finally:
        admin.close()
    time.sleep(0.2)
    written = sandbox.execute(["UPDATE items SET price = 0", "SELECT sum(price) FROM items"], mode="write")
    assert written.ok and written.rows[0][0] == 0, written
    other = backend.open_sandbox(config, provisioned, LIMITS, None)
    try:
        assert not {i.user for i in other.harness.leased} & {i.user for i in sandbox.harness.leased}
        assert sandbox.execute("SELECT count(*) FROM items").rows == [(3,)]
    finally:
        other.close()
