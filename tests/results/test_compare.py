"""The result-comparison rules shared by every execution-based scorer (evalbench/scoring/compare.py)."""

from __future__ import annotations

import datetime as dt
import math
import uuid
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalbench.backends.base import ExecutionResult
from evalbench.dataset import Conditions
from evalbench.scoring.compare import Verdict, compare, normalise_value
from evalbench.scoring.execution import golden_is_ordered

PLAIN = Conditions()
DISTINCT = Conditions(distinct=True)


def result(rows: list[tuple[Any, ...]], columns: list[str] | None = None, **kw: Any) -> ExecutionResult:
    if columns is None:
        width = len(rows[0]) if rows else 1
        columns = [f"c{i}" for i in range(width)]
    return ExecutionResult(columns=columns, rows=rows, **kw)


def col(*values: Any) -> list[tuple[Any, ...]]:
    """One-column rows."""
    return [(v,) for v in values]


D = Decimal
TS = dt.datetime(2024, 3, 1, 12, 30, 5)
BOUNDARY = 1.000000005  # at 9 significant digits, this float and the next one round differently

# (id, generated, golden, conditions, ordered, match, flags)
CASES: list[tuple[str, ExecutionResult | None, ExecutionResult, Conditions, bool, bool, tuple[str, ...]]] = [
    # order
    ("same-order-unordered", result(col(1, 2, 3)), result(col(1, 2, 3)), PLAIN, False, True, ()),
    ("permuted-unordered", result(col(3, 1, 2)), result(col(1, 2, 3)), PLAIN, False, True, ()),
    ("permuted-ordered", result(col(3, 1, 2)), result(col(1, 2, 3)), PLAIN, True, False, ("order_only",)),
    ("same-order-ordered", result(col(1, 2, 3)), result(col(1, 2, 3)), PLAIN, True, True, ()),
    ("ordered-different-values", result(col(1, 2, 4)), result(col(1, 2, 3)), PLAIN, True, False, ("values",)),
    ("conditions-order-flag-alone-does-not-sort", result(col(2, 1)), result(col(1, 2)), Conditions(order=True), False, True, ()),
    # multiset vs set
    ("multiset-extra-duplicate", result(col(1, 1, 2)), result(col(1, 2)), PLAIN, False, False, ("row_count",)),
    ("multiset-different-multiplicity", result(col(1, 1, 2)), result(col(1, 2, 2)), PLAIN, False, False, ("values",)),
    ("set-extra-duplicate", result(col(1, 1, 2)), result(col(1, 2)), DISTINCT, False, True, ()),
    ("set-different-multiplicity", result(col(1, 1, 2)), result(col(1, 2, 2)), DISTINCT, False, True, ()),
    ("set-different-values", result(col(1, 3)), result(col(1, 2)), DISTINCT, False, False, ("values",)),
    ("ordered-set-dedupes", result(col(1, 1, 2, 2)), result(col(1, 2)), Conditions(distinct=True), True, True, ()),
    ("ordered-set-wrong-order", result(col(2, 1, 1)), result(col(1, 2)), Conditions(distinct=True), True, False, ("order_only",)),
    # rounding
    ("decimal-2-rounds", result(col(1.234)), result(col(1.23)), Conditions(decimal=2), False, True, ()),
    ("no-decimal-exact", result(col(1.234)), result(col(1.23)), PLAIN, False, False, ("values",)),
    ("decimal-2-still-different", result(col(1.236)), result(col(1.23)), Conditions(decimal=2), False, False, ("values",)),
    ("decimal-0", result(col(2.4)), result(col(D("2"))), Conditions(decimal=0), False, True, ()),
    ("decimal-applies-to-golden-too", result(col(3.14)), result(col(3.14159)), Conditions(decimal=2), False, True, ()),
    ("float-noise-without-decimal", result(col(0.1 + 0.2)), result(col(0.3)), PLAIN, False, True, ()),
    ("half-up-on-the-decimal-text-of-a-float", result(col(0.125)), result(col(D("0.13"))), Conditions(decimal=2), False, True, ()),
    ("half-up-1.005-is-1.01-not-float-1.0", result(col(1.005)), result(col(D("1.01"))), Conditions(decimal=2), False, True, ()),
    ("half-up-negative", result(col(-0.125)), result(col(D("-0.13"))), Conditions(decimal=2), False, True, ()),
    ("half-up-2.675", result(col(2.675)), result(col(D("2.68"))), Conditions(decimal=2), False, True, ()),
    ("relative-tolerance-large-floats", result(col(1e20)), result(col(1e20 + 1e6)), PLAIN, False, True, ()),
    ("relative-tolerance-small-floats-not-loose", result(col(1e-12)), result(col(2e-12)), PLAIN, False, False, ("values",)),
    ("relative-tolerance-tiny-floats-close", result(col(1e-12)), result(col(1e-12 * (1 + 1e-12))), PLAIN, False, True, ()),
    ("float-noise-near-zero-is-a-difference", result(col(0.1 + 0.2 - 0.3)), result(col(0.0)), PLAIN, False, False, ("values",)),
    # number types
    ("decimal-vs-float", result(col(D("2.50"))), result(col(2.5)), PLAIN, False, True, ()),
    ("int-vs-float", result(col(2)), result(col(2.0)), PLAIN, False, True, ()),
    ("int-vs-decimal", result(col(7)), result(col(D("7.000"))), PLAIN, False, True, ()),
    ("negative-zero", result(col(-0.0)), result(col(0)), PLAIN, False, True, ()),
    ("nan-vs-nan", result(col(float("nan"))), result(col(D("NaN"))), PLAIN, False, True, ()),
    ("text-vs-number", result(col("1")), result(col(1)), PLAIN, False, False, ("values",)),
    ("big-integers-differ", result(col(1234567890)), result(col(1234567891)), PLAIN, False, False, ("values",)),
    ("big-integer-vs-nearby-float", result(col(2**53 + 1)), result(col(float(2**53))), PLAIN, False, False, ("values",)),
    ("integer-vs-float-within-tolerance-is-not-equal", result(col(1000000000)), result(col(1000000000.5)), PLAIN, False, False, ("values",)),
    ("numeric-vs-float-different-precision", result(col(D("0.3333333333333333333"))), result(col(1 / 3)), PLAIN, False, False, ("values",)),
    ("numeric-vs-float-same-value", result(col(D("0.5"))), result(col(0.5)), PLAIN, False, True, ()),
    ("numeric-vs-float-rounded-by-decimal", result(col(D("0.3333333333333333333"))), result(col(1 / 3)), Conditions(decimal=4), False, True, ()),
    ("big-decimals-differ", result(col(D("98765432101.25"))), result(col(D("98765432101.26"))), PLAIN, False, False, ("values",)),
    ("adjacent-floats-match", result(col(BOUNDARY)), result(col(math.nextafter(BOUNDARY, 2.0))), PLAIN, False, True, ()),
    # dates and times
    ("same-date", result(col(dt.date(2024, 1, 2))), result(col(dt.date(2024, 1, 2))), PLAIN, False, True, ()),
    ("different-date", result(col(dt.date(2024, 1, 2))), result(col(dt.date(2024, 1, 3))), PLAIN, False, False, ("values",)),
    ("same-timestamp", result(col(TS)), result(col(dt.datetime(2024, 3, 1, 12, 30, 5))), PLAIN, False, True, ()),
    ("timestamp-vs-date", result(col(dt.datetime(2024, 1, 2))), result(col(dt.date(2024, 1, 2))), PLAIN, False, False, ("values",)),
    ("same-interval", result(col(dt.timedelta(days=1))), result(col(dt.timedelta(hours=24))), PLAIN, False, True, ()),
    # JSON, bytes, uuid
    ("json-key-order", result(col({"a": 1, "b": [1, 2]})), result(col({"b": [1, 2], "a": 1})), PLAIN, False, True, ()),
    ("json-different-value", result(col({"a": 1})), result(col({"a": 2})), PLAIN, False, False, ("values",)),
    ("json-array-order-matters", result(col([1, 2])), result(col([2, 1])), PLAIN, False, False, ("values",)),
    ("bytes", result(col(b"\x00\x01")), result(col(memoryview(b"\x00\x01"))), PLAIN, False, True, ()),
    ("uuid", result(col(uuid.UUID(int=5))), result(col(uuid.UUID(int=5))), PLAIN, False, True, ()),
    # NULLs and strings
    ("null-vs-null", result(col(None, 1)), result(col(1, None)), PLAIN, False, True, ()),
    ("null-vs-zero", result(col(None)), result(col(0)), PLAIN, False, False, ("values",)),
    ("null-vs-empty-string", result(col(None)), result(col("")), PLAIN, False, False, ("values",)),
    ("null-vs-text-None", result(col(None)), result(col("None")), PLAIN, False, False, ("values",)),
    ("text-case-matters", result(col("abc")), result(col("ABC")), PLAIN, False, False, ("values",)),
    # columns
    ("column-names-ignored", result([(1, "x")], ["id", "name"]), result([(1, "x")], ["a", "b"]), PLAIN, False, True, ()),
    ("duplicate-column-names", result([(1, 2)], ["x", "x"]), result([(1, 2)], ["a", "b"]), PLAIN, False, True, ()),
    ("columns-matched-by-position", result([(2, 1)], ["b", "a"]), result([(1, 2)], ["a", "b"]), PLAIN, False, False, ("values",)),
    ("column-count-differs", result([(1, 2)]), result([(1,)]), PLAIN, False, False, ()),
    # errors, truncation, empty results
    ("generated-error", result([], error="relation t does not exist"), result(col(1)), PLAIN, False, False, ()),
    ("generated-error-both-empty", result([], error="boom"), result([]), PLAIN, False, False, ()),
    ("golden-error", result(col(1)), result([], error="boom"), PLAIN, False, False, ()),
    ("generated-truncated", result(col(1, 2), truncated=True), result(col(1, 2)), PLAIN, False, False, ()),
    ("golden-truncated", result(col(1, 2)), result(col(1, 2), truncated=True), PLAIN, False, False, ()),
    ("both-truncated-same-rows", result(col(1, 2), truncated=True), result(col(1, 2), truncated=True), PLAIN, False, False, ()),
    ("both-empty-fails-by-default", result([]), result([]), PLAIN, False, False, ("empty_gold",)),
    ("both-empty-ordered-distinct", result([]), result([]), Conditions(order=True, distinct=True, decimal=2), True, False, ("empty_gold",)),
    ("generated-empty", result([]), result(col(1, 2)), PLAIN, False, False, ("empty_generated",)),
    ("generated-empty-ordered", result([]), result(col(1, 2)), PLAIN, True, False, ("empty_generated",)),
    ("generated-empty-distinct", result([]), result(col(1)), DISTINCT, False, False, ("empty_generated",)),
    ("golden-empty", result(col(1)), result([]), PLAIN, False, False, ("empty_gold",)),
    ("nothing-executed", None, result(col(1)), PLAIN, False, False, ()),
]


