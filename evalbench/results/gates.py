"""CI gates: thresholds on a run's summary that decide the exit code.

A metric is named ``<scorer>`` (its main-phase pass rate), ``<scorer>.<phase>``, ``success``
(the main phase's own verdict) or ``success.follow_up``, ``mean_reward``, or any metric scorer's
mean (``turn_count``); with repeated trials also ``pass_hat_k.K`` (pass^K), ``pass_at_k.K`` and
``consistency`` (docs/runs.md). Values are fractions (``0.6``) or percentages (``60%``); a delta
``5%`` is 0.05 of a rate. A bare number above 1 on a rate is an error (``success=80`` is a gate
that can never pass: write ``80%``); a mean metric (``turn_count``) takes any bare number.

- ``--fail-under exec_match=0.6``: fails when the metric is below 0.6.
- ``--baseline RUN --max-regression exec_match=2%``: fails when the metric fell by more than
  two points since the baseline run *with confidence*: the items of both journals are paired
  and the gate fails only when the drop is beyond two points at ``--regression-confidence``
  (default 95 %) and a paired sign-flip test finds it
  (:mod:`evalbench.results.summary.regression`, the exact rule). A baseline with no journal is
  compared through the two summaries' intervals, unpaired, and the message says so.
- ``--max-infra-errors N``: more than N conversations ended in an infrastructure outcome
  (``db_error``, ``vuser_error``) is exit code 3, not a verdict on the agent.

A gate on an incomplete run (summary.json: ``"complete": false`` — a journal holding fewer
conversations than the dataset has items, or a run that did not finish) fails, and so does a
``--max-regression`` gate against an incomplete baseline: rates over part of the items are not
the run's rates. ``--allow-incomplete`` accepts them.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalbench.core.errors import ConfigError
from evalbench.results.journal.files import JOURNAL
from evalbench.results.journal.safe_read import open_run_file
from evalbench.results.summary.item_values import Item, journal_item_values
from evalbench.results.summary.regression import DEFAULT_CONFIDENCE, Regression, paired_regression, unpaired_regression


@dataclass(frozen=True)
class Threshold:
    metric: str
    value: float
    text: str  # as given, for messages
    percent: bool = False  # written with %: a rate by construction


def check_rate_value(option: str, threshold: Threshold) -> None:
    """ConfigError naming the option and the gate when a rate gate is a bare number above 1."""
    if not threshold.percent and abs(threshold.value) > 1:
        raise ConfigError(f"{option} {threshold.text}: {threshold.metric} is a rate from 0 to 1, so "
                          f"{threshold.value:g} can never be met; write {threshold.value:g}% for a percentage "
                          f"(or {threshold.value / 100:g} as a fraction)")


@dataclass(frozen=True)
class GateResult:
    name: str  # e.g. "fail-under exec_match=60%"
    metric: str
    passed: bool
    message: str
    actual: float | None
    limit: float


def parse_threshold(text: str, option: str) -> Threshold:
    metric, sep, raw = text.partition("=")
    metric, raw = metric.strip(), raw.strip()
    if not sep or not metric or not raw:
        raise ConfigError(f"{option} expects METRIC=VALUE (e.g. exec_match=0.6 or exec_match=60%), got {text!r}")
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise ConfigError(f"{option} {text!r}: {raw!r} is not a number (write 0.6 or 60%)") from None
    if not math.isfinite(value):
        raise ConfigError(f"{option} {text!r}: {raw!r} is not a finite number (write 0.6 or 60%)")
    return Threshold(metric, value, text, percent=raw.endswith("%"))


def is_rate(summary: dict[str, Any], metric: str) -> bool:
    """Whether ``metric`` is a rate in ``summary`` (every metric but a metric scorer's mean)."""
    name, _, phase = metric.partition(".")
    tally = ((summary.get("scorers") or {}).get(name) or {}).get(phase or "main")
    return not (isinstance(tally, dict) and "rate" not in tally and "mean" in tally)


def metric_value(summary: dict[str, Any], metric: str) -> float | None:
    """The value of ``metric`` in ``summary``; ConfigError naming the known metrics when unknown."""
    name, _, phase = metric.partition(".")
    phase = phase or "main"
    if name == "mean_reward":
        return (summary.get("conversation") or {}).get("mean_reward")
    if name in ("pass_hat_k", "pass_at_k", "consistency"):
        return _trial_metric(summary, name, phase if phase != "main" else "1", metric)
    if name == "success":
        entry = (summary.get("success") or {}).get(phase)
        return entry.get("rate") if entry else None
    phases = (summary.get("scorers") or {}).get(name)
    if phases is None:
        known = ["success", "mean_reward", *sorted(summary.get("scorers") or {})]
        raise ConfigError(f"unknown metric {metric!r} (known: {', '.join(known)}; add .follow_up for the follow-up phase)")
    tally = phases.get(phase)
    if tally is None:
        return None
    value: float | None = tally.get("rate", tally.get("mean"))
    return value


def _trial_metric(summary: dict[str, Any], name: str, k: str, metric: str) -> float | None:
    """``pass_hat_k.K`` (pass^K), ``pass_at_k.K`` and ``consistency`` of a run with trials."""
    trials = summary.get("trials")
    if not isinstance(trials, dict):
        raise ConfigError(f"metric {metric!r} needs a run with trials (trials: k or --trials K)")
    if name == "consistency":
        consistency: float | None = (trials.get("consistency") or {}).get("rate")
        return consistency
    entry = (trials.get(name) or {}).get(k)
    if entry is None:
        raise ConfigError(f"unknown metric {metric!r}: the run has {trials.get('trials')} trial(s); "
                          f"write {name}.K with K from 1 to {trials.get('trials')}")
    rate: float | None = entry.get("rate")
    return rate


def metric_ci(summary: dict[str, Any], metric: str) -> list[float] | None:
    """The 95 % interval the summary gives ``metric`` (None for a mean, or a summary without one)."""
    name, _, phase = metric.partition(".")
    if name in ("pass_hat_k", "pass_at_k", "consistency"):
        trials = summary.get("trials") or {}
        entry = trials.get(name) if name == "consistency" else (trials.get(name) or {}).get(phase or "1")
        return (entry or {}).get("ci95") if isinstance(entry, dict) else None
    if name == "success":
        entry = (summary.get("success") or {}).get(phase or "main")
    else:
        entry = ((summary.get("scorers") or {}).get(name) or {}).get(phase or "main")
    return entry.get("ci") if isinstance(entry, dict) else None


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _completeness_gate(summary: dict[str, Any], which: str, allow_incomplete: bool) -> GateResult | None:
    if summary.get("complete") is not False:
        return None
    info = summary.get("completeness") or {}
    expected, conversations = info.get("expected_items"), info.get("conversations")
    counts = f"{conversations} of {expected} conversations" if expected is not None else f"{conversations} conversations"
    reasons = "; ".join(info.get("reasons") or []) or "see summary.json: completeness"
    verdict = "allowed by --allow-incomplete" if allow_incomplete else "its rates are not the run's (--allow-incomplete accepts it)"
    message = f"{which} is incomplete ({counts}: {reasons}); {verdict}"
    fraction = conversations / expected if isinstance(expected, int) and expected and isinstance(conversations, int) else None
    return GateResult("complete" if which == "this run" else "baseline complete", "complete", allow_incomplete, message,
                      fraction, 1.0)


def check_gates(summary: dict[str, Any], fail_under: list[Threshold], max_regression: list[Threshold],
                baseline: dict[str, Any] | None, *, allow_incomplete: bool = False, run_dir: Path | None = None,
                baseline_dir: Path | None = None, confidence: float = DEFAULT_CONFIDENCE) -> list[GateResult]:
    """The gates' results. With any gate, an incomplete run (or, for ``max_regression``, an
    incomplete baseline) adds a ``complete`` gate that fails unless ``allow_incomplete``.
    ``max_regression`` pairs the items of the journals in ``run_dir`` and ``baseline_dir`` and
    decides at ``confidence``; without them it compares the summaries, unpaired."""
    results = []
    if fail_under or max_regression:
        complete = _completeness_gate(summary, "this run", allow_incomplete)
        if complete is not None:
            results.append(complete)
    if max_regression and baseline is not None:
        complete = _completeness_gate(baseline, "the baseline run", allow_incomplete)
        if complete is not None:
            results.append(complete)
    for option, gates in (("--fail-under", fail_under), ("--max-regression", max_regression)):
        for gate in gates:
            if is_rate(summary, gate.metric):
                check_rate_value(option, gate)
    for gate in fail_under:
        actual = metric_value(summary, gate.metric)
        passed = actual is not None and actual >= gate.value
        message = f"{gate.metric} = {_fmt(actual)} {'>=' if passed else '<'} {gate.value:.4g}" if actual is not None \
            else f"{gate.metric} has no value in this run"
        results.append(GateResult(f"fail-under {gate.text}", gate.metric, passed, message, actual, gate.value))
    if max_regression and baseline is None:
        raise ConfigError("--max-regression needs --baseline RUN_DIR")
    values = _paired_values(run_dir, baseline_dir, [gate.metric for gate in max_regression]) if max_regression else None
    for gate in max_regression:
        assert baseline is not None
        results.append(_regression_gate(gate, summary, baseline, values, confidence))
    return results


PairedValues = tuple[dict[str, dict[Item, float]], dict[str, dict[Item, float]]] | str


def check_baseline_journal(baseline_dir: Path) -> None:
    """RunDirError (exit 2) naming the baseline's journal when it is there but not a regular file
    of the run directory; a baseline without a journal is fine (compared through its summary)."""
    with open_run_file(Path(baseline_dir), JOURNAL, missing_ok=True):
        pass


def _paired_values(run_dir: Path | None, baseline_dir: Path | None, metrics: list[str]) -> PairedValues:
    """Per-item values of each metric in (this run, the baseline), or why items cannot be paired.
    A journal that is there but cannot be read is a RunDirError (exit 2), not a fallback."""
    if run_dir is None or baseline_dir is None:
        return "no journals given"
    for which, where in (("this run", run_dir), ("the baseline", baseline_dir)):
        if not os.path.lexists(Path(where) / JOURNAL):
            return f"{which} has no journal ({JOURNAL}), only summary.json, so items cannot be paired"
    return journal_item_values(Path(run_dir), metrics), journal_item_values(Path(baseline_dir), metrics)


def _regression_gate(gate: Threshold, summary: dict[str, Any], baseline: dict[str, Any], values: PairedValues | None,
                     confidence: float) -> GateResult:
    name = f"max-regression {gate.text}"
    actual, before = metric_value(summary, gate.metric), metric_value(baseline, gate.metric)
    if actual is None or before is None:
        return GateResult(name, gate.metric, False,
                          f"{gate.metric} is missing in {'this run' if actual is None else 'the baseline'}", actual, gate.value)
    decision: Regression
    if isinstance(values, tuple):
        decision = paired_regression(values[1][gate.metric], values[0][gate.metric], gate.value, confidence=confidence)
    else:
        decision = unpaired_regression(before, metric_ci(baseline, gate.metric), actual, metric_ci(summary, gate.metric),
                                       gate.value, values or "no journals given", confidence=confidence)
    message = f"{gate.metric}: {_fmt(before)} (baseline) -> {_fmt(actual)}, change {actual - before:+.4g}; {decision.message}"
    return GateResult(name, gate.metric, not decision.regressed, message, actual, gate.value)
