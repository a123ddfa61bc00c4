"""`evalbench datasets`: what a run config's dataset holds, per (dialect, database) — item counts
by category, difficulty, ambiguity and phase, knowledge entries, and, from a file written by
``evalbench validate --json FILE``, empty golden results and warnings.

Everything here is counted from the items as the loader reads them (the same items a run would
see); no database is touched. Empty golden results need the golden SQL run, which is
``validate``'s job: without its file they are reported as unknown (None).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from evalbench.core.errors import DatasetError

if TYPE_CHECKING:  # imported when the command runs: `evalbench datasets --help` stays instant
    from evalbench.dataset import Item
    from evalbench.run.items import Items

UNSET = "(unset)"  # the key of items with no difficulty / a follow-up with no type


@dataclass
class GroupInfo:
    """The counts of one (dialect, database) group."""

    dialect: str
    database: str
    items: int = 0
    categories: Counter[str] = field(default_factory=Counter)
    query_types: Counter[str] = field(default_factory=Counter)
    difficulties: Counter[str] = field(default_factory=Counter)
    ambiguity_kinds: Counter[str] = field(default_factory=Counter)  # annotations, by kind
    ambiguity_types: Counter[str] = field(default_factory=Counter)  # annotations, by type (kind when untyped)
    needs_clarification: int = 0  # items with a critical or knowledge ambiguity
    follow_ups: int = 0
    follow_up_types: Counter[str] = field(default_factory=Counter)
    follow_up_categories: Counter[str] = field(default_factory=Counter)
    items_citing_knowledge: int = 0
    knowledge_ids_cited: set[int] = field(default_factory=set)
    knowledge_entries: int = 0
    empty_golden: dict[str, int] | None = None  # per phase; None: no validation file
    warnings: list[dict[str, str]] | None = None  # from the validation file; None: no file

    def add(self, item: Item) -> None:
        self.items += 1
        self.categories[item.category] += 1
        self.query_types[item.query_type] += 1
        self.difficulties[item.difficulty or UNSET] += 1
        for ambiguity in item.ambiguities:
            self.ambiguity_kinds[ambiguity.kind] += 1
            self.ambiguity_types[ambiguity.type or ambiguity.kind] += 1
        self.needs_clarification += item.needs_clarification
        if item.follow_up is not None:
            self.follow_ups += 1
            self.follow_up_types[item.follow_up.type or UNSET] += 1
            self.follow_up_categories[item.follow_up.category] += 1
        cited = _knowledge_ids(item)
        self.items_citing_knowledge += bool(cited)
        self.knowledge_ids_cited |= cited

    def as_dict(self) -> dict[str, object]:
        return {
            "dialect": self.dialect, "database": self.database, "items": self.items,
            "categories": _sorted(self.categories), "query_types": _sorted(self.query_types),
            "difficulties": _sorted(self.difficulties),
            "ambiguity_kinds": _sorted(self.ambiguity_kinds), "ambiguity_types": _sorted(self.ambiguity_types),
            "needs_clarification": self.needs_clarification,
            "phases": {"main": self.items, "follow_up": self.follow_ups},
            "follow_up_types": _sorted(self.follow_up_types), "follow_up_categories": _sorted(self.follow_up_categories),
            "knowledge": {"entries": self.knowledge_entries, "items_citing": self.items_citing_knowledge,
                          "ids_cited": len(self.knowledge_ids_cited)},
            "empty_golden": self.empty_golden, "warnings": self.warnings,
        }


@dataclass
class DatasetInfo:
    path: str
    format: str
    groups: list[GroupInfo]
    record_errors: list[str]
    filtered_out: int
    validation_file: str | None

    def as_dict(self) -> dict[str, object]:
        return {"dataset": self.path, "format": self.format, "record_errors": self.record_errors,
                "filtered_out": self.filtered_out, "validation_file": self.validation_file,
                "groups": [g.as_dict() for g in self.groups]}


def _sorted(counter: Counter[str]) -> dict[str, int]:
    return dict(sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


def _knowledge_ids(item: Item) -> set[int]:
    """The knowledge ids an item cites: its ``external_knowledge`` (main and follow-up) and its
    knowledge ambiguities' deleted entries."""
    cited = list(item.external_knowledge) + (list(item.follow_up.external_knowledge) if item.follow_up else [])
    ids = {k for k in cited if isinstance(k, int) and not isinstance(k, bool)}
    return ids | item.deleted_knowledge


