"""Compare two runs item by item: paired pass/fail counts, flips, McNemar's exact test and a
paired bootstrap interval of the difference, rendered as text, Markdown and self-contained HTML.

Two runs are comparable when they used the same dataset file, the same scorers and the same
virtual user (kind, model, prompts, temperature); the agent, the seed and the run id are what a
comparison is for. ``compare_runs`` refuses anything else with :class:`IncomparableRuns`,
listing every difference, unless ``force=True`` (the differences are then kept as warnings).

Items are aligned by ``(item_id, phase)`` (and trial) on one pass/fail scorer (the primary scorer of run A
by default), or on each phase's own verdict (``metric="success"``: the phase's primary scorer,
``exec_match`` for a query, ``test_cases`` for a management task). Journals are streamed; only
a compact verdict per (item, phase) is held in memory. With repeated trials the statistics
take the item as the unit: the interval resamples items with all their trials and the p-value
is a sign-flip test of per-item net changes (:mod:`evalbench.results.summary.clustered`); with
one trial per item they are McNemar's exact test and the paired bootstrap. See ``docs/compare.md``.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from evalbench.core.errors import EvalbenchError, RunDirError
from evalbench.results.journal.files import JOURNAL, write_atomic
from evalbench.results.journal.lines import invalid_reason, trial_of
from evalbench.results.journal.reader import read_journal
from evalbench.results.journal.shapes import read_manifest, read_summary
from evalbench.results.render.compare_cost import cost_html, cost_markdown, cost_text
from evalbench.results.render.links import conversation_anchor, report_href
from evalbench.results.schema import SCHEMA_VERSION
from evalbench.results.summary.clustered import cluster_diff_ci, sign_flip_p
from evalbench.results.summary.cost import CostComparison, CostTally, compare_costs
from evalbench.results.summary.official import official_comparison
from evalbench.results.summary.stats import mcnemar_exact, paired_diff_ci

__all__ = [
    "SUCCESS",
    "CompareError",
    "Comparison",
    "Flip",
    "IncomparableRuns",
    "PhaseComparison",
    "RunInfo",
    "Side",
    "compare_runs",
    "render_html",
    "render_markdown",
    "render_text",
    "verdict",
    "write_comparison",
]

PHASES = ("main", "follow_up")
T = TypeVar("T")
SUCCESS = "success"  # pseudo-metric: each phase's own verdict (summary.json "success")
LEVEL = 0.95  # confidence level of the paired bootstrap interval
RESAMPLES = 10_000
BOOTSTRAP_SEED = 0  # fixed: the same two runs always give the same interval
ALPHA = 0.05  # significance level of the headline sentence
MCNEMAR = "McNemar exact"  # the test of a phase whose items have one paired trial each
SIGN_FLIP = "sign-flip by item"  # the test when items have several paired trials
VUSER_IDENTITY = ("vuser", "model", "encode_prompt_sha256", "decode_prompt_sha256", "temperature")
VUSER_SETTINGS = ("patience", "block_leaks", "invalid_action_retries")  # reported, not refused
DETAIL_CHARS = 300  # of a score detail kept per item
MARKDOWN_FLIPS = 50
TEXT_FLIPS = 10
LIST_IDS = 50  # item ids listed for items present in one run only


class CompareError(EvalbenchError):
    """Two run directories cannot be compared as asked (not a run, unknown or non pass/fail metric)."""

    exit_code = 2


class IncomparableRuns(CompareError):
    """The runs differ in what must be equal (dataset, scorers, virtual user); ``differences``
    lists each one. Pass ``force=True`` to compare them anyway."""

    def __init__(self, run_a: Path, run_b: Path, differences: list[str]) -> None:
        self.differences = differences
        lines = "\n".join(f"  - {d}" for d in differences)
        super().__init__(f"runs {run_a} and {run_b} are not comparable:\n{lines}\n(use --force to compare them anyway)")


# ------------------------------------------------------------------------------------ types


@dataclass(frozen=True)
class Side:
    """One run's verdict on one (item, phase) for the compared scorer."""

    outcome: str | None  # the phase outcome: scored, max_turns, agent_error, ...
    passed: bool | None
    applicable: bool
    detail: str | None

    @property
    def label(self) -> str:
        """``pass``, ``fail``, ``fail (agent_error)`` or ``n/a``."""
        if not self.applicable:
            return "n/a"
        if self.passed:
            return "pass"
        return "fail" if self.outcome in (None, "scored") else f"fail ({self.outcome})"


