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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from evalbench.agents import AgentContext, build_agent
from evalbench.backends.base import Sandbox
from evalbench.config import RunConfig
from evalbench.config.prices import PriceTable, run_pricing
from evalbench.core import deadline
from evalbench.core.conversation import Conversation, Outcome, Stage, conversation_seed, fail
from evalbench.core.errors import ConfigError, DatasetError, EvalbenchError, SandboxError
from evalbench.core.ratelimit import split_between
from evalbench.dataset import Dataset, RecordError
from evalbench.dataset.column_meanings import load_column_meanings
from evalbench.dataset.knowledge import load_knowledge
from evalbench.dataset.loader import Group
from evalbench.dataset.shard import parse_shard
from evalbench.results.journal.rundir import RunWriter
from evalbench.results.journal.shapes import read_manifest
from evalbench.results.render.reports import ReportSet
from evalbench.run import databases
from evalbench.run.breaker import AgentBreaker
from evalbench.run.catalogs import QueryCatalog, SchemaCatalog
from evalbench.run.lock import hold_run_lock
from evalbench.run.manifest import build_manifest, file_sha256, make_run_id, with_session
from evalbench.run.resume import RETRY_ERRORS, RUN_AGAIN, check_resumable
from evalbench.run.scheduler import Scheduler
from evalbench.run.stages import Parts, StageWork, new_conversation
from evalbench.scoring import test_case_runner
from evalbench.scoring.plan import plan_scoring
from evalbench.scoring.validity import GoldenCheck
from evalbench.vuser import build_vuser

log = logging.getLogger(__name__)

MAX_PARALLEL_GROUPS = 4
SIMULATOR_KEYS = ("vuser", "model", "temperature", "seed", "encode_prompt_sha256", "decode_prompt_sha256", "block_leaks")


@dataclass
class RunResult:
    run_id: str
    run_dir: Path
    summary: dict[str, Any]
    record_errors: list[RecordError] = field(default_factory=list)
    cancelled: bool = False


@dataclass
class Items:
    """The items the run evaluates: the dataset, its scan (groups, counts, record errors) and
    the subset chosen from it."""

    dataset: Dataset
    scan: Any
    subset: dict[str, Any] | None
    knowledge: dict[str, Any]


@dataclass
class RunParts:
    """What every conversation of the run shares: the agent, the virtual user and the scorers."""

    plan: Any
    agent: Any
    vuser: Any
    scorers: list[Any]
    schemas: SchemaCatalog
    queries: QueryCatalog
    check: GoldenCheck

    def work(self, sandbox: Sandbox | None) -> StageWork:
        return StageWork(Parts(self.agent, self.vuser, sandbox, self.scorers, self.plan.rules, self.plan.primary,  # type: ignore[arg-type]
                               self.check))

    def close(self) -> None:
        self.agent.close()
        for closable in (self.vuser, *self.scorers):  # those that hold clients (llm virtual user, llmrater)
            close = getattr(closable, "close", None)
            if close is not None:
                close()


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
    done: set[tuple[Any, str, int]]

    def close(self) -> None:
        self.writer.close()
        if self.reports is not None:
            self.reports.close()


def run(config: RunConfig, *, strict: bool = False, progress: bool = True, out: TextIO | None = None,
        resume: Path | None = None, retry_errors: bool = False, agent_down_after: int = 5,
        reports: bool = True) -> RunResult:
    """Run the evaluation described by ``config`` and write its run directory; with ``resume``,
    continue that run directory: only the conversations its journal does not hold are run (with
    ``retry_errors``, also those that ended in an error or a timeout). Without ``reports``, only
    the manifest, the journal and scores_native.csv are written (a shard of ``--workers``)."""
    if retry_errors and resume is None:
        raise ConfigError("--retry-errors needs --resume RUN_DIR (it redoes that run's errors)")
    shard = config.subset.shard if config.subset else None
    with split_between(parse_shard(shard).count if shard else 1):  # a shard takes its share of every limit
        return _run(config, strict, progress, out, resume, retry_errors, agent_down_after, reports)


