"""Scorers of how the conversation went rather than of its answer: ``clarification`` (a
verdict), ``latency`` and ``tokens`` (metrics).

Every scorer's docstring states its exact rule (summarised in docs/scoring.md). None of them
raises on bad input.
"""

from __future__ import annotations

from evalbench.core.conversation import AgentReply, Conversation, Phase, PhaseRecord
from evalbench.core.scores import Score
from evalbench.scoring.options import ScorerOptions, config_error, no_options

__all__ = ["Clarification", "Latency", "Tokens"]


# --------------------------------------------------------------------------- clarification


class Clarification:
    """Main phase only: passed when the agent asked at least one clarification question
    exactly when the item needs clarification (``item.needs_clarification``: it has an
    ambiguity that is not ``non_critical``). Detail: "asked when needed", "no question needed"
    (passed); "needless question", "missing clarification" (failed). Not applicable to the
    follow-up phase."""

    name = "clarification"
    is_metric = False

    def __init__(self, options: ScorerOptions) -> None:
        no_options(self.name, options)

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        if phase.phase is not Phase.MAIN:
            return Score.not_applicable("clarification is judged on the main phase only")
        asked = (phase.clarifications or 0) > 0
        needed = bool(conversation.item.needs_clarification)
        if asked and needed:
            return Score(1.0, True, detail="asked when needed")
        if not asked and not needed:
            return Score(1.0, True, detail="no question needed")
        if asked:
            return Score(0.0, False, detail="needless question")
        return Score(0.0, False, detail="missing clarification")


# --------------------------------------------------------------------------- latency, tokens


def _phase_replies(conversation: Conversation, phase: PhaseRecord) -> list[AgentReply]:
    return [t.reply for t in conversation.turns if t.phase is phase.phase and t.reply is not None]


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


class Latency:
    """Metric: the sum of the agent's reply ``latency_s`` over the phase's turns (seconds;
    the virtual user's and the database's time are not included)."""

    name = "latency"
    is_metric = True

    def __init__(self, options: ScorerOptions) -> None:
        no_options(self.name, options)

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        replies = _phase_replies(conversation, phase)
        total = sum(_number(r.latency_s) for r in replies)
        return Score(total, detail=f"{total:.3f} s over {len(replies)} agent replies")


class Tokens:
    """Metric: total tokens of the agent's replies over the phase's turns (``usage.total``, or
    prompt + completion when the adapter left ``total`` at 0). Option ``prices: {prompt: $ per
    1M tokens, completion: $ per 1M tokens}`` adds the cost (prompt tokens × prompt price +
    completion tokens × completion price, / 1e6) to the detail; a missing price counts as 0."""

    name = "tokens"
    is_metric = True

    def __init__(self, options: ScorerOptions) -> None:
        options = options or {}
        no_options(self.name, options, ("prices",))
        prices = options.get("prices")
        self.prices: dict[str, float] | None = None
        if prices is not None:
            if not isinstance(prices, dict):
                raise config_error(self.name, "prices must be a mapping {prompt: $ per 1M, completion: $ per 1M}", "prices")
            unknown = sorted(set(prices) - {"prompt", "completion"})
            if unknown:
                raise config_error(self.name, f"prices takes prompt and completion, got {', '.join(unknown)}", "prices")
            for key, value in prices.items():
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                    raise config_error(self.name, f"prices.{key} must be a non-negative number, got {value!r}", "prices")
            self.prices = {k: float(prices.get(k, 0.0)) for k in ("prompt", "completion")}

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        prompt = completion = total = 0
        for reply in _phase_replies(conversation, phase):
            usage = reply.usage
            p, c, t = int(_number(usage.prompt)), int(_number(usage.completion)), int(_number(usage.total))
            prompt, completion, total = prompt + p, completion + c, total + (t or p + c)
        detail = f"{total} tokens ({prompt} prompt, {completion} completion)"
        if self.prices is not None:
            cost = (prompt * self.prices["prompt"] + completion * self.prices["completion"]) / 1e6
            detail += f", ${cost:.6f}"
        return Score(float(total), detail=detail)
