"""Read-only discovery tools for the built-in agents (``tools:`` in their config; docs/tools.md).

``list_tables``, ``describe_table(table)``, ``sample_rows(table, limit)``,
``search_knowledge(query, limit)`` and — when ``run_sql`` is listed — the rows of the agent's own
``run_sql`` queries. Every call is run here, by the harness, never by the model's server:

- SQL runs through the database's sandbox in **read** mode (a write is refused there, as agent
  SQL always is); ``sample_rows`` only names a table the database has, quoted.
- A result holds at most ``tool_limits.max_rows`` rows and ``max_bytes`` bytes of JSON (rows are
  cut to fit, and the result says so).
- A conversation may make ``per_conversation`` calls and a turn ``per_turn``; a call beyond either
  is not run and its result says to answer now (outcome ``budget``).
- ``search_knowledge`` is BM25 over the database's knowledge entries and columns
  (:mod:`evalbench.agents.knowledge_index`), leaving out the entries the item's ambiguities deleted: the
  agent is meant to ask the user about those.

Each call is recorded on the reply's :class:`ToolCall` (response, outcome, latency, result size)
and so in the journal, the report and ``explain``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence

from evalbench.agents import AgentContext, tool_args
from evalbench.agents.knowledge_index import KnowledgeIndex, column_documents, knowledge_documents
from evalbench.agents.tool_args import SchemaSpec, ToolSpec
from evalbench.backends.tables import TableInfo, quote_table
from evalbench.config.agents import ToolLimits
from evalbench.core.conversation import MAX_SQL_BYTES, ToolCall
from evalbench.core.execution_result import ExecutionResult
from evalbench.dataset import Item

log = logging.getLogger(__name__)

RUN_SQL = "run_sql"

_TABLE: dict[str, SchemaSpec] = {"table": {"type": "string", "description": "the table's name, as list_tables gives it", "maxLength": 1024}}
SPECS: dict[str, ToolSpec] = {
    "list_tables": {
        "name": "list_tables",
        "description": "List the database's tables with their row counts.",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
    "describe_table": {
        "name": "describe_table",
        "description": "Describe one table: its columns and their types, its row count, and the ids of the knowledge "
                       "entries that mention it.",
        "parameters": {"type": "object", "properties": _TABLE, "required": ["table"]},
    },
    "sample_rows": {
        "name": "sample_rows",
        "description": "Show the first rows of one table.",
        "parameters": {"type": "object", "properties": _TABLE | {
            "limit": {"type": "integer", "description": "how many rows (default 5)"}}, "required": ["table"]},
    },
    "search_knowledge": {
        "name": "search_knowledge",
        "description": "Search the database's documentation — its knowledge base of domain definitions and its columns "
                       "— by keywords; returns the best matches.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "keywords, e.g. a term of the request", "maxLength": 4096},
            "limit": {"type": "integer", "description": "how many results (default 5)"}}, "required": ["query"]},
    },
}
# run_sql as the kit checks its arguments (the spec offered to the model is the chat agents')
RUN_SQL_SPEC: ToolSpec = {"name": RUN_SQL, "parameters": {
    "type": "object", "properties": {"sql": {"type": "string", "maxLength": MAX_SQL_BYTES}}, "required": ["sql"]}}
RUN_SQL_NOTE = ("With this tool you see the rows of your query; you may run several, and the last statement you "
                "run is your answer.")


def tool_specs(names: Sequence[str]) -> list[ToolSpec]:
    """The specs of the configured tools offered besides run_sql and ask_user, in a neutral form."""
    return [SPECS[n] for n in names if n in SPECS]


class ToolKit:
    """The discovery tools of one agent: its config, and the knowledge indexes it built (one per
    database, shared by its sessions)."""

    def __init__(self, names: Sequence[str], limits: ToolLimits, context: AgentContext) -> None:
        self.names = frozenset(names)
        self.limits = limits
        self.context = context
        self.executes_sql = RUN_SQL in self.names
        self._indexes: dict[tuple[str, str], KnowledgeIndex] = {}
        self._lock = threading.Lock()

    def runs(self, call: ToolCall) -> bool:
        """Whether this kit runs ``call``: a discovery tool it has (run_sql when it shows rows)."""
        return call.name in self.names

    def index(self, item: Item) -> KnowledgeIndex:
        key = (item.dialect, item.database)
        with self._lock:
            if key not in self._indexes:
                documents = knowledge_documents(self.context.knowledge.get(item.database, {}))
                documents += column_documents(self.context.tables(*key), self.meanings(item))
                self._indexes[key] = KnowledgeIndex(documents)
            return self._indexes[key]

    def meanings(self, item: Item) -> dict[tuple[str, str], str]:
        return self.context.column_meanings.get(item.database, {})

    def session(self, item: Item) -> Toolbox:
        return Toolbox(self, item)

    def close(self) -> None:
        with self._lock:
            for index in self._indexes.values():
                index.close()
            self._indexes.clear()


class Toolbox:
    """The tools of one conversation: its item, and the calls it made (for the budgets)."""

    def __init__(self, kit: ToolKit, item: Item) -> None:
        self.kit, self.item = kit, item
        self.calls_in_conversation = 0
        self.calls_in_turn = 0

    def start_turn(self) -> None:
        self.calls_in_turn = 0

    def run(self, call: ToolCall) -> dict[str, object]:
        """Run ``call``; its response, outcome, latency and result size are set on it."""
        started = time.perf_counter()
        limits = self.kit.limits
        if self.calls_in_turn >= limits.per_turn or self.calls_in_conversation >= limits.per_conversation:
            which = "turn" if self.calls_in_turn >= limits.per_turn else "conversation"
            response: dict[str, object] = {"error": f"tool budget exhausted ({which}): not run. Answer now with run_sql, "
                                                 "or ask_user"}
            outcome = "budget"
        else:
            self.calls_in_turn += 1
            self.calls_in_conversation += 1
            response = self._answer(call)
            outcome = "error" if "error" in response else "ok"
        response, size = _fit(response, limits.max_bytes)
        call.response, call.outcome, call.result_bytes = response, outcome, size
        call.latency_s = time.perf_counter() - started
        return response

    def _answer(self, call: ToolCall) -> dict[str, object]:
        """The call's result: an error the model can read for arguments the tool cannot take, or
        anything else that goes wrong — never an exception."""
        spec = RUN_SQL_SPEC if call.name == RUN_SQL else SPECS.get(call.name)
        if spec is None:
            return {"error": f"unknown tool {clip(call.name)!r}"}
        try:
            return self._dispatch(call.name, tool_args.check(spec["parameters"], call.args))
        except (_ToolError, tool_args.ArgumentError) as exc:
            return {"error": str(exc)}
        except Exception as exc:  # a bug, or a value no check foresaw: the model is told, the run goes on
            log.warning("tool %s failed", call.name, exc_info=True)
            return {"error": f"the tool failed ({type(exc).__name__}); try other arguments, or answer"}

    # ------------------------------------------------------------------ the tools

    def _dispatch(self, name: str, args: Mapping[str, str | int]) -> dict[str, object]:
        if name == "list_tables":
            return {"tables": [{"table": t.name, "rows": t.rows} for t in self._tables()]}
        if name == "describe_table":
            table = self._table(args)
            meanings = self.kit.meanings(self.item)
            columns = [{"name": n, "type": k} | ({"description": d} if (d := meanings.get((table.name.lower(), n.lower()))) else {})
                       for n, k in table.columns]
            return {"table": table.name, "rows": table.rows, "columns": columns, "knowledge_ids": self._visible_knowledge(table)}
        if name == "sample_rows":
            table = self._table(args)
            limit = _clamp(_number(args, "limit", 5), 1, self.kit.limits.max_rows)
            return self._rows(f"SELECT * FROM {quote_table(table.name, self.item.dialect)} LIMIT {limit}")
        if name == "search_knowledge":
            return self._search(args)
        if name == RUN_SQL:
            sql = _text(args, "sql")
            if not sql.strip():
                raise _ToolError("no sql given: nothing was run")
            return self._rows(sql)
        raise _ToolError(f"unknown tool {clip(name)!r}")

    def _tables(self) -> list[TableInfo]:
        return self.kit.context.tables(self.item.dialect, self.item.database)

    def _table(self, args: Mapping[str, str | int]) -> TableInfo:
        wanted = _text(args, "table")
        if not wanted.strip():
            raise _ToolError("no table given")
        tables = self._tables()
        found = next((t for t in tables if t.name.lower() == wanted.strip().lower()), None)
        if found is None:
            known = ", ".join(t.name for t in tables[:50]) or "none"
            raise _ToolError(f"no table {clip(wanted)!r} (tables: {known})")
        return found

    def _visible_knowledge(self, table: TableInfo) -> list[int]:
        return [i for i in table.knowledge_ids if i not in self.item.deleted_knowledge]

    def _search(self, args: Mapping[str, str | int]) -> dict[str, object]:
        query = _text(args, "query")
        if not query.strip():
            raise _ToolError("no query given")
        limit = _clamp(_number(args, "limit", self.kit.limits.max_results), 1, self.kit.limits.max_results)
        exclude = frozenset(("knowledge", str(i)) for i in self.item.deleted_knowledge)
        found = self.kit.index(self.item).search(query, limit, exclude)
        return {"results": [{"kind": d.kind, **d.fields, "score": round(score, 4)} for d, score in found]}

    def _rows(self, sql: str) -> dict[str, object]:
        result = self.kit.context.execute(self.item.dialect, self.item.database, sql)
        if result is None:
            raise _ToolError(f"the database {self.item.database!r} is not available")
        return result_rows(result, self.kit.limits.max_rows)


class _ToolError(Exception):
    """A call that cannot be run as asked; its message is the tool's error result."""


