"""``evalbench results schema [manifest|journal|summary]``: the JSON Schema of the run record."""

from __future__ import annotations

import argparse
import json
import sys

KINDS = ("manifest", "journal", "summary")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("What a run directory holds. `schema` prints the JSON Schema of manifest.json, of one line of "
                          "conversations.jsonl (journal) or of summary.json, as evalbench writes and reads them "
                          "(docs/results_schema.md); with no KIND, the three in one object.")
    parser.epilog = "example:\n  evalbench results schema journal > journal.schema.json"
    topics = parser.add_subparsers(dest="topic", metavar="TOPIC", required=True)
    schema = topics.add_parser("schema", help="print the JSON Schema of a run record file")
    schema.add_argument("kind", nargs="?", choices=KINDS, metavar="KIND", help="manifest, journal or summary (default: all)")


def run(args: argparse.Namespace) -> int:
    from evalbench.results.schema import MODELS

    if args.kind:
        document: dict[str, object] = MODELS[args.kind].model_json_schema()
    else:
        document = {kind: MODELS[kind].model_json_schema() for kind in KINDS}
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0
