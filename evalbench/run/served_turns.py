"""A conversation's side of the run's server (:mod:`evalbench.serve`): its port opened with its
agent session and closed when it ends; the calls its agent made through the port put on the
turn's reply; a question asked through a tool turned into a clarification turn of its own.

The question is answered while the agent's turn is still running (the stage thread waits in
``send``; the port lets one call through at a time), through the same transitions as a question
asked in a reply: counted against the phase's clarification budget and ``max_turns``, answered
and audited by the run's virtual user, journaled, shown by ``explain``. A question over the
budget is refused (the tool says to answer now) instead of ending the phase.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from evalbench.backends.base import PreprocessErrors, Sandbox
from evalbench.core.conversation import (
    AgentReply,
    Conversation,
    ReplyKind,
    Stage,
    ToolCall,
    VUserReply,
    after_generate,
    after_prompt,
    after_vuser,
    next_user_message,
)
from evalbench.serve.port import ConversationPort
from evalbench.serve.toolbox import ServedToolbox

if TYPE_CHECKING:
    from evalbench.serve.server import Served

VUserAnswer = Callable[[Conversation], VUserReply]


class ServedTurns:
    def __init__(self, served: Served, sandbox: Sandbox | None, preprocess_errors: PreprocessErrors,
                 vuser_answer: VUserAnswer) -> None:
        self.served, self.sandbox = served, sandbox
        self.preprocess_errors, self.vuser_answer = preprocess_errors, vuser_answer
        self._ports: dict[int, ConversationPort] = {}
        self._lock = threading.Lock()

    def open(self, conv: Conversation) -> None:
        """The conversation's port, before its agent session opens (the session state names it)."""
        with self._lock:
            if id(conv) in self._ports:
                return
        toolbox = ServedToolbox(self.served.kit, conv, self.sandbox, self.preprocess_errors)
        port = ConversationPort(self.served.new_token(), conv, toolbox,
                                lambda question, calls: self.ask(conv, question, calls), self.served.tools)
        conv.served = self.served.add(port)
        with self._lock:
            self._ports[id(conv)] = port

    def close(self, conv: Conversation) -> None:
        with self._lock:
            port = self._ports.pop(id(conv), None)
        if port is not None:
            self.served.remove(port)

    def turn(self, conv: Conversation, send: Callable[[], AgentReply]) -> AgentReply:
        """``send()`` with the port open for the turn; the reply with the turn's calls on it."""
        with self._lock:
            port = self._ports.get(id(conv))
        if port is None:
            return send()
        port.begin_turn()
        try:
            reply = send()
        finally:
            calls = port.end_turn()
        return with_served_calls(reply, calls, port.toolbox.answer_sql())

    def ask(self, conv: Conversation, question: str, calls: list[ToolCall]) -> str | None:
        """The virtual user's answer to a question asked through a tool (None: refused, over the
        clarification budget or ``max_turns``; the phase goes on)."""
        phase = conv.phase
        if (conv.stage is not Stage.GENERATE or phase.clarifications >= phase.clarification_budget
                or len(conv.turns) >= conv.max_turns):
            return None
        started = conv.last_turn.started
        reply = AgentReply(ReplyKind.CLARIFICATION, text=question, tool_calls=calls, latency_s=time.time() - started)
        if after_generate(conv, reply) is not Stage.VUSER:
            return None  # the conversation's deadline passed
        answer = self.vuser_answer(conv)
        if after_vuser(conv, answer) is not Stage.PROMPT:
            return None  # the virtual user failed: the phase has ended (vuser_error)
        after_prompt(conv, *next_user_message(conv))
        return answer.text


def with_served_calls(reply: AgentReply, calls: list[ToolCall], answer_sql: str | None) -> AgentReply:
    """``reply`` with the turn's served calls first (an adapter's record of the same call, not run
    by the harness, is dropped) and, when it gives no SQL, the SQL its tools say is its answer."""
    adapters = list(reply.tool_calls)
    for call in calls:
        twin = next((c for c in adapters if c.outcome is None and c.name == call.name and c.args == call.args), None)
        if twin is not None:
            adapters.remove(twin)
    reply = dataclasses.replace(reply, tool_calls=[*calls, *adapters])
    if reply.kind is ReplyKind.ANSWER and answer_sql:
        reply = dataclasses.replace(reply, kind=ReplyKind.SQL, sql=answer_sql)
    return reply
