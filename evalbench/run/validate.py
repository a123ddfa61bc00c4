"""`evalbench validate`: the oracle run of a dataset — every golden SQL through the same sandbox
the evaluation uses — and the checks that need no agent.

Findings are errors (the item cannot be evaluated as written) or warnings (worth a look). Which
phases are invalid, and why, is :mod:`evalbench.scoring.validity`: the very checks ``evalbench
run`` makes, so both list the same invalid items with the same reasons. Besides those, validate
reports malformed or duplicate records and an ambiguity's ``sql_snippet`` not found in the golden
SQL (whitespace and case ignored; a warning). An item with an error is invalid unless listed
with ``--allow``.

Items are checked in parallel (``runners.sqlexec_runners`` threads, the size of the sandbox's
connection pool); findings are listed by severity, then by item id in natural order.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from evalbench.backends.base import Sandbox
from evalbench.core.conversation import follow_up_phase, main_phase
from evalbench.dataset import Item, RecordError
from evalbench.run.items import Items
from evalbench.run.plan import DatabasesSpec, RunPlan
from evalbench.scoring.semantics import execute_golden
from evalbench.scoring.validity import Finding, GoldenCheck

SEVERITY = {"error": 0, "warning": 1, "info": 2}  # the order findings are listed in


def natural_key(text: str) -> list[int | str]:
    """Sort key of an item id in natural order: ``item_2`` before ``item_10``. re.split with a
    group alternates text and digits, so two keys compare str with str and int with int."""
    return [int(part) if index % 2 else part.lower() for index, part in enumerate(re.split(r"(\d+)", text))]


@dataclass
class ItemReport:
    item_id: str
    source: str
    findings: list[Finding] = field(default_factory=list)

    def add(self, level: str, message: str, phase: str | None = None) -> None:
        self.findings.append(Finding(level, message, phase))

    def reasons(self) -> list[dict[str, str]]:
        """Each invalid phase and its reason (its first error), as a run's summary lists them."""
        first: dict[str, str] = {}
        for finding in self.findings:
            if finding.level == "error":
                first.setdefault(finding.phase or "main", finding.message)
        return [{"item_id": self.item_id, "phase": phase, "reason": reason} for phase, reason in first.items()]

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
        return {phase: sum(1 for r in self.reports if any(f.phase == phase and f.message.startswith("golden result is empty")
                                                             for f in r.findings))
                for phase in ("main", "follow_up")}

    def sorted_findings(self) -> list[tuple[ItemReport, Finding]]:
        """Every finding, by severity, then item id in natural order (an item's own findings in
        the order they were found): how ``evalbench validate`` prints them."""
        pairs = [(report, finding) for report in self.reports for finding in report.findings]
        return sorted(pairs, key=lambda pair: (SEVERITY.get(pair[1].level, len(SEVERITY)), natural_key(pair[0].item_id)))

    def as_dict(self) -> dict[str, object]:
        ordered = self.sorted_findings()
        by_item: dict[str, list[dict[str, str]]] = {}
        for report, finding in sorted(ordered, key=lambda pair: natural_key(pair[0].item_id)):  # stable: severity kept
            by_item.setdefault(report.item_id, []).append({"level": finding.level, "message": text(finding)})
        return {
            "items": self.items,
            "semantics": self.semantics,
            "invalid_items": sorted(self.invalid_ids(), key=natural_key),
            "invalid": [reason for report in sorted(self.reports, key=lambda r: natural_key(r.item_id))
                        for reason in report.reasons()],  # as summary.json's invalid_items.items
            "empty_golden": self.empty_golden(),
            "record_errors": [str(e) for e in self.record_errors],
            "database_errors": self.database_errors,
            "findings": by_item,  # per item, items in natural order
            "sorted_findings": [{"item_id": r.item_id, "source": r.source, "level": f.level, "message": text(f)}
                                for r, f in ordered],  # as printed
        }


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


def text(finding: Finding) -> str:
    """A finding as printed: its phase, then its message."""
    return f"{finding.phase}: {finding.message}" if finding.phase else finding.message


