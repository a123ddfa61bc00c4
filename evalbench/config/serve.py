"""``serve:`` — what the harness serves the agent under test during a conversation (docs/agents.md,
"Bring your own agent"): an MCP server with its database tools and ``ask_user``, a user-simulator
endpoint compatible with BIRD-Interact's, and per-conversation database logins."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from evalbench.config.agents import ToolLimits
from evalbench.config.types import StrictModel

ServedTool = Literal["list_tables", "describe_table", "sample_rows", "search_knowledge", "run_sql", "ask_user"]
SERVED_TOOLS: tuple[ServedTool, ...] = ("list_tables", "describe_table", "sample_rows", "search_knowledge", "run_sql", "ask_user")


class ServeConfig(StrictModel):
    """The harness's own HTTP server for the agent under test: one per run process, on loopback by
    default; each conversation reaches it with its own token, valid while the conversation lasts."""

    address: str = Field("127.0.0.1:0", description="host:port to listen on (port 0: a free port; BIRD-Interact's "
                         "agent expects its user simulator on localhost:6001)")
    mcp: bool = Field(True, description="serve the MCP endpoint /mcp (streamable HTTP; bearer token per conversation)")
    user_simulator: bool = Field(True, description="serve POST /ask, /phase_transition and /submit as BIRD-Interact's "
                                 "user simulator and database environment answer them (task_id: the conversation's token)")
    tools: list[ServedTool] = Field(default_factory=lambda: list(SERVED_TOOLS), description="the MCP tools offered")
    tool_limits: ToolLimits = Field(ToolLimits(), description="caps of the served tools (as the built-in agents' tool_limits)")
    db_logins: bool = Field(False, description="lend each conversation a read-only database login "
                              "({db_url} in session_state), revoked when the conversation ends")

    @field_validator("address")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"address must be host:port (e.g. 127.0.0.1:0), not {value!r}")
        return value

    @property
    def host(self) -> str:
        return self.address.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])