Sides = dict[tuple[str, int, str], Side | None]  # (item_id, trial, phase) -> verdict


@dataclass(frozen=True)
class Flip:
    """An item whose verdict differs between the runs: a regression (A pass, B fail) or an improvement."""

    item_id: str
    phase: str
    a: Side
    b: Side
    trial: int = 1  # repeated trials pair trial t with trial t (trial 1 is a run without trials)

    @property
    def name(self) -> str:
        """The item id, and the trial when it is not the first: ``greenleaf_7 (trial 2)``."""
        return _named(self.item_id, self.trial)


def _named(item_id: str, trial: int) -> str:
    return item_id if trial == 1 else f"{item_id} (trial {trial})"


@dataclass
class PhaseComparison:
    """Paired counts and statistics of one phase.

    ``n11`` both passed, ``n10`` A passed and B failed, ``n01`` A failed and B passed, ``n00``
    both failed; only pairs where the scorer applies in both runs are counted.
    """

    phase: str
    n11: int = 0
    n10: int = 0
    n01: int = 0
    n00: int = 0
    not_applicable: int = 0  # in both runs, the scorer applies in neither
    applicability_differs: list[str] = field(default_factory=list)  # applies in one run only: excluded
    only_in_a: list[str] = field(default_factory=list)  # (item, phase) journaled in A only
    only_in_b: list[str] = field(default_factory=list)
    p_value: float = 1.0  # two-sided: McNemar exact, or the sign-flip test by item with trials
    ci: tuple[float, float] | None = None  # paired bootstrap interval of rate_b - rate_a (resampling items)
    items: int = 0  # distinct items in the pairs (with trials, fewer than the pairs)
    test: str = MCNEMAR  # the test behind p_value

    @property
    def pairs(self) -> int:
        """Items in the paired statistics."""
        return self.n11 + self.n10 + self.n01 + self.n00

    @property
    def passed_a(self) -> int:
        return self.n11 + self.n10

    @property
    def passed_b(self) -> int:
        return self.n11 + self.n01

    @property
    def rate_a(self) -> float | None:
        return self.passed_a / self.pairs if self.pairs else None

    @property
    def rate_b(self) -> float | None:
        return self.passed_b / self.pairs if self.pairs else None

    @property
    def diff(self) -> float | None:
        """``rate_b - rate_a`` over the pairs."""
        return (self.n01 - self.n10) / self.pairs if self.pairs else None


@dataclass
class RunInfo:
    """What identifies one side of the comparison."""

    path: Path
    run_id: str
    agent: str
    seed: object
    created_at: str | None
    dataset: str | None
    records: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)


@dataclass
class Comparison:
    """The result of :func:`compare_runs`. ``phases`` holds ``main`` first (the headline)."""

    a: RunInfo
    b: RunInfo
    metric: str
    phases: list[PhaseComparison]
    regressions: list[Flip]  # A pass -> B fail
    improvements: list[Flip]  # A fail -> B pass
    differences: list[str] = field(default_factory=list)  # refusal reasons overridden by force=True
    notes: list[str] = field(default_factory=list)  # differences that do not prevent a comparison
    forced: bool = False
    level: float = LEVEL
    official: list[str] = field(default_factory=list)  # BIRD-Interact's own figures of A and B, when both have them
    cost: CostComparison | None = None  # what each run's model calls cost (evalbench/results/summary/cost.py)

    @property
    def headline(self) -> PhaseComparison:
        """The main phase."""
        return self.phase("main")

    def phase(self, name: str) -> PhaseComparison:
        for phase in self.phases:
            if phase.phase == name:
                return phase
        raise KeyError(name)


# ------------------------------------------------------------------------------------ reading


def _natural_key(text: str) -> list[tuple[int, int, str]]:
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part]


def _load_manifest(run_dir: Path) -> dict[str, Any]:
    if not run_dir.is_dir():
        raise CompareError(f"{run_dir}: no such run directory")
    manifest = _checked(read_manifest, run_dir)
    version = manifest.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise CompareError(f"{run_dir / 'manifest.json'}: unsupported schema_version {version!r} "
                           f"(this evalbench reads up to {SCHEMA_VERSION})")
    if not os.path.lexists(run_dir / JOURNAL):  # anything else there is refused, naming it, by read_journal
        raise CompareError(f"{run_dir}: not a run directory (no {JOURNAL})")
    return manifest


