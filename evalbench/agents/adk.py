"""Agents served by Google ADK's ``adk api_server`` (EvalBench's data-agent mode).

One ADK session per conversation: created at the first message, reused for every clarification
answer and the follow-up question, deleted when the conversation completes. A turn is one
``POST /run`` (or ``/run_sse``); its events are classified into sql / clarification / answer /
error by the configured reply convention (docs/agents.md).

A turn that may have reached the agent — an HTTP 500 (ADK answers 500 for any agent exception,
an upstream 429 included), a read timeout, a connection dropped mid-request — is never sent
again: it becomes a turn error with its status and body. Only requests that cannot have reached
the agent (connection refused, 429 or 503 from the server) are retried, with backoff.
"""

from __future__ import annotations

import json
import logging
import random
import re
import ssl
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

import httpx

from evalbench.agents import AgentContext, tool_args
from evalbench.agents.adk_turns import turn_message
from evalbench.clients.calls import CallFailed, transport_failure
from evalbench.clients.http import ReplyTooLarge, deadline_transport, request_bounded
from evalbench.clients.limits import RETRY_STATUSES, CallLimiter, backoff_delay, parse_retry_after
from evalbench.config.agents import AdkAgentConfig, ReplyConvention
from evalbench.core import deadline
from evalbench.core.conversation import AgentReply, Conversation, ReplyKind, TokenUsage, ToolCall, token_count
from evalbench.core.redaction import redact_url
from evalbench.dataset.session_state import StateFacts, render_state

log = logging.getLogger(__name__)


def _state_wrapped(created: object, sent: Mapping[str, object]) -> bool:
    """Whether a created session holds our state one level down, under "state" (how an api_server
    from before CreateSessionRequest stores the body ``{"state": ...}``)."""
    return isinstance(created, dict) and created.get("state") == sent and "state" not in sent

REQUEST_INPUT = "adk_request_input"
_FENCED_SQL = re.compile(r"```(?:sql|postgresql|postgres)?\s*\n(.*?)```", re.IGNORECASE | re.DOTALL)
_BODY_KEPT = 2000  # characters of an error body kept on the turn
CLOSE_TIMEOUT_S = 10.0  # deleting a session, once the conversation is over


