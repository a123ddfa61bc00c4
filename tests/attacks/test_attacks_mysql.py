"""Attacks by a hostile agent on the MySQL / MariaDB backend, through the public interface only:
a real ``evalbench run`` (``python -m evalbench run``, in a child process) with the
``openai_compat`` agent pointed at a local fake model server (:mod:`tests.attack_agent`) that
answers each item with the SQL scripted for it, on a small database provisioned on the server
EVALBENCH_TEST_MYSQL_URL names (default mysql://root@127.0.0.1:3306; skipped when it does not
answer). What is asserted is what an outsider sees: the run directory, the exit code, the
server as the admin sees it after the run.

- agent SQL polling the process list while another conversation's slow golden query (and
  another conversation's slow agent query) runs sees neither;
- no read-mode trick leaves anything: the catalog is the one setup made, nothing was created in
  another database, and a user variable set by one item is gone at the next on the same connection;
- an agent script identical to the golden INSERT passes ``state_match`` in every conversation on
  an ``AUTO_INCREMENT`` table and a sequence (also with ``--workers 2``), and the counters are
  what setup left after the run;
- a result of 300 rows of 1 MB is cut at the byte cap without the run holding it;
- a database changed after setup is refused at the next run (and rebuilt when allowed).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pymysql = pytest.importorskip("pymysql", reason="pymysql is not installed (pip install evalbench[mysql])")

from evalbench.backends.mysql import catalog  # noqa: E402
from evalbench.backends.mysql.provision import drop_database  # noqa: E402
from evalbench.backends.mysql.target import resolve_target  # noqa: E402
from evalbench.config import DatabaseConfig  # noqa: E402
from evalbench.results import read_journal  # noqa: E402
from tests.attack_agent import ROOT, AttackAgent, item, write_run  # noqa: E402

URL = os.environ.get("EVALBENCH_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306")


def _admin() -> Any:
    return resolve_target(DatabaseConfig(database_name="x", dialect="mysql", url=URL)).connect()


def _server() -> tuple[str | None, bool]:
    """(why the server cannot be used, or None; whether it is MariaDB)."""
    try:
        conn = _admin()
    except Exception as exc:  # noqa: BLE001 - any failure means: no server to test against
        return f"no MySQL/MariaDB server at {URL} ({exc})", False
    with conn.cursor() as cursor:
        cursor.execute("SELECT VERSION()")
        version = str(cursor.fetchone()[0])
    conn.close()
    return None, "mariadb" in version.lower()


_UNAVAILABLE, MARIADB = _server()
pytestmark = [pytest.mark.skipif(_UNAVAILABLE is not None, reason=_UNAVAILABLE or ""),
              pytest.mark.slow]  # whole runs per attack: CI runs them in `make test-slow`

SETUP = """CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(50), price DECIMAL(10, 2)) ENGINE=InnoDB;
CREATE TABLE log (id INT AUTO_INCREMENT PRIMARY KEY, note VARCHAR(50)) ENGINE=InnoDB;
INSERT INTO log (note) VALUES ('setup 1'), ('setup 2');
CREATE VIEW cheap AS SELECT id FROM items WHERE price < 3;
"""
SEQUENCE = "CREATE SEQUENCE tick START WITH 100;\n"  # MariaDB only


@dataclass
class Run:
    code: int
    run_dir: Path
    records: dict[str, dict[str, Any]]
    stderr: str
    max_rss_kb: int  # the run's largest process


@pytest.fixture
def shop(tmp_path: Path) -> Any:
    """A database set up from a small setup directory (dropped at the end): its name and setup folder."""
    name = f"evb_attack_{secrets.token_hex(4)}"
    root = tmp_path / "setup" / name
    (root / "mysql").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "mysql" / "setup.sql").write_text(SETUP + (SEQUENCE if MARIADB else ""))
    (root / "data" / "items.csv").write_text("".join(f"{i}, 'item {i}', {i}.5\n" for i in range(1, 6)))
    yield name, tmp_path / "setup"
    admin = _admin()
    try:
        drop_database(admin, name)
    finally:
        admin.close()


def _item(item_id: str, golden: str | list[str], name: str, category: str = "Query") -> dict[str, Any]:
    return item(item_id, golden, category=category, database=name) | {"dialect": "mysql"}


def run_evalbench(tmp: Path, name: str, setup: Path, items: list[dict[str, Any]], replies: dict[str, Any], *,
                  workers: int | None = None, execution: dict[str, Any] | None = None, db: dict[str, Any] | None = None,
                  **options: Any) -> Run:
    """``python -m evalbench run`` of ``items`` against the attack agent, in a child process whose
    largest resident size is measured; the journal read back."""
    tmp.mkdir(parents=True, exist_ok=True)
    database = {"db_type": "mysql", "dialect": "mysql", "database_name": name, "url": URL} | (db or {})
    with AttackAgent(replies) as agent:
        path = write_run(tmp, items, agent, setup_directory=setup, database_configs=[database],
                         scorers={"exec_match": {}, "executable": {}}, **options)
        config = json.loads(path.read_text())
        config["dialects"] = ["mysql"]
        config["primary"] = {"Query": "exec_match", "Management": ["test_cases", "state_match"]}
        config["execution"] |= execution or {}
        path.write_text(json.dumps(config, indent=1))
        argv = ["run", "--config", str(path), "--run-id", "attacks", "--output-dir", str(tmp / "out"), "--no-progress",
                "--no-preflight", *(["--workers", str(workers)] if workers else [])]
        measure = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
                   "print('MAXRSS', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
                   "sys.exit(done.returncode)")
        done = subprocess.run([sys.executable, "-c", measure, sys.executable, "-m", "evalbench", *argv], cwd=ROOT,
                              capture_output=True, text=True, timeout=300, env=os.environ.copy(), check=False)
    run_dir = tmp / "out" / "attacks"
    records = list(read_journal(run_dir)) if (run_dir / "conversations.jsonl").exists() else []
    rss = re.search(r"MAXRSS (\d+)", done.stderr)
    return Run(done.returncode, run_dir, {r["item_id"]: r for r in records}, done.stderr, int(rss.group(1)) if rss else 0)


def _generated(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Every result of the agent's SQL in a conversation record."""
    return [phase["generated"] for phase in record.get("phases", []) if phase.get("generated")]



