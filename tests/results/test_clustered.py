"""Statistics by item (evalbench/results/summary/clustered.py): the cluster bootstrap of a pass
rate, the paired interval and the sign-flip test; and, by simulation, that 95 % intervals cover
the true rate about 95 % of the time with one trial and with several trials per item, where
treating each (item, trial) as independent does not (docs/runs.md, "Statistics by item").

The simulations are seeded and vectorised: a population of items whose pass probabilities are
very unequal (easy items the agent nearly always solves, hard ones it nearly never does, and the
rest anywhere between), which is what makes an item's trials correlated."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalbench.results.summary.clustered import (
    ItemCounts,
    cluster_diff_ci,
    cluster_rate_ci,
    mean_upper_bound,
    sign_flip_p,
)
from evalbench.results.summary.stats import mcnemar_exact, paired_diff_ci, rate_ci, sign_test_lower

ITEMS = 200
TRUE_RATE = 0.4 * 8 / 9 + 0.3 * 1 / 9 + 0.3 * 0.5  # the mean of the population below
RUNS = 2000  # simulated runs per coverage check: the standard error of a 95 % coverage is 0.5 point
RESAMPLES = 1000  # per interval: enough for a 95 % percentile interval, fast


def population(rng: np.random.Generator, items: int = ITEMS) -> np.ndarray:
    """Per-item pass probabilities: 40 % easy (Beta(8, 1)), 30 % hard (Beta(1, 8)), 30 % uniform."""
    u = rng.random(items)
    return np.where(u < 0.4, rng.beta(8, 1, items), np.where(u < 0.7, rng.beta(1, 8, items), rng.random(items)))


def _coverage(trials: int, seed: int) -> tuple[float, float]:
    """(cluster bootstrap, outcome bootstrap) coverage of TRUE_RATE by 95 % intervals over RUNS runs
    of ITEMS items drawn from the population, each item run ``trials`` times."""
    rng = np.random.default_rng(seed)
    p = np.stack([population(rng) for _ in range(RUNS)])
    passed = rng.binomial(trials, p)
    cluster = naive = 0
    for run, row in enumerate(passed):
        low, high = cluster_rate_ci([(trials, int(c)) for c in row], resamples=RESAMPLES, seed=run)
        cluster += low <= TRUE_RATE <= high
        low, high = rate_ci(int(row.sum()), trials * ITEMS, resamples=RESAMPLES, seed=run)  # each trial independent
        naive += low <= TRUE_RATE <= high
    return cluster / RUNS, naive / RUNS


def test_95_percent_intervals_cover_the_true_rate_with_one_trial():
    cluster, naive = _coverage(trials=1, seed=1)
    assert 0.93 <= cluster <= 0.97, cluster
    assert 0.93 <= naive <= 0.97, naive  # with one trial per item the two bootstraps are the same


def test_95_percent_intervals_cover_the_true_rate_with_trials_where_resampling_trials_does_not():
    """With 4 trials per item the outcome bootstrap's interval is too narrow (about 77 % coverage
    here): an item's trials agree far more often than independent outcomes would."""
    cluster, naive = _coverage(trials=4, seed=2)
    assert 0.93 <= cluster <= 0.97, cluster
    assert naive < 0.88, naive


# ------------------------------------------------------------------------------ cluster bootstrap


def test_one_trial_per_item_is_the_binomial_bootstrap():
    """Resampling items of one outcome each is resampling outcomes: the same distribution, so the
    intervals agree up to Monte Carlo error."""
    cluster = cluster_rate_ci([(1, 1)] * 130 + [(1, 0)] * 70)
    plain = rate_ci(130, 200)
    assert cluster == pytest.approx(plain, abs=0.01)


def test_the_cluster_interval_is_wider_when_trials_agree():
    agreeing = [(5, 5)] * 60 + [(5, 0)] * 40  # every item all pass or all fail
    mixed = [(5, 3)] * 100  # every item 3 of 5: the same rate, no item-to-item variation
    width = [high - low for low, high in (cluster_rate_ci(agreeing), cluster_rate_ci(mixed))]
    assert width[0] > 2 * width[1]
    assert cluster_rate_ci(mixed) == (0.6, 0.6)  # every resample has the same rate


