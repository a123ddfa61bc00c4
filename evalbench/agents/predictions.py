"""``agent: predictions``: a predictions file (item id -> SQL, BIRD-Interact's, EvalBench's or
plain JSON/JSONL) scored through the whole pipeline, as if an agent had answered.

It never asks a question: the first message of each phase is answered with that phase's
prediction (the main phase's, then the follow-up's). An item with no prediction ends as
``agent_error`` ("no prediction for item X") and stays in every denominator; a blank prediction
is an answer without SQL (scored as a failure, as BIRD-Interact fails an empty ``pred_sqls``); a
debugging attempt (``debug_attempts``) gets the same prediction again — a file cannot do
better. Predictions for items the run never asked about (unknown ids, or outside the run's
subset) are listed in a warning when the run ends.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path

from evalbench.agents import AgentContext
from evalbench.agents.predictions_file import read_predictions
from evalbench.config.agents import PredictionsAgentConfig
from evalbench.core.conversation import AgentReply, Conversation, ReplyKind

log = logging.getLogger(__name__)
LISTED = 10  # unused ids named in the warning


class PredictionsSession:
    def __init__(self, agent: PredictionsAgent, conversation: Conversation) -> None:
        self.agent = agent
        self.conv = conversation

    def send(self, text: str) -> AgentReply:
        item_id, phase = self.conv.item.id, self.conv.phase.phase.value
        table = self.agent.predictions.main if phase == "main" else self.agent.predictions.follow_up
        self.agent.asked(phase, item_id)
        if item_id not in table:
            what = "prediction" if phase == "main" else f"{phase} prediction"
            return AgentReply(ReplyKind.ERROR, error=f"no {what} for item {item_id}", error_kind="no_prediction")
        sql = table[item_id]
        if sql is None:
            return AgentReply(ReplyKind.ANSWER, text="")  # a blank prediction: no SQL
        return AgentReply(ReplyKind.SQL, sql=sql)

    def close(self) -> None:
        pass


class PredictionsAgent:
    name = "predictions"
    sticky = True

    def __init__(self, config: PredictionsAgentConfig, context: AgentContext) -> None:
        self.path = Path(config.predictions_file)
        self.follow_up_file = Path(config.follow_up_file) if config.follow_up_file is not None else None
        self.format = config.format
        self.predictions = read_predictions(self.path, self.format, follow_up_file=self.follow_up_file)
        self._asked: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def asked(self, phase: str, item_id: str) -> None:
        with self._lock:
            self._asked.add((phase, item_id))

    def describe(self) -> dict[str, object]:
        files = [self.path] + ([self.follow_up_file] if self.follow_up_file else [])
        return {"agent": "predictions", "predictions_file": str(self.path),
                "follow_up_file": str(self.follow_up_file) if self.follow_up_file else None, "format": self.format,
                "sha256": {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files},
                "predictions": {"main": len(self.predictions.main), "follow_up": len(self.predictions.follow_up)}}

    def probe(self, timeout_s: float) -> str:
        return (f"{len(self.predictions.main)} main and {len(self.predictions.follow_up)} follow-up prediction(s) "
                f"read from {self.path}")

    def open_session(self, conversation: Conversation) -> PredictionsSession:
        return PredictionsSession(self, conversation)

    def unused(self) -> list[str]:
        """Predictions no conversation asked for (unknown ids, items outside the run's subset,
        follow-ups never reached are not listed: those items were asked)."""
        with self._lock:
            asked_items = {item_id for _, item_id in self._asked}
        return sorted(set(self.predictions.main) - asked_items) + sorted(
            f"{i}:follow_up" for i in set(self.predictions.follow_up) - asked_items)

    def close(self) -> None:
        unused = self.unused()
        if unused and self._asked:
            listed = ", ".join(unused[:LISTED]) + (f", ... ({len(unused) - LISTED} more)" if len(unused) > LISTED else "")
            log.warning("%s: %d prediction(s) were never asked for (unknown item ids, items outside the run's subset, "
                        "or invalid items): %s", self.path, len(unused), listed)
