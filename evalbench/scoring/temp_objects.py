"""Whether an answer to a question writes nothing but temporary objects of its own.

BIRD-Interact's evaluator runs an agent's ``pred_sqls`` on a connection of its own with full
rights, so a query answer may fill a temporary table first (``CREATE TEMP TABLE t AS ...;
SELECT ... FROM t``); agents write these. Such an answer runs in write mode here — one
transaction, always rolled back, on the sandbox's write role — so the temporary objects live only
inside it (nothing persists, no other conversation sees them). Any other write keeps the
answer in read mode, where it is refused as before.
"""

from __future__ import annotations

from functools import lru_cache

import sqlglot
from sqlglot import exp

from evalbench.sql.statements import split_statements

_READS = (exp.Query,)  # SELECT, UNION, ... (a SELECT INTO is checked apart)


def _target(statement: exp.Expression) -> str | None:
    """The table a statement creates, writes or drops (its first table: ``this``, or DROP's list)."""
    node = statement.this if isinstance(statement.this, exp.Expression) else statement
    table = node if isinstance(node, exp.Table) else node.find(exp.Table)
    return table.name.lower() if isinstance(table, exp.Table) and table.name else None


def _is_temporary(create: exp.Create) -> bool:
    properties = create.args.get("properties")
    return properties is not None and any(isinstance(p, exp.TemporaryProperty) for p in properties.expressions)


def _allowed(statement: exp.Expression, temporary: set[str]) -> bool:
    """Whether one statement reads, or writes only a temporary object (recording the ones it makes)."""
    if isinstance(statement, exp.Create):
        name = _target(statement)
        if statement.args.get("kind") in ("TABLE", "VIEW") and _is_temporary(statement) and name:
            temporary.add(name)
            return True
        return False
    if isinstance(statement, exp.Select) and statement.args.get("into") is not None:
        into = statement.args["into"]
        name = _target(into)
        if into.args.get("temporary") and name:
            temporary.add(name)
            return True
        return False
    if isinstance(statement, _READS):
        return True
    if isinstance(statement, (exp.Insert, exp.Update, exp.Delete, exp.Drop)):
        return _target(statement) in temporary
    return False


def _no_hidden_writes(statement: exp.Expression, temporary: set[str]) -> bool:
    """No data-modifying part inside (a ``WITH d AS (DELETE ...)``) writes anything but a temporary object."""
    writes = [node for node in statement.find_all(exp.Insert, exp.Update, exp.Delete, exp.Merge) if node is not statement]
    return all(_target(node) in temporary for node in writes)


@lru_cache(maxsize=1024)
def writes_only_temporary(sql: str, dialect: str = "postgres") -> bool:
    """True when ``sql`` creates a temporary table or view and writes nothing else (its other
    statements read, or write the temporary objects it made); False otherwise or unparsable."""
    temporary: set[str] = set()
    try:
        statements = [sqlglot.parse_one(text, read=dialect) for text in split_statements(sql, dialect)]
    except sqlglot.errors.SqlglotError:
        return False
    for statement in statements:
        if not (isinstance(statement, exp.Expression) and _allowed(statement, temporary)
                and _no_hidden_writes(statement, temporary)):
            return False
    return bool(temporary)
