"""``evalbench check``: the checks ``evalbench run`` makes before its first item, one line each."""

from __future__ import annotations

import argparse
import time

from evalbench.cli.options import output_directory, overrides


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Make the checks `evalbench run` makes before its first item, and print one line per check. "
                          "Exit 0 when all pass, 2 when the configuration is wrong, 3 when something cannot be reached.")
    parser.epilog = "example:\n  evalbench check --config configs/quickstart.yaml --fail-under exec_match=60%"
    parser.add_argument("--config", required=True, help="run config (YAML)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a top-level config key, as for run")
    parser.add_argument("--output-dir", help="where run directories would go (overrides reporting.csv.output_directory)")
    parser.add_argument("--fail-under", action="append", default=[], metavar="METRIC=VALUE", help="a gate of the run: its metric must exist")
    parser.add_argument("--max-regression", action="append", default=[], metavar="METRIC=DELTA",
                        help="a gate of the run: its metric must exist")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="S", help="bound of each network check (default 5 s)")


def run(args: argparse.Namespace) -> int:
    import sys

    from evalbench.cli.verdict import gate_list
    from evalbench.config import load_run_config
    from evalbench.core.errors import ConfigError
    from evalbench.results.gates import parse_threshold
    from evalbench.run.items import Items
    from evalbench.run.parts import RunParts
    from evalbench.run.plan import RunPlan
    from evalbench.run.preflight import exit_code, preflight

    if not args.timeout > 0:
        raise ConfigError("--timeout must be more than 0 seconds")
    plan = RunPlan.resolve(load_run_config(args.config, **output_directory(overrides(args.set), args.output_dir)))
    gates = gate_list([parse_threshold(t, "--fail-under") for t in args.fail_under],
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
