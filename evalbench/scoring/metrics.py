"""Conversation metrics (values, not pass/fail)."""

from __future__ import annotations

from collections.abc import Mapping

from evalbench.core.conversation import Conversation, PhaseRecord
from evalbench.scoring import Score


class TurnCount:
    """Turns the phase took: 1 when the agent answered at once, +1 per clarification round."""

    name = "turn_count"
    is_metric = True

    def __init__(self, options: Mapping[str, object]) -> None:
        pass

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        turns = sum(1 for t in conversation.turns if t.phase is phase.phase)
        return Score(float(turns), detail=f"{turns} turns, {phase.clarifications} clarifications")
