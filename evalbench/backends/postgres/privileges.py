"""What each role may do in one database (see :mod:`.roles` for the roles).

A database evalbench provisions: the owner role owns what setup made (relations, routines,
types); the golden and sandbox-write roles act through it. The sandbox role gets CONNECT, USAGE
on the schemas and SELECT, nothing else, and PUBLIC loses its defaults (CONNECT and TEMPORARY on
the database, CREATE on schemas — PostgreSQL 14 and older grant CREATE on ``public``). Where the
admin is a superuser, PUBLIC also loses what lets one session act on or observe others: signal
functions, the statistics and activity views and functions (``pg_stat_*``, ``pg_statio_*``,
``pg_stat_get_*``, pg_stat_statements), the lock and snapshot views of other sessions
(``pg_locks``, ``pg_blocking_pids``, ``pg_current_snapshot``...: which tables golden SQL running
beside the agent's reads, and when others write), and the large-object makers (PostgreSQL
before 16 lets them run in a read-only transaction). These ACLs live in each database's own catalog.

A database used as it is: the sandbox and golden roles get CONNECT, USAGE and SELECT; nothing is
revoked (it is not evalbench's); :func:`evalbench.backends.postgres.roles.verify_reader` refuses
it when agent SQL could create anything there.
"""

from __future__ import annotations

import psycopg

from evalbench.backends.postgres.target import (
    GOLDEN_ROLE,
    OWNER_ROLE,
    SANDBOX_ROLE,
    SANDBOX_WRITE_ROLE,
    DatabaseTarget,
    pg_message,
)

_USER_SCHEMAS = r"nspname NOT LIKE 'pg\_%' AND nspname <> 'information_schema'"
# pg_stat_statements (an extension, in a user schema) shows every session's statements
_STATEMENT_STATS = r"relname LIKE 'pg\_stat\_statements%'"

# SELECT on every relation of the user schemas to {readers} — not on sequences: their value moves
# outside any transaction, so reading it would show another session's uncommitted inserts
_GRANT_READ = f"""
  FOR r IN SELECT nspname FROM pg_namespace WHERE {_USER_SCHEMAS} LOOP
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO {{readers}}', r.nspname);
  END LOOP;
  FOR r IN SELECT c.oid::regclass AS obj FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND {_USER_SCHEMAS} AND NOT ({_STATEMENT_STATS}) LOOP
    EXECUTE format('GRANT SELECT ON %s TO {{readers}}', r.obj);
  END LOOP;
"""

# A provisioned database. Relations owned through a column (serial, identity) follow their table.
_PROVISIONED = f"""
REVOKE ALL ON DATABASE {{db}} FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE {{db}} TO {OWNER_ROLE};
GRANT CONNECT ON DATABASE {{db}} TO {SANDBOX_ROLE};
DO $$
DECLARE r record;
BEGIN
  FOR r IN SELECT nspname FROM pg_namespace WHERE {_USER_SCHEMAS} LOOP
    EXECUTE format('REVOKE CREATE ON SCHEMA %I FROM PUBLIC', r.nspname);
    EXECUTE format('GRANT USAGE, CREATE ON SCHEMA %I TO {OWNER_ROLE}', r.nspname);
  END LOOP;
  FOR r IN SELECT c.oid::regclass AS obj, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') AND {_USER_SCHEMAS}
             AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.classid = 'pg_class'::regclass
                             AND (d.deptype = 'e' OR (c.relkind = 'S' AND d.deptype IN ('a', 'i')))) LOOP
    EXECUTE format('ALTER %s %s OWNER TO {OWNER_ROLE}',
      CASE r.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'S' THEN 'SEQUENCE'
                     WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END, r.obj);
  END LOOP;
  FOR r IN SELECT p.oid::regprocedure AS obj FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
           WHERE {_USER_SCHEMAS} AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid
                                                 AND d.classid = 'pg_proc'::regclass AND d.deptype = 'e') LOOP
    EXECUTE format('ALTER ROUTINE %s OWNER TO {OWNER_ROLE}', r.obj);
  END LOOP;
  FOR r IN SELECT t.oid::regtype AS obj FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
           WHERE {_USER_SCHEMAS} AND t.typtype IN ('d', 'e', 'r', 'm')
             AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = t.oid AND d.classid = 'pg_type'::regclass
                             AND d.deptype IN ('e', 'i')) LOOP
    EXECUTE format('ALTER TYPE %s OWNER TO {OWNER_ROLE}', r.obj);
  END LOOP;
{_GRANT_READ.replace("{readers}", SANDBOX_ROLE)}
END $$;
"""

