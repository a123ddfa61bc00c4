"""A fingerprint of a database's catalog: is the database still what setup made?

Every object of the database's own catalogs that has an OID past the built-in ones — relations of
every kind, schemas, routines, types, constraints, defaults, triggers, policies, rules (view
definitions), extensions, casts, operators, collations, text search objects, publications, event
triggers, default privileges, statistics objects, and every large object — under the name
PostgreSQL gives it (``pg_identify_object``: "table public.pwned") with a digest of its catalog
row (owner and privileges included); plus every column, sequence parameters, comments,
inheritance, the database's own privileges and settings, and the privileges on built-in objects.
Left out: what changes without anyone changing the database (planner statistics, frozen xids,
file nodes) and temporary objects of live sessions. One round trip for the list of catalogs, one
for the entries: cheap enough for every reuse.
"""

from __future__ import annotations

import psycopg

CatalogFingerprint = dict[str, str]  # "table public.t" -> digest of its definition

_FIRST_USER_OID = 16384  # FirstNormalObjectId: below it, objects initdb made
_NOT_TEMP = r"coalesce({schema}, '') !~ '^pg_(toast|toast_temp_[0-9]+|temp_[0-9]+|temp)$'"

_OID_CATALOGS = """
SELECT c.relname FROM pg_class c
WHERE c.relnamespace = 'pg_catalog'::regnamespace AND c.relkind = 'r' AND NOT c.relisshared
  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'oid' AND a.attnum > 0)
ORDER BY 1
"""

# What pg_class rows hold that is the definition (not statistics, xids or file nodes).
_CLASS_ROW = """concat_ws('|', t.relname, t.relnamespace, t.reltype, t.reloftype, t.relowner, t.relam, t.reltablespace,
  t.relpersistence, t.relkind, t.relnatts, t.relchecks, t.relrowsecurity, t.relforcerowsecurity, t.relispopulated,
  t.relreplident, t.relispartition, t.relacl, t.reloptions, pg_get_expr(t.relpartbound, t.oid),
  CASE WHEN t.relkind IN ('i', 'I') THEN pg_get_indexdef(t.oid) END)"""

_OTHER_ENTRIES = f"""
SELECT format('column %I.%I.%I', n.nspname, c.relname, a.attname),
       md5(concat_ws('|', a.attnum, a.atttypid, a.atttypmod, a.attnotnull, a.atthasdef, a.attidentity, a.attgenerated,
                     a.attcollation, a.attacl, a.attoptions, a.attfdwoptions))
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE a.attnum > 0 AND NOT a.attisdropped AND c.oid >= {_FIRST_USER_OID} AND {_NOT_TEMP.format(schema="n.nspname")}
UNION ALL
SELECT format('sequence parameters %I.%I', n.nspname, c.relname), md5(s::text)
  FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE {_NOT_TEMP.format(schema="n.nspname")}
UNION ALL
SELECT format('enum label %s %L', t.enumtypid::regtype, t.enumlabel), md5(t::text) FROM pg_enum t WHERE t.oid >= {_FIRST_USER_OID}
UNION ALL
SELECT 'comments', md5(coalesce(string_agg(d::text, E'\\n' ORDER BY d.classoid, d.objoid, d.objsubid), '')) FROM pg_description d
UNION ALL
SELECT 'inheritance', md5(coalesce(string_agg(i::text, E'\\n' ORDER BY i.inhrelid, i.inhseqno), '')) FROM pg_inherits i
UNION ALL
SELECT 'database privileges and settings', md5(concat_ws('|', d.datdba, d.datacl, d.datconnlimit, d.datallowconn,
         d.dattablespace, (SELECT string_agg(s::text, ',' ORDER BY s.setrole) FROM pg_db_role_setting s
                           WHERE s.setdatabase = d.oid)))
  FROM pg_database d WHERE d.datname = current_database()
UNION ALL
SELECT 'privileges on built-in objects', md5(coalesce(string_agg(acl, E'\\n' ORDER BY acl), '')) FROM (
  SELECT format('proc %s %s', oid, proacl) AS acl FROM pg_proc WHERE oid < {_FIRST_USER_OID} AND proacl IS NOT NULL
  UNION ALL SELECT format('class %s %s', oid, relacl) FROM pg_class WHERE oid < {_FIRST_USER_OID} AND relacl IS NOT NULL
  UNION ALL SELECT format('namespace %s %s', oid, nspacl) FROM pg_namespace WHERE oid < {_FIRST_USER_OID} AND nspacl IS NOT NULL
  UNION ALL SELECT format('type %s %s', oid, typacl) FROM pg_type WHERE oid < {_FIRST_USER_OID} AND typacl IS NOT NULL
  UNION ALL SELECT format('language %s %s', oid, lanacl) FROM pg_language WHERE oid < {_FIRST_USER_OID} AND lanacl IS NOT NULL
) AS acls
"""


def _objects(catalog: str) -> str:
    """The entries of one catalog with OIDs: its user objects, named, with a digest of their row."""
    if catalog == "pg_largeobject_metadata":  # any OID may be chosen for a large object
        return ("SELECT 'large object ' || t.oid, md5(t::text) FROM pg_largeobject_metadata t")
    if catalog == "pg_enum":  # no object class of its own (see _OTHER_ENTRIES)
        return ""
    row = _CLASS_ROW if catalog == "pg_class" else "t::text"
    return (f"SELECT o.type || ' ' || o.identity, md5({row}) FROM pg_catalog.{catalog} t, "
            f"pg_identify_object('pg_catalog.{catalog}'::regclass, t.oid, 0) o "
            f"WHERE t.oid >= {_FIRST_USER_OID} AND {_NOT_TEMP.format(schema='o.schema')} "
            f"AND NOT (o.type = 'schema' AND {_NOT_TEMP.format(schema='o.identity').replace('!~', '~')})")


def catalog_fingerprint(conn: psycopg.Connection) -> CatalogFingerprint:
    """The fingerprint of the database ``conn`` is connected to (as an admin: every object)."""
    catalogs = [name for (name,) in conn.execute(_OID_CATALOGS).fetchall()]
    parts = [part for part in map(_objects, catalogs) if part] + [_OTHER_ENTRIES]
    return {str(key): str(digest)[:16] for key, digest in conn.execute("\nUNION ALL\n".join(parts)).fetchall()}


# Kinds named last in a message: they come with the objects named first (a table's row type, columns...)
_FOLLOWERS = ("type ", "column ", "default value ", "table constraint ", "index ", "sequence parameters ")


def changes(recorded: CatalogFingerprint, now: CatalogFingerprint) -> list[str]:
    """What differs, in words: "new table public.pwned", "missing ...", "changed ..."."""
    def order(key: str) -> tuple[bool, str]:
        return key.startswith(_FOLLOWERS), key

    new = [f"new {key}" for key in sorted(now.keys() - recorded.keys(), key=order)]
    missing = [f"missing {key}" for key in sorted(recorded.keys() - now.keys(), key=order)]
    changed = [f"changed {key}" for key in sorted((k for k in now.keys() & recorded.keys() if now[k] != recorded[k]), key=order)]
    return new + missing + changed


def describe_changes(found: list[str], shown: int = 6) -> str:
    more = f" (and {len(found) - shown} more)" if len(found) > shown else ""
    return ", ".join(found[:shown]) + more
