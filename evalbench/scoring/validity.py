"""The one definition of an invalid item, shared by ``evalbench validate`` and ``evalbench run``.

A phase is invalid when its golden work cannot judge an answer; the first error found is the
reason both commands list. The checks, in the order they run:

1. **results** — the golden SQL errors, times out, or (``evalbench`` semantics) its result is cut
   at the row cap, in every alternative; or every usable golden result is empty while the
   semantics in force fails every answer to an empty result (BIRD-Interact's ``ex_base``;
   ``empty_gold: fail``);
2. **order** — ``conditions.order`` without an ORDER BY where order is compared (``bird_interact``),
   or with one under which differing rows tie (their order is up to the plan);
3. **ties** — a LIMIT that cuts through rows tied on the ORDER BY keys (which rows come back is
   up to the plan), when the keys are output columns;
4. **test cases** — a management task whose test cases fail for its own golden script;
5. **no change** — a management task judged by the state it leaves (``state_match``, no test
   cases) whose golden script changes nothing, while ``no_change: fail`` fails every answer then.

Warnings are worth a look but judge nothing wrongly: a failing alternative beside a working one,
test cases that pass for a statement that changes nothing, ``decimal`` without a fraction, ORDER
BY keys we cannot resolve for the tie check. Not detected: nondeterminism inside the query (a
window function ordered over ties, ``NOW()``), and a golden result that depends on data order.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from itertools import pairwise

import sqlglot
from sqlglot import exp

from evalbench.backends.base import ExecutionResult, Sandbox
from evalbench.core.conversation import PhaseRecord, follow_up_phase
from evalbench.dataset import Item
from evalbench.scoring.execution import golden_is_ordered, tie_key_positions
from evalbench.scoring.options import real
from evalbench.scoring.semantics import ResultRules, execute_golden, golden_mode, golden_problem
from evalbench.scoring.test_case_runner import TestCaseOptions
from evalbench.scoring.test_cases import run_phase_test_cases, test_cases_of
from evalbench.sql.statements import last_statement, split_statements, sqlglot_dialect

REMEMBERED = 4096  # phases whose findings a GoldenCheck keeps
# A write statement that changes nothing the test cases look at: the "wrong answer" every test
# case must reject.
NO_OP_SQL = "CREATE TEMP TABLE IF NOT EXISTS evalbench_validate_no_op (x integer)"


@dataclass(frozen=True)
class Finding:
    level: str  # "error" (the phase is invalid) | "warning"
    message: str
    phase: str | None = None  # "main" | "follow_up"; None: the item as a whole
    # an error after which an answer may still pass BIRD-Interact's evaluator (ties, order, test
    # cases): the agent is asked and judged, for the official figure only
    judged: bool = False


@dataclass(frozen=True)
class TestCaseLimits:
    timeout_s: float = 30.0
    statement_timeout_s: float = 10.0

    @classmethod
    def of(cls, scorers: Mapping[str, Mapping[str, object] | None]) -> TestCaseLimits | None:
        """The ``test_cases`` scorer's limits; None when the plan does not judge by test cases."""
        if "test_cases" not in scorers:
            return None
        options = scorers["test_cases"] or {}
        return cls(real(options.get("timeout_s", 30.0)), real(options.get("statement_timeout_s", 10.0)))


def first_error(findings: list[Finding]) -> Finding | None:
    """The finding that makes a phase invalid (its first error), or None."""
    return next((f for f in findings if f.level == "error"), None)


