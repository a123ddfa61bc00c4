"""Token usage of the model calls a participant other than the agent makes: the virtual user's
(on its reply, :attr:`evalbench.core.conversation.VUserReply.usage`) and each judge's (on its score,
:attr:`evalbench.core.scores.Score.usage`). The agent's usage stays on each of its replies
(:class:`evalbench.core.conversation.TokenUsage`).

The counts are what each response reported (google-genai ``usage_metadata``, an
OpenAI-compatible ``usage``), never estimated: a response that reported none is counted in
``unreported`` and adds no tokens, so a cost computed from the counts is then a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CallUsage:
    """The summed usage of one participant's model calls (within one reply or one score)."""

    model: str | None = None  # the model called, as configured (prices are looked up by it)
    calls: int = 0  # responses received (a request that failed before any response is not counted)
    prompt: int = 0
    completion: int = 0  # thinking tokens included (billed as output)
    total: int = 0
    unreported: int = 0  # responses that reported no usage: their tokens are unknown, not 0

    def add_call(self, prompt: int, completion: int, total: int, *, reported: bool = True) -> None:
        """Count one response and the tokens it reported (``total`` 0: prompt + completion)."""
        self.calls += 1
        self.unreported += not reported
        self.prompt += prompt
        self.completion += completion
        self.total += total or prompt + completion

    def merge(self, other: CallUsage) -> None:
        """Add ``other``'s counts to these (its model, when these have none)."""
        self.model = self.model or other.model
        self.calls += other.calls
        self.unreported += other.unreported
        self.prompt += other.prompt
        self.completion += other.completion
        self.total += other.total

    @classmethod
    def from_record(cls, recorded: object) -> CallUsage | None:
        """The usage a journal recorded (``{"model", "calls", "prompt", ...}``); None for anything else."""
        if not isinstance(recorded, dict):
            return None
        model = recorded.get("model")
        counts = {key: _count(recorded.get(key)) for key in ("calls", "prompt", "completion", "total", "unreported")}
        return cls(model=model if isinstance(model, str) else None, **counts)


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
