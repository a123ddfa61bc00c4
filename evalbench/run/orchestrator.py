"""The batch: split items by (dialect, database), provision each database, feed the shared
stage pools, journal every conversation, and write the reports at the end.

:func:`run` is a sequence of named steps: load the items, build the parts (agent, virtual user,
scorers), choose the run directory, write the manifest, open the journal, evaluate every
(dialect, database) group, and finish (summary, reports, manifest)."""

from __future__ import annotations

import datetime as dt
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO, TypedDict

import evalbench.run.databases as databases
from evalbench.backends.base import Sandbox
from evalbench.config.prices import PriceTable, run_pricing
from evalbench.core import deadline
from evalbench.core.conversation import Conversation, Outcome, Stage, fail
from evalbench.core.errors import ConfigError, EvalbenchError, SandboxError
from evalbench.core.ratelimit import split_between
from evalbench.dataset import Dataset, RecordError
from evalbench.dataset.loader import Group
from evalbench.results.journal.rundir import RunWriter
from evalbench.results.journal.shapes import read_manifest
from evalbench.results.render.reports import ReportSet
from evalbench.run.breaker import AgentBreaker
from evalbench.run.items import Items
from evalbench.run.lock import hold_run_lock
from evalbench.run.manifest import build_manifest, file_sha256, make_run_id, with_session
from evalbench.run.parts import RunParts
from evalbench.run.plan import ConversationSpec, Identity, OutputSpec, RunPlan
from evalbench.run.resume import RETRY_ERRORS, RUN_AGAIN, check_resumable
from evalbench.run.scheduler import Scheduler
from evalbench.run.stages import StageWork, planned_conversation
from evalbench.scoring import test_case_runner

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack

log = logging.getLogger(__name__)

SIMULATOR_KEYS = ("vuser", "model", "temperature", "seed", "encode_prompt_sha256", "decode_prompt_sha256", "block_leaks")


class SessionOptions(TypedDict, total=False):
    """The fields of :class:`Session`, as keywords."""

    strict: bool
    progress: bool
    out: TextIO | None
    resume: Path | None
    retry_errors: bool
    agent_down_after: int
    reports: bool


class RunOptions(SessionOptions, total=False):
    """The keywords of :func:`run` besides the plan (those of ``evalbench.run(config, **options)``)."""

    items: Items | None
    parts: RunParts | None


class _Bar(Protocol):
    """A progress bar (tqdm's)."""

    def update(self, n: int = 1) -> object: ...

    def close(self) -> None: ...


@dataclass
class RunResult:
    run_id: str
    run_dir: Path
    summary: dict[str, object]
    record_errors: list[RecordError] = field(default_factory=list)
    cancelled: bool = False


@dataclass
class RunPlace:
    """Where the run is written: a new run directory, or the one resumed (with its manifest)."""

    run_id: str
    run_dir: Path
    previous: dict[str, Any] | None
    dataset_sha256: str


@dataclass
class Journal:
    """The journal writer and the reports built as conversations complete."""

    writer: RunWriter
    reports: ReportSet | None  # None: a shard of --workers, whose parent builds the reports
    done: set[tuple[str, str, int]]

    def close(self) -> None:
        self.writer.close()
        if self.reports is not None:
            self.reports.close()


def run(plan: RunPlan, *, items: Items | None = None, parts: RunParts | None = None,
        **options: Unpack[SessionOptions]) -> RunResult:
    """Run the evaluation planned by ``plan`` and write its run directory; with ``resume``,
    continue that run directory: only the conversations its journal does not hold are run (with
    ``retry_errors``, also those that ended in an error or a timeout). Without ``reports``, only
    the manifest, the journal and scores_native.csv are written (a shard of ``--workers``).
    ``items`` and ``parts`` are those preflight already read and built (made here when not given);
    the run closes ``parts``. The other options are :class:`Session`'s."""
    how = Session(**options)
    if how.retry_errors and how.resume is None:
        raise ConfigError("--retry-errors needs --resume RUN_DIR (it redoes that run's errors)")
    items = items if items is not None else Items(plan.items)
    parts = parts if parts is not None else RunParts(plan, items)
    try:
        with split_between(plan.concurrency.shares):  # a shard takes its share of every limit
            return _run(plan, items, parts, how)
    finally:
        parts.close()


