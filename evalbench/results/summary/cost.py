"""What a run's model calls cost, from its journal: tokens and USD per role (the agent, the
virtual user, each judge) and in total, as ``summary.json → cost``, and the lines and tables that
the console, ``summary.md``, ``report.html`` and ``compare`` show of it.

Each record's ``usage`` (:mod:`evalbench.results.journal.usage`) is added up by (role, model). A
role whose tokens had no price in some conversation has ``cost_usd: null`` (unknown, never 0),
and so has the run's ``total_usd``; ``priced_usd`` is the part that had a price. A record of a
journal written before ``usage`` existed counts its agent's ``tokens`` only, unpriced
(``without_usage``). In a rescored run the agent and virtual user are replayed (their usage is
the source run's): ``spent_usd`` is what this run's own calls cost.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from evalbench.results.journal.lines import trial_of
from evalbench.results.journal.usage import UsageEntry

if TYPE_CHECKING:
    from typing_extensions import NotRequired

_R = TypeVar("_R", bound=dict[str, Any])  # a journal record

AGENT, VUSER = "agent", "vuser"
COUNTS = ("calls", "prompt", "completion", "total", "unreported")


def usd(value: float | None) -> str:
    """A cost as text: ``$0.0123``; ``unknown`` for None."""
    if value is None:
        return "unknown"
    if value == 0 or abs(value) >= 0.01:
        return f"${value:,.4f}"
    return f"${value:.6f}"


def signed_usd(value: float | None) -> str:
    return "unknown" if value is None else ("+" if value >= 0 else "-") + usd(abs(value))


class RoleCost(UsageEntry):
    """One (role, model) entry of ``summary.json → cost → roles``: a record's usage entry, summed,
    with its role and the conversations whose cost was unknown."""

    role: str
    unpriced_conversations: int


class CostSummary(TypedDict):
    """``summary.json → cost``, as :meth:`CostTally.result` builds it."""

    currency: str
    total_usd: float | None
    priced_usd: float
    mean_per_conversation_usd: float | None
    conversations: int
    without_usage: int
    roles: list[RoleCost]
    spent_usd: NotRequired[float | None]


@dataclass
class _Role:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    cost: float = 0.0
    unpriced: int = 0  # conversations whose tokens of this role had no price
    price: dict[str, object] | None = None
    replayed: bool = False


def record_usage(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A record's usage per role; for a record journaled before ``usage`` existed, its agent's
    ``tokens`` (model unknown: unpriced unless no token was spent)."""
    usage = record.get("usage")
    if isinstance(usage, dict):
        return {role: entry for role, entry in usage.items() if isinstance(entry, dict)}
    tokens = record.get("tokens") or {}
    prompt, completion = tokens.get("prompt") or 0, tokens.get("completion") or 0
    replies = sum(1 for turn in record.get("turns") or [] if turn.get("reply") is not None)
    return {AGENT: {"model": None, "calls": replies, "prompt": prompt, "completion": completion,
                    "total": tokens.get("total") or prompt + completion,
                    "cost_usd": 0.0 if prompt == completion == 0 else None}}


