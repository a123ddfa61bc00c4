"""``evalbench runs``: the runs in a folder, one line each."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("List the run directories in DIR (or DIR itself), oldest first, read from each run's "
                          "manifest.json and summary.json; a broken or unfinished run is listed with what is wrong.")
    parser.epilog = "example:\n  evalbench runs results/"
    parser.add_argument("dir", metavar="DIR", nargs="?", default="results", help="the folder of run directories (default results/)")
    parser.add_argument("--json", action="store_true", help="print the list as JSON")


def run(args: argparse.Namespace) -> int:
    from evalbench.results.render.runs_index import main_runs

    return main_runs(Path(args.dir), as_json=args.json)
