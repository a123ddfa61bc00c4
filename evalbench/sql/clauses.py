"""Splitting SQL into clauses and identifiers with sqlglot (for the virtual user and audits)."""

from __future__ import annotations

from functools import lru_cache

import sqlglot
from sqlglot import expressions as exp

from evalbench.sql.statements import last_statement

_CLAUSES = ("with", "from", "from_", "joins", "where", "group", "having", "order", "limit")  # sqlglot >= 30: from_


def _parse(sql: str, dialect: str) -> exp.Expr | None:
    try:
        return sqlglot.parse_one(last_statement(sql, dialect), read=dialect)
    except sqlglot.errors.SqlglotError:
        return None


@lru_cache(maxsize=256)
def golden_clauses(sql: str, dialect: str = "postgres") -> tuple[str, ...]:
    """The top-level clauses of ``sql`` (in sqlglot's ``dialect``) as SQL text of that dialect:
    each projection, FROM, each JOIN, WHERE, ... (Cached as immutable text: parse trees are never
    shared between threads.)"""
    tree = _parse(sql, dialect)
    if tree is None:
        return (sql,)
    select = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
    if select is None:
        return (tree.sql(dialect=dialect),)
    clauses = [e.sql(dialect=dialect) for e in select.expressions]
    for key in _CLAUSES:
        value = select.args.get(key)
        if value is None:
            continue
        for part in value if isinstance(value, list) else [value]:
            clauses.append(part.sql(dialect=dialect))
    return tuple(clauses)


@lru_cache(maxsize=256)
def identifiers(sql: str, dialect: str = "postgres") -> tuple[str, ...]:
    """Column and table names used in ``sql``, longest first, without duplicates."""
    tree = _parse(sql, dialect)
    if tree is None:
        return ()
    names = {c.name for c in tree.find_all(exp.Column) if c.name} | {t.name for t in tree.find_all(exp.Table) if t.name}
    return tuple(sorted(names, key=lambda n: (-len(n), n)))