def _records(run_dir: Path) -> Iterator[dict[str, Any]]:
    """The journal's records (lines cut short or unreadable are skipped with a warning by
    :func:`read_journal`), with a clear error for a record of a newer schema."""
    try:
        for count, record in enumerate(read_journal(run_dir), start=1):
            version = record.get("schema_version")
            if not isinstance(version, int) or version > SCHEMA_VERSION:
                raise CompareError(f"{run_dir / JOURNAL}: record {count} has unsupported schema_version {version!r}")
            yield record
    except RunDirError as exc:  # a journal that is not a regular file of the run directory
        raise CompareError(str(exc)) from None


def _agent_label(manifest: dict[str, Any]) -> str:
    agent = manifest.get("agent") or {}
    label = str(agent.get("agent") or "?")
    if agent.get("model"):
        label += f" {agent['model']}"
    return label


def _run_info(run_dir: Path, manifest: dict[str, Any]) -> RunInfo:
    return RunInfo(path=run_dir, run_id=str(manifest.get("run_id") or run_dir.name), agent=_agent_label(manifest),
                   seed=manifest.get("seed"), created_at=manifest.get("created_at"),
                   dataset=(manifest.get("dataset") or {}).get("path"))


def _summary(run_dir: Path) -> dict[str, Any] | None:
    return _checked(read_summary, run_dir)  # None: absent when the run did not finish


def _checked(read: Callable[[Path], T], run_dir: Path) -> T:
    """``read(run_dir)``, a file it refuses raised as a CompareError (the same message)."""
    try:
        return read(run_dir)
    except RunDirError as exc:
        raise CompareError(str(exc)) from None


def _check_pass_fail(run_dir: Path, metric: str) -> None:
    summary = _summary(run_dir)
    phases = ((summary or {}).get("scorers") or {}).get(metric) or {}
    if any("mean" in tally for tally in phases.values()):
        raise CompareError(f"{metric} is a metric scorer (a mean value, no pass/fail): choose a pass/fail scorer")


def _differences(a: dict[str, Any], b: dict[str, Any], metric: str) -> tuple[list[str], list[str]]:
    """(refusal reasons, notes) from the two manifests."""
    refuse: list[str] = []
    notes: list[str] = []
    da, db = a.get("dataset") or {}, b.get("dataset") or {}
    if da.get("sha256") != db.get("sha256"):
        refuse.append(f"dataset: A {da.get('path')} (sha256 {str(da.get('sha256'))[:12]}) vs "
                      f"B {db.get('path')} (sha256 {str(db.get('sha256'))[:12]})")
    scorers_a, scorers_b = list(a.get("scorers") or []), list(b.get("scorers") or [])
    if set(scorers_a) != set(scorers_b):
        only_a = sorted(set(scorers_a) - set(scorers_b))
        only_b = sorted(set(scorers_b) - set(scorers_a))
        refuse.append(f"scorers: only in A {only_a or '[]'}, only in B {only_b or '[]'}")
    options_a = ((a.get("config") or {}).get("scorers") or {})
    options_b = ((b.get("config") or {}).get("scorers") or {})
    for name in sorted(set(options_a) & set(options_b)):
        if options_a[name] != options_b[name]:
            text = (f"scorer {name} options: A {json.dumps(options_a[name], sort_keys=True)} "
                    f"vs B {json.dumps(options_b[name], sort_keys=True)}")
            # the compared scorer's options change its verdicts; with "success" any scorer may give them
            (refuse if metric in (name, SUCCESS) else notes).append(text)
    refuse += scoring_differences(a.get("scoring"), b.get("scoring"))
    va, vb = a.get("vuser") or {}, b.get("vuser") or {}
    for key in VUSER_IDENTITY:
        if va.get(key) != vb.get(key):
            refuse.append(f"virtual user {key}: A {va.get(key)!r} vs B {vb.get(key)!r}")
    for key in VUSER_SETTINGS:
        if va.get(key) != vb.get(key):
            notes.append(f"virtual user {key}: A {va.get(key)!r} vs B {vb.get(key)!r}")
    return refuse, notes


SCORING_IDENTITY = ("semantics", "empty_gold", "primary", "accept_nl_answers")


def scoring_differences(a: Mapping[str, object] | None, b: Mapping[str, object] | None) -> list[str]:
    """How two runs decide their verdicts differently (the manifests' or summaries' ``scoring``):
    another semantics or other primary scorers make their success rates incomparable."""
    if a is None and b is None:
        return []
    if a is None or b is None:
        return [f"scoring: run {'A' if a is None else 'B'} records no semantics or primary verdicts "
                "(it was made by an older evalbench)"]
    return [f"scoring {key}: A {json.dumps(a.get(key), sort_keys=True)} vs B {json.dumps(b.get(key), sort_keys=True)}"
            for key in SCORING_IDENTITY if a.get(key) != b.get(key)]