@pytest.mark.parametrize(
    ("generated", "golden", "conditions", "ordered", "match", "flags"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_compare_rules(generated, golden, conditions, ordered, match, flags):
    verdict = compare(generated, golden, conditions, ordered)
    assert isinstance(verdict, Verdict)
    assert (verdict.match, verdict.flags) == (match, flags), verdict.reason


def test_reasons():
    assert compare(None, result(col(1)), PLAIN, False).reason == "no SQL was executed"
    assert compare(result([], error="syntax error"), result(col(1)), PLAIN, False).reason == "generated SQL failed: syntax error"
    assert compare(result(col(1)), result([], error="boom"), PLAIN, False).reason == "golden SQL failed: boom"
    assert "truncated" in compare(result(col(1), truncated=True), result(col(1)), PLAIN, False).reason
    assert compare(result([(1, 2)]), result([(1,)]), PLAIN, False).reason == "column count differs: 2 generated vs 1 golden"
    assert compare(result([]), result(col(1, 2, 3)), PLAIN, False).reason == "generated result is empty, golden has 3 rows"
    assert compare(result(col(1, 2)), result(col(1, 2, 3)), PLAIN, False).reason == "row count differs: 2 generated vs 3 golden"
    assert compare(result([]), result([]), PLAIN, False).reason.startswith("the golden result is empty")
    assert compare(result([]), result([]), PLAIN, False, empty_gold="pass").reason == "both results are empty (empty_gold: pass)"
    assert compare(result(col(2, 1)), result(col(1, 2)), PLAIN, True).reason == (
        "same rows, different order (order matters for this item)"
    )


def test_normalise_value():
    assert normalise_value(D("2.50")) == normalise_value(2.5) == 2.5
    assert normalise_value(2.5000000001) == 2.5000000001  # no rounding: compare() applies a tolerance to floats
    assert normalise_value(float("nan")) == normalise_value(D("NaN")) == "nan"
    assert normalise_value(1.234, 2) == D("1.23")
    assert normalise_value(0.125, 2) == D("0.13")  # half-up on the float's decimal text, never through binary
    assert normalise_value(None) is None
    assert normalise_value("x") == "x"
    assert normalise_value(dt.date(2024, 1, 2)) == "2024-01-02"
    assert normalise_value({"b": 1, "a": 2}) == 'json:{"a": 2, "b": 1}'
    assert normalise_value(float("inf")) == "inf"
    assert normalise_value((1, D("2.0"))) == (1.0, 2.0)


def test_big_integers_are_not_merged_by_rounding():
    # ints are exact; rounding them to 9 significant digits makes distinct ids, counts and sums equal
    assert normalise_value(1234567890) != normalise_value(1234567891)
    assert normalise_value(10**12 + 1) != normalise_value(10**12)


# --------------------------------------------------------------------------- properties

cells = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**15), max_value=10**15),
    st.floats(allow_nan=True, allow_infinity=True),
    st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-(10**9), max_value=10**9),
    st.text(max_size=5),
    st.dates(),
    st.datetimes(),
    st.dictionaries(st.text(max_size=3), st.integers(-5, 5), max_size=3),
)
conditions = st.builds(Conditions, order=st.booleans(), distinct=st.booleans(), decimal=st.integers(min_value=-1, max_value=4))


