"""Statistics that take the item as the unit: a run with ``k`` trials per item holds ``k``
correlated outcomes of each item, not ``k`` independent ones. Pure functions, no I/O.

- **Cluster bootstrap of a ratio**: item ``i`` contributes a numerator ``x_i`` (passes, or a net
  difference) and a weight ``w_i`` (judged trials, or paired trials); the estimate is
  ``Σ x_i / Σ w_i`` (with equal weights, the mean of the per-item values). A replicate resamples
  the ``m`` items with replacement and recomputes the ratio. Items with the same ``(x, w)`` are
  interchangeable, so a replicate is one ``Multinomial(m, shares of the distinct (x, w))`` draw:
  memory grows with the number of distinct pairs (at most ``(k + 1)(k + 2) / 2`` for a rate with
  ``k`` trials), not with the number of items. With one trial per item this is exactly the
  ``Binomial(n, p̂) / n`` bootstrap of :func:`~evalbench.results.summary.stats.rate_ci`.
  Intervals are percentile intervals (linear interpolation) of replicates drawn from
  ``numpy.random.default_rng(seed)``; a one-sided upper bound at level ``L`` is the
  ``L``-quantile of the replicates.
- **Sign-flip (randomization) test** of paired per-item differences ``d_i``: if the two runs
  are the same agent, swapping them within an item flips the sign of ``d_i``, so under that null
  ``T = Σ d_i`` is distributed as ``T* = Σ ε_i |d_i|`` with independent fair signs ``ε_i``.
  When every non-zero ``|d_i|`` is the same (one trial per item: ``d_i ∈ {-1, 0, 1}``) the null
  is a binomial and the p-value is exact: McNemar's exact test
  (:func:`~evalbench.results.summary.stats.mcnemar_exact`). Otherwise it is a Monte Carlo
  p-value ``(1 + #{T* as extreme as T}) / (1 + R)``, which is a valid test at every level
  (seeded, so the same data always give the same p).

References: Efron & Tibshirani (1993), *An Introduction to the Bootstrap*, ch. 13 (percentile
intervals) and ch. 15 (permutation tests); Field & Welsh (2007), "Bootstrapping clustered data",
JRSS B 69(3) (resampling clusters); E. Miller (2024), "Adding error bars to evals" (clustered
standard errors when questions are repeated or grouped).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from evalbench.results.summary.stats import mcnemar_exact, sign_test_lower

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["ItemCounts", "cluster_diff_ci", "cluster_rate_ci", "mean_upper_bound", "sign_flip_p"]

DIGITS = 9  # per-item values are grouped after rounding to this many decimals (float noise of means)
CELLS = 2_000_000  # numbers drawn per chunk: bounded memory whatever the number of items


def _check(level: float, resamples: int) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be between 0 and 1 (exclusive), got {level}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")


def _ratio_replicates(x: Sequence[float], w: Sequence[float], resamples: int, seed: int) -> npt.NDArray[np.float64]:
    """``Σ x* / Σ w*`` over ``resamples`` resamplings of the items with replacement."""
    import numpy as np

    pairs = np.round(np.column_stack([np.asarray(x, dtype=float), np.asarray(w, dtype=float)]), DIGITS)
    patterns, counts = np.unique(pairs, axis=0, return_counts=True)
    rng = np.random.default_rng(seed)
    chunk = max(1, CELLS // len(patterns))
    out = []
    for done in range(0, resamples, chunk):
        draws = _multinomial(rng, counts, min(chunk, resamples - done))
        out.append((draws @ patterns[:, 0]) / (draws @ patterns[:, 1]))
    return np.concatenate(out)


def _multinomial(rng: np.random.Generator, counts: npt.NDArray[np.int64], size: int) -> npt.NDArray[np.int64]:
    """``size`` draws of Multinomial(Σ counts, counts / Σ counts), one row each: category by
    category as conditional binomials, vectorised over the draws (``Generator.multinomial``
    loops over them)."""
    import numpy as np

    left = np.full(size, int(counts.sum()))
    remaining = float(counts.sum())
    draws = np.zeros((size, len(counts)), dtype=np.int64)
    for j, count in enumerate(counts[:-1]):
        share = min(1.0, count / remaining) if remaining > 0 else 0.0
        draws[:, j] = rng.binomial(left, share)
        left -= draws[:, j]
        remaining -= count
    draws[:, -1] = left
    return draws


def _interval(replicates: npt.NDArray[np.float64], level: float) -> tuple[float, float]:
    import numpy as np

    low, high = np.quantile(replicates, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(low), float(high)


def cluster_rate_ci(counts: Sequence[tuple[int, int]], *, level: float = 0.95, resamples: int = 10_000,
                    seed: int = 0) -> tuple[float, float] | None:
    """Percentile cluster-bootstrap interval of the pooled pass rate ``Σ c_i / Σ n_i`` from the
    per-item ``(n_i judged, c_i passed)``, resampling items. None without a judged item."""
    _check(level, resamples)
    judged = [(n, c) for n, c in counts if n > 0]
    if any(not 0 <= c <= n for n, c in judged):
        raise ValueError("need 0 <= passed <= judged for every item")
    if not judged:
        return None
    low, high = _interval(_ratio_replicates([c for _, c in judged], [n for n, _ in judged], resamples, seed), level)
    return max(0.0, low), min(1.0, high)


def cluster_diff_ci(nets: Sequence[float], weights: Sequence[float], *, level: float = 0.95, resamples: int = 10_000,
                    seed: int = 0) -> tuple[float, float] | None:
    """Percentile cluster-bootstrap interval of the paired difference ``Σ net_i / Σ weight_i``
    (item ``i``: ``weight_i`` paired trials, ``net_i`` = improvements − regressions among them),
    resampling items. None without an item."""
    _check(level, resamples)
    if len(nets) != len(weights):
        raise ValueError("nets and weights must have the same length")
    if any(w <= 0 for w in weights):
        raise ValueError("every weight must be positive")
    if not nets:
        return None
    if not any(nets):
        return 0.0, 0.0  # every replicate is zero
    return _interval(_ratio_replicates(nets, weights, resamples, seed), level)


def mean_upper_bound(diffs: Sequence[float], *, level: float = 0.95, resamples: int = 10_000, seed: int = 0) -> float:
    """One-sided upper confidence bound at ``level`` of the mean of the per-item differences:
    the ``level``-quantile of the item-resampled means (percentile bootstrap)."""
    _check(level, resamples)
    if not diffs:
        raise ValueError("no difference to bound")
    if not any(diffs):
        return 0.0
    import numpy as np

    return float(np.quantile(_ratio_replicates(diffs, [1.0] * len(diffs), resamples, seed), level))


def sign_flip_p(diffs: Sequence[float], *, alternative: Literal["less", "two-sided"] = "two-sided",
                resamples: int = 20_000, seed: int = 0) -> float:
    """p-value of the paired sign-flip test of per-item differences against "no difference":
    ``less`` tests for a negative sum (a drop), ``two-sided`` for any. Exact (the binomial sign
    test, McNemar's) when all non-zero ``|d_i|`` are equal; Monte Carlo otherwise."""
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    import numpy as np

    d = np.round(np.asarray(diffs, dtype=float), DIGITS)
    d = d[d != 0]
    if d.size == 0:
        return 1.0
    magnitudes, counts = np.unique(np.abs(d), return_counts=True)
    if len(magnitudes) == 1:  # T* = |d| (2 B - n) with B ~ Binomial(n, 1/2): exact
        positive, negative = int((d > 0).sum()), int((d < 0).sum())
        return mcnemar_exact(negative, positive) if alternative == "two-sided" else sign_test_lower(positive, len(d))
    total = float(d.sum())
    tolerance = 1e-7 * (1.0 + float(np.abs(d).sum()))  # sums of rounded values: float noise, not a difference
    rng = np.random.default_rng(seed)
    chunk = max(1, CELLS // len(magnitudes))
    extreme = 0
    for done in range(0, resamples, chunk):
        heads = rng.binomial(counts, 0.5, size=(min(chunk, resamples - done), len(magnitudes)))
        flipped = (2 * heads - counts) @ magnitudes
        if alternative == "less":
            extreme += int((flipped <= total + tolerance).sum())
        else:
            extreme += int((np.abs(flipped) >= abs(total) - tolerance).sum())
    return (1 + extreme) / (1 + resamples)


class ItemCounts:
    """Judged and passed outcomes per item under each key (a scorer's phase, a slice), kept for
    runs with trials so that their intervals resample items: memory grows with items × keys."""

    def __init__(self) -> None:
        self.keys: dict[object, dict[object, list[int]]] = {}

    def add(self, key: object, item: object, passed: bool) -> None:
        counts = self.keys.setdefault(key, {}).setdefault(item, [0, 0])
        counts[0] += 1
        counts[1] += passed

    def ci(self, key: object, *, level: float = 0.95) -> tuple[float, float] | None:
        """The cluster-bootstrap interval of the key's pooled rate (None when nothing was judged)."""
        return cluster_rate_ci([(n, c) for n, c in self.keys.get(key, {}).values()], level=level)