class TurnFailed(Exception):
    """A request failed; ``kind`` says how (for the outcome), ``retryable`` whether it could not
    have reached the agent."""

    def __init__(self, message: str, kind: str, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind, self.retryable, self.retry_after = kind, retryable, retry_after


class AdkAgent:
    name = "adk"

    def __init__(self, config: AdkAgentConfig, context: AgentContext) -> None:
        self.config = config
        self.context = context
        self.sticky = config.session == "sticky"
        self.limiter = CallLimiter(config.execs_per_minute, config.max_concurrency)
        self.rng = random.Random(context.seed)
        self.sessions_path = f"/apps/{config.app_name}/users/{config.user_id}/sessions"
        self._headers = {name: value.get_secret_value() for name, value in config.headers.items()}
        self._timeout = httpx.Timeout(config.read_timeout_s, connect=config.connect_timeout_s)
        self._ssl = ssl.create_default_context()  # one TLS context for every session's client

    def new_client(self) -> httpx.Client:
        return httpx.Client(base_url=self.config.base_url.rstrip("/"), headers=self._headers, timeout=self._timeout,
                            transport=deadline_transport(verify=self._ssl))

    def describe(self) -> dict[str, object]:
        c = self.config
        return {
            "agent": self.name, "base_url": redact_url(c.base_url), "app_name": c.app_name, "user_id": c.user_id,
            "endpoint": c.endpoint, "session": c.session, "reply": c.reply.model_dump(),
            "header_names": sorted(c.headers), "read_timeout_s": c.read_timeout_s,
            "execs_per_minute": c.execs_per_minute, "max_concurrency": c.max_concurrency,
            "session_state": c.session_state, **({"model": c.model} if c.model else {}),
            **({"state_each_turn": c.state_each_turn} if c.state_each_turn else {}),
            **({"messages": c.messages.model_dump()} if c.messages else {}),
        }

    def open_session(self, conversation: Conversation) -> AdkSession:
        facts = self.state_facts(conversation)
        session = AdkSession(self, conversation, facts)
        state = render_state(self.config.session_state, facts) if self.config.session_state else None
        try:
            # the session's initial state: ADK's CreateSessionRequest {"state": ...}
            session.session_id, created = self._create(session, {"state": state} if state else {})
            if state and _state_wrapped(created, state):
                # an older api_server read the whole body as the state ({"state": {"state": ...}}): it takes the
                # state as the bare body of POST .../sessions/{id}, as every version does
                session.request("DELETE", f"{self.sessions_path}/{session.session_id}")
                session.session_id, _ = self._create(session, state, f"{self.sessions_path}/{uuid.uuid4()}")
        except BaseException:
            session.client.close()
            raise
        return session

    def state_facts(self, conversation: Conversation) -> StateFacts:
        item = conversation.item
        return StateFacts(item, conversation.patience, self.context.schema, self.context.knowledge.get(item.database, {}),
                          schema_file=self.context.schema_file, served=conversation.served)

    def _create(self, session: AdkSession, body: Mapping[str, object], path: str | None = None) -> tuple[str, object]:
        """(id, state) of a session created with ``body``."""
        response = session.request("POST", path or self.sessions_path, json=body)
        created: object = response.json()
        session_id = str(created.get("id") or "") if isinstance(created, dict) else ""
        if not session_id or not isinstance(created, dict):
            raise TurnFailed(f"session creation returned no id: {response.text[:_BODY_KEPT]}", "protocol", False)
        return session_id, created.get("state")

    def close(self) -> None:
        pass  # each session closes its own client

    def probe(self, timeout_s: float) -> str:
        """Preflight: ``GET /list-apps`` answers and lists this app; no session is created."""
        from evalbench.clients.probes import excerpt, http_probe
        from evalbench.core.errors import ConfigError, EvalbenchError

        where, app = redact_url(self.config.base_url), self.config.app_name
        fix = "start `adk api_server` there, or fix model_config adkapi_server_url"
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, self.config.connect_timeout_s))
        with self.new_client() as client:
            response = http_probe(lambda: client.get("/list-apps", timeout=timeout), where, fix, timeout_s)
        if response.status_code in (401, 403):
            raise ConfigError(f"{where} refused GET /list-apps (HTTP {response.status_code}): check the credentials in "
                              "model_config headers", key="model_config.headers")
        try:
            apps = response.json() if response.status_code == 200 else None
        except ValueError:
            apps = None
        if not isinstance(apps, list):
            raise EvalbenchError(f"GET {where}/list-apps answered HTTP {response.status_code} "
                                 f"{excerpt(response.text)!r}, not a list of apps; is it an ADK api_server? {fix}")
        if app not in apps:
            listed = ", ".join(str(a) for a in apps[:20]) or "none"
            raise ConfigError(f"{where} does not serve the app {app!r} (GET /list-apps lists: {listed}); fix agent_id, "
                              "or start the server on the folder that holds the app", key="model_config.agent_id")
        return f"{where} lists the app {app!r}"


@dataclass
class PendingInput:
    """An ``adk_request_input`` call waiting for the user's answer."""

    call_id: str
    invocation_id: str | None


