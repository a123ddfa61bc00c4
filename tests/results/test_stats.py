"""Pass-rate and paired-comparison statistics (evalbench/results/summary/stats.py)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalbench.results.summary import stats
from evalbench.results.summary.stats import mcnemar_exact, paired_diff_ci, rate_ci

RESAMPLES = 2_000  # enough for the properties, fast under hypothesis


def reference_mcnemar(b: int, c: int) -> float:
    """The definition, term by term with math.comb: min(1, 2 P(X <= min(b, c))), X ~ Bin(b + c, 1/2)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = Fraction(sum(math.comb(n, i) for i in range(min(b, c) + 1)), 2**n)
    return float(min(Fraction(1), 2 * tail))


# ------------------------------------------------------------------------------ McNemar exact


@pytest.mark.parametrize(
    ("b", "c", "expected"),
    [
        (0, 0, 1.0),
        (0, 1, 1.0),  # 2 * 1/2
        (0, 2, 0.5),  # 2 * 1/4
        (0, 5, 0.0625),  # 2 / 32
        (0, 6, 0.03125),  # 2 / 64
        (3, 3, 1.0),
        (2, 3, 1.0),  # 2 * P(X <= 2 | n = 5) = 2 * 16/32
        (2, 8, 0.109375),  # 2 * (1 + 10 + 45) / 1024
        (1, 7, 0.0703125),  # 2 * (1 + 8) / 256
    ],
)
def test_mcnemar_exact_hand_computed(b, c, expected):
    assert mcnemar_exact(b, c) == expected
    assert mcnemar_exact(c, b) == expected


def test_mcnemar_exact_published_examples():
    # Fagerland, Lydersen & Laake (2013), BMC Med Res Methodol 13:91, airway hyper-responsiveness
    # before/after stem cell transplantation: 1 vs 7 discordant pairs, exact conditional p = 0.070.
    assert mcnemar_exact(1, 7) == pytest.approx(0.070, abs=5e-4)
    # The textbook two-sided sign test with 9 of 10 pairs in one direction: p = 22/1024 = 0.0215.
    assert mcnemar_exact(9, 1) == pytest.approx(0.0215, abs=5e-5)
    # Agresti, Categorical Data Analysis: presidential approval ratings, 150 vs 86 discordant pairs;
    # the exact binomial test gives p = 3.716e-05 (R: binom.test(86, 236)).
    assert mcnemar_exact(150, 86) == pytest.approx(3.716e-05, rel=1e-3)


@given(st.integers(0, 300), st.integers(0, 300))
@settings(max_examples=150, deadline=None)
def test_mcnemar_exact_matches_the_definition(b, c):
    p = mcnemar_exact(b, c)
    assert p == pytest.approx(reference_mcnemar(b, c), rel=1e-12, abs=1e-300)
    assert 0.0 <= p <= 1.0
    assert p == mcnemar_exact(c, b)


@given(st.integers(1, 200))
@settings(max_examples=50, deadline=None)
def test_mcnemar_more_lopsided_is_more_significant(n):
    values = [mcnemar_exact(k, n - k) for k in range(n // 2 + 1)]
    assert values == sorted(values)  # p grows as min(b, c) approaches n / 2
    assert values[-1] == 1.0


def test_mcnemar_large_counts_use_logs_and_agree_with_exact_sums():
    n = stats.EXACT_LIMIT + 1_000
    for k in (n // 2 - 40, n // 2 - 400, n // 2 - 2_000):
        exact = stats._lower_tail_exact(k, n)
        assert stats._lower_tail_log(k, n) == pytest.approx(exact, rel=1e-9)
        assert mcnemar_exact(k, n - k) == pytest.approx(2 * exact, rel=1e-9)
    assert mcnemar_exact(10**6, 10**6 + 3_000) == pytest.approx(0.0341, abs=1e-4)  # normal approx: 2 Φ(-2.12)
    assert mcnemar_exact(0, 5_000) == 0.0  # underflows to 0, never negative or NaN


def test_mcnemar_rejects_negative_counts():
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 3)


# ------------------------------------------------------------------------------ rate_ci


@given(st.integers(20, 2_000), st.floats(0.1, 0.9), st.integers(0, 2**32 - 1))
@settings(max_examples=100, deadline=None)
def test_rate_ci_contains_the_rate(total, share, seed):
    passed = round(share * total)
    low, high = rate_ci(passed, total, resamples=RESAMPLES, seed=seed)
    assert 0.0 <= low <= passed / total <= high <= 1.0


@given(st.integers(1, 500).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))), st.integers(0, 1000))
@settings(max_examples=100, deadline=None)
def test_rate_ci_is_ordered_bounded_and_deterministic(counts, seed):
    passed, total = counts
    ci = rate_ci(passed, total, resamples=RESAMPLES, seed=seed)
    assert ci is not None
    assert 0.0 <= ci[0] <= ci[1] <= 1.0
    assert rate_ci(passed, total, resamples=RESAMPLES, seed=seed) == ci


