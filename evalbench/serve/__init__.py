"""What the harness serves the agent under test during a conversation (``serve:`` in the run
config; docs/agents.md, "Bring your own agent"): the database tools and ``ask_user`` over MCP, a
user-simulator endpoint compatible with BIRD-Interact's, and per-conversation tokens.

Importing this face loads neither ``mcp`` nor ``uvicorn``: :mod:`evalbench.serve.server` does.
"""

from __future__ import annotations

from evalbench.serve.port import ASK_USER, SUBMIT_SQL, ConversationPort
from evalbench.serve.toolbox import ServedToolbox

__all__ = ["ASK_USER", "SUBMIT_SQL", "ConversationPort", "ServedToolbox"]
