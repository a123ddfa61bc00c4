"""What a journal line must be to count as a conversation record, and which conversation it is:
shared by the readers (:func:`evalbench.results.read_journal`) and ``--resume``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalbench.results.journal.safe_read import loads
from evalbench.results.journal.shapes import record_problem


def is_record(record: object) -> bool:
    """Whether ``record`` has the types of a conversation record (:class:`~evalbench.results.journal.shapes.RecordShape`)."""
    return record_problem(record) is None


def decode_record(raw: bytes | None) -> dict[str, Any] | None:
    """The conversation record of one journal line, or None: a line too long to read (None), not
    UTF-8 JSON, nested too deeply, or not of a record's types."""
    if raw is None:
        return None
    try:
        record = loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    return record if isinstance(record, dict) and is_record(record) else None


def conversation_key(record: dict[str, Any]) -> tuple[object, str, int]:
    # an item id may recur in another dialect, and in repeated trials (``trials: k``)
    return record.get("dialect"), record["item_id"], trial_of(record)


def trial_of(record: Mapping[str, object]) -> int:
    """The record's trial, 1-based (records of runs without trials have none: 1)."""
    trial = record.get("trial", 1)
    return trial if isinstance(trial, int) and not isinstance(trial, bool) and trial >= 1 else 1


def phase_passed(phase: dict[str, Any]) -> bool | None:
    """A journaled phase's verdict; None when no pass/fail scorer applies to it (records written
    before ``passed`` was recorded: the first applicable pass/fail score)."""
    if "passed" in phase:
        return None if phase["passed"] is None else bool(phase["passed"])
    for score in phase["scores"].values():
        if score["passed"] is not None:
            return bool(score["passed"])
    return None


def invalid_reason(record: dict[str, Any], phase: dict[str, Any]) -> str | None:
    """Why a journaled phase is in no rate (its golden work cannot judge an answer), or None: its
    outcome is ``invalid_item``, or the record lists it in ``invalid_phases`` (a phase judged
    anyway, for BIRD-Interact's official figure)."""
    name = phase.get("phase")
    for entry in record.get("invalid_phases") or ():
        if entry.get("phase") == name:
            return str(entry.get("reason") or "")
    if phase.get("outcome") == "invalid_item":
        return str(phase.get("error") or record.get("error") or "")
    return None
