"""The caps on one result while it is read: rows are added one at a time (as a driver streams
them) and the result is cut at ``max_rows`` rows or ``max_bytes`` bytes, whichever comes first,
so a result is never held whole before a cap applies. Shared by every backend."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from evalbench.backends.base import ExecutionResult

MAX_ERROR_CHARS = 4000  # of an error message (an engine may quote a whole value in it)
_MAX_BATCH = 1000  # rows fetched at once while reading a cursor
_SCALAR_BYTES = 16  # numbers, dates, booleans, NULL: about what a Python object of them costs


def value_bytes(value: Any, depth: int = 0) -> int:
    """An estimate of what ``value`` costs to hold: the length of text and bytes, a constant for
    other scalars, the sum over the items of arrays and JSON documents (depth-limited)."""
    kind = type(value)
    if kind is str or kind is bytes:  # the common cases first: this runs for every value read
        return len(value)
    if kind is int or kind is float or value is None:
        return _SCALAR_BYTES
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    if depth < 8 and isinstance(value, (list, tuple)):
        return _SCALAR_BYTES + sum(value_bytes(v, depth + 1) for v in value)
    if depth < 8 and isinstance(value, dict):
        return _SCALAR_BYTES + sum(value_bytes(k, depth + 1) + value_bytes(v, depth + 1) for k, v in value.items())
    return _SCALAR_BYTES


def row_bytes(row: Iterable[Any]) -> int:
    return sum(map(value_bytes, row))


class ResultCap:
    """Collects the rows of one result within the caps; ``add`` says whether to read on."""

    def __init__(self, max_rows: int, max_bytes: int) -> None:
        self.max_rows, self.max_bytes = max_rows, max_bytes
        self.rows: list[tuple[Any, ...]] = []
        self.bytes = 0
        self.truncated = False
        self.cut_at_bytes = False

    def add(self, row: Iterable[Any]) -> bool:
        """Keep ``row`` when it fits; False (and ``truncated``) once a cap is reached: the caller
        stops reading (cancelling the rest of the result where the driver can)."""
        if len(self.rows) >= self.max_rows:
            self.truncated = True
            return False
        kept = row if type(row) is tuple else tuple(row)
        size = row_bytes(kept)
        if self.bytes + size > self.max_bytes:
            self.truncated = self.cut_at_bytes = True
            return False
        self.rows.append(kept)
        self.bytes += size
        return True

    def extend(self, rows: Iterable[Iterable[Any]]) -> bool:
        """``add`` each row until one does not fit; False when one did not."""
        return all(self.add(row) for row in rows)

    def read(self, cursor: Any) -> None:
        """Add the rows of a DB-API ``cursor`` until a cap is reached or it has no more, fetching
        a few at a time (as many as the bytes left would hold at the size of the rows so far):
        what is fetched past a cap is at most one small batch."""
        batch = 1
        while True:
            rows = cursor.fetchmany(batch)
            if not rows or not self.extend(rows) or len(rows) < batch:
                return
            average = max(1, self.bytes // len(self.rows))
            batch = max(1, min(_MAX_BATCH, (self.max_bytes - self.bytes) // average, self.max_rows - len(self.rows) + 1))

    def fill(self, result: ExecutionResult) -> None:
        """Put the kept rows on ``result``."""
        result.rows, result.truncated = self.rows, self.truncated
        result.truncated_at_bytes = self.cut_at_bytes
