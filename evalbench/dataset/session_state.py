"""The state an ADK session is created with (``model_config.session_state``): a template over the
item, so that an agent that reads its target database or dialect from session state (as data
agents built on ADK do, e.g. ``{database}`` in an instruction) knows where it is.

Each string value is a template: ``{name}`` is replaced by the value of :data:`VARIABLES`
``name``. A string that is exactly one placeholder keeps the value's own type
(``"{knowledge_ids}"`` is a list, ``"{max_turn}"`` a number). Dicts and lists are rendered value
by value; numbers, booleans and null are kept. ``{{`` and ``}}`` are literal braces. An unknown
name is a config error naming the key. ``external_kg`` and ``max_turn`` are what BIRD-Interact's
own ADK agent reads from its state (docs/agents.md); ``schema_file`` is the dataset's
``<database>_schema.txt``, the schema text BIRD-Interact gives its agent as ``db_schema``. The
harness puts no credentials of its own in the state; the names of :data:`SERVED_NAMES` (the
conversation's token, MCP endpoint and lent database login, when the run config has ``serve:``)
are the one exception: they are the conversation's own, valid while it lasts.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from evalbench.core.items import Item, knowledge_refs
from evalbench.dataset.knowledge import KnowledgeEntry

SchemaText = Callable[[str, str], str]  # (dialect, database) -> schema text
_FORMATTER = string.Formatter()
SchemaFile = Callable[[str], str]  # database -> the text of its <database>_schema.txt

# What a per-turn template (``state_each_turn``, ``messages``) may name besides the item.
TURN_NAMES = ("phase", "turn", "clarification_budget")


def _no_schema_file(database: str) -> str:
    raise ValueError(f"{{schema_file}}: no schema file for {database!r} (none was looked for)")


@dataclass(frozen=True)
class StateFacts:
    """What a session's state may be made of: the item, the conversation's patience, the
    database's schema and knowledge base."""

    item: Item
    patience: int
    schema: SchemaText
    knowledge: dict[int, KnowledgeEntry]  # the item's database's entries
    schema_file: SchemaFile = _no_schema_file
    served: Mapping[str, str] = field(default_factory=dict)  # SERVED_NAMES -> values, when the run serves


def _knowledge_ids(facts: StateFacts) -> list[int]:
    """The knowledge entries the item cites (BIRD-Interact's ``external_knowledge``), as ids, less
    those an ambiguity deleted: what the prompt agents see."""
    return sorted(set(knowledge_refs(facts.item.external_knowledge)) - facts.item.deleted_knowledge)


def _external_kg(facts: StateFacts) -> str:
    """The database's knowledge base less the deleted entries, as BIRD-Interact's ADK environment
    gives it to its agent (``db_environment/server.py::get_knowledge``: a JSON list, indent 2, of
    id, knowledge, description, definition)."""
    deleted = facts.item.deleted_knowledge
    return json.dumps([{"id": e.id, "knowledge": e.name, "description": e.description, "definition": list(e.definition)}
                       for e in facts.knowledge.values() if e.id not in deleted], indent=2, ensure_ascii=False)


def _max_turn(facts: StateFacts) -> int:
    """BIRD-Interact's clarification budget (``orchestrator/cinteract.py::run_single_task``):
    critical and knowledge ambiguities plus the patience."""
    return facts.item.ambiguities_to_ask + facts.patience


# What the harness serves one conversation (evalbench.serve): its base URL, its MCP endpoint, its
# token (also BIRD-Interact's task_id) and, with serve.credentials, its lent database login.
SERVED_NAMES = ("served_url", "mcp_url", "mcp_token", "task_id",
                "db_url", "db_host", "db_port", "db_user", "db_password", "db_name", "db_path")


def _served(name: str) -> Callable[[StateFacts], object]:
    def value(facts: StateFacts) -> object:
        if name not in facts.served:
            what = "serve.db_logins: true" if name.startswith("db_") else "a serve: section"
            raise ValueError(f"{{{name}}} is served by the harness: the run config needs {what} (docs/agents.md)")
        return facts.served[name]
    return value


def placeholders(template: object) -> set[str]:
    """The names ``template`` (a string, or dicts and lists of them) uses."""
    if isinstance(template, str):
        try:
            return {name for _, name, _, _ in _FORMATTER.parse(template) if name}
        except ValueError:  # not a template (unbalanced braces): check_template says so where it applies
            return set()
    if isinstance(template, dict):
        return set().union(*(placeholders(v) for v in template.values())) if template else set()
    if isinstance(template, list):
        return set().union(*(placeholders(v) for v in template)) if template else set()
    return set()


# what a template may name: facts known when a conversation's session opens
VARIABLES: dict[str, Callable[[StateFacts], object]] = {
    "database": lambda f: f.item.database,
    "dialect": lambda f: f.item.dialect,
    "item_id": lambda f: f.item.id,
    "category": lambda f: f.item.category,
    "difficulty": lambda f: f.item.difficulty,
    "knowledge_ids": _knowledge_ids,
    "schema": lambda f: f.schema(f.item.dialect, f.item.database),
    "external_kg": _external_kg,
    "max_turn": _max_turn,
    "schema_file": lambda f: f.schema_file(f.item.database),
    **{name: _served(name) for name in SERVED_NAMES},
}

DEFAULT_STATE: dict[str, object] = {"database": "{database}", "dialect": "{dialect}"}


def check_template(template: object, key: str = "session_state", more: Collection[str] = ()) -> None:
    """A ValueError naming the key of the first placeholder that is not a known variable (one of
    :data:`VARIABLES`, or of ``more``), or that is not a plain name (no attributes, indexes or
    format specs)."""
    if isinstance(template, str):
        for _, name, spec, conversion in _FORMATTER.parse(template):
            if name is None:
                continue
            if (name not in VARIABLES and name not in more) or spec or conversion:
                known = ", ".join(sorted({*VARIABLES, *more}))
                raise ValueError(f"{key}: unknown placeholder {{{name}}} (known: {known})")
    elif isinstance(template, dict):
        for k, v in template.items():
            check_template(v, f"{key}.{k}" if key else str(k), more)
    elif isinstance(template, list):
        for i, v in enumerate(template):
            check_template(v, f"{key}[{i}]", more)


def render_state(template: dict[str, object], facts: StateFacts, more: Mapping[str, object] | None = None) -> dict[str, object]:
    """``template`` with every placeholder replaced by its value for ``facts`` (or in ``more``,
    the values of the names ``check_template`` was given as ``more``)."""
    def value(name: str) -> object:
        return more[name] if more is not None and name in more else VARIABLES[name](facts)

    return {k: _rendered(v, value) for k, v in template.items()}


def render_text(template: str, facts: StateFacts, more: Mapping[str, object] | None = None) -> str:
    """One string template rendered as text (a lone placeholder of a number gives its digits)."""
    return str(render_state({"text": template}, facts, more)["text"])


def _rendered(template: object, value: Callable[[str], object]) -> object:
    if isinstance(template, str):
        parsed = list(_FORMATTER.parse(template))
        if len(parsed) == 1 and parsed[0][0] == "" and parsed[0][1] is not None:
            return value(parsed[0][1])  # exactly one placeholder: the value, typed
        return template.format_map({name: value(name) for _, name, _, _ in parsed if name})
    if isinstance(template, dict):
        return {k: _rendered(v, value) for k, v in template.items()}
    if isinstance(template, list):
        return [_rendered(v, value) for v in template]
    return template
