"""``evalbench explain``: one conversation turn by turn, and why it failed."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from evalbench.cli.exit_codes import EXIT_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "Print a conversation turn by turn with its results, scores and the failure diagnosis."
    parser.epilog = "example:\n  evalbench explain results/<run_id> greenleaf_7"
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("item_id", metavar="ITEM_ID")


def run(args: argparse.Namespace) -> int:
    from evalbench.results.render.explain import find_record, render_explanation

    width = max(60, min(shutil.get_terminal_size((100, 24)).columns, 160))
    print(render_explanation(find_record(Path(args.run_dir), args.item_id), width=width))
    return EXIT_OK
