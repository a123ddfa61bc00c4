"""Fingerprints of a database's state, for ``state_match``: did two scripts leave the database in
the same state?

A fingerprint holds, for each table it covers, the row count and an order-independent hash of
the rows' text, plus one hash of the schema (relations, column names and types, view
definitions, index and constraint definitions with their names left out, functions). A small
database is covered whole — a statement's effects may reach tables it does not name (cascades,
triggers) — a large one by the tables the statements write and the tables that reference them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evalbench.backends.fingerprint import SCHEMA_KEY, Fingerprint

if TYPE_CHECKING:
    from evalbench.backends.base import WriteTransaction

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


def fingerprint(tx: WriteTransaction, tables: set[str] | None) -> Fingerprint:
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


def _closure(tx: WriteTransaction, known: dict[str, int], tables: set[str]) -> set[str]:
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
