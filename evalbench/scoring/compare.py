"""Comparison of execution results: the rules every execution-based scorer shares.

Written down in docs/scoring.md. In short: columns are matched by position (names are ignored);
rows are compared as an ordered list only when the item asks for order, else as a multiset, or
as a set when ``distinct`` is set; integers compare exactly; other numbers are rounded to
``decimal`` places when given and compared with a relative tolerance of 1e-9 otherwise; errored and truncated results never match;
two empty results match and are flagged ``both_empty``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import uuid
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Hashable, Sequence

from evalbench.dataset import Conditions
from evalbench.db.sandbox import ExecutionResult

FLOAT_TOLERANCE = 1e-9  # relative (and absolute) tolerance for floats when no `decimal` is given


@dataclass(frozen=True)
class Verdict:
    match: bool
    reason: str
    flags: tuple[str, ...] = ()


def normalise_value(value: Any, decimal: int = -1) -> Hashable:
    """A hashable, type-normalised form of one cell: numbers compare by value (Decimal, float
    and int alike; integers exactly), rounded to ``decimal`` places when given; dates and times
    by ISO text; JSON by canonical text."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, Decimal):
        if not value.is_finite():
            return "nan" if value.is_nan() else ("inf" if value > 0 else "-inf")
        if decimal < 0:
            # NUMERIC is exact: integers as int, others as Decimal (equal floats hash the same)
            return int(value) if value == value.to_integral_value() else value.normalize()
        value = float(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        if decimal >= 0:
            value = round(value, decimal)
        return 0.0 if value == 0 else value  # -0.0 == 0.0
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


MAX_PERMUTED_COLUMNS = 6  # 720 orders at most


def compare(generated: ExecutionResult | None, golden: ExecutionResult, conditions: Conditions, ordered: bool,
            tie_keys: Sequence[int] | None = None, permute_columns: bool = False) -> Verdict:
    """Does ``generated`` match ``golden`` under ``conditions``?

    ``tie_keys``: positions of the columns the golden query sorts by. When given, rows that tie
    on them may come in any order (the database does not order ties; two runs of the same
    query may differ)."""
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
    verdict = _compare_rows(gen_rows, gold_rows, conditions, ordered)
    if not verdict.match and "order_only" in verdict.flags and tie_keys and _same_up_to_ties(gen_rows, gold_rows, tie_keys):
        return Verdict(True, "same rows in the same order (rows tied on the ORDER BY keys in any order)")
    if not verdict.match and conditions.decimal < 0 and (_has_float(gen_rows) or _has_float(gold_rows)) \
            and _close_rows(gen_rows, gold_rows, conditions, ordered):
        return Verdict(True, f"same rows within a relative float tolerance of {FLOAT_TOLERANCE}")
    if not verdict.match and permute_columns and 1 < gen_width <= MAX_PERMUTED_COLUMNS:
        # test-suite-sql-eval's column permutation: the same columns in another order
        for order in itertools.permutations(range(gen_width)):
            permuted = [tuple(row[i] for i in order) for row in gen_rows]
            if _compare_rows(permuted, gold_rows, conditions, ordered).match:
                return Verdict(True, f"same rows with the columns in another order {list(order)}", ("column_order",))
    return verdict


def _compare_rows(gen_rows: list[tuple[Hashable, ...]], gold_rows: list[tuple[Hashable, ...]], conditions: Conditions, ordered: bool) -> Verdict:
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


def _same_up_to_ties(gen_rows: list[tuple[Hashable, ...]], gold_rows: list[tuple[Hashable, ...]], keys: Sequence[int]) -> bool:
    """Equal as sequences of groups of consecutive rows with the same sort-key values."""

    def groups(rows: list[tuple[Hashable, ...]]) -> list[tuple[tuple[Hashable, ...], Counter[tuple[Hashable, ...]]]]:
        out: list[tuple[tuple[Hashable, ...], Counter[tuple[Hashable, ...]]]] = []
        for row in rows:
            key = tuple(row[k] for k in keys if k < len(row))
            if out and out[-1][0] == key:
                out[-1][1][row] += 1
            else:
                out.append((key, Counter([row])))
        return out

    return groups(gen_rows) == groups(gold_rows)


def _has_float(rows: list[tuple[Hashable, ...]]) -> bool:
    return any(isinstance(v, float) for row in rows for v in row)


def _close_rows(gen_rows: list[tuple[Hashable, ...]], gold_rows: list[tuple[Hashable, ...]], conditions: Conditions, ordered: bool) -> bool:
    """Rows equal up to float tolerance: after exact comparison failed, pair rows in order (or
    sorted, when order does not matter) and compare floats with math.isclose."""
    if conditions.distinct:
        gen_rows, gold_rows = _dedupe(gen_rows), _dedupe(gold_rows)
    if len(gen_rows) != len(gold_rows):
        return False
    if not ordered:
        gen_rows, gold_rows = sorted(gen_rows, key=_sort_key), sorted(gold_rows, key=_sort_key)
    return all(len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b)) for a, b in zip(gen_rows, gold_rows))


def _close(x: Hashable, y: Hashable) -> bool:
    """Floats (double precision) are compared with a tolerance; exact types (int, NUMERIC) exactly."""
    if (isinstance(x, float) or isinstance(y, float)) and _is_number(x) and _is_number(y):
        return math.isclose(float(x), float(y), rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE)  # type: ignore[arg-type]
    return x == y


def _is_number(v: Hashable) -> bool:
    return isinstance(v, (int, float, Decimal)) and not isinstance(v, bool)


def _sort_key(row: tuple[Hashable, ...]) -> tuple[tuple[int, Any], ...]:
    # A total order over mixed cells: None first, then numbers, then everything else as text.
    return tuple((0, 0) if v is None else (1, v) if _is_number(v) else (2, str(v)) for v in row)


def _dedupe(rows: list[tuple[Hashable, ...]]) -> list[tuple[Hashable, ...]]:
    return list(dict.fromkeys(rows))


def _row_difference(gen_rows: list[tuple[Hashable, ...]], gold_rows: list[tuple[Hashable, ...]]) -> Verdict:
    if not gen_rows:
        return Verdict(False, f"generated result is empty, golden has {len(gold_rows)} rows", ("empty_generated",))
    if len(gen_rows) != len(gold_rows):
        return Verdict(False, f"row count differs: {len(gen_rows)} generated vs {len(gold_rows)} golden", ("row_count",))
    return Verdict(False, "same row count, different values", ("values",))
