"""``evalbench rescore``: score a run again into a new run directory, without the agent."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evalbench.cli.options import add_gate_options, overrides
from evalbench.cli.signals import sigterm_as_interrupt


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Replay the SQL and answers recorded in RUN_DIR's journal through the pipeline with the "
                          "current scorers and semantics: the golden and recorded SQL run again on the database, the agent "
                          "and the virtual user are never called, RUN_DIR is only read. See docs/rescore.md.")
    parser.epilog = "example:\n  evalbench rescore results/<run_id> --set 'scorers={exec_match: {semantics: evalbench}}'"
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory to score again")
    parser.add_argument("--config", help="run config (YAML) to score with (default: the config RUN_DIR recorded)")
    parser.add_argument("--output-dir", help="where the new run directory goes (default: beside RUN_DIR)")
    parser.add_argument("--run-id", help="name of the new run directory (default: time stamp and 'rescore')")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a top-level config key (value parsed as YAML), e.g. --set 'scorers={exec_match: {}}'")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_gate_options(parser)


def run(args: argparse.Namespace) -> int:
    from evalbench.cli.verdict import thresholds, verdict
    from evalbench.results.render.console import print_summary
    from evalbench.run.rescore import rescore

    limits = thresholds(args)
    with sigterm_as_interrupt():
        result = rescore(Path(args.run_dir), config_file=Path(args.config) if args.config else None,
                         overrides=overrides(args.set), output_dir=Path(args.output_dir) if args.output_dir else None,
                         run_id=args.run_id, progress=not args.no_progress)
    print_summary(result.summary, result.run_dir, sys.stdout)
    return verdict(args, result.summary, result.run_dir, limits, cancelled=result.cancelled)
