"""Our own strict result comparison (``semantics: evalbench``), shared by the execution scorers.

Written down, with an example per rule, in docs/scoring.md. In short: an errored or truncated
result never matches; an empty golden result follows the ``empty_gold`` policy (default
``fail``: it cannot tell a right query from an over-filtering one); columns are matched by
position (names are ignored); rows are compared as an ordered list only when the item asks for
order, else as a multiset, or as a set when ``conditions.distinct`` is set. Numbers compare by
exact value whatever their type (an integer never equals a nearby float); only two floats
compare with a relative tolerance of 1e-9; with ``conditions.decimal`` ≥ 0 every number is first
rounded half-up, exactly, on its decimal text (a float through its shortest repr, never through
binary arithmetic).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import uuid
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import Final, Literal

from evalbench.backends.base import ExecutionResult
from evalbench.dataset import Conditions

FLOAT_TOLERANCE = 1e-9  # relative, between two floats only (double precision arithmetic differs by plan)
EmptyGold = Literal["fail", "pass", "n/a"]
EMPTY_GOLD_POLICIES: Final = ("fail", "pass", "n/a")


@dataclass(frozen=True)
class Verdict:
    match: bool
    reason: str
    flags: tuple[str, ...] = ()
    applicable: bool = True  # False: the empty_gold policy is n/a and the golden result is empty


def round_half_up(value: Decimal | float, places: int) -> Decimal:
    """``value`` rounded half-up to ``places`` exactly: a float through its shortest decimal text
    (what the database prints for it), so 0.125 gives 0.13 and 1.005 gives 1.01."""
    number = value if isinstance(value, Decimal) else Decimal(repr(value))
    digits = max(28, number.adjusted() + places + 2)  # enough precision for any magnitude
    return number.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP, context=Context(prec=digits))


def normalise_value(value: object, decimal: int = -1) -> Hashable:
    """A hashable, type-normalised form of one cell. Numbers keep their exact value (a Decimal and
    a float are equal only when their values are: Python compares them exactly); with
    ``decimal`` ≥ 0 they are rounded half-up first. Dates and times by ISO text; JSON by
    canonical text; NaN equals NaN."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, (Decimal, float)):
        if value != value:  # NaN, Decimal or float
            return "nan"
        if value in (math.inf, -math.inf):
            return "inf" if value > 0 else "-inf"
        if decimal >= 0:
            value = round_half_up(value, decimal)
        if isinstance(value, Decimal):
            return int(value) if value == value.to_integral_value() else value.normalize()
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


def normalise_rows(rows: Sequence[Sequence[object]], decimal: int = -1) -> list[tuple[Hashable, ...]]:
    return [tuple(normalise_value(v, decimal) for v in row) for row in rows]


MAX_PERMUTED_COLUMNS = 6  # 720 orders at most


def compare(generated: ExecutionResult | None, golden: ExecutionResult, conditions: Conditions, ordered: bool,
            tie_keys: Sequence[int] | None = None, permute_columns: bool = False,
            empty_gold: EmptyGold = "fail") -> Verdict:
    """Does ``generated`` match ``golden`` under ``conditions``?

    ``tie_keys``: positions of the columns the golden query sorts by. When given, rows that tie
    on them may come in any order (the database does not order ties; two runs of the same
    query may differ). ``empty_gold``: what an empty golden result means (see the module doc)."""
    if generated is None:
        return Verdict(False, "no SQL was executed")
    if generated.error is not None:
        return Verdict(False, f"generated SQL failed: {generated.error}")
    if golden.error is not None:
        return Verdict(False, f"golden SQL failed: {golden.error}")
    if generated.truncated or golden.truncated:
        return Verdict(False, "a result was truncated at the row cap; truncated results never match")
    if not golden.rows:
        return _empty_golden(generated, empty_gold)
    gen_width = len(generated.columns)
    gold_width = len(golden.columns)
    if not generated.rows:
        return Verdict(False, f"generated result is empty, golden has {len(golden.rows)} rows", ("empty_generated",))
    if gen_width != gold_width:
        return Verdict(False, f"column count differs: {gen_width} generated vs {gold_width} golden")
    gen_rows = normalise_rows(generated.rows, conditions.decimal)
    gold_rows = normalise_rows(golden.rows, conditions.decimal)
    verdict = _compare_rows(gen_rows, gold_rows, conditions, ordered)
    if not verdict.match and "order_only" in verdict.flags and tie_keys and _same_up_to_ties(gen_rows, gold_rows, tie_keys):
        return Verdict(True, "same rows in the same order (rows tied on the ORDER BY keys in any order)")
    if not verdict.match and conditions.decimal < 0 and _has_float(gen_rows) and _has_float(gold_rows) \
            and _close_rows(gen_rows, gold_rows, conditions, ordered):
        return Verdict(True, f"same rows within a relative float tolerance of {FLOAT_TOLERANCE}")
    if not verdict.match and permute_columns and 1 < gen_width <= MAX_PERMUTED_COLUMNS:
        # test-suite-sql-eval's column permutation: the same columns in another order
        for order in itertools.permutations(range(gen_width)):
            permuted = [tuple(row[i] for i in order) for row in gen_rows]
            if _compare_rows(permuted, gold_rows, conditions, ordered).match:
                return Verdict(True, f"same rows with the columns in another order {list(order)}", ("column_order",))
    return verdict


def _empty_golden(generated: ExecutionResult, policy: EmptyGold) -> Verdict:
    if policy == "n/a":
        return Verdict(False, "the golden result is empty (empty_gold: n/a)", ("empty_gold",), applicable=False)
    if policy == "pass" and not generated.rows:
        return Verdict(True, "both results are empty (empty_gold: pass)", ("both_empty",))
    if policy == "pass":
        return Verdict(False, f"row count differs: {len(generated.rows)} generated vs 0 golden", ("row_count",))
    return Verdict(False, "the golden result is empty: it cannot tell a right query from an over-filtering one "
                          "(empty_gold: fail)", ("empty_gold",))


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
    return all(len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True)) for a, b in zip(gen_rows, gold_rows, strict=True))


def _close(x: Hashable, y: Hashable) -> bool:
    """Two floats (double precision) are compared with a relative tolerance and nothing else: an
    integer or a NUMERIC against a float compares exactly, and near zero nothing is loosened."""
    if isinstance(x, float) and isinstance(y, float):
        return math.isclose(x, y, rel_tol=FLOAT_TOLERANCE, abs_tol=0.0)
    return x == y


def _is_number(v: Hashable) -> bool:
    return isinstance(v, (int, float, Decimal)) and not isinstance(v, bool)


def _sort_key(row: tuple[Hashable, ...]) -> tuple[tuple[int, Hashable], ...]:
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
