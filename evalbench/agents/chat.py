"""What the LLM agents called directly (``gemini``, ``openai_compat``) share.

**System prompt.** A template (``system_prompt``, default ``prompts/agent_system.txt``) with
these placeholders, replaced with :meth:`str.replace` (so other braces, e.g. in SQL examples,
are left alone):

- ``{database}``, ``{dialect}`` (the item's, e.g. ``postgres``) and ``{dialect_name}`` (its
  display name, e.g. ``PostgreSQL``): where the agent is, the context an ADK agent gets in its
  session state;
- ``{schema}``: the database's schema, ``context.schema(item.dialect, item.database)``;
- ``{knowledge}``: with ``include_knowledge``, a "Domain knowledge" section listing the entries
  of ``context.knowledge[item.database]`` the item cites in ``external_knowledge`` (never those
  an ambiguity deleted: the agent must ask about them); otherwise nothing;
- ``{reply_format}``: how to reply in the configured clarification mode (appended at the end
  when a custom template lacks it), and with ``tools`` a note that the discovery tools may be
  called first.

**History.** A session keeps the conversation's turns (user messages, model replies, tool
results) in the backend's own format, and sends all of them with every call.

**Clarification protocol.** ``function_calling`` offers two tools, ``run_sql(sql)`` and
``ask_user(question)``; ``tagged_text`` asks for ``<sql>…</sql>`` or ``<question>…</question>``.
Either way a reply is read by :func:`classify`:

1. SQL: the last ``run_sql`` call with a non-empty ``sql``; else the last ``<sql>`` block of the
   text; else the last fenced ```` ```sql ```` block.
2. The question: the last ``ask_user`` call with a non-empty ``question``; else the last
   ``<question>`` block.
3. SQL wins over a question: the reply is ``sql`` and the question is kept in the reply text.
   A question alone is a ``clarification``; text alone is an ``answer``; nothing usable is an
   ``error`` (``empty``, or ``protocol`` when there were only unusable tool calls: the turn loop
   then gives each call an error result and calls the model again, see :meth:`ChatSession._turn`).

Tags are read in both modes (a model offered tools may still answer in text); ``<think>``
blocks are ignored. Every tool call is recorded on the reply. On the next turn each call gets a
result: ``ask_user`` after a clarification gets the user's answer (the answer is not repeated as
a user message); ``run_sql`` gets a note that the query was run and shown to the user, and the
new message follows as a user message.

**Failures.** 429, 503 and connection errors (nothing reached the model, or the model refused
to start) are retried with :func:`~evalbench.clients.limits.backoff_delay` (``Retry-After``
honoured); when retries run out, and for any other failure (another HTTP status, a malformed
response, a timeout), :meth:`ChatSession.send` returns an ``error`` reply — it never raises.
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from evalbench.agents import AgentContext, tool_args
from evalbench.agents.tool_args import ToolSpec
from evalbench.agents.tools import RUN_SQL_NOTE, Toolbox, ToolKit, clip, tool_specs
from evalbench.clients.calls import BODY_KEPT as BODY_KEPT  # their old home, kept for a release
from evalbench.clients.calls import RAW_MAX_CHARS as RAW_MAX_CHARS
from evalbench.clients.calls import CallFailed
from evalbench.clients.calls import transport_failure as transport_failure
from evalbench.clients.calls import truncate as truncate
from evalbench.clients.limits import CallLimiter, backoff_delay
from evalbench.config.agents import ChatAgentOptions, default_prompt
from evalbench.core import deadline
from evalbench.core.conversation import AgentReply, Conversation, ReplyKind, TokenUsage, ToolCall
from evalbench.core.errors import ConfigError
from evalbench.core.items import knowledge_refs
from evalbench.dataset import Item

log = logging.getLogger(__name__)

SYSTEM_PROMPT = "agent_system.txt"
RUN_SQL = "run_sql"
ASK_USER = "ask_user"
REPAIRS = 2  # model calls after replies of unusable tool calls, in a turn without discovery tools

# A message of the history in the backend's own format (a google-genai Content, an OpenAI message).
MessageT = TypeVar("MessageT")

# Tool definitions, in a neutral form each backend converts (JSON Schema parameters).
TOOLS: list[ToolSpec] = [
    {
        "name": RUN_SQL,
        "description": "Run ONE SQL statement (in the database's dialect) that answers the user's request. "
                       "Its result is shown to the user.",
        "parameters": {
            "type": "object",
            "properties": {"sql": {"type": "string", "description": "the complete statement"}},
            "required": ["sql"],
        },
    },
    {
        "name": ASK_USER,
        "description": "Ask the user ONE short clarification question, only when the request is really ambiguous. "
        "The tool's result is the user's answer.",
        "parameters": {
            "type": "object",
            "properties": {"question": {"type": "string", "description": "the clarification question"}},
            "required": ["question"],
        },
    },
]

REPLY_FORMATS = {
    "function_calling": (
        "Reply by calling exactly one tool:\n"
        "- `run_sql` with the complete statement as `sql`, or\n"
        "- `ask_user` with your clarification question as `question`.\n"
        "Do not write the SQL in your text."
    ),
    "tagged_text": (
        "Reply with exactly one of:\n"
        "<sql>\nthe complete statement\n</sql>\n"
        "or\n"
        "<question>your clarification question</question>\n"
        "Put nothing but the statement or the question inside the tags."
    ),
}

# Results given back for the previous turn's tool calls.
SQL_RESULT: dict[str, object] = {"status": "done", "note": "The query was run and its result was shown to the user."}
QUESTION_SKIPPED: dict[str, object] = {"answer": "(not asked: your query was run instead)"}


# --------------------------------------------------------------------------- the system prompt


def load_template(config: ChatAgentOptions) -> tuple[Path, str]:
    path = config.system_prompt or default_prompt(SYSTEM_PROMPT)
    try:
        return path, path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ConfigError(f"cannot read the system prompt {path}: {exc}", key="model_config.system_prompt") from None


def knowledge_section(item: Item, context: AgentContext) -> str:
    """The item's external knowledge entries as a prompt section ("" when there are none).
    Entries an ambiguity deleted are left out: the agent is meant to ask about them."""
    entries = context.knowledge.get(item.database, {})
    lines = []
    for ref in knowledge_refs(item.external_knowledge):
        entry = entries.get(ref)
        if entry is None or entry.id in item.deleted_knowledge:
            continue
        line = f"- {entry.name}: {entry.description}".rstrip()
        definition = "; ".join(d for d in entry.definition if d)
        if definition:
            line += f" Definition: {definition}"
        lines.append(line)
    if not lines:
        return ""
    return "## Domain knowledge\n\n" + "\n".join(lines)


DIALECT_NAMES = {"postgres": "PostgreSQL", "sqlite": "SQLite", "duckdb": "DuckDB", "mysql": "MySQL",
                 "alloydb": "PostgreSQL", "cloudsql": "PostgreSQL", "bigquery": "BigQuery", "tsql": "SQL Server"}
TOOLS_NOTE = ("Before you reply you may call the discovery tools ({names}) to look at the database and its "
              "documentation; their results come back to you and do not end your turn.")


def render_system_prompt(template: str, *, schema: str, knowledge: str, reply_format: str,
                         database: str = "", dialect: str = "postgres") -> str:
    text = template.replace("{database}", database).replace("{dialect}", dialect)
    text = text.replace("{dialect_name}", DIALECT_NAMES.get(dialect, dialect))
    text = text.replace("{schema}", schema.strip() or "(no schema available)")
    text = text.replace("{knowledge}", knowledge.strip())
    if "{reply_format}" in text:
        text = text.replace("{reply_format}", reply_format)
    else:
        text = text.rstrip() + "\n\n" + reply_format
    text = re.sub(r"\n{3,}", "\n\n", text)  # an empty {knowledge} leaves no gap
    return text.strip() + "\n"


# --------------------------------------------------------------------------- reading a reply


_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.IGNORECASE | re.DOTALL)
_SQL_TAG = re.compile(r"<sql>(.*?)</sql>", re.IGNORECASE | re.DOTALL)
_QUESTION_TAG = re.compile(r"<question>(.*?)</question>", re.IGNORECASE | re.DOTALL)
_OPEN_SQL_TAG = re.compile(r"<sql>(.*)$", re.IGNORECASE | re.DOTALL)  # cut off by max_output_tokens
_FENCED_SQL = re.compile(r"```(?:sql|postgresql|postgres)[ \t]*\n(.*?)```", re.IGNORECASE | re.DOTALL)


def _last(pattern: re.Pattern[str], text: str) -> str | None:
    found = [m.strip() for m in pattern.findall(text) if m.strip()]
    return found[-1] if found else None


def _arg(call: ToolCall, name: str) -> str | None:
    value = call.args.get(name) if isinstance(call.args, dict) else None
    return value.strip() if isinstance(value, str) and value.strip() else None


def classify(text: str, calls: list[ToolCall]) -> AgentReply:
    """One model reply as exactly one reply kind (the rules of this module's docstring)."""
    text = _THINK.sub("", text or "").strip()
    sql = next((s for c in reversed(calls) if c.name == RUN_SQL and (s := _arg(c, "sql"))), None)
    question = next((q for c in reversed(calls) if c.name == ASK_USER and (q := _arg(c, "question"))), None)
    if sql is None:
        sql = _last(_SQL_TAG, text) or _last(_FENCED_SQL, text)
        if sql is None and not _QUESTION_TAG.search(text):
            sql = _last(_OPEN_SQL_TAG, text)
    if question is None:
        question = _last(_QUESTION_TAG, text)
    prose = _SQL_TAG.sub("", text)
    prose = _OPEN_SQL_TAG.sub("", _FENCED_SQL.sub("", _QUESTION_TAG.sub("", prose))).strip()
    if sql:
        return AgentReply(ReplyKind.SQL, sql=sql, text="\n\n".join(t for t in (prose, question) if t), tool_calls=calls)
    if question:
        return AgentReply(ReplyKind.CLARIFICATION, text=question, tool_calls=calls)
    if text:
        return AgentReply(ReplyKind.ANSWER, text=text, tool_calls=calls)
    if calls:
        names = ", ".join(c.name for c in calls)
        return AgentReply(ReplyKind.ERROR, error=f"tool calls without a usable run_sql or ask_user: {names}",
                          error_kind="protocol", tool_calls=calls)
    return AgentReply(ReplyKind.ERROR, error="the model returned no text and no tool call", error_kind="empty")


# --------------------------------------------------------------------------- model calls


@dataclass
class ModelTurn(Generic[MessageT]):
    """One successful model call, read into neutral form."""

    text: str
    calls: list[ToolCall]
    usage: TokenUsage
    native: MessageT  # the model's message, appended to the history as it is
    raw: str | None = None  # the response, as JSON text
    finish_reason: str | None = None


@dataclass
class ToolResult:
    """The result given back to the model for one of its tool calls."""

    call: ToolCall
    response: dict[str, object]


def offered_tools(toolkit: ToolKit | None) -> list[ToolSpec]:
    """run_sql and ask_user, then the configured discovery tools; run_sql says it shows its rows
    when the kit runs it."""
    if toolkit is None:
        return TOOLS
    run_sql = TOOLS[0].copy()
    if toolkit.executes_sql:
        run_sql["description"] = run_sql["description"].replace("Its result is shown to the user.", RUN_SQL_NOTE)
    return [run_sql, TOOLS[1], *tool_specs(sorted(toolkit.names))]


# --------------------------------------------------------------------------- agent and session


class ChatAgent(Generic[MessageT]):
    """Base of the LLM agents: config, prompt, limiter and retries. A backend implements
    :meth:`user_messages` and :meth:`call_model`."""

    name = "chat"

    def __init__(self, config: ChatAgentOptions, context: AgentContext) -> None:
        self.config = config
        self.context = context
        self.sticky = config.session == "sticky"  # per_turn: the pipeline opens a session every turn
        self.seed = config.seed if config.seed is not None else context.seed
        self.limiter = CallLimiter(config.execs_per_minute, config.max_concurrency)
        self.rng = random.Random(context.seed)
        self.prompt_path, self.template = load_template(config)
        self.function_calling = config.clarification == "function_calling"
        self.toolkit = ToolKit(config.tools, config.tool_limits, context) if config.tools else None
        self.tool_specs = offered_tools(self.toolkit)

    # ------------------------------------------------------------------ backend hooks

    def user_messages(self, text: str | None, results: list[ToolResult]) -> list[MessageT]:
        """History entries for a user turn: the results of the previous tool calls, then the
        user's text (None when the text went back as the ``ask_user`` result)."""
        raise NotImplementedError

    def call_model(self, system: str, history: list[MessageT]) -> ModelTurn[MessageT]:
        """One model call with the whole history. Raises :class:`CallFailed`."""
        raise NotImplementedError

    @property
    def endpoint(self) -> str | None:
        return None

    # ------------------------------------------------------------------ the Agent protocol

    def system_prompt(self, item: Item) -> str:
        knowledge = knowledge_section(item, self.context) if self.config.include_knowledge else ""
        base = getattr(self.config, "base_prompt", "")  # EvalBench's base_prompt (gemini), before everything
        reply_format = REPLY_FORMATS[self.config.clarification]
        if self.toolkit is not None:
            explore = sorted(n for n in self.toolkit.names if n != "run_sql")
            reply_format += "\n" + TOOLS_NOTE.format(names=", ".join(explore)) if explore else ""
        return base + render_system_prompt(
            self.template,
            schema=self.context.schema(item.dialect, item.database),
            knowledge=knowledge,
            reply_format=reply_format,
            database=item.database,
            dialect=item.dialect,
        )

    def open_session(self, conversation: Conversation) -> ChatSession[MessageT]:
        toolbox = self.toolkit.session(conversation.item) if self.toolkit is not None else None
        return ChatSession(self, self.system_prompt(conversation.item), toolbox=toolbox)

    def describe(self) -> dict[str, object]:
        c = self.config
        return {
            "agent": self.name, "model": c.model, "base_url": self.endpoint, "temperature": c.temperature,
            "seed": self.seed, "max_output_tokens": c.max_output_tokens, "clarification": c.clarification,
            "include_knowledge": c.include_knowledge, "system_prompt": str(self.prompt_path),
            "system_prompt_sha256": hashlib.sha256(self.template.encode()).hexdigest(),
            "session": c.session, "timeout_s": c.timeout_s, "execs_per_minute": c.execs_per_minute,
            "max_concurrency": c.max_concurrency, "retry": c.retry.model_dump(),
            **({"tools": list(c.tools), "tool_limits": c.tool_limits.model_dump()} if c.tools else {}),
        }

    def close(self) -> None:
        if self.toolkit is not None:
            self.toolkit.close()

    # ------------------------------------------------------------------ calls with retries

    def call_with_retries(self, system: str, history: list[MessageT]) -> tuple[ModelTurn[MessageT], float]:
        """(turn, seconds waited for the limiter). Raises the last :class:`CallFailed`."""
        retry = self.config.retry
        waited = 0.0
        for attempt in range(retry.max_retries + 1):
            try:
                with self.limiter.slot() as wait:
                    waited += wait
                    try:
                        return self.call_model(system, history), waited
                    except CallFailed as exc:
                        failure = exc
            except deadline.Expired as exc:  # waiting for the limiter took the whole deadline
                raise CallFailed(str(exc), "timeout") from None
            if not failure.retryable or attempt == retry.max_retries:
                if failure.retryable:
                    failure.args = (f"{failure} (after {attempt + 1} attempts)",)
                raise failure
            delay = backoff_delay(attempt, retry.backoff_s, retry.max_backoff_s, failure.retry_after, self.rng)
            log.info("%s: %s; retrying in %.2f s", self.name, failure, delay)
            time.sleep(delay)
        raise AssertionError("unreachable")


@dataclass
class ChatSession(Generic[MessageT]):
    """One conversation with the model: the system prompt and the turns so far."""

    agent: ChatAgent[MessageT]
    system: str
    history: list[MessageT] = field(default_factory=list)
    toolbox: Toolbox | None = None  # the discovery tools of this conversation (tools: in the config)
    pending: list[ToolCall] = field(default_factory=list)  # the last reply's tool calls, awaiting results
    answered_by_tool: bool = False  # the last reply asked through ask_user: the next text is its result

    def send(self, text: str) -> AgentReply:
        started = time.perf_counter()
        results = self._results(text)
        messages = self.agent.user_messages(None if self.answered_by_tool else text, results)
        mark = len(self.history)
        self.history.extend(messages)
        waited = 0.0
        try:
            turn, calls, usage, waited = self._turn()
            # a question asked after exploring queries is a question: the turn's last reply decides
            reply = classify(turn.text, turn.calls if any(c.name == ASK_USER for c in turn.calls) else calls)
            reply.tool_calls = calls
        except CallFailed as failure:
            reply, turn = AgentReply(ReplyKind.ERROR, error=str(failure), error_kind=failure.kind), None
            reply.tool_calls = list(failure.calls)
        except Exception as exc:  # a bug reading a response: still a turn error, never raised
            log.warning("%s: reading the model's reply failed", self.agent.name, exc_info=True)
            reply, turn = AgentReply(ReplyKind.ERROR, error=f"{type(exc).__name__}: {exc}", error_kind="protocol"), None
        if turn is not None:
            reply.usage = usage
            reply.raw = turn.raw
            if reply.kind is ReplyKind.ERROR and turn.finish_reason:
                reply.error = f"{reply.error} (finish reason: {turn.finish_reason})"
        if reply.kind is ReplyKind.ERROR or turn is None:
            del self.history[mark:]  # the turn never happened
            self.pending = []
        else:
            self.history.append(turn.native)
            self.pending = list(turn.calls)
            self.answered_by_tool = reply.kind is ReplyKind.CLARIFICATION and any(c.name == ASK_USER for c in turn.calls)
        reply.latency_s = time.perf_counter() - started - waited
        return reply

    def _turn(self) -> tuple[ModelTurn[MessageT], list[ToolCall], TokenUsage, float]:
        """Model calls until the model answers: each reply that calls only tools the harness runs
        gets their results and the model is called again. Returns the last model turn, every
        tool call of the turn, the summed token usage and the seconds waited for the limiter."""
        toolbox = self.toolbox
        if toolbox is not None:
            toolbox.start_turn()
        calls: list[ToolCall] = []
        usage = TokenUsage()
        waited = 0.0
        for _ in range(self.max_model_calls()):
            try:
                turn, wait = self.agent.call_with_retries(self.system, self.history)
            except CallFailed as failure:
                failure.calls = calls
                raise
            waited += wait
            calls.extend(turn.calls)
            usage = TokenUsage(usage.prompt + turn.usage.prompt, usage.completion + turn.usage.completion,
                               usage.total + turn.usage.total)
            if not (_unusable(turn) or (toolbox is not None and _explores(turn.calls, toolbox))):
                return turn, calls, usage, waited
            self.history.append(turn.native)  # the model gets its results (or errors) and is called again
            results = [ToolResult(c, toolbox.run(c) if toolbox is not None and toolbox.kit.runs(c) else _not_run(c))
                       for c in turn.calls]
            self.history.extend(self.agent.user_messages(None, results))
        budget = f"{self.agent.config.tool_limits.per_turn} calls" if toolbox is not None else f"{self.max_model_calls()} replies"
        over = CallFailed(f"the model kept calling tools past the turn's budget ({budget})", "tool_budget")
        over.calls = calls
        raise over

    def max_model_calls(self) -> int:
        """Model calls in one turn: without tools one, and :data:`REPAIRS` more after replies of
        unusable tool calls; with tools the budget's calls plus two (one reply after the last
        allowed call, one after the refusal that says to answer)."""
        return 1 + REPAIRS if self.toolbox is None else self.agent.config.tool_limits.per_turn + 2

    def _results(self, text: str) -> list[ToolResult]:
        """The results of the previous reply's tool calls, given with this message."""
        results = []
        for call in self.pending:
            response: dict[str, object]
            if call.name == ASK_USER:
                response = {"answer": text} if self.answered_by_tool else QUESTION_SKIPPED
            elif call.name == RUN_SQL:
                response = SQL_RESULT if _arg(call, "sql") else {"error": "no sql given: nothing was run"}
            elif self.toolbox is not None and self.toolbox.kit.runs(call):
                response = {"error": "not run: it came with your question or your answer, which ended the turn"}
            else:
                response = {"error": f"unknown tool {call.name!r}: use run_sql or ask_user"}
            call.response = response
            results.append(ToolResult(call, response))
        return results

    def close(self) -> None:
        self.history.clear()
        self.pending = []


def _explores(calls: list[ToolCall], toolbox: Toolbox) -> bool:
    """Whether a model reply goes on exploring: it calls a tool the harness runs and nothing that
    ends the turn (ask_user; run_sql when its rows are not shown)."""
    if not any(toolbox.kit.runs(c) for c in calls):
        return False
    return not any(c.name == ASK_USER or (c.name == RUN_SQL and not toolbox.kit.runs(c)) for c in calls)


def _unusable(turn: ModelTurn[MessageT]) -> bool:
    """Whether a model reply is only tool calls the harness cannot use (an unknown tool,
    ``run_sql`` without a statement, arguments that are not an object...): the model is told
    why and may try again."""
    reply = classify(turn.text, turn.calls)
    return reply.kind is ReplyKind.ERROR and reply.error_kind == "protocol"


def _not_run(call: ToolCall) -> dict[str, object]:
    """The error result of a call the harness does not run (recorded on the call)."""
    why = tool_args.problem(call.args)
    if why is not None:
        error = f"{why}: not run"
    elif call.name == RUN_SQL:
        error = "no sql given (a non-empty string): nothing was run"
    elif call.name == ASK_USER:
        error = "no question given (a non-empty string): nothing was asked"
    else:
        error = f"unknown tool {clip(call.name)!r}: not run; use run_sql or ask_user"
    response: dict[str, object] = {"error": error}
    call.response, call.outcome = response, "error"
    return response
