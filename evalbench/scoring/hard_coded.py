"""Hard-coded answers: SQL whose result is typed in rather than read from the database.

A query ``VALUES (3), (5)``, ``SELECT 42``, ``SELECT 'A', 3 UNION ALL SELECT 'B', 5`` or
``SELECT 42 FROM stores LIMIT 1`` returns the golden values without computing them from the data:
an agent that copied the answer from somewhere (the virtual user, a previous run) would pass a
result comparison. :func:`hard_coded` tells such SQL, read with sqlglot in the backend's dialect:

- it **reads no table of the database**: every relation it names is a CTE, an object the same
  script creates, ``VALUES``, a built-in table function (``generate_series``, ``unnest``,
  ``json_each``, ...), MySQL's ``dual``, or a system catalog (``pg_catalog``, ``information_schema``,
  ``sqlite_master``, ...); a subquery anywhere that reads a table counts as reading;
- or its **output is made of constants**: every column of the last statement's result is a
  literal, or an expression of literals and built-in functions, or a column of a CTE, subquery
  or ``VALUES`` that is itself constant (``WITH t AS (SELECT 42 AS v FROM stores) SELECT v FROM t``).
  An aggregate, a window function or a subquery in an output column is not constant.

SQL that does not parse, or holds a function sqlglot does not know (a user-defined function may
read tables), is **not** flagged: the check never guesses against the agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import sqlglot
from sqlglot import expressions as exp
from sqlglot.optimizer.scope import Scope, build_scope

# Schemas and names of system catalogs: their rows describe the database, not the dataset's data.
CATALOG_SCHEMAS = frozenset({"pg_catalog", "information_schema", "mysql", "performance_schema", "sys"})
CATALOG_PREFIXES = ("pg_", "sqlite_", "duckdb_")
NO_TABLE = frozenset({"dual"})
# Built-in set-returning functions that sqlglot parses as an anonymous call (generate_series,
# range and unnest have their own expression classes): they generate rows from their arguments.
GENERATORS = frozenset({
    "json_each", "jsonb_each", "json_each_text", "jsonb_each_text", "json_array_elements", "jsonb_array_elements",
    "json_array_elements_text", "jsonb_array_elements_text", "json_to_recordset", "jsonb_to_recordset",
    "json_populate_recordset", "jsonb_populate_recordset", "json_tree", "regexp_split_to_table", "string_to_table",
    "generate_subscripts", "regexp_matches",
})
_NOT_CONSTANT = (exp.AggFunc, exp.Window, exp.Query, exp.Star, exp.Placeholder)
READS_NO_TABLE = "reads no table of the database"  # the reason exec_match fails under evalbench
_MAX_DEPTH = 32  # nested scopes followed; a recursive CTE stops there, judged not constant


def hard_coded(statements: Sequence[str], dialect: str) -> str | None:
    """Why the SQL (one text or a script's statements, in sqlglot's ``dialect``) is a hard-coded
    answer — ``"reads no table of the database"`` or ``"selects only constants"`` — or None
    (also when it does not parse)."""
    return _hard_coded(tuple(statements), dialect)


@lru_cache(maxsize=1024)
def _hard_coded(statements: tuple[str, ...], dialect: str) -> str | None:
    trees: list[exp.Expression] = []
    try:
        for text in statements:
            trees.extend(tree for tree in sqlglot.parse(text, read=dialect) if isinstance(tree, exp.Expression))
    except sqlglot.errors.SqlglotError:
        return None
    nodes = [node for tree in trees for node in tree.walk()]
    if not trees or any(isinstance(node, exp.Command) or _unknown_function(node) for node in nodes):
        return None  # a statement sqlglot only tokenised, or a function it does not know: never guessed
    created = {_created(tree) for tree in trees if isinstance(tree, exp.Create)}
    if not any(_reads_table(tree, created) for tree in trees):
        return READS_NO_TABLE
    last = trees[-1]
    if isinstance(last, exp.Query) and all(_constant_outputs(build_scope(last), 0)):
        return "selects only constants"
    return None


# --------------------------------------------------------------------------- reading tables


def _created(tree: exp.Create) -> str:
    target = tree.this
    if isinstance(target, exp.Schema):
        target = target.this
    return target.name.lower() if isinstance(target, exp.Table) else ""


def _reads_table(tree: exp.Expression, created: set[str]) -> bool:
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    target = _created(tree) if isinstance(tree, exp.Create) else None
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            continue  # a table function (its arguments are walked on their own) or ROWS FROM
        name = table.name.lower()
        if name == target or name in NO_TABLE or _catalog(table):
            continue
        if not table.args.get("db") and (name in ctes or name in created):
            continue
        return True
    return False


def _catalog(table: exp.Table) -> bool:
    schema = table.db.lower()
    return schema in CATALOG_SCHEMAS or table.name.lower().startswith(CATALOG_PREFIXES)


def _unknown_function(node: object) -> bool:
    """A call sqlglot does not know: perhaps a function of the database that reads its tables."""
    return isinstance(node, exp.Anonymous) and node.name.lower() not in GENERATORS


# --------------------------------------------------------------------------- constant outputs


def _constant_outputs(scope: Scope | None, depth: int) -> list[bool]:
    """For each output column of the scope's query, whether it is a constant."""
    if scope is None or depth > _MAX_DEPTH:
        return [False]
    query = scope.expression
    if isinstance(query, exp.SetOperation):
        sides = [_constant_outputs(side, depth + 1) for side in _set_operands(scope)]
        if not sides:
            return [False]
        return [all(side[i] if i < len(side) else False for side in sides) for i in range(len(sides[0]))]
    if isinstance(query, (exp.Values, exp.Unnest)):
        return [_constant(query, scope, depth)]
    if not isinstance(query, exp.Select) or not query.expressions:
        return [False]
    if any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and e.is_star) for e in query.expressions):
        return [all(all(_source_outputs(source, depth)[1]) for source in scope.sources.values())]
    return [_constant(e, scope, depth) for e in query.expressions]