def check_item(item: Item, sandbox: Sandbox | None, check: GoldenCheck) -> ItemReport:
    """The findings of one item: each phase's golden SQL run exactly as a run would run it (the
    same semantics: BIRD-Interact's cleaning, scripts or alternatives, the follow-up's
    preprocessing), then the run's own validity checks, every one of them."""
    report = ItemReport(item.id, item.source)
    golden_text = _normal(" ".join(item.golden_sql))
    for ambiguity in item.ambiguities:
        snippet = ambiguity.sql_snippet
        if snippet and _normal(re.sub(r"\s*;\s*$", "", snippet)) not in golden_text:
            report.add("warning", f"sql_snippet of {ambiguity.term!r} is not in the golden SQL")
    if sandbox is None:
        report.add("error", "its database could not be set up", "main")
        return report
    phases = [main_phase(item, 0), follow_up_phase(item, 0) if check.follow_up else None]
    for phase in filter(None, phases):
        execute_golden(sandbox, phase, check.rules)
        report.findings += check.phase(item, phase, sandbox, every=True)
    return report


# A database's sandbox (None: it could not be set up) and its items being checked.
_Group = tuple[Sandbox | None, list[Future[ItemReport]]]


def validate(plan: RunPlan, *, test_cases: bool = True, progress: bool = False) -> ValidationReport:
    """Check every item of the dataset of ``plan`` against its databases (with ``test_cases``,
    also the test cases of its management tasks: one child process each, so it takes a while).
    Items run on ``runners.sqlexec_runners`` threads; ``progress``: a bar on stderr (a TTY only)."""
    from evalbench.core import deadline
    from evalbench.scoring import test_case_runner

    items = Items(plan.items)
    dataset, scan = items.dataset, items.found
    scoring = plan.scoring.plan(scan.format)
    report = ValidationReport(items=scan.total, record_errors=list(scan.errors), semantics=scoring.rules.semantics)
    check = GoldenCheck.of_plan(scoring.scorers, scoring.rules, test_cases=test_cases, follow_up=plan.scoring.follow_up)
    deadline.reset_cancel()  # a cancelled earlier run in this process must not cancel this one
    bar = _ProgressBar(scan.total, progress)
    pool = ThreadPoolExecutor(max_workers=plan.databases.pool_size, thread_name_prefix="evalbench-validate")
    groups: list[_Group] = []
    closed = 0  # groups[:closed] are done and their sandboxes closed
    try:
        for dialect, database in sorted(scan.groups):
            sandbox = _open_sandbox(plan.databases, dialect, database, report)
            futures = [pool.submit(_check_one, item, sandbox, check, bar) for item in dataset.items((dialect, database))]
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


def _open_sandbox(databases: DatabasesSpec, dialect: str, database: str, report: ValidationReport) -> Sandbox | None:
    """The database provisioned behind its sandbox, or None (the error kept in the report)."""
    from evalbench.core.errors import EvalbenchError
    from evalbench.run.databases import database as database_of

    try:
        db = database_of(databases, dialect, database)
        return db.open_sandbox(db.provision())
    except EvalbenchError as exc:
        report.database_errors[f"{dialect}/{database}"] = str(exc)
        return None


def _check_one(item: Item, sandbox: Sandbox | None, check: GoldenCheck, bar: _ProgressBar) -> ItemReport:
    """One item's findings, on a pool thread (its golden SQL through the shared sandbox pool)."""
    try:
        report = check_item(item, sandbox, check)
        bar.count(report)
    finally:
        bar.update()
    return report


def _close_finished(groups: list[_Group], start: int, end: int) -> int:
    """Wait for the items of ``groups[start:end]``, close their sandboxes, and return ``end``. The
    main thread waits in short steps so that Ctrl-C reaches it at once."""
    for sandbox, futures in groups[start:end]:
        pending: Iterable[Future[ItemReport]] = futures
        while pending:
            pending = wait(pending, timeout=0.2).not_done
        if sandbox is not None:
            sandbox.close()
    return max(start, end)


class _ProgressBar:
    """A tqdm bar on stderr, updated from the pool threads: off with ``enabled`` false, and
    when stderr is not a terminal (a CI log gets the findings, not a bar per item)."""

    def __init__(self, total: int, enabled: bool) -> None:
        from evalbench.core.terminal import progress_bar

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
