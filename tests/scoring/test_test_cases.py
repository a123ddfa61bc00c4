"""The ``test_cases`` scorer: BIRD-Interact Management test cases, each run in a child process
against the embedded PostgreSQL as the sandbox role, always rolled back."""

from __future__ import annotations

import json

import psycopg
import pytest

from evalbench.core.conversation import Phase, PhaseRecord
from evalbench.core.items import Conditions, Item
from evalbench.scoring import SCORERS
from evalbench.scoring.test_case_runner import run_test_case
from tests.conftest import shared_dataset

PRED_OK = "UPDATE stores SET manager_name = 'Zed' WHERE store_id = 1"

CASE_OK = """
def test_case(pred_sqls, sol_sqls, db_name, conn):
    execute_queries(pred_sqls, db_name, conn)
    rows, err, timeout = execute_queries("SELECT manager_name FROM stores WHERE store_id = 1", db_name, conn)
    assert not err and not timeout
    assert rows == [('Zed',)], f"got {rows}"
"""


@pytest.fixture(scope="module")
def conninfo(pgdata) -> str:
    from evalbench.backends.postgres.provision import find_setup, provision
    from evalbench.backends.postgres.target import libpq_conninfo, resolve_target
    from evalbench.config import DatabaseConfig
    from tests.conftest import DEMO

    target = resolve_target(DatabaseConfig(database_name="greenleaf"), pgdata)
    report = provision(target, find_setup(DEMO / "setup", "greenleaf", "postgres"))
    return libpq_conninfo(target.url(user=report.logins.writer.user))  # test cases run the agent's SQL as the writer


def test_golden_as_pred_passes(conninfo):
    verdict = run_test_case(conninfo, CASE_OK, [PRED_OK], [PRED_OK], db_name="greenleaf")
    assert verdict.passed, verdict
    # nothing persisted
    with psycopg.connect(conninfo) as conn:
        assert conn.execute("SELECT manager_name FROM stores WHERE store_id = 1").fetchone()[0] != "Zed"


def test_wrong_pred_fails_with_the_assertion_message(conninfo):
    verdict = run_test_case(conninfo, CASE_OK, ["UPDATE stores SET manager_name = 'Amy' WHERE store_id = 1"], [PRED_OK])
    assert not verdict.passed and verdict.kind == "assertion"
    assert "Amy" in verdict.message


def test_sql_error_in_pred_is_reported_not_raised(conninfo):
    case = """
def test_case(pred_sqls, sol_sqls, db_name, conn):
    _, err, _ = execute_queries(pred_sqls, db_name, conn)
    assert not err, "the predicted SQL failed"
    rows, _, _ = execute_queries("SELECT count(*) FROM stores", db_name, conn)
    assert rows[0][0] > 0
"""
    verdict = run_test_case(conninfo, case, ["UPDATE no_such_table SET x = 1"], [PRED_OK], run_pred_first=False)
    assert not verdict.passed and verdict.message.startswith("assertion failed: the predicted SQL failed")
    assert 'relation "no_such_table" does not exist' in verdict.message


# BIRD-Interact's batch_eval runs pred_sqls before the test cases and fails the item on an
# execution error or timeout ("[exec_err_flg]"): the right change does not save a script that errors.
@pytest.mark.parametrize("script", [
    f"{PRED_OK}; UPDATE no_such_table SET x = 1",  # the right change, then an error
    f"{PRED_OK}; INSERT INTO stores SELECT * FROM stores WHERE store_id = 1",  # then a duplicate key
    f"{PRED_OK}; SELECT 1/0",  # then a read that errors
    f"{PRED_OK}; SELECT pg_sleep(5)",  # then a timeout
])
def test_an_answer_whose_execution_errors_fails_before_any_test_case(conninfo, script):
    verdict = run_test_case(conninfo, CASE_OK, [script], [PRED_OK], db_name="greenleaf", statement_timeout_s=1)
    assert not verdict.passed and verdict.kind == "execution", verdict
    assert "no test case ran" in verdict.message


