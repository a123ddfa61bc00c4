"""Agents under test: the protocol and the registry of adapters.

``Agent.open_session(conversation) -> AgentSession``; ``AgentSession.send(text) -> AgentReply``;
``AgentSession.close()``. A session is sticky: opened at a conversation's first message, reused
for every clarification answer and for the follow-up question, closed when it completes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

from evalbench.registry import Registry

if TYPE_CHECKING:
    from evalbench.conversation import AgentReply, Conversation


class AgentSession(Protocol):
    def send(self, text: str) -> "AgentReply": ...

    def close(self) -> None: ...


class Agent(Protocol):
    name: str
    sticky: bool  # False only to demonstrate agents that forget (session: per_turn)

    def open_session(self, conversation: "Conversation") -> AgentSession: ...

    def describe(self) -> dict[str, Any]:
        """Settings that identify this agent in the manifest (no secrets)."""
        ...

    def close(self) -> None: ...


AgentFactory = Callable[[Any, int], Agent]  # (agent config, run seed) -> Agent
AGENTS: Registry[AgentFactory] = Registry("agent")


def build_agent(config: Any, run_seed: int) -> Agent:
    """The agent named by ``config.agent``."""
    import evalbench.agents.simulated  # noqa: F401  (registers the offline agents)

    return AGENTS.get(config.agent)(config, run_seed)
