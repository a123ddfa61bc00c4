"""External knowledge (BIRD-Interact's ``<database>_kb.jsonl``): entries items cite by id.

The virtual user may use them to answer about a knowledge ambiguity; agents never see the
entries an item deleted.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KnowledgeEntry:
    id: int
    name: str
    description: str
    definition: tuple[str, ...]
    type: str | None = None


Knowledge = dict[str, dict[int, KnowledgeEntry]]  # database -> id -> entry


def load_knowledge(directory: Path | None) -> Knowledge:
    """Every ``<database>_kb.jsonl`` in ``directory``; unreadable lines are logged and skipped."""
    knowledge: Knowledge = {}
    if directory is None or not directory.is_dir():
        return knowledge
    for path in sorted(directory.glob("*_kb.jsonl")):
        entries: dict[int, KnowledgeEntry] = {}
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                definition = raw.get("definition") or []
                entries[int(raw["id"])] = KnowledgeEntry(
                    id=int(raw["id"]),
                    name=str(raw.get("knowledge", "")),
                    description=str(raw.get("description", "")),
                    definition=tuple(str(d) for d in (definition if isinstance(definition, list) else [definition])),
                    type=raw.get("type"),
                )
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("%s:%d: knowledge entry skipped: %s", path, number, exc)
        knowledge[path.name[: -len("_kb.jsonl")]] = entries
    return knowledge
