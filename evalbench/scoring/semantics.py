"""The result-comparison semantics of a run, and the SQL each phase runs under it.

Two named semantics (docs/scoring.md states every rule of both):

- ``bird_interact`` reproduces BIRD-Interact's official evaluator (:mod:`evalbench.scoring.bird_compare`):
  the golden and predicted SQL of a question are cleaned (comments, DISTINCT, ROUND) and run
  again before their results are compared;
- ``evalbench`` is our own strict comparison (:mod:`evalbench.scoring.compare`), with an explicit
  ``empty_gold`` policy.

The default follows the dataset's format: BIRD-Interact files are judged as BIRD-Interact
judges them, EvalBench files by ours. How several golden SQLs are read is a property of the
format, not of the semantics: a BIRD-Interact ``sol_sql`` list is one script (its evaluator runs
the statements in order and compares the last result), EvalBench's ``golden_sql`` entries are
alternatives (any may match).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from evalbench.core.json_types import JsonDict
from evalbench.scoring.bird_compare import clean_sql
from evalbench.scoring.compare import EMPTY_GOLD_POLICIES, EmptyGold
from evalbench.scoring.temp_objects import writes_only_temporary

if TYPE_CHECKING:
    from evalbench.backends.base import ExecutionResult, Sandbox
    from evalbench.core.conversation import PhaseRecord

Semantics = Literal["bird_interact", "evalbench"]
SEMANTICS: Final = ("bird_interact", "evalbench")


def default_semantics(dataset_format: str | None) -> Semantics:
    """BIRD-Interact files → ``bird_interact``; EvalBench (and any other) files → ``evalbench``."""
    return "bird_interact" if dataset_format == "bird-interact" else "evalbench"


@dataclass(frozen=True)
class ResultRules:
    """How a run turns golden and predicted SQL into a verdict: the semantics, and the policy for
    an empty golden result (``evalbench`` only: ``bird_interact`` always fails it, as ex_base)."""

    semantics: Semantics = "evalbench"
    empty_gold: EmptyGold = "fail"

    @classmethod
    def from_options(cls, options: Mapping[str, object] | None, dataset_format: str | None) -> ResultRules:
        """Read ``semantics`` and ``empty_gold`` from ``exec_match``'s options (defaults by format)."""
        options = options or {}
        semantics = options.get("semantics") or default_semantics(dataset_format)
        if semantics not in SEMANTICS:
            raise ValueError(f"exec_match: semantics must be one of {', '.join(SEMANTICS)}, got {semantics!r}")
        empty_gold = options.get("empty_gold", "fail")
        if empty_gold not in EMPTY_GOLD_POLICIES:
            raise ValueError(f"exec_match: empty_gold must be one of {', '.join(EMPTY_GOLD_POLICIES)}, got {empty_gold!r}")
        if semantics == "bird_interact" and empty_gold != "fail":
            raise ValueError("exec_match: empty_gold applies to semantics: evalbench only "
                             "(BIRD-Interact's evaluator fails every answer to an empty golden result)")
        return cls(semantics, empty_gold)

    @property
    def bird(self) -> bool:
        return self.semantics == "bird_interact"

    def describe(self) -> JsonDict:
        return {"semantics": self.semantics, "empty_gold": self.empty_gold}

    def golden_runs(self, phase: PhaseRecord) -> list[list[str]]:
        """The golden SQL run for each golden result: the whole script once (BIRD-Interact), or
        each alternative on its own (EvalBench); cleaned as BIRD-Interact cleans a question's."""
        runs = [list(phase.golden_sql)] if phase.golden_is_script else [[sql] for sql in phase.golden_sql]
        if self.bird and phase.is_query:
            runs = [clean_sql(run) for run in runs]
        return runs

    def compared_sql(self, phase: PhaseRecord) -> str | None:
        """The text of the agent's SQL that is compared when it differs from what the agent wrote."""
        if not (self.bird and phase.is_query and phase.sql):
            return None
        cleaned = clean_sql([phase.sql])[0]
        return cleaned if cleaned != phase.sql else None

    @property
    def preprocess_errors(self) -> Literal["fail", "stop"]:
        """BIRD-Interact ignores a failing preprocess statement (execute_queries stops there and
        the harness goes on); ours treats it as a broken item."""
        return "stop" if self.bird else "fail"


# --------------------------------------------------------------------------- execution


def execute_golden(sandbox: Sandbox, phase: PhaseRecord, rules: ResultRules) -> None:
    """Run the phase's golden SQL (each golden result's script) and keep the results on the phase."""
    phase.golden_run_sql = rules.golden_runs(phase)
    phase.preprocess_errors = rules.preprocess_errors
    phase.golden = [sandbox.execute(run, mode=golden_mode(phase, run), preprocess=phase.preprocess,
                                    preprocess_errors=rules.preprocess_errors, actor="golden")
                    for run in phase.golden_run_sql]


def golden_mode(phase: PhaseRecord, run: list[str]) -> Literal["read", "write"]:
    """Write mode (rolled back) for a management task, or a golden script that writes (a
    temporary table filled before the final query); read mode otherwise."""
    from evalbench.sql.statements import READ_KEYWORDS, split_statements, statement_kind

    writes = any(statement_kind(s)[0] not in READ_KEYWORDS for text in run for s in split_statements(text))
    return "write" if writes or not phase.is_query else "read"


def execute_generated(sandbox: Sandbox, phase: PhaseRecord, rules: ResultRules) -> None:
    """Run the agent's SQL as written and, under ``bird_interact``, its cleaned text too. A
    question's answer that writes only temporary objects of its own runs in write mode
    (:mod:`evalbench.scoring.temp_objects`)."""
    if not phase.sql:
        return
    mode: Literal["read", "write"] = "read" if phase.is_query else "write"
    if phase.is_query and writes_only_temporary(phase.sql, getattr(sandbox, "dialect", "postgres")):
        mode = "write"  # temporary objects of its own, as BIRD-Interact allows: inside a rolled-back transaction
    phase.generated = sandbox.execute(phase.sql, mode=mode, preprocess=phase.preprocess,
                                      preprocess_errors=rules.preprocess_errors)
    cleaned = rules.compared_sql(phase)
    if cleaned is not None and phase.generated.ok:
        phase.compared_sql = cleaned
        phase.compared = sandbox.execute([cleaned], mode=mode, preprocess=phase.preprocess,
                                         preprocess_errors=rules.preprocess_errors)


def golden_problem(phase: PhaseRecord, rules: ResultRules) -> tuple[str, str] | None:
    """Why the phase's golden results cannot judge an answer: ``("db_error", message)`` when the
    database itself failed, ``("invalid_item", message)`` when the dataset's SQL is the problem
    (it errors, times out, is not allowed, or its result exceeds the row cap); None when usable."""
    results: list[ExecutionResult] = phase.golden
    if not results:
        return ("invalid_item", "the item has no golden SQL")
    for result in results:
        if result.error_kind == "connection":
            return ("db_error", f"golden SQL failed (connection): {result.error}")
    usable = [r for r in results if r.error is None and not (r.truncated and not rules.bird)]
    if usable:
        return None
    first = results[0]
    if first.error is not None:
        written = [list(phase.golden_sql)] if phase.golden_is_script else [[sql] for sql in phase.golden_sql]
        cleaned = " after BIRD-Interact's cleaning" if phase.golden_run_sql and phase.golden_run_sql != written else ""
        return ("invalid_item", f"golden SQL failed{cleaned} ({first.error_kind}): {first.error}")
    return ("invalid_item", f"golden result truncated at the row cap ({first.row_count} rows): it cannot be compared")
