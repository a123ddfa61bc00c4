"""Attacks by a hostile agent, through the public interface only.

Every test runs a real ``evalbench run`` (``evalbench.cli.main``, in process) with the
``openai_compat`` agent pointed at a local fake model server (:mod:`tests.attack_agent`) that
answers each item with the attack SQL scripted for it, on the demo database in the embedded
PostgreSQL (or, where said, the external server of ``EVALBENCH_TEST_PG_URL``).

The main run is sequential on ONE pooled connection (1 sqlexec runner, 1 conversation in flight):
every attack item is followed by a *probe* item whose golden and generated SQL report the
session's state (settings, temporary objects, prepared statements, cursors, advisory locks,
listened channels, the data, the backend pid). The probe after an attack runs on the very
connection the attack used; it must return exactly what the first probe of the run — before any
attack — returned, and pass. After the run, the database (as admin) must be as it was, no file may
have been written by the server, and connections opened beside the run must be alive.

Other runs: two pooled connections, attacks signalling the backends of a conversation in flight
(and of a statement we run beside, as the sandbox role); management tasks whose test cases run the
agent's SQL committed on a throwaway copy, trying to change the (cluster-wide) sandbox role, then
the next item and the next run; an agent that makes the server drop its own connection; a sandbox
role that cannot log in or is privileged, and configured users that may not create it (on the
external server): the run must stop before its first item, the agent never asked.

The holes these tests found are closed (clones.reset_role after every copy, the re-arm inside
the statement's error handling, a broken session blamed on the SQL that broke it).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from evalbench.cli import main
from evalbench.results import read_journal
from tests.attack_agent import ROOT, AttackAgent, completion, item, write_run

STATEMENT_TIMEOUT_S = 1.0
SANDBOX = "evalbench_sandbox"
SANDBOX_ROLES = (SANDBOX, "evalbench_sandbox_write")  # agent SQL that reads, and that writes
QUIET = [(0, ["track_activities=off"])]  # the settings provisioning gives them (its admin is a superuser)
COUNT_STORES = "SELECT count(*) FROM stores"
TOUCH_GOLDEN = "UPDATE stores SET city = upper(city)"  # a management task's golden script (rolled back like all)

# What a session looks like from inside: run as golden AND generated SQL of every probe item.
PROBE = """
SELECT current_user = session_user AND current_user IN ('evalbench_sandbox', 'evalbench_golden') AS own_role,
       current_setting('search_path') AS search_path,
       current_setting('transaction_read_only') AS read_only,
       current_setting('default_transaction_read_only') AS default_read_only,
       (SELECT setting::int FROM pg_settings WHERE name = 'statement_timeout') BETWEEN 500 AND 1000 AS timeout_armed,
       (SELECT coalesce(string_agg(name || '=' || setting || '@' || source, ', ' ORDER BY name), '')
          FROM pg_settings WHERE source IN ('database', 'user', 'database user', 'client', 'interactive', 'session')
                             AND name <> 'statement_timeout') AS changed_settings,
       (SELECT count(*) FROM pg_prepared_statements) AS prepared,
       (SELECT count(*) FROM pg_cursors WHERE name <> '') AS cursors,
       (SELECT count(*) FROM (VALUES (pg_advisory_unlock(4242)), (pg_advisory_unlock_shared(4243)), (pg_advisory_unlock(4244)),
          (pg_advisory_unlock(4245)), (pg_advisory_unlock(4246)), (pg_advisory_unlock(77))) AS held(x) WHERE x) AS advisory_locks,
       (SELECT count(*) FROM pg_listening_channels()) AS listening,
       (SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()) AS temp_objects,
       (SELECT count(*) FROM stores) AS stores,
       (SELECT md5(string_agg(s::text, '|' ORDER BY s.store_id)) FROM stores s) AS stores_md5,
       (SELECT count(*) FROM order_items) AS order_items
""".strip()
WHOAMI = "SELECT current_user AS usr, session_user AS sess"


@dataclass(frozen=True)
class Attack:
    """One hostile answer. ``expect``: what the attack item's own execution must end as (or a
    tuple of the acceptable ones) — ``ok`` (runs, harmlessly), ``forbidden`` (refused before
    anything runs), ``sql`` (the server refuses it: ``fragment`` is in the error), ``timeout``,
    or ``no_sql`` (the reply is not usable SQL: the item still gets an outcome). ``sql`` may hold ``{files}``: a folder of the
    test's own, where nothing may appear."""

    id: str
    sql: Any
    expect: str | tuple[str, ...]
    fragment: str | None = None
    category: str = "Query"


def _surrogate_sql() -> dict[str, Any]:
    return completion("SELECT '\ud800' AS x")  # sent as the JSON escape "\ud800": a lone surrogate


