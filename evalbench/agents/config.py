"""The agent config models, where the adapters have always imported them from.

They live in :mod:`evalbench.config.agents`, part of the config schema, which must import no
agent; this module re-exports them for the adapters, tests and third-party agents.
"""

from __future__ import annotations

from evalbench.config.agents import (
    FAILURE_KINDS,
    AdkAgentConfig,
    AgentConfig,
    ChatAgentOptions,
    DiscoveryTool,
    GeminiAgentConfig,
    OpenAICompatAgentConfig,
    PredictionsAgentConfig,
    ReplayAgentConfig,
    ReplyConvention,
    RetryConfig,
    SessionMode,
    SimulatedAgentConfig,
    ToolLimits,
    default_prompt,
)

__all__ = [
    "FAILURE_KINDS",
    "AdkAgentConfig",
    "AgentConfig",
    "ChatAgentOptions",
    "DiscoveryTool",
    "GeminiAgentConfig",
    "OpenAICompatAgentConfig",
    "PredictionsAgentConfig",
    "ReplayAgentConfig",
    "ReplyConvention",
    "RetryConfig",
    "SessionMode",
    "SimulatedAgentConfig",
    "ToolLimits",
    "default_prompt",
]
