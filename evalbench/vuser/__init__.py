"""Virtual users: they answer the agent's clarification questions from ground truth.

``VirtualUser.answer(conversation, question) -> VUserReply``. The reply carries the encoded
action (BIRD-Interact's ``labeled`` / ``unlabeled`` / ``unanswerable``), the decoded text, and an
audit record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from evalbench.core import registries
from evalbench.core.registry import Registry

if TYPE_CHECKING:
    from evalbench.core.conversation import Conversation, VUserReply
    from evalbench.dataset.knowledge import Knowledge


class VirtualUser(Protocol):
    name: str

    def answer(self, conversation: Conversation, question: str) -> VUserReply: ...

    def describe(self) -> dict[str, Any]: ...


VUserFactory = Callable[[Any, int, "Knowledge"], VirtualUser]  # (config, run seed, knowledge base)
# built-ins and plugins (docs/extending.md), listed in evalbench.core.registries
VUSERS: Registry[VUserFactory] = registries.VUSERS


def build_vuser(config: Any, run_seed: int, knowledge: Knowledge | None = None) -> VirtualUser:
    return VUSERS.get(config.vuser)(config, run_seed, knowledge or {})
