"""JSON values: their types (:data:`JsonValue`, :data:`JsonDict`), what kind of JSON value a
Python value is, in words, for messages about input of the wrong type, and the parts of a parsed
value narrowed with isinstance (:func:`obj`, :func:`seq`, ...), for code that reads JSON without
``Any``: each returns what the plain expression in its docstring returns, and the empty value
instead of raising on a value of the wrong type."""

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


def obj(value: object) -> dict[str, object]:
    """``value or {}`` for a JSON object (or null)."""
    return value if isinstance(value, dict) else {}


def objs(value: object) -> list[dict[str, object]]:
    """``value or []`` for an array of JSON objects (or null); members that are not objects are left out."""
    return [v for v in seq(value) if isinstance(v, dict)]


def seq(value: object) -> list[object]:
    """``value or []`` for a JSON array (or null); a tuple (a record built in memory) reads as its list."""
    return value if isinstance(value, list) else list(value) if isinstance(value, tuple) else []


def number(value: object) -> float:
    """``value`` for a JSON number, 0 for null (``value or 0`` but for 0.0, which stays 0.0)."""
    return value if isinstance(value, (int, float)) else 0


def maybe_obj(value: object) -> dict[str, object] | None:
    """``value`` for a JSON object, None for null (an execution that did not happen)."""
    return value if isinstance(value, dict) else None


def maybe_number(value: object) -> float | None:
    """``value`` for a JSON number, None for null."""
    return value if isinstance(value, (int, float)) else None


def obj_items(value: object) -> list[tuple[str, dict[str, object]]]:
    """``(value or {}).items()`` for an object of objects (a summary's per phase, per scorer entries)."""
    return [(key, obj(entry)) for key, entry in obj(value).items()]
