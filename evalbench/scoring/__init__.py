"""Scorers: a registry of named scorers selected by the run config's ``scorers:`` mapping.

A scorer judges one phase of a conversation. It returns a :class:`Score` whose ``passed`` is
True/False for pass/fail scorers, None for metrics (``turn_count``); ``applicable`` is False
when the scorer does not apply to the item (e.g. ``exec_match`` on a management task), which is
shown in every summary next to the denominator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

from evalbench.registry import Registry

if TYPE_CHECKING:
    from evalbench.conversation import Conversation, PhaseRecord


@dataclass(frozen=True)
class Score:
    value: float | None  # 1.0 / 0.0 for pass/fail scorers; the measured value for metrics
    passed: bool | None = None  # None for metrics and when not applicable
    applicable: bool = True
    detail: str = ""
    flags: tuple[str, ...] = field(default_factory=tuple)  # e.g. ("both_empty",)

    @classmethod
    def not_applicable(cls, reason: str) -> "Score":
        return cls(value=None, passed=None, applicable=False, detail=reason)


class Scorer(Protocol):
    name: str
    is_metric: bool  # True: reports a mean value, not a pass rate

    def score(self, conversation: "Conversation", phase: "PhaseRecord") -> Score: ...


ScorerFactory = Callable[[dict[str, Any]], Scorer]


class _ScorerRegistry(Registry[ScorerFactory]):
    def _load(self) -> None:
        import evalbench.scoring.answer_match  # noqa: F401
        import evalbench.scoring.execution  # noqa: F401
        import evalbench.scoring.llmrater  # noqa: F401
        import evalbench.scoring.metrics  # noqa: F401
        import evalbench.scoring.more  # noqa: F401
        import evalbench.scoring.state_match  # noqa: F401
        import evalbench.scoring.test_cases  # noqa: F401

    def get(self, name: str) -> ScorerFactory:
        self._load()
        return super().get(name)

    def names(self) -> list[str]:
        self._load()
        return super().names()

    def __contains__(self, name: object) -> bool:
        self._load()
        return super().__contains__(name)


SCORERS = _ScorerRegistry("scorer")


def build_scorers(spec: dict[str, dict[str, Any] | None]) -> list[Scorer]:
    return [SCORERS.get(name)(options or {}) for name, options in spec.items()]