class GoldenCheck:
    """Runs the checks of a phase whose golden SQL has been executed; remembers each phase's
    findings (one item's golden work is judged once per process, whatever its trials)."""

    def __init__(self, rules: ResultRules, test_cases: TestCaseLimits | None, *, follow_up: bool = True,
                 no_change: str | None = None) -> None:
        self.rules = rules
        self.test_cases = test_cases
        self.no_change = no_change  # state_match's policy when the run judges by it, else None
        self.follow_up = follow_up
        self._lock = threading.Lock()
        # the findings of recent phases (bounded: memory stays flat in the number of items; a phase
        # forgotten before its next trial is checked again, to the same findings)
        self._seen: OrderedDict[tuple[str, str], list[Finding]] = OrderedDict()

    @classmethod
    def of_plan(cls, scorers: Mapping[str, Mapping[str, object] | None], rules: ResultRules, *, test_cases: bool = True,
                follow_up: bool = True) -> GoldenCheck:
        """The checks of a run that builds ``scorers`` (their options: test-case limits, ``no_change``)."""
        no_change = (scorers["state_match"] or {}).get("no_change", "fail") if "state_match" in scorers else None
        return cls(rules, TestCaseLimits.of(scorers) if test_cases else None, follow_up=follow_up,
                   no_change=None if no_change is None else str(no_change))

    def phase(self, item: Item, phase: PhaseRecord, sandbox: Sandbox, *, every: bool = False) -> list[Finding]:
        """The findings of ``phase`` (golden results already on it). ``every``: run each check
        (validate); else stop at the first error (the run needs only the reason)."""
        key = (item.id, phase.phase.value)
        with self._lock:
            if key in self._seen and not every:
                return self._seen[key]
        dialect = getattr(sandbox, "dialect", None) or sqlglot_dialect(item.dialect)
        findings: list[Finding] = []
        for check in (self._results, self._order, self._tied_order, self._ties, self._test_cases, self._no_change):
            findings += check(item, phase, sandbox, dialect)
            if not every and first_error(findings) is not None:
                break
        with self._lock:
            self._seen[key] = findings
            if len(self._seen) > REMEMBERED:
                self._seen.popitem(last=False)
        return findings

    def follow_up_reason(self, item: Item, sandbox: Sandbox) -> Finding | None:
        """Why the item's follow-up cannot judge an answer, checked before it is reached (so a
        run lists it whether or not the agent gets there, as validate does)."""
        if not self.follow_up or item.follow_up is None:
            return None
        with self._lock:
            known = self._seen.get((item.id, "follow_up"))
        if known is not None:
            return first_error(known)
        phase = follow_up_phase(item, 0)
        assert phase is not None
        execute_golden(sandbox, phase, self.rules)
        problem = golden_problem(phase, self.rules)
        if problem is not None and problem[0] == "db_error":
            return None  # the database failed, not the item: the follow-up decides when reached
        return first_error(self.phase(item, phase, sandbox))

    # ----------------------------------------------------------------- checks

    def _results(self, item: Item, phase: PhaseRecord, sandbox: Sandbox, dialect: str) -> list[Finding]:
        name = phase.phase.value
        problem = golden_problem(phase, self.rules)
        if problem is not None:
            return [Finding("error", problem[1], name)]
        findings = [Finding("warning", f"golden SQL #{i + 1} {_failure(r)} (another alternative judges)", name)
                    for i, r in enumerate(phase.golden) if r.error is not None]
        usable = [r for r in phase.golden if r.error is None]
        if phase.is_query and all(not r.rows for r in usable):
            if self.rules.bird or self.rules.empty_gold == "fail":
                rule = "BIRD-Interact fails every answer to it" if self.rules.bird else "empty_gold: fail"
                return [*findings, Finding("error", f"golden result is empty: no answer can pass ({rule})", name)]
            findings.append(Finding("warning", f"golden result is empty (empty_gold: {self.rules.empty_gold})", name))
        elif phase.is_query and not self.rules.bird and phase.conditions.decimal >= 0 and not any(map(_has_fraction, usable)):
            findings.append(Finding("warning", f"conditions.decimal is {phase.conditions.decimal} but no value has a fraction",
                                    name))
        return findings

    def _order(self, item: Item, phase: PhaseRecord, sandbox: Sandbox, dialect: str) -> list[Finding]:
        """``order: true`` needs an ORDER BY: BIRD-Interact then compares rows in whatever order the
        plan gives (invalid); ours compares such a result unordered (a warning)."""
        if not (phase.is_query and phase.conditions_explicit and phase.conditions.order):
            return []
        run = phase.golden_run_sql[0] if phase.golden_run_sql else list(phase.golden_sql)
        if not run or golden_is_ordered(run[-1], dialect):
            return []
        if self.rules.bird:
            return [Finding("error", "conditions.order is true but the golden query has no ORDER BY: its row order is "
                                     "up to the plan, and BIRD-Interact compares rows in order", phase.phase.value, True)]
        return [Finding("warning", "conditions.order is true but the golden query has no ORDER BY (its rows are compared "
                                   "unordered)", phase.phase.value)]

    def _tied_order(self, item: Item, phase: PhaseRecord, sandbox: Sandbox, dialect: str) -> list[Finding]:
        """Where rows are compared in order (``bird_interact``, ``order: true``), rows that tie on
        the ORDER BY keys yet differ come back in whatever order the plan gives."""
        if not (self.rules.bird and phase.is_query and phase.conditions_explicit and phase.conditions.order):
            return []
        if not phase.golden_run_sql or not phase.golden or phase.golden[0].error is not None:
            return []
        golden, run = phase.golden[0], phase.golden_run_sql[0]
        keys = tie_key_positions(run[-1], golden.columns, dialect) if run else None
        if not keys:
            return []
        rows = golden.rows
        if any(_key(a, keys) == _key(b, keys) and a != b for a, b in pairwise(rows)):
            return [Finding("error", "conditions.order is true but rows tied on the golden query's ORDER BY keys differ: "
                                     "their order is up to the plan, and BIRD-Interact compares rows in order",
                            phase.phase.value, True)]
        return []

    def _ties(self, item: Item, phase: PhaseRecord, sandbox: Sandbox, dialect: str) -> list[Finding]:
        """Run the golden query with one row more than its LIMIT: if the first row left out ties
        the kept ones on the sort keys and differs from one of them, which rows come back is up
        to the plan."""
        if not phase.is_query or not phase.golden_run_sql or not phase.golden or phase.golden[0].error is not None:
            return []
        run = phase.golden_run_sql[0]
        probe = _one_more_row(run[-1], dialect) if run else None
        if probe is None:
            return []
        query, limit = probe
        result = sandbox.execute([*run[:-1], query], mode=golden_mode(phase, run), preprocess=phase.preprocess,
                                 preprocess_errors=self.rules.preprocess_errors, actor="golden")
        if result.error is not None or len(result.rows) <= limit:
            return []
        keys = tie_key_positions(run[-1], result.columns, dialect)
        if keys is None:
            return [Finding("warning", "the golden query has a LIMIT whose ORDER BY keys are not output columns: "
                                       "ties at the cut cannot be checked", phase.phase.value)]
        left_out = result.rows[limit]
        tied = [row for row in result.rows[:limit] if _key(row, keys) == _key(left_out, keys)]
        if any(row != left_out for row in tied):
            return [Finding("error", f"the golden query's LIMIT {limit} cuts through rows tied on its ORDER BY keys: "
                                     "which rows come back is up to the plan", phase.phase.value, True)]
        return []

    def _test_cases(self, item: Item, phase: PhaseRecord, sandbox: Sandbox, dialect: str) -> list[Finding]:
        """A phase's test cases must all pass for the golden SQL, and one at least should fail
        for a statement that changes nothing (else they cannot tell a right answer from none)."""
        if self.test_cases is None or not getattr(sandbox, "runs_test_cases", True):
            return []
        cases, preprocess, clean_up = test_cases_of(item, phase)
        if not cases:
            return []
        options: TestCaseOptions = dict(db_name=item.database, preprocess_sql=preprocess, clean_up_sqls=clean_up,
                                        timeout_s=self.test_cases.timeout_s,
                                        statement_timeout_s=self.test_cases.statement_timeout_s,
                                        preprocess_errors=self.rules.preprocess_errors)
        lock = sandbox.write_lock
        golden, name = list(phase.golden_sql), phase.phase.value
        verdicts = run_phase_test_cases(sandbox.clones, sandbox.conninfo, cases, golden, golden, lock=lock, **options)
        failed = [Finding("error", f"test case {i}/{len(cases)} fails for the golden SQL ({v.kind}): {v.message}", name, True)
                  for i, v in enumerate(verdicts, 1) if not v.passed]
        if failed:
            return failed
        if all(v.passed for v in run_phase_test_cases(sandbox.clones, sandbox.conninfo, cases, [NO_OP_SQL], golden, lock=lock, **options)):
            return [Finding("warning", "test cases all pass for a statement that changes nothing: they cannot tell a "
                                       "right answer from no answer", name)]
        return []


    def _no_change(self, item: Item, phase: PhaseRecord, sandbox: Sandbox, dialect: str) -> list[Finding]:
        """A script judged by the state it leaves must change something, or (``no_change:
        fail``) no answer can pass."""
        judged_by_cases = self.test_cases is not None and getattr(sandbox, "runs_test_cases", True) \
            and test_cases_of(item, phase)[0]
        if phase.is_query or self.no_change != "fail" or judged_by_cases or item.eval_query:
            return []
        if not phase.golden or any(r.error is not None for r in phase.golden):
            return []
        with sandbox.write_transaction(phase.preprocess, self.rules.preprocess_errors, actor="golden") as tx:
            if tx.preprocess_error is not None:
                return []
            run = list(phase.golden_sql) if phase.golden_is_script else list(phase.golden_sql[:1])
            statements = [s for text in run for s in split_statements(text, dialect)]
            before = tx.fingerprint(statements)
            result, after = tx.run(run, lambda t: t.fingerprint(statements))
        if result.error is None and after == before:
            return [Finding("error", "the golden SQL changes nothing: no answer can pass (state_match no_change: fail)",
                            phase.phase.value)]
        return []


