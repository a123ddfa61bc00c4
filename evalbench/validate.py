"""`evalbench validate`: the oracle run of a dataset — every golden SQL through the same sandbox
the evaluation uses — and the checks that need no agent.

Findings are errors (the item cannot be evaluated as written: the run would score it wrongly)
or warnings (worth a look). An item with an error is invalid unless listed with ``--allow``.

errors:   malformed or duplicate records, golden SQL that fails or times out, a golden result
          truncated at the row cap, ``order: true`` while the golden SQL has no ORDER BY; a
          management task whose test case fails for its own golden SQL, or passes for a
          statement that changes nothing (it cannot tell a right answer from no answer)
warnings: an empty golden result (it cannot tell a right query from an over-filtering one),
          an ambiguity's ``sql_snippet`` not found in the golden SQL (whitespace and case
          ignored), ``decimal`` set while the golden result has no non-integer number

Items are checked in parallel (``runners.sqlexec_runners`` threads, the size of the sandbox's
connection pool); findings are listed by severity, then by item id in natural order.
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from evalbench.backends.base import ExecutionResult, Sandbox
from evalbench.config import RunConfig
from evalbench.conversation import PhaseRecord, follow_up_phase, main_phase
from evalbench.dataset import Dataset, Item, RecordError
from evalbench.scoring.execution import golden_is_ordered
from evalbench.scoring.plan import plan_scoring
from evalbench.scoring.semantics import ResultRules, execute_golden, golden_problem
from evalbench.scoring.test_cases import run_phase_test_cases, test_cases_of
from evalbench.statements import sqlglot_dialect

# A write statement that changes nothing the test cases look at: the "wrong answer" every test
# case must reject.
NO_OP_SQL = "CREATE TEMP TABLE IF NOT EXISTS evalbench_validate_no_op (x integer)"

SEVERITY = {"error": 0, "warning": 1, "info": 2}  # the order findings are listed in


def natural_key(text: str) -> list[Any]:
    """Sort key of an item id in natural order: ``item_2`` before ``item_10``. re.split with a
    group alternates text and digits, so two keys compare str with str and int with int."""
    return [int(part) if index % 2 else part.lower() for index, part in enumerate(re.split(r"(\d+)", text))]


@dataclass
class Finding:
    level: str  # "error" | "warning"
    message: str


@dataclass
class ItemReport:
    item_id: str
    source: str
    findings: list[Finding] = field(default_factory=list)

    def add(self, level: str, message: str) -> None:
        self.findings.append(Finding(level, message))

    @property
    def invalid(self) -> bool:
        return any(f.level == "error" for f in self.findings)


@dataclass
class ValidationReport:
    items: int = 0
    reports: list[ItemReport] = field(default_factory=list)
    record_errors: list[RecordError] = field(default_factory=list)
    database_errors: dict[str, str] = field(default_factory=dict)
    semantics: str = "evalbench"

    def invalid_ids(self) -> list[str]:
        return [r.item_id for r in self.reports if r.invalid]

    def empty_golden(self) -> dict[str, int]:
        """Items whose golden result is empty, per phase."""
        return {phase: sum(1 for r in self.reports if any(f.message.startswith(f"{phase} golden SQL") and
                                                             ": empty result" in f.message for f in r.findings))
                for phase in ("main", "follow_up")}

    def sorted_findings(self) -> list[tuple[ItemReport, Finding]]:
        """Every finding, by severity, then item id in natural order (an item's own findings in
        the order they were found): how ``evalbench validate`` prints them."""
        pairs = [(report, finding) for report in self.reports for finding in report.findings]
        return sorted(pairs, key=lambda pair: (SEVERITY.get(pair[1].level, len(SEVERITY)), natural_key(pair[0].item_id)))

    def as_dict(self) -> dict[str, Any]:
        ordered = self.sorted_findings()
        by_item: dict[str, list[dict[str, str]]] = {}
        for report, finding in sorted(ordered, key=lambda pair: natural_key(pair[0].item_id)):  # stable: severity kept
            by_item.setdefault(report.item_id, []).append({"level": finding.level, "message": finding.message})
        return {
            "items": self.items,
            "semantics": self.semantics,
            "invalid_items": sorted(self.invalid_ids(), key=natural_key),
            "empty_golden": self.empty_golden(),
            "record_errors": [str(e) for e in self.record_errors],
            "database_errors": self.database_errors,
            "findings": by_item,  # per item, items in natural order
            "sorted_findings": [{"item_id": r.item_id, "source": r.source, "level": f.level, "message": f.message}
                                for r, f in ordered],  # as printed
        }


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


def _has_fraction(result: ExecutionResult) -> bool:
    return any(isinstance(v, float) or (isinstance(v, Decimal) and v != v.to_integral_value())
               for row in result.rows for v in row)


def check_test_cases(item: Item, report: ItemReport, sandbox: Sandbox, *, timeout_s: float, statement_timeout_s: float,
                     rules: ResultRules | None = None) -> None:
    """A phase's test cases must all pass for the golden SQL, and one at least must fail for a
    statement that changes nothing (a case may rightly check only that nothing else changed)."""
    errors = (rules or ResultRules()).preprocess_errors
    for phase in filter(None, (main_phase(item, 0), follow_up_phase(item, 0))):
        cases, preprocess, clean_up = test_cases_of(item, phase)
        if not cases:
            continue
        options = dict(db_name=item.database, preprocess_sql=preprocess, clean_up_sqls=clean_up, timeout_s=timeout_s,
                       statement_timeout_s=statement_timeout_s, preprocess_errors=errors, lock=sandbox.write_lock)
        name, golden = phase.phase.value, phase.golden_sql
        verdicts = run_phase_test_cases(sandbox.clones, sandbox.conninfo, cases, golden, golden, **options)
        for index, verdict in enumerate(verdicts, 1):
            if not verdict.passed:
                report.add("error", f"{name} test case {index}/{len(cases)} fails for the golden SQL ({verdict.kind}): "
                                    f"{verdict.message}")
        if all(v.passed for v in verdicts) and all(
                v.passed for v in run_phase_test_cases(sandbox.clones, sandbox.conninfo, cases, [NO_OP_SQL], golden, **options)):
            report.add("error", f"{name} test cases all pass for a statement that changes nothing: they cannot tell a "
                                "right answer from no answer")


def check_item(item: Item, sandbox: Sandbox | None, rules: ResultRules | None = None) -> ItemReport:
    """The findings of one item: its golden SQL run exactly as a run would run it (the same
    semantics: BIRD-Interact's cleaning, scripts or alternatives, the follow-up's preprocessing)."""
    rules = rules or ResultRules()
    report = ItemReport(item.id, item.source)
    golden_text = _normal(" ".join(item.golden_sql))
    for ambiguity in item.ambiguities:
        snippet = ambiguity.sql_snippet
        if snippet and _normal(re.sub(r"\s*;\s*$", "", snippet)) not in golden_text:
            report.add("warning", f"sql_snippet of {ambiguity.term!r} is not in the golden SQL")
    for phase in filter(None, (main_phase(item, 0), follow_up_phase(item, 0))):
        _check_order(phase, rules, report, getattr(sandbox, "dialect", None) or sqlglot_dialect(item.dialect))
        if sandbox is not None:
            execute_golden(sandbox, phase, rules)
            _check_results(phase, rules, report)
    return report


def _where(phase: PhaseRecord, index: int) -> str:
    runs = phase.golden_run_sql
    return f"{phase.phase.value} golden SQL" + (f" #{index + 1}" if len(runs) > 1 else "")


def _check_order(phase: PhaseRecord, rules: ResultRules, report: ItemReport, dialect: str) -> None:
    """``order: true`` needs an ORDER BY: BIRD-Interact then compares rows in whatever order the
    plan gives (an error); ours compares such a result unordered (a warning)."""
    if not (phase.is_query and phase.conditions_explicit and phase.conditions.order):
        return
    runs = [list(phase.golden_sql)] if phase.golden_is_script else [[sql] for sql in phase.golden_sql]
    for index, run in enumerate(runs):
        if run and not golden_is_ordered(run[-1], dialect):
            where = f"{phase.phase.value} golden SQL" + (f" #{index + 1}" if len(runs) > 1 else "")
            if rules.bird:
                report.add("error", f"{where}: conditions.order is true but the query has no ORDER BY "
                                    "(BIRD-Interact compares the rows in whatever order the plan gives)")
            else:
                report.add("warning", f"{where}: conditions.order is true but the query has no ORDER BY "
                                      "(its rows are compared unordered)")


def _check_results(phase: PhaseRecord, rules: ResultRules, report: ItemReport) -> None:
    problem = golden_problem(phase, rules)
    if problem is not None and len(phase.golden) <= 1:
        report.add("error", f"{phase.phase.value}: {problem[1]} (the item is {problem[0]})")
        return
    for index, result in enumerate(phase.golden):
        where = _where(phase, index)
        if result.error is not None:
            report.add("error", f"{where} {'timed out' if result.error_kind == 'timeout' else 'failed'} "
                                f"({result.error_kind}): {result.error}")
        elif result.truncated and not rules.bird:
            report.add("error", f"{where}: result truncated at the row cap ({result.row_count} rows)")
        elif phase.is_query and not result.rows:
            report.add("warning", f"{where}: empty result (every answer fails: "
                                  f"{'BIRD-Interact' if rules.bird else f'empty_gold: {rules.empty_gold}'})")
        elif phase.is_query and not rules.bird and phase.conditions.decimal >= 0 and not _has_fraction(result):
            report.add("warning", f"{where}: conditions.decimal is {phase.conditions.decimal} but no value has a fraction")


# A database's sandbox (None: it could not be set up) and its items being checked.
_Group = tuple[Sandbox | None, list[Future[ItemReport]]]


def validate(config: RunConfig, *, test_cases: bool = True, progress: bool = False) -> ValidationReport:
    """Check every item of the dataset of ``config`` against its databases (with ``test_cases``,
    also the test cases of its management tasks: one child process each, so it takes a while).
    Items run on ``runners.sqlexec_runners`` threads; ``progress``: a bar on stderr (a TTY only)."""
    from evalbench import deadline
    from evalbench.scoring import test_case_runner

    dataset = Dataset(config.dataset_config, config.dataset_format, config.dialects, config.query_types)
    scan = dataset.scan()
    rules = plan_scoring(config.scorers, config.primary, config.accept_nl_answers, scan.format).rules
    report = ValidationReport(items=scan.total, record_errors=list(scan.errors), semantics=rules.semantics)
    limits = _test_case_limits(config) if test_cases else None
    deadline.reset_cancel()  # a cancelled earlier run in this process must not cancel this one
    bar = _ProgressBar(scan.total, progress)
    pool = ThreadPoolExecutor(max_workers=config.runners.sqlexec_runners, thread_name_prefix="evalbench-validate")
    groups: list[_Group] = []
    closed = 0  # groups[:closed] are done and their sandboxes closed
    try:
        for dialect, database in sorted(scan.groups):
            sandbox = _open_sandbox(config, dialect, database, report)
            futures = [pool.submit(_check_one, item, sandbox, rules, limits, bar) for item in dataset.items((dialect, database))]
            groups.append((sandbox, futures))
            closed = _close_finished(groups, closed, len(groups) - 1)  # two databases' connections at most
        closed = _close_finished(groups, closed, len(groups))
    except KeyboardInterrupt:  # Ctrl-C: stop the test cases and SQL in flight, run nothing more
        deadline.cancel()
        test_case_runner.cancel_all()
        for sandbox, _ in groups:
            if sandbox is not None:
                sandbox.interrupt()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for sandbox, _ in groups[closed:]:
            if sandbox is not None:
                sandbox.close()
        bar.close()
    report.reports = [future.result() for _, futures in groups for future in futures]  # dataset order
    return report


def _open_sandbox(config: RunConfig, dialect: str, database: str, report: ValidationReport) -> Sandbox | None:
    """The database provisioned behind its sandbox, or None (the error kept in the report)."""
    from evalbench.databases import database as database_of
    from evalbench.errors import EvalbenchError

    try:
        db = database_of(config, dialect, database)
        return db.open_sandbox(config, db.provision(config))
    except EvalbenchError as exc:
        report.database_errors[f"{dialect}/{database}"] = str(exc)
        return None


def _check_one(item: Item, sandbox: Sandbox | None, rules: ResultRules, limits: dict[str, float] | None,
               bar: _ProgressBar) -> ItemReport:
    """One item's findings, on a pool thread (its golden SQL through the shared sandbox pool)."""
    try:
        report = check_item(item, sandbox, rules)
        if sandbox is None:
            report.add("error", "its database could not be set up")
        elif limits is not None:
            check_test_cases(item, report, sandbox, rules=rules, **limits)
        bar.count(report)
    finally:
        bar.update()
    return report