ATTACKS: list[Attack] = [
    # ---------------------------------------------------------------- 1. session settings
    Attack("set_config_search_path", "SELECT set_config('search_path', 'evil', false)", "ok"),
    Attack("set_config_many", "SELECT set_config('search_path', 'pg_catalog', false), "
           "set_config('default_transaction_read_only', 'off', false), set_config('TimeZone', 'Pacific/Kiritimati', false), "
           "set_config('DateStyle', 'SQL, DMY', false), set_config('lock_timeout', '1', false), "
           "set_config('work_mem', '64kB', false), set_config('statement_timeout', '1', false)", "ok"),
    Attack("set_config_dynamic_ts_stat", "SELECT * FROM ts_stat('SELECT to_tsvector(set_config(''statement_timeout'',''1'',false))')", "ok"),
    Attack("set_config_dynamic_ts_stat_read_only", "SELECT * FROM ts_stat('SELECT to_tsvector(set_config(''default_transaction_read_only'',"
           "''off'',false) || set_config(''search_path'',''evil'',false))')", "ok"),
    Attack("set_config_dynamic_ts_rewrite", "SELECT ts_rewrite('a'::tsquery, 'SELECT set_config(''search_path'',''evil'',false)::tsquery, "
           "''b''::tsquery')", "ok"),
    Attack("set_config_in_a_script", "SELECT set_config('search_path', 'evil', false); "
           "SELECT set_config('default_transaction_read_only', 'off', false)", "ok"),
    Attack("set_config_then_an_error", "SELECT set_config('search_path', 'evil', false), 1/0", "sql", "division by zero"),
    Attack("set_config_past_the_row_cap", "SELECT set_config('search_path', 'evil', false) FROM generate_series(1, 5000)", "ok"),
    Attack("set_statement_timeout", "SET statement_timeout = 1", "forbidden"),
    Attack("set_default_read_only_off", "SET default_transaction_read_only = off", "forbidden"),
    Attack("set_search_path", "SET search_path = evil", "forbidden"),
    Attack("set_search_path_in_a_script", "SELECT 1; SET search_path TO evil; SELECT 2", "forbidden"),
    Attack("set_role", "SET ROLE postgres", "forbidden"),
    Attack("set_config_role", "SELECT set_config('role', 'postgres', false)", "sql", "permission denied to set role"),
    Attack("set_session_authorization", "SET SESSION AUTHORIZATION postgres", "forbidden"),
    Attack("set_config_session_authorization", "SELECT set_config('session_authorization', 'postgres', false)", "sql",
           "permission denied to set session authorization"),
    Attack("reset_all", "RESET ALL", "forbidden"),
    Attack("commit_smuggled_in_a_script", "SELECT 1; COMMIT; SELECT set_config('search_path', 'evil', false)", "forbidden"),
    Attack("begin", "BEGIN; SELECT set_config('search_path', 'evil', false)", "forbidden"),
    Attack("statement_hidden_in_a_string", "SELECT '\\'; SET search_path TO evil; SELECT '\\'", "forbidden"),
    Attack("statement_hidden_in_an_e_string", "SELECT E'\\''; SET search_path TO evil; SELECT ''", "forbidden"),
    Attack("alter_role_set_in_a_management_task", "ALTER ROLE CURRENT_USER SET search_path TO evil", ("ok", "forbidden"),
           category="Management"),  # rolled back, or refused as a change to a cluster-wide object
    # ---------------------------------------------------------------- 2. session objects
    # temporary objects in an answer run (BIRD-Interact allows them) inside a rolled-back write
    # transaction: the probe after each shows the next conversation sees the real stores
    Attack("temp_table_shadowing", "CREATE TEMP TABLE stores AS SELECT 1 AS store_id", "ok"),
    Attack("temp_table_in_a_script", "SELECT 1; CREATE TEMP TABLE stores AS SELECT 1 AS store_id; SELECT 2", "ok"),
    Attack("temp_view_shadowing", "CREATE TEMP VIEW stores AS SELECT 1 AS store_id", "ok"),
    Attack("select_into_temp", "SELECT 1 AS store_id INTO TEMP stores", "ok"),
    Attack("temp_table_beside_a_real_write", "CREATE TEMP TABLE t AS SELECT 1 AS x; DELETE FROM stores", "forbidden"),
    Attack("temp_table_in_a_management_task", "CREATE TEMP TABLE stores (store_id int) ON COMMIT PRESERVE ROWS; "
           "INSERT INTO stores VALUES (1); CREATE TEMP VIEW order_items AS SELECT 1 AS x", "ok", category="Management"),
    Attack("prepare", "PREPARE evil AS SELECT 1", "forbidden"),
    Attack("prepare_in_a_script", "SELECT 1; PREPARE evil AS SELECT 1; SELECT 2", "forbidden"),
    Attack("listen", "LISTEN evil", "forbidden"),
    Attack("advisory_lock", "SELECT pg_advisory_lock(4242)", "ok"),
    Attack("advisory_locks_shared_and_try", "SELECT pg_advisory_lock_shared(4243), pg_try_advisory_lock(4244)", "ok"),
    Attack("advisory_lock_in_a_script", "SELECT pg_advisory_lock(4245); SELECT 1", "ok"),
    Attack("advisory_lock_in_a_management_task", "SELECT pg_advisory_lock(4246)", "ok", category="Management"),
    Attack("cursor_with_hold", "DECLARE evil CURSOR WITH HOLD FOR SELECT 1", "forbidden"),
    Attack("cursor_with_hold_in_a_script", "SELECT 1; DECLARE evil CURSOR WITH HOLD FOR SELECT 1; SELECT 2", "forbidden"),
    # ---------------------------------------------------------------- 3. other backends
    Attack("terminate_other_backends", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()",
           "sql", "permission denied for"),  # the view, or the function
    Attack("cancel_other_backends", "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()",
           "sql", "permission denied for"),
    Attack("terminate_backends_found_in_pg_locks", "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE pid <> pg_backend_pid()",
           "sql", "permission denied for"),  # the view (other sessions' locks are not agent SQL's to see), or the function
    Attack("terminate_own_backend", "SELECT pg_terminate_backend(pg_backend_pid())", "sql", "permission denied for function"),
    # ---------------------------------------------------------------- 4. files, privileges, writes
    Attack("copy_to_program", "COPY (SELECT 1) TO PROGRAM 'touch {files}/copy_program'", "forbidden"),
    Attack("copy_to_file", "COPY stores TO '{files}/copy_file'", "forbidden"),
    Attack("copy_from_file", "COPY stores FROM '/etc/passwd'", "forbidden"),
    Attack("pg_read_file", "SELECT pg_read_file('/etc/passwd')", "sql", "permission denied for function pg_read_file"),
    Attack("pg_ls_dir", "SELECT * FROM pg_ls_dir('.')", "sql", "permission denied for function pg_ls_dir"),
    Attack("lo_import", "SELECT lo_import('/etc/passwd')", "sql", "permission denied for function lo_import"),
    Attack("lo_export", "SELECT lo_export(lo_from_bytea(0, 'x'), '{files}/lo_export')", "sql",
           "permission denied for function lo_export"),
    Attack("lo_from_bytea", "SELECT lo_from_bytea(0, 'persisted?')", "sql", "lo_from_bytea"),  # revoked, or read-only
    Attack("lo_create", "SELECT lo_create(0)", "sql", "lo_create"),
    Attack("explain_analyze_create_table_as", "EXPLAIN ANALYZE CREATE TABLE pwned AS SELECT 1 AS x", "sql",
           "permission denied for schema public"),
    Attack("explain_analyze_select_into", "EXPLAIN ANALYZE SELECT 1 AS x INTO pwned", "sql", "permission denied for schema public"),
    Attack("explain_analyze_create_materialized_view", "EXPLAIN ANALYZE CREATE MATERIALIZED VIEW pwned AS SELECT 1 AS x",
           "sql", "permission denied for schema public"),
    Attack("explain_analyze_create_temp_table", "EXPLAIN ANALYZE CREATE TEMP TABLE pwned AS SELECT 1 AS x", "sql",
           "permission denied to create temporary tables"),
    Attack("create_extension", "CREATE EXTENSION dblink", "forbidden"),
    Attack("create_extension_in_a_management_task", "CREATE EXTENSION vector", "sql", "permission denied to create extension",
           category="Management"),
    Attack("alter_system", "ALTER SYSTEM SET statement_timeout = 1", "forbidden"),
    Attack("alter_system_in_a_management_task", "ALTER SYSTEM SET statement_timeout = 1", ("sql", "forbidden"),
           "cannot run inside a transaction block", category="Management"),
    Attack("plpgsql_function_with_side_effects", "CREATE FUNCTION evil_fn() RETURNS int LANGUAGE plpgsql AS $$ BEGIN "
           "DELETE FROM order_items; PERFORM set_config('search_path', 'evil', false); PERFORM pg_advisory_lock(77); "
           "RETURN 1; END $$; SELECT evil_fn()", "ok", category="Management"),
    Attack("create_function_in_a_read_item", "CREATE FUNCTION evil_fn() RETURNS int LANGUAGE sql AS 'SELECT 1'", "forbidden"),
    Attack("do_block", "DO $$ BEGIN DELETE FROM stores; END $$", "forbidden"),
    Attack("do_block_in_a_management_task", "DO $$ BEGIN DELETE FROM stores; END $$", "forbidden", category="Management"),
    Attack("insert", "INSERT INTO stores (store_name, city, state, opened_on) VALUES ('x', 'y', 'ZZ', '2020-01-01')", "forbidden"),
    Attack("update", "UPDATE stores SET city = 'evil'", "forbidden"),
    Attack("delete", "DELETE FROM order_items", "forbidden"),
    Attack("drop", "DROP TABLE stores CASCADE", "forbidden"),
    Attack("truncate", "TRUNCATE stores CASCADE", "forbidden"),
    Attack("write_after_a_read_in_a_script", "SELECT 1; DELETE FROM order_items; SELECT 2", "forbidden"),
    Attack("delete_in_a_cte", "WITH x AS (DELETE FROM order_items RETURNING *) SELECT count(*) FROM x", "sql", "read-only transaction"),
    Attack("update_in_a_cte", "WITH x AS (UPDATE stores SET city = 'evil' RETURNING 1) SELECT count(*) FROM x", "sql",
           "read-only transaction"),
    Attack("explain_analyze_delete", "EXPLAIN ANALYZE DELETE FROM order_items", "sql", "read-only transaction"),
    Attack("select_for_update", "SELECT * FROM stores FOR UPDATE", "sql", "read-only transaction"),
    Attack("nextval", "SELECT nextval('stores_store_id_seq')", "sql", "permission denied for sequence"),
    Attack("nextval_in_a_management_task", "SELECT nextval('stores_store_id_seq'), nextval('orders_order_id_seq')", "ok",
           category="Management"),
    Attack("writes_in_a_management_task", "DELETE FROM order_items; TRUNCATE stores CASCADE; "
           "INSERT INTO stores (store_name, city, state, opened_on) VALUES ('x', 'y', 'ZZ', '2020-01-01')", "ok",
           category="Management"),
    Attack("drop_and_recreate_in_a_management_task", "DROP TABLE stores CASCADE; CREATE TABLE stores AS SELECT 1 AS store_id; "
           "CREATE TABLE public.evil_table AS SELECT 1 AS x", "ok", category="Management"),
    Attack("dblink", "SELECT * FROM dblink('dbname=postgres', 'SELECT 1') AS t(x int)", "sql", "does not exist"),
    Attack("pg_reload_conf", "SELECT pg_reload_conf()", "sql", "permission denied for function pg_reload_conf"),
    # ---------------------------------------------------------------- 5. time
    Attack("many_slow_statements", "; ".join(["SELECT pg_sleep(0.4)"] * 5), "timeout"),  # 2 s in all
    Attack("pg_sleep_1000", "SELECT pg_sleep(1000)", "timeout"),
    Attack("timeout_lifted_in_the_same_statement", "SELECT set_config('statement_timeout', '0', false), pg_sleep(5)", "timeout"),
    Attack("timeout_lifted_for_the_next_statement", "SELECT set_config('statement_timeout', '0', false); SELECT pg_sleep(5)",
           "timeout"),
    # ---------------------------------------------------------------- 6. text that is not text
    Attack("lone_surrogate_in_sql", _surrogate_sql(), "sql", "not valid text"),
    Attack("nul_in_sql", completion("SELECT 'a\x00b' AS x"), "sql", "nul"),
    Attack("lone_surrogate_and_nul_in_text", completion("SELECT 1 AS x", text="evil \udfff text \x00 end \ud83d"), "ok"),
    Attack("lone_surrogate_in_a_question", completion(None, question="Which \ud800 do you mean?\x00"), "no_sql"),
    Attack("invalid_utf8_body", b'{"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": '
           b'{"role": "assistant", "content": "\xff\xfe\xed\xa0\x80 bad"}, "finish_reason": "stop"}]}', "no_sql"),
]


