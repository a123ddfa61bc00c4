"""The ``evalbench`` command: a thin shell over the library. Heavy imports happen inside the
commands so that ``evalbench --help`` stays instant.

Exit codes (docs/ci.md): 0 pass; 1 a gate failed (``--fail-under``, ``--max-regression``; for
``validate``: an invalid item); 2 invalid config or dataset (with ``run --strict``: also an
item whose golden SQL fails — never exit 3, which is for infrastructure; also a preflight check of the
configuration, e.g. a misspelt gate metric); 3 infrastructure errors above
``--max-infra-errors`` (a database that could not be set up — its items are still journaled, as
db_error — a failing virtual user, or a journal that could not be written), a preflight check of the
infrastructure (an agent, model, database or output directory that cannot be reached) or an agent the
circuit breaker found down during the run; 130 cancelled (Ctrl-C).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the command modules import lazily: `evalbench --help` stays instant
    from evalbench.run.items import Items
    from evalbench.run.parts import RunParts
    from evalbench.run.plan import RunPlan

EXIT_OK, EXIT_GATE, EXIT_CONFIG, EXIT_INFRA, EXIT_CANCELLED = 0, 1, 2, 3, 130

EPILOG = """examples:
  evalbench run --config configs/quickstart.yaml
  evalbench run --config configs/quickstart.yaml --resume results/<run_id>
  evalbench run --config configs/quickstart.yaml --fail-under exec_match=60%
  evalbench validate --config configs/quickstart.yaml
  evalbench check --config configs/quickstart.yaml
  evalbench report results/<run_id>
  evalbench compare results/<run_a> results/<run_b>
  evalbench explain results/<run_id> <item_id>
  evalbench rescore results/<run_id> --set 'scorers={exec_match: {semantics: evalbench}}'
  evalbench runs results/
  evalbench view results/
  evalbench datasets --config configs/quickstart.yaml
  evalbench db --config configs/quickstart.yaml --json
