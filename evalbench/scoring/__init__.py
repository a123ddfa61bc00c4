"""Scorers: a registry of named scorers selected by the run config's ``scorers:`` mapping.

A scorer judges one phase of a conversation. It returns a :class:`Score` whose ``passed`` is
True/False for pass/fail scorers, None for metrics (``turn_count``); ``applicable`` is False
when the scorer does not apply to the item (e.g. ``exec_match`` on a management task), which is
shown in every summary next to the denominator.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from evalbench.core.registry import Registry
from evalbench.core.scores import Score

__all__ = ["SCORERS", "Score", "Scorer", "ScorerFactory", "build_scorers"]

if TYPE_CHECKING:
    from evalbench.core.conversation import Conversation, PhaseRecord


class Scorer(Protocol):
    name: str
    is_metric: bool  # True: reports a mean value, not a pass rate

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score: ...


ScorerFactory = Callable[[dict[str, Any]], Scorer]


# The modules that register the built-in scorers, imported by name on first lookup (as the agent
# and backend registries do), so that validating a config's scorer names (evalbench.config)
# does not import the scorers nor what they import (SQL comparison, LLM clients).
_MODULES = (
    "evalbench.scoring.answer_match",
    "evalbench.scoring.execution",
    "evalbench.scoring.llmrater",
    "evalbench.scoring.metrics",
    "evalbench.scoring.more",
    "evalbench.scoring.state_match",
    "evalbench.scoring.test_cases",
)


class _ScorerRegistry(Registry[ScorerFactory]):
    def _load(self) -> None:
        for module in _MODULES:
            importlib.import_module(module)

    def get(self, name: str) -> ScorerFactory:
        self._load()
        return super().get(name)

    def names(self) -> list[str]:
        self._load()
        return super().names()

    def __contains__(self, name: object) -> bool:
        self._load()
        return super().__contains__(name)


SCORERS = _ScorerRegistry("scorer", group="evalbench.scorers")  # plugins: docs/extending.md


def scorer_problem(name: str, options: dict[str, Any] | None = None) -> str | None:
    """Why ``name`` with ``options`` cannot be a scorer (unknown, a plugin that does not load,
    options its ``Config`` refuses), or None."""
    from evalbench.config.plugins import parse_options
    from evalbench.core.registry import PluginError

    if name not in SCORERS:
        return f"unknown scorer {name!r} (known: {', '.join(SCORERS.names())})"
    try:
        parse_options("scorer", name, SCORERS.get(name), options or {}, None)
    except (PluginError, ValueError) as exc:
        return str(exc)
    return None


def build_scorers(spec: Mapping[str, dict[str, Any] | None]) -> list[Scorer]:
    """One scorer per entry; a factory with a pydantic ``Config`` gets its options as that model."""
    from evalbench.config.plugins import parse_options

    scorers = []
    for name, options in spec.items():
        factory = SCORERS.get(name)
        scorers.append(factory(parse_options("scorer", name, factory, options or {}, None)))
    return scorers