def test_the_right_script_twice_fails_when_its_second_run_errors(conninfo):
    once = ("INSERT INTO stores (store_id, store_name, city, state, opened_on, manager_name) "
            "VALUES (900, 'New', 'Reno', 'NV', DATE '2024-01-01', 'Zed')")
    case = CASE_OK.replace("store_id = 1", "store_id = 900")
    assert run_test_case(conninfo, case, [once], [once], db_name="greenleaf").passed
    verdict = run_test_case(conninfo, case, [f"{once}; {once}"], [once], db_name="greenleaf")
    assert not verdict.passed and verdict.kind == "execution" and "duplicate key" in verdict.message, verdict


def test_non_assertion_error_fails(conninfo):
    case = """
def test_case(pred_sqls, sol_sqls, db_name, conn):
    rows, _, _ = execute_queries(pred_sqls, db_name, conn)
    return rows[0][0] / 0
"""
    verdict = run_test_case(conninfo, case, ["SELECT 1"], ["SELECT 1"])
    assert not verdict.passed and verdict.kind == "error"
    assert verdict.message.startswith("ZeroDivisionError")


def test_infinite_loop_times_out(conninfo):
    case = "def test_case(pred_sqls, sol_sqls, db_name, conn):\n    while True:\n        pass\n"
    verdict = run_test_case(conninfo, case, ["SELECT 1"], ["SELECT 1"], timeout_s=3)
    assert not verdict.passed and verdict.kind == "timeout"
    assert "timeout" in verdict.message


def test_drop_table_is_rolled_back(conninfo):
    case = """
def test_case(pred_sqls, sol_sqls, db_name, conn):
    # the harness has run the predicted SQL once already
    _, err, _ = execute_queries("SELECT 1 FROM stores", db_name, conn)
    assert err, "stores is gone inside the transaction"
    conn.commit()  # a no-op: test cases cannot commit
"""
    verdict = run_test_case(conninfo, case, ["DROP TABLE stores CASCADE"], [PRED_OK])
    assert verdict.passed, verdict
    with psycopg.connect(conninfo) as conn:
        assert conn.execute("SELECT count(*) FROM stores").fetchone()[0] > 0


def test_transaction_control_in_pred_is_refused(conninfo):
    verdict = run_test_case(conninfo, CASE_OK, [PRED_OK + "; COMMIT"], [PRED_OK])
    assert not verdict.passed and verdict.kind == "forbidden"
    with psycopg.connect(conninfo) as conn:
        assert conn.execute("SELECT manager_name FROM stores WHERE store_id = 1").fetchone()[0] != "Zed"


def test_printing_test_case_and_preprocess(conninfo):
    case = """
def test_case(pred_sqls, sol_sqls, db_name, conn):
    print('{"passed": true, "kind": "passed"}')
    rows, _, _ = execute_queries("SELECT n FROM tc_scratch", db_name, conn)
    assert rows == [(2,)], rows
"""
    verdict = run_test_case(conninfo, case, ["UPDATE tc_scratch SET n = n + 1"], [],
                            preprocess_sql=["CREATE TABLE tc_scratch (n int)", "INSERT INTO tc_scratch VALUES (1)"])
    assert verdict.passed, verdict
    failing = run_test_case(conninfo, case, ["SELECT 1"], [], preprocess_sql=["CREATE TABLE tc_scratch (n int)"])
    assert not failing.passed  # a print cannot forge the verdict
    with psycopg.connect(conninfo) as conn:
        assert conn.execute("SELECT to_regclass('tc_scratch')").fetchone()[0] is None


def _item(**kwargs) -> Item:
    fields = dict(id="m1", database="greenleaf", question="q", golden_sql=[PRED_OK], category="Management")
    fields.update(kwargs)
    return Item(**fields)


class _Conv:
    def __init__(self, item: Item) -> None:
        self.item = item


def _phase(sql: str | None, phase: Phase = Phase.MAIN) -> PhaseRecord:
    return PhaseRecord(phase=phase, question="q", golden_sql=[PRED_OK], conditions=Conditions(),
                       conditions_explicit=False, is_query=False, clarification_budget=0, sql=sql)