# Only a superuser may change the ACLs of pg_catalog's functions and views (kept per database).
_REVOKE_FROM_PUBLIC = r"""
DO $$
DECLARE r record;
BEGIN
  FOR r IN SELECT p.oid::regprocedure AS obj FROM pg_proc p
           WHERE p.pronamespace = 'pg_catalog'::regnamespace
             AND (p.proname IN ('pg_cancel_backend', 'pg_terminate_backend', 'lo_create', 'lo_creat', 'lo_from_bytea',
                                'lo_import', 'pg_lock_status', 'pg_blocking_pids', 'pg_safe_snapshot_blocking_pids',
                                'pg_isolation_test_session_is_blocked', 'pg_current_snapshot', 'txid_current_snapshot')
                  OR p.proname LIKE 'pg\_stat\_get\_%') LOOP
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', r.obj);
  END LOOP;
  FOR r IN SELECT c.oid::regclass AS obj FROM pg_class c
           WHERE c.relnamespace = 'pg_catalog'::regnamespace AND c.relkind = 'v'
             AND (c.relname LIKE 'pg\_stat\_%' OR c.relname LIKE 'pg\_statio\_%' OR c.relname = 'pg_locks') LOOP
    EXECUTE format('REVOKE ALL ON %s FROM PUBLIC', r.obj);
  END LOOP;
END $$;
"""

# pg_stat_statements' own views and functions, wherever its extension was installed (their owner may do it)
_REVOKE_STATEMENT_STATS = rf"""
DO $$
DECLARE r record;
BEGIN
  FOR r IN SELECT c.oid::regclass AS obj FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE {_USER_SCHEMAS} AND {_STATEMENT_STATS} LOOP
    EXECUTE format('REVOKE ALL ON %s FROM PUBLIC', r.obj);
  END LOOP;
  FOR r IN SELECT p.oid::regprocedure AS obj FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
           WHERE {_USER_SCHEMAS} AND p.proname LIKE 'pg\_stat\_statements%' LOOP
    EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', r.obj);
  END LOOP;
END $$;
"""

_AS_IS = f"""
GRANT CONNECT ON DATABASE {{db}} TO {SANDBOX_ROLE}, {GOLDEN_ROLE}, {SANDBOX_WRITE_ROLE};
DO $$
DECLARE r record;
BEGIN
{_GRANT_READ.replace("{readers}", f"{SANDBOX_ROLE}, {GOLDEN_ROLE}")}
END $$;
"""


def grant_provisioned(target: DatabaseTarget, superuser: bool) -> str | None:
    """The owner owns what setup made; the sandbox role reads; PUBLIC loses what it should not
    have (see the module's docstring). A warning when the admin could not revoke all of it."""
    with target.connect(autocommit=True, connect_timeout=15) as conn:
        conn.execute(_PROVISIONED.replace("{db}", _quote_ident(target.name)))
        problems = []
        for what, revoke in (("pg_stat_statements", _REVOKE_STATEMENT_STATS),
                             ("signal, statistics and large-object functions", _REVOKE_FROM_PUBLIC if superuser else "")):
            try:
                if not revoke:
                    raise psycopg.errors.InsufficientPrivilege("the admin is not a superuser")
                conn.execute(revoke)
            except psycopg.Error as exc:
                problems.append(f"{what} ({pg_message(exc)})")
    if not problems:
        return None
    return (f"could not revoke from PUBLIC in {target.name!r}: {'; '.join(problems)}: agent SQL may cancel other "
            "conversations' queries, read statistics of every session and make large objects (undone by the rollback)")


def grant_as_is(target: DatabaseTarget) -> None:
    """A database used as it is: CONNECT, USAGE and SELECT to the sandbox and golden roles."""
    with target.connect(autocommit=True, connect_timeout=15) as conn:
        conn.execute(_AS_IS.replace("{db}", _quote_ident(target.name)))


def grant_reader_group(admin: psycopg.Connection, database: str, group: str) -> None:
    """``group`` (NOLOGIN, made if missing) holds what the sandbox role holds on ``database`` and
    nothing elsewhere: CONNECT, USAGE on the schemas, SELECT on the relations (lent logins,
    :mod:`.lending`). ``admin`` is connected to ``database``."""
    ident = _quote_ident(group)
    if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (group,)).fetchone() is None:
        admin.execute(f"CREATE ROLE {ident} NOLOGIN NOINHERIT")
    admin.execute(f"GRANT CONNECT ON DATABASE {_quote_ident(database)} TO {ident}")
    admin.execute("DO $$\nDECLARE r record;\nBEGIN\n" + _GRANT_READ.replace("{readers}", ident.replace("%", "%%"))
                  + "END $$;")


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
