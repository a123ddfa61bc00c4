"""Fingerprints of a database's state, for ``state_match``: did two scripts leave the database in
the same state?

A fingerprint holds, for each table it covers, the row count and an order-independent hash of
the rows' text, plus one hash of the schema (relations, column names and types, view
definitions, index and constraint definitions with their names left out, functions). A small
database is covered whole — a statement's effects may reach tables it does not name (cascades,
triggers) — a large one by the tables the statements write and the tables that reference them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import sqlglot
from sqlglot import expressions as exp

if TYPE_CHECKING:
    from evalbench.db.sandbox import WriteTransaction

Fingerprint = dict[str, tuple[int, str]]  # table (or "schema") -> (rows, hash)
SCHEMA_KEY = "schema"
WHOLE_DATABASE_ROWS = 2_000_000  # estimated rows up to which every table is fingerprinted

_USER_SCHEMAS = "n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%'"

_TABLES = f"""
SELECT format('%I.%I', n.nspname, c.relname), greatest(c.reltuples, 0)::bigint
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'm') AND {_USER_SCHEMAS}
"""

_SCHEMA = f"""
SELECT count(*), coalesce(md5(string_agg(entry, E'\\n' ORDER BY entry)), '') FROM (
  SELECT format('%s.%s %s (%s)', n.nspname, c.relname, c.relkind,
         (SELECT string_agg(format('%s %s %s %s', a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                                   pg_get_expr(d.adbin, d.adrelid)), ', ' ORDER BY a.attnum)
          FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
          WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)) AS entry
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND {_USER_SCHEMAS}
  UNION ALL
  SELECT format('view %s.%s %s', n.nspname, c.relname, pg_get_viewdef(c.oid))
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('v', 'm') AND {_USER_SCHEMAS}
  UNION ALL
  SELECT 'index ' || regexp_replace(pg_get_indexdef(i.indexrelid), '^(CREATE (UNIQUE )?INDEX )\\S+ ', '\\1')
  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {_USER_SCHEMAS}
  UNION ALL
  SELECT format('constraint %s %s', co.conrelid::regclass, pg_get_constraintdef(co.oid))
  FROM pg_constraint co JOIN pg_namespace n ON n.oid = co.connamespace WHERE {_USER_SCHEMAS}
  UNION ALL
  SELECT format('function %s.%s(%s) %s', n.nspname, p.proname, pg_get_function_arguments(p.oid), md5(p.prosrc))
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE {_USER_SCHEMAS}
) AS schema_entries
"""

_REFERENCING = """
SELECT DISTINCT format('%I.%I', n.nspname, c.relname), format('%I.%I', rn.nspname, r.relname)
FROM pg_constraint co
JOIN pg_class c ON c.oid = co.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_class r ON r.oid = co.confrelid JOIN pg_namespace rn ON rn.oid = r.relnamespace
WHERE co.contype = 'f'
"""


def written_tables(statements: Sequence[str]) -> set[str] | None:
    """Names (lower case, unqualified) of the tables the statements write or define; None when a
    statement cannot be read (then every table must be covered)."""
    tables: set[str] = set()
    for statement in statements:
        try:
            tree = sqlglot.parse_one(statement, read="postgres")
        except sqlglot.errors.SqlglotError:
            return None
        if isinstance(tree, (exp.Insert, exp.Update, exp.Delete, exp.Merge, exp.Create, exp.Drop, exp.Alter,
                             exp.TruncateTable)):
            targets = [tree.this] if not isinstance(tree, exp.TruncateTable) else list(tree.expressions)
            for target in targets:
                table = target.find(exp.Table) if target is not None and not isinstance(target, exp.Table) else target
                if table is not None and table.name:
                    tables.add(table.name.lower())
        elif isinstance(tree, exp.Command):
            return None  # something sqlglot only passes through (DO, CALL, ...): cover everything
    return tables


def fingerprint(tx: "WriteTransaction", tables: set[str] | None) -> Fingerprint:
    """The state as ``tx`` sees it: the schema hash and, per covered table, (rows, hash of the rows)."""
    known = {name: estimate for name, estimate in tx.rows(_TABLES)}
    covered = set(known) if tables is None or sum(known.values()) <= WHOLE_DATABASE_ROWS else _closure(tx, known, tables)
    count, digest = tx.rows(_SCHEMA)[0]
    state: Fingerprint = {SCHEMA_KEY: (int(count), str(digest))}
    for name in sorted(covered):
        rows, digest = tx.rows(f"SELECT count(*), coalesce(md5(string_agg(h, '' ORDER BY h)), '') "
                               f"FROM (SELECT md5(t::text) AS h FROM {name} AS t) AS hashed")[0]
        state[name] = (int(rows), str(digest))
    return state


def _closure(tx: "WriteTransaction", known: dict[str, int], tables: set[str]) -> set[str]:
    """The written tables and, transitively, the tables whose foreign keys reference them."""
    covered = {name for name in known if name.split(".")[-1].strip('"').lower() in tables}
    edges = tx.rows(_REFERENCING)
    grew = True
    while grew:
        grew = False
        for child, parent in edges:
            if parent in covered and child not in covered and child in known:
                covered.add(child)
                grew = True
    return covered


def differences(a: Fingerprint, b: Fingerprint) -> list[str]:
    """What differs between two fingerprints, for a score's detail (``a`` golden, ``b`` predicted)."""
    out = []
    for name in sorted(set(a) | set(b)):
        left, right = a.get(name), b.get(name)
        if left == right:
            continue
        if name == SCHEMA_KEY:
            out.append("the schema differs")
        elif left is None or right is None:
            out.append(f"{name} exists only {'after the predicted SQL' if left is None else 'after the golden SQL'}")
        elif left[0] != right[0]:
            out.append(f"{name}: {left[0]} rows after the golden SQL, {right[0]} after the predicted SQL")
        else:
            out.append(f"{name}: same row count ({left[0]}), different rows")
    return out