class CostTally:
    """Accumulates records one by one; with ``per_item`` it also keeps each conversation's cost
    (``compare`` lists the items whose cost changed most), else memory stays flat."""

    def __init__(self, per_item: bool = False) -> None:
        self.roles: dict[tuple[str, str | None], _Role] = {}
        self.conversations = 0
        self.without_usage = 0
        self.items: dict[tuple[str, int], float | None] | None = {} if per_item else None

    def add(self, record: dict[str, Any]) -> None:
        self.conversations += 1
        self.without_usage += not isinstance(record.get("usage"), dict)
        for role, entry in record_usage(record).items():
            model = entry.get("model") if isinstance(entry.get("model"), str) else None
            tally = self.roles.setdefault((role, model), _Role())
            for key in COUNTS:
                tally.counts[key] += entry.get(key) or 0
            cost = entry.get("cost_usd")
            if cost is None:
                tally.unpriced += 1
            else:
                tally.cost += cost
            tally.price = entry.get("price") or tally.price
            tally.replayed = tally.replayed or bool(entry.get("replayed"))
        if self.items is not None:
            self.items[(str(record.get("item_id")), trial_of(record))] = record_cost(record)

    def tap(self, records: Iterable[_R]) -> Iterator[_R]:
        """``records`` as they are, each one added on its way through."""
        for record in records:
            self.add(record)
            yield record

    def result(self) -> CostSummary:
        """``summary.json → cost`` (docs/results_schema.md)."""
        roles = [self._entry(role, model, tally) for (role, model), tally in sorted(self.roles.items(), key=_role_order)]
        priced = round(sum(r["cost_usd"] or 0.0 for r in roles if r["cost_usd"] is not None)
                       + sum(t.cost for t in self.roles.values() if t.unpriced), 8)
        unknown = any(r["cost_usd"] is None for r in roles)
        total = None if unknown else priced
        out: CostSummary = {
            "currency": "USD", "total_usd": total, "priced_usd": priced,
            "mean_per_conversation_usd": round(total / self.conversations, 8) if total is not None and self.conversations else None,
            "conversations": self.conversations, "without_usage": self.without_usage, "roles": roles,
        }
        if any(r.get("replayed") for r in roles):
            spent = [r["cost_usd"] for r in roles if not r.get("replayed")]
            known = [cost for cost in spent if cost is not None]
            out["spent_usd"] = None if len(known) < len(spent) else round(sum(known), 8)
        return out

    @staticmethod
    def _entry(role: str, model: str | None, tally: _Role) -> RoleCost:
        counts = tally.counts  # in COUNTS order
        entry: RoleCost = {"role": role, "model": model, "calls": counts["calls"], "prompt": counts["prompt"],
                           "completion": counts["completion"], "total": counts["total"], "unreported": counts["unreported"],
                                 "cost_usd": None if tally.unpriced else round(tally.cost, 8),
                                 "unpriced_conversations": tally.unpriced, "price": tally.price}
        if tally.replayed:
            entry["replayed"] = True
        return entry


def record_cost(record: dict[str, Any]) -> float | None:
    """One conversation's cost in USD (None: unknown)."""
    costs: list[float | None] = [entry.get("cost_usd") for entry in record_usage(record).values()]
    known = [cost for cost in costs if cost is not None]
    return None if len(known) < len(costs) else round(sum(known), 8)


def _role_order(key: tuple[tuple[str, str | None], _Role]) -> tuple[int, str, str]:
    role, model = key[0]
    return ({AGENT: 0, VUSER: 1}.get(role, 2), role, model or "")


# ------------------------------------------------------------------------------ text


def _tokens(entry: Mapping[str, object]) -> str:
    return f"{entry.get('total', 0):,} tokens ({entry.get('prompt', 0):,} in, {entry.get('completion', 0):,} out)"


def _who(entry: Mapping[str, object]) -> str:
    return str(entry["role"]) + (f" {entry['model']}" if entry.get("model") else "")


def cost_lines(cost: Mapping[str, Any] | None) -> list[str]:
    """The cost of a run (``summary.json → cost``) as lines for the console and summary.md; none
    for a summary written before cost existed."""
    if not cost:
        return []
    roles = cost.get("roles") or []
    parts = "; ".join(f"{_who(r)} {usd(r.get('cost_usd'))}, {_tokens(r)} in {r.get('calls', 0):,} call(s)" for r in roles)
    total = cost.get("total_usd")
    head = f"cost: {usd(total)}" + (f" ({usd(cost.get('mean_per_conversation_usd'))} per conversation)" if total else "")
    lines = [f"{head}: {parts or 'no model call'}"]
    unpriced = [r for r in roles if r.get("cost_usd") is None]
    if unpriced:
        names = ", ".join(f"{_who(r)} ({r.get('total', 0):,} tokens)" for r in unpriced)
        lines.append(f"cost unknown for {names}: no price for that model (add it under prices: in the config); "
                     f"the priced part is {usd(cost.get('priced_usd'))}")
    unreported = sum(r.get("unreported") or 0 for r in roles)
    if unreported:
        lines.append(f"cost is a lower bound: {unreported:,} model call(s) reported no token usage")
    if cost.get("without_usage"):
        lines.append(f"{cost['without_usage']:,} conversation(s) journaled before usage was recorded: "
                     "only the agent's tokens are known, unpriced")
    if "spent_usd" in cost:
        replayed = ", ".join(r["role"] for r in roles if r.get("replayed"))
        lines.append(f"{replayed} replayed from the source run (not called again): this run spent {usd(cost['spent_usd'])}")
    return lines


COST_HEADER = ("role", "model", "calls", "input tokens", "output tokens", "total tokens", "USD")


