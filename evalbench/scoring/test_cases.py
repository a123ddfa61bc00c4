"""The ``test_cases`` scorer: BIRD-Interact Management items, judged by their Python test cases.

Each test case runs in its own process (:mod:`evalbench.scoring.test_case_runner`), connected
with the sandbox's non-superuser conninfo, inside one transaction that is always rolled back.
The phase passes when every test case passes; the detail names the first failure.

The scorer needs the sandbox's conninfo, which scorers do not receive: it reads
``phase.conninfo`` (set by the scoring stage) or, failing that, the ``conninfo`` option.
"""

from __future__ import annotations

from typing import Any

from evalbench.conversation import Conversation, Phase, PhaseRecord
from evalbench.dataset import Item
from evalbench.scoring import SCORERS, Score
from evalbench.scoring.test_case_runner import run_test_case

_OPTIONS = {"timeout_s", "statement_timeout_s", "conninfo"}


def test_cases_of(item: Item, phase: PhaseRecord) -> tuple[list[str], list[str], list[str]]:
    """(test cases, preprocess_sql, clean_up_sqls) of the phase: the follow-up's test cases run
    after the follow-up's preprocessing (which already holds the main task and its clean-up)."""
    if phase.phase is Phase.FOLLOW_UP:
        follow_up = item.follow_up
        return (list(follow_up.test_cases) if follow_up is not None else []), list(phase.preprocess), []
    return list(item.test_cases), list(phase.preprocess), list(item.clean_up_sqls)


@SCORERS.register("test_cases")
class TestCases:
    """Every test case of the item (or follow-up) passes with the agent's SQL as ``pred_sqls``."""

    name = "test_cases"
    is_metric = False

    def __init__(self, options: dict[str, Any]) -> None:
        unknown = set(options) - _OPTIONS
        if unknown:
            raise ValueError(f"test_cases takes only {sorted(_OPTIONS)}, got {sorted(unknown)}")
        self.timeout_s = float(options.get("timeout_s", 30.0))
        self.statement_timeout_s = float(options.get("statement_timeout_s", 10.0))
        self.conninfo: str | None = options.get("conninfo")

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        cases, preprocess, clean_up = test_cases_of(conversation.item, phase)
        if not cases:
            return Score.not_applicable("the item has no test cases")
        if phase.outcome is not None:
            return Score(0.0, False, detail=f"no answer to score: {phase.outcome.value}")
        if not phase.sql:
            return Score(0.0, False, detail="the agent returned no SQL")
        conninfo = getattr(phase, "conninfo", None) or self.conninfo
        if not conninfo:
            return Score(0.0, False, detail="scorer error: no database connection for the test cases")
        db_name = conversation.item.database
        for index, case in enumerate(cases, 1):
            verdict = run_test_case(
                conninfo, case, [phase.sql], phase.golden_sql,
                db_name=db_name, preprocess_sql=preprocess, clean_up_sqls=clean_up,
                timeout_s=self.timeout_s, statement_timeout_s=self.statement_timeout_s,
            )
            if not verdict.passed:
                return Score(0.0, False, detail=f"test case {index}/{len(cases)} failed ({verdict.kind}): {verdict.message}",
                             flags=(verdict.kind,))
        return Score(1.0, True, detail=f"{len(cases)} test case(s) passed")
