"""``evalbench view``: one index.html over every run in a folder."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Write a self-contained index.html listing every run in DIR with a link to its report.html, "
                          "and a matrix of verdicts per conversation and run, filterable by slice, each cell linking to "
                          "the conversation.")
    parser.epilog = "example:\n  evalbench view results/ -o results/index.html"
    parser.add_argument("dir", metavar="DIR", help="the folder of run directories")
    parser.add_argument("-o", "--output", metavar="OUT", help="where index.html goes (default DIR/index.html)")


def run(args: argparse.Namespace) -> int:
    from evalbench.results.render.view import main_view

    return main_view(Path(args.dir), Path(args.output) if args.output else None)