@dataclass(frozen=True)
class Session:
    """How this invocation runs the plan (the command line's options, not the config's)."""

    strict: bool = False
    progress: bool = True
    out: TextIO | None = None
    resume: Path | None = None
    retry_errors: bool = False
    agent_down_after: int = 5  # consecutive agent failures that stop the run (0: never)
    reports: bool = True


def _run(plan: RunPlan, items: Items, parts: RunParts, how: Session) -> RunResult:
    deadline.reset_cancel()
    started = time.monotonic()
    session: dict[str, object] = {"started_at": dt.datetime.now(dt.timezone.utc).isoformat()}
    items.check(how.strict)
    parts.build()
    place = choose_run_directory(plan, items, how.resume, how.retry_errors)
    # no other process (nor a worker of one) writes the run directory while this one does
    with hold_run_lock(place.run_dir, "resuming it" if how.resume is not None else "starting a run there"):
        manifest = start_manifest(plan, items, parts, place, session, how.retry_errors)
        journal = open_journal(plan, place, manifest, parts, how.retry_errors, how.reports)
        session["resumed_with"] = len(journal.done)
        journal.writer.write_manifest(manifest)
        print(f"evalbench: run {place.run_id}: {_items_header(items.scan.total, items.subset, plan.conversation.trials)}; "
              f"{parts.scoring.header(items.scan.format)}", file=how.out or sys.stdout, flush=True)
        cancelled, provisioned = evaluate(plan, items, parts, journal, place, how.progress, how.agent_down_after)
        session |= {"finished_at": dt.datetime.now(dt.timezone.utc).isoformat(), "elapsed_s": round(time.monotonic() - started, 3),
                    "conversations": journal.writer.summary.total - len(journal.done), "cancelled": cancelled}
        summary = finish(items, parts, place, manifest, journal, provisioned, cancelled)
        return RunResult(place.run_id, place.run_dir, summary, items.scan.errors, cancelled)


def choose_run_directory(plan: RunPlan, items: Items, resume: Path | None, retry_errors: bool) -> RunPlace:
    """A new run directory (never one that holds a journal), or the resumed one once its manifest
    says this config and dataset may continue it."""
    dataset_sha256 = file_sha256(items.dataset.path)
    if resume is not None:
        previous = read_manifest(resume)
        check_resumable(previous, plan.identity.snapshot(), dataset_sha256, resume, retry_errors=retry_errors)
        return RunPlace(previous["run_id"], resume, previous, dataset_sha256)
    run_dir = new_run_directory(plan.output, plan.identity)
    return RunPlace(run_dir.name, run_dir, None, dataset_sha256)


def new_run_directory(output: OutputSpec, identity: Identity, how: str = "") -> Path:
    """Where a new run goes: ``<output_directory>/<run_id>``, never a directory that holds a journal
    (``how``: the options ``--resume`` needs besides, e.g. ``--workers 2``)."""
    run_dir = output.root / (output.run_id or make_run_id(identity.source))
    if (run_dir / "conversations.jsonl").exists():
        raise ConfigError(f"run directory {run_dir} already holds a journal; choose another run_id "
                          f"(or continue it with --resume {run_dir}{' ' + how if how else ''})")
    return run_dir


def start_manifest(plan: RunPlan, items: Items, parts: RunParts, place: RunPlace, session: dict[str, object],
                   retry_errors: bool) -> dict[str, Any]:
    """The manifest of this session (see :mod:`evalbench.run.manifest`)."""
    scoring = parts.scoring
    metric_scorers = sorted((s.name for s in parts.scorers if s.is_metric), key=list(scoring.scorers).index)
    manifest = build_manifest(plan.identity, place.run_id, items.dataset, items.scan, parts.agent.describe(), parts.vuser.describe(),
                              place.dataset_sha256, metric_scorers)
    manifest["dataset"] |= {"trials": plan.conversation.trials, "subset": items.subset}
    manifest["scorers"] = list(scoring.scorers)
    manifest["scoring"] = scoring.describe()  # semantics and primary verdicts: compare refuses runs where they differ
    # what each scorer needs to be reproduced (e.g. the llmrater's model and prompt hash)
    manifest["scorer_details"] = {s.name: s.describe() for s in parts.scorers if hasattr(s, "describe")}
    manifest["prices"] = PriceTable(dict(plan.prices)).describe()  # what the journal's cost_usd were computed with
    session["command"] = manifest["command"]
    return with_session(manifest, place.previous, session, retry_errors)