def _golden(attack: Attack) -> str:
    return TOUCH_GOLDEN if attack.category == "Management" else COUNT_STORES


def _sql(attack: Attack, files: Path) -> Any:
    return attack.sql.replace("{files}", str(files)) if isinstance(attack.sql, str) else attack.sql


# ----------------------------------------------------------------------------- running


@dataclass
class Run:
    code: int
    run_dir: Path
    records: dict[str, dict[str, Any]]
    order: list[str]
    agent: AttackAgent
    files: Path
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


def run_evalbench(tmp: Path, items: list[dict[str, Any]], replies: dict[str, Any], *, in_process: bool = True,
                  argv_extra: tuple[str, ...] = (), **options: Any) -> Run:
    """A real ``evalbench run`` of ``items`` against the attack agent (in this process, or as
    ``python -m evalbench run``, whose peak memory is then ``extra["max_rss_kb"]``); the journal read back."""
    tmp.mkdir(parents=True, exist_ok=True)
    files = tmp / "files"
    files.mkdir(exist_ok=True)
    # --no-preflight: these tests are of the run's own defences (a failed sandbox login, for one, is
    # found at provisioning); preflight's probes would also reach the attack agent
    argv = ["run", "--run-id", "attacks", "--output-dir", str(tmp / "out"), "--no-progress", "--no-preflight", *argv_extra]
    extra: dict[str, Any] = {"stderr": ""}
    with AttackAgent(replies) as agent:
        argv += ["--config", str(write_run(tmp, items, agent, **options))]
        if in_process:
            code = main(argv)
        else:
            code, extra = _run_child(argv, tmp)
    run_dir = tmp / "out" / "attacks"
    records = list(read_journal(run_dir)) if (run_dir / "conversations.jsonl").exists() else []
    return Run(code, run_dir, {r["item_id"]: r for r in records}, [r["item_id"] for r in records], agent, files,
               extra=extra)