def _phase_verdict(phase: dict[str, Any]) -> tuple[bool, str | None]:
    """A phase's own verdict and the scorer that gave it (records without ``passed``: the first
    pass/fail score, as the summary does)."""
    scores = phase.get("scores") or {}
    primary = phase.get("primary")
    if primary is None:
        primary = next((name for name, score in scores.items() if score.get("passed") is not None), None)
    if "passed" in phase:
        return bool(phase["passed"]), primary
    return bool(primary is not None and scores[primary].get("passed")), primary


def _side(record: dict[str, Any], phase: dict[str, Any], metric: str, run_dir: Path) -> Side | None:
    reason = invalid_reason(record, phase)
    if reason is not None:  # in no rate: not paired
        return Side(outcome="invalid_item", passed=None, applicable=False, detail=reason[:DETAIL_CHARS])
    score: Mapping[str, object] | None
    if metric == SUCCESS:
        verdict, primary = _phase_verdict(phase)
        score = {"applicable": True, "passed": verdict,
                 "detail": ((phase.get("scores") or {}).get(primary) or {}).get("detail") if primary else None}
    else:
        score = (phase.get("scores") or {}).get(metric)
    if score is None:
        return None
    applicable = bool(score.get("applicable"))
    passed = score.get("passed")
    if applicable and passed is None:
        raise CompareError(f"{metric} is a metric scorer (no pass/fail verdict in {run_dir / JOURNAL}): choose a pass/fail scorer")
    detail = score.get("detail") or phase.get("error") or record.get("error")
    if detail is not None:
        detail = str(detail)
        if len(detail) > DETAIL_CHARS:
            detail = detail[:DETAIL_CHARS] + "..."
    return Side(outcome=phase.get("outcome") or record.get("outcome"), passed=bool(passed) if applicable else None,
                applicable=applicable, detail=detail)


def _sides(records: Iterable[dict[str, Any]], metric: str, run: RunInfo, notes: list[str],
           label: str) -> Iterator[tuple[str, int, str, Side | None]]:
    """(item_id, trial, phase, side) of every phase of every record, counting records and outcomes on ``run``."""
    outcomes: Counter[str] = Counter()
    seen: set[str] = set()
    duplicates = 0
    for record in records:
        trial = trial_of(record)  # repeated trials pair trial by trial
        item_id = str(record["item_id"])
        run.records += 1
        outcomes[str(record.get("outcome"))] += 1
        if _named(item_id, trial) in seen:
            duplicates += 1
        seen.add(_named(item_id, trial))
        for phase in record.get("phases") or []:
            yield item_id, trial, str(phase.get("phase")), _side(record, phase, metric, run.path)
    run.outcomes = dict(outcomes)
    if duplicates:
        notes.append(f"run {label} journals {duplicates} item(s) more than once; the last record of each is compared")


# ------------------------------------------------------------------------------------ comparing


