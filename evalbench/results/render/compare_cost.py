"""The cost part of ``evalbench compare``'s reports (terminal, compare.md, compare.html): tokens
and USD per role in run A and run B with the difference, and the paired items whose cost
changed most (:class:`~evalbench.results.summary.cost.CostComparison`)."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from evalbench.results.summary.cost import (
    COMPARE_HEADER,
    CostComparison,
    comparison_lines,
    comparison_rows,
    cost_lines,
    signed_usd,
    usd,
)


def cost_text(c: CostComparison | None) -> list[str]:
    return comparison_lines(c) if c is not None else []


def _item_rows(c: CostComparison) -> list[tuple[str, str, str, str]]:
    return [(item, usd(a), usd(b), signed_usd(round(b - a, 8))) for item, a, b in c.items]


def cost_markdown(c: CostComparison | None, cell: Callable[[str], str]) -> list[str]:
    """The Markdown section (``cell`` escapes a table cell)."""
    if c is None:
        return []
    out = ["", "### Cost of model calls", "", "| " + " | ".join(COMPARE_HEADER) + " |",
           "|---|---|---|---:|---:|---:|---:|---:|"]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in comparison_rows(c)]
    for label, cost in (("A", c.a), ("B", c.b)):
        out += [f"\n> run {label}: {cell(line)}" for line in cost_lines(cost)[1:]]
    if c.items:
        out += ["", "Items whose cost changed most:", "", "| item | A USD | B USD | B − A USD |", "|---|---:|---:|---:|"]
        out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in _item_rows(c)]
    return out


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], text_columns: int) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    num = ' class="num"'  # the counts and amounts, right-aligned
    body = "".join("<tr>" + "".join(f"<td{'' if i < text_columns else num}>{html.escape(v)}</td>"
                                    for i, v in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def cost_html(c: CostComparison | None) -> str:
    """The HTML section (escaped; no script)."""
    if c is None:
        return ""
    parts = ["<h2>Cost of model calls</h2>", _table(COMPARE_HEADER, comparison_rows(c), 3)]
    for label, cost in (("A", c.a), ("B", c.b)):
        parts += [f'<div class="warning">run {label}: {html.escape(line)}</div>' for line in cost_lines(cost)[1:]]
    if c.items:
        parts += ["<p>Items whose cost changed most:</p>", _table(("item", "A USD", "B USD", "B − A USD"), _item_rows(c), 1)]
    return "\n".join(parts)
