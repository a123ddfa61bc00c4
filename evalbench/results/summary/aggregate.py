"""Streaming summary of a run, computed from journal records alone (so ``report`` can redo it).

Every conversation counts in every denominator: a scorer's rate is passed / applicable, where a
conversation that ended in an error is applicable and failed; "not applicable" (a scorer that
does not apply to the item) is reported next to it, never hidden. The one exception is an
``invalid_item`` — an item whose golden SQL fails, so that no answer can be judged: it is the
dataset's fault, so it is listed and counted apart (``invalid_items``) and in no agent rate.
``success`` is the rate of the phases' own verdicts (each phase's declared primary scorer:
``exec_match`` for a query, ``test_cases`` or ``state_match`` for a management task), and
slices split the main phase's verdict over every conversation.
Rates carry a 95 % percentile-bootstrap confidence interval (:func:`~evalbench.results.summary.stats.rate_ci`);
with repeated trials the bootstrap resamples items, each with all its trials
(:func:`~evalbench.results.summary.clustered.cluster_rate_ci`), since an item's trials are not
independent outcomes.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from evalbench.core.conversation import Outcome
from evalbench.results.journal.lines import invalid_reason, phase_passed
from evalbench.results.schema import SCHEMA_VERSION
from evalbench.results.summary.clustered import ItemCounts
from evalbench.results.summary.cost import CostTally
from evalbench.results.summary.official import OfficialTally, official_line
from evalbench.results.summary.stats import rate_ci
from evalbench.results.summary.taxonomy import diagnose
from evalbench.results.summary.trials import TrialTally

# Outcomes that say the harness or its infrastructure failed, not the agent (gated by
# ``--max-infra-errors``).
INFRA_OUTCOMES = ("db_error", "vuser_error")
INVALID = "invalid_item"  # the dataset's golden SQL cannot judge the item: reported apart, in no agent denominator
MAX_LISTED = 1000  # invalid items listed in summary.json


class Rate(TypedDict):
    """A rate and its interval (None: no denominator, no interval)."""

    rate: float | None
    ci: list[float] | None


def _rate(passed: int, total: int, items: ItemCounts | None = None, key: object = None) -> Rate:
    """The rate and its interval: over outcomes, or with ``items`` (a run with trials) over items."""
    ci = rate_ci(passed, total) if items is None else items.ci(key)
    return {
        "rate": round(passed / total, 4) if total else None,
        "ci": [round(ci[0], 4), round(ci[1], 4)] if ci else None,
    }


@dataclass
class _Tally:
    applicable: int = 0
    passed: int = 0
    not_applicable: int = 0
    value_sum: float = 0.0
    values: int = 0
    flags: Counter[str] = field(default_factory=Counter)

    def add(self, score: dict[str, Any]) -> None:
        if not score["applicable"]:
            self.not_applicable += 1
            return
        self.applicable += 1
        if score["passed"]:
            self.passed += 1
        if score["value"] is not None:
            self.value_sum += score["value"]
            self.values += 1
        self.flags.update(score.get("flags") or ())

    def as_dict(self, is_metric: bool, items: ItemCounts | None = None, key: object = None) -> dict[str, object]:
        out: dict[str, object] = {"applicable": self.applicable, "not_applicable": self.not_applicable}
        if is_metric:
            out["mean"] = round(self.value_sum / self.values, 4) if self.values else None
        else:
            out["passed"] = self.passed
            out |= _rate(self.passed, self.applicable, items, key)
        if self.flags:
            out["flags"] = dict(self.flags)
        return out


class SummaryBuilder:
    """Accumulates records one by one; memory does not grow with the number of items (with
    trials it does: per-item counts for pass^k and for intervals that resample items)."""

    SLICES = ("database", "dialect", "category", "difficulty", "ambiguity", "outcome")

    def __init__(self, metric_scorers: set[str] | None = None, trials: int = 1) -> None:
        self.metric_scorers = metric_scorers or set()
        # repeated trials: per-item counts for pass@k / pass^k (kept only when there are trials)
        self.trials = TrialTally(trials) if trials > 1 else None
        self.official = OfficialTally()  # BIRD-Interact's own figures (reported under its semantics)
        self.items = ItemCounts() if trials > 1 else None  # per-item outcomes of every rate, with trials
        self.total = 0
        self.outcomes: Counter[str] = Counter()
        self.scores: dict[tuple[str, str], _Tally] = defaultdict(_Tally)  # (scorer, phase)
        self.success: dict[str, Counter[str]] = defaultdict(Counter)  # phase -> total/passed
        self.slices: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
        self.taxonomy: Counter[str] = Counter()
        self.taxonomy_flags: Counter[str] = Counter()  # e.g. failures whose phase had a leaking vuser reply
        self.deciders: dict[str, Counter[str]] = defaultdict(Counter)  # phase -> primary scorer -> phases
        self.invalid: list[dict[str, str]] = []  # invalid items (and follow-up phases)
        self.invalid_count = 0
        self._invalid_seen: set[tuple[str, str]] = set()  # (item, phase): listed once, whatever the trials
        self.empty_gold = 0  # judged phases whose golden result is empty
        self.turns = 0
        self.clarifications = 0
        self.sessions_opened = 0
        self.tokens: Counter[str] = Counter()
        self.tools: Counter[str] = Counter()  # discovery tool calls, errors, refusals; conversations with calls, out of budget
        self.agent_latency_s = 0.0
        self.agent_calls = 0
        self.conversation_s = 0.0
        self.vuser_actions: Counter[str] = Counter()
        self.follow_up_reached = 0
        self.reward = 0.0
        self.leaking_replies = 0
        self.vuser_replies = 0
        self.cost = CostTally()  # every conversation's model calls, invalid items' included

    @classmethod
    def from_records(cls, records: Iterable[dict[str, Any]], metric_scorers: set[str] | None = None,
                     trials: int = 1) -> SummaryBuilder:
        builder = cls(metric_scorers, trials)
        for record in records:
            builder.add(record)
        return builder

    def add(self, record: dict[str, Any]) -> None:
        self.total += 1
        self.outcomes[record["outcome"]] += 1
        self.cost.add(record)
        if self.trials is not None:
            self.trials.add(record)
        self.official.add(record)
        for entry in record.get("invalid_phases") or ():  # every invalid phase, reached or not (listed once)
            self._invalid(record, entry.get("phase"), entry.get("reason"))
        if record["outcome"] == INVALID:
            first = record["phases"][0] if record["phases"] else {}
            self._invalid(record, first.get("phase"), invalid_reason(record, first) or record.get("error"))
            return
        item = (record.get("dialect"), record["item_id"])  # the unit the intervals resample with trials
        self.turns += len(record["turns"])
        self.sessions_opened += record.get("sessions_opened", 0)
        self.tokens.update(record.get("tokens") or {})
        if record.get("tools"):
            self.tools.update(record["tools"] | {"conversations": 1, "out_of_budget": int(bool(record["tools"].get("budget")))})
        self.reward += record.get("reward") or 0.0
        self.leaking_replies += record.get("leaks") or 0
        self.conversation_s += record.get("elapsed_s") or 0.0
        for turn in record["turns"]:
            reply = turn.get("reply")
            if reply is not None:
                self.agent_calls += 1
                self.agent_latency_s += reply.get("latency_s") or 0.0
            vuser = turn.get("vuser")
            if vuser:
                self.vuser_replies += 1
                if vuser.get("action_kind"):
                    self.vuser_actions[vuser["action_kind"]] += 1
        for phase in record["phases"]:
            self._phase(record, phase, item)
        # Slices: the main phase's verdict of every conversation (a conversation that ended
        # before any phase counts as failed, none is left out).
        passed = phase_passed(record["phases"][0]) if record["phases"] else False
        for key, value in self._slice_values(record):
            self._count(self.slices[(key, value)], passed, item, ("slice", key, value))
        diagnosis = diagnose(record)
        if diagnosis is not None:
            self.taxonomy[diagnosis.kind.value] += 1
            self.taxonomy_flags.update(diagnosis.flags)

    def _phase(self, record: dict[str, Any], phase: dict[str, Any], item: object) -> None:
        self.clarifications += phase["clarifications"]
        if phase["phase"] == "follow_up":
            self.follow_up_reached += 1
        reason = invalid_reason(record, phase)
        if reason is not None:  # an invalid follow-up (judged anyway when an answer may pass upstream: the official figure counts it)
            self._invalid(record, phase["phase"], reason)
            return
        for name, score in phase["scores"].items():
            self.scores[(name, phase["phase"])].add(score)
            if self.items is not None and score["applicable"] and name not in self.metric_scorers:
                self.items.add(("scorer", name, phase["phase"]), item, bool(score["passed"]))
        decider = phase.get("primary") or next(
            (n for n, sc in phase["scores"].items() if sc.get("passed") is not None and n not in self.metric_scorers), None)
        if decider is not None:
            self.deciders[phase["phase"]][decider] += 1
            if {"empty_gold", "both_empty"} & set((phase["scores"].get(decider) or {}).get("flags") or ()):
                self.empty_gold += 1
        self._count(self.success[phase["phase"]], phase_passed(phase), item, ("success", phase["phase"]))

    def _invalid(self, record: dict[str, Any], phase: str | None, reason: str | None) -> None:
        """List an invalid phase, once whatever the trials."""
        key = (record["item_id"], phase or "main")
        if key in self._invalid_seen:
            return
        self._invalid_seen.add(key)
        self.invalid_count += 1
        if len(self.invalid) < MAX_LISTED:
            self.invalid.append({"item_id": record["item_id"], "phase": key[1], "reason": reason or ""})

    def _count(self, counts: Counter[str], passed: bool | None, item: object, key: object) -> None:
        if passed is None:
            counts["not_judged"] += 1  # no pass/fail scorer applies: shown, not counted as failed
        else:
            counts["total"] += 1
            counts["passed"] += passed
            if self.items is not None:
                self.items.add(key, item, passed)

    @staticmethod
    def _slice_values(record: dict[str, Any]) -> Iterable[tuple[str, str]]:
        for key in ("database", "dialect", "category", "difficulty", "outcome"):
            yield key, str(record.get(key))
        for kind in record.get("ambiguity_types") or (["none"] if not record.get("ambiguous") else ["unspecified"]):
            yield "ambiguity", kind

    def _entry(self, counts: Counter[str], key: object) -> dict[str, object]:
        entry: dict[str, object] = {"total": counts["total"], "passed": counts["passed"]}
        entry |= _rate(counts["passed"], counts["total"], self.items, key)
        if counts["not_judged"]:
            entry["not_judged"] = counts["not_judged"]
        return entry

    def _tools(self, judged: int) -> dict[str, int | float | None]:
        """Discovery tool metrics: calls (and per conversation held), errors, conversations that ran
        out of budget."""
        return {"calls": self.tools["calls"], "mean_calls": round(self.tools["calls"] / judged, 3) if judged else None,
                "errors": self.tools["errors"], "budget_refusals": self.tools["budget"],
                "conversations_with_calls": self.tools["conversations"],
                "conversations_out_of_budget": self.tools["out_of_budget"]}

    def result(self, **extra: object) -> dict[str, object]:
        scorers: dict[str, dict[str, dict[str, object]]] = {}
        phase_order = {"main": 0, "follow_up": 1}
        for (name, phase), tally in sorted(self.scores.items(), key=lambda kv: (kv[0][0], phase_order.get(kv[0][1], 9))):
            scorers.setdefault(name, {})[phase] = tally.as_dict(name in self.metric_scorers, self.items, ("scorer", name, phase))
        success = {phase: self._entry(counts, ("success", phase))
                   for phase, counts in sorted(self.success.items(), key=lambda kv: phase_order.get(kv[0], 9))}
        slices: dict[str, dict[str, dict[str, object]]] = {}
        for (key, value), counts in sorted(self.slices.items()):
            slices.setdefault(key, {})[value] = self._entry(counts, ("slice", key, value))
        slices["phase"] = success
        infra = sum(self.outcomes.get(o, 0) for o in INFRA_OUTCOMES)
        judged = self.total - self.outcomes.get(INVALID, 0)  # the means are over the conversations held
        deciders = Counter[str]()
        for counts in self.deciders.values():
            deciders.update(counts)
        return {
            "schema_version": SCHEMA_VERSION,
            "total_items": self.total,
            "outcomes": {o.value: self.outcomes.get(o.value, 0) for o in Outcome},
            "infra_errors": infra,
            # items whose golden SQL cannot judge an answer: in no rate's denominator
            "invalid_items": {"count": self.invalid_count, "items": self.invalid},
            "empty_gold_judged": self.empty_gold,
            "primary_scorer": deciders.most_common(1)[0][0] if deciders else None,
            "primary": {phase: dict(counts.most_common()) for phase, counts in self.deciders.items()},
            "success": success,
            "scorers": scorers,
            "taxonomy": dict(self.taxonomy.most_common()),
            "taxonomy_flags": dict(self.taxonomy_flags.most_common()),
            "slices": slices,
            "conversation": {
                "turns": self.turns,
                "mean_turns": round(self.turns / judged, 3) if judged else None,
                "clarifications": self.clarifications,
                "follow_up_phases": self.follow_up_reached,
                "sessions_opened": self.sessions_opened,
                "vuser_actions": dict(self.vuser_actions),
                "vuser_replies": self.vuser_replies,
                "vuser_leaks": self.leaking_replies,
                "vuser_errors": self.outcomes.get("vuser_error", 0),
                "mean_reward": round(self.reward / judged, 4) if judged else None,
                "agent_calls": self.agent_calls,
                "mean_agent_latency_s": round(self.agent_latency_s / self.agent_calls, 6) if self.agent_calls else None,
                "conversation_seconds": round(self.conversation_s, 3),
                "tokens": dict(self.tokens),
                **({"tools": self._tools(judged)} if self.tools else {}),
            },
            **({"trials": self.trials.result()} if self.trials is not None else {}),
            "cost": self.cost.result(),
            **({"official": self.official.result()}
               if _semantics(extra) == "bird_interact" else {}),
            **extra,
        }


def _semantics(extra: Mapping[str, object]) -> object:
    """The ``scoring.semantics`` of a summary's run facts (None: not recorded)."""
    scoring = extra.get("scoring") or {}
    return scoring.get("semantics") if isinstance(scoring, Mapping) else None


