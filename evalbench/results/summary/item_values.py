"""Per-item values of a gate metric, read from a run's journal: what ``--max-regression`` pairs
between a run and its baseline (:mod:`evalbench.results.summary.regression`).

An item is ``(dialect, item_id)``; its value is the mean over its trials (one trial: the trial's
value) of what the summary averages over conversations, so that with the same number of trials
per item the mean of the item values is the summary's figure:

- ``<scorer>[.phase]``: 1 when a pass/fail scorer passed the phase, 0 when it failed (where it
  applies); a metric scorer's value (``turn_count``);
- ``success[.phase]``: the phase's own verdict (phases no pass/fail scorer judged are left out);
- ``mean_reward``: the conversation's reward;
- ``pass_hat_k.K``, ``pass_at_k.K``: ``C(c, K) / C(n, K)`` and ``1 − C(n − c, K) / C(n, K)`` of
  the item's ``n`` judged trials of which ``c`` passed (items with ``n ≥ K``); ``consistency``:
  1 when the item's trials (at least two) all agree.

Invalid items (and invalid follow-up phases) have no value, as in the summary.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from math import comb
from pathlib import Path
from typing import Any

from evalbench.results.journal.lines import invalid_reason, phase_passed
from evalbench.results.journal.reader import read_journal
from evalbench.results.summary.trials import trial_passed

__all__ = ["Item", "item_values", "journal_item_values"]

Item = tuple[object, str]  # (dialect, item id)
TRIAL_METRICS = ("pass_hat_k", "pass_at_k", "consistency")
INVALID = "invalid_item"


def _phase(record: dict[str, Any], name: str) -> dict[str, Any] | None:
    for phase in record.get("phases") or []:
        if phase.get("phase") == name and invalid_reason(record, phase) is None:
            found: dict[str, Any] = phase
            return found
    return None


def _value(record: dict[str, Any], name: str, phase_name: str) -> float | None:
    """One conversation's value of the metric ``name`` (a scorer, ``success`` or ``mean_reward``)."""
    if name == "mean_reward":
        return float(record.get("reward") or 0.0)
    phase = _phase(record, phase_name)
    if phase is None:
        return None
    if name == "success":
        passed = phase_passed(phase)
        return None if passed is None else float(passed)
    score = (phase.get("scores") or {}).get(name)
    if not isinstance(score, dict) or not score.get("applicable"):
        return None
    if score.get("passed") is not None:
        return float(bool(score["passed"]))
    value = score.get("value")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _trial_value(name: str, k: int, judged: int, passed: int) -> float | None:
    if name == "consistency":
        return float(passed in (0, judged)) if judged >= 2 else None
    if judged < k:
        return None
    if name == "pass_hat_k":
        return comb(passed, k) / comb(judged, k)
    return 1.0 - comb(judged - passed, k) / comb(judged, k)


def item_values(records: Iterable[dict[str, Any]], metrics: Sequence[str]) -> dict[str, dict[Item, float]]:
    """For each metric, the value of every item that has one (see the module docstring)."""
    sums: dict[str, dict[Item, list[float]]] = {metric: {} for metric in metrics}
    for record in records:
        if record.get("outcome") == INVALID:
            continue
        item = (record.get("dialect"), str(record["item_id"]))
        for metric in metrics:
            name, _, phase = metric.partition(".")
            value: float | None
            if name in TRIAL_METRICS:
                passed = trial_passed(record)  # pooled per item below
                value = None if passed is None else float(passed)
            else:
                value = _value(record, name, phase or "main")
            if value is not None:
                acc = sums[metric].setdefault(item, [0.0, 0])
                acc[0] += value
                acc[1] += 1
    out: dict[str, dict[Item, float]] = {}
    for metric, per_item in sums.items():
        name, _, k = metric.partition(".")
        if name in TRIAL_METRICS:
            values = {item: _trial_value(name, int(k) if k.isdigit() else 1, int(judged), int(passed))
                      for item, (passed, judged) in per_item.items()}
            out[metric] = {item: value for item, value in values.items() if value is not None}
        else:
            out[metric] = {item: total / count for item, (total, count) in per_item.items()}
    return out


def journal_item_values(run_dir: Path, metrics: Sequence[str]) -> dict[str, dict[Item, float]]:
    """:func:`item_values` of ``run_dir``'s journal (read as :func:`~evalbench.results.read_journal` reads it)."""
    return item_values(read_journal(run_dir), metrics)
