"""Virtual users: they answer the agent's clarification questions from ground truth.

``VirtualUser.answer(conversation, question) -> VUserReply``. The reply carries the encoded
action (BIRD-Interact's ``labeled`` / ``unlabeled`` / ``unanswerable``), the decoded text, and an
audit record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from evalbench.core import registries
from evalbench.core.registry import Registry

if TYPE_CHECKING:
    from evalbench.config.vusers import VUserConfig
    from evalbench.core.conversation import Conversation, VUserReply
    from evalbench.dataset.knowledge import Knowledge


class VirtualUser(Protocol):
    name: str

    def answer(self, conversation: Conversation, question: str) -> VUserReply: ...

    def describe(self) -> dict[str, object]: ...


# (config, run seed, knowledge base); a factory is given the config model of its own ``vuser`` name
VUserFactory = Callable[["VUserConfig", int, "Knowledge"], VirtualUser]
# built-ins and plugins (docs/extending.md), listed in evalbench.core.registries
VUSERS: Registry[VUserFactory] = registries.VUSERS


def build_vuser(config: VUserConfig, run_seed: int, knowledge: Knowledge | None = None) -> VirtualUser:
    return VUSERS.get(config.vuser)(config, run_seed, knowledge or {})