def _run(config: RunConfig, strict: bool, progress: bool, out: TextIO | None, resume: Path | None, retry_errors: bool,
         agent_down_after: int, reports: bool) -> RunResult:
    deadline.reset_cancel()
    started = time.monotonic()
    session: dict[str, Any] = {"started_at": dt.datetime.now(dt.timezone.utc).isoformat()}
    items = load_items(config, strict)
    parts = build_parts(config, items)
    place = choose_run_directory(config, items, resume, retry_errors)
    # no other process (nor a worker of one) writes the run directory while this one does
    with hold_run_lock(place.run_dir, "resuming it" if resume is not None else "starting a run there"):
        manifest = start_manifest(config, items, parts, place, session, retry_errors)
        journal = open_journal(config, place, manifest, parts, retry_errors, reports)
        session["resumed_with"] = len(journal.done)
        journal.writer.write_manifest(manifest)
        print(f"evalbench: run {place.run_id}: {_items_header(items.scan.total, items.subset, config.trials)}; "
              f"{parts.plan.header(items.scan.format)}", file=out or sys.stdout, flush=True)
        cancelled, provisioned = evaluate(config, items, parts, journal, place, progress, agent_down_after)
        session |= {"finished_at": dt.datetime.now(dt.timezone.utc).isoformat(), "elapsed_s": round(time.monotonic() - started, 3),
                    "conversations": journal.writer.summary.total - len(journal.done), "cancelled": cancelled}
        summary = finish(items, parts, place, manifest, journal, provisioned, cancelled)
        return RunResult(place.run_id, place.run_dir, summary, items.scan.errors, cancelled)


def load_items(config: RunConfig, strict: bool) -> Items:
    """Scan the dataset (bad records are logged, or with ``strict`` fail the run), choose the
    subset, and read the knowledge base."""
    dataset = Dataset(config.dataset_config, config.dataset_format, config.dialects, config.query_types)
    scan = dataset.scan()
    for error in scan.errors[:20]:
        log.warning("dataset record skipped: %s", error)
    if len(scan.errors) > 20:
        log.warning("... and %d more dataset record errors (all listed in summary.json)", len(scan.errors) - 20)
    if scan.errors and strict:
        raise DatasetError(f"{len(scan.errors)} invalid record(s) (--strict); first: {scan.errors[0]}", file=str(dataset.path))
    if scan.total == 0:
        raise DatasetError(dataset.nothing_to_run(), file=str(dataset.path))
    scan, subset = _choose_subset(config, dataset, scan)
    knowledge = load_knowledge(config.knowledge_path)
    _check_knowledge(config, scan.groups, knowledge)
    return Items(dataset, scan, subset, knowledge)


def planned_groups(config: RunConfig) -> dict[Group, int]:
    """The (dialect, database) groups a run of ``config`` holds and their item counts (of its
    subset), found without a word (the run itself reports the dataset's problems)."""
    dataset = Dataset(config.dataset_config, config.dataset_format, config.dialects, config.query_types)
    scan = dataset.scan()
    if scan.total == 0:
        return {}
    return dict(_choose_subset(config, dataset, scan)[0].groups)


def build_parts(config: RunConfig, items: Items) -> RunParts:
    """The agent, the virtual user and the scorers; a problem is a ConfigError naming the file."""
    schemas, queries = SchemaCatalog(), QueryCatalog()
    try:
        plan = plan_scoring(config.scorers, config.primary, config.accept_nl_answers, items.scan.format)
        context = AgentContext(seed=config.seed, schema=schemas, knowledge=items.knowledge, query=queries,
                               execute=queries.execute, tables=queries.tables,
                               column_meanings=load_column_meanings(config.knowledge_path))
        agent = build_agent(config.agent, context)
        vuser = build_vuser(config.vuser, config.seed, items.knowledge)
        scorers = plan.build()
    except (KeyError, ValueError) as exc:
        raise ConfigError(str(exc), file=str(config.source) if config.source else None) from None
    except ConfigError as exc:
        if exc.file is None and config.source is not None:  # built from a mapping: name the file it came from
            raise ConfigError(exc.message, file=str(config.source), line=exc.line, key=exc.key) from None
        raise
    check = GoldenCheck.of_plan(plan.scorers, plan.rules, follow_up=config.follow_up_enabled)
    return RunParts(plan, agent, vuser, scorers, schemas, queries, check)