@st.composite
def row_lists(draw: st.DrawFn, min_size: int = 0) -> list[tuple[Any, ...]]:
    width = draw(st.integers(min_value=1, max_value=3))
    row = st.tuples(*[cells] * width)
    # a small pool of rows so that duplicates and equal rows are common
    pool = draw(st.lists(row, min_size=1, max_size=4))
    return draw(st.lists(st.sampled_from(pool), min_size=min_size, max_size=8))


@settings(max_examples=150, database=None, deadline=None)
@given(data=st.data(), cond=conditions)
def test_permuting_rows_never_changes_an_unordered_verdict(data, cond):
    generated = data.draw(row_lists())
    golden = data.draw(st.one_of(st.permutations(generated), row_lists(), st.just(generated[:-1])))
    baseline = compare(result(generated), result(golden), cond, False)
    shuffled_gen = data.draw(st.permutations(generated))
    shuffled_gold = data.draw(st.permutations(golden))
    assert compare(result(shuffled_gen), result(golden), cond, False) == baseline
    assert compare(result(generated), result(shuffled_gold), cond, False) == baseline
    assert compare(result(shuffled_gen), result(shuffled_gold), cond, False).match == baseline.match


@settings(max_examples=150, database=None, deadline=None)
@given(data=st.data(), decimal=st.integers(min_value=-1, max_value=4))
def test_duplicating_a_row_changes_a_multiset_verdict_but_not_a_set_verdict(data, decimal):
    rows = data.draw(row_lists(min_size=1))
    golden = data.draw(st.permutations(rows))
    index = data.draw(st.integers(min_value=0, max_value=len(rows) - 1))
    position = data.draw(st.integers(min_value=0, max_value=len(rows)))
    duplicated = [*rows[:position], rows[index], *rows[position:]]
    multiset, as_set = Conditions(decimal=decimal), Conditions(distinct=True, decimal=decimal)
    assert compare(result(rows), result(golden), multiset, False).match is True
    assert compare(result(duplicated), result(golden), multiset, False).match is False
    assert compare(result(duplicated), result(golden), as_set, False).match is True
    # ordered and distinct: a copy right after the original keeps the order of first occurrences
    after = [*rows[:index + 1], rows[index], *rows[index + 1:]]
    assert compare(result(after), result(rows), Conditions(order=True, distinct=True, decimal=decimal), True).match is True
    assert compare(result(after), result(rows), Conditions(order=True, decimal=decimal), True).match is False


