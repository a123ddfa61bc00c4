"""``bird_interact_reward``: the part of BIRD-Interact's reward a phase earned (a metric that
never raises)."""

from __future__ import annotations

from evalbench.core.conversation import Conversation, PhaseRecord
from evalbench.core.scores import Score
from evalbench.results.journal.record import REWARDS
from evalbench.scoring.options import ScorerOptions, no_options

__all__ = ["BirdInteractReward"]


class BirdInteractReward:
    """Metric: the part of BIRD-Interact's reward earned by THIS phase, so that the per-phase
    values of a conversation add up to its ``reward`` (evalbench.results.journal.record.reward): main
    phase 0.7 when solved at the first try, 0.5 when solved after a debugging attempt; follow-up
    0.3 / 0.2; 0 when not solved. "Solved" is the phase's declared primary verdict (``primary:``),
    which is decided before any metric runs. A phase that ended without an answer (an error or
    timeout outcome) gives 0."""

    name = "bird_interact_reward"
    is_metric = True

    def __init__(self, options: ScorerOptions) -> None:
        no_options(self.name, options)

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        if phase.phase not in REWARDS:
            return Score.not_applicable(f"no reward for phase {phase.phase}")
        if phase.outcome is not None and phase.outcome.value != "scored":
            return Score(0.0, detail=f"not solved: {phase.outcome.value}")
        verdict = phase.verdict
        if verdict is None:
            return Score(0.0, detail="not judged: no primary scorer applies to this phase")
        name = phase.primary
        if not verdict.passed:
            return Score(0.0, detail=f"not solved ({name} failed)")
        first, debugged = REWARDS[phase.phase]
        value = debugged if phase.debug_used else first
        how = "after debugging" if phase.debug_used else "at the first try"
        return Score(value, detail=f"solved {how} ({name} passed)")