def choose_run_directory(config: RunConfig, items: Items, resume: Path | None, retry_errors: bool) -> RunPlace:
    """A new run directory (never one that holds a journal), or the resumed one once its manifest
    says this config and dataset may continue it."""
    dataset_sha256 = file_sha256(items.dataset.path)
    if resume is not None:
        previous = read_manifest(resume)
        check_resumable(previous, config.snapshot(), dataset_sha256, resume, retry_errors=retry_errors)
        return RunPlace(previous["run_id"], resume, previous, dataset_sha256)
    run_id = config.run_id or make_run_id(config)
    run_dir = config.reporting.csv.output_directory / run_id
    if (run_dir / "conversations.jsonl").exists():
        raise ConfigError(f"run directory {run_dir} already holds a journal; choose another run_id "
                          f"(or continue it with --resume {run_dir})")
    return RunPlace(run_id, run_dir, None, dataset_sha256)


def start_manifest(config: RunConfig, items: Items, parts: RunParts, place: RunPlace, session: dict[str, Any],
                   retry_errors: bool) -> dict[str, Any]:
    """The manifest of this session (see :mod:`evalbench.run.manifest`)."""
    metric_scorers = sorted((s.name for s in parts.scorers if s.is_metric), key=list(parts.plan.scorers).index)
    manifest = build_manifest(config, place.run_id, items.dataset, items.scan, parts.agent.describe(), parts.vuser.describe(),
                              place.dataset_sha256, metric_scorers)
    manifest["dataset"] |= {"trials": config.trials, "subset": items.subset}
    manifest["scorers"] = list(parts.plan.scorers)
    manifest["scoring"] = parts.plan.describe()  # semantics and primary verdicts: compare refuses runs where they differ
    # what each scorer needs to be reproduced (e.g. the llmrater's model and prompt hash)
    manifest["scorer_details"] = {s.name: s.describe() for s in parts.scorers if hasattr(s, "describe")}
    manifest["prices"] = PriceTable(config.prices).describe()  # what the journal's cost_usd were computed with
    session["command"] = manifest["command"]
    return with_session(manifest, place.previous, session, retry_errors)


def open_journal(config: RunConfig, place: RunPlace, manifest: dict[str, Any], parts: RunParts,
                 retry_errors: bool, reports: bool = True) -> Journal:
    """The journal writer (on resume: what it holds is replayed into the reports first, and the
    conversations to run again are dropped from it)."""
    # The derived reports are built as conversations complete (replayed ones first), so the end
    # of the run only assembles them.
    report_set = ReportSet(place.run_dir, manifest) if reports else None
    simulator = {k: v for k, v in parts.vuser.describe().items() if k in SIMULATOR_KEYS}
    pricing = run_pricing(config.prices, parts.agent.describe(), parts.vuser.describe())
    try:
        writer = RunWriter(place.run_dir, place.run_id, preview_rows=config.execution.preview_rows,
                           metric_scorers={s.name for s in parts.scorers if s.is_metric}, simulator=simulator,
                           pricing=pricing,
                           resume=place.previous is not None, on_record=report_set.add if report_set else None,
                           run_again=RETRY_ERRORS if retry_errors else RUN_AGAIN, trials=config.trials)
    except BaseException:
        if report_set is not None:
            report_set.close()  # no half-written report files left behind
        raise
    state = writer.resumed
    if state is not None:
        log.warning("resuming %s: %d conversation(s) done; running the other %d (%d to run again — cancelled, db_error"
                    + (", agent_error, vuser_error or timeout" if retry_errors else "") + " — and %d cut short "
                    "by a crash are run again)", place.run_id, state.kept,
                    max(manifest["dataset"]["items"] * config.trials - state.kept, 0), state.dropped_cancelled,
                    state.dropped_partial)
    return Journal(writer, report_set, state.done if state is not None else set())