def _constant(node: exp.Expression, scope: Scope, depth: int) -> bool:
    if isinstance(node, (exp.Unnest, exp.Values)):  # a whole derived table: its cells
        return not any(isinstance(n, (*_NOT_CONSTANT, exp.Column)) for n in node.walk() if n is not node)
    for part in node.walk():
        if isinstance(part, _NOT_CONSTANT):
            return False
        if isinstance(part, exp.Column) and not _constant_column(part, scope, depth):
            return False
    return True


def _constant_column(column: exp.Column, scope: Scope, depth: int) -> bool:
    if column.table:
        source = scope.sources.get(column.table)
    elif len(scope.sources) == 1:
        source = next(iter(scope.sources.values()))
    else:
        return False  # which source it names is not known without the schema
    if source is None:
        return False
    names, constants = _source_outputs(source, depth)
    if column.name.lower() in names:
        return constants[names.index(column.name.lower())]
    return bool(constants) and all(constants) and not names  # a source whose columns are unnamed but all constant


def _source_outputs(source: Scope | exp.Table, depth: int) -> tuple[list[str], list[bool]]:
    """A source's output column names (lower case; [] when not known) and whether each is constant."""
    if isinstance(source, exp.Table):  # a table function generates its rows from its arguments; a table is data
        return [], [not isinstance(source.this, exp.Identifier)]
    constants = _constant_outputs(source, depth + 1)
    query = source.expression
    if isinstance(query, exp.Select):
        names = [e.alias_or_name.lower() for e in query.expressions]
    else:
        alias = query.args.get("alias")
        names = [c.name.lower() for c in alias.columns] if isinstance(alias, exp.TableAlias) else []
        if isinstance(alias, exp.TableAlias) and not alias.columns and alias.name:
            names = [alias.name.lower()]  # unnest(...) AS u: the column is u
    if len(names) == len(constants):
        return names, constants
    return ([], [all(constants)]) if len(constants) == 1 else ([], constants)


def _set_operands(scope: Scope) -> list[Scope]:
    """The two sides of a UNION / INTERSECT / EXCEPT (sqlglot < 26 called them union_scopes)."""
    return list(getattr(scope, "set_operation_scopes", None) or getattr(scope, "union_scopes", None) or [])
