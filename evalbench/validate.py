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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from evalbench.config import RunConfig
from evalbench.dataset import Dataset, Item, RecordError
from evalbench.db.sandbox import ExecutionResult, Sandbox
from evalbench.scoring.execution import golden_is_ordered
from evalbench.scoring.test_case_runner import run_test_case

# A write statement that changes nothing the test cases look at: the "wrong answer" every test
# case must reject.
NO_OP_SQL = "CREATE TEMP TABLE IF NOT EXISTS evalbench_validate_no_op (x integer)"


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

    def invalid_ids(self) -> list[str]:
        return [r.item_id for r in self.reports if r.invalid]

    def empty_golden(self) -> dict[str, int]:
        """Items whose golden result is empty, per phase."""
        return {phase: sum(1 for r in self.reports if any(f.message.startswith(f"{phase} golden SQL") and
                                                             f.message.endswith(": empty result") for f in r.findings))
                for phase in ("main", "follow_up")}

    def as_dict(self) -> dict[str, Any]:
        return {
            "items": self.items,
            "invalid_items": self.invalid_ids(),
            "empty_golden": self.empty_golden(),
            "record_errors": [str(e) for e in self.record_errors],
            "database_errors": self.database_errors,
            "findings": {
                r.item_id: [{"level": f.level, "message": f.message} for f in r.findings] for r in self.reports if r.findings
            },
        }


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


def _has_fraction(result: ExecutionResult) -> bool:
    return any(isinstance(v, float) or (isinstance(v, Decimal) and v != v.to_integral_value())
               for row in result.rows for v in row)


def check_test_cases(item: Item, report: ItemReport, conninfo: str, *, timeout_s: float, statement_timeout_s: float) -> None:
    """A phase's test cases must all pass for the golden SQL, and one at least must fail for a
    statement that changes nothing (a case may rightly check only that nothing else changed)."""
    phases = [("main", item.test_cases, item.golden_sql)]
    if item.follow_up is not None:
        phases.append(("follow_up", item.follow_up.test_cases, item.follow_up.golden_sql))
    options = dict(db_name=item.database, preprocess_sql=item.preprocess_sql, clean_up_sqls=item.clean_up_sqls,
                   timeout_s=timeout_s, statement_timeout_s=statement_timeout_s)
    for phase, cases, golden in phases:
        failed = False
        for index, case in enumerate(cases, 1):
            verdict = run_test_case(conninfo, case, golden, golden, **options)
            if not verdict.passed:
                failed = True
                report.add("error", f"{phase} test case {index}/{len(cases)} fails for the golden SQL ({verdict.kind}): "
                                    f"{verdict.message}")
        if cases and not failed and all(run_test_case(conninfo, case, [NO_OP_SQL], golden, **options).passed for case in cases):
            report.add("error", f"{phase} test cases all pass for a statement that changes nothing: they cannot tell a "
                                "right answer from no answer")


def check_item(item: Item, sandbox: Sandbox | None) -> ItemReport:
    report = ItemReport(item.id, item.source)
    golden_text = _normal(" ".join(item.golden_sql))
    for ambiguity in item.ambiguities:
        snippet = ambiguity.sql_snippet
        if snippet and _normal(re.sub(r"\s*;\s*$", "", snippet)) not in golden_text:
            report.add("warning", f"sql_snippet of {ambiguity.term!r} is not in the golden SQL")
    phases = [("main", item.golden_sql, item.conditions, item.conditions_explicit, item.is_query)]
    if item.follow_up is not None:
        fu = item.follow_up
        phases.append(("follow_up", fu.golden_sql, fu.conditions, True, fu.category == "Query"))
    for phase, sqls, conditions, explicit, is_query in phases:
        for index, sql in enumerate(sqls):
            where = f"{phase} golden SQL" + (f" #{index + 1}" if len(sqls) > 1 else "")
            if is_query and explicit and conditions.order and not golden_is_ordered(sql):
                report.add("error", f"{where}: conditions.order is true but the query has no ORDER BY")
            if sandbox is None:
                continue
            result = sandbox.execute(sql, mode="read" if is_query else "write", preprocess=item.preprocess_sql)
            if result.error_kind == "timeout":
                report.add("error", f"{where} timed out: {result.error}")
            elif result.error is not None:
                report.add("error", f"{where} failed ({result.error_kind}): {result.error}")
            elif result.truncated:
                report.add("error", f"{where}: result truncated at the row cap ({result.row_count} rows)")
            elif is_query and not result.rows:
                report.add("warning", f"{where}: empty result")
            elif is_query and conditions.decimal >= 0 and not _has_fraction(result):
                report.add("warning", f"{where}: conditions.decimal is {conditions.decimal} but no value has a fraction")
    return report


def validate(config: RunConfig, *, test_cases: bool = True) -> ValidationReport:
    """Check every item of the dataset of ``config`` against its databases (with ``test_cases``,
    also the test cases of its management tasks: one child process each, so it takes a while)."""
    from evalbench.errors import EvalbenchError
    from evalbench.orchestrator import _provision, open_sandbox

    dataset = Dataset(config.dataset_config, config.dataset_format, config.dialects, config.query_types)
    scan = dataset.scan()
    report = ValidationReport(items=scan.total, record_errors=list(scan.errors))
    for dialect, database in sorted(scan.groups):
        sandbox = conninfo = None
        try:
            sandbox, conninfo = open_sandbox(config, dialect, database, _provision(config, dialect, database))
        except EvalbenchError as exc:
            report.database_errors[f"{dialect}/{database}"] = str(exc)
        try:
            for item in dataset.items((dialect, database)):
                item_report = check_item(item, sandbox)
                if sandbox is None:
                    item_report.add("error", "its database could not be set up")
                elif test_cases and conninfo is not None:
                    check_test_cases(item, item_report, conninfo, **_test_case_limits(config))
                report.reports.append(item_report)
        finally:
            if sandbox is not None:
                sandbox.close()
    return report


def _test_case_limits(config: RunConfig) -> dict[str, float]:
    """The test_cases scorer's limits when the config sets them, else its defaults."""
    options = config.scorers.get("test_cases") or {}
    return {"timeout_s": float(options.get("timeout_s", 30.0)),
            "statement_timeout_s": float(options.get("statement_timeout_s", 10.0))}
