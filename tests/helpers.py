"""Small building blocks for tests: items, and agents / virtual users that follow the public
protocols (they stand in for the system under test, they do not replace our own modules)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from evalbench.core.conversation import AgentReply, Conversation, ReplyKind, VUserReply
from evalbench.dataset import Ambiguity, Conditions, FollowUp, Item


def make_item(item_id: str = "t1", *, golden: str = "SELECT store_name FROM stores ORDER BY store_id", ambiguous: bool = False,
              follow_up: str | None = None, order: bool = True, category: str = "Query") -> Item:
    ambiguities = [Ambiguity(term="the shops", sql_snippet="FROM stores", kind="critical")] if ambiguous else []
    return Item(
        id=item_id,
        database="greenleaf",
        question="List the names of all stores, by store id.",
        ambiguous_question="List the shops." if ambiguous else None,
        ambiguities=ambiguities,
        golden_sql=[golden],
        conditions=Conditions(order=order),
        conditions_explicit=True,
        category=category,
        query_type="dql" if category == "Query" else "dml",
        follow_up=FollowUp(question="Now only the first two.", golden_sql=[follow_up]) if follow_up else None,
    )


class ScriptedAgent:
    """An agent whose every reply comes from ``script(session_index, turn_index, text)``."""

    name = "scripted"

    def __init__(self, script: Callable[[int, int, str], AgentReply], sticky: bool = True) -> None:
        self.script = script
        self.sticky = sticky
        self.sessions: list[ScriptedSession] = []

    def open_session(self, conversation: Conversation) -> ScriptedSession:
        session = ScriptedSession(self, len(self.sessions))
        self.sessions.append(session)
        return session

    def describe(self) -> dict[str, Any]:
        return {"agent": self.name}

    def close(self) -> None:
        pass


class ScriptedSession:
    def __init__(self, agent: ScriptedAgent, index: int) -> None:
        self.agent, self.index = agent, index
        self.received: list[str] = []
        self.closed = False

    def send(self, text: str) -> AgentReply:
        assert not self.closed, "send() on a closed session"
        self.received.append(text)
        return self.agent.script(self.index, len(self.received) - 1, text)

    def close(self) -> None:
        self.closed = True


class FixedVUser:
    name = "fixed"

    def __init__(self, reply: VUserReply | Exception) -> None:
        self.reply = reply
        self.questions: list[str] = []

    def answer(self, conversation: Conversation, question: str) -> VUserReply:
        self.questions.append(question)
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply

    def describe(self) -> dict[str, Any]:
        return {"vuser": self.name}


def sql(text: str) -> AgentReply:
    return AgentReply(ReplyKind.SQL, sql=text)


def ask(text: str = "Which shops?") -> AgentReply:
    return AgentReply(ReplyKind.CLARIFICATION, text=text)


def default_sigint() -> None:
    """``preexec_fn`` of a child that must see Ctrl-C: a shell's background job (a CI runner's
    script) starts with SIGINT ignored, which Python then leaves ignored."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