def evaluate(config: RunConfig, items: Items, parts: RunParts, journal: Journal, place: RunPlace, progress: bool,
             agent_down_after: int) -> tuple[bool, dict[str, dict[str, Any]]]:
    """Every group's conversations through the stage pools, groups in parallel; returns whether
    the run was cancelled (Ctrl-C) and what provisioning did per database. A failure, the
    circuit breaker or a scheduler error close the journal and raise."""
    scan, done = items.scan, journal.done
    bars = _progress_bars(scan.groups, progress, _done_per_group(items.dataset, scan.groups, done) if done else {}, config.trials)
    bars_lock = threading.Lock()
    # ``agent_down_after`` conversations in a row that could not connect to the agent stop the run (0: never)
    breaker = AgentBreaker(parts.agent.describe().get("base_url"), lambda: scheduler.cancel(), agent_down_after)

    def on_complete(conv: Conversation) -> None:
        journal.writer.record(conv)
        breaker.observe(conv)
        with bars_lock:
            bars[(conv.item.dialect, conv.item.database)].update(1)

    runners = config.runners
    scheduler = Scheduler({Stage.PROMPT: runners.promptgen_runners, Stage.GENERATE: runners.sqlgen_runners,
                           Stage.VUSER: runners.vuser_runners, Stage.EXECUTE: runners.sqlexec_runners,
                           Stage.SCORE: runners.scoring_runners}, config.max_in_flight, on_complete)
    groups = GroupEvaluator(config, items, parts, scheduler, done, on_complete)
    failed = False
    try:
        cancelled = _run_groups(groups, scheduler)
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

    def __init__(self, config: RunConfig, items: Items, parts: RunParts, scheduler: Scheduler,
                 done: set[tuple[Any, str, int]], on_complete: Any) -> None:
        self.config, self.items, self.parts, self.scheduler = config, items, parts, scheduler
        self.done, self.on_complete = done, on_complete
        self.sandboxes: list[Sandbox] = []
        self.reports: dict[str, dict[str, Any]] = {}

    def __call__(self, group: Group) -> None:
        dialect, database = group
        key = f"{dialect}/{database}"
        config, dataset = self.config, self.items.dataset
        if self.done and all((item.dialect, item.id, trial) in self.done
                             for trial in range(1, config.trials + 1) for item in dataset.items(group)):
            return  # resumed: nothing left to run here
        try:
            db = databases.database(config, dialect, database)
            provisioned = db.provision(config)
        except SandboxError:
            raise  # never run agent SQL with more rights: the whole run stops
        except EvalbenchError as exc:
            log.error("%s: %s", key, exc)
            self.reports[key] = {"error": str(exc)}
            _record_unrunnable(config, dataset, group, str(exc), self.parts.work(None), self.on_complete, self.done)
            return
        self.reports[key] = databases.provision_entry(provisioned)
        if provisioned.warning:
            log.warning("%s: %s", key, provisioned.warning)
        sandbox = db.open_sandbox(config, provisioned)
        self.sandboxes.append(sandbox)
        self.parts.schemas.register(dialect, database, lambda: db.backend.describe_schema(sandbox))
        self.parts.queries.register(dialect, database, sandbox)
        work = self.parts.work(sandbox)
        for conv in _conversations(config, dataset, group, self.done):
            if not self.scheduler.admit(conv, work):
                break


def _run_groups(groups: GroupEvaluator, scheduler: Scheduler) -> bool:
    """Every group on a small pool, the main thread kept responsive to Ctrl-C; True when the run
    was cancelled (what was in flight is journaled as cancelled)."""
    names = sorted(groups.items.scan.groups)
    # max(1, ...): a shard may hold no item (more shards than items), and is then a run of nothing
    pool = ThreadPoolExecutor(max_workers=max(1, min(len(names), MAX_PARALLEL_GROUPS)), thread_name_prefix="evalbench-group")
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
           reports: dict[str, dict[str, Any]], cancelled: bool) -> dict[str, Any]:
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
        "scoring": manifest.get("scoring") or parts.plan.describe(),
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


def _cancel_in_flight(scheduler: Scheduler, sandboxes: list[Any]) -> None:
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