"""


def _add_gate_options(parser: argparse.ArgumentParser) -> None:
    gates = parser.add_argument_group("CI gates (exit code 1 when one fails; see docs/ci.md)")
    gates.add_argument("--fail-under", action="append", default=[], metavar="METRIC=VALUE",
                       help="fail when METRIC (e.g. exec_match, success, exec_match.follow_up) is below VALUE (0.6 or 60%%)")
    gates.add_argument("--baseline", metavar="RUN_DIR", help="the run --max-regression compares with")
    gates.add_argument("--max-regression", action="append", default=[], metavar="METRIC=DELTA",
                       help="fail when METRIC dropped by more than DELTA (0.02 or 2%%) since --baseline")
    gates.add_argument("--regression-confidence", default="95%", metavar="LEVEL",
                       help="how sure --max-regression must be that the drop exceeds DELTA before it fails "
                            "(0.95 or 95%%, the default; items of both journals are paired)")
    gates.add_argument("--force", action="store_true",
                       help="check --max-regression against a baseline whose semantics or primary verdicts differ")
    gates.add_argument("--max-infra-errors", type=int, default=0, metavar="N",
                       help="exit 3 when more than N conversations end in db_error or vuser_error (default 0)")
    gates.add_argument("--allow-incomplete", action="store_true",
                       help="let --fail-under and --max-regression pass on an incomplete run (or baseline): one whose "
                            "journal holds fewer conversations than the dataset has items, or that did not finish")


def _confidence(args: argparse.Namespace) -> float:
    """``--regression-confidence`` (0.95 or 95%); a ConfigError naming it otherwise."""
    from evalbench.core.errors import ConfigError
    from evalbench.results.summary.regression import check_confidence

    text = str(getattr(args, "regression_confidence", "95%")).strip()
    try:
        return check_confidence(float(text[:-1]) / 100 if text.endswith("%") else float(text))
    except ValueError as exc:
        reason = str(exc) if "confidence" in str(exc) else "not a number (write 0.95 or 95%)"
        raise ConfigError(f"--regression-confidence {text}: {reason}") from None


def _add_subset_options(parser: argparse.ArgumentParser) -> None:
    subset = parser.add_argument_group("subsets and repeated trials (config keys: subset, trials)")
    subset.add_argument("--item-ids", nargs="+", metavar="ID", help="only these items; @FILE reads ids from FILE, one per line")
    subset.add_argument("--sample", type=int, metavar="N", help="a random sample of N items (seeded by the run seed, stratified by category)")
    subset.add_argument("--limit", type=int, metavar="N", help="only the first N items, in dataset order")
    subset.add_argument("--shard", metavar="I/N", help="run shard I of N (whole databases per shard, else items by hash); "
                                                      "evalbench merge joins the shards' run directories")
    subset.add_argument("--trials", type=int, metavar="K",
                        help="run each item K times in independent agent sessions (pass@k, pass^k, consistency)")


def build_parser() -> argparse.ArgumentParser:
    from evalbench import __version__

    parser = argparse.ArgumentParser(
        prog="evalbench",
        description="Evaluate data agents in multi-turn conversations against real databases.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"evalbench {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="run an evaluation",
        description="Run an evaluation and write results/<run_id>/.",
        epilog="example:\n  evalbench run --config configs/quickstart.yaml",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--config", required=True, help="run config (YAML)")
    run.add_argument("--strict", action="store_true",
                     help="exit 2 when a dataset record is malformed or an item is invalid (its golden SQL fails); "
                          "by default such records are reported and skipped, such items listed and kept out of every rate")
    run.add_argument("--run-id", help="name of the run directory (default: time stamp and config name)")
    run.add_argument("--output-dir", help="where run directories go (overrides reporting.csv.output_directory)")
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a top-level config key (value parsed as YAML), e.g. --set seed=7",
    )
    run.add_argument("--resume", metavar="RUN_DIR",
                     help="continue an interrupted run: only conversations its journal does not hold are run")
    run.add_argument("--retry-errors", action="store_true",
                     help="with --resume: also redo the conversations that ended in agent_error, vuser_error or timeout; "
                          "the agent's URL, headers and timeouts may then differ (recorded per session in manifest.json)")
    _add_subset_options(run)
    run.add_argument("--workers", type=int, metavar="N",
                     help="run as N processes, each a shard of the items, merged into the run directory at the end "
                          "(default: one per core, at most one per 250 conversations; with --executor ray: one per CPU of the "
                          "cluster; with --resume: as many as the run had, each shard continued)")
    run.add_argument("--executor", choices=("local", "ray"), default="local",
                     help="where the shards of --workers run: processes on this machine (default), or Ray tasks on a "
                          "Ray cluster (pip install 'evalbench[ray]'; see docs/scaling.md)")
    run.add_argument("--ray-address", metavar="ADDR",
                     help="with --executor ray: the cluster to connect to, e.g. auto (this node is in it) or HEAD_IP:6379 "
                          "(default: RAY_ADDRESS, else a local Ray on this machine's CPUs)")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    # a worker of --workers: the journal, manifest and scores_native.csv only (its parent builds the reports)
    run.add_argument("--journal-only", action="store_true", help=argparse.SUPPRESS)
    run.add_argument("--no-preflight", action="store_true",
                     help="skip the checks made before item 1 (agent, virtual user, databases, output directory: "
                          "see evalbench check); gate metric names are still checked")
    run.add_argument("--agent-down-after", type=int, default=5, metavar="N",
                     help="circuit breaker: stop the run (exit 3) when N conversations in a row could not connect "
                          "to the agent (default 5; 0: never)")
    _add_gate_options(run)

    validate = commands.add_parser(
        "validate",
        help="check a dataset: run every golden SQL, check conditions and annotations",
        description="Run every golden SQL through the sandbox and check what needs no agent. "
        "Exit 1 when an item is invalid (and not --allow'ed), 2 on a config error.",
        epilog="example:\n  evalbench validate --config configs/quickstart.yaml --allow greenleaf_7",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    validate.add_argument("--config", required=True, help="run config (YAML): its dataset and databases are checked")
    validate.add_argument("--allow", nargs="*", default=[], metavar="ITEM_ID", help="invalid items to accept")
    validate.add_argument("--json", metavar="FILE", help="also write the findings as JSON")
    validate.add_argument("--no-test-cases", action="store_true",
                          help="skip running the management tasks' test cases (golden SQL and a no-op statement)")
    validate.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                          help="override a top-level config key, as for run (e.g. --set 'runners={sqlexec_runners: 8}': "
                               "items are checked on that many threads)")
    validate.add_argument("--no-progress", action="store_true", help="no progress bar (none either when stderr is not a terminal)")

    report = commands.add_parser(
        "report",
        help="regenerate a run's reports from its journal",
        description="Recompute summary.json, summary.md, the CSVs, junit.xml and report.html of a run directory "
        "from its journal alone; the gates may be checked again.",
        epilog="example:\n  evalbench report results/<run_id> --fail-under exec_match=60%",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("run_dir", metavar="RUN_DIR")
    report.add_argument("--no-html", action="store_true", help="skip report.html")
    _add_gate_options(report)

    merge = commands.add_parser(
        "merge",
        help="join the run directories of a run's shards (--shard i/n) into one",
        description="Write OUT_DIR as the run the shards make together: one journal, one manifest (every shard's "
        "sessions), every report recomputed. The shards must share the config and the dataset, and be every shard "
        "of one split.",
        epilog="example:\n  evalbench merge results/full results/shard-1 results/shard-2",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    merge.add_argument("out_dir", metavar="OUT_DIR")
    merge.add_argument("shards", nargs="+", metavar="SHARD_DIR")
    merge.add_argument("--no-html", action="store_true", help="skip report.html")
    _add_gate_options(merge)

    compare = commands.add_parser(
        "compare",
        help="compare two runs item by item, with paired statistics",
        description="Align two runs by item id, list the flips, test the difference (McNemar exact test, paired "
        "bootstrap CI) and write compare.html and compare.md. Runs on different datasets, scorers, semantics, "
        "primary verdicts or virtual users are refused unless --force.",
        epilog="example:\n  evalbench compare results/<baseline> results/<candidate>",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    compare.add_argument("run_a", metavar="RUN_A", help="the baseline run directory")
    compare.add_argument("run_b", metavar="RUN_B", help="the candidate run directory")
    compare.add_argument("--metric", help="the pass/fail scorer to compare (default: the phases' own verdicts)")
    compare.add_argument("--force", action="store_true", help="compare even when the runs are not comparable")
    compare.add_argument("--output-dir", metavar="DIR", help="where compare.html and compare.md go (default: RUN_B)")

    explain = commands.add_parser(
        "explain",
        help="show one conversation and why it failed",
        description="Print a conversation turn by turn with its results, scores and the failure diagnosis.",
        epilog="example:\n  evalbench explain results/<run_id> greenleaf_7",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    explain.add_argument("run_dir", metavar="RUN_DIR")
    explain.add_argument("item_id", metavar="ITEM_ID")

    runs = commands.add_parser(
        "runs",
        help="list the runs in a folder: date, status, headline with its CI, agent, dataset, config",
        description="List the run directories in DIR (or DIR itself), oldest first, read from each run's "
        "manifest.json and summary.json; a broken or unfinished run is listed with what is wrong.",
        epilog="example:\n  evalbench runs results/",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    runs.add_argument("dir", metavar="DIR", nargs="?", default="results", help="the folder of run directories (default results/)")
    runs.add_argument("--json", action="store_true", help="print the list as JSON")

    view = commands.add_parser(
        "view",
        help="write one index.html over every run in a folder, with an N-way comparison matrix",
        description="Write a self-contained index.html listing every run in DIR with a link to its report.html, and "
        "a matrix of verdicts per conversation and run, filterable by slice, each cell linking to the conversation.",
        epilog="example:\n  evalbench view results/ -o results/index.html",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    view.add_argument("dir", metavar="DIR", help="the folder of run directories")
    view.add_argument("-o", "--output", metavar="OUT", help="where index.html goes (default DIR/index.html)")

    check = commands.add_parser(
        "check",
        help="preflight: check a config's agent, virtual user, databases, gates and output directory",
        description="Make the checks `evalbench run` makes before its first item, and print one line per check. "
        "Exit 0 when all pass, 2 when the configuration is wrong, 3 when something cannot be reached.",
        epilog="example:\n  evalbench check --config configs/quickstart.yaml --fail-under exec_match=60%",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("--config", required=True, help="run config (YAML)")
    check.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a top-level config key, as for run")
    check.add_argument("--output-dir", help="where run directories would go (overrides reporting.csv.output_directory)")
    check.add_argument("--fail-under", action="append", default=[], metavar="METRIC=VALUE", help="a gate of the run: its metric must exist")
    check.add_argument("--max-regression", action="append", default=[], metavar="METRIC=DELTA",
                       help="a gate of the run: its metric must exist")
    check.add_argument("--timeout", type=float, default=5.0, metavar="S", help="bound of each network check (default 5 s)")
    _add_rescore_parser(commands)
    _add_inspect_parsers(commands)
    return parser


def _add_inspect_parsers(commands: Any) -> None:
    datasets = commands.add_parser(
        "datasets",
        help="what a config's dataset holds: items by category, difficulty, ambiguity, phase; knowledge",
        description="Count the items of the config's dataset per dialect and database (category, difficulty, "
        "ambiguity kind and type, follow-ups), its knowledge entries and, from a file of `evalbench validate "
        "--json FILE`, its empty golden results and warnings. No database is touched. See docs/inspect.md.",
        epilog="example:\n  evalbench datasets --config configs/quickstart.yaml --validation validate.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    datasets.add_argument("--config", required=True, help="run config (YAML)")
    datasets.add_argument("--validation", metavar="FILE", help="the JSON written by evalbench validate --json FILE")
    datasets.add_argument("--json", action="store_true", help="print JSON instead of tables")
    db = commands.add_parser(
        "db",
        help="the tables of a config's databases: row counts, columns and types, knowledge entries per table",
        description="Provision each database of the config's dataset as a run would (or reuse it), then list its "
        "tables with row counts, columns and types, and the knowledge entries naming each table. Read-only. "
        "See docs/inspect.md.",
        epilog="example:\n  evalbench db --config configs/quickstart.yaml --database greenleaf",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    db.add_argument("--config", required=True, help="run config (YAML)")
    db.add_argument("--database", metavar="NAME", help="only this database (NAME or DIALECT/NAME)")
    db.add_argument("--json", action="store_true", help="print JSON instead of tables")


def _add_rescore_parser(commands: Any) -> None:
    rescore = commands.add_parser(
        "rescore",
        help="score a run again (other scorers or semantics) into a new run directory, without the agent",
        description="Replay the SQL and answers recorded in RUN_DIR's journal through the pipeline with the current "
        "scorers and semantics: the golden and recorded SQL run again on the database, the agent and the virtual "
        "user are never called, RUN_DIR is only read. See docs/rescore.md.",
        epilog="example:\n  evalbench rescore results/<run_id> --set 'scorers={exec_match: {semantics: evalbench}}'",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rescore.add_argument("run_dir", metavar="RUN_DIR", help="the run directory to score again")
    rescore.add_argument("--config", help="run config (YAML) to score with (default: the config RUN_DIR recorded)")
    rescore.add_argument("--output-dir", help="where the new run directory goes (default: beside RUN_DIR)")
    rescore.add_argument("--run-id", help="name of the new run directory (default: time stamp and 'rescore')")
    rescore.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                         help="override a top-level config key (value parsed as YAML), e.g. --set 'scorers={exec_match: {}}'")
    rescore.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_gate_options(rescore)


def main(argv: Sequence[str] | None = None) -> int:
    from evalbench.core.terminal import escaping_excepthook, safe_console

    # Everything written to the terminal (output, logs, errors, usage, tracebacks) goes through one
    # filter that escapes control characters and scrubs secrets (evalbench/core/terminal.py).
    sys.excepthook = escaping_excepthook
    with safe_console():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.raw_argv = list(argv) if argv is not None else sys.argv[1:]  # what --workers passes on to its workers
    if args.command is None:
        parser.print_help()
        return EXIT_OK
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # psycopg reports a pipeline aborted by a failing agent query, which is an expected outcome
    logging.getLogger("psycopg").setLevel(logging.ERROR)
    from evalbench.core.errors import EvalbenchError

    try:
        if args.command == "run":
            return _run(args)
        if args.command == "validate":
            return _validate(args)
        if args.command == "report":
            return _report(args)
        if args.command == "merge":
            return _merge(args)
        if args.command == "compare":
            return _compare(args)
        if args.command == "explain":
            return _explain(args)
        if args.command == "check":
            return _check(args)
        if args.command == "rescore":
            return _rescore(args)
        if args.command in ("runs", "view"):
            return _runs_or_view(args)
        if args.command in ("datasets", "db"):
            return _inspect(args)
    except EvalbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("cancelled", file=sys.stderr)
        return EXIT_CANCELLED
    parser.error(f"unknown command {args.command}")
    return EXIT_CONFIG


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI job's timeout, ``kill``) cancels the run as Ctrl-C does: the conversations
    in flight are journaled as cancelled and ``--resume`` runs them again."""
    import signal

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (library use): leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _overrides(pairs: list[str]) -> dict[str, Any]:
    import yaml

    from evalbench.core.errors import ConfigError

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from evalbench.config import load_run_config
    from evalbench.run.items import Items
    from evalbench.run.parts import RunParts
    from evalbench.run.plan import RunPlan

    _check_executor(args)
    overrides = _overrides(args.set)
    if args.run_id:
        overrides["run_id"] = args.run_id
    if args.output_dir:
        overrides["reporting"] = {"csv": {"output_directory": str(Path(args.output_dir).resolve())}}
    overrides |= _subset_overrides(args)
    plan = RunPlan.resolve(load_run_config(args.config, **overrides))
    thresholds = _thresholds(args)  # bad gate options fail before the run, not after
    items = Items(plan.items)  # the dataset is scanned once: preflight, worker sizing and the run share it
    with RunParts(plan, items) as parts:  # built once: preflight probes the agent and virtual user the run uses
        code = _preflight(args, plan, items, parts, thresholds)
        if code:
            return code
        from evalbench.run.parallel.sizing import auto_workers, check_workers, fit_workers

        if args.workers is None and args.executor == "local":
            args.workers = auto_workers(plan, items, args.shard, Path(args.resume) if args.resume else None)
        check_workers(1 if args.workers is None else args.workers, args.shard)
        if not args.resume and args.workers is not None:
            args.workers = fit_workers(plan, items, args.workers)
        if args.executor == "ray" or (args.workers or 1) > 1:
            parts.close()  # each worker builds its own
            return _run_workers(args, plan, items, thresholds)
        return _run_here(args, plan, items, parts, thresholds)


