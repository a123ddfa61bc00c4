"""The state an ADK session is created with (``model_config.session_state``): a template over the
item, so that an agent that reads its target database or dialect from session state (as data
agents built on ADK do, e.g. ``{database}`` in an instruction) knows where it is.

Each string value is a template: ``{name}`` is replaced by the item's value of ``name``. A string
that is exactly one placeholder keeps the value's own type (``"{knowledge_ids}"`` is a list).
Dicts and lists are rendered value by value; numbers, booleans and null are kept. ``{{`` and
``}}`` are literal braces. An unknown name is a config error naming the key.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import Any

SchemaText = Callable[[str, str], str]  # (dialect, database) -> schema text


def _knowledge_ids(item: Any) -> list[int]:
    """The knowledge entries the item cites (BIRD-Interact's ``external_knowledge``), as ids, less
    those an ambiguity deleted (the agent is meant to ask about them): what the prompt agents see."""
    deleted = {a.knowledge_id for a in item.ambiguities if a.knowledge_id is not None}
    ids = set()
    for ref in item.external_knowledge:
        try:
            ids.add(int(ref))
        except (TypeError, ValueError):
            continue
    return sorted(ids - deleted)


# what a template may name: facts of the item (all that is known when its session opens)
VARIABLES: dict[str, Callable[[Any, SchemaText], Any]] = {
    "database": lambda item, _: item.database,
    "dialect": lambda item, _: item.dialect,
    "item_id": lambda item, _: item.id,
    "category": lambda item, _: item.category,
    "difficulty": lambda item, _: item.difficulty,
    "knowledge_ids": lambda item, _: _knowledge_ids(item),
    "schema": lambda item, schema: schema(item.dialect, item.database),
}

DEFAULT_STATE: dict[str, Any] = {"database": "{database}", "dialect": "{dialect}"}

_FORMATTER = string.Formatter()


def check_template(template: Any, key: str = "session_state") -> None:
    """A ValueError naming the key of the first placeholder that is not a known variable (or that
    is not a plain name: no attributes, indexes or format specs)."""
    if isinstance(template, str):
        for _, name, spec, conversion in _FORMATTER.parse(template):
            if name is None:
                continue
            if name not in VARIABLES or spec or conversion:
                known = ", ".join(sorted(VARIABLES))
                raise ValueError(f"{key}: unknown placeholder {{{name}}} (known: {known})")
    elif isinstance(template, dict):
        for k, v in template.items():
            check_template(v, f"{key}.{k}" if key else str(k))
    elif isinstance(template, list):
        for i, v in enumerate(template):
            check_template(v, f"{key}[{i}]")


def _no_schema(dialect: str, database: str) -> str:
    return ""


def render_state(template: Any, item: Any, schema: SchemaText = _no_schema) -> Any:
    """``template`` with every placeholder replaced by ``item``'s value."""
    if isinstance(template, str):
        parsed = list(_FORMATTER.parse(template))
        if len(parsed) == 1 and parsed[0][0] == "" and parsed[0][1] is not None:
            return VARIABLES[parsed[0][1]](item, schema)  # exactly one placeholder: the value, typed
        return template.format_map({name: VARIABLES[name](item, schema) for _, name, _, _ in parsed if name})
    if isinstance(template, dict):
        return {k: render_state(v, item, schema) for k, v in template.items()}
    if isinstance(template, list):
        return [render_state(v, item, schema) for v in template]
    return template