def _server_state(name: str) -> dict[str, Any]:
    """What a run must leave as setup made it, seen by the admin: the catalog, the rows, the
    counters, the other databases and their tables, the named lock the attacks take."""
    admin = _admin()
    try:
        state: dict[str, Any] = {"catalog": catalog.fingerprint(admin, name)}
        with admin.cursor() as cursor:
            with contextlib.suppress(pymysql.err.MySQLError):
                cursor.execute("SET SESSION information_schema_stats_expiry = 0")  # MySQL 8 caches it for a day
            for query in ("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA ORDER BY 1",
                          "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA NOT IN "
                          "('information_schema', 'performance_schema', 'mysql', 'sys') ORDER BY 1, 2",
                          f"SELECT TABLE_NAME, AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{name}' ORDER BY 1",
                          f"SELECT * FROM `{name}`.items ORDER BY id", f"SELECT * FROM `{name}`.log ORDER BY id",
                          "SELECT IS_USED_LOCK('evb_attack_lock')"):
                cursor.execute(query)
                state[query] = cursor.fetchall()
            cursor.execute(f"SHOW TABLE STATUS FROM `{name}` LIKE 'log'")
            state["log auto_increment"] = cursor.fetchone()[10]
            if MARIADB:
                cursor.execute(f"SELECT next_not_cached_value FROM `{name}`.tick")
                state["tick"] = cursor.fetchone()[0]
        return state
    finally:
        admin.close()


def _setup_once(tmp: Path, name: str, setup: Path) -> dict[str, Any]:
    """Provision the database with a first run of one plain item; the server's state after it."""
    first = run_evalbench(tmp / "setup-run", name, setup, [_item("plain", "SELECT 1 AS one", name)], {"plain": "SELECT 1 AS one"})
    assert first.code == 0, first.stderr[-2000:]
    return _server_state(name)


# polls the process list for 10 s in one statement (the subquery runs again for each row, after a pause)
SPY = ("WITH RECURSIVE tick(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM tick WHERE n < 40) "
       "SELECT CONCAT('SEEN[', COALESCE(GROUP_CONCAT(DISTINCT seen SEPARATOR ' | '), ''), ']') AS seen "
       "FROM (SELECT n, SLEEP(0.25) AS pause, (SELECT GROUP_CONCAT(p.INFO SEPARATOR ' | ') "
       "FROM information_schema.PROCESSLIST p WHERE p.ID + n <> CONNECTION_ID() + n "
       "AND p.INFO LIKE CONCAT('%', 'MARK', 'ER', '%')) AS seen FROM tick) polled WHERE pause = 0")


