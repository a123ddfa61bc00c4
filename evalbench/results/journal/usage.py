"""The journal's ``usage`` and ``cost_usd`` fields: the token usage and cost of every model call
a conversation made, per role.

Roles: ``agent`` (the agent's replies; ``calls`` counts replies, each of which may be several
model calls, and the model is the agent's configured one), ``vuser`` (the virtual user's model
calls) and ``judge:<scorer>`` (each scorer that called a model, over every phase and every
debugging attempt). A role's ``cost_usd`` is its tokens priced by the run's price table
(:mod:`evalbench.config.prices`): ``null`` when the model has no price (its tokens are still counted),
0 when it spent no token. The record's ``cost_usd`` is the sum, ``null`` when a role's cost is.
A role replayed from another run (``evalbench rescore``: the agent, the virtual user) says
``"replayed": true``: its usage is the source run's, no call was made again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from evalbench.config.prices import RunPricing
from evalbench.core.conversation import Conversation
from evalbench.core.usage import CallUsage

if TYPE_CHECKING:
    from typing_extensions import NotRequired

AGENT, VUSER, JUDGE = "agent", "vuser", "judge:"


def role_usage(conv: Conversation, agent_model: str | None = None) -> dict[str, CallUsage]:
    """Every role's summed usage in ``conv``: the agent first, then the virtual user, then the judges."""
    roles: dict[str, CallUsage] = {AGENT: CallUsage(model=agent_model)}
    for turn in conv.turns:
        if turn.reply is not None:
            usage = turn.reply.usage
            roles[AGENT].add_call(usage.prompt, usage.completion, usage.total)
        if turn.vuser is not None and turn.vuser.usage is not None:
            roles.setdefault(VUSER, CallUsage()).merge(turn.vuser.usage)
    for phase in conv.phases:
        spent = [attempt.get("usage") or {} for attempt in phase.attempts]  # answers replaced by a debugging attempt
        spent.append({name: score.usage for name, score in phase.scores.items()})
        for scores in spent:
            for name, usage in scores.items():
                if isinstance(usage, CallUsage):
                    roles.setdefault(JUDGE + name, CallUsage()).merge(usage)
    return roles


class UsageEntry(TypedDict):
    """One role's entry in a journal record's ``usage`` (:class:`~evalbench.results.schema.Usage`)."""

    model: str | None
    calls: int
    prompt: int
    completion: int
    total: int
    unreported: int
    price: dict[str, object] | None
    cost_usd: float | None
    replayed: NotRequired[bool]


def usage_entry(usage: CallUsage, pricing: RunPricing, replayed: bool = False) -> UsageEntry:
    """One role's journal entry: its model, counts, the price used and the cost (None: unknown)."""
    price = pricing.table.price(usage.model)
    entry: UsageEntry = {
        "model": usage.model, "calls": usage.calls, "prompt": usage.prompt, "completion": usage.completion,
        "total": usage.total, "unreported": usage.unreported,
        "price": price.model_dump() if price is not None else None,
        "cost_usd": pricing.table.cost(usage.model, usage.prompt, usage.completion),
    }
    if replayed:
        entry["replayed"] = True
    return entry


def usage_fields(conv: Conversation, pricing: RunPricing) -> dict[str, object]:
    """The record's ``usage`` (role -> entry) and ``cost_usd`` (the sum; None when a role's cost is unknown)."""
    entries = {role: usage_entry(usage, pricing, role in pricing.replayed)
               for role, usage in role_usage(conv, pricing.agent_model).items()}
    costs = [entry["cost_usd"] for entry in entries.values()]
    known = [cost for cost in costs if cost is not None]
    total = None if len(known) < len(costs) else round(sum(known), 8)
    return {"usage": entries, "cost_usd": total}