def _run_here(args: argparse.Namespace, plan: RunPlan, items: Items, parts: RunParts, thresholds: Any) -> int:
    """The run in this process, on the items and parts preflight read and built."""
    from pathlib import Path

    from evalbench.results.render.console import print_summary
    from evalbench.run.orchestrator import run

    with _sigterm_as_interrupt():
        result = run(plan, items=items, parts=parts, strict=args.strict, progress=not args.no_progress,
                     resume=Path(args.resume) if args.resume else None, retry_errors=args.retry_errors,
                     agent_down_after=args.agent_down_after, reports=not args.journal_only)
    print_summary(result.summary, result.run_dir, sys.stdout)
    if args.journal_only:  # a shard of --workers or a Ray task: the parent judges the whole run
        return EXIT_CANCELLED if result.cancelled else EXIT_OK
    return _verdict(args, result.summary, result.run_dir, thresholds, cancelled=result.cancelled)


def _check_executor(args: argparse.Namespace) -> None:
    from evalbench.core.errors import ConfigError

    if args.ray_address and args.executor != "ray":
        raise ConfigError("--ray-address needs --executor ray")
    if args.executor == "ray" and args.shard:
        raise ConfigError("--executor ray and --shard: Ray runs every shard of the run; --shard is one shard of a split")


