"""What running SQL gave: the one result type that crosses the backend interface.

A core type of its own (no imports of the project), so that conversations can hold results
without depending on the backend interface and, through it, on the config schema;
:mod:`evalbench.backends.base` re-exports it beside the ``Backend`` protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# How an execution failed: the SQL's fault (``sql``), the time budget (``timeout``), a statement
# kind the mode does not allow (``forbidden``), the database (``connection``), or trusted
# preprocess SQL (``preprocess``).
ErrorKind = Literal["syntax", "sql", "timeout", "forbidden", "connection", "preprocess"]


@dataclass
class ExecutionResult:
    """The outcome of running SQL. ``rows`` hold at most ``max_rows`` tuples."""

    columns: list[str] = field(default_factory=list)
    rows: list[tuple[object, ...]] = field(default_factory=list)  # cells as the driver reads them
    truncated: bool = False  # rows were left unread: the row cap, or the byte cap (``truncated_at_bytes``)
    truncated_at_bytes: bool = False
    elapsed_s: float = 0.0
    error: str | None = None
    error_kind: ErrorKind | None = None
    statements: int = 0

    @property
    def ok(self) -> bool:
        """True when the SQL ran without an error."""
        return self.error is None

    @property
    def row_count(self) -> int:
        """The rows kept (at most the row cap; see ``truncated``)."""
        return len(self.rows)
