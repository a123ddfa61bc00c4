"""Options shared by several commands: the CI gates, the subsets of a run, and ``--set``."""

from __future__ import annotations

import argparse


def add_gate_options(parser: argparse.ArgumentParser) -> None:
    gates = parser.add_argument_group("CI gates (exit code 1 when one fails; see docs/ci.md)")
    gates.add_argument("--fail-under", action="append", default=[], metavar="METRIC=VALUE",
                       help="fail when METRIC (e.g. exec_match, success, exec_match.follow_up) is below VALUE (0.6 or 60%%)")
    gates.add_argument("--baseline", metavar="RUN_DIR", help="the run --max-regression compares with")
    gates.add_argument("--max-regression", action="append", default=[], metavar="METRIC=DELTA",
                       help="fail when METRIC dropped by more than DELTA (0.02 or 2%%) since --baseline")
    gates.add_argument("--regression-confidence", default="95%", metavar="LEVEL",
                       help="how sure --max-regression must be that the drop exceeds DELTA before it fails "
                            "(0.95 or 95%%, the default; items of both journals are paired)")
    gates.add_argument("--force", action="store_true",
                       help="check --max-regression against a baseline whose semantics or primary verdicts differ")
    gates.add_argument("--max-infra-errors", type=int, default=0, metavar="N",
                       help="exit 3 when more than N conversations end in db_error or vuser_error (default 0)")
    gates.add_argument("--allow-incomplete", action="store_true",
                       help="let --fail-under and --max-regression pass on an incomplete run (or baseline): one whose "
                            "journal holds fewer conversations than the dataset has items, or that did not finish")


def add_subset_options(parser: argparse.ArgumentParser) -> None:
    subset = parser.add_argument_group("subsets and repeated trials (config keys: subset, trials)")
    subset.add_argument("--item-ids", nargs="+", metavar="ID", help="only these items; @FILE reads ids from FILE, one per line")
    subset.add_argument("--sample", type=int, metavar="N", help="a random sample of N items (seeded by the run seed, stratified by category)")
    subset.add_argument("--limit", type=int, metavar="N", help="only the first N items, in dataset order")
    subset.add_argument("--shard", metavar="I/N", help="run shard I of N (whole databases per shard, else items by hash); "
                                                      "evalbench merge joins the shards' run directories")
    subset.add_argument("--trials", type=int, metavar="K",
                        help="run each item K times in independent agent sessions (pass@k, pass^k, consistency)")


def overrides(pairs: list[str]) -> dict[str, object]:
    """``--set KEY=VALUE`` pairs as config overrides (each value parsed as YAML)."""
    import yaml

    from evalbench.core.errors import ConfigError

    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def output_directory(out: dict[str, object], output_dir: str | None) -> dict[str, object]:
    """``out`` with ``--output-dir`` as the override of reporting.csv.output_directory."""
    from pathlib import Path

    if output_dir:
        out["reporting"] = {"csv": {"output_directory": str(Path(output_dir).resolve())}}
    return out
