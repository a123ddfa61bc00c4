"""mcp_agent: an agent that brings its own tools — the harness's MCP server (``serve:``), reached
with ADK's ``McpToolset`` over streamable HTTP.

The server's URL is ``$EVALBENCH_TEST_MCP_URL`` (the test chooses its port); each conversation's
bearer token is read from the session state (``mcp_token``, which the run's ``session_state``
names as ``{mcp_token}``) by the toolset's ``header_provider``, so one app serves every
conversation. The model (``evalbench_tool_llm``, protocol ``mcp``) calls ``list_tables``, maybe
``ask_user``, then ``run_sql``, and answers with the SQL in a fenced block. ADK lists the
toolset's tools before every model call: with no server there, the turn fails (HTTP 500).
"""

from __future__ import annotations

import os

from google.adk.agents import LlmAgent
from google.adk.agents.readonly_context import ReadonlyContext
from google.adk.tools.mcp_tool import McpToolset, StreamableHTTPConnectionParams

try:  # served by `adk api_server tests/adk_apps`: the agents directory is on sys.path
    from evalbench_tool_llm import ToolCallingLlm
except ImportError:  # imported as tests.adk_apps.mcp_agent.agent
    from ..evalbench_tool_llm import ToolCallingLlm

MCP_URL = os.environ.get("EVALBENCH_TEST_MCP_URL", "http://127.0.0.1:6001/mcp")


def bearer_from_state(context: ReadonlyContext) -> dict[str, str]:
    """``Authorization: Bearer <state["mcp_token"]>`` (no header when the state has no token)."""
    token = context.state.get("mcp_token")
    return {"Authorization": f"Bearer {token}"} if token else {}


root_agent = LlmAgent(
    name="mcp_agent",
    model=ToolCallingLlm(protocol="mcp"),
    description="Offline test data agent using the harness's MCP tools.",
    instruction="Answer questions about the database with SQL; use the tools.",
    tools=[McpToolset(connection_params=StreamableHTTPConnectionParams(url=MCP_URL, timeout=10.0),
                      header_provider=bearer_from_state)],
)