def _run_child(argv: list[str], tmp: Path) -> tuple[int, dict[str, Any]]:
    """``python -m evalbench`` with ``argv``: its exit code, stderr and peak resident memory."""
    with (tmp / "stderr.txt").open("w+", encoding="utf-8") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "evalbench", *argv], cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=stderr, env=os.environ.copy())
        timer = threading.Timer(120, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        stderr.seek(0)
        return proc.returncode, {"stderr": stderr.read(), "max_rss_kb": usage.ru_maxrss}


def admin_url(pgdata: Path, database: str = "greenleaf") -> str:
    from evalbench.backends.postgres.embedded import embedded_url

    return embedded_url(pgdata, database)


def db_state(url: str) -> dict[str, Any]:
    """What a run must leave as it found it, seen by the admin: every table's rows, the sequences,
    the objects, the sandbox role, server settings, large objects, advisory locks."""
    state: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        relations = conn.execute(
            "SELECT c.relname, c.relkind FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace "
            "AND c.relkind IN ('r', 'v', 'm', 'S', 'f', 'p') ORDER BY 1").fetchall()
        state["relations"] = relations
        for name, kind in relations:
            if kind == "r":
                state[f"rows:{name}"] = conn.execute(
                    f'SELECT count(*), md5(coalesce(string_agg(x::text, \'|\' ORDER BY x::text), \'\')) FROM public."{name}" x'
                ).fetchone()
            elif kind == "S":
                state[f"seq:{name}"] = conn.execute(f'SELECT last_value, is_called FROM public."{name}"').fetchone()
        state["functions"] = conn.execute(
            "SELECT proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace ORDER BY 1").fetchall()
        state["extensions"] = conn.execute("SELECT extname FROM pg_extension ORDER BY 1").fetchall()
        state["large_objects"] = conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
        state["role"] = conn.execute(
            "SELECT rolsuper, rolcreaterole, rolcreatedb, rolcanlogin, rolconnlimit, rolpassword, rolvaliduntil "
            "FROM pg_authid WHERE rolname = %s", (SANDBOX,)).fetchone()
        state["writer_role"] = conn.execute(
            "SELECT rolsuper, rolcreaterole, rolcreatedb, rolcanlogin, rolconnlimit, rolpassword, rolvaliduntil "
            "FROM pg_authid WHERE rolname = %s", (SANDBOX_ROLES[1],)).fetchone()
        for role in SANDBOX_ROLES:
            state[f"role_settings:{role}"] = conn.execute(
                "SELECT setdatabase, setconfig FROM pg_db_role_setting WHERE setrole = %s::regrole ORDER BY 1",
                (role,)).fetchall()
        state["auto_conf"] = conn.execute(
            "SELECT name, setting FROM pg_file_settings WHERE sourcefile LIKE '%%postgresql.auto.conf' ORDER BY 1").fetchall()
        state["advisory_locks"] = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()
        state["database_comment"] = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = current_database()").fetchone()
    return state


def reset_sandbox_role(url: str) -> None:
    """Undo what an attack may have left on the sandbox roles (cluster-wide objects), so that the
    tests after this one start clean (their settings as provisioning leaves them)."""
    with psycopg.connect(url, autocommit=True) as conn:
        for role in SANDBOX_ROLES:
            conn.execute(f"ALTER ROLE {role} RESET ALL")
            for (database,) in conn.execute(
                    "SELECT d.datname FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase "
                    "WHERE s.setrole = %s::regrole", (role,)).fetchall():
                conn.execute(f'ALTER ROLE {role} IN DATABASE "{database}" RESET ALL')
            conn.execute(f"ALTER ROLE {role} SET track_activities = off")
            conn.execute(f"ALTER ROLE {role} PASSWORD NULL CONNECTION LIMIT -1")


def phase(record: dict[str, Any]) -> dict[str, Any]:
    return record["phases"][0]


def generated(record: dict[str, Any]) -> dict[str, Any]:
    return phase(record).get("generated") or {}


def all_strings(value: Any) -> Any:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield from all_strings(key)
            yield from all_strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from all_strings(inner)


# ----------------------------------------------------------------------------- the main run


@pytest.fixture(scope="module")
def main_run(tmp_path_factory: pytest.TempPathFactory, pgdata: Path, demo_sandbox: Any) -> Run:
    """Every attack of ATTACKS in one sequential run on one pooled connection, each followed by
    a probe; the first item is a probe too (the clean baseline)."""
    url = admin_url(pgdata)
    reset_sandbox_role(url)
    tmp = tmp_path_factory.mktemp("attacks")
    items = [item("probe_first", PROBE), item("whoami", "SELECT 1")]
    replies: dict[str, Any] = {"probe_first": PROBE, "whoami": WHOAMI}
    for attack in ATTACKS:
        items.append(item(attack.id, _golden(attack), category=attack.category))
        replies[attack.id] = _sql(attack, tmp / "files")
        items.append(item(f"{attack.id}__after", PROBE))
        replies[f"{attack.id}__after"] = PROBE
    before = db_state(url)
    # connections beside the run: an admin one and one of the sandbox role itself (any attack
    # that signals "other backends" would reach them)
    admin = psycopg.connect(url, autocommit=True)
    beside = psycopg.connect(_as_sandbox(url), autocommit=True)
    pids = (admin.info.backend_pid, beside.info.backend_pid)
    try:
        result = run_evalbench(tmp, items, replies, statement_timeout_s=STATEMENT_TIMEOUT_S)
        alive = []
        for conn in (admin, beside):
            try:
                alive.append(conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
            except psycopg.Error as exc:
                alive.append(f"dead: {exc}")
    finally:
        admin.close()
        beside.close()
    result.before, result.after = before, db_state(url)
    result.extra = {"pids_beside": pids, "alive_beside": tuple(alive)}
    return result


def _as_sandbox(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(username=SANDBOX, password=None).render_as_string(hide_password=False)


def test_the_run_completes_and_leaves_everything_as_it_was(main_run: Run) -> None:
    run = main_run
    assert run.code == 0, "a hostile agent must not make the run fail (exit 0: no infrastructure error)"
    expected = ["probe_first", "whoami"] + [i for a in ATTACKS for i in (a.id, f"{a.id}__after")]
    assert run.order == expected, "every item journaled exactly once, in order (one conversation at a time)"
    assert set(run.agent.asked) == set(expected), "every item reached the agent"
    summary = json.loads((run.run_dir / "summary.json").read_text())
    assert summary.get("infra_errors", 0) == 0
    assert not (summary.get("invalid_items") or {}).get("count"), "no golden SQL may have failed"
    # the database, as the admin sees it, is as it was
    assert run.after == run.before
    # the server wrote no file
    assert list(run.files.iterdir()) == []
    # connections beside the run are alive, and the same
    assert run.extra["alive_beside"] == run.extra["pids_beside"]


def test_the_baseline_probe_sees_a_clean_sandbox(main_run: Run) -> None:
    """The reference the probes after attacks are compared with is itself what it should be."""
    record = main_run.records["probe_first"]
    assert record["outcome"] == "scored" and phase(record)["passed"] is True
    (row,) = generated(record)["preview"]
    columns = generated(record)["columns"]
    values = dict(zip(columns, row, strict=True))
    assert values["own_role"] is True
    assert generated(main_run.records["whoami"])["preview"] == [[SANDBOX, SANDBOX]]  # agent SQL reads as the sandbox role
    assert values["search_path"] == '"$user", public'
    assert values["read_only"] == "on" and values["default_read_only"] == "on" and values["timeout_armed"] is True
    assert "search_path" not in values["changed_settings"] and "TimeZone" not in values["changed_settings"]
    assert (values["prepared"], values["cursors"], values["advisory_locks"], values["listening"], values["temp_objects"]) == (0,) * 5
    assert values["stores"] == 5 and values["order_items"] > 0


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.id for a in ATTACKS])
def test_attack(main_run: Run, attack: Attack) -> None:
    record = main_run.records[attack.id]
    result = generated(record)
    error = (result.get("error") or "").lower()
    # the attack item itself: an outcome of its own, the expected refusal, never an infrastructure error
    if attack.expect == "no_sql":
        assert record["outcome"] in {"scored", "agent_error", "max_turns"}, record["outcome"]
        assert phase(record)["passed"] is False
    else:
        assert record["outcome"] == "scored", (record["outcome"], record["error"])
        assert phase(record)["sql"] is not None
        kind = result.get("error_kind") or "ok"
        assert kind in (attack.expect if isinstance(attack.expect, tuple) else (attack.expect,)), (kind, result.get("error"))
        assert kind == "ok" or result.get("error"), result
        if kind == "sql" and attack.fragment is not None:
            assert attack.fragment in error, error
        if attack.expect == "timeout":
            assert result["elapsed_s"] <= STATEMENT_TIMEOUT_S + 0.5, "the timeout bounds the whole execution"
            assert record["elapsed_s"] < 2 * STATEMENT_TIMEOUT_S + 2
    # the next conversation, on the same pooled connections, sees exactly what the first one saw
    after = main_run.records[f"{attack.id}__after"]
    first = main_run.records["probe_first"]
    assert after["outcome"] == "scored" and phase(after)["passed"] is True, phase(after)["scores"]
    for seen, baseline in ((phase(after)["golden"][0], phase(first)["golden"][0]), (generated(after), generated(first))):
        assert seen["error"] is None
        assert dict(zip(seen["columns"], seen["preview"][0], strict=True)) == dict(zip(baseline["columns"], baseline["preview"][0], strict=True))


def test_the_journal_is_valid_utf8_whatever_the_agent_sent(main_run: Run) -> None:
    raw = (main_run.run_dir / "conversations.jsonl").read_bytes()
    text = raw.decode("utf-8")  # strict
    for line in text.splitlines():
        record = json.loads(line)
        for string in all_strings(record):
            string.encode("utf-8")  # no lone surrogate decoded from a \ud800 escape
    texts = [t["reply"].get("text") or "" for t in main_run.records["lone_surrogate_and_nul_in_text"]["turns"]]
    assert any("\x00" in t and "\ufffd" in t for t in texts), texts  # NUL kept, surrogates replaced


# ----------------------------------------------------------------------------- other conversations


def test_signalling_the_backends_of_a_conversation_in_flight_is_denied(tmp_path: Path, pgdata: Path, demo_sandbox: Any) -> None:
    """Two pooled connections: a slow conversation holds one (its golden SQL sleeps) while the
    attacks run on the other and try to terminate or cancel every other backend — those of the
    sandbox role itself included, such as a statement we run beside the run as that role."""
    slow_golden = "SELECT (SELECT count(*) FROM stores) AS n FROM pg_sleep(1.5)"
    # the backends' pids from pg_locks or guessed (neither pg_locks nor pg_stat_activity is readable by agent SQL)
    attacks = {
        "terminate_others": "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE pid <> pg_backend_pid()",
        "cancel_others": "SELECT pg_cancel_backend(pid) FROM pg_locks WHERE pid <> pg_backend_pid()",
        "terminate_every_pid": "SELECT pg_terminate_backend(pid) FROM generate_series(1, 4194304) AS pid "
                               "WHERE pid <> pg_backend_pid()",
        "cancel_in_a_script": "SELECT 1; SELECT pg_cancel_backend(pid) FROM pg_locks WHERE pid <> pg_backend_pid()",
    }
    items = [item("slow", slow_golden)] + [item(k, COUNT_STORES) for k in attacks]
    url = admin_url(pgdata)
    admin = psycopg.connect(url, autocommit=True)
    beside = psycopg.connect(_as_sandbox(url), autocommit=True)
    pids = (admin.info.backend_pid, beside.info.backend_pid)
    sleeper: dict[str, Any] = {}

    def sleep_beside() -> None:  # a statement of the sandbox role running beside the run: it must not be cancelled
        sleeper["start"] = time.monotonic()
        try:
            sleeper["result"] = beside.execute("SELECT 'slept' FROM pg_sleep(2.5)").fetchone()
        except psycopg.Error as exc:
            sleeper["result"] = f"interrupted: {exc}"
        sleeper["end"] = time.monotonic()

    thread = threading.Thread(target=sleep_beside)
    thread.start()
    try:
        run = run_evalbench(tmp_path, items, {"slow": "SELECT (SELECT count(*) FROM stores) AS n"} | attacks,
                            sqlexec_runners=2, max_in_flight=2, statement_timeout_s=3)
        thread.join()
        alive = tuple(conn.execute("SELECT pg_backend_pid()").fetchone()[0] for conn in (admin, beside))  # type: ignore[index]
    finally:
        thread.join()
        admin.close()
        beside.close()
    assert run.code == 0
    for key in attacks:
        result = generated(run.records[key])
        assert run.records[key]["outcome"] == "scored"
        assert result["error_kind"] == "sql" and "permission denied for" in result["error"], result
    # the attacks ran while the slow conversation's golden SQL and our statement beside were running
    asked = dict(run.agent.asked_at)
    for key in attacks:
        assert asked[key] < asked["slow"] - 0.2, run.agent.asked_at  # "slow" is asked once its golden SQL has returned
        assert sleeper["start"] < asked[key] < sleeper["end"] - 0.2, (sleeper, run.agent.asked_at)
    assert run.order[-1] == "slow", run.order
    slow = run.records["slow"]
    assert slow["outcome"] == "scored" and phase(slow)["passed"] is True
    assert phase(slow)["golden"][0]["error"] is None and generated(slow)["error"] is None
    assert phase(slow)["golden"][0]["elapsed_s"] >= 1.5
    assert sleeper["result"] == ("slept",)
    assert alive == pids


# ----------------------------------------------------------------------------- holes found


TEST_CASE = ("def test_case(pred_sqls, sol_sqls, db_name, conn):\n"
             "    execute_queries(pred_sqls, db_name, conn)\n"
             "    rows, _, _ = execute_queries('SELECT count(*) FROM stores', db_name, conn)\n"
             "    assert rows == [(5,)], rows\n"
             "    return True\n")


def _via_function(statement: str, sleeps: int = 0) -> str:
    """An agent script that runs ``statement`` from inside a plpgsql function (the statement
    check sees only CREATE FUNCTION and SELECT), then ``sleeps`` slow statements."""
    body = statement.replace("'", "''")
    script = (f"CREATE FUNCTION evil_role() RETURNS int LANGUAGE plpgsql AS $$ BEGIN EXECUTE format('{body}', current_user); "
              "RETURN 1; END $$; SELECT evil_role()")
    return script + "; SELECT pg_sleep(0.4)" * sleeps


# Management tasks with test cases: their SQL is run again, every statement committed, on a
# throwaway copy of the database — a role's settings live outside that copy.
ROLE_ATTACKS = {
    "alter_role_set": "ALTER ROLE CURRENT_USER SET search_path TO evil",
    "alter_role_in_database": f"ALTER ROLE {SANDBOX} IN DATABASE greenleaf SET search_path TO evil",
    "alter_user_password": "ALTER USER CURRENT_USER PASSWORD 'pwned'",
    "alter_role_set_via_function": _via_function("ALTER ROLE %I SET search_path TO evil"),
    "alter_role_in_database_via_function": _via_function("ALTER ROLE %I IN DATABASE greenleaf SET search_path TO evil"),
    "alter_role_via_function_then_killed": _via_function("ALTER ROLE %I SET search_path TO evil", sleeps=15),
}
ROLE_GROUPS = {  # one run each; the attacks that are refused or undone share one
    "refused_or_healed": ["alter_role_set", "alter_role_in_database", "alter_user_password", "alter_role_set_via_function"],
    "in_database_via_function": ["alter_role_in_database_via_function"],
    "via_function_then_killed": ["alter_role_via_function_then_killed"],
}
@pytest.mark.parametrize("group", list(ROLE_GROUPS))
@pytest.mark.slow  # end to end: make test-slow (CI) runs it
def test_changing_the_sandbox_role_from_a_test_case_copy_does_not_outlive_it(tmp_path: Path, pgdata: Path,
                                                                             demo_sandbox: Any, group: str) -> None:
    url = admin_url(pgdata)
    reset_sandbox_role(url)
    attacks = {key: ROLE_ATTACKS[key] for key in ROLE_GROUPS[group]}
    items = [item(key, TOUCH_GOLDEN, category="Management", test_cases=[TEST_CASE]) for key in attacks]
    items.append(item("after", TOUCH_GOLDEN, category="Management", test_cases=[TEST_CASE]))
    before = db_state(url)
    try:
        run = run_evalbench(tmp_path / "attack", items, attacks | {"after": TOUCH_GOLDEN},
                            statement_timeout_s=STATEMENT_TIMEOUT_S, conversation_timeout_s=4,
                            scorers={"test_cases": {"timeout_s": 2, "statement_timeout_s": 0.5}, "executable": {}})
        after = db_state(url)
        # the next run: new connections of the sandbox role to the evaluation database
        next_run = run_evalbench(tmp_path / "next", [item("probe", PROBE)], {"probe": PROBE},
                                 statement_timeout_s=STATEMENT_TIMEOUT_S)
    finally:
        reset_sandbox_role(url)
    assert run.code == 0
    assert all(run.records[key]["outcome"] in {"scored", "timeout"} for key in attacks)
    # the next conversation's verdict is the one a clean run gives (its SQL is the golden SQL: its test case passes)
    assert phase(run.records["after"])["scores"]["test_cases"]["passed"] is True, phase(run.records["after"])["scores"]
    # nothing stays on the (cluster-wide) sandbox roles ...
    for role in SANDBOX_ROLES:
        assert after[f"role_settings:{role}"] == before[f"role_settings:{role}"] == QUIET
    # ... and the next run sees a clean sandbox
    probe = next_run.records["probe"]
    assert next_run.code == 0 and probe["outcome"] == "scored" and phase(probe)["passed"] is True, probe["error"]
    values = dict(zip(generated(probe)["columns"], generated(probe)["preview"][0], strict=True))
    assert (values["own_role"], values["search_path"], values["stores"]) == (True, '"$user", public', 5), values


@pytest.mark.parametrize("variant", ["single_query", "script"])
def test_an_agent_that_makes_the_server_drop_its_connection_is_not_an_infrastructure_error(
        tmp_path: Path, pgdata: Path, demo_sandbox: Any, variant: str) -> None:
    if variant == "single_query":
        attack = "SELECT set_config('idle_session_timeout', '1', false), repeat('x', 10000) FROM generate_series(1, 900)"
    else:
        attack = ("SELECT set_config('idle_in_transaction_session_timeout', '1', false), repeat('x', 100000) "
                  "FROM generate_series(1, 100); SELECT 1 AS x")
    items = [item("probe_first", PROBE), item("drop", COUNT_STORES), item("after", PROBE)]
    run = run_evalbench(tmp_path, items, {"probe_first": PROBE, "drop": attack, "after": PROBE},
                        statement_timeout_s=STATEMENT_TIMEOUT_S)
    drop = run.records["drop"]
    assert drop["outcome"] == "scored", (drop["outcome"], drop["error"])  # the agent's failure, not the harness's
    assert run.code == 0
    after = run.records["after"]
    assert after["outcome"] == "scored" and phase(after)["passed"] is True


# ----------------------------------------------------------------------------- no sandbox login


def _login_failure_checks(run: Run, fragments: list[str]) -> None:
    """The run stopped before its first item, saying what to do: exit 3 (infrastructure), the
    agent was never asked (so no agent SQL ran, as anybody), no conversation ran a turn."""
    stderr = run.extra["stderr"]
    assert run.code == 3, (run.code, stderr)
    assert run.agent.asked == [] and run.agent.server.requests == []
    assert all(r["turns"] == [] and r["outcome"] == "db_error" for r in run.records.values())
    for fragment in fragments:
        assert fragment in stderr, stderr


def test_provisioning_lifts_a_connection_limit_put_on_the_sandbox_role(tmp_path: Path, pgdata: Path, demo_sandbox: Any) -> None:
    url = admin_url(pgdata)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"ALTER ROLE {SANDBOX} CONNECTION LIMIT 0")
    try:
        run = run_evalbench(tmp_path, [item("q1", COUNT_STORES)], {"q1": COUNT_STORES})
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"ALTER ROLE {SANDBOX} CONNECTION LIMIT -1")
    assert run.code == 0 and run.records["q1"]["outcome"] == "scored"