def _text(args: Mapping[str, str | int], name: str) -> str:
    """A string argument (:func:`~evalbench.agents.tool_args.check` gave it its declared type)."""
    value = args[name]
    if not isinstance(value, str):
        raise _ToolError(f"{name} must be a string")
    return value


def _number(args: Mapping[str, str | int], name: str, default: int) -> int:
    """An integer argument, or ``default`` when it is absent."""
    value = args.get(name, default)
    if not isinstance(value, int):
        raise _ToolError(f"{name} must be a whole number")
    return value


def _clamp(number: int, low: int, high: int) -> int:
    return max(low, min(high, number))


def clip(text: str, limit: int = 200) -> str:
    """A name the model gave, short enough to quote back to it."""
    return text if len(text) <= limit else text[:limit] + "..."


def result_rows(result: ExecutionResult, max_rows: int) -> dict[str, object]:
    """A tool's response for an execution: its columns and first rows, or its error."""
    if result.error is not None:
        return {"error": result.error, "error_kind": result.error_kind}
    rows = [[_cell(v) for v in row] for row in result.rows[:max_rows]]
    truncated = result.truncated or len(result.rows) > max_rows
    return {"columns": list(result.columns), "rows": rows, "truncated": truncated}


def _cell(value: object) -> object:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(bytes(value))} bytes>"
    return str(value)  # Decimal, dates, UUIDs...: as the database would print them


def _size(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))


def _fit(response: dict[str, object], max_bytes: int) -> tuple[dict[str, object], int]:
    """``response`` within ``max_bytes`` of JSON, with its size: each list (rows, results,
    tables, columns) keeps its longest prefix that fits, and the result says ``truncated``."""
    size = _size(response)
    if size <= max_bytes:
        return response, size
    cut = dict(response, truncated=True)
    for key in ("rows", "results", "tables", "columns"):
        items = cut.get(key)
        if not isinstance(items, list):
            continue
        room = max_bytes - _size(cut | {key: []})  # each item is measured once
        kept: list[object] = []
        for item in items:
            room -= _size(item) + (2 if kept else 0)  # json.dumps puts ", " between items
            if room < 0:
                break
            kept.append(item)
        cut[key] = kept
    size = _size(cut)
    if size > max_bytes:  # one huge value: say so rather than send a broken fragment
        cut = {"error": f"the result is larger than {max_bytes} bytes even cut to nothing", "truncated": True}
        size = _size(cut)
    return cut, size
