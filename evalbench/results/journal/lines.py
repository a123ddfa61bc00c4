"""What a journal line must be to count as a conversation record, and which conversation it is:
shared by the readers (:func:`evalbench.results.read_journal`) and ``--resume``."""

from __future__ import annotations

from typing import Any


def is_record(record: Any) -> bool:
    return (isinstance(record, dict) and isinstance(record.get("item_id"), str)
            and isinstance(record.get("outcome"), str) and isinstance(record.get("phases"), list))


def conversation_key(record: dict[str, Any]) -> tuple[Any, str, int]:
    # an item id may recur in another dialect, and in repeated trials (``trials: k``)
    return record.get("dialect"), record["item_id"], trial_of(record)


def trial_of(record: dict[str, Any]) -> int:
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
