"""``evalbench run``: resolve the plan, scan the items and build the parts once, check them
(preflight), then run here or as shards (``--workers``, ``--executor ray``) and give the verdict."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from evalbench.cli.exit_codes import EXIT_CANCELLED, EXIT_CONFIG, EXIT_OK
from evalbench.cli.options import add_gate_options, add_subset_options, output_directory, overrides
from evalbench.cli.signals import sigterm_as_interrupt
from evalbench.core.errors import ConfigError

if TYPE_CHECKING:  # imported when the run starts: `evalbench run --help` stays instant
    from evalbench.cli.verdict import Thresholds
    from evalbench.run.items import Items
    from evalbench.run.parts import RunParts
    from evalbench.run.plan import RunPlan


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "Run an evaluation and write results/<run_id>/."
    parser.epilog = "example:\n  evalbench run --config configs/quickstart.yaml"
    parser.add_argument("--config", required=True, help="run config (YAML)")
    parser.add_argument("--strict", action="store_true",
                        help="exit 2 when a dataset record is malformed or an item is invalid (its golden SQL fails); "
                             "by default such records are reported and skipped, such items listed and kept out of every rate")
    parser.add_argument("--run-id", help="name of the run directory (default: time stamp and config name)")
    parser.add_argument("--output-dir", help="where run directories go (overrides reporting.csv.output_directory)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a top-level config key (value parsed as YAML), e.g. --set seed=7")
    parser.add_argument("--resume", metavar="RUN_DIR",
                        help="continue an interrupted run: only conversations its journal does not hold are run")
    parser.add_argument("--retry-errors", action="store_true",
                        help="with --resume: also redo the conversations that ended in agent_error, vuser_error or timeout; "
                             "the agent's URL, headers and timeouts may then differ (recorded per session in manifest.json)")
    add_subset_options(parser)
    _add_execution_options(parser)
    add_gate_options(parser)


def _add_execution_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, metavar="N",
                        help="run as N processes, each a shard of the items, merged into the run directory at the end "
                             "(default: one per core, at most one per 250 conversations; with --executor ray: one per CPU of the "
                             "cluster; with --resume: as many as the run had, each shard continued)")
    parser.add_argument("--executor", choices=("local", "ray"), default="local",
                        help="where the shards of --workers run: processes on this machine (default), or Ray tasks on a "
                             "Ray cluster (pip install 'evalbench[ray]'; see docs/scaling.md)")
    parser.add_argument("--ray-address", metavar="ADDR",
                        help="with --executor ray: the cluster to connect to, e.g. auto (this node is in it) or HEAD_IP:6379 "
                             "(default: RAY_ADDRESS, else a local Ray on this machine's CPUs)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    # a worker of --workers: the journal, manifest and scores_native.csv only (its parent builds the reports)
    parser.add_argument("--journal-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-preflight", action="store_true",
                        help="skip the checks made before item 1 (agent, virtual user, databases, output directory: "
                             "see evalbench check); gate metric names are still checked")
    parser.add_argument("--agent-down-after", type=int, default=5, metavar="N",
                        help="circuit breaker: stop the run (exit 3) when N conversations in a row could not connect "
                             "to the agent (default 5; 0: never)")


def run(args: argparse.Namespace) -> int:
    from evalbench.cli.verdict import thresholds
    from evalbench.config import load_run_config
    from evalbench.run.items import Items
    from evalbench.run.parts import RunParts
    from evalbench.run.plan import RunPlan

    _check_executor(args)
    changes = overrides(args.set)
    if args.run_id:
        changes["run_id"] = args.run_id
    changes = output_directory(changes, args.output_dir)
    changes |= _subset_overrides(args)
    plan = RunPlan.resolve(load_run_config(args.config, **changes))
    limits = thresholds(args)  # bad gate options fail before the run, not after
    items = Items(plan.items)  # the dataset is scanned once: preflight, worker sizing and the run share it
    with RunParts(plan, items) as parts:  # built once: preflight probes the agent and virtual user the run uses
        code = _preflight(args, plan, items, parts, limits)
        if code:
            return code
        _choose_workers(args, plan, items)
        if args.executor == "ray" or (args.workers or 1) > 1:
            parts.close()  # each worker builds its own
            return _run_workers(args, plan, items, limits)
        return _run_here(args, plan, items, parts, limits)


def _choose_workers(args: argparse.Namespace, plan: RunPlan, items: Items) -> None:
    """``args.workers``: as given, else as many as the machine and the run can use."""
    from evalbench.run.parallel.sizing import auto_workers, check_workers, fit_workers

    if args.workers is None and args.executor == "local":
        args.workers = auto_workers(plan, items, args.shard, Path(args.resume) if args.resume else None)
    check_workers(1 if args.workers is None else args.workers, args.shard)
    serve = plan.serve
    if serve is not None and serve.port != 0 and ((args.workers or 1) > 1 or args.executor == "ray"):
        raise ConfigError(f"serve.address {serve.address}: a fixed port is one process's; with --workers or --executor "
                          "ray use port 0 (each worker serves on a free port)", key="serve.address")
    if not args.resume and args.workers is not None:
        args.workers = fit_workers(plan, items, args.workers)


def _run_here(args: argparse.Namespace, plan: RunPlan, items: Items, parts: RunParts, limits: Thresholds) -> int:
    """The run in this process, on the items and parts preflight read and built."""
    from evalbench.cli.verdict import verdict
    from evalbench.results.render.console import print_summary
    from evalbench.run.orchestrator import run as run_plan

    with sigterm_as_interrupt():
        result = run_plan(plan, items=items, parts=parts, strict=args.strict, progress=not args.no_progress,
                          resume=Path(args.resume) if args.resume else None, retry_errors=args.retry_errors,
                          agent_down_after=args.agent_down_after, reports=not args.journal_only)
    print_summary(result.summary, result.run_dir, sys.stdout)
    if args.journal_only:  # a shard of --workers or a Ray task: the parent judges the whole run
        return EXIT_CANCELLED if result.cancelled else EXIT_OK
    return verdict(args, result.summary, result.run_dir, limits, cancelled=result.cancelled)


def _check_executor(args: argparse.Namespace) -> None:
    if args.ray_address and args.executor != "ray":
        raise ConfigError("--ray-address needs --executor ray")
    if args.executor == "ray" and args.shard:
        raise ConfigError("--executor ray and --shard: Ray runs every shard of the run; --shard is one shard of a split")


def _run_workers(args: argparse.Namespace, plan: RunPlan, items: Items, limits: Thresholds) -> int:
    """``run --workers N``: the shards as processes, merged into the run directory (evalbench.run.parallel.processes),
    or as Ray tasks (``--executor ray``, evalbench.run.parallel.ray)."""
    from evalbench.cli.verdict import verdict
    from evalbench.results.render.console import print_summary
    from evalbench.run.lock import hold_run_lock
    from evalbench.run.orchestrator import new_run_directory
    from evalbench.run.parallel.processes import run_workers

    how = "--executor ray" if args.executor == "ray" else f"--workers {args.workers}"
    run_dir = Path(args.resume) if args.resume else new_run_directory(plan.output, plan.identity, how)
    raw = args.raw_argv
    argv = raw[raw.index("run") + 1:]
    # held while this process or any worker lives (the workers inherit it): see evalbench.run.lock
    with sigterm_as_interrupt(), hold_run_lock(run_dir, "resuming it" if args.resume else "starting a run there") as lock:
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
    return verdict(args, summary, run_dir, limits, cancelled=bool(summary.get("cancelled")))


def _subset_overrides(args: argparse.Namespace) -> dict[str, object]:
    """Config overrides from --item-ids/--sample/--limit/--trials (validated like the config's keys)."""
    out: dict[str, object] = {}
    subset: dict[str, object] = {}
    if args.item_ids:
        subset["item_ids"] = _item_ids(args.item_ids)
    for key in ("sample", "limit", "shard"):
        if getattr(args, key) is not None:
            subset[key] = getattr(args, key)
    if subset:
        out["subset"] = subset
    if args.trials is not None:
        out["trials"] = args.trials
    return out


def _item_ids(values: list[str]) -> list[str]:
    """The ids of ``--item-ids``; ``@FILE`` reads them from FILE, one per line (``#`` starts a comment line)."""
    ids: list[str] = []
    for value in values:
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
    return ids


def _preflight(args: argparse.Namespace, plan: RunPlan, items: Items, parts: RunParts, limits: Thresholds) -> int:
    """Before item 1: the gates' metric names always; unless --no-preflight, every check of
    evalbench.run.preflight. Each failure is one line on stderr; the exit code (0: go on)."""
    from evalbench.cli.verdict import gate_list
    from evalbench.run.preflight import exit_code, preflight, validate_gates

    if args.agent_down_after < 0:
        raise ConfigError("--agent-down-after must be 0 (never) or more")
    gates = gate_list(limits.fail_under, limits.max_regression)
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
