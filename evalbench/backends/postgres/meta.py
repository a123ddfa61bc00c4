"""What provisioning records of each database it made, kept where no agent can reach it: a
database of its own on the server, ``evalbench_meta`` (PUBLIC may not even connect to it), one
row per evaluation database — the setup checksum, the catalog fingerprint
(:mod:`.catalog`) and the sequences as setup left them."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass

import psycopg
from psycopg import sql

from evalbench.backends.postgres.catalog import CatalogFingerprint
from evalbench.backends.postgres.serial import SequenceState
from evalbench.backends.postgres.target import DatabaseTarget

META_DATABASE = "evalbench_meta"
_LOCK = "evalbench:meta"
_TABLE = """
CREATE TABLE IF NOT EXISTS provisioned (
  database text PRIMARY KEY, checksum text NOT NULL, catalog jsonb NOT NULL, sequences jsonb NOT NULL,
  made_at timestamptz NOT NULL DEFAULT now())
"""


@dataclass(frozen=True)
class Record:
    checksum: str
    catalog: CatalogFingerprint
    sequences: SequenceState


def ensure(target: DatabaseTarget, admin: psycopg.Connection) -> None:
    """Create the meta database and its table when missing (``admin``: on the maintenance database)."""
    admin.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (_LOCK,))
    try:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (META_DATABASE,)).fetchone():
            with contextlib.suppress(psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(META_DATABASE)))
            admin.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(sql.Identifier(META_DATABASE)))
            admin.execute(sql.SQL("COMMENT ON DATABASE {} IS 'evalbench: what provisioning made of each database'")
                          .format(sql.Identifier(META_DATABASE)))
        with _connect(target) as conn:
            conn.execute(_TABLE)
    finally:
        admin.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (_LOCK,))


def read(target: DatabaseTarget) -> Record | None:
    with _connect(target) as conn:
        row = conn.execute("SELECT checksum, catalog, sequences FROM provisioned WHERE database = %s",
                           (target.name,)).fetchone()
    if row is None:
        return None
    return Record(str(row[0]), dict(row[1]), [tuple(entry) for entry in row[2]])


def write(target: DatabaseTarget, record: Record) -> None:
    with _connect(target) as conn:
        conn.execute("INSERT INTO provisioned (database, checksum, catalog, sequences) VALUES (%s, %s, %s, %s) "
                     "ON CONFLICT (database) DO UPDATE SET checksum = EXCLUDED.checksum, catalog = EXCLUDED.catalog, "
                     "sequences = EXCLUDED.sequences, made_at = now()",
                     (target.name, record.checksum, json.dumps(record.catalog), json.dumps(record.sequences, default=str)))


def forget(target: DatabaseTarget) -> None:
    with _connect(target) as conn:
        conn.execute("DELETE FROM provisioned WHERE database = %s", (target.name,))


def _connect(target: DatabaseTarget) -> psycopg.Connection:
    return target.connect(META_DATABASE, autocommit=True, connect_timeout=15)
