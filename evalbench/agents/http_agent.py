"""Any agent behind a JSON-over-HTTP endpoint, from config alone (``agent: http``).

Each turn is one ``POST {url}`` whose JSON body is the config's ``request`` template rendered for
the turn (``{message}``, ``{session_id}``, ``{turn}``, ``{phase}``) and the item (the names of
``session_state``). The reply's text, SQL, clarification question and session id are read from
the JSON response with the config's JMESPath expressions: a non-empty question makes the reply a
clarification, else non-empty SQL a SQL reply, else the text an answer in words.

A conversation's ``{session_id}`` is a fresh id of the harness, or the one the server gave
(``reply.session_id``). As with the ADK agent, a turn that may have reached the agent (an HTTP
error, a read timeout, a connection dropped mid-request) is never sent again: it is a turn error;
only requests that cannot have reached it (connection refused, 429, 503) are retried with backoff.
"""

from __future__ import annotations

import json
import random
import time
import uuid

import httpx
import jmespath

from evalbench.agents import AgentContext
from evalbench.clients.calls import BODY_KEPT, CallFailed, transport_failure
from evalbench.clients.http import ReplyTooLarge, deadline_transport, request_bounded
from evalbench.clients.limits import RETRY_STATUSES, backoff_delay, parse_retry_after
from evalbench.config.agents import HttpAgentConfig
from evalbench.core.conversation import AgentReply, Conversation, ReplyKind
from evalbench.core.redaction import redact_url
from evalbench.dataset.session_state import StateFacts, render_state

RAW_KEPT = 20_000  # characters of a response kept on the turn


class HttpAgent:
    name = "http"
    sticky = True

    def __init__(self, config: HttpAgentConfig, context: AgentContext) -> None:
        self.config, self.context = config, context
        self.rng = random.Random(context.seed)
        self.paths = {part: jmespath.compile(path) for part, path in config.reply.model_dump().items() if path}
        self.client = httpx.Client(headers={n: v.get_secret_value() for n, v in config.headers.items()},
                                   timeout=httpx.Timeout(config.read_timeout_s, connect=config.connect_timeout_s),
                                   transport=deadline_transport())

    def describe(self) -> dict[str, object]:
        c = self.config
        return {"agent": self.name, "url": redact_url(c.url), "request": c.request, "reply": c.reply.model_dump(),
                "header_names": sorted(c.headers), "read_timeout_s": c.read_timeout_s, **({"model": c.model} if c.model else {})}

    def open_session(self, conversation: Conversation) -> HttpSession:
        item = conversation.item
        facts = StateFacts(item, conversation.patience, self.context.schema, self.context.knowledge.get(item.database, {}),
                           schema_file=self.context.schema_file, served=conversation.served)
        return HttpSession(self, conversation, facts)

    def close(self) -> None:
        self.client.close()

    def probe(self, timeout_s: float) -> str:
        """Preflight: something accepts connections at the URL. No turn is sent (it would reach
        the agent under test, and cost what a turn costs)."""
        from evalbench.clients.probes import tcp_probe

        where = redact_url(self.config.url)
        tcp_probe(self.config.url, where, "start the agent's server, or fix model_config url", timeout_s)
        return f"{where} accepts connections"


class HttpSession:
    """One conversation with the endpoint: its session id and turn count."""

    def __init__(self, agent: HttpAgent, conversation: Conversation, facts: StateFacts) -> None:
        self.agent, self.conversation, self.facts = agent, conversation, facts
        self.session_id = uuid.uuid4().hex
        self.turn = 0

    def send(self, text: str) -> AgentReply:
        self.turn += 1
        more = {"message": text, "session_id": self.session_id, "turn": self.turn, "phase": self.conversation.phase.phase.value}
        body = render_state(self.agent.config.request, self.facts, more)
        started = time.perf_counter()
        try:
            response = self._post(body)
            data: object = response.json()
        except CallFailed as failure:
            return AgentReply(ReplyKind.ERROR, error=str(failure), error_kind=failure.kind, latency_s=time.perf_counter() - started)
        except (ValueError, RecursionError) as exc:  # not JSON, or nested deeper than Python reads
            return AgentReply(ReplyKind.ERROR, error=f"malformed reply: {type(exc).__name__}: {exc}", error_kind="protocol",
                              latency_s=time.perf_counter() - started)
        reply = self._classify(data)
        reply.latency_s = time.perf_counter() - started
        reply.raw = json.dumps(data, default=str)[:RAW_KEPT]
        return reply

    def _classify(self, data: object) -> AgentReply:
        parts = {part: _text(path.search(data)) for part, path in self.agent.paths.items()}
        if parts.get("session_id"):
            self.session_id = parts["session_id"]
        text = parts.get("text", "")
        if parts.get("question"):
            return AgentReply(ReplyKind.CLARIFICATION, text=parts["question"])
        if parts.get("sql"):
            return AgentReply(ReplyKind.SQL, text=text, sql=parts["sql"])
        if text:
            return AgentReply(ReplyKind.ANSWER, text=text)
        return AgentReply(ReplyKind.ERROR, error="the reply has no text, SQL or question where model_config reply says",
                          error_kind="protocol")

    def _post(self, body: dict[str, object]) -> httpx.Response:
        """The turn's POST, retried only while it cannot have reached the agent."""
        config = self.agent.config
        for attempt in range(config.retry.max_retries + 1):
            try:
                return self._once(body)
            except CallFailed as failure:
                if not failure.retryable or attempt == config.retry.max_retries:
                    raise
                time.sleep(backoff_delay(attempt, config.retry.backoff_s, config.retry.max_backoff_s,
                                         failure.retry_after, self.agent.rng))
        raise AssertionError("unreachable")

    def _once(self, body: dict[str, object]) -> httpx.Response:
        config = self.agent.config
        try:
            response = request_bounded(self.agent.client, "POST", config.url, total_s=config.read_timeout_s, json=body)
        except httpx.TransportError as exc:  # retried only when nothing was sent (see transport_failure)
            raise transport_failure(exc, redact_url(config.url), config.read_timeout_s) or CallFailed(str(exc), "connection") from None
        except ReplyTooLarge as exc:
            raise CallFailed(str(exc), "protocol") from None
        if response.status_code >= 400:
            retryable = response.status_code in RETRY_STATUSES
            raise CallFailed(f"HTTP {response.status_code}: {response.text[:BODY_KEPT]}", f"http_{response.status_code}",
                             retryable=retryable, retry_after=parse_retry_after(response.headers.get("retry-after")))
        return response

    def close(self) -> None:
        pass  # the endpoint holds no session of ours to delete


def _text(value: object) -> str:
    """A reply part as text: a string as is, null as empty, anything else as JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, default=str)
