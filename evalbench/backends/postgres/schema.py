"""The schema of a database as text, for agents that are shown it in their prompt."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

_COLUMNS = """
SELECT c.table_schema, c.table_name, c.column_name, c.data_type, c.is_nullable
FROM information_schema.columns c
JOIN information_schema.tables t USING (table_schema, table_name)
WHERE c.table_schema NOT IN ('pg_catalog', 'information_schema') AND t.table_type IN ('BASE TABLE', 'VIEW')
ORDER BY c.table_schema, c.table_name, c.ordinal_position
"""

_FOREIGN_KEYS = """
SELECT conrelid::regclass::text, pg_get_constraintdef(oid)
FROM pg_constraint WHERE contype IN ('p', 'f') AND connamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
ORDER BY 1, 2
"""


def describe_schema(connect: Callable[..., psycopg.Connection]) -> str:
    """``CREATE TABLE``-like text: columns with types and nullability, keys and references
    (``connect(**psycopg kwargs)`` opens a connection as the sandbox role)."""
    with connect(autocommit=True, connect_timeout=15) as conn:
        columns = conn.execute(_COLUMNS).fetchall()
        constraints = conn.execute(_FOREIGN_KEYS).fetchall()
    tables: dict[str, list[str]] = {}
    for schema, table, column, data_type, nullable in columns:
        name = table if schema == "public" else f"{schema}.{table}"
        tables.setdefault(name, []).append(f"  {column} {data_type}{'' if nullable == 'YES' else ' NOT NULL'}")
    for table, definition in constraints:
        if table in tables:
            tables[table].append(f"  {definition}")
    return "\n\n".join(f"CREATE TABLE {name} (\n" + ",\n".join(lines) + "\n);" for name, lines in tables.items())
