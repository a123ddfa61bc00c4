"""`evalbench db`: the tables of a run config's databases — row counts, columns and types — and
the knowledge entries that mention each table.

Each database is provisioned through its backend as a run would (created or reused from its
setup) and read through its sandbox in read mode only: catalog queries and ``count(*)``.
Knowledge entries have no table field, so an entry belongs to a table when the table's name
appears as a whole word (case-insensitive) in its name, description or definition.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalbench import databases
from evalbench.backends.base import Sandbox
from evalbench.config import RunConfig
from evalbench.dataset import Dataset
from evalbench.dataset.knowledge import KnowledgeEntry, load_knowledge
from evalbench.errors import ConfigError, EvalbenchError

# (table, column, type) of every base table, in column order, per sqlglot dialect of the sandbox
_COLUMNS = {
    "postgres": "SELECT CASE WHEN c.table_schema = 'public' THEN c.table_name ELSE c.table_schema || '.' || c.table_name END, "
                "c.column_name, c.data_type FROM information_schema.columns c JOIN information_schema.tables t "
                "USING (table_schema, table_name) WHERE c.table_schema NOT IN ('pg_catalog', 'information_schema') "
                "AND t.table_type = 'BASE TABLE' ORDER BY c.table_schema, c.table_name, c.ordinal_position",
    "duckdb": "SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c JOIN "
              "information_schema.tables t USING (table_catalog, table_schema, table_name) "
              "WHERE t.table_type = 'BASE TABLE' AND c.table_schema = current_schema() "
              "ORDER BY c.table_name, c.ordinal_position",
    "mysql": "SELECT c.table_name, c.column_name, c.column_type FROM information_schema.columns c JOIN "
             "information_schema.tables t USING (table_schema, table_name) WHERE c.table_schema = DATABASE() "
             "AND t.table_type = 'BASE TABLE' ORDER BY c.table_name, c.ordinal_position",
    "sqlite": "SELECT m.name, p.name, p.type FROM sqlite_master m JOIN pragma_table_info(m.name) p "
              "WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' ORDER BY m.name, p.cid",
}


@dataclass
class TableInfo:
    name: str
    rows: int
    columns: list[tuple[str, str]]  # (name, type)
    knowledge_ids: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rows": self.rows, "columns": [{"name": n, "type": t} for n, t in self.columns],
                "knowledge_ids": self.knowledge_ids}


@dataclass
class DatabaseInfo:
    dialect: str
    database: str
    tables: list[TableInfo]
    knowledge_entries: int
    knowledge_unmatched: list[int]  # entries that name no table

    def as_dict(self) -> dict[str, Any]:
        return {"dialect": self.dialect, "database": self.database, "tables": [t.as_dict() for t in self.tables],
                "knowledge_entries": self.knowledge_entries, "knowledge_unmatched": self.knowledge_unmatched}


def _query(sandbox: Sandbox, sql: str, what: str) -> list[tuple[Any, ...]]:
    if sandbox.dialect == "sqlite":  # its sandbox's authorizer refuses pragma_table_info: the file, read-only
        return _sqlite_rows(sandbox, sql, what)
    result = sandbox.execute(sql, mode="read")
    if result.error is not None:
        raise EvalbenchError(f"{what}: {result.error}")
    if result.truncated:
        raise EvalbenchError(f"{what}: more rows than execution.max_rows")
    return result.rows


def _sqlite_rows(sandbox: Any, sql: str, what: str) -> list[tuple[Any, ...]]:
    import sqlite3

    try:
        # as_uri(): a "?" or "#" in the path is escaped, not read as the URI's query
        uri = Path(sandbox.path).resolve().as_uri() + "?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
            return conn.execute(sql).fetchall()
    except sqlite3.Error as exc:
        raise EvalbenchError(f"{what}: {exc}") from None


def _quote(name: str, dialect: str) -> str:
    quote = "`" if dialect == "mysql" else '"'
    return ".".join(quote + part.replace(quote, quote * 2) + quote for part in name.split("."))


def read_tables(sandbox: Sandbox) -> list[TableInfo]:
    """Every base table of the sandbox's database, with its columns and its row count."""
    dialect = sandbox.dialect
    if dialect not in _COLUMNS:
        raise EvalbenchError(f"evalbench db cannot list the tables of a {dialect} database")
    columns: dict[str, list[tuple[str, str]]] = {}
    for table, column, kind in _query(sandbox, _COLUMNS[dialect], "listing columns"):
        columns.setdefault(str(table), []).append((str(column), str(kind)))
    tables = []
    for name, cols in columns.items():
        (count,) = _query(sandbox, f"SELECT count(*) FROM {_quote(name, dialect)}", f"counting rows of {name}")[0]
        tables.append(TableInfo(name, int(count), cols))
    return tables


def _entry_text(entry: KnowledgeEntry) -> str:
    return " ".join((entry.name, entry.description, *entry.definition))


def match_knowledge(tables: list[TableInfo], entries: dict[int, KnowledgeEntry]) -> list[int]:
    """Fill each table's knowledge ids (whole-word, case-insensitive match of its unqualified
    name in the entry's text); returns the ids that matched no table."""
    matched: set[int] = set()
    for table in tables:
        word = re.compile(rf"(?<![\w]){re.escape(table.name.split('.')[-1])}(?![\w])", re.IGNORECASE)
        table.knowledge_ids = sorted(i for i, entry in entries.items() if word.search(_entry_text(entry)))
        matched.update(table.knowledge_ids)
    return sorted(set(entries) - matched)


def _groups(config: RunConfig, only: str | None) -> list[tuple[str, str]]:
    dataset = Dataset(config.dataset_config, config.dataset_format, config.dialects, config.query_types)
    groups = sorted(dataset.scan().groups)
    if only is None:
        return groups
    chosen = [g for g in groups if only in (g[1], f"{g[0]}/{g[1]}")]
    if not chosen:
        known = ", ".join(f"{d}/{n}" for d, n in groups) or "none"
        raise ConfigError(f"--database {only!r}: no item of the dataset uses it (databases: {known})",
                          file=str(config.source) if config.source else None, key="dataset_config")
    return chosen


def db_info(config: RunConfig, only: str | None = None) -> list[DatabaseInfo]:
    """The databases of the config's dataset (or only the one named ``NAME`` or ``DIALECT/NAME``)."""
    knowledge = load_knowledge(config.knowledge_path)
    out = []
    for dialect, name in _groups(config, only):
        db = databases.database(config, dialect, name)
        sandbox = db.open_sandbox(config, db.provision(config))
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
    from evalbench.text_table import table

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
