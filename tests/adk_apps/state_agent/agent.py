"""state_agent: a data agent that learns its target database from the ADK session's state, as
agents built on ADK do (``state["database"]``, ``state["dialect"]``), and from nothing else.

With ``database`` set to a database it serves (``greenleaf``, PostgreSQL) it answers a question of
the demo dataset with its golden SQL in a fenced block (the rules of ``evalbench_offline_llm``,
any clarification taken as given). Without it, or with another database, it can only say so:
"I do not know which database you mean." No model, no network.

A message that holds ``ECHO`` is answered with JSON ``{"message": <the message>, "state": <the
session state the agent sees>}``, and the turn then sets ``_submitted_this_phase`` to true (as
BIRD-Interact's agent does after a submission): a test sees what each turn brought.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator

from google.adk.agents import BaseAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events import Event, EventActions
from google.genai import types

try:  # served by `adk api_server tests/adk_apps`: the agents directory is on sys.path
    from evalbench_offline_llm import resolve
except ImportError:  # imported as tests.adk_apps.state_agent.agent
    from ..evalbench_offline_llm import resolve

SERVED = {("greenleaf", "postgres")}
UNKNOWN = "I do not know which database you mean."
ECHO = "ECHO"


def reply_for(state: dict, question: str) -> str:
    if (state.get("database"), state.get("dialect")) not in SERVED:
        return UNKNOWN
    decision = resolve(question, [], clarification="as you see fit")
    return f"```sql\n{decision.sql}\n```" if decision.kind == "sql" else decision.message


class StateAgent(BaseAgent):
    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        parts = ctx.user_content.parts if ctx.user_content and ctx.user_content.parts else []
        question = "".join(p.text or "" for p in parts)
        if ECHO in question:
            text = json.dumps({"message": question, "state": dict(ctx.session.state)}, default=str)
            yield Event(author=self.name, invocation_id=ctx.invocation_id,
                        content=types.Content(role="model", parts=[types.Part(text=text)]),
                        actions=EventActions(state_delta={"_submitted_this_phase": True}))
            return
        text = reply_for(dict(ctx.session.state), question)
        yield Event(author=self.name, invocation_id=ctx.invocation_id,
                    content=types.Content(role="model", parts=[types.Part(text=text)]))


root_agent = StateAgent(name="state_agent", description="Answers only about the database named in its session state.")