def test_rate_ci_width_matches_the_normal_approximation():
    low, high = rate_ci(200, 400)  # p = 0.5, standard error 0.025
    assert low == pytest.approx(0.5 - 1.96 * 0.025, abs=0.006)
    assert high == pytest.approx(0.5 + 1.96 * 0.025, abs=0.006)
    narrow = rate_ci(200, 400, level=0.5)
    assert narrow[0] > low and narrow[1] < high


def test_rate_ci_edge_cases():
    assert rate_ci(0, 0) is None
    assert rate_ci(7, 7) == (1.0, 1.0)  # all pass: the percentile bootstrap collapses
    assert rate_ci(0, 7) == (0.0, 0.0)
    for bad in ({"passed": 3, "total": 2}, {"passed": -1, "total": 2}, {"passed": 1, "total": 2, "level": 1.0},
                {"passed": 1, "total": 2, "resamples": 0}):
        with pytest.raises(ValueError):
            rate_ci(**bad)


# ------------------------------------------------------------------------------ paired_diff_ci


cells = st.tuples(st.integers(0, 200), st.integers(0, 60), st.integers(0, 60), st.integers(0, 200))


@given(cells, st.integers(0, 1000))
@settings(max_examples=150, deadline=None)
def test_paired_diff_ci_is_ordered_bounded_and_deterministic(counts, seed):
    ci = paired_diff_ci(*counts, resamples=RESAMPLES, seed=seed)
    if sum(counts) == 0:
        assert ci is None
        return
    assert ci is not None
    assert -1.0 <= ci[0] <= ci[1] <= 1.0
    assert paired_diff_ci(*counts, resamples=RESAMPLES, seed=seed) == ci


@given(cells.filter(lambda c: sum(c) >= 20), st.integers(0, 1000))
@settings(max_examples=150, deadline=None)
def test_paired_diff_ci_contains_the_difference(counts, seed):
    _n11, n10, n01, _n00 = counts
    low, high = paired_diff_ci(*counts, resamples=RESAMPLES, seed=seed)
    assert low <= (n01 - n10) / sum(counts) <= high


def test_paired_diff_ci_width_matches_the_normal_approximation():
    n11, n10, n01, n00 = 600, 100, 60, 240
    n = 1_000
    diff = (n01 - n10) / n
    se = math.sqrt((n10 + n01) / n**2 - (n01 - n10) ** 2 / n**3)
    low, high = paired_diff_ci(n11, n10, n01, n00)
    assert low == pytest.approx(diff - 1.96 * se, abs=0.004)
    assert high == pytest.approx(diff + 1.96 * se, abs=0.004)


def test_paired_diff_ci_edge_cases():
    assert paired_diff_ci(0, 0, 0, 0) is None
    assert paired_diff_ci(30, 0, 0, 10) == (0.0, 0.0)  # no discordant pair: no difference in any resample
    assert paired_diff_ci(40, 0, 0, 0) == (0.0, 0.0)  # all pass in both
    assert paired_diff_ci(0, 25, 0, 0) == (-1.0, -1.0)  # every item regressed
    with pytest.raises(ValueError):
        paired_diff_ci(1, -1, 0, 0)
    with pytest.raises(ValueError):
        paired_diff_ci(1, 1, 1, 1, level=0.0)
