"""Virtual users: they answer the agent's clarification questions from ground truth.

``VirtualUser.answer(conversation, question) -> VUserReply``. The reply carries the encoded
action (BIRD-Interact's ``labeled`` / ``unlabeled`` / ``unanswerable``), the decoded text, and an
audit record.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from evalbench.core.registry import Registry

if TYPE_CHECKING:
    from evalbench.core.conversation import Conversation, VUserReply
    from evalbench.dataset.knowledge import Knowledge


class VirtualUser(Protocol):
    name: str

    def answer(self, conversation: Conversation, question: str) -> VUserReply: ...

    def describe(self) -> dict[str, Any]: ...


VUserFactory = Callable[[Any, int, "Knowledge"], VirtualUser]  # (config, run seed, knowledge base)
VUSERS: Registry[VUserFactory] = Registry("virtual user", group="evalbench.vusers")  # plugins: docs/extending.md


# The module that registers each virtual user, imported only when it is used.
_MODULES = {"rules": "evalbench.vuser.rules", "llm": "evalbench.vuser.llm", "replay": "evalbench.vuser.replay"}


def known_vusers() -> list[str]:
    """Built-in virtual user names and those of installed plugins."""
    return sorted(set(_MODULES) | set(VUSERS.names()))


def build_vuser(config: Any, run_seed: int, knowledge: Knowledge | None = None) -> VirtualUser:
    if config.vuser in _MODULES and config.vuser not in VUSERS:
        importlib.import_module(_MODULES[config.vuser])
    return VUSERS.get(config.vuser)(config, run_seed, knowledge or {})