def dataset_info(items: Items, validation: Path | None = None) -> DatasetInfo:
    """Counts per group of the run's dataset (its dialects and query types, no subset)."""
    dataset, scan = items.dataset, items.found
    groups = {key: GroupInfo(*key) for key in sorted(scan.groups)}
    database_of: dict[str, GroupInfo] = {}
    for item in dataset.items():
        group = groups[(item.dialect, item.database)]
        group.add(item)
        database_of[item.id] = group
    for group in groups.values():
        group.knowledge_entries = len(items.knowledge.get(group.database, {}))
    if validation is not None:
        _add_validation(validation, database_of, list(groups.values()))
    return DatasetInfo(path=str(dataset.path), format=scan.format, groups=list(groups.values()),
                       record_errors=[str(e) for e in scan.errors], filtered_out=scan.filtered_out,
                       validation_file=str(validation) if validation else None)


def _add_validation(path: Path, database_of: dict[str, GroupInfo], groups: list[GroupInfo]) -> None:
    """Empty golden results and warnings per group, from ``evalbench validate --json`` output."""
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"cannot read the validation file: {exc}", file=str(path)) from None
    findings = data.get("sorted_findings") if isinstance(data, dict) else None
    if not isinstance(findings, list):
        raise DatasetError("key 'sorted_findings' is missing: not a file of `evalbench validate --json`", file=str(path))
    for group in groups:
        group.empty_golden, group.warnings = {"main": 0, "follow_up": 0}, []
    empty: set[tuple[str, str]] = set()  # (item, phase): items are counted, not findings, as validate does
    for finding in findings:
        owner = database_of.get(str(finding.get("item_id"))) if isinstance(finding, dict) else None
        if owner is None or owner.empty_golden is None or owner.warnings is None:
            continue  # an item this dataset (or its dialects) does not hold
        message, item_id = str(finding.get("message", "")), str(finding.get("item_id"))
        for phase in ("main", "follow_up"):  # as ValidationReport.empty_golden counts them
            if message.startswith(f"{phase} golden SQL") and ": empty result" in message and (item_id, phase) not in empty:
                empty.add((item_id, phase))
                owner.empty_golden[phase] += 1
        if finding.get("level") == "warning":
            owner.warnings.append({"item_id": item_id, "message": message})


def render_text(info: DatasetInfo) -> str:
    """The human view: one aligned table of counts per group."""
    from evalbench.cli.text_table import counts, table

    lines = [f"dataset: {info.path} ({info.format})"]
    if info.record_errors:
        lines.append(f"record errors: {len(info.record_errors)} (first: {info.record_errors[0]})")
    if info.filtered_out:
        lines.append(f"left out by query_types: {info.filtered_out}")
    for group in info.groups:
        rows: list[tuple[str, object]] = [
            ("items", group.items), ("categories", counts(_sorted(group.categories))),
            ("query types", counts(_sorted(group.query_types))), ("difficulty", counts(_sorted(group.difficulties))),
            ("ambiguities by kind", counts(_sorted(group.ambiguity_kinds))),
            ("ambiguities by type", counts(_sorted(group.ambiguity_types))), ("need clarification", group.needs_clarification),
            ("follow-ups", group.follow_ups), ("follow-up types", counts(_sorted(group.follow_up_types))),
            ("knowledge entries", group.knowledge_entries), ("items citing knowledge", group.items_citing_knowledge),
            ("knowledge ids cited", len(group.knowledge_ids_cited)),
        ]
        if group.empty_golden is None or group.warnings is None:
            rows.append(("empty golden results", "unknown (run evalbench validate --json FILE, then pass --validation FILE)"))
        else:
            rows += [("empty golden (main)", group.empty_golden["main"]),
                     ("empty golden (follow-up)", group.empty_golden["follow_up"]),
                     ("validate warnings", len(group.warnings))]
        lines += ["", f"{group.dialect}/{group.database}", table(None, rows)]
        lines += [f"    warning: {w['item_id']}: {w['message']}" for w in (group.warnings or [])[:20]]
        if group.warnings and len(group.warnings) > 20:
            lines.append(f"    ... and {len(group.warnings) - 20} more warnings (all in --json)")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``evalbench datasets``."""
    parser.description = ("Count the items of the config's dataset per dialect and database (category, difficulty, "
                          "ambiguity kind and type, follow-ups), its knowledge entries and, from a file of `evalbench "
                          "validate --json FILE`, its empty golden results and warnings. No database is touched. "
                          "See docs/inspect.md.")
    parser.epilog = "example:\n  evalbench datasets --config configs/quickstart.yaml --validation validate.json"
    parser.add_argument("--config", required=True, help="run config (YAML)")
    parser.add_argument("--validation", metavar="FILE", help="the JSON written by evalbench validate --json FILE")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def run(args: argparse.Namespace) -> int:
    """``evalbench datasets``: the counts as tables, or as JSON."""
    from evalbench.config import load_run_config
    from evalbench.run.items import Items
    from evalbench.run.plan import RunPlan

    items = Items(RunPlan.resolve(load_run_config(args.config)).items)
    info = dataset_info(items, Path(args.validation) if args.validation else None)
    print(json.dumps(info.as_dict(), indent=2) if args.json else render_text(info))
    return 0
