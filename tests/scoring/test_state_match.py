"""state_match: a management task without test cases is judged by the database state it leaves,
through the whole pipeline (golden first, the agent's SQL, the score stage) on the demo database."""

from __future__ import annotations

import pytest

from evalbench.core.conversation import Outcome
from evalbench.run.stages import Parts, run_conversation
from evalbench.scoring import build_scorers
from tests.helpers import FixedVUser, ScriptedAgent, make_item, sql

GOLDEN_UPDATE = "UPDATE products SET is_active = false WHERE stock_qty = 0 AND is_active"
SCORERS = {"exec_match": {}, "executable": {}, "test_cases": {}, "state_match": {}}


def judge(golden: str, answer: str, demo_sandbox, **options):
    item = make_item(golden=golden, category="Management")
    scorers = build_scorers(SCORERS | {"state_match": options})
    parts = Parts(agent=ScriptedAgent(lambda s, t, text: sql(answer)), vuser=FixedVUser(RuntimeError("unused")),
                  sandbox=demo_sandbox, scorers=scorers)
    conv = run_conversation(item, parts)
    phase = conv.phases[0]
    return conv, phase, phase.scores["state_match"]


def _active_count(sandbox) -> int:
    return sandbox.execute("SELECT count(*) FROM products WHERE is_active").rows[0][0]


@pytest.mark.parametrize("answer", [
    GOLDEN_UPDATE,
    "UPDATE products SET is_active = FALSE WHERE stock_qty <= 0 AND is_active = true",  # written otherwise, same effect
    "UPDATE products SET is_active = false WHERE stock_qty = 0",  # also touches inactive rows: already false, same state
])
def test_the_golden_update_and_equivalent_statements_pass(demo_sandbox, answer):
    before = _active_count(demo_sandbox)
    conv, phase, score = judge(GOLDEN_UPDATE, answer, demo_sandbox)
    assert conv.outcome is Outcome.SCORED
    assert score.passed is True, score.detail
    assert phase.primary == "state_match" and phase.passed  # no test cases: state_match decides
    assert phase.scores["test_cases"].applicable is False
    assert _active_count(demo_sandbox) == before  # nothing persisted


@pytest.mark.parametrize("answer, why", [
    ("UPDATE products SET is_active = false WHERE stock_qty < 5", "products"),  # a wrong filter
    ("UPDATE products SET is_active = false", "products"),  # every row
    ("UPDATE products SET stock_qty = 0 WHERE stock_qty = 0", "changed nothing"),  # merely executes
    ("SELECT 1", "changed nothing"),
    ("UPDATE suppliers SET rating = 1", "suppliers"),  # another table
    ("ALTER TABLE products ADD COLUMN note text", "schema"),
])
def test_a_wrong_statement_fails(demo_sandbox, answer, why):
    _conv, phase, score = judge(GOLDEN_UPDATE, answer, demo_sandbox)
    assert score.passed is False and why in score.detail, score.detail
    assert phase.scores["executable"].passed is True  # it ran: executing is not passing
    assert phase.passed is False


def test_a_failing_statement_fails(demo_sandbox):
    _, _, score = judge(GOLDEN_UPDATE, "UPDATE products SET nope = 1", demo_sandbox)
    assert score.passed is False and "nope" in score.detail


def test_insert_through_the_serial_sequence_and_now_compare_equal(demo_sandbox):
    """Both scripts see the same next serial id and the same transaction clock."""
    golden = "INSERT INTO suppliers (supplier_name, country, lead_time_days, contact_email) VALUES ('Fern Co', 'NL', 4, now()::text)"
    _, _, score = judge(golden, golden.replace("now()::text", "CURRENT_TIMESTAMP::text"), demo_sandbox)
    assert score.passed is True, score.detail
    _, _, score = judge(golden, golden.replace("4,", "5,"), demo_sandbox)
    assert score.passed is False and "suppliers" in score.detail


def test_ddl(demo_sandbox):
    golden = "CREATE VIEW organic_suppliers AS SELECT supplier_name FROM suppliers WHERE is_organic_certified"
    _, _, score = judge(golden, golden, demo_sandbox)
    assert score.passed is True, score.detail
    _, _, score = judge(golden, golden.replace("WHERE is_organic_certified", ""), demo_sandbox)
    assert score.passed is False and "schema" in score.detail


@pytest.mark.parametrize("policy, passed, applicable", [("fail", False, True), ("pass", True, True), ("n/a", None, False)])
def test_a_golden_statement_that_changes_nothing_follows_the_policy(demo_sandbox, policy, passed, applicable):
    no_op = "UPDATE products SET is_active = false WHERE product_id < 0"
    _, _, score = judge(no_op, "SELECT 1", demo_sandbox, no_change=policy)
    assert (score.passed, score.applicable) == (passed, applicable), score.detail
    assert "changes nothing" in score.detail or "neither" in score.detail


def test_bad_options_are_config_errors():
    with pytest.raises(ValueError, match="no_change"):
        build_scorers({"state_match": {"no_change": "maybe"}})
    with pytest.raises(ValueError, match="unknown"):
        build_scorers({"state_match": {"tables": ["x"]}})