def _run_workers(args: argparse.Namespace, plan: RunPlan, items: Items, thresholds: Any) -> int:
    """``run --workers N``: the shards as processes, merged into the run directory (evalbench.run.parallel.processes),
    or as Ray tasks (``--executor ray``, evalbench.run.parallel.ray)."""
    from pathlib import Path

    from evalbench.results.render.console import print_summary
    from evalbench.run.lock import hold_run_lock
    from evalbench.run.orchestrator import new_run_directory
    from evalbench.run.parallel.processes import run_workers

    how = "--executor ray" if args.executor == "ray" else f"--workers {args.workers}"
    run_dir = Path(args.resume) if args.resume else new_run_directory(plan.output, plan.identity, how)
    raw = args.raw_argv
    argv = raw[raw.index("run") + 1:]
    # held while this process or any worker lives (the workers inherit it): see evalbench.run.lock
    with _sigterm_as_interrupt(), hold_run_lock(run_dir, "resuming it" if args.resume else "starting a run there") as lock:
        if args.executor == "ray":
            from evalbench.run.parallel.ray import run_ray
            from evalbench.run.parallel.sizing import shard_cap

            code, summary = run_ray(argv, run_dir, shards=args.workers, address=args.ray_address, resume=bool(args.resume),
                                    retry_errors=args.retry_errors, max_shards=None if args.resume else shard_cap(plan, items))
        else:
            code, summary = run_workers(argv, run_dir, args.workers, resume=bool(args.resume), progress=not args.no_progress,
                                        lock=lock)
    if summary is None:
        return code
    print_summary(summary, run_dir, sys.stdout)
    return _verdict(args, summary, run_dir, thresholds, cancelled=bool(summary.get("cancelled")))


