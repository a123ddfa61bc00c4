"""``evalbench compare``: two runs aligned item by item, with paired statistics."""

from __future__ import annotations

import argparse
from pathlib import Path

from evalbench.cli.exit_codes import EXIT_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Align two runs by item id, list the flips, test the difference (McNemar exact test, paired "
                          "bootstrap CI) and write compare.html and compare.md. Runs on different datasets, scorers, "
                          "semantics, primary verdicts or virtual users are refused unless --force.")
    parser.epilog = "example:\n  evalbench compare results/<baseline> results/<candidate>"
    parser.add_argument("run_a", metavar="RUN_A", help="the baseline run directory")
    parser.add_argument("run_b", metavar="RUN_B", help="the candidate run directory")
    parser.add_argument("--metric", help="the pass/fail scorer to compare (default: the phases' own verdicts)")
    parser.add_argument("--force", action="store_true", help="compare even when the runs are not comparable")
    parser.add_argument("--output-dir", metavar="DIR", help="where compare.html and compare.md go (default: RUN_B)")


def run(args: argparse.Namespace) -> int:
    from evalbench.results.summary.comparison import compare_runs, render_text, write_comparison

    comparison = compare_runs(Path(args.run_a), Path(args.run_b), force=args.force, metric=args.metric)
    out_dir = Path(args.output_dir) if args.output_dir else Path(args.run_b)
    written = write_comparison(comparison, out_dir)
    print(render_text(comparison), end="")
    print(f"wrote {', '.join(str(p) for p in written)}")
    return EXIT_OK