def open_journal(plan: RunPlan, place: RunPlace, manifest: dict[str, Any], parts: RunParts,
                 retry_errors: bool, reports: bool = True) -> Journal:
    """The journal writer (on resume: what it holds is replayed into the reports first, and the
    conversations to run again are dropped from it)."""
    # The derived reports are built as conversations complete (replayed ones first), so the end
    # of the run only assembles them.
    report_set = ReportSet(place.run_dir, manifest) if reports else None
    simulator = {k: v for k, v in parts.vuser.describe().items() if k in SIMULATOR_KEYS}
    pricing = run_pricing(dict(plan.prices), parts.agent.describe(), parts.vuser.describe())
    try:
        writer = RunWriter(place.run_dir, place.run_id, preview_rows=plan.output.preview_rows,
                           metric_scorers={s.name for s in parts.scorers if s.is_metric}, simulator=simulator,
                           pricing=pricing,
                           resume=place.previous is not None, on_record=report_set.add if report_set else None,
                           run_again=RETRY_ERRORS if retry_errors else RUN_AGAIN, trials=plan.conversation.trials)
    except BaseException:
        if report_set is not None:
            report_set.close()  # no half-written report files left behind
        raise
    state = writer.resumed
    if state is not None:
        log.warning("resuming %s: %d conversation(s) done; running the other %d (%d to run again — cancelled, db_error"
                    + (", agent_error, vuser_error or timeout" if retry_errors else "") + " — and %d cut short "
                    "by a crash are run again)", place.run_id, state.kept,
                    max(manifest["dataset"]["items"] * plan.conversation.trials - state.kept, 0), state.dropped_cancelled,
                    state.dropped_partial)
    return Journal(writer, report_set, state.done if state is not None else set())


def evaluate(plan: RunPlan, items: Items, parts: RunParts, journal: Journal, place: RunPlace, progress: bool,
             agent_down_after: int) -> tuple[bool, dict[str, dict[str, object]]]:
    """Every group's conversations through the stage pools, groups in parallel; returns whether
    the run was cancelled (Ctrl-C) and what provisioning did per database. A failure, the
    circuit breaker or a scheduler error close the journal and raise."""
    scan, done = items.scan, journal.done
    bars = _progress_bars(scan.groups, progress, _done_per_group(items.dataset, scan.groups, done) if done else {},
                          plan.conversation.trials)
    bars_lock = threading.Lock()
    # ``agent_down_after`` conversations in a row that could not connect to the agent stop the run (0: never)
    base_url = parts.agent.describe().get("base_url")
    breaker = AgentBreaker(base_url if isinstance(base_url, str) else None, lambda: scheduler.cancel(), agent_down_after)

    def on_complete(conv: Conversation) -> None:
        journal.writer.record(conv)
        breaker.observe(conv)
        with bars_lock:
            bars[(conv.item.dialect, conv.item.database)].update(1)

    concurrency = plan.concurrency
    scheduler = Scheduler(dict(concurrency.stages), concurrency.max_in_flight, on_complete)
    groups = GroupEvaluator(plan, items, parts, scheduler, done, on_complete)
    failed = False
    try:
        cancelled = _run_groups(groups, scheduler, concurrency.parallel_groups)
    except BaseException:
        failed = True
        raise
    finally:
        scheduler.shutdown()
        for sandbox in groups.sandboxes:
            sandbox.close()
        parts.close()
        for bar in bars.values():
            bar.close()
        if failed:
            journal.close()
    if scheduler.failure is not None:
        journal.close()
        raise EvalbenchError(f"the run stopped: {scheduler.failure}")
    if breaker.tripped:  # the conversations in flight were journaled (as cancelled): --resume goes on
        journal.close()
        raise breaker.error(place.run_dir)
    return cancelled, groups.reports


