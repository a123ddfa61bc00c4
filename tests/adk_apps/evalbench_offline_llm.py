"""An offline, deterministic "LLM" for the ADK test agents in this folder.

``adk api_server tests/adk_apps`` serves two apps (one sub-folder each) built on
:class:`OfflineDataAgentLlm` (and ``state_agent``, which uses its rules with no model, and
``mcp_agent`` and ``bird_like_agent``, built on ``evalbench_tool_llm``, whose model uses tools). It never touches the network and needs no API key: every reply
is computed from the conversation so far (``llm_request.contents``, i.e. the ADK session).
This module is not an app itself (it is a file, not a folder); ADK puts the agents directory on
``sys.path``, so the apps import it as a top-level module.

Apps (the two conventions evalbench's ADK adapter understands)
------------------------------------------------------------------
``gda_agent`` -- convention (a), as EvalBench/GDA agents do it. For each question the model
    calls the async FunctionTool ``cloud_gda_query_tool_alloydb`` with ``{"question": ...}``;
    the tool answers ``{"result": "<JSON string>"}`` where the JSON is either
    ``{"generatedQuery", "naturalLanguageAnswer", "queryResult"}`` (the query really runs on
    the PostgreSQL database at ``$EVALBENCH_TEST_AGENT_DB_URL``) or
    ``{"disambiguationQuestion": ["<question>"]}``. After the tool response the model writes a
    short final text: the natural-language answer, or the disambiguation question verbatim.
    The user answers a disambiguation question with an ordinary text message (next ``/run``);
    the model then calls the tool again with the original question plus a line
    ``Clarification: <answer>``. For a follow-up that needs context the tool question gets lines
    ``Earlier question: <text>`` (one per earlier question of the session). A question without
    context is passed verbatim, so ``args.question`` equals the user's text.

``input_agent`` -- convention (b). To ask, the model calls ADK's long-running
    ``adk_request_input`` tool (``{"message": "<question>"}``); the event lists the call id in
    ``longRunningToolIds`` and the run stops. The client answers with a new message whose part
    is ``functionResponse {id: <same id>, name: "adk_request_input",
    response: {"result": "<answer>"}}``; the model then replies in plain text with the SQL in a
    fenced block (three backquotes + ``sql``). ADK resumes the paused invocation (same
    ``invocationId``). A wrong id makes ADK fail (HTTP 500, "Function call not found for function
    response ids"); without an id ADK starts a new invocation and the model, which then does not
    see the answer, replies "I am still waiting for your answer.". A plain-text message sent
    while a question is pending is accepted as the answer (new invocation). No other tools.

How a user text is answered (first matching rule wins; texts compared after ``strip()``)
------------------------------------------------------------------------------------------
Control words (upper case, anywhere in the user's text, combinable with the rules below):

* ``CRASH`` -- the model raises ``RuntimeError``; ``adk api_server`` answers ``/run`` with
  HTTP 500.
* ``SLOW``  -- the model sleeps 5 s (``asyncio.sleep``) before its first reply of the turn.
* ``TWICE`` -- gda_agent: two sequential tool calls in the turn, first for
  ``How many stores are there?`` (``SELECT count(*) FROM stores``), then the real question;
  the last call carries the answer. input_agent: the reply holds two ``sql`` blocks, the
  count query first and the answer last.

Questions (the dataset comes from ``$EVALBENCH_TEST_AGENT_DATASET``, default
``datasets/demo/greenleaf.jsonl`` of this repository, BIRD-Interact format):

1. equals a dataset item's ``amb_user_query`` or ``query`` -> that item's ``sol_sql[0]``;
   when ``amb_user_query`` differs from ``query`` and the text is the ambiguous one, one
   clarification comes first ("Could you clarify what you mean by 'term' and 'term'?" from
   ``user_query_ambiguity.critical_ambiguity``); any answer is accepted.
2. equals an item's ``follow_up.query`` -> ``follow_up.sol_sql[0]`` if that item's ``query``
   or ``amb_user_query`` was asked earlier in the session, else rule 7's "don't know" text.
3. contains ``how many stores`` (any case) -> ``SELECT count(*) FROM stores``.
4. contains ``shops`` (any case) -> clarification ``Which shops do you mean?``, then after
   any answer -> ``SELECT store_name FROM stores ORDER BY store_id``.
5. contains ``stores`` (any case) -> ``SELECT store_name FROM stores ORDER BY store_id``.
6. contains ``now only the first two`` (any case) ->
   ``SELECT store_name FROM stores ORDER BY store_id LIMIT 2`` if an earlier user text of the
   session contains ``stores`` or ``shops``, else the plain text
   ``I don't know what you are referring to.`` (no SQL, no tool call): sessions are sticky.
7. anything else -> plain text ``Sorry, I can only answer questions about the Greenleaf
   stores.`` (no SQL, no tool call).

Every model response carries ``usage_metadata`` (prompt / candidates / total token counts):
the prompt count is the number of whitespace-separated words in the request contents (texts,
function calls and responses as JSON) plus the system instruction, the candidates count the
words of the reply; total = prompt + candidates.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from google.adk.models import BaseLlm, LlmCapabilities, LlmRequest, LlmResponse
from google.adk.models.registry import LLMRegistry
from google.genai import types

MODEL_NAME = "evalbench-offline"
GDA_TOOL = "cloud_gda_query_tool_alloydb"
REQUEST_INPUT = "adk_request_input"

STORES_SQL = "SELECT store_name FROM stores ORDER BY store_id"
FIRST_TWO_SQL = "SELECT store_name FROM stores ORDER BY store_id LIMIT 2"
COUNT_SQL = "SELECT count(*) FROM stores"
COUNT_QUESTION = "How many stores are there?"
SHOPS_CLARIFICATION = "Which shops do you mean?"
DONT_KNOW = "I don't know what you are referring to."
OUT_OF_SCOPE = "Sorry, I can only answer questions about the Greenleaf stores."
CLARIFICATION_PREFIX = "Clarification: "
EARLIER_PREFIX = "Earlier question: "
SLOW_SECONDS = 5.0

DEFAULT_DATASET = Path(__file__).resolve().parents[2] / "datasets" / "demo" / "greenleaf.jsonl"


# --------------------------------------------------------------------------------------------
# The dataset and the rules
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _load_items(path: str) -> tuple[dict[str, Any], ...]:
    items = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                items.append(json.loads(line))
    return tuple(items)


def dataset_items() -> tuple[dict[str, Any], ...]:
    return _load_items(os.environ.get("EVALBENCH_TEST_AGENT_DATASET") or str(DEFAULT_DATASET))


@dataclass(frozen=True)
class Decision:
    """What the agent does with one (possibly clarified) question."""

    kind: Literal["sql", "clarify", "text"]
    sql: str = ""
    message: str = ""  # the clarification question or the plain text
    uses_context: bool = False  # the SQL depends on an earlier question of the session


def _item_clarification(item: dict[str, Any]) -> str:
    terms = [a["term"] for a in (item.get("user_query_ambiguity") or {}).get("critical_ambiguity", []) if a.get("term")]
    if not terms:
        return "Could you be more specific?"
    quoted = " and ".join(f"'{t}'" for t in terms)
    return f"Could you clarify what you mean by {quoted}?"


def resolve(question: str, earlier: list[str], clarification: str | None) -> Decision:
    """Apply the module docstring's rules to ``question``.

    ``earlier``: the user's earlier texts in the session; ``clarification``: the user's answer
    when ``question`` was already clarified."""
    text = question.strip()
    earlier_set = {e.strip() for e in earlier}
    items = dataset_items()
    for item in items:
        if text in (item.get("amb_user_query"), item.get("query")):
            ambiguous = item.get("amb_user_query") and item["amb_user_query"] != item["query"]
            if clarification is None and ambiguous and text == item["amb_user_query"]:
                return Decision("clarify", message=_item_clarification(item))
            return Decision("sql", sql=item["sol_sql"][0])
    for item in items:
        follow = item.get("follow_up") or {}
        if follow.get("query") and text == follow["query"].strip():
            if earlier_set & {item.get("query"), item.get("amb_user_query")}:
                return Decision("sql", sql=follow["sol_sql"][0], uses_context=True)
            return Decision("text", message=DONT_KNOW)
    low = text.lower()
    if "how many stores" in low:
        return Decision("sql", sql=COUNT_SQL)
    if "shops" in low:
        if clarification is None:
            return Decision("clarify", message=SHOPS_CLARIFICATION)
        return Decision("sql", sql=STORES_SQL)
    if "stores" in low:
        return Decision("sql", sql=STORES_SQL)
    if "now only the first two" in low:
        if any("stores" in e.lower() or "shops" in e.lower() for e in earlier):
            return Decision("sql", sql=FIRST_TWO_SQL, uses_context=True)
        return Decision("text", message=DONT_KNOW)
    return Decision("text", message=OUT_OF_SCOPE)


def tool_question(question: str, clarification: str | None, earlier: list[str], uses_context: bool) -> str:
    """The self-contained question the gda model sends to the tool (see the module docstring)."""
    lines = [question]
    if clarification is not None:
        lines.append(CLARIFICATION_PREFIX + clarification)
    if uses_context:
        lines.extend(EARLIER_PREFIX + e for e in earlier)
    return "\n".join(lines)


def parse_tool_question(arg: str) -> tuple[str, str | None, list[str]]:
    """Inverse of :func:`tool_question`: (question, clarification, earlier questions)."""
    lines = arg.split("\n")
    head: list[str] = []
    clarification: str | None = None
    earlier: list[str] = []
    for line in lines:
        if line.startswith(CLARIFICATION_PREFIX):
            clarification = line[len(CLARIFICATION_PREFIX):]
        elif line.startswith(EARLIER_PREFIX):
            earlier.append(line[len(EARLIER_PREFIX):])
        else:
            head.append(line)
    return "\n".join(head), clarification, earlier


# --------------------------------------------------------------------------------------------
# Reading the session back from llm_request.contents
# --------------------------------------------------------------------------------------------


@dataclass
class Turn:
    """One user text and what followed it (model calls/texts, tool and client responses)."""

    text: str
    calls: list[types.FunctionCall] = field(default_factory=list)
    responses: list[types.FunctionResponse] = field(default_factory=list)
    model_texts: list[str] = field(default_factory=list)

    def responses_named(self, name: str) -> list[types.FunctionResponse]:
        return [r for r in self.responses if r.name == name]

    def calls_named(self, name: str) -> list[types.FunctionCall]:
        return [c for c in self.calls if c.name == name]

    def asked_by_tool(self) -> bool:
        """gda: the last tool answer of the turn was a disambiguation question."""
        answers = self.responses_named(GDA_TOOL)
        return bool(answers) and bool(_tool_payload(answers[-1]).get("disambiguationQuestion"))

    def pending_input_call(self) -> types.FunctionCall | None:
        """input: an adk_request_input call of this turn that has no response yet."""
        answered = {r.id for r in self.responses_named(REQUEST_INPUT)}
        for call in self.calls_named(REQUEST_INPUT):
            if call.id not in answered:
                return call
        return None

    def input_answer(self) -> str | None:
        answers = self.responses_named(REQUEST_INPUT)
        return _answer_text(answers[-1].response) if answers else None


def _answer_text(response: Any) -> str:
    if isinstance(response, dict):
        for key in ("result", "response", "answer", "text"):
            if isinstance(response.get(key), str):
                return response[key]
        return json.dumps(response, sort_keys=True)
    return str(response)


def _tool_payload(response: types.FunctionResponse) -> dict[str, Any]:
    raw = (response.response or {}).get("result")
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}
    return raw if isinstance(raw, dict) else {}


def read_turns(contents: list[types.Content]) -> list[Turn]:
    turns: list[Turn] = []
    for content in contents:
        texts = [p.text for p in content.parts or [] if p.text and not p.thought]
        if content.role == "user" and texts:
            turns.append(Turn(text="".join(texts)))
        if not turns:
            continue
        turn = turns[-1]
        for part in content.parts or []:
            if part.function_call:
                turn.calls.append(part.function_call)
            elif part.function_response:
                turn.responses.append(part.function_response)
            elif content.role == "model" and part.text and not part.thought:
                turn.model_texts.append(part.text)
    return turns


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------


def _words(value: Any) -> int:
    return len(str(value).split())


def _content_words(content: types.Content) -> int:
    total = 0
    for part in content.parts or []:
        if part.text:
            total += _words(part.text)
        if part.function_call:
            total += _words(json.dumps({"name": part.function_call.name, "args": part.function_call.args}, default=str))
        if part.function_response:
            total += _words(json.dumps({"name": part.function_response.name, "response": part.function_response.response}, default=str))
    return total


class OfflineDataAgentLlm(BaseLlm):
    """A scripted data agent (see the module docstring); ``convention`` is "gda" or "input"."""

    model: str = MODEL_NAME
    convention: Literal["gda", "input"] = "gda"

    @classmethod
    def supported_models(cls) -> list[str]:
        return [MODEL_NAME + r"(-.*)?"]

    @property
    def capabilities(self) -> LlmCapabilities:
        return LlmCapabilities(output_schema_and_tools=False)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        turns = read_turns(list(llm_request.contents or []))
        if not turns:
            parts = [types.Part(text="Hello! Ask me about the Greenleaf stores.")]
        else:
            current = turns[-1]
            if "CRASH" in current.text:
                raise RuntimeError("offline model: CRASH requested by the user's message")
            if "SLOW" in current.text and not current.calls and not current.model_texts:
                await asyncio.sleep(SLOW_SECONDS)
            if self.convention == "gda":
                parts = self._gda_step(turns)
            else:
                parts = self._input_step(turns)
        content = types.Content(role="model", parts=parts)
        prompt = sum(_content_words(c) for c in llm_request.contents or [])
        instruction = getattr(llm_request.config, "system_instruction", None)
        if isinstance(instruction, str):
            prompt += _words(instruction)
        candidates = _content_words(content)
        yield LlmResponse(
            content=content,
            partial=False,
            turn_complete=True,
            finish_reason=types.FinishReason.STOP,
            model_version=self.model,
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=prompt,
                candidates_token_count=candidates,
                total_token_count=prompt + candidates,
            ),
        )

    @staticmethod
    def _question_of(turns: list[Turn]) -> tuple[str, str | None, list[str]]:
        """The current question, its clarification (if answered) and the earlier user texts."""
        current = turns[-1]
        earlier = [t.text for t in turns[:-1]]
        if len(turns) >= 2:
            previous = turns[-2]
            # gda: the disambiguation question was answered by this text message;
            # input: a plain text arrived while adk_request_input was pending.
            if previous.asked_by_tool() or previous.pending_input_call() is not None:
                return previous.text, current.text, [t.text for t in turns[:-2]]
        return current.text, current.input_answer(), earlier

    def _gda_step(self, turns: list[Turn]) -> list[types.Part]:
        current = turns[-1]
        question, clarification, earlier = self._question_of(turns)
        decision = resolve(question, earlier, clarification)
        if decision.kind == "text":
            return [types.Part(text=decision.message)]
        plan = [tool_question(question, clarification, earlier, decision.uses_context)]
        if "TWICE" in current.text:
            plan.insert(0, COUNT_QUESTION)
        done = current.responses_named(GDA_TOOL)
        if len(done) < len(plan):
            return [types.Part(function_call=types.FunctionCall(name=GDA_TOOL, args={"question": plan[len(done)]}))]
        payload = _tool_payload(done[-1])
        if payload.get("disambiguationQuestion"):
            return [types.Part(text=payload["disambiguationQuestion"][0])]
        if payload.get("naturalLanguageAnswer"):
            return [types.Part(text=payload["naturalLanguageAnswer"])]
        error = (payload.get("queryResult") or {}).get("queryExecutionError")
        return [types.Part(text=f"The query failed: {error}" if error else "Done.")]

    def _input_step(self, turns: list[Turn]) -> list[types.Part]:
        current = turns[-1]
        if current.pending_input_call() is not None:  # e.g. an answer that lacks the call's id
            return [types.Part(text="I am still waiting for your answer.")]
        question, clarification, earlier = self._question_of(turns)
        decision = resolve(question, earlier, clarification)
        if decision.kind == "text":
            return [types.Part(text=decision.message)]
        if decision.kind == "clarify":
            return [types.Part(function_call=types.FunctionCall(name=REQUEST_INPUT, args={"message": decision.message}))]
        text = f"Here is the query:\n\n```sql\n{decision.sql}\n```"
        if "TWICE" in current.text:
            text = f"First a quick count:\n\n```sql\n{COUNT_SQL}\n```\n\nAnd the answer:\n\n```sql\n{decision.sql}\n```"
        return [types.Part(text=text)]


LLMRegistry.register(OfflineDataAgentLlm)
