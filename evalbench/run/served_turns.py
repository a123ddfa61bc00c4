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
from evalbench.backends.logins import LentLogin, lend_login
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
from evalbench.core.errors import LendingError
from evalbench.serve.port import ConversationPort
from evalbench.serve.toolbox import ServedToolbox

if TYPE_CHECKING:
    from evalbench.serve.server import Served

VUserAnswer = Callable[[Conversation], VUserReply]
_LOGIN_NAMES = {"host": "db_host", "port": "db_port", "user": "db_user", "password": "db_password",
                "database": "db_name", "path": "db_path"}
_LOGIN_GRACE_S = 5.0  # a login outlives the deadline a little: revoked at the end in any case


class ServedTurns:
    def __init__(self, served: Served, sandbox: Sandbox | None, preprocess_errors: PreprocessErrors,
                 vuser_answer: VUserAnswer) -> None:
        self.served, self.sandbox = served, sandbox
        self.preprocess_errors, self.vuser_answer = preprocess_errors, vuser_answer
        self._ports: dict[int, ConversationPort] = {}
        self._logins: dict[int, LentLogin] = {}
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
        if self.served.config.db_logins:
            conv.served |= self._lend(conv)

    def _lend(self, conv: Conversation) -> dict[str, str]:
        """A login for the conversation's own use, for as long as it may last (LendingError: none)."""
        if self.sandbox is None:
            raise LendingError(f"the database {conv.item.database!r} has no sandbox: no login to lend")
        login = lend_login(self.sandbox, ttl_s=max(conv.deadline - time.monotonic(), 1.0) + _LOGIN_GRACE_S,
                           label=conv.item.id)
        with self._lock:
            self._logins[id(conv)] = login
        return {"db_url": login.url} | {_LOGIN_NAMES[k]: v for k, v in login.fields.items() if k in _LOGIN_NAMES}

    def close(self, conv: Conversation) -> None:
        """The conversation has ended: its token and its login stop working."""
        with self._lock:
            port = self._ports.pop(id(conv), None)
            login = self._logins.pop(id(conv), None)
        if port is not None:
            self.served.remove(port)
        if login is not None:
            login.revoke()

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
            calls, everything = port.end_turn()
        return with_served_calls(reply, calls, everything, port.toolbox.answer_sql())

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


def with_served_calls(reply: AgentReply, calls: list[ToolCall], everything: list[ToolCall],
                      answer_sql: str | None) -> AgentReply:
    """``reply`` with ``calls`` (the turn's served calls not on a question's turn) first, less the
    adapter's own record of any of ``everything`` the turn served (kept once, as the harness ran
    it) and, when it gives no SQL, the SQL its tools say is its answer."""
    adapters = list(reply.tool_calls)
    for call in everything:
        twin = next((c for c in adapters if c.outcome is None and c.name == call.name and c.args == call.args), None)
        if twin is not None:
            adapters.remove(twin)
    reply = dataclasses.replace(reply, tool_calls=[*calls, *adapters])
    if reply.kind is ReplyKind.ANSWER and answer_sql:
        reply = dataclasses.replace(reply, kind=ReplyKind.SQL, sql=answer_sql)
    return reply
