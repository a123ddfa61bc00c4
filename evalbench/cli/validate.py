"""``evalbench validate``: run every golden SQL through the sandbox and check what needs no agent."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from evalbench.cli.exit_codes import EXIT_GATE, EXIT_OK
from evalbench.cli.options import overrides
from evalbench.cli.signals import sigterm_as_interrupt


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Run every golden SQL through the sandbox and check what needs no agent. "
                          "Exit 1 when an item is invalid (and not --allow'ed), 2 on a config error.")
    parser.epilog = "example:\n  evalbench validate --config configs/quickstart.yaml --allow greenleaf_7"
    parser.add_argument("--config", required=True, help="run config (YAML): its dataset and databases are checked")
    parser.add_argument("--allow", nargs="*", default=[], metavar="ITEM_ID", help="invalid items to accept")
    parser.add_argument("--json", metavar="FILE", help="also write the findings as JSON")
    parser.add_argument("--no-test-cases", action="store_true",
                        help="skip running the management tasks' test cases (golden SQL and a no-op statement)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a top-level config key, as for run (e.g. --set 'runners={sqlexec_runners: 8}': "
                             "items are checked on that many threads)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (none either when stderr is not a terminal)")


def run(args: argparse.Namespace) -> int:
    from evalbench.config import load_run_config
    from evalbench.run.plan import RunPlan
    from evalbench.run.validate import text, validate

    plan = RunPlan.resolve(load_run_config(args.config, **overrides(args.set)))
    with sigterm_as_interrupt():  # as Ctrl-C: the test-case processes in flight are stopped
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
    return EXIT_GATE if invalid or report.record_errors else EXIT_OK