class AdkSession:
    """One ADK session, with an HTTP client of its own: after a failed request the server may
    have closed the connection without saying so (uvicorn does after a 500), and a new client
    keeps that from failing the next request of another conversation."""

    def __init__(self, agent: AdkAgent, conversation: Conversation, facts: StateFacts) -> None:
        self.agent, self.conversation, self.facts = agent, conversation, facts
        self.client = agent.new_client()
        self.session_id = ""
        self.pending: PendingInput | None = None

    def request(self, method: str, path: str, *, json: object = None) -> httpx.Response:
        """One HTTP request with the retries allowed for requests that never reached the agent.
        Raises :class:`TurnFailed` when it did not succeed."""
        retry = self.agent.config.retry
        for attempt in range(retry.max_retries + 1):
            try:
                return self._once(method, path, json=json)
            except TurnFailed as failure:
                self._new_connection()
                if not failure.retryable or attempt == retry.max_retries:
                    raise
                delay = backoff_delay(attempt, retry.backoff_s, retry.max_backoff_s, failure.retry_after, self.agent.rng)
                log.info("%s %s: %s; retrying in %.2f s", method, path, failure, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _new_connection(self) -> None:
        self.client.close()
        self.client = self.agent.new_client()

    def _once(self, method: str, path: str, total_s: float | None = None, *, json: object = None) -> httpx.Response:
        base_url = redact_url(self.agent.config.base_url)
        try:
            response = request_bounded(self.client, method, path, total_s=total_s or self.agent.config.read_timeout_s,
                                       json=json)
        except httpx.TransportError as exc:  # retried only when nothing was sent (see transport_failure)
            failure = transport_failure(exc, base_url, self.agent.config.read_timeout_s) or CallFailed(str(exc), "connection")
            raise TurnFailed(str(failure), failure.kind, failure.retryable) from None
        except ReplyTooLarge as exc:
            raise TurnFailed(str(exc), "protocol", False) from None
        if response.status_code in RETRY_STATUSES:
            raise TurnFailed(
                f"HTTP {response.status_code}: {response.text[:_BODY_KEPT]}",
                f"http_{response.status_code}",
                True,
                parse_retry_after(response.headers.get("retry-after")),
            )
        if response.status_code >= 400:
            raise TurnFailed(f"HTTP {response.status_code}: {response.text[:_BODY_KEPT]}", f"http_{response.status_code}", False)
        return response

    def send(self, text: str) -> AgentReply:
        config = self.agent.config
        # the message as the config wraps its kind, and the state the agent gets before this turn
        message = turn_message(config, self.conversation, self.facts, text)
        text = message.text
        if self.pending is not None:  # the answer to an adk_request_input goes back as its response
            parts: list[dict[str, object]] = [
                {"functionResponse": {"id": self.pending.call_id, "name": REQUEST_INPUT, "response": {"result": text}}}
            ]
        else:
            parts = [{"text": text}]
        body: dict[str, object] = {
            "appName": config.app_name,
            "userId": config.user_id,
            "sessionId": self.session_id,
            "newMessage": {"role": "user", "parts": parts},
        }
        if message.state_delta:  # ADK's RunAgentRequest.state_delta: applied with the user's event, before the agent runs
            body["stateDelta"] = message.state_delta
        if self.pending is not None and self.pending.invocation_id:
            body["invocationId"] = self.pending.invocation_id  # resumes the paused invocation
        self.pending = None
        started = time.perf_counter()
        sent = started
        try:
            with self.agent.limiter.slot():
                sent = time.perf_counter()
                if config.endpoint == "run_sse":
                    response = self.request("POST", "/run_sse", json=body | {"streaming": False})
                    events: object = parse_sse(response.text)
                else:
                    response = self.request("POST", "/run", json=body)
                    events = response.json()
        except TurnFailed as failure:
            return AgentReply(ReplyKind.ERROR, error=str(failure), error_kind=failure.kind, latency_s=time.perf_counter() - sent)
        except deadline.Expired as exc:  # waiting for the limiter took the whole deadline
            return AgentReply(ReplyKind.ERROR, error=str(exc), error_kind="timeout", latency_s=0.0)
        except (ValueError, RecursionError) as exc:  # not JSON, or nested deeper than Python reads
            return AgentReply(ReplyKind.ERROR, error=f"malformed reply: {type(exc).__name__}: {exc}", error_kind="protocol",
                              latency_s=time.perf_counter() - sent)
        reply = classify(events, config.reply)
        reply.latency_s = time.perf_counter() - sent
        reply.raw = _truncate(json.dumps(events, default=str), config.raw_events_max_chars)
        if reply.kind is ReplyKind.CLARIFICATION:
            self.pending = pending_input(events)
        return reply

    def close(self) -> None:
        try:
            # after the conversation, outside its deadline: a slow server holds the runner briefly only
            self._once("DELETE", f"{self.agent.sessions_path}/{self.session_id}",
                       total_s=min(self.agent.config.read_timeout_s, CLOSE_TIMEOUT_S))
        except TurnFailed as failure:
            log.warning("deleting ADK session %s failed: %s", self.session_id, failure)
        finally:
            self.client.close()


# --------------------------------------------------------------------------- reading events


def parse_sse(text: str) -> list[object]:
    """The events of a ``/run_sse`` body: one ``data: <json>`` line per event."""
    events: list[object] = []
    for line in text.splitlines():
        if line.startswith("data:"):
            payload = line[5:].strip()
            if payload:
                events.append(json.loads(payload))
    return events


def classify(events: object, convention: ReplyConvention) -> AgentReply:
    """Read one turn's events as exactly one reply kind (rules in docs/agents.md)."""
    if not isinstance(events, list):
        return AgentReply(ReplyKind.ERROR, error=f"expected a list of events, got {type(events).__name__}", error_kind="protocol")
    calls: dict[str, ToolCall] = {}
    ordered: list[ToolCall] = []
    texts: list[str] = []
    long_running: set[str] = set()
    usage = TokenUsage()
    error = None
    for event in events:
        if not isinstance(event, dict):
            continue
        if event.get("errorCode") or event.get("errorMessage"):
            error = f"{event.get('errorCode') or 'error'}: {event.get('errorMessage') or ''}".strip()
        long_running.update(i for i in _list(event.get("longRunningToolIds")) if isinstance(i, str))
        meta = _object(event.get("usageMetadata"))
        usage.prompt += token_count(meta.get("promptTokenCount"))
        usage.completion += token_count(meta.get("candidatesTokenCount"))
        usage.total += token_count(meta.get("totalTokenCount"))
        content = _object(event.get("content"))
        from_user = content.get("role") == "user"  # ADK puts tool responses in "user" content
        for part in map(_object, _list(content.get("parts"))):  # a server under test may send any JSON
            if part.get("functionCall"):
                fc = _object(part["functionCall"])
                # recorded, never run here: arguments too deep or too large are kept clipped
                call = ToolCall(name=_string(fc.get("name")), args=tool_args.decode(fc.get("args")), id=_string(fc.get("id")) or None)
                ordered.append(call)
                if call.id:
                    calls[call.id] = call
            elif part.get("functionResponse"):
                fr = _object(part["functionResponse"])
                answered = calls.get(_string(fr.get("id")))
                if answered is None:  # a response without a visible call (e.g. a tool run server-side)
                    answered = ToolCall(name=_string(fr.get("name")), id=_string(fr.get("id")) or None)
                    ordered.append(answered)
                answered.response = tool_args.kept(fr.get("response"))  # any JSON: kept within limits
            elif isinstance(said := part.get("text"), str) and said and not part.get("thought") and not from_user:
                texts.append(said)
    text = "\n".join(t.strip() for t in texts if t.strip())
    base = _ReplyParts(text=text, tool_calls=ordered, usage=usage)
    if error is not None:
        return AgentReply(ReplyKind.ERROR, error=error, error_kind="agent", **base)
    order = ["gda", "request_input", "sql_tool", "text"] if convention.convention == "auto" else [convention.convention]
    for name in order:
        reply = _READERS[name](ordered, text, long_running, convention)
        if reply is not None:
            reply.tool_calls, reply.usage = ordered, usage
            if not reply.text:
                reply.text = text
            return reply
    if not events or (not text and not ordered):
        return AgentReply(ReplyKind.ERROR, error="the agent's turn had no content", error_kind="empty", **base)
    return AgentReply(ReplyKind.ANSWER, **base)


class _ReplyParts(TypedDict):
    """What every reply of a turn carries, whatever its kind."""

    text: str
    tool_calls: list[ToolCall]
    usage: TokenUsage


def _object(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _string(value: object) -> str:
    return value if isinstance(value, str) else ""


def _gda(calls: list[ToolCall], text: str, long_running: set[str], c: ReplyConvention) -> AgentReply | None:
    """EvalBench/GDA: the tool's response.result is a JSON string with generatedQuery or
    disambiguationQuestion. The last such response decides; SQL wins over a question."""
    for call in reversed(calls):
        if call.name != c.gda_tool or call.response is None:
            continue
        result = call.response.get("result", call.response) if isinstance(call.response, dict) else call.response
        if isinstance(result, str):
            try:
                result = json.loads(result)
            except (ValueError, RecursionError):  # not JSON, or nested deeper than Python reads
                return AgentReply(ReplyKind.ERROR, error=f"{c.gda_tool} result is not JSON: {result[:200]}", error_kind="protocol")
        if not isinstance(result, dict):
            return AgentReply(ReplyKind.ERROR, error=f"{c.gda_tool} result is not an object", error_kind="protocol")
        sql = result.get("generatedQuery")
        question = result.get("disambiguationQuestion")
        if isinstance(question, list):
            question = " ".join(str(q) for q in question if q)
        if sql:
            return AgentReply(ReplyKind.SQL, sql=str(sql), text=text or str(result.get("naturalLanguageAnswer") or ""))
        if question:
            return AgentReply(ReplyKind.CLARIFICATION, text=str(question))
        return AgentReply(ReplyKind.ANSWER, text=text or str(result.get("naturalLanguageAnswer") or ""))
    return None


def _request_input(calls: list[ToolCall], text: str, long_running: set[str], c: ReplyConvention) -> AgentReply | None:
    """ADK's long-running adk_request_input: the first pending call is the question."""
    for call in calls:
        if call.name == REQUEST_INPUT and call.id in long_running and call.response is None:
            question = call.args.get("message") or call.args.get("question") or text or json.dumps(call.args)
            return AgentReply(ReplyKind.CLARIFICATION, text=str(question))
    return None


def pending_input(events: object) -> PendingInput | None:
    """The first adk_request_input call of the turn (a list of events) still waiting for an answer, if any."""
    events = _list(events)

    def parts(event: object) -> list[dict[str, object]]:
        return [_object(p) for p in _list(_object(_object(event).get("content")).get("parts"))]

    answered = {_string(_object(part.get("functionResponse")).get("id")) for event in events for part in parts(event)}
    for event in events:
        waiting = {i for i in _list(_object(event).get("longRunningToolIds")) if isinstance(i, str)}
        for part in parts(event):
            call = _object(part.get("functionCall"))
            call_id = _string(call.get("id"))
            if call.get("name") == REQUEST_INPUT and call_id in waiting and call_id not in answered:
                return PendingInput(call_id, _string(_object(event).get("invocationId")) or None)
    return None


def _sql_tool(calls: list[ToolCall], text: str, long_running: set[str], c: ReplyConvention) -> AgentReply | None:
    """A named SQL tool: the last call's ``sql_arg`` is the SQL."""
    if not c.sql_tool:
        return None
    for call in reversed(calls):
        if call.name == c.sql_tool and call.args.get(c.sql_arg):
            return AgentReply(ReplyKind.SQL, sql=str(call.args[c.sql_arg]))
    return None


def _text(calls: list[ToolCall], text: str, long_running: set[str], c: ReplyConvention) -> AgentReply | None:
    """Plain text: the last fenced SQL block is the SQL; otherwise text whose last line asks
    something is a clarification; otherwise an answer."""
    blocks = _FENCED_SQL.findall(text)
    if blocks and blocks[-1].strip():
        return AgentReply(ReplyKind.SQL, sql=blocks[-1].strip(), text=text)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if lines and lines[-1].endswith("?"):
        return AgentReply(ReplyKind.CLARIFICATION, text=text)
    return None


_READERS = {"gda": _gda, "request_input": _request_input, "sql_tool": _sql_tool, "text": _text}


def _truncate(text: str, limit: int) -> str | None:
    if limit <= 0:
        return None
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"