def _subset_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Config overrides from --item-ids/--sample/--limit/--trials (validated like the config's keys)."""
    from pathlib import Path

    from evalbench.core.errors import ConfigError

    out: dict[str, Any] = {}
    subset: dict[str, Any] = {}
    if args.item_ids:
        ids: list[str] = []
        for value in args.item_ids:
            if not value.startswith("@"):
                ids.append(value)
                continue
            try:
                lines = Path(value[1:]).read_text(encoding="utf-8-sig").splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"--item-ids {value}: cannot read the file: {exc}") from None
            ids += [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
        if not ids:
            raise ConfigError("--item-ids: no item id given")
        subset["item_ids"] = ids
    for key in ("sample", "limit", "shard"):
        if getattr(args, key) is not None:
            subset[key] = getattr(args, key)
    if subset:
        out["subset"] = subset
    if args.trials is not None:
        out["trials"] = args.trials
    return out


def _thresholds(args: argparse.Namespace) -> tuple[list[Any], list[Any], dict[str, Any] | None]:
    import os
    from pathlib import Path

    from evalbench.core.errors import ConfigError
    from evalbench.results.gates import parse_threshold

    fail_under = [parse_threshold(t, "--fail-under") for t in args.fail_under]
    max_regression = [parse_threshold(t, "--max-regression") for t in args.max_regression]
    baseline = None
    if max_regression and not args.baseline:
        raise ConfigError("--max-regression needs --baseline RUN_DIR")
    if args.baseline:
        path = Path(args.baseline) / "summary.json"
        if not os.path.lexists(path):  # anything else there is refused, naming it, by _read_baseline
            raise ConfigError(f"--baseline {args.baseline}: no summary.json there (is it a run directory?)")
        baseline = _read_baseline(path)
        from evalbench.results.gates import check_baseline_journal

        check_baseline_journal(Path(args.baseline))  # paired by --max-regression: refused now, not after the run
    if args.max_infra_errors < 0:
        raise ConfigError("--max-infra-errors must be 0 or more")
    _confidence(args)
    return fail_under, max_regression, baseline


def _read_baseline(path: Any) -> dict[str, Any]:
    """The baseline's summary.json, checked where the gates read it: anything else (unreadable,
    not UTF-8, not JSON, not an object, a value of the wrong type) is a ConfigError naming the
    file (and its line or key), exit 2 — never a traceback."""
    import json

    from evalbench.core.errors import ConfigError, RunDirError
    from evalbench.core.json_types import json_type
    from evalbench.results.journal.safe_read import MAX_JSON_BYTES, open_run_file, too_deep

    where = str(path)
    hint = "; is --baseline a run directory written by evalbench? (`evalbench report RUN_DIR` rewrites its summary.json)"
    try:  # a regular file of the run directory, read up to a cap (a FIFO or /dev/zero would never end)
        with open_run_file(path.parent, path.name, max_bytes=MAX_JSON_BYTES) as handle:
            assert handle is not None
            raw = handle.read(MAX_JSON_BYTES + 1)
    except RunDirError as exc:
        raise ConfigError(f"--baseline: {exc.message}", file=where) from None
    except OSError as exc:
        raise ConfigError(f"--baseline: cannot read the file: {exc.strerror or exc}", file=where) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--baseline: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}){hint}",
                          file=where) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--baseline: not valid JSON (column {exc.colno}: {exc.msg}){hint}",
                          file=where, line=exc.lineno) from None
    except RecursionError:
        raise ConfigError(f"--baseline: not valid JSON (nested too deeply){hint}", file=where) from None
    if too_deep(data):
        raise ConfigError(f"--baseline: not valid JSON (nested too deeply){hint}", file=where)
    if not isinstance(data, dict):
        raise ConfigError(f"--baseline: expected a JSON object (a run summary), got {json_type(data)}{hint}", file=where)
    _check_baseline_shape(data, where)
    return data


