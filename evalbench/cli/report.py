"""``evalbench report``: recompute a run directory's reports from its journal, and check the gates again."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evalbench.cli.options import add_gate_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Recompute summary.json, summary.md, the CSVs, junit.xml and report.html of a run directory "
                          "from its journal alone; the gates may be checked again.")
    parser.epilog = "example:\n  evalbench report results/<run_id> --fail-under exec_match=60%"
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--no-html", action="store_true", help="skip report.html")
    add_gate_options(parser)


def run(args: argparse.Namespace) -> int:
    from evalbench.cli.verdict import thresholds, verdict
    from evalbench.results.render.console import print_summary
    from evalbench.results.render.reports import regenerate

    run_dir = Path(args.run_dir)
    limits = thresholds(args)
    summary, written = regenerate(run_dir, html=not args.no_html)
    print_summary(summary, run_dir, sys.stdout)
    print(f"  wrote {', '.join(p.name for p in written)}")
    return verdict(args, summary, run_dir, limits, cancelled=False)
