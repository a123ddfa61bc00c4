"""External knowledge (BIRD-Interact's ``<database>_kb.jsonl``): entries items cite by id.

The virtual user may use them to answer about a knowledge ambiguity; agents never see the
entries an item deleted.

Knowledge files are read like dataset files (:func:`evalbench.dataset.reader.iter_jsonl`): a
UTF-8 byte-order mark is accepted, and a line that cannot be used — bytes that are not UTF-8,
invalid JSON, a value that is not an object, an entry without a usable ``id`` — is skipped with
a warning naming the file and the line (never a traceback); the other entries still load. A file
that cannot be read at all is a :class:`~evalbench.core.errors.DatasetError` naming it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from evalbench.dataset.reader import MalformedRecord, iter_jsonl

log = logging.getLogger(__name__)

MAX_WARNINGS = 5  # skipped lines named one by one per file; the rest are counted


@dataclass(frozen=True)
class KnowledgeEntry:
    id: int
    name: str
    description: str
    definition: tuple[str, ...]
    type: str | None = None


Knowledge = dict[str, dict[int, KnowledgeEntry]]  # database -> id -> entry


class _Skip(ValueError):
    """Why one knowledge line is not used (the message names the key)."""


def _entry_id(raw: dict[str, object]) -> int:
    value = raw.get("id")
    if value is None:
        raise _Skip("key 'id' is missing")
    if isinstance(value, bool):
        raise _Skip(f"key 'id': expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value.strip()) <= 30:
        return int(value.strip())
    shown = repr(value) if isinstance(value, (str, int, float)) else type(value).__name__
    raise _Skip(f"key 'id': expected an integer, got {shown[:40]}")


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _entry(raw: object) -> KnowledgeEntry:
    if not isinstance(raw, dict):
        raise _Skip(f"expected a JSON object, got {type(raw).__name__}")
    definition = raw.get("definition")
    if definition is None:
        definition = []
    elif not isinstance(definition, list):
        definition = [definition]
    kind = raw.get("type")
    return KnowledgeEntry(
        id=_entry_id(raw),
        name=_text(raw.get("knowledge")),
        description=_text(raw.get("description")),
        definition=tuple(_text(d) for d in definition),
        type=None if kind is None else str(kind),
    )


def load_file(path: Path) -> dict[int, KnowledgeEntry]:
    """The entries of one knowledge file; every line that cannot be used is logged (file:line)
    and skipped. Raises :class:`~evalbench.core.errors.DatasetError` when the file cannot be read."""
    entries: dict[int, KnowledgeEntry] = {}
    skipped = 0

    def skip(line: int, why: str) -> None:
        nonlocal skipped
        skipped += 1
        if skipped <= MAX_WARNINGS:
            log.warning("%s:%d: knowledge entry skipped: %s", path, line, why)

    for record in iter_jsonl(path):
        if isinstance(record, MalformedRecord):
            skip(record.line, record.message)
            continue
        try:
            entry = _entry(record.data)
        except _Skip as exc:
            skip(record.line, str(exc))
            continue
        if entry.id in entries:
            log.warning("%s:%d: knowledge id %d appears again; this later entry replaces the earlier one",
                        path, record.line, entry.id)
        entries[entry.id] = entry
    if skipped > MAX_WARNINGS:
        log.warning("%s: %d more knowledge line(s) skipped", path, skipped - MAX_WARNINGS)
    return entries


def load_knowledge(directory: Path | None) -> Knowledge:
    """Every ``<database>_kb.jsonl`` in ``directory`` (see the module docstring for bad lines)."""
    knowledge: Knowledge = {}
    if directory is None or not directory.is_dir():
        return knowledge
    for path in sorted(directory.glob("*_kb.jsonl")) + sorted(directory.glob("*/*_kb.jsonl")):  # also <db>/<db>_kb.jsonl (EvalBench, BIRD-Interact)
        knowledge[path.name[: -len("_kb.jsonl")]] = load_file(path)
    return knowledge
