"""Comparison of execution results: the rules every execution-based scorer shares.

Written down in docs/scoring.md. In short: columns are matched by position (names are ignored);
rows are compared as an ordered list only when the item asks for order, else as a multiset, or
as a set when ``distinct`` is set; numbers are rounded to ``decimal`` places when given and
compared with a small relative tolerance otherwise; errored and truncated results never match;
two empty results match and are flagged ``both_empty``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import uuid
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Hashable, Sequence

from evalbench.dataset import Conditions
from evalbench.db.sandbox import ExecutionResult

FLOAT_DIGITS = 9  # significant digits kept when no `decimal` is given


@dataclass(frozen=True)
class Verdict:
    match: bool
    reason: str
    flags: tuple[str, ...] = ()


def normalise_value(value: Any, decimal: int = -1) -> Hashable:
    """A hashable, type-normalised form of one cell: numbers compare by value (Decimal, float
    and int alike), dates and times by ISO text, JSON by canonical text."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, (int, float, Decimal)):
        number = float(value)
        if math.isnan(number) or math.isinf(number):
            return str(number)
        if decimal >= 0:
            number = round(number, decimal)
        else:
            number = float(f"{number:.{FLOAT_DIGITS}g}")
        return 0.0 if number == 0 else number  # -0.0 == 0.0
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return f"interval:{value.total_seconds()}"
    if isinstance(value, (dict, list)):
        return "json:" + json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes:" + bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, tuple):
        return tuple(normalise_value(v, decimal) for v in value)
    return str(value)


def normalise_rows(rows: Sequence[tuple[Any, ...]], decimal: int = -1) -> list[tuple[Hashable, ...]]:
    return [tuple(normalise_value(v, decimal) for v in row) for row in rows]


def compare(generated: ExecutionResult | None, golden: ExecutionResult, conditions: Conditions, ordered: bool) -> Verdict:
    """Does ``generated`` match ``golden`` under ``conditions``?"""
    if generated is None:
        return Verdict(False, "no SQL was executed")
    if generated.error is not None:
        return Verdict(False, f"generated SQL failed: {generated.error}")
    if golden.error is not None:
        return Verdict(False, f"golden SQL failed: {golden.error}")
    if generated.truncated or golden.truncated:
        return Verdict(False, "a result was truncated at the row cap; truncated results never match")
    if not generated.rows and not golden.rows:
        return Verdict(True, "both results are empty", ("both_empty",))
    gen_width = len(generated.columns)
    gold_width = len(golden.columns)
    if gen_width != gold_width:
        return Verdict(False, f"column count differs: {gen_width} generated vs {gold_width} golden")
    gen_rows = normalise_rows(generated.rows, conditions.decimal)
    gold_rows = normalise_rows(golden.rows, conditions.decimal)
    if ordered:
        if conditions.distinct:
            gen_rows, gold_rows = _dedupe(gen_rows), _dedupe(gold_rows)
        if gen_rows == gold_rows:
            return Verdict(True, "same rows in the same order")
        if Counter(gen_rows) == Counter(gold_rows):
            return Verdict(False, "same rows, different order (order matters for this item)", ("order_only",))
        return _row_difference(gen_rows, gold_rows)
    if conditions.distinct:
        if set(gen_rows) == set(gold_rows):
            return Verdict(True, "same set of rows")
        return _row_difference(gen_rows, gold_rows)
    if Counter(gen_rows) == Counter(gold_rows):
        return Verdict(True, "same rows (order ignored)")
    return _row_difference(gen_rows, gold_rows)


def _dedupe(rows: list[tuple[Hashable, ...]]) -> list[tuple[Hashable, ...]]:
    return list(dict.fromkeys(rows))


def _row_difference(gen_rows: list[tuple[Hashable, ...]], gold_rows: list[tuple[Hashable, ...]]) -> Verdict:
    if not gen_rows:
        return Verdict(False, f"generated result is empty, golden has {len(gold_rows)} rows", ("empty_generated",))
    if len(gen_rows) != len(gold_rows):
        return Verdict(False, f"row count differs: {len(gen_rows)} generated vs {len(gold_rows)} golden", ("row_count",))
    return Verdict(False, "same row count, different values", ("values",))
