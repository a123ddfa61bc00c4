"""Statistics for pass rates and for paired comparisons of two runs. Pure functions, no I/O.

Both bootstraps work from counts alone, so no per-item storage is needed:

- resampling n Bernoulli outcomes with replacement gives a Binomial(n, p̂) number of passes,
  so a bootstrap replicate of a pass rate is one Binomial(n, p̂) / n draw;
- resampling n aligned items with replacement gives a Multinomial(n, cell shares) draw over
  the four cells of the paired 2×2 table (both pass, A only, B only, neither).

Intervals are percentile intervals (the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles
of the replicates, linear interpolation), drawn from ``numpy.random.default_rng(seed)``, so a
given seed always gives the same interval. Like every percentile bootstrap they collapse to a
point when the observed rate is 0 or 1 (or when no pair is discordant).

McNemar's test is the exact (conditional) form: a two-sided binomial test of the discordant
pairs against p = 1/2, computed with integers (logs beyond ``EXACT_LIMIT`` discordant pairs).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["EXACT_LIMIT", "mcnemar_exact", "paired_diff_ci", "rate_ci", "sign_test_lower"]

EXACT_LIMIT = 20_000  # discordant pairs up to which McNemar's p-value is summed in integers


def _check_bootstrap(level: float, resamples: int) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be between 0 and 1 (exclusive), got {level}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")


def _percentiles(draws: npt.NDArray[np.float64], level: float) -> tuple[float, float]:
    import numpy as np

    low, high = np.quantile(draws, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(low), float(high)


def rate_ci(passed: int, total: int, *, level: float = 0.95, resamples: int = 10_000, seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap confidence interval of the pass rate ``passed / total``.

    Each replicate is a Binomial(total, passed/total) / total draw, which is exactly the rate of
    ``total`` outcomes resampled with replacement. Returns ``(lower, upper)`` within [0, 1], or
    None when ``total`` is 0 (no rate to bound).
    """
    if total < 0 or not 0 <= passed <= total:
        raise ValueError(f"need 0 <= passed <= total, got passed={passed}, total={total}")
    _check_bootstrap(level, resamples)
    if total == 0:
        return None
    import numpy as np

    rng = np.random.default_rng(seed)
    draws = rng.binomial(total, passed / total, size=resamples) / total
    low, high = _percentiles(draws, level)
    return max(0.0, low), min(1.0, high)


def _lower_tail_exact(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2), summed in integers and divided once (correctly rounded)."""
    term, total = 1, 1  # C(n, 0)
    for i in range(k):
        term = term * (n - i) // (i + 1)  # C(n, i + 1), exact
        total += term
    return float(Fraction(total, 1 << n))


def _lower_tail_log(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2) summed in log space (for large n)."""
    base = math.lgamma(n + 1) - n * math.log(2.0)

    def log_term(i: int) -> float:
        return base - math.lgamma(i + 1) - math.lgamma(n - i + 1)

    top = log_term(k)  # terms grow up to i = k (k < n / 2), so the last one is the largest
    return math.exp(top) * math.fsum(math.exp(log_term(i) - top) for i in range(k + 1))


def sign_test_lower(k: int, n: int) -> float:
    """``P(X <= k)`` for ``X ~ Binomial(n, 1/2)``: the one-sided exact sign test (McNemar's
    one-sided form) of ``k`` successes out of ``n``; exact in integers up to ``EXACT_LIMIT``."""
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if 2 * k >= n:  # by symmetry P(X <= k) = 1 - P(X <= n - k - 1), whose terms grow to the end
        return 1.0 if k == n else 1.0 - sign_test_lower(n - k - 1, n)
    return _lower_tail_exact(k, n) if n <= EXACT_LIMIT else _lower_tail_log(k, n)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` and ``c`` discordant pairs.

    ``p = min(1, 2 * P(X <= min(b, c)))`` with ``X ~ Binomial(b + c, 1/2)``: the binomial
    (sign) test of the discordant pairs. 1.0 when there is no discordant pair.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    if 2 * k >= n:  # b == c: the lower tail already holds at least half the mass
        return 1.0
    tail = _lower_tail_exact(k, n) if n <= EXACT_LIMIT else _lower_tail_log(k, n)
    return min(1.0, 2.0 * tail)


def paired_diff_ci(n11: int, n10: int, n01: int, n00: int, *, level: float = 0.95, resamples: int = 10_000,
                   seed: int = 0) -> tuple[float, float] | None:
    """Paired percentile bootstrap confidence interval of ``rate(B) - rate(A)`` over aligned items.

    Cells: ``n11`` both passed, ``n10`` A passed and B failed, ``n01`` A failed and B passed,
    ``n00`` both failed. Each replicate resamples the ``n`` items with replacement, which is one
    Multinomial(n, cells / n) draw; its difference is ``(m01 - m10) / n``. Returns
    ``(lower, upper)`` within [-1, 1], or None when there is no pair.
    """
    cells = (n11, n10, n01, n00)
    if any(cell < 0 for cell in cells):
        raise ValueError(f"cell counts must be >= 0, got {cells}")
    _check_bootstrap(level, resamples)
    n = sum(cells)
    if n == 0:
        return None
    if n10 == 0 and n01 == 0:
        return 0.0, 0.0  # every replicate has no discordant pair
    import numpy as np

    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, [cell / n for cell in cells], size=resamples)
    diffs = (draws[:, 2] - draws[:, 1]) / n
    low, high = _percentiles(diffs, level)
    return max(-1.0, low), min(1.0, high)
