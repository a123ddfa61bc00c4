"""``evalbench merge``: join the run directories of a run's shards into one, and check the gates."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evalbench.cli.options import add_gate_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Write OUT_DIR as the run the shards make together: one journal, one manifest (every shard's "
                          "sessions), every report recomputed. The shards must share the config and the dataset, and be "
                          "every shard of one split.")
    parser.epilog = "example:\n  evalbench merge results/full results/shard-1 results/shard-2"
    parser.add_argument("out_dir", metavar="OUT_DIR")
    parser.add_argument("shards", nargs="+", metavar="SHARD_DIR")
    parser.add_argument("--no-html", action="store_true", help="skip report.html")
    add_gate_options(parser)


def run(args: argparse.Namespace) -> int:
    from evalbench.cli.verdict import thresholds, verdict
    from evalbench.results.merge import merge_shards
    from evalbench.results.render.console import print_summary
    from evalbench.run.lock import hold_run_lock

    run_dir = Path(args.out_dir)
    limits = thresholds(args)
    with hold_run_lock(run_dir, "merging into it"):
        summary = merge_shards(run_dir, [Path(shard) for shard in args.shards], html=not args.no_html)
    print_summary(summary, run_dir, sys.stdout)
    return verdict(args, summary, run_dir, limits, cancelled=False)