def cost_rows(cost: Mapping[str, Any] | None) -> list[tuple[str, ...]]:
    """One row per role (:data:`COST_HEADER`), then the total; none without a cost."""
    if not cost:
        return []
    rows: list[tuple[str, ...]] = [(r["role"] + (" (replayed)" if r.get("replayed") else ""), r.get("model") or "—", f"{r.get('calls', 0):,}",
             f"{r.get('prompt', 0):,}", f"{r.get('completion', 0):,}", f"{r.get('total', 0):,}", usd(r.get("cost_usd")))
            for r in cost.get("roles") or []]
    totals = [sum(r.get(k) or 0 for r in cost.get("roles") or []) for k in ("calls", "prompt", "completion", "total")]
    rows.append(("total", "", *(f"{n:,}" for n in totals), usd(cost.get("total_usd"))))
    return rows


# ------------------------------------------------------------------------------ compare


@dataclass
class CostComparison:
    """Two runs' costs (``summary.json → cost`` form) and the paired items whose cost changed most."""

    a: CostSummary
    b: CostSummary
    items: list[tuple[str, float, float]]  # (item, A USD, B USD), largest |B - A| first


def compare_costs(a: CostTally, b: CostTally, listed: int = 10) -> CostComparison:
    """The costs of two runs' tallies (kept ``per_item``); items priced in both are paired."""
    pairs = []
    for key, cost_b in (b.items or {}).items():
        cost_a = (a.items or {}).get(key)
        if cost_a is not None and cost_b is not None and cost_a != cost_b:
            item, trial = key
            pairs.append((item if trial == 1 else f"{item} (trial {trial})", cost_a, cost_b))
    pairs.sort(key=lambda p: (-abs(p[2] - p[1]), p[0]))
    return CostComparison(a.result(), b.result(), pairs[:listed])


COMPARE_HEADER = ("role", "A model", "B model", "A tokens", "B tokens", "A USD", "B USD", "B − A USD")


def _delta(a: float | None, b: float | None) -> str:
    return "unknown" if a is None or b is None else signed_usd(round(b - a, 8))


class _Merged(TypedDict):
    models: list[str]
    total: int
    cost_usd: float | None


def comparison_rows(c: CostComparison) -> list[tuple[str, ...]]:
    """One row per role present in either run (:data:`COMPARE_HEADER`), then the total and the
    mean per conversation."""
    def by_role(cost: CostSummary) -> dict[str, _Merged]:
        merged: dict[str, _Merged] = {}
        for r in cost.get("roles") or []:
            into = merged.setdefault(r["role"], {"models": [], "total": 0, "cost_usd": 0.0})
            into["models"].append(r.get("model") or "—")
            into["total"] += r.get("total") or 0
            cost_usd = r.get("cost_usd")
            into["cost_usd"] = None if into["cost_usd"] is None or cost_usd is None else into["cost_usd"] + cost_usd
        return merged

    a, b = by_role(c.a), by_role(c.b)
    rows: list[tuple[str, ...]] = []
    for role in sorted(set(a) | set(b), key=lambda r: ({AGENT: 0, VUSER: 1}.get(r, 2), r)):
        ra, rb = a.get(role), b.get(role)
        rows.append((role, ", ".join(ra["models"]) if ra else "—", ", ".join(rb["models"]) if rb else "—",
                     f"{ra['total']:,}" if ra else "—", f"{rb['total']:,}" if rb else "—",
                     usd(ra["cost_usd"]) if ra else usd(0.0), usd(rb["cost_usd"]) if rb else usd(0.0),
                     _delta(ra["cost_usd"] if ra else 0.0, rb["cost_usd"] if rb else 0.0)))
    for label, usd_a, usd_b in (("total", c.a.get("total_usd"), c.b.get("total_usd")),
                                ("per conversation", c.a.get("mean_per_conversation_usd"), c.b.get("mean_per_conversation_usd"))):
        rows.append((label, "", "", "", "", usd(usd_a), usd(usd_b), _delta(usd_a, usd_b)))
    return rows


def comparison_lines(c: CostComparison) -> list[str]:
    """The cost comparison in a few lines (for the terminal)."""
    total_a, total_b = c.a.get("total_usd"), c.b.get("total_usd")
    lines = [f"cost: A {usd(total_a)} → B {usd(total_b)} ({_delta(total_a, total_b)}); per conversation "
             f"A {usd(c.a.get('mean_per_conversation_usd'))} → B {usd(c.b.get('mean_per_conversation_usd'))}"]
    for row in comparison_rows(c)[:-2]:
        lines.append(f"  {row[0]}: A {row[5]} ({row[3]} tokens) → B {row[6]} ({row[4]} tokens), {row[7]}")
    for label, cost in (("A", c.a), ("B", c.b)):
        lines += [f"  run {label}: {line}" for line in cost_lines(cost)[1:]]
    return lines
