"""Whether a run regressed against its baseline by more than an allowed drop, telling a real
drop from noise (``--max-regression``, docs/ci.md). Pure functions, no I/O.

**Paired** (both journals at hand): the ``m`` items with a value in both runs
(:mod:`evalbench.results.summary.item_values`: the mean over the item's trials) give
``d_i = current_i − baseline_i`` and ``Δ̂ = (1/m) Σ d_i``. With confidence level ``L`` and allowed
drop ``δ`` the gate fails when both hold:

1. the upper bound ``U_L`` of ``Δ`` is below ``−δ``, where ``U_L`` is the ``L``-quantile of ``Δ̂``
   over bootstrap replicates that resample the items with replacement (all trials of an item
   travel together: :func:`~evalbench.results.summary.clustered.mean_upper_bound`);
2. the one-sided sign-flip test of the ``d_i`` finds a drop: ``p < 1 − L``, with
   ``p = P(Σ ε_i |d_i| ≤ Σ d_i)`` over independent fair signs ``ε_i``
   (:func:`~evalbench.results.summary.clustered.sign_flip_p`; exact, McNemar's one-sided test,
   when every item has one trial in each run).

The test bounds the false alarms: when the two runs are the same agent (same per-item pass
probabilities, other seeds) the gate fails in at most ``1 − L`` of pairs of runs, whatever ``δ``
(with ``δ > 0`` far fewer), while a percentile bound alone is optimistic when few items differ
(3 of 40 items regressed and none improved: the bound is below zero, the exact test gives
p = 0.125).

**Unpaired** (the baseline has no journal, only ``summary.json``): a normal approximation from
the two summaries' 95 % intervals, ``se = (high − low) / (2 · 1.96)``, and
``U_L = Δ̂ + z_L · √(se_baseline² + se_current²)``; the gate fails when ``U_L < −δ``. It ignores
the pairing, so it is wider than the paired bound (it misses smaller drops). Without an interval
(a mean such as ``turn_count`` or ``mean_reward``) it is a **point** comparison: the gate fails
when the drop exceeds ``δ``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TypeVar

from evalbench.results.summary.clustered import mean_upper_bound, sign_flip_p

__all__ = ["DEFAULT_CONFIDENCE", "Regression", "check_confidence", "paired_regression", "unpaired_regression"]

DEFAULT_CONFIDENCE = 0.95
K = TypeVar("K", bound=Hashable)  # an item
RESAMPLES = 10_000
SEED = 0  # fixed: the same two journals always give the same decision
EPSILON = 1e-12  # a drop exactly at the allowed one is allowed


@dataclass(frozen=True)
class Regression:
    """A ``--max-regression`` decision: ``regressed`` fails the gate; ``how`` is ``paired``,
    ``unpaired`` or ``point``; ``message`` says what was computed."""

    regressed: bool
    how: str
    message: str
    diff: float | None = None  # current − baseline over what was compared
    upper: float | None = None  # upper confidence bound of the change
    p_value: float | None = None  # one-sided sign-flip p-value of a drop
    items: int = 0  # paired items


def check_confidence(level: float) -> float:
    """``level`` when it is a confidence level a gate can use (above 0.5, below 1); ValueError otherwise."""
    if not 0.5 < level < 1.0:
        raise ValueError(f"a confidence level is above 0.5 and below 1 (0.95 or 95%), got {level:g}")
    return level


def _pct(level: float) -> str:
    return f"{100 * level:g}%"


def paired_regression(baseline: Mapping[K, float], current: Mapping[K, float], max_drop: float, *,
                      confidence: float = DEFAULT_CONFIDENCE, resamples: int = RESAMPLES, seed: int = SEED) -> Regression:
    """The paired decision over the items present in both mappings (see the module docstring);
    with no item in both, an unpaired point comparison of the two means."""
    check_confidence(confidence)
    items = [item for item in current if item in baseline]
    if not items:
        return _point(_mean(baseline.values()), _mean(current.values()), max_drop, "no item has a value in both runs")
    diffs = [current[item] - baseline[item] for item in items]
    diff = sum(diffs) / len(diffs)
    upper = mean_upper_bound(diffs, level=confidence, resamples=resamples, seed=seed)
    p_value = sign_flip_p(diffs, alternative="less", resamples=2 * resamples, seed=seed)
    regressed = upper < -max_drop - EPSILON and p_value < 1.0 - confidence
    verdict = (f"a drop beyond the allowed {max_drop:.4g} with {_pct(confidence)} confidence" if regressed
               else f"not shown to drop by more than the allowed {max_drop:.4g} at {_pct(confidence)} confidence")
    message = (f"paired over {len(items)} item(s): change {diff:+.4g}, {_pct(confidence)} upper bound {upper:+.4g}, "
               f"one-sided sign-flip p = {p_value:.3g}; {verdict}")
    return Regression(regressed, "paired", message, diff, upper, p_value, len(items))


def unpaired_regression(before: float, before_ci: Sequence[float] | None, actual: float, actual_ci: Sequence[float] | None,
                        max_drop: float, reason: str, *, confidence: float = DEFAULT_CONFIDENCE) -> Regression:
    """The decision from the two summaries alone (``reason``: why items cannot be paired)."""
    check_confidence(confidence)
    if not _interval(before_ci) or not _interval(actual_ci):
        return _point(before, actual, max_drop, reason)
    assert before_ci is not None and actual_ci is not None
    z95 = NormalDist().inv_cdf(0.975)
    se = ((before_ci[1] - before_ci[0]) ** 2 + (actual_ci[1] - actual_ci[0]) ** 2) ** 0.5 / (2 * z95)
    diff = actual - before
    upper = diff + NormalDist().inv_cdf(confidence) * se
    regressed = upper < -max_drop - EPSILON
    verdict = "beyond" if regressed else "not shown beyond"
    message = (f"{reason}: unpaired bound from the two summaries' 95% intervals, {_pct(confidence)} upper bound "
               f"{upper:+.4g} ({verdict} the allowed drop of {max_drop:.4g})")
    return Regression(regressed, "unpaired", message, diff, upper)


def _point(before: float | None, actual: float | None, max_drop: float, reason: str) -> Regression:
    if before is None or actual is None:
        return Regression(True, "point", f"{reason}, and a run has no value to compare")
    diff = actual - before
    regressed = -diff > max_drop + EPSILON
    return Regression(regressed, "point", f"{reason}, and the summaries give no interval: point comparison "
                      f"({'beyond' if regressed else 'within'} the allowed drop of {max_drop:.4g})", diff)


def _interval(ci: Sequence[float] | None) -> bool:
    return (isinstance(ci, (list, tuple)) and len(ci) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in ci))


def _mean(values: Iterable[float]) -> float | None:
    numbers = list(values)
    return sum(numbers) / len(numbers) if numbers else None
