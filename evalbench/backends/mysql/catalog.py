"""The catalog fingerprint of a MySQL / MariaDB database: every object of its schema (tables,
views, sequences, routines, triggers, events) and a digest of its definition, as the admin sees
it. Provisioning records it once setup is done and compares it before reusing the database, so
a database changed after setup (by anything: agent SQL cannot, a person or another tool can) is
never evaluated as if it were the one setup made."""

from __future__ import annotations

import hashlib
import re

from evalbench.backends.mysql.identities import rows
from evalbench.backends.mysql.target import MySQLConnection, quote

Catalog = dict[str, str]  # "table `items`" -> digest of its definition

_COUNTER = re.compile(r" AUTO_INCREMENT=\d+")  # the counter is state (restored), not definition
_SHOW_CREATE = {"SEQUENCE": ("sequence", "SHOW CREATE SEQUENCE")}
# (kind, query listing (name, definition...) of the schema's objects of that kind)
_DEFINED = (
    ("view", "SELECT TABLE_NAME, VIEW_DEFINITION, CHECK_OPTION, DEFINER, SECURITY_TYPE FROM information_schema.VIEWS "
             "WHERE TABLE_SCHEMA = %s"),
    ("routine", "SELECT CONCAT(ROUTINE_TYPE, ' ', ROUTINE_NAME), ROUTINE_DEFINITION, DTD_IDENTIFIER, SQL_MODE, "
                "SECURITY_TYPE, DEFINER, IS_DETERMINISTIC, SQL_DATA_ACCESS FROM information_schema.ROUTINES "
                "WHERE ROUTINE_SCHEMA = %s"),
    ("parameters of", "SELECT CONCAT(ROUTINE_TYPE, ' ', SPECIFIC_NAME), GROUP_CONCAT(CONCAT_WS(' ', ORDINAL_POSITION, "
                      "PARAMETER_MODE, PARAMETER_NAME, DTD_IDENTIFIER) ORDER BY ORDINAL_POSITION SEPARATOR ', ') "
                      "FROM information_schema.PARAMETERS WHERE SPECIFIC_SCHEMA = %s GROUP BY 1"),
    ("trigger", "SELECT TRIGGER_NAME, EVENT_MANIPULATION, EVENT_OBJECT_TABLE, ACTION_ORDER, ACTION_STATEMENT, "
                "ACTION_TIMING, SQL_MODE, DEFINER FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = %s"),
    ("event", "SELECT EVENT_NAME, EVENT_DEFINITION, EVENT_TYPE, EXECUTE_AT, INTERVAL_VALUE, INTERVAL_FIELD, "
              "ON_COMPLETION, DEFINER FROM information_schema.EVENTS WHERE EVENT_SCHEMA = %s"),
)


def fingerprint(admin: MySQLConnection, database: str) -> Catalog:
    """Every object of ``database`` and a digest of its definition (as seen from inside it: SHOW
    CREATE names objects of the current database without their schema)."""
    catalog: Catalog = {}
    admin.select_db(database)
    rows(admin, "SET SESSION group_concat_max_len = 1048576")  # the parameters of a routine in one value
    for name, kind in rows(admin, "SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                                  "AND TABLE_TYPE NOT IN ('VIEW', 'TEMPORARY')", (database,)):
        label, show = _SHOW_CREATE.get(str(kind), ("table", "SHOW CREATE TABLE"))
        definition = rows(admin, f"{show} {quote(database)}.{quote(name)}")[0][1]
        catalog[f"{label} {quote(name)}"] = _digest(_COUNTER.sub("", str(definition)))
    for label, query in _DEFINED:
        for name, *definition in rows(admin, query, (database,)):
            catalog[f"{label} {quote(str(name))}"] = _digest("\x1f".join(str(part) for part in definition))
    return catalog


def changes(recorded: Catalog, current: Catalog) -> list[str]:
    """What differs, one phrase per object (``table `x` added``...), sorted."""
    found = [f"{key} added" for key in current.keys() - recorded.keys()]
    found += [f"{key} removed" for key in recorded.keys() - current.keys()]
    found += [f"{key} changed" for key in recorded.keys() & current.keys() if recorded[key] != current[key]]
    return sorted(found)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
