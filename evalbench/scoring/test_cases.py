"""The ``test_cases`` scorer: BIRD-Interact Management items, judged by their Python test cases.

A phase's test cases run in a child process (:mod:`evalbench.scoring.test_case_runner`) as the
sandbox's non-superuser role: on a throwaway copy of the database, each statement committed as
BIRD-Interact's harness does (so ``NOW()`` advances between statements), or — when no copy can
be made — each in one transaction that is always rolled back. The phase passes when every test
case passes; the detail names the first failure.

The scorer needs the sandbox's conninfo, which scorers do not receive: it reads
``phase.conninfo`` (set by the scoring stage) or, failing that, the ``conninfo`` option.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Protocol

from evalbench.core.conversation import Conversation, Phase, PhaseRecord
from evalbench.dataset import Item
from evalbench.scoring import Score
from evalbench.scoring.options import real
from evalbench.scoring.test_case_runner import TestCaseVerdict, run_test_cases

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from evalbench.scoring.test_case_runner import TestCaseOptions

log = logging.getLogger(__name__)

_OPTIONS = {"timeout_s", "statement_timeout_s", "conninfo"}


class Clones(Protocol):
    """A sandbox's factory of throwaway copies of its database (``Sandbox.clones``)."""

    def clone(self) -> AbstractContextManager[str]: ...  # the copy's conninfo; dropped on exit


def test_cases_of(item: Item, phase: PhaseRecord) -> tuple[list[str], list[str], list[str]]:
    """(test cases, preprocess_sql, clean_up_sqls) of the phase: the follow-up's test cases run
    after the follow-up's preprocessing (which already holds the main task and its clean-up)."""
    if phase.phase is Phase.FOLLOW_UP:
        follow_up = item.follow_up
        return (list(follow_up.test_cases) if follow_up is not None else []), list(phase.preprocess), []
    return list(item.test_cases), list(phase.preprocess), list(item.clean_up_sqls)


class TestCases:
    """Every test case of the item (or follow-up) passes with the agent's SQL as ``pred_sqls``."""

    name = "test_cases"
    is_metric = False

    def __init__(self, options: Mapping[str, object]) -> None:
        unknown = set(options) - _OPTIONS
        if unknown:
            raise ValueError(f"test_cases takes only {sorted(_OPTIONS)}, got {sorted(unknown)}")
        self.timeout_s = real(options.get("timeout_s", 30.0))
        self.statement_timeout_s = real(options.get("statement_timeout_s", 10.0))
        conninfo = options.get("conninfo")
        self.conninfo = conninfo if isinstance(conninfo, str) else None

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        cases, preprocess, clean_up = test_cases_of(conversation.item, phase)
        if not cases:
            return Score.not_applicable("the item has no test cases")
        if phase.outcome is not None:
            return Score(0.0, False, detail=f"no answer to score: {phase.outcome.value}")
        if not phase.sql:
            return Score(0.0, False, detail="the agent returned no SQL")
        sandbox = phase.sandbox
        if sandbox is not None and not getattr(sandbox, "runs_test_cases", True):
            return Score.not_applicable(f"test cases hold a PostgreSQL connection; this {sandbox.dialect} database cannot "
                                        "run them (the state the SQL leaves decides: state_match)")
        conninfo = getattr(phase, "conninfo", None) or self.conninfo
        if not conninfo:
            return Score(0.0, False, detail="scorer error: no database connection for the test cases")
        verdicts = run_phase_test_cases(getattr(sandbox, "clones", None), conninfo, cases, [phase.sql], phase.golden_sql,
                                        lock=getattr(sandbox, "write_lock", None),
                                        db_name=conversation.item.database, preprocess_sql=preprocess,
                                        clean_up_sqls=clean_up, timeout_s=self.timeout_s,
                                        statement_timeout_s=self.statement_timeout_s,
                                        preprocess_errors=phase.preprocess_errors)
        for index, verdict in enumerate(verdicts, 1):
            if not verdict.passed:
                return Score(0.0, False, detail=f"test case {index}/{len(cases)} failed ({verdict.kind}): {verdict.message}",
                             flags=(verdict.kind,))
        return Score(1.0, True, detail=f"{len(cases)} test case(s) passed")


def run_phase_test_cases(clones: Clones | None, conninfo: str, cases: list[str], pred_sqls: list[str], sol_sqls: list[str],
                         lock: AbstractContextManager[object] | None = None,
                         **options: Unpack[TestCaseOptions]) -> list[TestCaseVerdict]:
    """A phase's test cases on a throwaway copy of the database when one can be made (each
    statement committed, as BIRD-Interact), else in rolled-back transactions."""
    if clones is not None:
        try:
            with clones.clone() as copy:  # a database of its own: no lock needed
                return run_test_cases(conninfo, cases, pred_sqls, sol_sqls, clone=copy, **options)
        except Exception as exc:  # noqa: BLE001  # a copy is an optimisation: any failure falls back
            log.warning("no copy of the database for test cases (%s): running them in rolled-back transactions", exc)
    with lock if lock is not None else nullcontext():  # they write (and restore sequences): not beside other writers
        return run_test_cases(conninfo, cases, pred_sqls, sol_sqls, **options)
