"""JSON values: their types (:data:`JsonValue`, :data:`JsonDict`), and what kind of JSON value a
Python value is, in words, for messages about input of the wrong type."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

# A value as json.loads returns it. Functions that read JSON take ``object`` and narrow it with
# isinstance; these aliases name what they build and return.
JsonScalar: TypeAlias = str | int | float | bool | None
JsonValue: TypeAlias = "JsonScalar | list[JsonValue] | dict[str, JsonValue]"
JsonDict: TypeAlias = "dict[str, JsonValue]"


def json_type(value: object) -> str:
    """``null``, ``a boolean``, ``a number``, ``a string``, ``an array`` or ``an object`` (else the
    Python type's name)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__
