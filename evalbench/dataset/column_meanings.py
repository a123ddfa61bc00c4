"""Column descriptions (BIRD-Interact's ``<database>_column_meaning_base.json``), beside the
knowledge files: ``{"<database>|<table>|<column>": description}``.

Read as BIRD-Interact's ADK environment reads them (``db_environment/server.py::_load_db_data``:
keys lower-cased; a description that is not a string — a JSON column's field meanings — is
given as its JSON text). A key that does not have three parts, or names another database, is
skipped with a warning naming the file; a file that is not a JSON object is skipped with a
warning (never a traceback): descriptions help agents search, they never decide a verdict.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)

SUFFIX = "_column_meaning_base.json"
MAX_WARNINGS = 5

ColumnMeanings = dict[str, dict[tuple[str, str], str]]  # database -> (table, column) lower-cased -> description


def _description(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def load_file(path: Path, database: str) -> dict[tuple[str, str], str]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        log.warning("%s: column descriptions not read: %s", path, exc)
        return {}
    if not isinstance(raw, dict):
        log.warning("%s: column descriptions not read: expected a JSON object, got %s", path, type(raw).__name__)
        return {}
    meanings: dict[tuple[str, str], str] = {}
    skipped = 0
    for key, value in raw.items():
        parts = str(key).lower().split("|")
        if len(parts) != 3 or parts[0] != database.lower() or not parts[1] or not parts[2]:
            skipped += 1
            if skipped <= MAX_WARNINGS:
                log.warning("%s: key %r skipped: expected %s|<table>|<column>", path, str(key)[:80], database)
            continue
        meanings[(parts[1], parts[2])] = _description(value)
    if skipped > MAX_WARNINGS:
        log.warning("%s: %d more key(s) skipped", path, skipped - MAX_WARNINGS)
    return meanings


def load_column_meanings(directory: Path | None) -> ColumnMeanings:
    """Every ``<database>_column_meaning_base.json`` in ``directory`` or one level below it (as the
    knowledge files are found)."""
    if directory is None or not directory.is_dir():
        return {}
    found: ColumnMeanings = {}
    for path in sorted(directory.glob(f"*{SUFFIX}")) + sorted(directory.glob(f"*/*{SUFFIX}")):
        database = path.name[: -len(SUFFIX)]
        found[database] = load_file(path, database)
    return found
