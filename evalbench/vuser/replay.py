"""The replay virtual user: gives back the answer the source run's virtual user recorded for the
question the replay agent just replayed (``evalbench rescore``). It calls no model, and it needs
the replay agent (``agent: replay``), whose session knows which recorded turn it served. Each
answer carries the usage the source recorded for it, which the rescored journal marks replayed."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from evalbench.agents.replay import ReplaySession  # the one import between adapter packages: the session it answers
from evalbench.config.vusers import ReplayVUserConfig
from evalbench.core.conversation import Conversation, VUserAction, VUserReply
from evalbench.core.usage import CallUsage
from evalbench.dataset.knowledge import Knowledge
from evalbench.results.journal.recording import read_manifest, recorded_part

_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def action_of(recorded: Mapping[str, object]) -> VUserAction | None:
    """The journal's ``action`` text (``labeled("a", "b")``, ``unlabeled("seg")``,
    ``unanswerable()``) and ``action_kind`` as a :class:`VUserAction`."""
    kind = recorded.get("action_kind")
    action = recorded.get("action")
    text = action if isinstance(action, str) else ""
    if kind == "labeled":
        return VUserAction("labeled", terms=_QUOTED.findall(text))
    if kind == "unlabeled":
        inner = text[len('unlabeled("'):-2] if text.startswith('unlabeled("') and text.endswith('")') else text
        return VUserAction("unlabeled", segment=inner)
    if kind == "unanswerable":
        return VUserAction("unanswerable")
    return None


class ReplayVirtualUser:
    name = "replay"

    def __init__(self, config: ReplayVUserConfig, run_seed: int, knowledge: Knowledge) -> None:
        self.patience = config.patience
        self.manifest = read_manifest(Path(config.run_dir)) if config.run_dir is not None else None

    def describe(self) -> dict[str, object]:
        """The source's virtual user (whose answers these are), and where they were replayed from."""
        if self.manifest is None:
            return {"vuser": "replay", "patience": self.patience}
        recorded = recorded_part(self.manifest, "vuser")
        return recorded | {"replayed_from": self.manifest.get("run_id"), "recorded": recorded}

    def answer(self, conversation: Conversation, question: str) -> VUserReply:
        session = conversation.session
        if not isinstance(session, ReplaySession):
            return VUserReply(None, "", error="the replay virtual user answers only the replay agent (agent: replay)")
        recorded = (session.served or {}).get("vuser")
        if not isinstance(recorded, dict):
            return VUserReply(None, "", error="replay: the source run has no answer to this question "
                                              "(its conversation ended there)")
        audit = recorded.get("audit")
        # the recorded model calls' usage, replayed (the journal marks the role replayed: no call is made)
        return VUserReply(action_of(recorded), recorded.get("text") or "", error=recorded.get("error"),
                          audit=audit if isinstance(audit, dict) else {}, usage=CallUsage.from_record(recorded.get("usage")))