def _check_baseline_shape(data: dict[str, Any], where: str) -> None:
    """The keys of a summary the gates and the scoring check read must have their types."""
    import math
    from typing import NoReturn

    from evalbench.core.errors import ConfigError
    from evalbench.core.json_types import json_type

    def fail(key: str, expected: str, value: Any) -> NoReturn:
        raise ConfigError(f"--baseline: expected {expected}, got {json_type(value)}", file=where, key=key)

    def mapping(value: Any, key: str, *, null: bool = True) -> dict[str, Any]:
        if value is None and null:
            return {}
        if not isinstance(value, dict):
            fail(key, "an object" + (" or null" if null else ""), value)
        return value

    def number(holder: dict[str, Any], name: str, key: str) -> None:
        value = holder.get(name)
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            fail(f"{key}.{name}", "a finite number or null", value)

    mapping(data.get("scoring"), "scoring")
    for phase, entry in mapping(data.get("success"), "success").items():
        number(mapping(entry, f"success.{phase}"), "rate", f"success.{phase}")
    for scorer, phases in mapping(data.get("scorers"), "scorers").items():
        for phase, tally in mapping(phases, f"scorers.{scorer}", null=False).items():
            tally = mapping(tally, f"scorers.{scorer}.{phase}")
            number(tally, "rate", f"scorers.{scorer}.{phase}")
            number(tally, "mean", f"scorers.{scorer}.{phase}")
    number(mapping(data.get("conversation"), "conversation"), "mean_reward", "conversation")
    completeness = mapping(data.get("completeness"), "completeness")
    reasons = completeness.get("reasons")
    if reasons is not None and (not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons)):
        fail("completeness.reasons", "an array of strings or null", reasons)


