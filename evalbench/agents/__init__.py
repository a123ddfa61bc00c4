"""Agents under test: the protocol and the registry of adapters.

``Agent.open_session(conversation) -> AgentSession``; ``AgentSession.send(text) -> AgentReply``;
``AgentSession.close()``. A session is sticky: opened at a conversation's first message, reused
for every clarification answer and for the follow-up question, closed when it completes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from evalbench.core import registries
from evalbench.core.conversation import AgentSession
from evalbench.core.registry import Registry

if TYPE_CHECKING:
    from evalbench.backends.tables import TableInfo
    from evalbench.config.agents import AgentConfig
    from evalbench.core.conversation import Conversation
    from evalbench.core.execution_result import ExecutionResult
    from evalbench.dataset.column_meanings import ColumnMeanings
    from evalbench.dataset.knowledge import Knowledge

__all__ = ["AGENTS", "Agent", "AgentContext", "AgentFactory", "AgentSession", "build_agent"]


class Agent(Protocol):
    name: str
    sticky: bool  # False only to demonstrate agents that forget (session: per_turn)

    def open_session(self, conversation: Conversation) -> AgentSession: ...

    def describe(self) -> dict[str, object]:
        """Settings that identify this agent in the manifest (no secrets)."""
        ...

    def close(self) -> None: ...


def _no_schema(dialect: str, database: str) -> str:
    return ""


def _no_query(dialect: str, database: str, sql: str) -> list[tuple[object, ...]] | None:
    return None


def _no_execute(dialect: str, database: str, sql: str) -> ExecutionResult | None:
    return None


def _no_tables(dialect: str, database: str) -> list[TableInfo]:
    return []


def _no_schema_file(database: str) -> str:
    raise ValueError(f"{{schema_file}}: the run gives no schema files (database {database!r})")


@dataclass(frozen=True)
class AgentContext:
    """What the run gives an agent besides its config."""

    seed: int = 0
    schema: Callable[[str, str], str] = _no_schema  # (dialect, database) -> schema text
    knowledge: Knowledge = field(default_factory=dict)
    column_meanings: ColumnMeanings = field(default_factory=dict)  # database -> (table, column) -> description
    # (dialect, database, sql) -> rows, read-only through the sandbox (None: failed or unknown
    # database); for offline agents that answer in words
    query: Callable[[str, str, str], list[tuple[object, ...]] | None] = _no_query
    # for the discovery tools: (dialect, database, sql) -> the result of a read-only execution
    # through the sandbox (None: unknown database), and (dialect, database) -> its tables
    execute: Callable[[str, str, str], ExecutionResult | None] = _no_execute
    tables: Callable[[str, str], list[TableInfo]] = _no_tables
    schema_file: Callable[[str], str] = _no_schema_file  # database -> its <database>_schema.txt ({schema_file})


# (agent config, context) -> Agent; a factory is given the config model of its own ``agent`` name
AgentFactory = Callable[["AgentConfig", AgentContext], Agent]
# built-ins and plugins (docs/extending.md), listed in evalbench.core.registries
AGENTS: Registry[AgentFactory] = registries.AGENTS


def build_agent(config: AgentConfig, context: AgentContext | int = 0) -> Agent:
    """The agent named by ``config.agent``."""
    if isinstance(context, int):
        context = AgentContext(seed=context)
    return AGENTS.get(config.agent)(config, context)
