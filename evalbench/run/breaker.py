"""The circuit breaker: a run whose agent is plainly down stops, instead of recording every
item as ``agent_error`` and reporting 0 %.

A completed conversation *could not reach the agent* when it ended in ``agent_error`` and every
reply it got was an error of kind ``connection`` — the adapters' classification
(:func:`evalbench.agents.chat.transport_failure`): a refused connection, a connect timeout, or a
connection dropped before any answer, each after the adapter's own retries. A conversation that
got any other reply (SQL, a question, an answer, an HTTP error, a timeout) reached the agent;
one that never asked it (an invalid item, a database error, a cancelled conversation) counts
neither way. After ``after`` conversations in a row, in the order they complete, could not
reach the agent, the breaker trips: the run stops admitting conversations, the ones in flight
end at once and are journaled as ``cancelled`` (``--resume`` runs them again; the ones that
failed to connect are ``agent_error`` and ``--resume --retry-errors`` runs them again), and the
run ends with :class:`AgentUnreachable` (exit 3). This holds at the start of a run (an endpoint
that was never up) and in its middle (a server that died).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from evalbench.core import deadline
from evalbench.core.conversation import Conversation, Outcome, ReplyKind
from evalbench.core.errors import EvalbenchError

DEFAULT_AFTER = 5
CONNECTION_KINDS = frozenset({"connection"})


class AgentUnreachable(EvalbenchError):
    """The run stopped because the agent could not be reached (exit 3)."""


def could_not_reach(conv: Conversation) -> bool | None:
    """True: ``conv`` never reached the agent (connection failures only); False: it did; None:
    it tells nothing (no agent reply, or cancelled)."""
    if conv.outcome is Outcome.CANCELLED:
        return None  # a cancelled run breaks its own connections
    replies = [turn.reply for turn in conv.turns if turn.reply is not None]
    if not replies:
        return None
    failed = all(r.kind is ReplyKind.ERROR and r.error_kind in CONNECTION_KINDS for r in replies)
    return failed and conv.outcome is Outcome.AGENT_ERROR


class AgentBreaker:
    """Counts the conversations in a row that could not reach the agent; ``stop`` is called once,
    when ``after`` of them are reached (``after`` 0: never)."""

    def __init__(self, endpoint: str | None, stop: Callable[[], object], after: int = DEFAULT_AFTER) -> None:
        self.endpoint = endpoint or "its configured address"
        self.after = after
        self._stop = stop
        self._lock = threading.Lock()
        self.in_a_row = 0
        self.last_error = ""
        self.tripped = False

    def observe(self, conv: Conversation) -> None:
        """Count ``conv`` (called as each conversation is journaled; never raises)."""
        verdict = could_not_reach(conv)
        if self.after <= 0 or verdict is None:
            return
        with self._lock:
            if self.tripped:
                return
            if not verdict:
                self.in_a_row = 0
                return
            self.in_a_row += 1
            self.last_error = next((t.reply.error or "" for t in reversed(conv.turns) if t.reply is not None), "")
            if self.in_a_row < self.after:
                return
            self.tripped = True
        deadline.cancel()  # waits in flight (HTTP reads, backoffs' next tries) end now, as on Ctrl-C
        self._stop()

    def error(self, run_dir: Path) -> AgentUnreachable:
        """The one-line message the run stops with."""
        last = " ".join(self.last_error.split())
        last = last if len(last) <= 200 else last[:200] + "..."
        return AgentUnreachable(
            f"the agent at {self.endpoint} is unreachable: {self.in_a_row} conversations in a row could not connect "
            f"to it (last: {last}); start it or fix its address in model_config, then continue with "
            f"--resume {run_dir} --retry-errors"
        )