def test_agent_sql_polling_the_process_list_sees_no_golden_and_no_other_conversation(tmp_path: Path, shop: Any) -> None:
    """Deliverable 2: three conversations at once. One's golden query is slow and carries a marker,
    another's agent query too; the third's agent SQL polls the process list all along (and asks
    SHOW FULL PROCESSLIST through a second run_sql). It sees neither: its result is SEEN[]."""
    name, setup = shop
    token = secrets.token_hex(3)
    items = [_item("golden_slow", f"SELECT SLEEP(4) AS pause, 'MARKER golden {token}' AS marker", name),
             _item("agent_slow", "SELECT 1 AS one", name),
             _item("spy", "SELECT 'SEEN[]' AS seen", name)]
    replies = {"golden_slow": "SELECT 0 AS pause, 'x' AS marker", "agent_slow": f"SELECT SLEEP(4) AS one, 'MARKER agent {token}'",
               "spy": SPY}
    run = run_evalbench(tmp_path / "run", name, setup, items, replies, max_in_flight=3, sqlexec_runners=3,
                        statement_timeout_s=20)
    assert run.code == 0, run.stderr[-2000:]
    spied = _generated(run.records["spy"])
    assert spied and all(result["preview"] == [["SEEN[]"]] for result in spied), spied
    assert all(result["elapsed_s"] > 8 for result in spied)  # it polled for the whole time
    assert token not in json.dumps(spied)
    assert run.records["spy"]["phases"][0]["passed"] is True
    # the slow statements did run meanwhile: the golden one for golden_slow, the agent's for agent_slow
    assert any(token in json.dumps(g["preview"]) for g in run.records["golden_slow"]["phases"][0]["golden"])
    assert any(result["elapsed_s"] > 3 for result in _generated(run.records["agent_slow"]))


READ_TRICKS = {
    "into_var": "SELECT 'planted' INTO @stash",
    "assign": "SELECT @stash2 := 'planted' AS planted",
    "cte_into": "WITH x AS (SELECT 'planted' AS v) SELECT v FROM x INTO @stash3",
    "lock": "SELECT GET_LOCK('evb_attack_lock', 0) AS locked",
    "temp": "CREATE TEMPORARY TABLE stolen AS SELECT * FROM items",
    "create_as": "CREATE TABLE stolen AS SELECT * FROM items",
    "explain_create": "EXPLAIN CREATE TABLE stolen AS SELECT 1",
    "analyze": "ANALYZE SELECT * FROM items",
    "outfile": "SELECT * FROM items INTO OUTFILE '/tmp/evb_attack_outfile.csv'",
    "dumpfile": "SELECT 'x' INTO DUMPFILE '/tmp/evb_attack_dumpfile'",
    "elsewhere": "CREATE TABLE test.evb_attack_stolen (x INT)",
    "view": "CREATE VIEW stolen_view AS SELECT 1 AS x",
    "procedure": "CREATE PROCEDURE stolen_proc() SELECT 1",
    "insert_select": "WITH x AS (SELECT 1) INSERT INTO items SELECT 99, 'x', 1",
    "nextval": "SELECT NEXTVAL(tick)",
    "insert_log": "SELECT 1 FROM log; INSERT INTO log (note) VALUES ('x')",
    "share_lock": "SELECT * FROM items LOCK IN SHARE MODE",
}


def test_no_read_mode_trick_leaves_anything(tmp_path: Path, shop: Any) -> None:
    """Deliverable 1: items answered with every read-mode trick, one after the other on the same
    pooled connection, then an item reading what they may have left on the session: nothing. The
    server is as setup made it: the same catalog, rows, counters and databases; no file, no lock."""
    name, setup = shop
    before = _setup_once(tmp_path, name, setup)
    items = [_item(key, "SELECT 1 AS one", name) for key in READ_TRICKS]
    items.append(_item("leftovers", "SELECT 'clean' AS leftovers", name))
    replies = dict(READ_TRICKS, leftovers="SELECT CAST(COALESCE(@stash, @stash2, @stash3, IF(IS_USED_LOCK("
                                          "'evb_attack_lock') IS NULL, NULL, 'locked'), 'clean') AS CHAR) AS leftovers")
    run = run_evalbench(tmp_path / "run", name, setup, items, replies)
    assert run.code == 0, run.stderr[-2000:]
    assert set(run.records) == {*READ_TRICKS, "leftovers"}
    assert [r["preview"] for r in _generated(run.records["leftovers"])] == [[["clean"]]]
    assert _server_state(name) == before
    assert not Path("/tmp/evb_attack_outfile.csv").exists() and not Path("/tmp/evb_attack_dumpfile").exists()


