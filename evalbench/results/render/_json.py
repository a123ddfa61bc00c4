"""Reading the JSON a run writes (journal records, manifest, summary) without ``Any``: the parts
of a parsed object the renderers use, narrowed with isinstance.

For the records a run writes (results/schema.py) each helper returns what the plain expression
in its docstring returns; on a value of the wrong type it returns the empty value instead of
raising.
"""

from __future__ import annotations


def obj(value: object) -> dict[str, object]:
    """``value or {}`` for a JSON object (or null)."""
    return value if isinstance(value, dict) else {}


def objs(value: object) -> list[dict[str, object]]:
    """``value or []`` for an array of JSON objects (or null); members that are not objects are left out."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def seq(value: object) -> list[object]:
    """``value or []`` for a JSON array (or null)."""
    return value if isinstance(value, list) else []


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
