"""The replay agent: answers each conversation with the replies a run's journal recorded, so the
run can be scored again (``evalbench rescore``) without calling the agent.

The recorded turns of a conversation are arranged by (phase, attempt): an attempt is what the
agent said until its answer (SQL, words or an error); a debugging attempt (``debug_attempts``)
starts a new one. Each ``send`` gives the next recorded reply of the phase and attempt the
conversation is in *now* — so a run scored otherwise takes its own path: a main phase that now
fails is not followed by the recorded follow-up, and a turn the source never had (a follow-up
or a debugging attempt the source did not reach, an item it did not run) is an ``agent_error``
that says so, never a guess.

A conversation that ended in an error (agent_error, timeout, vuser_error, db_error, cancelled)
keeps that outcome: at the point where the source ended, the replay answers with the recorded
error, and when the session closes the recorded outcome (and error) is put back on that phase
and on the conversation — unless the conversation ended before that point, on a verdict.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalbench.agents import AgentContext
from evalbench.config.agents import ReplayAgentConfig
from evalbench.core.conversation import AgentReply, Conversation, Outcome, ReplyKind, TokenUsage, ToolCall
from evalbench.results.journal.lines import conversation_key
from evalbench.results.journal.recording import JOURNAL as JOURNAL  # their old home, kept for a release
from evalbench.results.journal.recording import Recording
from evalbench.results.journal.recording import recorded_part as recorded_part

ERROR_OUTCOMES = frozenset({"agent_error", "timeout", "vuser_error", "db_error", "cancelled"})
_TERMINAL = frozenset({"sql", "answer", "error"})  # reply kinds that end an attempt
_CLIPPED = re.compile(r"\.\.\.\[\d+ more bytes\]$")  # the journal's cut-text marker (results/journal/record.py)


# --------------------------------------------------------------------------- one conversation's script


@dataclass
class Script:
    """One recorded conversation arranged for replay."""

    turns: dict[tuple[str, int], list[Mapping[str, object]]] = field(default_factory=dict)  # (phase, attempt) -> turns
    outcome: str | None = None  # the source conversation's outcome
    stop: tuple[str, int] | None = None  # where it ended in an error (phase, attempt)
    stop_outcome: str | None = None
    stop_error: str | None = None


def _object(value: object) -> Mapping[str, object]:
    """A record's object (the journal's shapes checked it is one where it is not null), else {}."""
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def script_of(record: Mapping[str, object]) -> Script:
    """``record``: a conversation record of the journal (of the types its shapes check)."""
    script = Script(outcome=_text(record.get("outcome")))
    attempts: dict[str, int] = {}
    for turn in _list(record.get("turns")):
        if not isinstance(turn, dict):
            continue
        phase = str(turn.get("phase") or "main")
        attempt = attempts.get(phase, 0)
        script.turns.setdefault((phase, attempt), []).append(turn)
        if _object(turn.get("reply")).get("kind") in _TERMINAL:
            attempts[phase] = attempt + 1
    if script.outcome in ERROR_OUTCOMES:
        phases = [p for p in _list(record.get("phases")) if isinstance(p, dict)]
        # the phase that ended in the error; a cancelled conversation may carry it on no phase: its last
        failed: Mapping[str, object] = next((p for p in phases if p.get("outcome") in ERROR_OUTCOMES),
                                            phases[-1] if phases else {})
        debug_used = failed.get("debug_used")
        script.stop = (str(failed.get("phase") or "main"), debug_used if isinstance(debug_used, int) else 0)
        outcome = _text(failed.get("outcome"))
        script.stop_outcome = outcome if outcome in ERROR_OUTCOMES else script.outcome
        script.stop_error = _text(failed.get("error")) or _text(record.get("error")) or script.stop_outcome
    return script


def _replays_itself(turn: Mapping[str, object] | None) -> bool:
    """The recorded turn ends the conversation the way the source's did when replayed as it is:
    an error reply, or a question whose recorded answer is the virtual user's error."""
    reply = _object((turn or {}).get("reply"))
    if reply.get("kind") == "error":
        return True
    return reply.get("kind") == "clarification" and bool(_object((turn or {}).get("vuser")).get("error"))


def reply_of(recorded: Mapping[str, object]) -> AgentReply:
    """The journal's reply record as an :class:`AgentReply` (latency and tokens as recorded)."""
    try:
        kind = ReplyKind(recorded.get("kind"))
    except ValueError:
        return _error(f"replay: the recorded reply has an unknown kind {recorded.get('kind')!r}")
    sql = recorded.get("sql")
    if kind is ReplyKind.SQL and isinstance(sql, str) and _CLIPPED.search(sql):
        return _error("replay: the journal holds only the beginning of this SQL (it was longer than the "
                      "journal keeps), so it cannot be run again")
    usage = _object(recorded.get("usage"))
    calls = [_tool_call(c) for c in _list(recorded.get("tool_calls")) if isinstance(c, dict)]
    latency = recorded.get("latency_s")
    return AgentReply(kind, text=_text(recorded.get("text")) or "", sql=sql if isinstance(sql, str) else None,
                      tool_calls=calls, usage=TokenUsage.reported(*(usage.get(k) for k in ("prompt", "completion", "total"))),
                      latency_s=float(latency) if isinstance(latency, (int, float)) and latency else 0.0,
                      error=_text(recorded.get("error")), error_kind=_text(recorded.get("error_kind")), raw=recorded.get("raw"))


