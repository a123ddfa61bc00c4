"""The caps on one result while it is read: rows are added one at a time (as a driver streams
them) and the result is cut at ``max_rows`` rows or ``max_bytes`` bytes, whichever comes first,
so a result is never held whole before a cap applies. Shared by every backend."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from evalbench.backends.base import ExecutionResult

MAX_ERROR_CHARS = 4000  # of an error message (an engine may quote a whole value in it)
MAX_DEPTH = 32  # levels of arrays, documents and composite values a result keeps as they are
_MAX_BATCH = 1000  # rows fetched at once while reading a cursor
_SCALAR_BYTES = 16  # numbers, dates, booleans, NULL: about what a Python object of them costs
_CONTAINERS = (list, tuple, dict)


class RowSource(Protocol):
    """What :meth:`ResultCap.read` reads: a DB-API cursor's ``fetchmany``."""

    def fetchmany(self, size: int, /) -> Sequence[Iterable[object]]: ...


def measure(value: object) -> tuple[int, int]:
    """(bytes, depth) of ``value``: what it costs to hold — the length of text and bytes, a
    constant for other scalars, the sum over the items of arrays and documents, however deep —
    and how deeply its arrays and documents nest (0 for a scalar). Iterative: SQL can build a
    JSON document or a list nested thousands of levels deep, and the harness must not recurse
    into it (nor undercount what is inside it)."""
    kind = type(value)
    if isinstance(value, (str, bytes)):  # the common cases first: this runs for every value read
        return len(value), 0
    if kind is int or kind is float or value is None:
        return _SCALAR_BYTES, 0
    if not isinstance(value, _CONTAINERS):
        return _scalar_bytes(value), 0
    size, deepest = 0, 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, depth)
            size += _SCALAR_BYTES
            stack.extend((child, depth + 1) for pair in item.items() for child in pair)
        elif isinstance(item, (list, tuple)):
            deepest = max(deepest, depth)
            size += _SCALAR_BYTES
            stack.extend((child, depth + 1) for child in item)
        else:
            size += _scalar_bytes(item)
    return size, deepest


def _scalar_bytes(value: object) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    return _SCALAR_BYTES


def value_bytes(value: object) -> int:
    return measure(value)[0]


def row_bytes(row: Iterable[object]) -> int:
    return sum(map(value_bytes, row))


def flat_text(value: object) -> str:
    """``value`` written out as JSON-like text, without recursion (for a value nested deeper than
    :data:`MAX_DEPTH`: every later step — comparing, hashing, journaling — walks values)."""
    out: list[str] = []
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Piece):
            out.append(item)
        elif isinstance(item, dict):
            stack.append(_Piece("}"))
            for index, (key, child) in enumerate(reversed(item.items())):
                stack += [child, _Piece(": "), key] + ([_Piece(", ")] if index < len(item) - 1 else [])
            stack.append(_Piece("{"))
        elif isinstance(item, (list, tuple)):
            stack.append(_Piece("]"))
            for index, child in enumerate(reversed(item)):
                stack += [child] + ([_Piece(", ")] if index < len(item) - 1 else [])
            stack.append(_Piece("["))
        else:
            out.append(repr(item) if not isinstance(item, str) else '"' + item.replace('"', '\\"') + '"')
    return "".join(out)


class _Piece(str):
    """Punctuation of :func:`flat_text` (not a value)."""


def kept_row(row: Iterable[object]) -> tuple[tuple[object, ...], int]:
    """``row`` as kept (values nested deeper than :data:`MAX_DEPTH` as :func:`flat_text`) and its size."""
    values = row if type(row) is tuple else tuple(row)
    size, flattened = 0, None
    for index, value in enumerate(values):
        cost, depth = measure(value)
        if depth > MAX_DEPTH:
            flattened = flattened or list(values)
            flattened[index] = text = flat_text(value)
            cost = len(text)
        size += cost
    return (tuple(flattened) if flattened else values), size


class ResultCap:
    """Collects the rows of one result within the caps; ``add`` says whether to read on."""

    def __init__(self, max_rows: int, max_bytes: int) -> None:
        self.max_rows, self.max_bytes = max_rows, max_bytes
        self.rows: list[tuple[object, ...]] = []
        self.bytes = 0
        self.truncated = False
        self.cut_at_bytes = False

    def add(self, row: Iterable[object]) -> bool:
        """Keep ``row`` when it fits; False (and ``truncated``) once a cap is reached: the caller
        stops reading (cancelling the rest of the result where the driver can)."""
        if len(self.rows) >= self.max_rows:
            self.truncated = True
            return False
        kept, size = kept_row(row)
        if self.bytes + size > self.max_bytes:
            self.truncated = self.cut_at_bytes = True
            return False
        self.rows.append(kept)
        self.bytes += size
        return True

    def extend(self, rows: Iterable[Iterable[object]]) -> bool:
        """``add`` each row until one does not fit; False when one did not."""
        return all(self.add(row) for row in rows)

    def read(self, cursor: RowSource) -> None:
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
