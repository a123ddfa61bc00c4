"""What one turn of an ADK session sends besides the harness's words: the message wrapped in the
template of its kind (``model_config.messages``) and the state rendered for the turn
(``model_config.state_each_turn``, sent as ADK's ``state_delta``).

The kind of a message is read from the conversation the session was opened with, whose last turn
is the one being sent: the virtual user's answer to a clarification, a second user message in the
same phase (the debugging message after a wrong answer: ``core.conversation.after_score``), or the
phase's question (main or follow-up).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from evalbench.config.agents import AdkAgentConfig
from evalbench.core.conversation import Conversation, Phase
from evalbench.dataset.session_state import StateFacts, render_state, render_text


class MessageKind(str, Enum):
    MAIN = "main"
    FOLLOW_UP = "follow_up"
    CLARIFICATION_ANSWER = "clarification_answer"
    DEBUG = "debug"


def message_kind(conversation: Conversation) -> MessageKind:
    """The kind of the conversation's last turn (a conversation with no turn yet: main)."""
    if not conversation.turns:
        return MessageKind.MAIN
    last = conversation.last_turn
    if last.user_role == "vuser":
        return MessageKind.CLARIFICATION_ANSWER
    asked_before = any(t.phase is last.phase and t.user_role == "user" for t in conversation.turns[:-1])
    if asked_before:  # the phase's question came earlier: this is the user's word on a wrong answer
        return MessageKind.DEBUG
    return MessageKind.FOLLOW_UP if last.phase is Phase.FOLLOW_UP else MessageKind.MAIN


@dataclass(frozen=True)
class TurnMessage:
    """What a turn sends: the text, and the state delta (None: none)."""

    text: str
    state_delta: dict[str, object] | None


def turn_message(config: AdkAgentConfig, conversation: Conversation, facts: StateFacts, text: str) -> TurnMessage:
    """``text`` wrapped as ``config.messages`` says for its kind, and the turn's state delta."""
    if not config.messages and not config.state_each_turn:
        return TurnMessage(text, None)
    phase = conversation.last_turn.phase if conversation.turns else Phase.MAIN
    budget = conversation.phases[-1].clarification_budget if conversation.phases else 0
    names: dict[str, object] = {"phase": phase.value, "turn": len(conversation.turns) or 1, "clarification_budget": budget}
    if config.messages is not None:
        m = config.messages
        templates = {MessageKind.MAIN: m.main, MessageKind.FOLLOW_UP: m.follow_up,
                     MessageKind.CLARIFICATION_ANSWER: m.clarification_answer, MessageKind.DEBUG: m.debug}
        text = render_text(templates[message_kind(conversation)], facts, names | {"text": text})
    delta = render_state(config.state_each_turn, facts, names) if config.state_each_turn else None
    return TurnMessage(text, delta)