@settings(max_examples=200, database=None, deadline=None)
@given(rows=row_lists(), cond=conditions, ordered=st.booleans())
def test_a_result_always_matches_itself(rows, cond, ordered):
    verdict = compare(result(rows), result(list(rows)), cond, ordered)
    assert verdict.match is bool(rows)  # an empty golden result fails (empty_gold: fail)
    assert verdict.flags == (("empty_gold",) if not rows else ())


# --------------------------------------------------------------------------- golden_is_ordered


@pytest.mark.parametrize(
    ("sql", "ordered"),
    [
        ("SELECT a FROM t ORDER BY a;", True),
        ("select a from t order by a desc limit 5", True),
        ("  SELECT a FROM t ORDER BY a ;  ", True),
        ("WITH c AS (SELECT a FROM t) SELECT * FROM c ORDER BY a", True),
        ("SELECT a FROM t UNION SELECT b FROM u ORDER BY 1", True),
        ("SELECT a FROM t", False),
        ("SELECT * FROM (SELECT a FROM t ORDER BY a) s", False),
        ("WITH c AS (SELECT a FROM t ORDER BY a) SELECT * FROM c", False),
        ("SELECT a FROM t WHERE a IN (SELECT b FROM u ORDER BY b LIMIT 3)", False),
        ("SELECT a, rank() OVER (ORDER BY a) FROM t", False),
        ("SELECT string_agg(a, ',' ORDER BY a) FROM t", False),
        ("UPDATE t SET a = 1", False),
        ("this is not SQL (((", False),
        ("", False),
    ],
)
def test_golden_is_ordered(sql, ordered):
    assert golden_is_ordered(sql) is ordered


