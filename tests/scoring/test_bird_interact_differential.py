"""``semantics: bird_interact`` against BIRD-Interact's own evaluator, case by case.

``tests/data/bird_interact_cases.jsonl`` holds 935 (golden, predicted, conditions) cases on the
BIRD-Interact database ``db_blog`` (../shared/datasets/db_blog): ordering, duplicates, DISTINCT
and ROUND stripping, numeric/float/integer mixes, half-way rounding, NULLs, empty results,
several ``sol_sql`` statements, extra and missing columns, many types, comments, the 10,000-row
cap, and realistic wrong answers derived from the dataset's golden SQL. Each ``expected`` verdict
was produced by BIRD-Interact's official code itself (``evaluation/src/eval_bird_interact.py::
test_case_default`` after ``eval_bird_interact_batch.py::batch_eval``'s execution of the raw
prediction, through psycopg2, on the same data loaded by evalbench's provisioning), and ``rule``
names the upstream code path that decided it (docs/scoring.md cites each).

A prediction of one text — what an agent returns — goes through the harness's real path: the
execute stage's golden and predicted executions and the ``exec_match`` scorer. A prediction list
of another length (upstream's ``pred_sqls``) is run through the same sandbox and comparison.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from evalbench.core.conversation import Phase, PhaseRecord
from evalbench.dataset import Conditions
from evalbench.scoring import bird_compare, build_scorers
from evalbench.scoring.semantics import ResultRules, execute_generated, execute_golden, golden_problem
from tests.conftest import shared_dataset

CASES_FILE = Path(__file__).parents[1] / "data" / "bird_interact_cases.jsonl"
CASES = [json.loads(line) for line in CASES_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]
RULES = ResultRules("bird_interact")


@pytest.fixture(scope="module", params=["embedded", "external"])
def db_blog(request: pytest.FixtureRequest, pgdata: Path):
    """db_blog on the private embedded server, and on the external server when there is one
    (PostgreSQL 15 on 127.0.0.1 in CI: the server the corpus was judged on, XML support included)."""
    import os

    from evalbench.backends.base import SandboxLimits
    from evalbench.backends.postgres.backend import open_sandbox
    from evalbench.backends.postgres.provision import find_setup, provision
    from evalbench.backends.postgres.target import resolve_target
    from evalbench.config import DatabaseConfig

    root = shared_dataset("db_blog")
    if request.param == "external":
        url = os.environ.get("EVALBENCH_TEST_PG_URL")
        if not url:
            pytest.skip("EVALBENCH_TEST_PG_URL is not set")
        config = DatabaseConfig(database_name="db_blog", url=url)
    else:
        config = DatabaseConfig(database_name="db_blog")
    target = resolve_target(config, pgdata)
    report = provision(target, find_setup(root / "setup", "db_blog", "postgres"))
    # the sessions' time zone as the corpus was judged (libpq sends PGTZ); not ALTER DATABASE, which
    # would change the database setup made, and a later run would rightly refuse to reuse it
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PGTZ", "UTC")
        sandbox = open_sandbox(target, report, SandboxLimits(pool_size=2, statement_timeout_s=30, max_rows=10_000))
        yield sandbox
        sandbox.close()


def verdict(sandbox: Any, case: dict[str, Any], scorer: Any) -> tuple[bool, str]:
    conditions = Conditions(**case["conditions"])
    phase = PhaseRecord(phase=Phase.MAIN, question="q", golden_sql=case["sol_sql"], conditions=conditions,
                        conditions_explicit=True, is_query=True, clarification_budget=0, golden_is_script=True)
    execute_golden(sandbox, phase, RULES)
    problem = golden_problem(phase, RULES)
    if problem is not None:  # the golden script fails after cleaning: upstream fails every answer
        assert problem[0] == "invalid_item", problem
        return False, f"invalid_item: {problem[1]}"
    if len(case["pred_sqls"]) == 1:  # an agent's answer: the real path
        phase.sql = case["pred_sqls"][0]
        execute_generated(sandbox, phase, RULES)
        score = scorer.score(None, phase)
        return bool(score.passed), score.detail
    raw = sandbox.execute(case["pred_sqls"], mode="read")
    cleaned = bird_compare.clean_sql(case["pred_sqls"])
    compared = sandbox.execute(cleaned, mode="read") if raw.ok and cleaned != case["pred_sqls"] else raw
    runs = phase.golden_run_sql
    result = bird_compare.compare(compared, cleaned[-1] if cleaned else "", phase.golden[0], runs[0][-1],
                                  conditions.order, raw_generated=raw)
    return result.match, f"{result.reason} [{result.rule}]"


@pytest.mark.shared_data
def test_every_case_agrees_with_bird_interacts_evaluator(db_blog):
    scorer = build_scorers({"exec_match": {"semantics": "bird_interact"}})[0]
    xml = db_blog.execute("SELECT 'x'::xml").ok  # the embedded server may be built without libxml
    disagreements = []
    for case in CASES:
        if not xml and "::xml" in " ".join(case["sol_sql"] + case["pred_sqls"]):
            continue
        got, detail = verdict(db_blog, case, scorer)
        if got != case["expected"]:
            disagreements.append(f"{case['id']} ({case['rule']}): expected {case['expected']}, got {got}: {detail}")
    assert not disagreements, f"{len(disagreements)} of {len(CASES)} disagree:\n" + "\n".join(disagreements[:40])


def test_the_corpus_covers_the_class_of_inputs():
    groups = Counter(case["group"] for case in CASES)
    rules = Counter(case["rule"].split(":")[0] for case in CASES)
    assert len(CASES) >= 500 and len({case["id"] for case in CASES}) == len(CASES)
    for group in ("ordering", "duplicates", "distinct", "round", "numeric_mix", "halfway", "nulls", "empty",
                  "multi_sol", "columns", "types", "comments", "mutations", "golden_self"):
        assert groups[group] >= 20, (group, groups[group])
    for rule in ("set_equal", "set_unequal", "ordered_equal", "ordered_unequal", "empty_pred", "empty_gold",
                 "pred_raw_error", "pred_clean_error", "gold_clean_error", "exception"):
        assert rules[rule] >= 5, (rule, rules[rule])
    share_true = sum(case["expected"] for case in CASES) / len(CASES)
    assert 0.35 <= share_true <= 0.75
