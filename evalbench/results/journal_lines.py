"""What a journal line must be to count as a conversation record, and which conversation it is:
shared by the readers (:func:`evalbench.results.read_journal`) and ``--resume``."""

from __future__ import annotations

from typing import Any


def is_record(record: Any) -> bool:
    return (isinstance(record, dict) and isinstance(record.get("item_id"), str)
            and isinstance(record.get("outcome"), str) and isinstance(record.get("phases"), list))


def conversation_key(record: dict[str, Any]) -> tuple[Any, str]:
    return record.get("dialect"), record["item_id"]  # an item id may recur in another dialect
