"""Reading a recorded run for replay (``evalbench rescore``): the run directory's manifest, an
index of its journal, and which agent or virtual user produced its replies. The replay agent
(:mod:`evalbench.agents.replay`) and the replay virtual user (:mod:`evalbench.vuser.replay`) both
read the source run through this module."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalbench.results.journal.lines import conversation_key, decode_record
from evalbench.results.journal.safe_read import MAX_LINE_BYTES, journal_lines, open_run_file
from evalbench.results.journal.shapes import read_manifest

__all__ = ["JOURNAL", "ConversationKey", "Recording", "read_manifest", "recorded_part"]

JOURNAL = "conversations.jsonl"
ConversationKey = tuple[object, str, int]  # (dialect, item id, trial): results.journal.lines.conversation_key


class Recording:
    """A run directory's manifest and an index of its journal (conversation key -> byte offset of
    its last complete record, as :func:`evalbench.results.read_journal` counts it); records are
    read when a conversation opens, so memory stays flat whatever the run's size."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.journal = run_dir / JOURNAL
        self.manifest = read_manifest(run_dir)
        self.offsets: dict[ConversationKey, int] = {}
        with open_run_file(run_dir, JOURNAL) as handle:
            assert handle is not None
            for here, raw in journal_lines(handle):
                if raw is None or not raw.endswith(b"\n"):
                    continue  # too long to read; a last line cut short by a crash
                record = decode_record(raw)
                if record is not None:
                    self.offsets[conversation_key(record)] = here

    @property
    def run_id(self) -> str:
        return str(self.manifest.get("run_id") or self.run_dir.name)

    def record(self, key: ConversationKey) -> dict[str, Any] | None:
        """The conversation's record (a journal record: JSON, read by key), or None."""
        offset = self.offsets.get(key)
        if offset is None:
            return None
        with open_run_file(self.run_dir, JOURNAL) as handle:
            assert handle is not None
            handle.seek(offset)
            return decode_record(handle.readline(MAX_LINE_BYTES + 1))  # None: the journal changed since


def recorded_part(manifest: Mapping[str, object], part: str) -> dict[str, object]:
    """The manifest's description of the agent (``part="agent"``) or virtual user (``"vuser"``)
    that produced a run's replies: through replays of replays, the first one."""
    described = manifest.get(part)
    if not isinstance(described, dict):
        return {}
    recorded = described.get("recorded")
    return recorded if isinstance(recorded, dict) else described
