"""Streaming summary of a run, computed from journal records alone (so ``report`` can redo it).

Every conversation counts in every denominator: a scorer's rate is passed / applicable, where a
conversation that ended in an error is applicable and failed; "not applicable" (a scorer that
does not apply to the item) is reported next to it, never hidden.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from evalbench.conversation import Outcome


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

    def as_dict(self, is_metric: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"applicable": self.applicable, "not_applicable": self.not_applicable}
        if is_metric:
            out["mean"] = round(self.value_sum / self.values, 4) if self.values else None
        else:
            out["passed"] = self.passed
            out["rate"] = round(self.passed / self.applicable, 4) if self.applicable else None
        if self.flags:
            out["flags"] = dict(self.flags)
        return out


class SummaryBuilder:
    """Accumulates records one by one; memory does not grow with the number of items."""

    SLICES = ("database", "dialect", "category", "difficulty", "ambiguous")

    def __init__(self, metric_scorers: set[str] | None = None) -> None:
        self.metric_scorers = metric_scorers or set()
        self.total = 0
        self.outcomes: Counter[str] = Counter()
        self.scores: dict[tuple[str, str], _Tally] = defaultdict(_Tally)  # (scorer, phase)
        self.slices: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
        self.primary: str | None = None
        self.turns = 0
        self.clarifications = 0
        self.sessions_opened = 0
        self.tokens: Counter[str] = Counter()
        self.agent_latency_s = 0.0
        self.agent_calls = 0
        self.vuser_actions: Counter[str] = Counter()
        self.follow_up_reached = 0
        self.reward = 0.0
        self.leaking_replies = 0
        self.vuser_replies = 0

    def add(self, record: dict[str, Any]) -> None:
        self.total += 1
        self.outcomes[record["outcome"]] += 1
        self.turns += len(record["turns"])
        self.sessions_opened += record.get("sessions_opened", 0)
        self.tokens.update(record.get("tokens") or {})
        self.reward += record.get("reward") or 0.0
        self.leaking_replies += record.get("leaks") or 0
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
            self.clarifications += phase["clarifications"]
            if phase["phase"] == "follow_up":
                self.follow_up_reached += 1
            for name, score in phase["scores"].items():
                self.scores[(name, phase["phase"])].add(score)
                if self.primary is None and name not in self.metric_scorers:
                    self.primary = name
        main = record["phases"][0] if record["phases"] else None
        if main is not None and self.primary and self.primary in main["scores"]:
            score = main["scores"][self.primary]
            if score["applicable"]:
                for key in self.SLICES:
                    slice_key = (key, str(record.get(key)))
                    self.slices[slice_key]["total"] += 1
                    self.slices[slice_key]["passed"] += int(bool(score["passed"]))

    def result(self, **extra: Any) -> dict[str, Any]:
        scorers: dict[str, dict[str, Any]] = {}
        phase_order = {"main": 0, "follow_up": 1}
        for (name, phase), tally in sorted(self.scores.items(), key=lambda kv: (kv[0][0], phase_order.get(kv[0][1], 9))):
            scorers.setdefault(name, {})[phase] = tally.as_dict(name in self.metric_scorers)
        slices: dict[str, dict[str, Any]] = {}
        for (key, value), counts in sorted(self.slices.items()):
            slices.setdefault(key, {})[value] = {
                "total": counts["total"],
                "passed": counts["passed"],
                "rate": round(counts["passed"] / counts["total"], 4) if counts["total"] else None,
            }
        return {
            "total_items": self.total,
            "outcomes": {o.value: self.outcomes.get(o.value, 0) for o in Outcome},
            "primary_scorer": self.primary,
            "scorers": scorers,
            "slices": slices,
            "conversation": {
                "turns": self.turns,
                "mean_turns": round(self.turns / self.total, 3) if self.total else None,
                "clarifications": self.clarifications,
                "follow_up_phases": self.follow_up_reached,
                "sessions_opened": self.sessions_opened,
                "vuser_actions": dict(self.vuser_actions),
                "vuser_replies": self.vuser_replies,
                "vuser_leaks": self.leaking_replies,
                "vuser_errors": self.outcomes.get("vuser_error", 0),
                "mean_reward": round(self.reward / self.total, 4) if self.total else None,
                "agent_calls": self.agent_calls,
                "mean_agent_latency_s": round(self.agent_latency_s / self.agent_calls, 6) if self.agent_calls else None,
                "tokens": dict(self.tokens),
            },
            **extra,
        }
