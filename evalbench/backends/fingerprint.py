"""The shape of a state fingerprint (``state_match``), shared by every backend.

A fingerprint maps each covered table to ``(rows, order-independent hash of the rows)`` and
:data:`SCHEMA_KEY` to ``(entries, hash of the schema)``. Each backend computes it its own way
(its ``WriteTransaction.fingerprint``); what the statements write is read here, in their dialect.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

Fingerprint = dict[str, tuple[int, str]]  # table (or "schema") -> (rows, hash)
SCHEMA_KEY = "schema"


def written_tables(statements: Sequence[str], dialect: str = "postgres") -> set[str] | None:
    """Names (lower case, unqualified) of the tables the statements write or define; None when a
    statement cannot be read (then every table must be covered)."""
    import sqlglot  # here: engine processes use this module's digests without paying for sqlglot
    from sqlglot import expressions as exp

    tables: set[str] = set()
    for statement in statements:
        try:
            tree = sqlglot.parse_one(statement, read=dialect)
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


def rows_digest(rows: Iterable[tuple[object, ...]]) -> tuple[int, str]:
    """``(count, hash)`` of rows, independent of their order (for engines with no md5 aggregate)."""
    hashes = sorted(hashlib.md5(repr(tuple(row)).encode(), usedforsecurity=False).hexdigest() for row in rows)
    return len(hashes), hashlib.md5("".join(hashes).encode(), usedforsecurity=False).hexdigest() if hashes else ""


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