def compare_runs(run_a: Path, run_b: Path, *, force: bool = False, metric: str | None = None) -> Comparison:
    """Compare run B against run A (the baseline) on ``metric`` (default: A's primary scorer).

    ``metric`` is a pass/fail scorer of both runs, or ``"success"`` for each phase's own verdict.
    Raises :class:`IncomparableRuns` when the dataset, the scorer set or the virtual user differ
    (unless ``force``), and :class:`CompareError` when a directory is not a run or the metric is
    not a pass/fail scorer of both runs.
    """
    run_a, run_b = Path(run_a), Path(run_b)
    manifest_a, manifest_b = _load_manifest(run_a), _load_manifest(run_b)
    metric = metric or SUCCESS  # each phase's own verdict: exec_match for a query, test_cases for a management task
    refuse, notes = _differences(manifest_a, manifest_b, metric)
    if refuse and not force:
        raise IncomparableRuns(run_a, run_b, refuse)
    for label, run_dir, manifest in (("A", run_a, manifest_a), ("B", run_b, manifest_b)):
        scorers = list(manifest.get("scorers") or [])
        if metric != SUCCESS and metric not in scorers:
            raise CompareError(f"run {label} ({run_dir}) has no scorer {metric!r} (its scorers: "
                               f"{', '.join(scorers) or 'none'}; or {SUCCESS!r}: each phase's own verdict)")
        _check_pass_fail(run_dir, metric)

    info_a, info_b = _run_info(run_a, manifest_a), _run_info(run_b, manifest_b)
    cost_a, cost_b = CostTally(per_item=True), CostTally(per_item=True)
    a_sides: Sides = {}
    for item_id, trial, phase, side in _sides(cost_a.tap(_records(run_a)), metric, info_a, notes, "A"):
        a_sides[(item_id, trial, phase)] = side

    # B is collected like A (one compact verdict per (item, phase)) so that the last record of an
    # item journaled twice wins on both sides; full records are never held.
    b_sides: Sides = {}
    for item_id, trial, phase, side in _sides(cost_b.tap(_records(run_b)), metric, info_b, notes, "B"):
        b_sides[(item_id, trial, phase)] = side

    stats, per_item, regressions, improvements = _pair(a_sides, b_sides)
    order = {name: i for i, name in enumerate(PHASES)}
    phases = sorted(stats.values(), key=lambda p: (order.get(p.phase, len(order)), p.phase))
    phases = [p for p in phases if p.phase == "main" or p.pairs or p.only_in_a or p.only_in_b or p.not_applicable
              or p.applicability_differs]
    for tally in phases:
        for ids in (tally.applicability_differs, tally.only_in_a, tally.only_in_b):
            ids.sort(key=_natural_key)
        _statistics(tally, list((per_item.get(tally.phase) or {}).values()))

    def flip_key(flip: Flip) -> tuple[int, list[tuple[int, int, str]]]:
        return order.get(flip.phase, len(order)), _natural_key(flip.name)

    regressions.sort(key=flip_key)
    improvements.sort(key=flip_key)
    return Comparison(a=info_a, b=info_b, metric=metric, phases=phases, regressions=regressions, improvements=improvements,
                      differences=refuse if force else [], notes=notes, forced=force,
                      official=official_comparison(_summary(run_a), _summary(run_b)), cost=compare_costs(cost_a, cost_b))


def _pair(a_sides: Sides, b_sides: Sides) -> tuple[dict[str, PhaseComparison], dict[str, dict[str, list[int]]],
                                                   list[Flip], list[Flip]]:
    """The paired counts of each phase, each item's [paired trials, net change] per phase, the
    regressions and the improvements (``a_sides`` is emptied)."""
    stats = {name: PhaseComparison(name) for name in PHASES}
    per_item: dict[str, dict[str, list[int]]] = {}  # phase -> item -> [paired trials, improvements - regressions]
    regressions: list[Flip] = []
    improvements: list[Flip] = []
    for key, b in b_sides.items():
        item_id, trial, phase = key
        tally = stats.setdefault(phase, PhaseComparison(phase))
        if key not in a_sides:
            tally.only_in_b.append(_named(item_id, trial))
            continue
        a = a_sides.pop(key)
        usable_a = a is not None and a.applicable
        usable_b = b is not None and b.applicable
        if not usable_a and not usable_b:
            tally.not_applicable += 1
            continue
        if usable_a != usable_b:
            tally.applicability_differs.append(_named(item_id, trial))
            continue
        assert a is not None and b is not None
        cell = per_item.setdefault(phase, {}).setdefault(item_id, [0, 0])
        cell[0] += 1
        cell[1] += bool(b.passed) - bool(a.passed)
        if a.passed and b.passed:
            tally.n11 += 1
        elif a.passed:
            tally.n10 += 1
            regressions.append(Flip(item_id, phase, a, b, trial))
        elif b.passed:
            tally.n01 += 1
            improvements.append(Flip(item_id, phase, a, b, trial))
        else:
            tally.n00 += 1
    for (item_id, trial, phase) in a_sides:
        stats.setdefault(phase, PhaseComparison(phase)).only_in_a.append(_named(item_id, trial))
    return stats, per_item, regressions, improvements


def _statistics(tally: PhaseComparison, items: list[list[int]]) -> None:
    """The p-value and interval of a phase: by pair (one trial per item), or by item (trials)."""
    tally.items = len(items)
    if all(pairs == 1 for pairs, _ in items):
        tally.p_value = mcnemar_exact(tally.n10, tally.n01)
        tally.ci = paired_diff_ci(tally.n11, tally.n10, tally.n01, tally.n00, level=LEVEL, resamples=RESAMPLES,
                                  seed=BOOTSTRAP_SEED)
        return
    nets, weights = [net for _, net in items], [pairs for pairs, _ in items]
    tally.test = SIGN_FLIP
    tally.p_value = sign_flip_p(nets, alternative="two-sided", seed=BOOTSTRAP_SEED)
    tally.ci = cluster_diff_ci(nets, weights, level=LEVEL, resamples=RESAMPLES, seed=BOOTSTRAP_SEED)