def test_golden_is_ordered_parenthesised_top_level_query():
    # the whole statement in parentheses: its ORDER BY still sorts the result
    assert golden_is_ordered("(SELECT a FROM t ORDER BY a)") is True


def test_rows_tied_on_the_sort_keys_may_come_in_any_order():
    """The database does not order ties: two runs of the same query may differ there."""
    from evalbench.backends.base import ExecutionResult
    from evalbench.dataset import Conditions
    from evalbench.scoring.compare import compare
    from evalbench.scoring.execution import tie_key_positions

    sql = "SELECT name, score FROM t ORDER BY score DESC"
    golden = ExecutionResult(columns=["name", "score"], rows=[("a", 9), ("b", 5), ("c", 5), ("d", 1)])
    tied = ExecutionResult(columns=["name", "score"], rows=[("a", 9), ("c", 5), ("b", 5), ("d", 1)])
    wrong = ExecutionResult(columns=["name", "score"], rows=[("b", 5), ("a", 9), ("c", 5), ("d", 1)])
    keys = tie_key_positions(sql, golden.columns)
    assert keys == [1]
    ordered = Conditions(order=True)
    assert compare(tied, golden, ordered, True, keys).match
    assert not compare(tied, golden, ordered, True, None).match  # without known keys: strict order
    assert not compare(wrong, golden, ordered, True, keys).match
    assert tie_key_positions("SELECT name FROM t ORDER BY length(name)", ["name"]) is None


def test_order_keys_of_queries_ending_in_a_comment_and_sorting_by_expressions():
    from evalbench.scoring.execution import golden_is_ordered, order_keys

    sql = "SELECT a, count(*) AS n FROM t GROUP BY a ORDER BY count(*) DESC, a; -- most first"
    assert golden_is_ordered(sql)
    assert order_keys(sql) == (2, 1)


def test_column_permutation_search_is_optional():
    from evalbench.backends.base import ExecutionResult
    from evalbench.dataset import Conditions
    from evalbench.scoring.compare import compare

    golden = ExecutionResult(columns=["a", "b"], rows=[(1, "x"), (2, "y")])
    swapped = ExecutionResult(columns=["b", "a"], rows=[("x", 1), ("y", 2)])
    assert not compare(swapped, golden, Conditions(), False).match
    verdict = compare(swapped, golden, Conditions(), False, permute_columns=True)
    assert verdict.match and verdict.flags == ("column_order",)
    other = ExecutionResult(columns=["b", "a"], rows=[("x", 2), ("y", 1)])
    assert not compare(other, golden, Conditions(), False, permute_columns=True).match


# --------------------------------------------------------------------------- properties of the evalbench semantics


@settings(max_examples=300, database=None, deadline=None)
@given(value=st.decimals(allow_nan=False, allow_infinity=False, min_value=-(10**8), max_value=10**8, places=6),  # <= 15 digits: a float holds them
       places=st.integers(min_value=0, max_value=4))
