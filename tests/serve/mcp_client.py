"""A third-party agent's way to the harness's MCP server: the official ``mcp`` client, called from
a plain thread (as an agent's HTTP handler would)."""

from __future__ import annotations

import json

import anyio
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client


class Called:
    def __init__(self, name: str, is_error: bool, text: str) -> None:
        self.name, self.is_error, self.text = name, is_error, text

    @property
    def value(self) -> object:
        try:
            return json.loads(self.text)
        except ValueError:
            return self.text


def call_tools(url: str, calls: list[tuple[str, dict[str, object]]]) -> list[Called]:
    """Each ``(tool, arguments)`` in turn, in one MCP session at ``url``."""
    async def session() -> list[Called]:
        async with streamable_http_client(url) as streams, ClientSession(streams[0], streams[1]) as mcp:
            await mcp.initialize()
            done = []
            for name, args in calls:
                result = await mcp.call_tool(name, args)
                text = "".join(getattr(part, "text", "") for part in result.content)
                done.append(Called(name, bool(result.is_error), text))
            return done
    return anyio.run(session)


def tool_names(url: str) -> list[str]:
    async def listed() -> list[str]:
        async with streamable_http_client(url) as streams, ClientSession(streams[0], streams[1]) as mcp:
            await mcp.initialize()
            return [tool.name for tool in (await mcp.list_tools()).tools]
    return anyio.run(listed)