def _failure(result: ExecutionResult) -> str:
    return f"{'timed out' if result.error_kind == 'timeout' else 'failed'} ({result.error_kind}): {result.error}"


def _has_fraction(result: ExecutionResult) -> bool:
    return any(isinstance(v, float) or (isinstance(v, Decimal) and v != v.to_integral_value())
               for row in result.rows for v in row)


def _one_more_row(sql: str, dialect: str) -> tuple[str, int] | None:
    """The outermost query with ``LIMIT n + 1`` instead of ``LIMIT n`` (and n), when it sorts,
    has a literal LIMIT and no OFFSET; else None."""
    try:
        tree = sqlglot.parse_one(last_statement(sql, dialect), read=dialect)
    except sqlglot.errors.SqlglotError:
        return None
    if not isinstance(tree, exp.Query) or tree.args.get("order") is None or tree.args.get("offset") is not None:
        return None
    limit = tree.args.get("limit")
    value = limit.expression if isinstance(limit, exp.Limit) else None
    if not (isinstance(value, exp.Literal) and value.is_int):
        return None
    n = int(value.this)
    if n <= 0:
        return None
    tree.set("limit", exp.Limit(expression=exp.Literal.number(n + 1)))
    return tree.sql(dialect=dialect), n


def _key(row: tuple[object, ...], positions: list[int]) -> tuple[object, ...]:
    return tuple(row[p] for p in positions)