def tools_text(tools: Mapping[str, object]) -> str:
    """The discovery tool metrics of a summary's ``conversation.tools``, in one line."""
    return (f"{tools.get('calls', 0)} calls (mean {tools.get('mean_calls')} per conversation), {tools.get('errors', 0)} error(s), "
            f"{tools.get('budget_refusals', 0)} refused over the budget in {tools.get('conversations_out_of_budget', 0)} "
            "conversation(s)")


def verdict_notes(summary: dict[str, Any], listed: int = 5) -> list[str]:
    """How the run's verdicts were reached, as lines for the console, summary.md and report.html:
    the semantics and its empty-golden policy, which scorer decided success, the invalid items."""
    scoring = summary.get("scoring") or {}
    semantics = scoring.get("semantics")
    deciders: Counter[str] = Counter()
    for counts in (summary.get("primary") or {}).values():
        deciders.update(counts)
    empty = summary.get("empty_gold_judged") or 0
    policy = "BIRD-Interact fails every answer" if semantics == "bird_interact" \
        else f"empty_gold: {scoring.get('empty_gold', 'fail')}"
    decided = ", ".join(f"{name} {count}" for name, count in deciders.most_common()) or "nothing"
    lines = [f"verdicts: semantics {semantics or 'unrecorded'}; success decided by {decided}; "
             f"empty golden results: {empty} judged phase(s) ({policy})"]
    hard_coded = sum((tally.get("flags") or {}).get("hard_coded", 0)
                      for tally in ((summary.get("scorers") or {}).get("exec_match") or {}).values())
    if hard_coded:
        lines.append(f"hard-coded answers: {hard_coded} phase(s) whose SQL reads no table or selects only constants yet "
                     "returns the golden result (exec_match flag hard_coded: a failure under semantics evalbench unless the "
                     "golden SQL is hard-coded too)")
    invalid = summary.get("invalid_items") or {}
    if invalid.get("count"):
        items = invalid.get("items") or []
        shown = "; ".join(f"{i['item_id']}{'' if i.get('phase') == 'main' else ' (' + str(i.get('phase')) + ')'}: "
                          f"{_clip(i.get('reason') or '')}" for i in items[:listed])
        more = f"; and {invalid['count'] - listed} more (summary.json: invalid_items)" if invalid["count"] > listed else ""
        lines.append(f"invalid items: {invalid['count']}, in no rate (their golden SQL cannot judge an answer): {shown}{more}")
    official = official_line(summary)
    if official is not None:
        lines.append(official)
    return lines


def _clip(text: str, limit: int = 90) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
