"""The tables of a database, read through its sandbox: names, columns and types, row counts,
and the knowledge entries that mention each table (``evalbench db``, the agents' discovery tools).

Knowledge entries have no table field, so an entry belongs to a table when the table's name
appears as a whole word (case-insensitive) in its name, description or definition.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from evalbench.core.errors import EvalbenchError
from evalbench.core.execution_result import ExecutionResult
from evalbench.dataset.knowledge import KnowledgeEntry

if TYPE_CHECKING:
    from evalbench.backends.base import HarnessRow


class Sandbox(Protocol):
    """What reading tables needs of a backend's sandbox (:class:`evalbench.backends.base.Sandbox`)."""

    dialect: str

    def execute(self, sql: str, *, mode: Literal["read", "write"] = "read") -> ExecutionResult: ...

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

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "rows": self.rows, "columns": [{"name": n, "type": t} for n, t in self.columns],
                "knowledge_ids": self.knowledge_ids}


def _query(sandbox: Sandbox, sql: str, what: str) -> list[HarnessRow]:
    if sandbox.dialect == "sqlite":  # its sandbox's authorizer refuses pragma_table_info: the file, read-only
        return _sqlite_rows(sandbox, sql, what)
    result = sandbox.execute(sql, mode="read")
    if result.error is not None:
        raise EvalbenchError(f"{what}: {result.error}")
    if result.truncated:
        raise EvalbenchError(f"{what}: more rows than execution.max_rows")
    return result.rows


def _sqlite_rows(sandbox: Any, sql: str, what: str) -> list[HarnessRow]:  # a ProcessSandbox (its path)
    import sqlite3

    try:
        # as_uri(): a "?" or "#" in the path is escaped, not read as the URI's query
        uri = Path(sandbox.path).resolve().as_uri() + "?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
            return conn.execute(sql).fetchall()
    except sqlite3.Error as exc:
        raise EvalbenchError(f"{what}: {exc}") from None


def quote_table(name: str, dialect: str) -> str:
    quote = "`" if dialect == "mysql" else '"'
    return ".".join(quote + part.replace(quote, quote * 2) + quote for part in name.split("."))


def read_tables(sandbox: Sandbox) -> list[TableInfo]:
    """Every base table of the sandbox's database, with its columns and its row count."""
    dialect = sandbox.dialect
    if dialect not in _COLUMNS:
        raise EvalbenchError(f"cannot list the tables of a {dialect} database")
    columns: dict[str, list[tuple[str, str]]] = {}
    for table, column, kind in _query(sandbox, _COLUMNS[dialect], "listing columns"):
        columns.setdefault(str(table), []).append((str(column), str(kind)))
    tables = []
    for name, cols in columns.items():
        (count,) = _query(sandbox, f"SELECT count(*) FROM {quote_table(name, dialect)}", f"counting rows of {name}")[0]
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
