"""The declared primary verdict: which scorer decides each phase's ``success``.

The run config's ``primary:`` maps a category — ``Query`` or ``Management``, optionally for one
phase (``Query/follow_up``) — to a scorer, or to a list of scorers of which the first one that
applies to the phase decides. Defaults: a question is judged by ``exec_match``; a management task
by its ``test_cases``, or by ``state_match`` when it has none. With ``accept_nl_answers: true``, a
question answered in words (no SQL) is judged by ``answer_match``. The order of the keys under
``scorers:`` plays no part.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

# the key's syntax is read with the config schema (which imports no scorer); kept importable here
from evalbench.config.primary import DEFAULT_PRIMARY as DEFAULT_PRIMARY
from evalbench.config.primary import parse_primary as parse_primary
from evalbench.core.json_types import JsonDict

if TYPE_CHECKING:
    from evalbench.core.conversation import PhaseRecord

NL_SCORER = "answer_match"


class PrimaryPolicy:
    """Chooses the scorer whose verdict is a phase's verdict."""

    def __init__(self, mapping: Mapping[str, Sequence[str]] | None = None, accept_nl_answers: bool = False) -> None:
        self.mapping = {key: tuple(names) for key, names in (mapping or DEFAULT_PRIMARY).items()}
        self.accept_nl_answers = accept_nl_answers

    def scorer_names(self) -> list[str]:
        """Every scorer the policy may choose, in a stable order (they must all be run)."""
        names = [name for key in sorted(self.mapping) for name in self.mapping[key]]
        if self.accept_nl_answers:
            names.append(NL_SCORER)
        return list(dict.fromkeys(names))

    def candidates(self, is_query: bool, phase: str) -> tuple[str, ...]:
        category = "Query" if is_query else "Management"
        return self.mapping.get(f"{category}/{phase}") or self.mapping.get(category) or ()

    def choose(self, phase: PhaseRecord) -> str | None:
        """The deciding scorer among the phase's scores: the first candidate that applies; None
        when none does (the phase is then not judged)."""
        candidates = self.candidates(phase.is_query, phase.phase.value)
        if self.accept_nl_answers and phase.is_query and not phase.sql and phase.answer:
            candidates = (NL_SCORER, *candidates)
        for name in candidates:
            score = phase.scores.get(name)
            if score is not None and score.applicable and score.passed is not None:
                return name
        return None

    def describe(self) -> JsonDict:
        """What the manifest records (compare and --baseline refuse runs where it differs)."""
        return {"primary": {key: list(names) for key, names in sorted(self.mapping.items())},
                "accept_nl_answers": self.accept_nl_answers}