# ------------------------------------------------------------------------------------ formatting


def _pct(rate: float | None) -> str:
    return "—" if rate is None else f"{100 * rate:.1f}%"


def _pp(diff: float | None) -> str:
    return "—" if diff is None else f"{100 * diff:+.1f}"


def _ci(ci: tuple[float, float] | None) -> str:
    return "—" if ci is None else f"[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"


def _p(p: float) -> str:
    return f"{p:.3g}"


def _outcomes(run: RunInfo) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(run.outcomes.items(), key=lambda kv: (-kv[1], kv[0]))) or "none"


def verdict(c: Comparison) -> str:
    """One sentence on the main phase: which run is better, if the difference is significant."""
    main = c.headline
    if not main.pairs:
        return "no item is scored by both runs: nothing to compare"
    if main.p_value < ALPHA:
        better = "B" if main.n01 > main.n10 else "A"
        return f"{'B improves on A' if better == 'B' else 'B is worse than A'} ({main.test} p = {_p(main.p_value)} < {ALPHA})"
    return f"no significant difference at the {ALPHA:g} level ({main.test} p = {_p(main.p_value)})"


def _p_header(c: Comparison) -> str:
    """The p column's title: McNemar's test, or the sign-flip test by item when a phase has trials."""
    return f"{SIGN_FLIP} p" if any(p.test == SIGN_FLIP for p in c.phases) else f"{MCNEMAR} p"


def _over(p: PhaseComparison) -> str:
    return f"{p.pairs} paired item(s)" if p.test == MCNEMAR else f"{p.pairs} paired trial(s) of {p.items} item(s)"


def _headline(c: Comparison) -> str:
    main = c.headline
    return (f"{c.metric} (main): A {_pct(main.rate_a)} → B {_pct(main.rate_b)}, difference {_pp(main.diff)} pp, "
            f"{round(100 * c.level)}% CI {_ci(main.ci)} pp, {main.test} p = {_p(main.p_value)}; "
            f"{main.n10} regression(s), {main.n01} improvement(s) over {_over(main)}")


def _run_line(label: str, run: RunInfo) -> str:
    return f"{label} = {run.run_id} ({run.agent}, seed {run.seed}): {run.records} conversations, outcomes {_outcomes(run)}"


def _unpaired_lines(c: Comparison) -> list[str]:
    lines = []
    for p in c.phases:
        for label, ids in (("A", p.only_in_a), ("B", p.only_in_b)):
            if ids:
                what = "follow-up reached" if p.phase == "follow_up" else "journaled"
                shown = ", ".join(ids[:LIST_IDS]) + (f", ... and {len(ids) - LIST_IDS} more" if len(ids) > LIST_IDS else "")
                lines.append(f"{p.phase}: {len(ids)} item(s) {what} in {label} only (not paired): {shown}")
        if p.applicability_differs:
            ids = p.applicability_differs
            shown = ", ".join(ids[:LIST_IDS]) + (f", ... and {len(ids) - LIST_IDS} more" if len(ids) > LIST_IDS else "")
            lines.append(f"{p.phase}: {len(ids)} item(s) where {c.metric} applies in one run only (not paired): {shown}")
        if p.not_applicable:
            lines.append(f"{p.phase}: {p.not_applicable} item(s) where {c.metric} applies in neither run (not paired)")
    return lines


def _warning_lines(c: Comparison) -> list[str]:
    return [f"compared with --force although {d}" for d in c.differences] + list(c.notes)