@pytest.mark.parametrize("misconfiguration", ["member_of_pg_read_server_files", "member_of_pg_signal_backend"])
@pytest.mark.slow  # end to end: make test-slow (CI) runs it
def test_a_sandbox_role_that_is_privileged_stops_the_run_before_its_first_item(
        tmp_path: Path, pgdata: Path, demo_sandbox: Any, misconfiguration: str) -> None:
    """Provisioning does not take away memberships someone granted the sandbox role: the run
    stops instead. No fallback to the admin connection."""
    url = admin_url(pgdata)
    change, undo = {
        "member_of_pg_read_server_files": (f"GRANT pg_read_server_files TO {SANDBOX}", f"REVOKE pg_read_server_files FROM {SANDBOX}"),
        "member_of_pg_signal_backend": (f"GRANT pg_signal_backend TO {SANDBOX}", f"REVOKE pg_signal_backend FROM {SANDBOX}"),
    }[misconfiguration]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(change)
    try:
        run = run_evalbench(tmp_path, [item("q1", COUNT_STORES), item("q2", COUNT_STORES)],
                            {"q1": "SELECT pg_read_file('/etc/passwd')", "q2": "SELECT current_user"}, in_process=False)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(undo)
    _login_failure_checks(run, [f"the sandbox role '{SANDBOX}' has rights agent SQL must not have", "revoke"])


