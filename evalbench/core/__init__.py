"""The vocabulary every layer shares (README.md): conversations and their pure transitions, items,
scores, execution results, usage, errors and the registration mechanism.

The names below are the package's face; each is imported from its module on first use, so that
importing one core module (the command line's terminal filter) imports no other.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_FACE = {
    "conversation": ("AgentReply", "AgentSession", "Conversation", "Outcome", "Phase", "PhaseRecord", "ReplyKind", "Stage",
                     "TokenUsage", "ToolCall", "Turn", "VUserAction", "VUserReply"),
    "items": ("Ambiguity", "AmbiguityKind", "Conditions", "DatasetFormat", "FollowUp", "Item", "RecordError"),
    "scores": ("Score",),
    "execution_result": ("ErrorKind", "ExecutionResult"),
    "usage": ("CallUsage",),
    "errors": ("ConfigError", "DatasetError", "EvalbenchError", "ProvisioningError", "RunDirError", "SandboxError"),
    "registry": ("PluginError", "Registry"),
}
_HOME = {name: module for module, names in _FACE.items() for name in names}

if TYPE_CHECKING:
    from evalbench.core.conversation import (
        AgentReply,
        AgentSession,
        Conversation,
        Outcome,
        Phase,
        PhaseRecord,
        ReplyKind,
        Stage,
        TokenUsage,
        ToolCall,
        Turn,
        VUserAction,
        VUserReply,
    )
    from evalbench.core.errors import ConfigError, DatasetError, EvalbenchError, ProvisioningError, RunDirError, SandboxError
    from evalbench.core.execution_result import ErrorKind, ExecutionResult
    from evalbench.core.items import Ambiguity, AmbiguityKind, Conditions, DatasetFormat, FollowUp, Item, RecordError
    from evalbench.core.registry import PluginError, Registry
    from evalbench.core.scores import Score
    from evalbench.core.usage import CallUsage


def __getattr__(name: str) -> object:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)


__all__ = ["AgentReply", "AgentSession", "Ambiguity", "AmbiguityKind", "CallUsage", "Conditions", "ConfigError",
           "Conversation", "DatasetError", "DatasetFormat", "ErrorKind", "EvalbenchError", "ExecutionResult",
           "FollowUp", "Item", "Outcome", "Phase", "PhaseRecord", "PluginError", "ProvisioningError", "RecordError",
           "Registry", "ReplyKind", "RunDirError", "SandboxError", "Score", "Stage", "TokenUsage", "ToolCall",
           "Turn", "VUserAction", "VUserReply"]
