"""``AUTO_INCREMENT`` counters and MariaDB sequences: state that rolled-back work advances
(InnoDB hands out ids outside transactions; a sequence's ``NEXTVAL`` is not undone), so a later
conversation would see other ids than an earlier one, and an agent script identical to the
golden one would fail ``state_match``. They are put back to what setup left with DDL from the
harness's admin connection (``ALTER TABLE ... AUTO_INCREMENT``, ``ALTER SEQUENCE ... RESTART``),
which commits, so only when no write of ours is open (see :class:`~.harness.Harness`).

A sequence's value is its ``next_not_cached_value``: provisioning restarts every sequence there,
so its cache is empty and any ``NEXTVAL`` shows in the table (MariaDB drops the cache at a server
restart the same way). MySQL has no sequences."""

from __future__ import annotations

from evalbench.backends.mysql.identities import execute, rows
from evalbench.backends.mysql.target import MySQLConnection, quote

Counters = dict[str, int]  # "table <name>" / "sequence <name>" -> the next value it hands out


def live_statistics(conn: MySQLConnection, mariadb: bool) -> None:
    """MySQL 8 caches information_schema.TABLES (AUTO_INCREMENT included) for a day by default."""
    if not mariadb:
        execute(conn, "SET SESSION information_schema_stats_expiry = 0")


def read(conn: MySQLConnection, database: str, only: Counters | None = None) -> Counters:
    """The counters of ``database`` (of the objects ``only`` names, when given)."""
    if only is not None and not only:
        return {}
    query = ("SELECT TABLE_NAME, TABLE_TYPE, AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
             "AND (AUTO_INCREMENT IS NOT NULL OR TABLE_TYPE = 'SEQUENCE')")
    params: list[object] = [database]
    if only is not None:
        names = sorted({key.split(" ", 1)[1] for key in only})
        query += f" AND TABLE_NAME IN ({', '.join(['%s'] * len(names))})"
        params += names
    found: Counters = {}
    for name, kind, value in rows(conn, query, params):
        if kind == "SEQUENCE":
            found[f"sequence {name}"] = int(rows(conn, f"SELECT next_not_cached_value FROM {quote(database)}.{quote(name)}")[0][0])
        else:
            found[f"table {name}"] = int(value)
    return found


def restore(conn: MySQLConnection, database: str, target: Counters) -> list[str]:
    """Put every counter of ``target`` back where it differs; the ones that were put back."""
    current = read(conn, database, target)
    restored = []
    for key, value in sorted(target.items()):
        if current.get(key, value) == value:
            continue
        kind, name = key.split(" ", 1)
        if kind == "sequence":
            execute(conn, f"ALTER SEQUENCE {quote(database)}.{quote(name)} RESTART WITH {int(value)}")
        else:  # below the largest id, InnoDB takes the largest id + 1 (nothing of ours is left)
            execute(conn, f"ALTER TABLE {quote(database)}.{quote(name)} AUTO_INCREMENT = {int(value)}")
        restored.append(key)
    return restored


def settle_sequences(conn: MySQLConnection, database: str) -> None:
    """Restart every sequence at its ``next_not_cached_value`` (its cache emptied): from then on,
    any value handed out shows in the sequence's table."""
    for key, value in read(conn, database).items():
        kind, name = key.split(" ", 1)
        if kind == "sequence":
            execute(conn, f"ALTER SEQUENCE {quote(database)}.{quote(name)} RESTART WITH {int(value)}")