def _close_finished(groups: list[_Group], start: int, end: int) -> int:
    """Wait for the items of ``groups[start:end]``, close their sandboxes, and return ``end``. The
    main thread waits in short steps so that Ctrl-C reaches it at once."""
    for sandbox, futures in groups[start:end]:
        pending: Any = futures
        while pending:
            pending = wait(pending, timeout=0.2).not_done
        if sandbox is not None:
            sandbox.close()
    return max(start, end)


class _ProgressBar:
    """A tqdm bar on stderr, updated from the pool threads: off with ``enabled`` false, and
    when stderr is not a terminal (a CI log gets the findings, not a bar per item)."""

    def __init__(self, total: int, enabled: bool) -> None:
        from evalbench.terminal import progress_bar

        self._lock = threading.Lock()
        self._invalid = 0
        self._bar = progress_bar(total=total, desc="validate", unit="item", dynamic_ncols=True,
                                 disable=None if enabled else True)  # None: tqdm disables itself on a non-TTY

    def update(self) -> None:
        with self._lock:
            self._bar.update(1)

    def count(self, report: ItemReport) -> None:
        if report.invalid:
            with self._lock:
                self._invalid += 1
                self._bar.set_postfix_str(f"{self._invalid} invalid", refresh=False)

    def close(self) -> None:
        self._bar.close()


def _test_case_limits(config: RunConfig) -> dict[str, float]:
    """The test_cases scorer's limits when the config sets them, else its defaults."""
    options = config.scorers.get("test_cases") or {}
    return {"timeout_s": float(options.get("timeout_s", 30.0)),
            "statement_timeout_s": float(options.get("statement_timeout_s", 10.0))}