@pytest.fixture
def external_scratch(external_pg_url: str) -> Any:
    """A database and roles of this test's own on the external server, dropped afterwards."""
    from sqlalchemy.engine import make_url

    suffix = secrets.token_hex(3)
    names = {"db": f"helperc_attack_{suffix}", "createdb": f"helperc_createdb_{suffix}",
             "files": f"helperc_files_{suffix}", "plain": f"helperc_plain_{suffix}"}
    admin = make_url(external_pg_url).set(database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{names["db"]}"')
        conn.execute(f'CREATE ROLE "{names["createdb"]}" LOGIN CREATEDB')
        conn.execute(f'CREATE ROLE "{names["files"]}" LOGIN IN ROLE pg_read_server_files')
        conn.execute(f'CREATE ROLE "{names["plain"]}" LOGIN')
    db_url = make_url(admin).set(database=names["db"]).render_as_string(hide_password=False)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE stores (store_id int PRIMARY KEY, city text); INSERT INTO stores VALUES (1, 'a'), (2, 'b')")
        conn.execute(f'GRANT SELECT ON stores TO "{names["plain"]}"')
        conn.execute(f'REVOKE TEMPORARY ON DATABASE "{names["db"]}" FROM PUBLIC')  # agent SQL may create nothing
    try:
        yield names, (lambda user: make_url(admin).set(username=user, password=None).render_as_string(hide_password=False))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{names["db"]}" WITH (FORCE)')
            for key in ("createdb", "files", "plain"):
                conn.execute(f'DROP ROLE IF EXISTS "{names[key]}"')


@pytest.mark.external_pg
@pytest.mark.parametrize("role", ["createdb", "files"])
def test_a_privileged_user_that_cannot_create_the_sandbox_role_stops_the_run(
        tmp_path: Path, external_scratch: Any, role: str) -> None:
    """The configured user may not create roles, and may not run agent SQL either (it may create
    databases / read server files): the run stops before its first item and says what to grant."""
    names, url_of = external_scratch
    database_configs = [{"database_name": names["db"], "url": url_of(names[role])}]
    run = run_evalbench(tmp_path, [item("q1", COUNT_STORES, database=names["db"])],
                        {"q1": "SELECT pg_read_file('/etc/passwd')"}, setup_directory=None, database_configs=database_configs,
                        in_process=False)
    _login_failure_checks(run, [f"the configured user '{names[role]}' may not create the sandbox role", "CREATEROLE"])


@pytest.mark.external_pg
def test_an_unprivileged_configured_user_runs_agent_sql_as_itself(tmp_path: Path, external_scratch: Any) -> None:
    """A user that cannot create roles but is itself harmless is used as is, with a warning; the
    agent's SQL runs as that user, never as an administrator, and attacks still fail."""
    names, url_of = external_scratch
    database_configs = [{"database_name": names["db"], "url": url_of(names["plain"])}]
    items = [item("who", "SELECT current_user", database=names["db"]),
             item("read_file", COUNT_STORES, database=names["db"]),
             item("after", "SELECT current_user, current_setting('search_path')", database=names["db"])]
    replies = {"who": "SELECT current_user", "read_file": "SELECT pg_read_file('/etc/passwd')",
               "after": "SELECT current_user, current_setting('search_path')"}
    run = run_evalbench(tmp_path, items, replies, setup_directory=None, database_configs=database_configs)
    assert run.code == 0
    assert generated(run.records["who"])["preview"] == [[names["plain"]]]
    assert phase(run.records["who"])["passed"] is True
    assert "permission denied" in generated(run.records["read_file"])["error"]
    assert phase(run.records["after"])["passed"] is True
    manifest = json.loads((run.run_dir / "manifest.json").read_text())
    (entry,) = manifest["databases"].values()
    assert entry["sandbox_user"] == names["plain"] and names["plain"] in entry["warning"]


def test_module_does_not_leave_the_sandbox_role_changed(pgdata: Path) -> None:
    """Last: whatever the tests above did to the (cluster-wide) sandbox role is undone."""
    state = db_state(admin_url(pgdata))
    assert all(state[f"role_settings:{role}"] == QUIET for role in SANDBOX_ROLES)
    assert state["role"][4] == -1  # connection limit