def test_rounding_is_exact_half_up_on_the_decimal_text(value, places):
    from decimal import ROUND_HALF_UP

    from evalbench.scoring.compare import round_half_up

    expected = value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    assert round_half_up(value, places) == expected
    as_float = float(value)
    # a float rounds as the decimal text the database prints for it (its shortest repr), never through binary
    assert round_half_up(as_float, places) == Decimal(repr(as_float)).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    assert compare(result(col(as_float)), result(col(expected)), Conditions(decimal=places), False).match


@settings(max_examples=200, database=None, deadline=None)
@given(whole=st.integers(min_value=-(10**6), max_value=10**6), places=st.integers(min_value=0, max_value=3))
def test_half_way_values_round_away_from_zero(whole, places):
    from evalbench.scoring.compare import round_half_up

    half = Decimal(whole).scaleb(-places) + Decimal(5).scaleb(-places - 1) * (1 if whole >= 0 else -1)
    rounded = round_half_up(half, places)
    assert abs(rounded) > abs(half)  # away from zero, never to even
    assert round_half_up(float(half), places) == rounded or repr(float(half)) != str(half)


@settings(max_examples=300, database=None, deadline=None)
@given(x=st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300).filter(lambda v: abs(v) > 1e-300),
       small=st.floats(min_value=-1e-10, max_value=1e-10), large=st.floats(min_value=1e-8, max_value=1e-3),
       sign=st.sampled_from([1, -1]))
def test_the_float_tolerance_is_relative_and_between_floats_only(x, small, large, sign):
    near, far = x * (1 + small), x * (1 + sign * large)
    assert compare(result(col(near)), result(col(x)), PLAIN, False).match
    assert not compare(result(col(far)), result(col(x)), PLAIN, False).match
    # an exact number against a float is compared exactly: no tolerance leaks into integers or NUMERIC
    if abs(x) < 2**60 and x == int(x) and near != x:
        assert not compare(result(col(int(x))), result(col(near)), PLAIN, False).match


@settings(max_examples=200, database=None, deadline=None)
@given(n=st.integers(min_value=2**53, max_value=2**62), delta=st.integers(min_value=1, max_value=100))
def test_big_integers_never_equal_a_nearby_float(n, delta):
    assert not compare(result(col(n + delta)), result(col(float(n))), PLAIN, False).match or float(n) == n + delta


@settings(max_examples=200, database=None, deadline=None)
@given(rows=row_lists(), cond=conditions, ordered=st.booleans())
def test_the_empty_golden_policy(rows, cond, ordered):
    empty = result([])
    fail = compare(result(rows), empty, cond, ordered, empty_gold="fail")
    assert not fail.match and fail.applicable and "empty_gold" in fail.flags
    passed = compare(result(rows), empty, cond, ordered, empty_gold="pass")
    assert passed.match is (not rows)
    skipped = compare(result(rows), empty, cond, ordered, empty_gold="n/a")
    assert not skipped.applicable and not skipped.match


@settings(max_examples=200, database=None, deadline=None)
@given(data=st.data(), cond=conditions)
def test_an_unordered_verdict_is_symmetric(data, cond):
    a = data.draw(row_lists(min_size=1))
    b = data.draw(st.one_of(st.permutations(a), row_lists(min_size=1)))
    assert compare(result(a), result(b), cond, False).match == compare(result(b), result(a), cond, False).match


@settings(max_examples=150, database=None, deadline=None)
@given(data=st.data(), decimal=st.integers(min_value=-1, max_value=4))
def test_adding_distinct_to_a_result_without_duplicates_changes_nothing(data, decimal):
    """The documented DISTINCT rule: a prediction is judged by its rows. DISTINCT on a result that
    has no duplicate rows returns the same rows (in any order): it passes in every mode that does
    not check order, whatever conditions.distinct says."""
    from evalbench.scoring.compare import normalise_rows

    raw = data.draw(row_lists(min_size=1))
    unique = list({key: row for key, row in zip(normalise_rows(raw, decimal), raw, strict=True)}.values())
    with_distinct = data.draw(st.permutations(unique))  # a HashAggregate may return them in another order
    for cond in (Conditions(decimal=decimal), Conditions(distinct=True, decimal=decimal)):
        assert compare(result(with_distinct), result(unique), cond, False).match
