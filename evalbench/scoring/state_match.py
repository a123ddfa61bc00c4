"""The ``state_match`` scorer: a data-changing (management) task without test cases is judged by
the state it leaves. The golden and the predicted SQL each run on the same starting state (the
phase's preprocess SQL applied) and the resulting database states are compared
(each backend's ``WriteTransaction.fingerprint``); a statement that merely executes never passes.

Both scripts run in one transaction that is always rolled back, each undone to a savepoint
before the other runs and the sequences put back in between — so both see the same rows, the
same next serial ids and the same transaction clock (an ``INSERT ... VALUES (now())`` compares
equal). When the item has EvalBench ``eval_query`` statements, their results after each script
are compared instead of the tables.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from evalbench.backends.base import DatabaseUnavailable, ExecutionResult, WriteTransaction
from evalbench.backends.fingerprint import Fingerprint, differences
from evalbench.core.conversation import Conversation, PhaseRecord
from evalbench.scoring import Score
from evalbench.scoring.compare import EMPTY_GOLD_POLICIES, normalise_rows
from evalbench.sql.statements import split_statements


@dataclass(frozen=True, eq=True)
class EvalQueryResults:
    """The state as the item's ``eval_query`` statements see it: their rows (normalised, as a multiset)."""

    rows: Counter[tuple[Hashable, ...]]


State = Fingerprint | EvalQueryResults  # what is compared: the tables' fingerprint, or the eval_query results


class StateMatch:
    """The predicted SQL leaves the database in the state the golden SQL leaves it in."""

    name = "state_match"
    is_metric = False

    def __init__(self, options: Mapping[str, object]) -> None:
        unknown = set(options) - {"no_change"}
        if unknown:
            raise ValueError(f"state_match options: unknown {sorted(unknown)} (known: no_change)")
        self.no_change = options.get("no_change", "fail")
        if self.no_change not in EMPTY_GOLD_POLICIES:
            raise ValueError(f"state_match: no_change must be one of {', '.join(EMPTY_GOLD_POLICIES)}, got {self.no_change!r}")

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        if phase.is_query:
            return Score.not_applicable("a question: judged by its result (exec_match)")
        if phase.outcome is not None:
            return Score(0.0, False, detail=f"no answer to score: {phase.outcome.value}")
        if not phase.sql:
            return Score(0.0, False, detail="the agent returned no SQL")
        if phase.sandbox is None:
            return Score(0.0, False, detail="scorer error: no database to compare states on")
        eval_query = list(conversation.item.eval_query) if phase.phase.value == "main" else []
        runs = [list(phase.golden_sql)] if phase.golden_is_script else [[sql] for sql in phase.golden_sql]
        try:
            return self._compare(phase, runs, eval_query)
        except DatabaseUnavailable as exc:
            return Score(0.0, False, detail=f"scorer error: the database failed: {exc}")

    def _compare(self, phase: PhaseRecord, runs: list[list[str]], eval_query: list[str]) -> Score:
        with phase.sandbox.write_transaction(phase.preprocess, phase.preprocess_errors) as tx:
            if tx.preprocess_error is not None:
                return Score(0.0, False, detail=f"scorer error: {tx.preprocess_error}")
            dialect = phase.sandbox.dialect
            statements = [s for run in runs for text in run for s in split_statements(text, dialect)]
            statements += [s for s in split_statements(phase.sql or "", dialect)]

            def inspect(t: WriteTransaction) -> State:
                if eval_query:
                    return EvalQueryResults(Counter(tuple(r) for q in eval_query for r in normalise_rows(t.rows(q))))
                fingerprint: Fingerprint = t.fingerprint(statements)
                return fingerprint

            before = inspect(tx)
            predicted_result, predicted = tx.run([phase.sql], inspect)
            reasons = []
            for run in runs:
                golden_result, golden = tx.run(run, inspect)
                if golden_result.error is not None:
                    reasons.append(f"golden SQL failed: {golden_result.error}")
                    continue
                if golden == before:
                    return self._no_change(predicted_result, predicted, before)
                if predicted_result.error is not None:
                    return Score(0.0, False, detail=f"the predicted SQL failed: {predicted_result.error}", flags=("sql_error",))
                if predicted == golden:
                    return Score(1.0, True, detail=f"same database state ({_covered(golden)})")
                reasons.append("; ".join(_diff(golden, predicted)[:3]))
        if predicted == before:
            return Score(0.0, False, detail="the predicted SQL changed nothing", flags=("no_change",))
        return Score(0.0, False, detail=f"different database state: {reasons[0] if reasons else 'no golden SQL'}")

    def _no_change(self, predicted_result: ExecutionResult, predicted: State | None, before: State) -> Score:
        """The golden SQL changes nothing: it cannot tell a right statement from a no-op."""
        if self.no_change == "n/a":
            return Score(None, None, applicable=False, detail="the golden SQL changes nothing (no_change: n/a)", flags=("empty_gold",))
        if self.no_change == "pass" and predicted_result.error is None and predicted == before:
            return Score(1.0, True, detail="neither changes anything (no_change: pass)", flags=("both_empty",))
        return Score(0.0, False, detail="the golden SQL changes nothing: it cannot tell a right statement from a "
                                        "no-op (no_change: fail)", flags=("empty_gold",))


def _covered(state: State) -> str:
    if isinstance(state, EvalQueryResults):
        return "eval_query results"
    return f"{len(state) - 1} table(s) and the schema"


def _diff(golden: State, predicted: State) -> list[str]:
    if isinstance(golden, EvalQueryResults) or isinstance(predicted, EvalQueryResults):  # both are, or neither
        return ["the eval_query results differ"]
    return differences(golden, predicted) or ["the states differ"]