def _counter_items(name: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Management items whose golden script inserts into the AUTO_INCREMENT table (and takes the
    sequence's next value, on MariaDB); the agent answers each with exactly its golden script."""
    scripts = {f"insert_{i}": f"INSERT INTO log (note) VALUES ('row {i}')" for i in range(5)}
    scripts["insert_two"] = "INSERT INTO log (note) VALUES ('a'), ('b')"
    scripts["upsert"] = "INSERT INTO log (id, note) VALUES (1, 'again') ON DUPLICATE KEY UPDATE note = 'again'"
    if MARIADB:
        scripts |= {f"tick_{i}": "INSERT INTO log (id, note) VALUES (NEXT VALUE FOR tick, 'tick')" for i in range(3)}
    items = [_item(key, sql, name, "Management") for key, sql in scripts.items()]
    items += [_item("reads", "SELECT max(id) AS top FROM log", name)]
    return items, dict(scripts, reads="SELECT max(id) AS top FROM log")


@pytest.mark.parametrize("workers", [None, 2])
def test_an_agent_script_equal_to_the_golden_insert_passes_in_every_conversation(tmp_path: Path, shop: Any,
                                                                                  workers: int | None) -> None:
    """Deliverable 4: rolled-back inserts advance the AUTO_INCREMENT counter (and NEXTVAL the
    sequence); each conversation must see the database exactly as setup left it, so an agent
    script identical to the golden one passes state_match every time, three conversations at
    once (and in two worker processes); the counters are setup's after the run."""
    name, setup = shop
    before = _setup_once(tmp_path, name, setup)
    items, replies = _counter_items(name)
    run = run_evalbench(tmp_path / "run", name, setup, items, replies, max_in_flight=3, sqlexec_runners=2, workers=workers)
    assert run.code == 0, run.stderr[-2000:]
    assert set(run.records) == {i["instance_id"] for i in items}
    for key, record in run.records.items():
        phase = record["phases"][0]
        assert record["outcome"] == "scored" and phase["passed"] is True, (key, phase.get("scores"))
        if key != "reads":
            assert phase["scores"]["state_match"]["passed"] is True, (key, phase["scores"])
    assert _server_state(name) == before


BIG = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300) "
       "SELECT i, REPEAT('x', 1000000) AS payload FROM n")


def test_a_result_of_300_rows_of_a_megabyte_is_cut_at_the_byte_cap_with_bounded_memory(tmp_path: Path, shop: Any) -> None:
    """Deliverable 7: agent and golden SQL both return 300 rows of 1 MB (300 MB); with a 4 MB cap
    the results are cut at it, and no process of the run grew anywhere near the result's size."""
    name, setup = shop
    items = [_item("big", BIG, name), _item("small", "SELECT 1 AS one", name)]
    run = run_evalbench(tmp_path / "run", name, setup, items, {"big": BIG, "small": "SELECT 1 AS one"},
                        statement_timeout_s=60, execution={"max_result_bytes": 4 * 1024 * 1024, "preview_rows": 1})
    assert run.code == 0, run.stderr[-2000:]
    phase = run.records["big"]["phases"][0]
    for result in [*_generated(run.records["big"]), *phase["golden"]]:
        assert result["error"] is None and result["truncated"] and 1 <= result["row_count"] <= 4, result
    assert run.records["small"]["phases"][0]["passed"] is True  # the run went on
    print(f"largest process of the run: {run.max_rss_kb} kB")
    assert 0 < run.max_rss_kb < 250 * 1024, f"the run's largest process reached {run.max_rss_kb} kB"


def test_a_database_changed_after_setup_is_refused_at_the_next_run(tmp_path: Path, shop: Any) -> None:
    """Deliverable 1's fingerprint: after a run, someone adds a table and redefines a view; the
    next run refuses the database (its items are db_error, the message names what changed);
    with allow_destructive_setup it is rebuilt and evaluated again."""
    name, setup = shop
    _setup_once(tmp_path, name, setup)
    admin = _admin()
    try:
        with admin.cursor() as cursor:
            cursor.execute(f"CREATE TABLE `{name}`.intruder (x INT)")
            cursor.execute(f"CREATE OR REPLACE VIEW `{name}`.cheap AS SELECT 1 AS id")
    finally:
        admin.close()
    items = [_item("plain", "SELECT name FROM items WHERE id = 1", name)]
    replies = {"plain": "SELECT name FROM items WHERE id = 1"}
    refused = run_evalbench(tmp_path / "refused", name, setup, items, replies)
    record = refused.records["plain"]
    assert record["outcome"] == "db_error", record["outcome"]
    for said in (record["error"], refused.stderr):
        assert "changed after evalbench set it up" in said and "table `intruder` added" in said and "view `cheap` changed" in said
    assert refused.records["plain"]["phases"] == [] or not _generated(record)  # the agent's SQL never ran
    rebuilt = run_evalbench(tmp_path / "rebuilt", name, setup, items, replies, db={"allow_destructive_setup": True})
    assert rebuilt.code == 0 and rebuilt.records["plain"]["phases"][0]["passed"] is True, rebuilt.stderr[-2000:]
    manifest = json.loads((rebuilt.run_dir / "manifest.json").read_text())
    assert manifest["databases"][f"mysql/{name}"]["action"] == "rebuilt"
    assert "intruder" not in json.dumps(_server_state(name)["catalog"])
