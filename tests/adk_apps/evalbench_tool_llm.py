"""An offline, deterministic "LLM" that uses tools, for the ADK test apps that bring their own
tools (``mcp_agent``, ``bird_like_agent``). Like ``evalbench_offline_llm`` (whose rules it reuses)
it never touches the network and computes every reply from the session (``llm_request.contents``).

The question of a user text
---------------------------
BIRD-Interact's orchestrator wraps its questions (``orchestrator/cinteract.py::run_single_task``):
the paragraph after ``User Query:`` (main phase) or after ``follow-up question:`` (follow-up) is
the question; any other text is the question as it is.

The SQL of a question (first matching rule wins)
------------------------------------------------
1. the text holds ``SQL:`` -> what follows it, up to a blank line;
2. ``evalbench_offline_llm.resolve`` over the test dataset (``$EVALBENCH_TEST_AGENT_DATASET``,
   the demo Greenleaf items by default) gives SQL -> that SQL (a clarification it wants is asked
   first, see below; any answer is taken);
3. an earlier question of the session had SQL -> that SQL again (a debugging message such as
   "Your SQL is not correct ..." asks for another try);
4. none -> the plain text ``Sorry, I can only answer questions about the Greenleaf stores.``

A question is asked with the ``ask_user`` tool (one per turn) when the text holds ``ASK:`` (the
question: the rest of that line) or rule 2 wants a clarification.

Protocols
---------
``mcp`` (the harness's MCP tools): ``list_tables`` first, ``ask_user`` if needed, ``run_sql`` with
the SQL, then a final text with the SQL in a fenced ``sql`` block and, after it, ``The query
returned: `` and the start of ``run_sql``'s response (JSON).
``bird`` (BIRD-Interact's c-interact tools): ``ask_user`` if needed, then ``submit_sql`` with the
SQL; what follows the submission is the app's callbacks' (the model answers ``Submitted.`` if it
is called again).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Literal

from google.adk.models import BaseLlm, LlmCapabilities, LlmRequest, LlmResponse
from google.adk.models.registry import LLMRegistry
from google.genai import types

try:  # served by `adk api_server tests/adk_apps`: the agents directory is on sys.path
    from evalbench_offline_llm import OUT_OF_SCOPE, resolve
except ImportError:  # imported as tests.adk_apps.evalbench_tool_llm
    from .evalbench_offline_llm import OUT_OF_SCOPE, resolve

MODEL_NAME = "evalbench-tools"
SQL_MARKER = "SQL:"
ASK_MARKER = "ASK:"
RESULT_SHOWN = 500  # characters of run_sql's response (JSON) quoted in the final text
_WRAPPED = re.compile(r"(?:User Query:|follow-up question:)\s*\n(.*?)(?:\n\s*\n|$)", re.DOTALL)


def question_of(text: str) -> str:
    """The question in a user text (BIRD-Interact's wrapping and an ``ASK:`` line taken off)."""
    found = _WRAPPED.search(text)
    lines = (found.group(1) if found else text).strip().split("\n")
    return "\n".join(line for line in lines if not line.startswith(ASK_MARKER)).strip()


def marked_sql(text: str) -> str | None:
    if SQL_MARKER not in text:
        return None
    return text.split(SQL_MARKER, 1)[1].strip().split("\n\n", 1)[0].strip() or None


def marked_question(text: str) -> str | None:
    if ASK_MARKER not in text:
        return None
    return text.split(ASK_MARKER, 1)[1].strip().split("\n", 1)[0].strip() or None


@dataclass
class UserTurn:
    """One user text and the tool calls and responses that followed it."""

    text: str
    calls: list[types.FunctionCall] = field(default_factory=list)
    responses: list[types.FunctionResponse] = field(default_factory=list)

    def called(self, name: str) -> bool:
        return any(c.name == name for c in self.calls)

    def answer(self, name: str) -> str | None:
        found = [r for r in self.responses if r.name == name]
        return json.dumps(found[-1].response, default=str) if found else None


def user_turns(contents: list[types.Content]) -> list[UserTurn]:
    turns: list[UserTurn] = []
    for content in contents:
        texts = [p.text for p in content.parts or [] if p.text and not p.thought]
        if content.role == "user" and texts:
            turns.append(UserTurn("".join(texts)))
        elif turns:
            turns[-1].calls += [p.function_call for p in content.parts or [] if p.function_call]
            turns[-1].responses += [p.function_response for p in content.parts or [] if p.function_response]
    return turns


@dataclass(frozen=True)
class Plan:
    """What the model does about the current turn: the SQL (None: it has none), the question it
    asks first (None: none)."""

    sql: str | None
    ask: str | None


def plan(turns: list[UserTurn]) -> Plan:
    current = turns[-1]
    earlier = [question_of(t.text) for t in turns[:-1]]
    question = question_of(current.text)
    clarification = current.answer("ask_user")
    ask = marked_question(current.text)
    if (sql := marked_sql(current.text)) is not None:
        return Plan(sql, ask)
    decision = resolve(question, earlier, clarification)
    if decision.kind == "clarify":
        return Plan(resolve(question, earlier, "as you see fit").sql, ask or decision.message)
    if decision.kind == "sql":
        return Plan(decision.sql, ask)
    for turn in reversed(turns[:-1]):  # a debugging message: the last question's SQL again
        if (before := plan_of_turn(turns, turn)) is not None:
            return Plan(before, ask)
    return Plan(None, ask)


def plan_of_turn(turns: list[UserTurn], turn: UserTurn) -> str | None:
    index = turns.index(turn)
    earlier = [question_of(t.text) for t in turns[:index]]
    if (sql := marked_sql(turn.text)) is not None:
        return sql
    decision = resolve(question_of(turn.text), earlier, "as you see fit")
    return decision.sql if decision.kind == "sql" else None


def _call(name: str, args: dict[str, Any]) -> list[types.Part]:
    return [types.Part(function_call=types.FunctionCall(name=name, args=args))]


def next_step(protocol: str, turns: list[UserTurn]) -> list[types.Part]:
    current = turns[-1]
    chosen = plan(turns)
    if chosen.sql is None and chosen.ask is None:
        return [types.Part(text=OUT_OF_SCOPE)]
    if protocol == "mcp" and not current.called("list_tables"):
        return _call("list_tables", {})
    if chosen.ask is not None and not current.called("ask_user"):
        return _call("ask_user", {"question": chosen.ask})
    if chosen.sql is None:
        return [types.Part(text=OUT_OF_SCOPE)]
    if protocol == "mcp":
        if not current.called("run_sql"):
            return _call("run_sql", {"sql": chosen.sql})
        result = (current.answer("run_sql") or "")[:RESULT_SHOWN]
        return [types.Part(text=f"Here is the query:\n\n```sql\n{chosen.sql}\n```\n\nThe query returned: {result}")]
    if not current.called("submit_sql"):
        return _call("submit_sql", {"sql": chosen.sql})
    return [types.Part(text="Submitted.")]


class ToolCallingLlm(BaseLlm):
    """A scripted data agent that uses tools (see the module docstring)."""

    model: str = MODEL_NAME
    protocol: Literal["mcp", "bird"] = "mcp"

    @classmethod
    def supported_models(cls) -> list[str]:
        return [MODEL_NAME + r"(-.*)?"]

    @property
    def capabilities(self) -> LlmCapabilities:
        return LlmCapabilities(output_schema_and_tools=False)

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        turns = user_turns(list(llm_request.contents or []))
        parts = next_step(self.protocol, turns) if turns else [types.Part(text="Hello.")]
        yield LlmResponse(content=types.Content(role="model", parts=parts), partial=False, turn_complete=True,
                          finish_reason=types.FinishReason.STOP, model_version=self.model,
                          usage_metadata=types.GenerateContentResponseUsageMetadata(
                              prompt_token_count=1, candidates_token_count=1, total_token_count=2))


LLMRegistry.register(ToolCallingLlm)