class GroupEvaluator:
    """Evaluates one (dialect, database) group: provision its database through its backend, open
    the sandbox, and admit the group's conversations to the scheduler. A database that cannot be
    set up records every item of the group as ``db_error``; one whose agent SQL could not run
    unprivileged (SandboxError) stops the run."""

    def __init__(self, plan: RunPlan, items: Items, parts: RunParts, scheduler: Scheduler,
                 done: set[tuple[str, str, int]], on_complete: Callable[[Conversation], None]) -> None:
        self.databases, self.conversation = plan.databases, plan.conversation
        self.items, self.parts, self.scheduler = items, parts, scheduler
        self.done, self.on_complete = done, on_complete
        self.sandboxes: list[Sandbox] = []
        self.reports: dict[str, dict[str, object]] = {}

    def __call__(self, group: Group) -> None:
        dialect, database = group
        key = f"{dialect}/{database}"
        spec, dataset = self.conversation, self.items.dataset
        if self.done and all((item.dialect, item.id, trial) in self.done
                             for trial in range(1, spec.trials + 1) for item in dataset.items(group)):
            return  # resumed: nothing left to run here
        try:
            db = databases.database(self.databases, dialect, database)
            provisioned = db.provision()
        except SandboxError:
            raise  # never run agent SQL with more rights: the whole run stops
        except EvalbenchError as exc:
            log.error("%s: %s", key, exc)
            self.reports[key] = {"error": str(exc)}
            _record_unrunnable(spec, dataset, group, str(exc), self.parts.work(None), self.on_complete, self.done)
            return
        self.reports[key] = databases.provision_entry(provisioned)
        if provisioned.warning:
            log.warning("%s: %s", key, provisioned.warning)
        sandbox = db.open_sandbox(provisioned)
        self.sandboxes.append(sandbox)
        self.parts.schemas.register(dialect, database, lambda: db.backend.describe_schema(sandbox))
        self.parts.queries.register(dialect, database, sandbox)
        work = self.parts.work(sandbox)
        for conv in _conversations(spec, dataset, group, self.done):
            if not self.scheduler.admit(conv, work):
                break


def _run_groups(groups: GroupEvaluator, scheduler: Scheduler, parallel: int) -> bool:
    """Every group on a small pool, the main thread kept responsive to Ctrl-C; True when the run
    was cancelled (what was in flight is journaled as cancelled)."""
    names = sorted(groups.items.scan.groups)
    # max(1, ...): a shard may hold no item (more shards than items), and is then a run of nothing
    pool = ThreadPoolExecutor(max_workers=max(1, min(len(names), parallel)), thread_name_prefix="evalbench-group")
    try:
        futures = [pool.submit(groups, group) for group in names]
        for future in futures:
            while not future.done():
                time.sleep(0.05)  # keep the main thread responsive to Ctrl-C
            future.result()
        scheduler.wait()
        return False
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (the CLI raises it): cancel before waiting on anything
        log.warning("cancelling: in-flight conversations are recorded as cancelled")
        _cancel_in_flight(scheduler, groups.sandboxes)
        return True
    except BaseException:
        scheduler.cancel()  # a failure (e.g. no safe sandbox role): stop admitting, journal what is in flight, propagate
        raise
    finally:
        pool.shutdown(wait=True)  # the groups stop admitting once the scheduler is cancelled
        scheduler.wait()


