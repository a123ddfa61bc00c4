"""Repeated trials (``trials: k``): pass@k, pass^k and per-item consistency.

A trial passes when every phase of its conversation passed (a conversation that ended early
fails; an invalid item, or a conversation no pass/fail scorer judged, is left out). For an item
with ``n`` judged trials of which ``c`` passed, and ``k ≤ n``:

- pass^k = C(c, k) / C(n, k): the chance that k trials drawn without replacement all pass
  (tau-bench's reliability metric, Yao et al. 2024);
- pass@k = 1 − C(n − c, k) / C(n, k): the chance that at least one of them passes (the
  unbiased estimator of Chen et al. 2021).

Each is the mean over the items with at least ``k`` judged trials, with a percentile bootstrap
interval over items (seeded: the same journal always gives the same interval). An item is
*consistent* when its trials all agree (all pass or all fail).
"""

from __future__ import annotations

from math import comb
from typing import Any, TypedDict

from evalbench.results.journal.lines import invalid_reason, phase_passed, trial_of
from evalbench.results.summary.stats import rate_ci

MAX_LISTED = 1000  # inconsistent items listed in summary.json
RESAMPLES = 2000


class MeanCi(TypedDict):
    """A pass^k or pass@k figure: over how many items, the mean and its bootstrap interval."""

    items: int
    rate: float | None
    ci95: list[float] | None


def trial_passed(record: dict[str, Any]) -> bool | None:
    """Whether one trial passed: every phase passed; None when it cannot be judged."""
    if record.get("outcome") == "invalid_item" or not record.get("phases"):
        return None if record.get("outcome") == "invalid_item" else False
    verdicts = [phase_passed(phase) for phase in record["phases"] if invalid_reason(record, phase) is None]
    if any(v is False for v in verdicts):
        return False
    return True if verdicts and all(v is True for v in verdicts) else None


class TrialTally:
    """Judged trials and passes per item (only kept for runs with trials: memory grows with
    the number of items, by two small integers each)."""

    def __init__(self, trials: int) -> None:
        self.trials = trials
        self.items: dict[tuple[object, str], list[int]] = {}  # (dialect, item id) -> [judged, passed]
        self.max_trial = 0

    def add(self, record: dict[str, Any]) -> None:
        self.max_trial = max(self.max_trial, trial_of(record))
        passed = trial_passed(record)
        if passed is None:
            return
        counts = self.items.setdefault((record.get("dialect"), record["item_id"]), [0, 0])
        counts[0] += 1
        counts[1] += passed

    def result(self) -> dict[str, object]:
        k_max = max(self.trials, self.max_trial)
        per_k: dict[str, dict[str, MeanCi]] = {"pass_hat_k": {}, "pass_at_k": {}}
        for k in range(1, k_max + 1):
            eligible = [(n, c) for n, c in self.items.values() if n >= k]
            per_k["pass_hat_k"][str(k)] = _mean_ci([comb(c, k) / comb(n, k) for n, c in eligible], k)
            per_k["pass_at_k"][str(k)] = _mean_ci([1 - comb(n - c, k) / comb(n, k) for n, c in eligible], k)
        repeated = {key: nc for key, nc in self.items.items() if nc[0] >= 2}
        consistent = sum(1 for n, c in repeated.values() if c in (0, n))
        ci = rate_ci(consistent, len(repeated))
        inconsistent = sorted(((key, n, c) for key, (n, c) in repeated.items() if c not in (0, n)),
                              key=lambda entry: (str(entry[0][0]), entry[0][1]))
        return {
            "trials": self.trials,
            "items": len(self.items),
            **per_k,
            "consistency": {"items": len(repeated), "consistent": consistent,
                            "rate": consistent / len(repeated) if repeated else None,
                            "ci95": list(ci) if ci else None,
                            "mean_agreement": (sum(max(c, n - c) / n for n, c in repeated.values()) / len(repeated)
                                               if repeated else None)},
            "inconsistent_items": [{"item_id": key[1], "dialect": key[0], "trials": n, "passed": c}
                                   for key, n, c in inconsistent[:MAX_LISTED]],
        }


def _mean_ci(values: list[float], k: int) -> MeanCi:
    if not values:
        return {"items": 0, "rate": None, "ci95": None}
    import numpy as np

    array = np.asarray(values, dtype=float)
    rng = np.random.default_rng(k)
    chunk = max(1, min(RESAMPLES, 2_000_000 // len(array)))  # bounded memory whatever the number of items
    draws = np.concatenate([rng.choice(array, size=(min(chunk, RESAMPLES - done), len(array))).mean(axis=1)
                            for done in range(0, RESAMPLES, chunk)])
    low, high = np.quantile(draws, [0.025, 0.975])
    return {"items": len(values), "rate": float(array.mean()), "ci95": [float(low), float(high)]}


def trials_lines(summary: dict[str, Any]) -> list[str]:
    """The trials' figures as lines for the console and summary.md (none for a run without trials)."""
    info = summary.get("trials")
    if not isinstance(info, dict):
        return []

    def figure(entry: dict[str, Any]) -> str:
        if entry.get("rate") is None:
            return "—"
        ci = entry.get("ci95")
        return f"{100 * entry['rate']:.1f}%" + (f" [{100 * ci[0]:.1f}–{100 * ci[1]:.1f}]" if ci else "")

    hat = ", ".join(f"pass^{k} {figure(e)}" for k, e in (info.get("pass_hat_k") or {}).items())
    at = ", ".join(f"pass@{k} {figure(e)}" for k, e in (info.get("pass_at_k") or {}).items())
    consistency = info.get("consistency") or {}
    lines = [f"trials: {info.get('trials')} per item, {info.get('items')} items judged; {hat}", f"trials: {at}"]
    if consistency.get("items"):
        lines.append(f"trials: consistent items {consistency['consistent']}/{consistency['items']} "
                     f"({figure(consistency)}), mean agreement {100 * consistency['mean_agreement']:.1f}% "
                     "(summary.json: trials.inconsistent_items)")
    return lines