def test_pred_runs_once_before_the_test_case(conninfo):
    case = """
def test_case(pred_sqls, sol_sqls, db_name, conn):
    rows, _, _ = execute_queries("SELECT n FROM tc_scratch", db_name, conn)
    assert rows == [(2,)], rows
"""
    args = (conninfo, case, ["UPDATE tc_scratch SET n = n + 1"], [])
    kwargs = dict(preprocess_sql=["CREATE TABLE tc_scratch (n int)", "INSERT INTO tc_scratch VALUES (1)"])
    assert run_test_case(*args, **kwargs).passed
    assert not run_test_case(*args, **kwargs, run_pred_first=False).passed


def test_execute_queries_stops_at_the_first_failing_query(conninfo):
    case = """
def test_case(pred_sqls, sol_sqls, db_name, conn):
    _, err, _ = execute_queries(["SELECT nope FROM stores", "UPDATE stores SET manager_name = 'Q' WHERE store_id = 1"],
                                db_name, conn)
    assert err
    rows, _, _ = execute_queries("SELECT manager_name FROM stores WHERE store_id = 1", db_name, conn)
    assert rows != [('Q',)], "the query after the failing one ran"
"""
    verdict = run_test_case(conninfo, case, [PRED_OK], [PRED_OK], db_name="greenleaf", run_pred_first=False)
    assert verdict.passed, verdict


def test_scorer(conninfo):
    scorer = SCORERS.get("test_cases")({"conninfo": conninfo})
    assert "test_cases" in SCORERS.names()
    item = _item(test_cases=[CASE_OK, CASE_OK])
    assert scorer.score(_Conv(item), _phase(PRED_OK)).passed is True
    wrong = scorer.score(_Conv(item), _phase("SELECT 1"))
    assert wrong.passed is False and wrong.detail.startswith("test case 1/2 failed (assertion)")
    assert scorer.score(_Conv(item), _phase(None)).passed is False
    assert not scorer.score(_Conv(_item()), _phase(PRED_OK)).applicable
    # the follow-up phase uses the follow-up's test cases
    assert not scorer.score(_Conv(item), _phase(PRED_OK, Phase.FOLLOW_UP)).applicable
    # phase.conninfo (set by the scoring stage) takes precedence over the option
    bare = SCORERS.get("test_cases")({})
    phase = _phase(PRED_OK)
    assert bare.score(_Conv(item), phase).passed is False
    phase.conninfo = conninfo  # type: ignore[attr-defined]
    assert bare.score(_Conv(item), phase).passed is True


# --------------------------------------------------------------------------- a real Management item


@pytest.fixture(scope="module")
def db_blog_conninfo(pgdata) -> str:
    root = shared_dataset("db_blog")
    from evalbench.backends.postgres.provision import find_setup, provision
    from evalbench.backends.postgres.target import libpq_conninfo, resolve_target
    from evalbench.config import DatabaseConfig

    target = resolve_target(DatabaseConfig(database_name="db_blog"), pgdata)
    report = provision(target, find_setup(root / "setup", "db_blog", "postgres"))
    return libpq_conninfo(target.url(user=report.logins.writer.user))


def _db_blog_items() -> dict[str, dict]:
    decoder, items = json.JSONDecoder(), {}
    for line in (shared_dataset("db_blog") / "interact_bird_format.jsonl").read_text().splitlines():
        line, pos = line.strip(), 0
        while pos < len(line):
            value, pos = decoder.raw_decode(line, pos)
            items[value["instance_id"]] = value
            while pos < len(line) and line[pos].isspace():
                pos += 1
    return items


