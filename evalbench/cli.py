"""The ``evalbench`` command: a thin shell over the library. Heavy imports happen inside the
commands so that ``evalbench --help`` stays instant.

Exit codes: 0 the run completed (validate: the dataset is valid); 1 validate found invalid items; 2 invalid config or dataset; 3 infrastructure failure (a
database could not be set up — its items are still journaled, as db_error — or the journal
could not be written); 130 cancelled (Ctrl-C).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, Sequence

EXIT_OK, EXIT_CONFIG, EXIT_INFRA, EXIT_CANCELLED = 0, 2, 3, 130

EPILOG = """examples:
  evalbench run --config configs/quickstart.yaml
  evalbench validate --config configs/quickstart.yaml
  evalbench run --config configs/quickstart.yaml --set model_config=simulated:oracle
"""


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
    run.add_argument("--strict", action="store_true", help="fail when any dataset record is invalid (default: report and skip it)")
    run.add_argument("--run-id", help="name of the run directory (default: time stamp and config name)")
    run.add_argument("--output-dir", help="where run directories go (overrides reporting.csv.output_directory)")
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a top-level config key (value parsed as YAML), e.g. --set seed=7",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bars")

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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
    from evalbench.errors import EvalbenchError

    try:
        if args.command == "run":
            return _run(args)
        if args.command == "validate":
            return _validate(args)
    except EvalbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("cancelled", file=sys.stderr)
        return EXIT_CANCELLED
    parser.error(f"unknown command {args.command}")
    return EXIT_CONFIG


def _overrides(pairs: list[str]) -> dict[str, Any]:
    import yaml

    from evalbench.errors import ConfigError

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
    from evalbench.orchestrator import run
    from evalbench.report_console import print_summary

    overrides = _overrides(args.set)
    if args.run_id:
        overrides["run_id"] = args.run_id
    if args.output_dir:
        overrides["reporting"] = {"csv": {"output_directory": str(Path(args.output_dir).resolve())}}
    config = load_run_config(args.config, **overrides)
    result = run(config, strict=args.strict, progress=not args.no_progress)
    print_summary(result.summary, result.run_dir, sys.stdout)
    if result.cancelled:
        return EXIT_CANCELLED
    if any(info.get("error") for info in result.summary.get("databases", {}).values()):
        return EXIT_INFRA  # its items are in the journal as db_error, but the run did not really happen
    return EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from evalbench.config import load_run_config
    from evalbench.validate import validate

    report = validate(load_run_config(args.config))
    for error in report.record_errors:
        print(f"record error: {error}")
    for key, error in report.database_errors.items():
        print(f"database {key}: {error}")
    for item in report.reports:
        for finding in item.findings:
            print(f"{item.item_id} ({item.source}): {finding.level}: {finding.message}")
    invalid = [i for i in report.invalid_ids() if i not in set(args.allow)]
    allowed = [i for i in report.invalid_ids() if i in set(args.allow)]
    print(f"{report.items} items: {len(invalid)} invalid, {len(allowed)} invalid but allowed, "
          f"{len(report.record_errors)} record errors, "
          f"{sum(1 for r in report.reports for f in r.findings if f.level == 'warning')} warnings")
    if args.json:
        Path(args.json).write_text(json.dumps(report.as_dict(), indent=2) + "\n")
    return 1 if invalid or report.record_errors else EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
