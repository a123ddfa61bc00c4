"""The verdict a scorer gives one phase (a core type: conversations hold scores, the scorers in
:mod:`evalbench.scoring` make them).

``passed`` is True/False for pass/fail scorers, None for metrics (``turn_count``); ``applicable``
is False when the scorer does not apply to the item (e.g. ``exec_match`` on a management task).
``usage`` is set by a scorer that calls a model (an LLM judge): its calls' token usage, which the
journal reports as the role ``judge:<scorer>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evalbench.core.usage import CallUsage


@dataclass(frozen=True)
class Score:
    value: float | None  # 1.0 / 0.0 for pass/fail scorers; the measured value for metrics
    passed: bool | None = None  # None for metrics and when not applicable
    applicable: bool = True
    detail: str = ""
    flags: tuple[str, ...] = field(default_factory=tuple)  # e.g. ("both_empty",)
    # a judge's model calls for this verdict (None: the scorer calls no model); bookkeeping, not part of the verdict
    usage: CallUsage | None = field(default=None, compare=False)

    @classmethod
    def not_applicable(cls, reason: str) -> Score:
        """A score saying the scorer does not apply, and why."""
        return cls(value=None, passed=None, applicable=False, detail=reason)