@pytest.mark.shared_data
@pytest.mark.parametrize("instance_id", ["db_blog_M_13", "db_blog_M_61"])
def test_real_management_item(db_blog_conninfo, instance_id):
    # db_blog_M_61's test case relies on the harness running the predicted INSERT first
    item = _db_blog_items()[instance_id]
    assert item["category"] == "Management" and item["test_cases"]
    with psycopg.connect(db_blog_conninfo) as conn:
        before = conn.execute("SELECT count(*), max(post_id) FROM tbl_posts").fetchone()
    for case in item["test_cases"]:
        verdict = run_test_case(db_blog_conninfo, case, item["sol_sql"], item["sol_sql"], db_name="db_blog",
                                preprocess_sql=item["preprocess_sql"], clean_up_sqls=item["clean_up_sqls"])
        assert verdict.passed, verdict
    wrong = run_test_case(db_blog_conninfo, item["test_cases"][0], ["SELECT 1"], item["sol_sql"], db_name="db_blog",
                          preprocess_sql=item["preprocess_sql"])
    assert not wrong.passed and wrong.kind in {"assertion", "error"}
    with psycopg.connect(db_blog_conninfo) as conn:
        assert conn.execute("SELECT count(*), max(post_id) FROM tbl_posts").fetchone() == before


# --------------------------------------------------------------------------- the demo's Management items


def _demo_management_items() -> dict[str, dict]:
    from tests.conftest import DEMO

    items = (json.loads(line) for line in (DEMO / "greenleaf.jsonl").read_text(encoding="utf-8").splitlines())
    return {item["instance_id"]: item for item in items if item["category"] == "Management"}


WRONG_STATEMENTS = {
    # a plausible mistake per item: the wrong rows, the wrong value, the wrong shape
    "greenleaf_41": ["UPDATE products SET is_active = false WHERE stock_qty < 5",
                     "UPDATE products SET stock_qty = 1 WHERE stock_qty = 0"],
    "greenleaf_42": ["INSERT INTO suppliers (supplier_name, country, is_organic_certified, lead_time_days) "
                     "VALUES ('Fernhollow Farms', 'Canada', true, 9)",
                     "INSERT INTO suppliers (supplier_id, supplier_name, country, contact_email, is_organic_certified, "
                     "lead_time_days) VALUES (8, 'Fernhollow Farms', 'Canada', 'ferns@fernhollow.example', true, 9)"],
    "greenleaf_43": ["CREATE TABLE product_rating_summary AS SELECT p.product_id, p.product_name, COUNT(r.review_id) "
                     "AS review_count, ROUND(AVG(r.rating), 2) AS avg_rating FROM products p LEFT JOIN reviews r "
                     "ON r.product_id = p.product_id GROUP BY p.product_id, p.product_name",
                     "CREATE VIEW product_rating_summary AS SELECT p.product_id, p.product_name, COUNT(*) AS "
                     "review_count, AVG(r.rating) AS avg_rating FROM products p JOIN reviews r "
                     "ON r.product_id = p.product_id GROUP BY p.product_id, p.product_name"],
}


def test_demo_has_management_items():
    items = _demo_management_items()
    assert len(items) >= 3 and set(items) == set(WRONG_STATEMENTS)
    assert all(item["test_cases"] for item in items.values())


@pytest.mark.parametrize("instance_id", sorted(WRONG_STATEMENTS))
def test_demo_management_item(conninfo, instance_id):
    item = _demo_management_items()[instance_id]
    state = "SELECT (SELECT count(*) FROM products WHERE is_active), (SELECT count(*) FROM suppliers), " \
            "(SELECT count(*) FROM reviews), to_regclass('product_rating_summary') IS NULL"
    with psycopg.connect(conninfo) as conn:
        before = conn.execute(state).fetchone()
    for case in item["test_cases"]:
        verdict = run_test_case(conninfo, case, item["sol_sql"], item["sol_sql"], db_name="greenleaf")
        assert verdict.passed, verdict
        for wrong in WRONG_STATEMENTS[instance_id] + ["SELECT 1"]:
            verdict = run_test_case(conninfo, case, [wrong], item["sol_sql"], db_name="greenleaf")
            assert not verdict.passed and verdict.kind in {"assertion", "error", "forbidden", "execution"}, (wrong, verdict)
    with psycopg.connect(conninfo) as conn:
        assert conn.execute(state).fetchone() == before  # nothing persisted


# --------------------------------------------------------------------------- on a throwaway copy