def finish(items: Items, parts: RunParts, place: RunPlace, manifest: dict[str, Any], journal: Journal,
           reports: dict[str, dict[str, object]], cancelled: bool) -> dict[str, object]:
    """The summary and every report from the journal, and the manifest's last word."""
    writer, scan = journal.writer, items.scan
    total_elapsed = sum(s.get("elapsed_s") or 0.0 for s in manifest["sessions"])
    extra = {
        "elapsed_s": round(total_elapsed, 3),
        "conversations_per_s": round(writer.summary.total / total_elapsed, 2) if total_elapsed > 0 else None,
        "dataset": {"path": str(items.dataset.path), "format": scan.format, "items": scan.total,
                    "record_errors": len(scan.errors), "filtered_out": scan.filtered_out},
        "record_errors": [str(e) for e in scan.errors[:1000]],
        "databases": (place.previous or {}).get("databases", {}) | reports,
        "cancelled": cancelled,
        "sessions": len(manifest["sessions"]),
        "scoring": manifest.get("scoring") or parts.scoring.describe(),
    }
    summary = writer.finish(**extra)
    writer.close()
    if journal.reports is not None:
        try:
            journal.reports.commit(summary)
        finally:
            journal.reports.close()
    manifest["databases"] = extra["databases"]
    manifest["finished_at"] = manifest["sessions"][-1]["finished_at"]
    manifest["summary_extra"] = extra  # what `evalbench report` needs besides the journal
    writer.write_manifest(manifest)
    return summary


def _cancel_in_flight(scheduler: Scheduler, sandboxes: list[Sandbox]) -> None:
    """Stop every conversation in flight — its HTTP reads, SQL and test cases end within about a
    second — and wait for each to be journaled as cancelled. A second Ctrl-C does not cut this
    short: what was admitted is journaled, so ``--resume`` knows what to run again."""
    scheduler.cancel()
    deadline.cancel()
    test_case_runner.cancel_all()
    for sandbox in sandboxes:
        sandbox.interrupt()
    while True:
        try:
            scheduler.wait()
            return
        except KeyboardInterrupt:
            log.warning("still cancelling: waiting for the conversations in flight to be journaled")


def _record_unrunnable(spec: ConversationSpec, dataset: Dataset, group: Group, error: str, work: StageWork,
                       on_complete: Callable[[Conversation], None], done: set[tuple[str, str, int]]) -> None:
    """A group whose database cannot be set up: every item is still recorded (as db_error)."""
    for conv in _conversations(spec, dataset, group, done):
        stage = fail(conv, Outcome.DB_ERROR, f"database setup failed: {error}")
        while stage is not Stage.COMPLETE:
            stage = work.run(stage, conv)
        on_complete(conv)


def _conversations(spec: ConversationSpec, dataset: Dataset, group: Group,
                   done: set[tuple[str, str, int]]) -> Iterator[Conversation]:
    """The conversations of ``group`` still to run, trial by trial (all items' first trial, then
    the second...: a run cut short holds whole trials), each trial in its own agent session."""
    for trial in range(1, spec.trials + 1):
        for item in dataset.items(group):
            if (item.dialect, item.id, trial) in done:
                continue
            yield planned_conversation(item, spec, trial)


def _items_header(total: int, subset: Mapping[str, object] | None, trials: int) -> str:
    text = f"{total} items" + (f" (a subset of {subset['of']})" if subset else "")
    return text + (f" x {trials} trials" if trials > 1 else "")


def _progress_bars(groups: Mapping[Group, int], enabled: bool, done: dict[Group, int], trials: int = 1) -> dict[Group, _Bar]:
    from evalbench.core.terminal import progress_bar

    return {
        group: progress_bar(total=count * trials, initial=done.get(group, 0), desc=f"{group[0]}/{group[1]}", unit="conv",
                             position=i, leave=True, disable=None if enabled else True, dynamic_ncols=True)  # None: off when stderr is not a terminal (CI logs)
        for i, (group, count) in enumerate(sorted(groups.items()))
    }


def _done_per_group(dataset: Dataset, groups: Iterable[Group], done: set[tuple[str, str, int]]) -> dict[Group, int]:
    per_item: dict[tuple[str, str], int] = {}
    for dialect, item_id, _ in done:
        per_item[(dialect, item_id)] = per_item.get((dialect, item_id), 0) + 1
    return {group: sum(per_item.get((item.dialect, item.id), 0) for item in dataset.items(group)) for group in groups}