def test_cluster_rate_ci_edges():
    assert cluster_rate_ci([]) is None and cluster_rate_ci([(0, 0)]) is None
    assert cluster_rate_ci([(3, 3), (2, 2)]) == (1.0, 1.0)
    assert cluster_rate_ci([(3, 1), (2, 2)], seed=5) == cluster_rate_ci([(3, 1), (2, 2)], seed=5)
    with pytest.raises(ValueError):
        cluster_rate_ci([(2, 3)])
    with pytest.raises(ValueError):
        cluster_rate_ci([(2, 1)], level=1.0)


def test_unequal_trials_weight_items_by_their_trials():
    """The estimate is the pooled rate Σc / Σn, and the interval contains it."""
    counts = [(3, 3)] * 20 + [(1, 0)] * 20 + [(2, 1)] * 10
    low, high = cluster_rate_ci(counts)
    pooled = (60 + 10) / (60 + 20 + 20)
    assert low < pooled < high


def test_cluster_diff_ci_with_one_pair_per_item_is_the_paired_bootstrap():
    nets = [1] * 12 + [-1] * 5 + [0] * 83
    clustered = cluster_diff_ci(nets, [1] * 100)
    assert clustered == pytest.approx(paired_diff_ci(40, 5, 12, 43), abs=0.015)
    assert cluster_diff_ci([0, 0], [3, 3]) == (0.0, 0.0)
    assert cluster_diff_ci([], []) is None
    with pytest.raises(ValueError):
        cluster_diff_ci([1], [0])


def test_mean_upper_bound_is_one_sided():
    diffs = [-1.0] * 30 + [1.0] * 10 + [0.0] * 160
    upper = mean_upper_bound(diffs, level=0.95)
    _, high = cluster_diff_ci(diffs, [1] * 200, level=0.90)
    assert upper == pytest.approx(high, abs=0.005)  # the 95 % quantile, the top of a two-sided 90 % interval
    assert mean_upper_bound([0.0, 0.0]) == 0.0


def test_item_counts_give_the_interval_of_each_key():
    counts = ItemCounts()
    for item in range(50):
        for _ in range(3):
            counts.add("success", item, item < 30)
    low, high = counts.ci("success")
    assert low < 0.6 < high and counts.ci("unknown") is None


# ------------------------------------------------------------------------------ sign-flip test


def test_sign_flip_with_one_magnitude_is_mcnemar_exact():
    diffs = [1] * 3 + [-1] * 11 + [0] * 40
    assert sign_flip_p(diffs) == mcnemar_exact(11, 3)
    assert sign_flip_p(diffs, alternative="less") == sign_test_lower(3, 14)
    assert sign_flip_p([0.5, 0.5, -0.5]) == mcnemar_exact(1, 2)
    assert sign_flip_p([0, 0]) == 1.0


def test_sign_test_lower_is_the_binomial_cdf():
    for n in (1, 7, 30):
        for k in range(n + 1):
            expected = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
            assert sign_test_lower(k, n) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_sign_flip_monte_carlo_agrees_with_the_exact_distribution():
    """Two magnitudes: T* = 1·(2·B1 − 4) + 2·(2·B2 − 3); its exact lower tail by enumeration."""
    diffs = [-1, -1, -1, 1, -2, -2, -2]  # magnitude 1 four times, 2 three times
    total = sum(diffs)
    exact = 0.0
    for b1 in range(5):
        for b2 in range(4):
            if (2 * b1 - 4) + 2 * (2 * b2 - 3) <= total:
                exact += math.comb(4, b1) * math.comb(3, b2) / 2**7
    assert sign_flip_p(diffs, alternative="less", resamples=200_000) == pytest.approx(exact, abs=0.005)
    two_sided = sum(math.comb(4, b1) * math.comb(3, b2) / 2**7 for b1 in range(5) for b2 in range(4)
                    if abs((2 * b1 - 4) + 2 * (2 * b2 - 3)) >= abs(total))
    assert sign_flip_p(diffs, resamples=200_000) == pytest.approx(two_sided, abs=0.005)


def test_sign_flip_p_values_are_uniform_under_the_null():
    """Same agent in both runs (3 trials per item): P(p < 0.05) is at most 5 %, up to simulation error."""
    rng = np.random.default_rng(3)
    runs = 400
    p = np.stack([population(rng) for _ in range(runs)])
    diffs = (rng.binomial(3, p) - rng.binomial(3, p)) / 3
    rejected = sum(sign_flip_p(list(row), alternative="less", resamples=1000, seed=i) < 0.05
                   for i, row in enumerate(diffs))
    assert rejected / runs <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / runs)
