"""Aligned plain-text tables for the inspection commands (`evalbench datasets`, `evalbench db`)."""

from __future__ import annotations

from collections.abc import Sequence

from evalbench.core.terminal import escape


def table(header: Sequence[str] | None, rows: Sequence[Sequence[object]], indent: str = "  ") -> str:
    """Columns padded to their widest cell; a column of numbers right-aligned, others left-aligned."""
    # escaped before they are measured (the terminal escapes them anyway: evalbench.core.terminal)
    cells = ([[escape(str(c)) for c in header]] if header else []) + [[escape(str(c)) for c in row] for row in rows]
    if not cells:
        return ""
    width = len(cells[0])
    widths = [max(len(row[i]) for row in cells) for i in range(width)]
    numeric = [bool(rows) and all(isinstance(row[i], int) for row in rows) for i in range(width)]
    lines = []
    for row in cells:
        padded = [c.rjust(w) if numeric[i] else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append((indent + "  ".join(padded)).rstrip())
    return "\n".join(lines)


def counts(counter: dict[str, int]) -> str:
    """``a 3, b 1`` (already in the order to show)."""
    return ", ".join(f"{key} {value}" for key, value in counter.items()) or "-"
