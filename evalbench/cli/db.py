"""`evalbench db`: the tables of a run config's databases — row counts, columns and types — and
the knowledge entries that mention each table.

Each database is provisioned through its backend as a run would (created or reused from its
setup) and read through its sandbox in read mode only: catalog queries and ``count(*)``
(:mod:`evalbench.backends.tables`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evalbench.core.errors import ConfigError, EvalbenchError

if TYPE_CHECKING:  # imported when the command runs: `evalbench db --help` stays instant
    from evalbench.backends.tables import TableInfo
    from evalbench.run.items import Items
    from evalbench.run.plan import RunPlan


@dataclass
class DatabaseInfo:
    dialect: str
    database: str
    tables: list[TableInfo]
    knowledge_entries: int
    knowledge_unmatched: list[int]  # entries that name no table

    def as_dict(self) -> dict[str, object]:
        return {"dialect": self.dialect, "database": self.database, "tables": [t.as_dict() for t in self.tables],
                "knowledge_entries": self.knowledge_entries, "knowledge_unmatched": self.knowledge_unmatched}


def _groups(items: Items, only: str | None) -> list[tuple[str, str]]:
    groups = sorted(items.found.groups)
    if only is None:
        return groups
    chosen = [g for g in groups if only in (g[1], f"{g[0]}/{g[1]}")]
    if not chosen:
        known = ", ".join(f"{d}/{n}" for d, n in groups) or "none"
        raise ConfigError(f"--database {only!r}: no item of the dataset uses it (databases: {known})",
                          file=items.spec.where, key="dataset_config")
    return chosen


def db_info(plan: RunPlan, items: Items, only: str | None = None) -> list[DatabaseInfo]:
    """The databases of the run's dataset (or only the one named ``NAME`` or ``DIALECT/NAME``)."""
    import evalbench.run.databases as databases
    from evalbench.backends.tables import match_knowledge, read_tables

    knowledge = items.knowledge
    out = []
    for dialect, name in _groups(items, only):
        db = databases.database(plan.databases, dialect, name)
        sandbox = db.open_sandbox(db.provision())
        try:
            tables = read_tables(sandbox)
        except EvalbenchError as exc:
            raise EvalbenchError(f"{dialect}/{name}: {exc}") from None
        finally:
            sandbox.close()
        entries = knowledge.get(name, {})
        out.append(DatabaseInfo(dialect, name, tables, len(entries), match_knowledge(tables, entries)))
    return out


def render_text(infos: list[DatabaseInfo]) -> str:
    """The human view: per database, a table of tables; then per table its columns."""
    from evalbench.cli.text_table import table

    lines: list[str] = []
    for info in infos:
        lines += [f"{info.dialect}/{info.database}: {len(info.tables)} tables, "
                  f"{sum(t.rows for t in info.tables)} rows, {info.knowledge_entries} knowledge entries", ""]
        lines.append(table(("table", "rows", "columns", "knowledge ids"),
                           [(t.name, t.rows, len(t.columns), ", ".join(map(str, t.knowledge_ids)) or "-")
                            for t in info.tables]))
        if info.knowledge_unmatched:
            shown = ", ".join(map(str, info.knowledge_unmatched[:20])) + (" ..." if len(info.knowledge_unmatched) > 20 else "")
            lines.append(f"  knowledge entries naming no table: {len(info.knowledge_unmatched)} ({shown})")
        for t in info.tables:
            lines += ["", f"  {t.name}", table(None, t.columns, indent="    ")]
        lines.append("")
    return "\n".join(lines).rstrip()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``evalbench db``."""
    parser.description = ("Provision each database of the config's dataset as a run would (or reuse it), then list its "
                          "tables with row counts, columns and types, and the knowledge entries naming each table. "
                          "Read-only. See docs/inspect.md.")
    parser.epilog = "example:\n  evalbench db --config configs/quickstart.yaml --database greenleaf"
    parser.add_argument("--config", required=True, help="run config (YAML)")
    parser.add_argument("--database", metavar="NAME", help="only this database (NAME or DIALECT/NAME)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def run(args: argparse.Namespace) -> int:
    """``evalbench db``: the tables as text, or as JSON."""
    import json

    from evalbench.config import load_run_config
    from evalbench.run.items import Items
    from evalbench.run.plan import RunPlan

    plan = RunPlan.resolve(load_run_config(args.config))
    infos = db_info(plan, Items(plan.items), args.database)
    print(json.dumps([i.as_dict() for i in infos], indent=2) if args.json else render_text(infos))
    return 0