def render_text(c: Comparison) -> str:
    """A compact report for the terminal."""
    out = [f"compare {c.metric}: A = {c.a.run_id} vs B = {c.b.run_id}"]
    out += [f"  {_run_line('A', c.a)}", f"  {_run_line('B', c.b)}"]
    out += [f"  warning: {w}" for w in _warning_lines(c)]
    header = ["phase", "pairs", "A rate", "B rate", "B-A pp", f"{round(100 * c.level)}% CI pp", _p_header(c).replace(" exact", ""),
              "regressed", "improved"]
    rows = [[p.phase, str(p.pairs), _pct(p.rate_a), _pct(p.rate_b), _pp(p.diff), _ci(p.ci), _p(p.p_value), str(p.n10), str(p.n01)]
            for p in c.phases]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    out.append("")
    for row in [header, ["-" * w for w in widths], *rows]:
        out.append("  " + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=False))))
    out.append("")
    out.append(f"  {verdict(c)}")
    out += [f"  {line}" for line in c.official]
    for title, flips in (("regressions (A pass, B fail)", c.regressions), ("improvements (A fail, B pass)", c.improvements)):
        if not flips:
            continue
        out.append(f"  {title}: {len(flips)}")
        shown = flips[:TEXT_FLIPS]
        id_width = max(len(flip.name) for flip in shown)
        change_width = max(len(f"{flip.a.label} -> {flip.b.label}") for flip in shown)
        for flip in shown:
            detail = " ".join(((flip.b.detail if flip.b.passed is False else flip.a.detail) or "").split())
            change = f"{flip.a.label} -> {flip.b.label}"
            out.append(f"    {flip.phase:<9}  {flip.name:<{id_width}}  {change:<{change_width}}  {detail[:100]}")
        if len(flips) > TEXT_FLIPS:
            out.append(f"    ... and {len(flips) - TEXT_FLIPS} more")
    out += [f"  {line}" for line in _unpaired_lines(c)]
    out += [f"  {line}" for line in cost_text(c.cost)]
    return "\n".join(out) + "\n"


def _md(text: object, limit: int = 200) -> str:
    """A Markdown table cell: escaped, one line, clipped."""
    value = " ".join(str("" if text is None else text).split())
    if len(value) > limit:
        value = value[:limit] + "…"
    return html.escape(value, quote=False).replace("|", "\\|").replace("`", "\\`").replace("*", "\\*").replace("_", "\\_")


