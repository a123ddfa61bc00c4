"""Scorers: a registry of named scorers selected by the run config's ``scorers:`` mapping.

A scorer judges one phase of a conversation. It returns a :class:`Score` whose ``passed`` is
True/False for pass/fail scorers, None for metrics (``turn_count``); ``applicable`` is False
when the scorer does not apply to the item (e.g. ``exec_match`` on a management task), which is
shown in every summary next to the denominator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from evalbench.core import registries
from evalbench.core.registry import Registry
from evalbench.core.scores import Score

__all__ = ["SCORERS", "Score", "Scorer", "ScorerFactory", "build_scorers"]

if TYPE_CHECKING:
    from evalbench.core.conversation import Conversation, PhaseRecord


class Scorer(Protocol):
    name: str
    is_metric: bool  # True: reports a mean value, not a pass rate

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score: ...


# (its options: the mapping the config wrote, or an instance of the factory's pydantic ``Config``) -> Scorer
ScorerFactory = Callable[..., Scorer]
# built-ins and plugins (docs/extending.md), listed in evalbench.core.registries
SCORERS: Registry[ScorerFactory] = registries.SCORERS


def build_scorers(spec: Mapping[str, dict[str, object] | None]) -> list[Scorer]:
    """One scorer per entry; a factory with a pydantic ``Config`` gets its options as that model."""
    from evalbench.config.plugins import parse_options

    scorers = []
    for name, options in spec.items():
        factory = SCORERS.get(name)
        scorers.append(factory(parse_options("scorer", name, factory, options or {}, None)))
    return scorers