def _check_knowledge(config: RunConfig, groups: Any, knowledge: dict[str, Any]) -> None:
    """A configured knowledge directory must hold the knowledge of the dataset's databases:
    one that does not (a wrong folder) is an error naming the key, not silently ignored."""
    directory = config.knowledge_directory
    if directory is None:
        return
    where = str(config.source) if config.source else None
    if not directory.is_dir():
        raise ConfigError(f"not a directory: {directory}", file=where, key="knowledge_directory")
    databases = sorted({database for _, database in groups})
    missing = [database for database in databases if database not in knowledge]
    if missing and len(missing) == len(databases):
        found = ", ".join(sorted(p.name for p in directory.glob("*_kb.jsonl"))) or "none"
        raise ConfigError(f"{directory} holds no {missing[0]}_kb.jsonl (knowledge files found: {found})",
                          file=where, key="knowledge_directory")
    for database in missing:
        log.warning("knowledge_directory %s has no %s_kb.jsonl: items of %s get no external knowledge",
                    directory, database, database)


def _patience(config: RunConfig) -> int:
    return getattr(config.vuser, "patience", 3)


def _record_unrunnable(config: RunConfig, dataset: Dataset, group: Group, error: str, work: StageWork, on_complete: Any,
                       done: set[tuple[Any, str, int]]) -> None:
    """A group whose database cannot be set up: every item is still recorded (as db_error)."""
    for conv in _conversations(config, dataset, group, done):
        stage = fail(conv, Outcome.DB_ERROR, f"database setup failed: {error}")
        while stage is not Stage.COMPLETE:
            stage = work.run(stage, conv)
        on_complete(conv)


def _conversations(config: RunConfig, dataset: Dataset, group: Group, done: set[tuple[Any, str, int]]) -> Iterator[Conversation]:
    """The conversations of ``group`` still to run, trial by trial (all items' first trial, then
    the second...: a run cut short holds whole trials), each trial in its own agent session."""
    for trial in range(1, config.trials + 1):
        for item in dataset.items(group):
            if (item.dialect, item.id, trial) in done:
                continue
            yield new_conversation(item, seed=conversation_seed(config.seed, item.id, trial=trial),
                                   max_turns=config.max_turns, patience=_patience(config),
                                   timeout_s=config.conversation_timeout_s, debug_attempts=config.debug_attempts,
                                   trial=trial, follow_up=config.follow_up_enabled)


def _choose_subset(config: RunConfig, dataset: Dataset, scan: Any) -> tuple[Any, dict[str, Any] | None]:
    """The scan of the items the run keeps (``subset``: item ids, sample, limit), and its record."""
    if config.subset is None:
        return scan, None
    from dataclasses import replace

    from evalbench.dataset.subset import Subset, choose

    subset = Subset(config.subset.item_ids, config.subset.sample, config.subset.limit, config.seed, config.subset.shard)
    if subset.empty:
        return scan, None
    chosen = choose(dataset, subset, scan.total, where=str(config.source) if config.source else None, groups=scan.groups)
    dataset.only = chosen.keys
    return replace(scan, groups=chosen.groups), chosen.describe(subset)


def _items_header(total: int, subset: dict[str, Any] | None, trials: int) -> str:
    text = f"{total} items" + (f" (a subset of {subset['of']})" if subset else "")
    return text + (f" x {trials} trials" if trials > 1 else "")


def _progress_bars(groups: Any, enabled: bool, done: dict[Group, int], trials: int = 1) -> dict[Group, Any]:
    from evalbench.core.terminal import progress_bar

    return {
        group: progress_bar(total=count * trials, initial=done.get(group, 0), desc=f"{group[0]}/{group[1]}", unit="conv",
                             position=i, leave=True, disable=None if enabled else True, dynamic_ncols=True)  # None: off when stderr is not a terminal (CI logs)
        for i, (group, count) in enumerate(sorted(groups.items()))
    }


def _done_per_group(dataset: Dataset, groups: Any, done: set[tuple[Any, str, int]]) -> dict[Group, int]:
    per_item: dict[tuple[Any, str], int] = {}
    for dialect, item_id, _ in done:
        per_item[(dialect, item_id)] = per_item.get((dialect, item_id), 0) + 1
    return {group: sum(per_item.get((item.dialect, item.id), 0) for item in dataset.items(group)) for group in groups}