def _verdict(args: argparse.Namespace, summary: dict[str, Any], run_dir: Any, thresholds: Any, *, cancelled: bool) -> int:
    """Check the gates, record them in summary.md and pick the exit code."""
    from pathlib import Path

    from evalbench.results.gates import check_gates
    from evalbench.results.journal.files import write_atomic
    from evalbench.results.render.summary_md import incomplete_note, render_summary_markdown

    fail_under, max_regression, baseline = thresholds
    incomplete = incomplete_note(summary)
    if incomplete:  # the gates below fail on it, unless --allow-incomplete
        print(f"  {incomplete}")
    if baseline is not None and not args.force:
        from evalbench.results.summary.comparison import scoring_differences

        differences = scoring_differences(baseline.get("scoring"), summary.get("scoring"))
        if differences:
            print(f"error: --baseline {args.baseline} decides its verdicts otherwise than this run "
                  f"({'; '.join(differences)}); use --force to compare anyway", file=sys.stderr)
            return EXIT_CONFIG
    gates = check_gates(summary, fail_under, max_regression, baseline,
                        allow_incomplete=getattr(args, "allow_incomplete", False), run_dir=Path(run_dir),
                        baseline_dir=Path(args.baseline) if args.baseline else None,
                        confidence=_confidence(args))
    if gates:
        write_atomic(run_dir / "summary.md", render_summary_markdown(summary, gates))
        for gate in gates:
            print(f"  gate {gate.name}: {'pass' if gate.passed else 'FAIL'} ({gate.message})")
    if cancelled:
        print(f"cancelled: resume with --resume {run_dir}", file=sys.stderr)
        return EXIT_CANCELLED
    invalid = (summary.get("invalid_items") or {}).get("count", 0)
    if invalid and getattr(args, "strict", False):
        print(f"error: {invalid} invalid item(s) (--strict): their golden SQL cannot judge an answer "
              "(see summary.json: invalid_items, or evalbench validate)", file=sys.stderr)
        return EXIT_CONFIG
    infra = summary.get("infra_errors", 0)
    if infra > args.max_infra_errors:
        print(f"error: {infra} conversation(s) ended in an infrastructure error (db_error, vuser_error); "
              f"--max-infra-errors is {args.max_infra_errors}", file=sys.stderr)
        return EXIT_INFRA
    return EXIT_GATE if any(not g.passed for g in gates) else EXIT_OK


def _merge(args: argparse.Namespace) -> int:
    from pathlib import Path

    from evalbench.results.merge import merge_shards
    from evalbench.results.render.console import print_summary
    from evalbench.run.lock import hold_run_lock

    run_dir = Path(args.out_dir)
    thresholds = _thresholds(args)
    with hold_run_lock(run_dir, "merging into it"):
        summary = merge_shards(run_dir, [Path(shard) for shard in args.shards], html=not args.no_html)
    print_summary(summary, run_dir, sys.stdout)
    return _verdict(args, summary, run_dir, thresholds, cancelled=False)


def _report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from evalbench.results.render.console import print_summary
    from evalbench.results.render.reports import regenerate

    run_dir = Path(args.run_dir)
    thresholds = _thresholds(args)
    summary, written = regenerate(run_dir, html=not args.no_html)
    print_summary(summary, run_dir, sys.stdout)
    print(f"  wrote {', '.join(p.name for p in written)}")
    return _verdict(args, summary, run_dir, thresholds, cancelled=False)


def _compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from evalbench.results.summary.comparison import compare_runs, render_text, write_comparison

    comparison = compare_runs(Path(args.run_a), Path(args.run_b), force=args.force, metric=args.metric)
    out_dir = Path(args.output_dir) if args.output_dir else Path(args.run_b)
    written = write_comparison(comparison, out_dir)
    print(render_text(comparison), end="")
    print(f"wrote {', '.join(str(p) for p in written)}")
    return EXIT_OK


def _rescore(args: argparse.Namespace) -> int:
    from pathlib import Path

    from evalbench.results.render.console import print_summary
    from evalbench.run.rescore import rescore

    thresholds = _thresholds(args)
    with _sigterm_as_interrupt():
        result = rescore(Path(args.run_dir), config_file=Path(args.config) if args.config else None,
                         overrides=_overrides(args.set), output_dir=Path(args.output_dir) if args.output_dir else None,
                         run_id=args.run_id, progress=not args.no_progress)
    print_summary(result.summary, result.run_dir, sys.stdout)
    return _verdict(args, result.summary, result.run_dir, thresholds, cancelled=result.cancelled)


def _explain(args: argparse.Namespace) -> int:
    import shutil
    from pathlib import Path

    from evalbench.results.render.explain import find_record, render_explanation

    width = max(60, min(shutil.get_terminal_size((100, 24)).columns, 160))
    print(render_explanation(find_record(Path(args.run_dir), args.item_id), width=width))
    return EXIT_OK