@pytest.fixture(scope="module")
def clones(pgdata):
    """The demo database's copy factory, as a run makes it (provisioning leaves the template)."""
    from evalbench.backends.postgres.clones import CloneFactory
    from evalbench.backends.postgres.provision import find_setup, provision
    from evalbench.backends.postgres.target import libpq_conninfo, resolve_target
    from evalbench.config import DatabaseConfig
    from tests.conftest import DEMO

    target = resolve_target(DatabaseConfig(database_name="greenleaf"), pgdata)
    report = provision(target, find_setup(DEMO / "setup", "greenleaf", "postgres"))
    assert report.template is not None
    writer = report.logins.writer.user
    sandbox_conninfo = libpq_conninfo(target.url(user=writer))
    return CloneFactory(libpq_conninfo(target.admin), report.template, sandbox_conninfo, writer), sandbox_conninfo


# The golden statement closes the orders placed *before now*; the test case first places one
# "now". BIRD-Interact commits every statement, so the golden statement's NOW() is later and the
# test's order is closed; in one shared transaction NOW() never moves and the order stays open.
NOW_GOLDEN = "UPDATE orders SET status = 'closed' WHERE order_ts < NOW() AND status = 'open'"
NOW_CASE = """
def test_case(pred_sqls, sol_sqls, db_name, conn):
    execute_queries("INSERT INTO orders (order_id, customer_id, store_id, order_ts, status, channel) "
                    "VALUES (99001, 1, 1, NOW(), 'open', 'web')", db_name, conn)
    execute_queries(pred_sqls, db_name, conn)
    rows, err, _ = execute_queries("SELECT status FROM orders WHERE order_id = 99001", db_name, conn)
    assert not err and rows == [('closed',)], f"the order placed before the statement is {rows}"
"""


def test_on_a_copy_each_statement_has_its_own_clock_and_nothing_persists(clones, conninfo):
    from evalbench.scoring.test_cases import run_phase_test_cases

    factory, sandbox_conninfo = clones
    on_copy = run_phase_test_cases(factory, sandbox_conninfo, [NOW_CASE, NOW_CASE], [NOW_GOLDEN], [NOW_GOLDEN], db_name="greenleaf")
    assert on_copy[0].passed, on_copy  # the golden SQL passes its own test case, as in BIRD-Interact
    assert on_copy[1].passed  # one state for a phase's test cases, as upstream: the second sees the first's row
    shared = run_phase_test_cases(None, sandbox_conninfo, [NOW_CASE], [NOW_GOLDEN], [NOW_GOLDEN], db_name="greenleaf")
    assert not shared[0].passed and "open" in shared[0].message  # one transaction: one clock
    with psycopg.connect(conninfo) as conn:  # nothing persisted, no copy left behind
        assert conn.execute("SELECT count(*) FROM orders WHERE order_id = 99001").fetchone()[0] == 0
        left = conn.execute("SELECT count(*) FROM pg_database WHERE datname LIKE 'greenleaf__evalbench_tpl_%\\_%'").fetchone()[0]
        assert left == 0


def test_on_a_copy_commit_in_test_code_stays_on_the_copy(clones, conninfo):
    from evalbench.scoring.test_cases import run_phase_test_cases

    case = """
def test_case(pred_sqls, sol_sqls, db_name, conn):
    cur = conn.cursor()
    cur.execute("UPDATE stores SET manager_name = 'Committed' WHERE store_id = 2")
    conn.commit()
    rows, _, _ = execute_queries("SELECT manager_name FROM stores WHERE store_id = 2", db_name, conn)
    assert rows == [('Committed',)]
"""
    factory, sandbox_conninfo = clones
    verdicts = run_phase_test_cases(factory, sandbox_conninfo, [case], ["SELECT 1"], ["SELECT 1"], db_name="greenleaf")
    assert verdicts[0].passed, verdicts
    with psycopg.connect(conninfo) as conn:
        assert conn.execute("SELECT manager_name FROM stores WHERE store_id = 2").fetchone()[0] != "Committed"
