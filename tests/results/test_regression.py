"""``--max-regression`` tells a regression from noise (evalbench/results/summary/regression.py,
docs/ci.md "How --max-regression decides"): the per-item values a gate pairs, the decision
rule, and by simulation its false alarms (the same agent with other seeds) and its power (a
real drop of a stated size on a stated number of items).

The simulations are seeded and vectorised: items whose pass probabilities are very unequal
(tests/results/test_clustered.py's population), run once or three times per item."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalbench.results.summary.item_values import item_values
from evalbench.results.summary.regression import check_confidence, paired_regression, unpaired_regression
from tests.results.test_clustered import ITEMS, TRUE_RATE, population

PAIRS = 1000  # simulated (baseline, candidate) pairs per figure
RESAMPLES = 1000  # per decision: enough for a 95 % one-sided bound, fast


def _gate_passes(trials: int, drop: float, max_drop: float, seed: int, pairs: int = PAIRS) -> float:
    """Share of simulated pairs of runs of ITEMS items in which the gate passes. The candidate's
    per-item pass probabilities are the baseline's scaled by ``1 − drop / TRUE_RATE``, so the
    true rate falls by ``drop``."""
    rng = np.random.default_rng(seed)
    passes = 0
    for pair in range(pairs):
        p = population(rng)
        before = rng.binomial(trials, p) / trials
        after = rng.binomial(trials, p * (1 - drop / TRUE_RATE)) / trials
        decision = paired_regression(dict(enumerate(before)), dict(enumerate(after)), max_drop,
                                     resamples=RESAMPLES, seed=pair)
        passes += not decision.regressed
    return passes / pairs


def _floor(rate: float, n: int) -> float:
    """``rate`` less three standard errors of a share estimated from ``n`` simulations."""
    return rate - 3 * math.sqrt(rate * (1 - rate) / n)


@pytest.mark.parametrize("trials", [1, 3])
def test_the_same_agent_with_other_seeds_passes_in_at_least_95_percent_of_pairs(trials):
    """With 2 points allowed the gate passes the same agent in about 99 % of pairs (measured over
    1000 pairs with other seeds: 98.5 % to 99.4 %). With no drop allowed it is a one-sided 5 %
    test, so it passes in at least 95 % of pairs up to simulation error (measured: 95.3 % to 96.7 %)."""
    assert _gate_passes(trials, drop=0.0, max_drop=0.02, seed=10 + trials, pairs=600) >= 0.97
    assert _gate_passes(trials, drop=0.0, max_drop=0.0, seed=20 + trials) >= _floor(0.95, PAIRS)


def test_a_drop_of_15_points_on_200_items_is_caught():
    """One trial per item, 2 points allowed: a true drop of 15 points is caught in about 95 % of
    pairs, 10 points in about 71 %; with three trials per item 10 points are caught in about 98 %
    (measured over 500 pairs, two seeds each)."""
    assert ITEMS == 200
    assert 1 - _gate_passes(1, drop=0.15, max_drop=0.02, seed=30, pairs=500) >= 0.90
    assert 1 - _gate_passes(1, drop=0.10, max_drop=0.02, seed=31, pairs=500) >= 0.55
    assert 1 - _gate_passes(3, drop=0.10, max_drop=0.02, seed=32, pairs=500) >= 0.93


def test_a_drop_within_the_allowed_one_is_rarely_failed():
    """A true drop of exactly the allowed 5 points fails in at most 5 % of pairs (the bound's level)."""
    assert _gate_passes(1, drop=0.05, max_drop=0.05, seed=40, pairs=500) >= _floor(0.95, 500)


# ------------------------------------------------------------------------------ the rule


def test_the_bound_alone_is_not_enough_when_few_items_differ():
    """3 of 40 items regressed, none improved: the bootstrap bound is below −2 points, but the exact
    sign test gives p = 1/8, so the gate passes."""
    baseline = {i: 1.0 for i in range(40)}
    current = {i: (0.0 if i < 3 else 1.0) for i in range(40)}
    decision = paired_regression(baseline, current, 0.02)
    assert decision.upper is not None and decision.upper < -0.02
    assert decision.p_value == pytest.approx(1 / 8) and not decision.regressed
    worse = {i: (0.0 if i < 8 else 1.0) for i in range(40)}  # 8 of 40: p = 1/256
    assert paired_regression(baseline, worse, 0.02).regressed


def test_only_items_in_both_runs_are_paired():
    baseline = {"a": 1.0, "b": 1.0, "c": 0.0}
    current = {"b": 1.0, "c": 0.0, "d": 0.0}
    decision = paired_regression(baseline, current, 0.0)
    assert decision.items == 2 and decision.diff == 0.0 and not decision.regressed
    assert "paired over 2 item(s)" in decision.message
    disjoint = paired_regression({"a": 1.0}, {"b": 0.0}, 0.5)
    assert disjoint.how == "point" and disjoint.regressed and "no item has a value in both runs" in disjoint.message


def test_the_unpaired_fallback_uses_the_summaries_intervals_or_says_it_compares_points():
    reason = "the baseline has no journal"
    within = unpaired_regression(0.70, [0.60, 0.80], 0.66, [0.56, 0.76], 0.02, reason)
    assert within.how == "unpaired" and not within.regressed and reason in within.message
    beyond = unpaired_regression(0.90, [0.86, 0.94], 0.60, [0.55, 0.65], 0.02, reason)
    assert beyond.regressed
    point = unpaired_regression(2.0, None, 1.0, None, 0.5, reason)
    assert point.how == "point" and point.regressed and "point comparison" in point.message


@pytest.mark.parametrize("level", [0.5, 1.0, 1.5, float("nan")])
def test_a_confidence_level_is_above_half_and_below_one(level):
    with pytest.raises(ValueError, match="confidence level"):
        check_confidence(level)


# ------------------------------------------------------------------------------ per-item values


def _record(item: str, trial: int, passed: bool | None, **extra: object) -> dict[str, object]:
    scores = {"exec_match": {"applicable": passed is not None, "passed": passed, "value": None},
              "turn_count": {"applicable": True, "passed": None, "value": 2.0 + trial}}
    return {"item_id": item, "dialect": "postgres", "trial": trial, "outcome": "scored", "reward": 0.5 * bool(passed),
            "phases": [{"phase": "main", "passed": passed, "scores": scores}], **extra}


def test_item_values_are_means_over_trials():
    records = [_record("a", 1, True), _record("a", 2, False), _record("a", 3, True), _record("b", 1, False),
               _record("b", 2, False), _record("c", 1, None), _record("d", 1, True, outcome="invalid_item")]
    values = item_values(records, ["success", "exec_match", "turn_count", "mean_reward", "pass_hat_k.2", "consistency"])
    a, b = ("postgres", "a"), ("postgres", "b")
    assert values["success"] == {a: pytest.approx(2 / 3), b: 0.0}  # c: no verdict; d: invalid
    assert values["exec_match"] == values["success"]
    assert values["turn_count"][a] == pytest.approx(4.0) and values["turn_count"][b] == pytest.approx(3.5)
    assert values["mean_reward"][a] == pytest.approx(1 / 3) and ("postgres", "c") in values["mean_reward"]
    assert values["pass_hat_k.2"] == {a: pytest.approx(1 / 3), b: 0.0}  # C(2, 2) / C(3, 2)
    assert values["consistency"] == {a: 0.0, b: 1.0}
