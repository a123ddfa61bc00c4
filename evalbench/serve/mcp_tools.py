"""The MCP server the agent under test reaches the harness's tools through (the official ``mcp``
SDK, streamable HTTP). Each call names its conversation by the bearer token of its request
(``Authorization: Bearer <token>``, or the per-conversation path ``/c/<token>/mcp``), and runs
through that conversation's :class:`~evalbench.serve.port.ConversationPort`."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from evalbench.agents.tools import SPECS
from evalbench.serve.port import ConversationPort

Lookup = Callable[[str], "ConversationPort | None"]
INSTRUCTIONS = ("The evaluation harness's tools for one conversation: its database (read-only for a question; "
                "for a management task, writes go to a disposable copy and are your answer) and its user (ask_user).")


def bearer(headers: object) -> str | None:
    """The token of an ``Authorization: Bearer`` header, if any."""
    value = headers.get("authorization") if hasattr(headers, "get") else None
    if not isinstance(value, str) or not value.lower().startswith("bearer "):
        return None
    return value[7:].strip() or None


def build_mcp(lookup: Lookup, tools: Collection[str]) -> MCPServer:
    server: MCPServer = MCPServer(name="evalbench", instructions=INSTRUCTIONS)

    def run(ctx: Context, name: str, args: dict[str, object], database: str | None) -> str:
        token = bearer(ctx.headers or {})
        port = lookup(token) if token else None
        if port is None:
            raise ToolError("no conversation has this token (unknown, or the conversation has ended)")
        response = port.call(name, args | ({"database": database} if database is not None else {}))
        text = json.dumps(response, ensure_ascii=False, default=str)
        if "error" in response:
            raise ToolError(text)
        return text

    def describe(name: str) -> str:
        return str(SPECS[name]["description"]) if name in SPECS else ""

    def list_tables(ctx: Context, database: str | None = None) -> str:
        return run(ctx, "list_tables", {}, database)

    def describe_table(table: str, ctx: Context, database: str | None = None) -> str:
        return run(ctx, "describe_table", {"table": table}, database)

    def sample_rows(table: str, ctx: Context, limit: int = 5, database: str | None = None) -> str:
        return run(ctx, "sample_rows", {"table": table, "limit": limit}, database)

    def search_knowledge(query: str, ctx: Context, limit: int = 5, database: str | None = None) -> str:
        return run(ctx, "search_knowledge", {"query": query, "limit": limit}, database)

    def run_sql(sql: str, ctx: Context, database: str | None = None) -> str:
        return run(ctx, "run_sql", {"sql": sql}, database)

    def ask_user(question: str, ctx: Context) -> str:
        return run(ctx, "ask_user", {"question": question}, None)

    descriptions = {
        "run_sql": "Run SQL on the conversation's database and see its rows (a question: read-only; a management "
                   "task: in a disposable copy that keeps your earlier writes of this phase). The last query you "
                   "run, or a management task's writes, is your answer unless your reply gives SQL.",
        "ask_user": "Ask the user a clarification question; returns the user's answer.",
    }
    for fn in (list_tables, describe_table, sample_rows, search_knowledge, run_sql, ask_user):
        if fn.__name__ in tools:
            server.add_tool(fn, name=fn.__name__, description=descriptions.get(fn.__name__) or describe(fn.__name__),
                            structured_output=False)
    return server
