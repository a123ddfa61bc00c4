"""Management answers judged as BIRD-Interact's ``batch_eval`` judges them, through a real
``evalbench run`` with an agent over HTTP: the answer script runs once as one unit before the test
cases, and an execution error or timeout fails the phase — a right change does not save a script
that errors afterwards, nor the right script run twice (docs/scoring.md#test_cases)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.attack_agent import item
from tests.attacks.test_attacks_sql import phase, run_evalbench

UPDATE = "UPDATE stores SET manager_name = 'Zed' WHERE store_id = 1"
INSERT = ("INSERT INTO stores (store_id, store_name, city, state, opened_on, manager_name) "
          "VALUES (900, 'New', 'Reno', 'NV', DATE '2024-01-01', 'Zed')")
CASE = """
def test_case(pred_sqls, sol_sqls, db_name, conn):
    rows, err, timeout = execute_queries("SELECT manager_name FROM stores WHERE store_id = {store}", db_name, conn)
    assert not err and not timeout
    assert rows == [('Zed',)], f"got {{rows}}"
"""
# item id -> (golden, the agent's script, passes)
ANSWERS: dict[str, tuple[str, str, bool]] = {
    "right_update": (UPDATE, UPDATE, True),
    "right_insert": (INSERT, INSERT, True),
    "error_after_the_right_change": (UPDATE, f"{UPDATE}; UPDATE no_such_table SET x = 1", False),
    "failing_read_after_the_right_change": (UPDATE, f"{UPDATE}; SELECT 1 / 0", False),
    "the_right_script_twice": (INSERT, f"{INSERT}; {INSERT}", False),
    "timeout_after_the_right_change": (UPDATE, f"{UPDATE}; SELECT pg_sleep(10)", False),
}


@pytest.mark.parametrize("semantics", ["bird_interact", pytest.param("evalbench", marks=pytest.mark.slow)])
@pytest.mark.slow  # end to end: make test-slow (CI) runs it
def test_an_answer_whose_execution_errors_never_passes(tmp_path: Path, pgdata: Path, semantics: str) -> None:
    items: list[dict[str, Any]] = []
    for key, (golden, _, _) in ANSWERS.items():
        store = 900 if golden == INSERT else 1
        items.append(item(key, golden, category="Management", test_cases=[CASE.format(store=store)]))
    result = run_evalbench(tmp_path, items, {key: script for key, (_, script, _) in ANSWERS.items()},
                           statement_timeout_s=2,
                           scorers={"exec_match": {"semantics": semantics}, "test_cases": {}, "executable": {}})
    assert result.code == 0
    assert sorted(result.order) == sorted(ANSWERS)
    for key, (_, _, passes) in ANSWERS.items():
        record = phase(result.records[key])
        verdict = record["scores"]["test_cases"]
        assert verdict["passed"] is passes, (key, verdict)
        assert record["primary"] == "test_cases" and record["passed"] is passes, (key, record["passed"])
        if not passes:
            assert "no test case ran" in verdict["detail"], (key, verdict)


# BIRD-Interact's test cases typically set their own rows up and run the answer again on them:
# an answer that also makes an unrelated object then fails there (the object exists already).
RERUN_CASE = """
def test_case(pred_sqls, sol_sqls, db_name, conn):
    execute_queries("UPDATE stores SET manager_name = 'Old' WHERE store_id = 1", db_name, conn)
    _, err, timeout = execute_queries(pred_sqls, db_name, conn)
    assert not err and not timeout, "the answer failed when run on the test's rows"
    rows, err, timeout = execute_queries("SELECT manager_name FROM stores WHERE store_id = 1", db_name, conn)
    assert rows == [('Zed',)], f"got {rows}"
"""
EXTRA: dict[str, tuple[str, bool]] = {  # item id -> (the agent's script, passes)
    "right_update_run_again": (UPDATE, True),
    "right_change_and_an_extra_table": (f"{UPDATE}; CREATE TABLE evalbench_extra (x int)", False),
    "right_change_and_an_extra_index": (f"{UPDATE}; CREATE INDEX evalbench_extra_idx ON stores (city)", False),
}


@pytest.mark.parametrize("semantics", ["bird_interact", pytest.param("evalbench", marks=pytest.mark.slow)])
def test_the_right_change_with_an_unrelated_extra_object_fails(tmp_path: Path, pgdata: Path, semantics: str) -> None:
    """Both judges refuse it: the test case that runs the answer again (as upstream's do) and
    state_match, which sees the extra object; the right change alone passes both."""
    items = [item(key, UPDATE, category="Management", test_cases=[RERUN_CASE]) for key in EXTRA]
    result = run_evalbench(tmp_path, items, {key: script for key, (script, _) in EXTRA.items()},
                           scorers={"exec_match": {"semantics": semantics}, "test_cases": {}, "state_match": {},
                                    "executable": {}})
    assert result.code == 0 and sorted(result.order) == sorted(EXTRA)
    for key, (_, passes) in EXTRA.items():
        record = phase(result.records[key])
        assert record["scores"]["test_cases"]["passed"] is passes, (key, record["scores"]["test_cases"])
        assert record["scores"]["state_match"]["passed"] is passes, (key, record["scores"]["state_match"])
        assert record["primary"] == "test_cases" and record["passed"] is passes