def render_markdown(c: Comparison) -> str:
    """GitHub-flavoured Markdown for a CI job summary (flips capped at ``MARKDOWN_FLIPS`` per list)."""
    level = round(100 * c.level)
    out = [f"## evalbench compare: {_md(c.a.run_id)} → {_md(c.b.run_id)}", "", f"**{_md(_headline(c), 1000)}**", "",
           f"{_md(verdict(c), 500)}.", "", *[f"{_md(line, 500)}\n" for line in c.official]]
    for warning in _warning_lines(c):
        out.append(f"> **Warning:** {_md(warning, 1000)}")
    if _warning_lines(c):
        out.append("")
    out += ["| run | id | agent | seed | conversations | outcomes |", "|---|---|---|---|---:|---|"]
    for label, run in (("A", c.a), ("B", c.b)):
        out.append(f"| {label} | {_md(run.run_id)} | {_md(run.agent)} | {_md(run.seed)} | {run.records} | {_md(_outcomes(run))} |")
    out += ["", f"| phase | pairs | A rate | B rate | B − A (pp) | {level}% CI (pp) | {_p_header(c)} | regressions | improvements |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in c.phases:
        out.append(f"| {p.phase} | {p.pairs} | {_pct(p.rate_a)} | {_pct(p.rate_b)} | {_pp(p.diff)} | {_ci(p.ci)} | {_p(p.p_value)} "
                   f"| {p.n10} | {p.n01} |")
    for title, flips in (("Regressions (A pass → B fail)", c.regressions), ("Improvements (A fail → B pass)", c.improvements)):
        out += ["", f"### {title}: {len(flips)}"]
        if not flips:
            continue
        out += ["", "| item | phase | A | B | A detail | B detail |", "|---|---|---|---|---|---|"]
        for flip in flips[:MARKDOWN_FLIPS]:
            out.append(f"| {_md(flip.name)} | {flip.phase} | {_md(flip.a.label)} | {_md(flip.b.label)} | {_md(flip.a.detail)} "
                       f"| {_md(flip.b.detail)} |")
        if len(flips) > MARKDOWN_FLIPS:
            out += ["", f"… and {len(flips) - MARKDOWN_FLIPS} more (all of them are in compare.html)."]
    unpaired = _unpaired_lines(c)
    if unpaired:
        out += ["", "### Not paired", ""] + [f"- {_md(line, 5000)}" for line in unpaired]
    out += cost_markdown(c.cost, _md)
    return "\n".join(out) + "\n"


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem; color: #1b1f24; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
.headline { font-size: 1.05rem; font-weight: 600; }
.warning { background: #fff4ce; border-left: 4px solid #d4a72c; padding: .4rem .8rem; margin: .3rem 0; }
table { border-collapse: collapse; margin: .6rem 0; }
th, td { border: 1px solid #d0d7de; padding: .3rem .6rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.pass { color: #1a7f37; } .fail { color: #cf222e; } .muted { color: #57606a; }
"""


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value))


def _side_cell(side: Side, href: str | None = None) -> str:
    css = "pass" if side.passed else "fail" if side.applicable else "muted"
    label = _e(side.label)
    if href is not None:  # the conversation in that run's report.html
        label = f'<a href="{_e(href)}" title="open the conversation (report.html)">{label}</a>'
    return f'<td class="{css}">{label}</td>'


def _conversation_href(run: RunInfo, flip: Flip, page_dir: Path) -> str | None:
    """A relative link from compare.html to the flip's conversation in ``run``'s report.html
    (None when the run has no report.html)."""
    report = report_href(run.path, page_dir)
    if report is None:
        return None
    return f"{report}#{conversation_anchor({'item_id': flip.item_id, 'trial': flip.trial})}"


def render_html(c: Comparison, out_dir: Path | None = None) -> str:
    """One self-contained HTML page (inline CSS; no scripts, no external resources); every flip is
    listed, its A and B verdicts linking to the conversation in each run's report.html (relative
    to ``out_dir``, where the page is written: by default run B's directory)."""
    page_dir = Path(out_dir) if out_dir is not None else c.b.path
    level = round(100 * c.level)
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             """<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">""",
             f"<title>evalbench compare: {_e(c.a.run_id)} vs {_e(c.b.run_id)}</title>", f"<style>{_CSS}</style></head><body>",
             f"<h1>evalbench compare: {_e(c.a.run_id)} → {_e(c.b.run_id)}</h1>",
             f'<p class="headline">{_e(_headline(c))}</p>', f"<p>{_e(verdict(c))}.</p>",
             *[f"<p>{_e(line)}</p>" for line in c.official]]
    parts += [f'<div class="warning">{_e(w)}</div>' for w in _warning_lines(c)]
    parts.append("<table><tr><th>run</th><th>id</th><th>agent</th><th>seed</th><th>conversations</th><th>outcomes</th>"
                 "<th>directory</th></tr>")
    for label, run in (("A", c.a), ("B", c.b)):
        parts.append(f"<tr><td>{label}</td><td>{_e(run.run_id)}</td><td>{_e(run.agent)}</td><td>{_e(run.seed)}</td>"
                     f'<td class="num">{run.records}</td><td>{_e(_outcomes(run))}</td><td>{_e(run.path)}</td></tr>')
    parts.append("</table>")
    parts.append(f"<h2>{_e(c.metric)}, paired by item and phase</h2>")
    parts.append("<table><tr><th>phase</th><th>pairs</th><th>A rate</th><th>B rate</th><th>B − A (pp)</th>"
                 f"<th>{level}% CI (pp)</th><th>{_e(_p_header(c))}</th><th>both pass</th><th>regressions</th>"
                 "<th>improvements</th><th>both fail</th></tr>")
    for p in c.phases:
        cells = [str(p.pairs), _pct(p.rate_a), _pct(p.rate_b), _pp(p.diff), _ci(p.ci), _p(p.p_value), str(p.n11), str(p.n10),
                 str(p.n01), str(p.n00)]
        parts.append(f"<tr><td>{_e(p.phase)}</td>" + "".join(f'<td class="num">{_e(x)}</td>' for x in cells) + "</tr>")
    parts.append("</table>")
    for title, flips in (("Regressions (A pass → B fail)", c.regressions), ("Improvements (A fail → B pass)", c.improvements)):
        parts.append(f"<h2>{_e(title)}: {len(flips)}</h2>")
        if not flips:
            continue
        parts.append("<table><tr><th>item</th><th>phase</th><th>A</th><th>B</th><th>A detail</th><th>B detail</th></tr>")
        for flip in flips:
            parts.append(f"<tr><td>{_e(flip.name)}</td><td>{_e(flip.phase)}</td>"
                         f"{_side_cell(flip.a, _conversation_href(c.a, flip, page_dir))}"
                         f"{_side_cell(flip.b, _conversation_href(c.b, flip, page_dir))}"
                         f"<td>{_e(flip.a.detail)}</td><td>{_e(flip.b.detail)}</td></tr>")
        parts.append("</table>")
    unpaired = _unpaired_lines(c)
    if unpaired:
        parts.append("<h2>Not paired</h2><ul>" + "".join(f"<li>{_e(line)}</li>" for line in unpaired) + "</ul>")
    parts.append(cost_html(c.cost))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_comparison(c: Comparison, out_dir: Path) -> list[Path]:
    """Write ``compare.html`` and ``compare.md`` into ``out_dir`` (created if needed), each atomically."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (("compare.html", render_html(c, out_dir)), ("compare.md", render_markdown(c))):
        path = out_dir / name
        write_atomic(path, text)
        written.append(path)
    return written