def _tool_call(recorded: dict[str, Any]) -> ToolCall:
    """A recorded tool call (the journal's shapes do not check its types: ``id`` is kept as it is); a discovery tool's outcome, latency and size are kept (the rescored
    run counts its tool metrics as the recorded run did)."""
    args = recorded.get("args")
    outcome, latency, size = recorded.get("outcome"), recorded.get("latency_s"), recorded.get("result_bytes")
    return ToolCall(name=str(recorded.get("name") or ""), args=args if isinstance(args, dict) else {"value": args},
                    response=recorded.get("response"), id=recorded.get("id"),
                    outcome=outcome if isinstance(outcome, str) else None,
                    latency_s=float(latency) if isinstance(latency, (int, float)) else None,
                    result_bytes=size if isinstance(size, int) else None)


def _error(message: str, kind: str = "replay") -> AgentReply:
    return AgentReply(ReplyKind.ERROR, error=message, error_kind=kind)


# --------------------------------------------------------------------------- the agent


class ReplaySession:
    def __init__(self, agent: ReplayAgent, conversation: Conversation) -> None:
        self.agent = agent
        self.conv = conversation
        self.key = conversation_key({"dialect": conversation.item.dialect, "item_id": conversation.item.id,
                                     "trial": conversation.trial})
        record = agent.recording.record(self.key)
        self.script = script_of(record) if record is not None else None
        self.position: dict[tuple[str, int], int] = {}
        self.served: Mapping[str, object] | None = None  # the recorded turn of the last reply (the replay vuser reads it)
        self.reached_stop = False

    def send(self, text: str) -> AgentReply:
        self.served = None
        if self.script is None:
            trial = f" (trial {self.conv.trial})" if self.conv.trial != 1 else ""
            return _error(f"replay: run {self.agent.recording.run_id} has no conversation for item {self.conv.item.id}{trial}")
        phase = self.conv.phase
        where = (phase.phase.value, phase.debug_used)
        turns = self.script.turns.get(where, [])
        index = self.position.get(where, 0)
        self.position[where] = index + 1
        turn = turns[index] if index < len(turns) else None
        if self.script.stop == where and index >= len(turns) - 1:
            self.reached_stop = True
            if not _replays_itself(turn):  # the error came after the reply (its SQL's execution, a cancellation...)
                outcome = self.script.stop_outcome
                return _error(str(self.script.stop_error), "timeout" if outcome == "timeout" else "replay")
        reply = turn.get("reply") if turn is not None else None
        if turn is None or not isinstance(reply, dict):
            return _error(self._missing(where, index))
        self.served = turn
        return reply_of(reply)

    def _missing(self, where: tuple[str, int], index: int) -> str:
        phase, attempt = where
        source = f"run {self.agent.recording.run_id}"
        if phase != "main" and not any(k[0] == phase for k in self.script.turns):  # type: ignore[union-attr]  # a session is scripted before its first turn
            return f"replay: {source} never asked this {phase} question (there its main phase did not pass)"
        if attempt and index == 0:
            return f"replay: {source} made no debugging attempt {attempt} in the {phase} phase (its answer was judged otherwise there)"
        return (f"replay: {source} has no reply for turn {index + 1} of the {phase} phase"
                f" (its conversation ended there: {self.script.outcome})")  # type: ignore[union-attr]  # a session is scripted before its first turn

    def close(self) -> None:
        """Put the recorded error outcome back when the conversation ended where the source's did."""
        conv, script = self.conv, self.script
        if script is None or not self.reached_stop or script.stop_outcome is None:
            return
        if conv.outcome is None or conv.outcome is Outcome.CANCELLED:
            return  # still running, or this run was cancelled: that is the truth of this run
        phase = next((p for p in conv.phases if p.phase.value == script.stop[0]), None)  # type: ignore[index]  # a script that stopped early has a stop key
        if phase is None or phase.outcome in (None, Outcome.SCORED, Outcome.INVALID_ITEM):
            return  # the conversation ended on a verdict before the recorded error
        wanted = Outcome(script.stop_outcome)
        phase.outcome, phase.error = wanted, script.stop_error
        if conv.outcome is not Outcome.SCORED:
            conv.outcome, conv.error = wanted, script.stop_error


class ReplayAgent:
    """``agent: replay``: replays ``run_dir``'s journal (see the module docstring)."""

    name = "replay"
    sticky = True

    def __init__(self, config: ReplayAgentConfig, context: AgentContext) -> None:
        self.recording = Recording(Path(config.run_dir))

    def describe(self) -> dict[str, object]:
        manifest = self.recording.manifest
        return {"agent": "replay", "run_dir": str(self.recording.run_dir), "source_run_id": self.recording.run_id,
                "source_config_fingerprint": manifest.get("config_fingerprint"),
                "conversations": len(self.recording.offsets), "recorded": recorded_part(manifest, "agent")}

    def probe(self, timeout_s: float) -> str:
        return f"{len(self.recording.offsets)} recorded conversation(s) in {self.recording.journal}"

    def open_session(self, conversation: Conversation) -> ReplaySession:
        return ReplaySession(self, conversation)

    def close(self) -> None:
        pass
