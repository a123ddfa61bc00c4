"""The LLM judge that may confirm an ``answer_match`` pass: the ``llmrater`` machinery (pinned
model, temperature 0, seeded votes, strict JSON verdicts, retries) with a prompt that shows the
question, the golden SQL and result, and the agent's answer in words
(``prompts/answer_rater.txt``; its placeholder ``{answer}`` is required)."""

from __future__ import annotations

from evalbench.clients.calls import truncate
from evalbench.core.conversation import Conversation, PhaseRecord
from evalbench.core.errors import ConfigError
from evalbench.core.json_types import JsonDict
from evalbench.scoring import Score
from evalbench.scoring.llmrater import QUESTION_CHARS, LlmRater, prompt_values

ANSWER_CHARS = 4_000  # characters of the answer shown to the judge


class AnswerRater(LlmRater):
    name = "answer_match.llmrater"
    prompt_name, required_placeholder, config_key = "answer_rater.txt", "{answer}", "scorers.answer_match.llmrater"

    def __init__(self, options: object) -> None:
        try:
            super().__init__(options)
        except ConfigError as exc:  # name the option where it is written
            key = (exc.key or "").replace("scorers.llmrater", self.config_key, 1) or self.config_key
            raise ConfigError(exc.message.replace("llmrater:", "answer_match.llmrater:", 1), key=key) from None

    def describe(self) -> JsonDict:
        return super().describe() | {"scorer": self.name}

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        values = prompt_values(conversation, phase)
        values["answer"] = truncate((phase.answer or "").strip(), ANSWER_CHARS) or ""
        values["question"] = truncate(phase.question, QUESTION_CHARS) or ""
        return self.judge(conversation, values)