def _runs_or_view(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.command == "runs":
        from evalbench.results.render.runs_index import main_runs

        return main_runs(Path(args.dir), as_json=args.json)
    from evalbench.results.render.view import main_view

    return main_view(Path(args.dir), Path(args.output) if args.output else None)


def _inspect(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from evalbench.config import load_run_config
    from evalbench.run.items import Items
    from evalbench.run.plan import RunPlan

    plan = RunPlan.resolve(load_run_config(args.config))
    items = Items(plan.items)
    if args.command == "datasets":
        import evalbench.cli.datasets as dataset_info

        info = dataset_info.dataset_info(items, Path(args.validation) if args.validation else None)
        print(json.dumps(info.as_dict(), indent=2) if args.json else dataset_info.render_text(info))
        return EXIT_OK
    import evalbench.cli.db as db_info

    infos = db_info.db_info(plan, items, args.database)
    print(json.dumps([i.as_dict() for i in infos], indent=2) if args.json else db_info.render_text(infos))
    return EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from evalbench.config import load_run_config
    from evalbench.run.plan import RunPlan
    from evalbench.run.validate import text, validate

    plan = RunPlan.resolve(load_run_config(args.config, **_overrides(args.set)))
    with _sigterm_as_interrupt():  # as Ctrl-C: the test-case processes in flight are stopped
        report = validate(plan, test_cases=not args.no_test_cases, progress=not args.no_progress)
    for error in report.record_errors:
        print(f"record error: {error}")
    for key, problem in report.database_errors.items():
        print(f"database {key}: {problem}")
    for item, finding in report.sorted_findings():  # errors first, then warnings; item_2 before item_10
        print(f"{item.item_id} ({item.source}): {finding.level}: {text(finding)}")
    invalid = [i for i in report.invalid_ids() if i not in set(args.allow)]
    allowed = [i for i in report.invalid_ids() if i in set(args.allow)]
    print(f"{report.items} items: {len(invalid)} invalid, {len(allowed)} invalid but allowed, "
          f"{len(report.record_errors)} record errors, "
          f"{sum(1 for r in report.reports for f in r.findings if f.level == 'warning')} warnings")
    empty = report.empty_golden()
    print(f"items whose golden result is empty: {sum(empty.values())} (main {empty['main']}, follow-up {empty['follow_up']})")
    if args.json:
        Path(args.json).write_text(json.dumps(report.as_dict(), indent=2) + "\n")
    return 1 if invalid or report.record_errors else EXIT_OK


def _gates(fail_under: list[Any], max_regression: list[Any]) -> list[tuple[str, Any]]:
    return [("--fail-under", t) for t in fail_under] + [("--max-regression", t) for t in max_regression]


def _preflight(args: argparse.Namespace, plan: RunPlan, items: Items, parts: RunParts, thresholds: Any) -> int:
    """Before item 1: the gates' metric names always; unless --no-preflight, every check of
    evalbench.run.preflight. Each failure is one line on stderr; the exit code (0: go on)."""
    from pathlib import Path

    from evalbench.core.errors import ConfigError
    from evalbench.run.preflight import exit_code, preflight, validate_gates

    if args.agent_down_after < 0:
        raise ConfigError("--agent-down-after must be 0 (never) or more")
    gates = _gates(thresholds[0], thresholds[1])
    if args.no_preflight:
        try:
            validate_gates(plan, gates)
        except ConfigError as exc:
            print(f"error: preflight: gates: {exc.message}", file=sys.stderr)
            return EXIT_CONFIG
        return EXIT_OK
    checks = preflight(plan, items, parts, gates=gates, output_dir=Path(args.resume) if args.resume else None)
    for check in checks:
        if not check.ok:
            print(f"error: preflight: {check.line()}", file=sys.stderr)
        else:
            logging.getLogger("evalbench.run.preflight").info("ok: %s", check.line())  # shown with -v
    return exit_code(checks)


def _check(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from evalbench.config import load_run_config
    from evalbench.core.errors import ConfigError
    from evalbench.results.gates import parse_threshold
    from evalbench.run.items import Items
    from evalbench.run.parts import RunParts
    from evalbench.run.plan import RunPlan
    from evalbench.run.preflight import exit_code, preflight

    if not args.timeout > 0:
        raise ConfigError("--timeout must be more than 0 seconds")
    overrides = _overrides(args.set)
    if args.output_dir:
        overrides["reporting"] = {"csv": {"output_directory": str(Path(args.output_dir).resolve())}}
    plan = RunPlan.resolve(load_run_config(args.config, **overrides))
    gates = _gates([parse_threshold(t, "--fail-under") for t in args.fail_under],
                   [parse_threshold(t, "--max-regression") for t in args.max_regression])
    started = time.monotonic()
    items = Items(plan.items)
    with RunParts(plan, items) as parts:
        checks = preflight(plan, items, parts, gates=gates, timeout_s=args.timeout)
    for check in checks:
        print(f"{'ok  ' if check.ok else 'FAIL'}  {check.line()}")
    failed = [c for c in checks if not c.ok]
    elapsed = time.monotonic() - started
    if failed:
        print(f"error: {len(failed)} of {len(checks)} checks failed ({elapsed:.1f} s)", file=sys.stderr)
    else:
        print(f"all {len(checks)} checks passed ({elapsed:.1f} s)")
    return exit_code(checks)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
