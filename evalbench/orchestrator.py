"""The batch: split items by (dialect, database), provision each database, feed the shared
stage pools, journal every conversation, and write the reports at the end."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import platform
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from evalbench import __version__, databases, deadline
from evalbench.agents import AgentContext, build_agent
from evalbench.backends.base import Sandbox
from evalbench.catalogs import QueryCatalog, SchemaCatalog
from evalbench.config import RunConfig
from evalbench.conversation import Conversation, Outcome, Stage, conversation_seed, fail
from evalbench.dataset import Dataset, RecordError
from evalbench.dataset.knowledge import load_knowledge
from evalbench.dataset.loader import Group
from evalbench.errors import ConfigError, DatasetError, EvalbenchError, SandboxError
from evalbench.results.reports import ReportSet
from evalbench.results.rundir import RunWriter
from evalbench.resume import RETRY_ERRORS, RUN_AGAIN, check_resumable, read_manifest, session_changes
from evalbench.scheduler import Scheduler
from evalbench.scoring import test_case_runner
from evalbench.scoring.plan import plan_scoring
from evalbench.stages import Parts, StageWork, new_conversation
from evalbench.vuser import build_vuser

log = logging.getLogger(__name__)

MAX_PARALLEL_GROUPS = 4


@dataclass
class RunResult:
    run_id: str
    run_dir: Path
    summary: dict[str, Any]
    record_errors: list[RecordError] = field(default_factory=list)
    cancelled: bool = False


def make_run_id(config: RunConfig) -> str:
    stem = config.source.stem if config.source else "run"
    return f"{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{stem}-{secrets.token_hex(2)}"


def run(config: RunConfig, *, strict: bool = False, progress: bool = True, out: TextIO | None = None,
        resume: Path | None = None, retry_errors: bool = False, agent_down_after: int = 5) -> RunResult:
    """Run the evaluation described by ``config`` and write its run directory; with ``resume``,
    continue that run directory: only the conversations its journal does not hold are run (with
    ``retry_errors``, also those that ended in an error or a timeout)."""
    if retry_errors and resume is None:
        raise ConfigError("--retry-errors needs --resume RUN_DIR (it redoes that run's errors)")
    out = out or sys.stdout
    deadline.reset_cancel()
    started = time.monotonic()
    started_at = dt.datetime.now(dt.timezone.utc).isoformat()
    dataset = Dataset(config.dataset_config, config.dataset_format, config.dialects, config.query_types)
    scan = dataset.scan()
    for error in scan.errors[:20]:
        log.warning("dataset record skipped: %s", error)
    if len(scan.errors) > 20:
        log.warning("... and %d more dataset record errors (all listed in summary.json)", len(scan.errors) - 20)
    if scan.errors and strict:
        raise DatasetError(f"{len(scan.errors)} invalid record(s) (--strict); first: {scan.errors[0]}", file=str(dataset.path))
    if scan.total == 0:
        raise DatasetError(
            f"no items to run for dialects {config.dialects}" + (f" and query_types {config.query_types}" if config.query_types else ""),
            file=str(dataset.path),
        )

    scan, subset_info = _choose_subset(config, dataset, scan)
    trials = config.trials
    knowledge = load_knowledge(config.knowledge_path)
    _check_knowledge(config, scan.groups, knowledge)
    schemas, queries = SchemaCatalog(), QueryCatalog()
    try:
        plan = plan_scoring(config.scorers, config.primary, config.accept_nl_answers, scan.format)
        agent = build_agent(config.agent, AgentContext(seed=config.seed, schema=schemas, knowledge=knowledge, query=queries))
        vuser = build_vuser(config.vuser, config.seed, knowledge)
        scorers = plan.build()
    except (KeyError, ValueError) as exc:
        raise ConfigError(str(exc), file=str(config.source) if config.source else None) from None
    except ConfigError as exc:
        if exc.file is None and config.source is not None:  # built from a mapping: name the file it came from
            raise ConfigError(exc.message, file=str(config.source), line=exc.line, key=exc.key) from None
        raise

    dataset_sha256 = _file_sha256(dataset.path)
    previous: dict[str, Any] | None = None
    if resume is not None:
        previous = read_manifest(resume)
        check_resumable(previous, config.snapshot(), dataset_sha256, resume, retry_errors=retry_errors)
        run_id, run_dir = previous["run_id"], resume
    else:
        run_id = config.run_id or make_run_id(config)
        run_dir = config.reporting.csv.output_directory / run_id
        if (run_dir / "conversations.jsonl").exists():
            raise ConfigError(f"run directory {run_dir} already holds a journal; choose another run_id "
                              f"(or continue it with --resume {run_dir})")
    vuser_info = vuser.describe()
    simulator = {k: v for k, v in vuser_info.items()
                 if k in ("vuser", "model", "temperature", "seed", "encode_prompt_sha256", "decode_prompt_sha256", "block_leaks")}
    metric_scorers = {s.name for s in scorers if s.is_metric}
    manifest = _manifest(config, run_id, dataset, scan, agent.describe(), vuser_info, dataset_sha256,
                         sorted(metric_scorers, key=list(plan.scorers).index))
    manifest["dataset"] |= {"trials": trials, "subset": subset_info}
    manifest["scorers"] = list(plan.scorers)
    manifest["scoring"] = plan.describe()  # semantics and primary verdicts: compare refuses runs where they differ
    # what each scorer needs to be reproduced (e.g. the llmrater's model and prompt hash)
    manifest["scorer_details"] = {s.name: s.describe() for s in scorers if hasattr(s, "describe")}
    session: dict[str, Any] = {"started_at": started_at, "command": manifest["command"]}
    if previous is not None:  # the first session's manifest stays; this session is appended
        session["retry_errors"] = retry_errors
        previous_config = previous.get("config") or {}
        for key in ("run_id", "reporting"):  # the run directory is the one resumed, wherever --output-dir points
            if key in previous_config:
                manifest["config"][key] = previous_config[key]
        session["config_changes"] = session_changes(previous_config, manifest["config"])
        # what may change on resume (the subset, the trials, with --retry-errors how the agent is
        # reached) is the run's from now on: the next resume and the reports read it here
        manifest = previous | {"sessions": [*previous.get("sessions", []), session], "config": manifest["config"],
                               "dataset": manifest["dataset"], "agent": manifest["agent"],
                               "config_fingerprint": manifest["config_fingerprint"]}
    else:
        manifest["sessions"] = [session]
    # The derived reports are built as conversations complete (replayed ones first), so the end
    # of the run only assembles them.
    report_set = ReportSet(run_dir, manifest)
    try:
        writer = RunWriter(run_dir, run_id, preview_rows=config.execution.preview_rows, metric_scorers=metric_scorers,
                           simulator=simulator, resume=resume is not None, on_record=report_set.add,
                           run_again=RETRY_ERRORS if retry_errors else RUN_AGAIN, trials=trials)
    except BaseException:
        report_set.close()  # no half-written report files left behind
        raise
    done: set[tuple[Any, str, int]] = writer.resumed.done if writer.resumed is not None else set()
    if writer.resumed is not None:
        state = writer.resumed
        log.warning("resuming %s: %d conversation(s) done; running the other %d (%d to run again — cancelled, db_error"
                    + (", agent_error, vuser_error or timeout" if retry_errors else "") + " — and %d cut short "
                    "by a crash are run again)", run_id, state.kept, max(scan.total * trials - state.kept, 0),
                    state.dropped_cancelled, state.dropped_partial)
    session["resumed_with"] = len(done)
    writer.write_manifest(manifest)
    print(f"evalbench: run {run_id}: {_items_header(scan.total, subset_info, trials)}; {plan.header(scan.format)}",
          file=out, flush=True)

    bars = _progress_bars(scan.groups, progress, _done_per_group(dataset, scan.groups, done) if done else {}, trials)
    bars_lock = threading.Lock()

    from evalbench.breaker import AgentBreaker

    # ``agent_down_after`` conversations in a row that could not connect to the agent stop the run (0: never)
    breaker = AgentBreaker(agent.describe().get("base_url"), lambda: scheduler.cancel(), agent_down_after)

    def on_complete(conv: Conversation) -> None:
        writer.record(conv)
        breaker.observe(conv)
        with bars_lock:
            bars[(conv.item.dialect, conv.item.database)].update(1)

    runners = config.runners
    scheduler = Scheduler(
        {
            Stage.PROMPT: runners.promptgen_runners,
            Stage.GENERATE: runners.sqlgen_runners,
            Stage.VUSER: runners.vuser_runners,
            Stage.EXECUTE: runners.sqlexec_runners,
            Stage.SCORE: runners.scoring_runners,
        },
        config.max_in_flight,
        on_complete,
    )
    sandboxes: list[Sandbox] = []
    reports: dict[str, dict[str, Any]] = {}

    def evaluate_group(group: Group) -> None:
        dialect, database = group
        key = f"{dialect}/{database}"
        if done and all((item.dialect, item.id, trial) in done
                        for trial in range(1, trials + 1) for item in dataset.items(group)):
            return  # resumed: nothing left to run here
        try:
            db = databases.database(config, dialect, database)
            provisioned = db.provision(config)
        except SandboxError:
            raise  # never run agent SQL with more rights: the whole run stops
        except EvalbenchError as exc:
            log.error("%s: %s", key, exc)
            reports[key] = {"error": str(exc)}
            _record_unrunnable(config, dataset, group, str(exc),
                               StageWork(Parts(agent, vuser, None, scorers, plan.rules, plan.primary)), on_complete,  # type: ignore[arg-type]
                               done)
            return
        reports[key] = databases.provision_entry(provisioned)
        if provisioned.warning:
            log.warning("%s: %s", key, provisioned.warning)
        sandbox = db.open_sandbox(config, provisioned)
        sandboxes.append(sandbox)
        schemas.register(dialect, database, lambda: db.backend.describe_schema(sandbox))
        queries.register(dialect, database, sandbox)
        work = StageWork(Parts(agent, vuser, sandbox, scorers, plan.rules, plan.primary))
        for conv in _conversations(config, dataset, group, done):
            if not scheduler.admit(conv, work):
                break

    cancelled = False
    groups = sorted(scan.groups)
    pool = ThreadPoolExecutor(max_workers=min(len(groups), MAX_PARALLEL_GROUPS), thread_name_prefix="evalbench-group")
    failed = False
    try:
        futures = [pool.submit(evaluate_group, group) for group in groups]
        for future in futures:
            while not future.done():
                time.sleep(0.05)  # keep the main thread responsive to Ctrl-C
            future.result()
        scheduler.wait()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (the CLI raises it): cancel before waiting on anything
        cancelled = True
        log.warning("cancelling: in-flight conversations are recorded as cancelled")
        _cancel_in_flight(scheduler, sandboxes)
    except BaseException:
        scheduler.cancel()  # a failure (e.g. no safe sandbox role): stop admitting, journal what is in flight, propagate
        failed = True
        raise
    finally:
        pool.shutdown(wait=True)  # the groups stop admitting once the scheduler is cancelled
        scheduler.wait()
        scheduler.shutdown()
        for sandbox in sandboxes:
            sandbox.close()
        agent.close()
        for closable in (vuser, *scorers):  # those that hold clients (llm virtual user, llmrater)
            close = getattr(closable, "close", None)
            if close is not None:
                close()
        for bar in bars.values():
            bar.close()
        if failed:
            writer.close()
            report_set.close()
    if scheduler.failure is not None:
        writer.close()
        report_set.close()
        raise EvalbenchError(f"the run stopped: {scheduler.failure}")
    if breaker.tripped:  # the conversations in flight were journaled (as cancelled): --resume goes on
        writer.close()
        report_set.close()
        raise breaker.error(run_dir)

    elapsed = time.monotonic() - started
    session |= {"finished_at": dt.datetime.now(dt.timezone.utc).isoformat(), "elapsed_s": round(elapsed, 3),
                "conversations": writer.summary.total - len(done), "cancelled": cancelled}
    total_elapsed = sum(s.get("elapsed_s") or 0.0 for s in manifest["sessions"])
    extra = {
        "elapsed_s": round(total_elapsed, 3),
        "conversations_per_s": round(writer.summary.total / total_elapsed, 2) if total_elapsed > 0 else None,
        "dataset": {"path": str(dataset.path), "format": scan.format, "items": scan.total,
                    "record_errors": len(scan.errors), "filtered_out": scan.filtered_out},
        "record_errors": [str(e) for e in scan.errors[:1000]],
        "databases": (previous or {}).get("databases", {}) | reports,
        "cancelled": cancelled,
        "sessions": len(manifest["sessions"]),
        "scoring": manifest.get("scoring") or plan.describe(),
    }
    summary = writer.finish(**extra)
    writer.close()
    try:
        report_set.commit(summary)
    finally:
        report_set.close()
    manifest["databases"] = extra["databases"]
    manifest["finished_at"] = session["finished_at"]
    manifest["summary_extra"] = extra  # what `evalbench report` needs besides the journal
    writer.write_manifest(manifest)
    return RunResult(run_id, run_dir, summary, scan.errors, cancelled)


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

    subset = Subset(config.subset.item_ids, config.subset.sample, config.subset.limit, config.seed)
    if subset.empty:
        return scan, None
    chosen = choose(dataset, subset, scan.total, where=str(config.source) if config.source else None)
    dataset.only = chosen.keys
    return replace(scan, groups=chosen.groups), chosen.describe(subset)


def _items_header(total: int, subset: dict[str, Any] | None, trials: int) -> str:
    text = f"{total} items" + (f" (a subset of {subset['of']})" if subset else "")
    return text + (f" x {trials} trials" if trials > 1 else "")


def _progress_bars(groups: Any, enabled: bool, done: dict[Group, int], trials: int = 1) -> dict[Group, Any]:
    from tqdm import tqdm

    return {
        group: tqdm(total=count * trials, initial=done.get(group, 0), desc=f"{group[0]}/{group[1]}", unit="conv", position=i,
                    leave=True, disable=None if enabled else True, dynamic_ncols=True)  # None: off when stderr is not a terminal (CI logs)
        for i, (group, count) in enumerate(sorted(groups.items()))
    }


def _done_per_group(dataset: Dataset, groups: Any, done: set[tuple[Any, str, int]]) -> dict[Group, int]:
    per_item: dict[tuple[Any, str], int] = {}
    for dialect, item_id, _ in done:
        per_item[(dialect, item_id)] = per_item.get((dialect, item_id), 0) + 1
    return {group: sum(per_item.get((item.dialect, item.id), 0) for item in dataset.items(group)) for group in groups}


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _git_sha() -> str | None:
    try:
        result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None if result.returncode == 0 else None


def _redact_arg(arg: str) -> str:
    """One command-line argument as the manifest records it: secrets redacted like the config's.

    ``KEY=VALUE`` (a ``--set`` pair, also as ``--set=KEY=VALUE``): the value is read as YAML, as
    ``--set`` reads it, and redacted under its key (``password=***``; ``database_configs=[...]``
    and ``model_config={...}`` keep their other keys, with secret-looking keys and passwords in
    URLs redacted). Any ``scheme://user:password@`` and secret-looking ``KEY=VALUE`` left in the text are
    redacted too; lone surrogates (bytes that were not UTF-8) become U+FFFD."""
    import json
    import re

    import yaml

    from evalbench.config import _SECRET_KEYS, redact, redact_url
    from evalbench.results.record import clean_text

    arg = clean_text(arg)
    option, sep, rest = arg.partition("=")
    if sep and option.startswith("-"):  # --set=KEY=VALUE, --output-dir=...
        return f"{option}={_redact_arg(rest)}"
    key, sep, value = arg.partition("=")
    if sep and key:
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            parsed = value
        redacted = redact({key: parsed})[key]
        if redacted != parsed:
            value = redacted if isinstance(redacted, str) else json.dumps(redacted, ensure_ascii=False, default=str)
            arg = f"{key}={value}"
    if "://" in arg:
        arg = redact_url(arg)
        # a URL inside a longer text (YAML that did not parse, a connection string...)
        arg = re.sub(r"(://[^\s/@:'\"]*:)[^\s@'\"]*@", r"\1***@", arg)
    # KEY=VALUE / KEY: VALUE pairs left in the text (YAML that did not parse, a connection string...)
    secret_key = "|".join(re.escape(k) for k in _SECRET_KEYS)
    pattern = rf"""([\w.-]*(?:{secret_key})[\w.-]*["']?\s*[=:]\s*)(?!["']?\*\*\*)("[^"]*"|'[^']*'|[^\s,;&}}\]]+)"""
    return re.sub(pattern, r"\1***", arg, flags=re.IGNORECASE)


def _manifest(config: RunConfig, run_id: str, dataset: Dataset, scan: Any, agent: dict[str, Any], vuser: dict[str, Any],
              dataset_sha256: str, metric_scorers: list[str]) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    packages: dict[str, str | None] = {}
    for name in ("sqlglot", "psycopg", "sqlalchemy", "pydantic", "pgserver", "google-genai", "httpx"):
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            packages[name] = None
    return {
        "schema_version": 1,
        "run_id": run_id,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(),
        "evalbench_version": __version__,
        "git_sha": _git_sha(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": packages,
        "command": [os.path.basename(sys.argv[0])] + [_redact_arg(a) for a in sys.argv[1:]],
        "config_file": str(config.source) if config.source else None,
        "config": config.snapshot(),
        "config_fingerprint": config.fingerprint(),
        "seed": config.seed,
        "dataset": {"path": str(dataset.path), "sha256": dataset_sha256, "format": scan.format,
                    "items": scan.total, "groups": {f"{d}/{n}": c for (d, n), c in sorted(scan.groups.items())},
                    "record_errors": len(scan.errors)},
        "agent": agent,
        "vuser": vuser,
        "scorers": list(config.scorers),
        "metric_scorers": metric_scorers,
    }
