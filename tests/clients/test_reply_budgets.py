"""One budget per reply on every adapter that talks HTTP: the agents (openai_compat, gemini
through the real google-genai SDK, adk ``/run`` and ``/run_sse``), the llm virtual user and the
LLM judges (llmrater, answer_match's llmrater). A real local server sends its reply — status
line, headers, body — a byte at a time, each byte well within any read timeout: the call must
end at its own ``timeout_s`` (or at the conversation deadline, whichever is first) as a timeout,
and the next call must go on. Waits for the call limiter end at the deadline too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from evalbench.agents import AgentContext, build_agent
from evalbench.agents.config import AdkAgentConfig, GeminiAgentConfig, OpenAICompatAgentConfig
from evalbench.cli import main
from evalbench.clients.limits import CallLimiter
from evalbench.config import LlmVUserConfig
from evalbench.core import deadline
from evalbench.core.conversation import Outcome, ReplyKind, after_prompt, after_vuser
from evalbench.run.stages import new_conversation
from evalbench.scoring.answer_rater import AnswerRater
from evalbench.scoring.llmrater import PLACEHOLDERS, LlmRater
from evalbench.vuser import build_vuser
from tests.attack_agent import AttackAgent, completion, item, write_run
from tests.fake_llm_server import FakeLLMServer, Received, Scripted, chat_completion
from tests.helpers import make_item

DRIP_S = 0.05  # between two bytes: every read is quick, the whole reply takes tens of seconds
BUDGET_S = 1.0
BOUND_S = 6 * BUDGET_S  # "it was stopped", with room for a loaded machine
KEY_ENV = "TEST_BUDGET_GEMINI_KEY"
NO_RETRY = {"max_retries": 0, "backoff_s": 0.01, "max_backoff_s": 0.05}
SQL = "SELECT 1"


def gemini_text(text: str) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}]}


def gemini_sql() -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "run_sql", "args": {"sql": SQL}}}]},
                            "finishReason": "STOP", "index": 0}]}


ADK_EVENTS = [{"author": "agent", "content": {"role": "model", "parts": [{"text": f"```sql\n{SQL}\n```"}]}}]


class FirstCallDrips:
    """The fake server's answers: the first model call (``is_call``) is sent a byte at a time,
    later ones at once; anything else (ADK session creation and deletion) gets ``{"id": ...}``."""

    def __init__(self, is_call: Callable[[Received], bool], body: Callable[[Received], Any]) -> None:
        self.is_call, self.body, self.calls = is_call, body, 0

    def __call__(self, request: Received) -> Scripted:
        if not self.is_call(request):
            return Scripted(200, {"id": f"session-{time.monotonic_ns()}"})
        self.calls += 1
        return Scripted(200, self.body(request), drip_s=DRIP_S if self.calls == 1 else 0.0)


@dataclass
class Adapter:
    """How to build one adapter against ``url`` with a budget of ``budget_s``, and to make one
    call: the call returns (timed out, went on normally)."""

    is_call: Callable[[Received], bool]
    body: Callable[[Received], Any]
    build: Callable[[str, float], Any]
    call: Callable[[Any], tuple[bool, bool]]


def _agent_call(agent: Any) -> tuple[bool, bool]:
    session = agent.open_session(new_conversation(make_item(), seed=1, max_turns=5, patience=1, timeout_s=600))
    try:
        reply = session.send("Q")
    finally:
        session.close()
    return reply.error_kind == "timeout", reply.kind is ReplyKind.SQL and reply.sql == SQL


def _vuser_call(vuser: Any) -> tuple[bool, bool]:
    conv = new_conversation(make_item(), seed=1, max_turns=5, patience=1, timeout_s=600)
    after_prompt(conv, "Q", "user")
    reply = vuser.answer(conv, "Which stores?")
    after_vuser(conv, reply)  # a virtual user that failed ends the phase as vuser_error
    timed_out = conv.phase.outcome is Outcome.VUSER_ERROR and "no complete answer" in (reply.error or "")
    return timed_out, reply.error is None and reply.action is not None and reply.action.kind == "unanswerable"


def _judge_call(rater: LlmRater) -> tuple[bool, bool]:
    conv = new_conversation(make_item(), seed=1, max_turns=5, patience=1, timeout_s=600)
    score = rater.judge(conv, dict.fromkeys((*PLACEHOLDERS, "answer"), "x"))
    return "judge_error" in score.flags and "no complete answer" in (score.detail or ""), score.passed is True


def _gemini_options(url: str, budget_s: float) -> dict[str, Any]:
    return {"model": "g", "api_key_env": KEY_ENV, "base_url": url, "timeout_s": budget_s}


def _is_model_call(request: Received) -> bool:
    return request.method == "POST" and request.path.endswith(("/chat/completions", ":generateContent", "/run", "/run_sse"))


CONTEXT = AgentContext(seed=1, schema=lambda dialect, database: "CREATE TABLE t (x int);")
VERDICT = gemini_text(json.dumps({"verdict": "correct", "reason": "same rows"}))
ADAPTERS = {
    "openai_compat": Adapter(_is_model_call, lambda r: chat_completion(calls=[("run_sql", {"sql": SQL})]),
                             lambda url, s: build_agent(OpenAICompatAgentConfig(
                                 agent="openai_compat", base_url=url, model="m", timeout_s=s, retry=NO_RETRY), CONTEXT),
                             _agent_call),
    "gemini": Adapter(_is_model_call, lambda r: gemini_sql(),
                      lambda url, s: build_agent(GeminiAgentConfig(agent="gemini", retry=NO_RETRY, **_gemini_options(url, s)),
                                                 CONTEXT), _agent_call),
    "adk_run": Adapter(_is_model_call, lambda r: ADK_EVENTS,
                       lambda url, s: build_agent(AdkAgentConfig(agent="adk", adkapi_server_url=url, agent_id="app",
                                                                 read_timeout_s=s, retry=NO_RETRY), CONTEXT),
                       _agent_call),
    "adk_run_sse": Adapter(_is_model_call, lambda r: "".join(f"data: {json.dumps(e)}\n\n" for e in ADK_EVENTS),
                           lambda url, s: build_agent(AdkAgentConfig(agent="adk", adkapi_server_url=url, agent_id="app",
                                                                     endpoint="run_sse", read_timeout_s=s, retry=NO_RETRY),
                                                      CONTEXT), _agent_call),
    "llm_vuser": Adapter(_is_model_call, lambda r: gemini_text("unanswerable()"),
                         lambda url, s: build_vuser(LlmVUserConfig(vuser="llm", retry=NO_RETRY, **_gemini_options(url, s)),
                                                    1, {}), _vuser_call),
    "llmrater": Adapter(_is_model_call, lambda r: VERDICT,
                        lambda url, s: LlmRater(_gemini_options(url, s) | {"max_retries": 0}), _judge_call),
    "answer_rater": Adapter(_is_model_call, lambda r: VERDICT,
                            lambda url, s: AnswerRater(_gemini_options(url, s) | {"max_retries": 0}), _judge_call),
}


@pytest.fixture(autouse=True)
def gemini_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "budget-key")
    for name in ("GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[tuple[Adapter, FakeLLMServer]]:
    adapter = ADAPTERS[request.param]
    with FakeLLMServer(responder=FirstCallDrips(adapter.is_call, adapter.body)) as server:
        yield adapter, server


def _timed(adapter: Adapter, client: Any, conversation_s: float) -> tuple[bool, bool, float]:
    started = time.monotonic()
    with deadline.within(time.monotonic() + conversation_s):
        timed_out, ok = adapter.call(client)
    return timed_out, ok, time.monotonic() - started


@pytest.mark.parametrize("served", list(ADAPTERS), indirect=True)
@pytest.mark.parametrize("limit", ["timeout_s", "conversation deadline"])
def test_a_reply_sent_a_byte_at_a_time_ends_at_the_budget_and_the_next_call_goes_on(served, limit):
    adapter, server = served
    # one budget is short, the other long: whichever is short must stop the reply
    budget_s, conversation_s = (BUDGET_S, 600.0) if limit == "timeout_s" else (600.0, BUDGET_S)
    client = adapter.build(server.url, budget_s)
    try:
        timed_out, _, elapsed = _timed(adapter, client, conversation_s)
        assert timed_out, "the dripped reply must be a timeout"
        assert elapsed < BOUND_S, f"{limit} was {BUDGET_S} s, the call took {elapsed:.1f} s"
        _, ok, _ = _timed(adapter, client, 600.0)  # the next conversation
        assert ok, "the call after the timed-out one must go on normally"
    finally:
        client.close()


def test_waits_for_the_call_limiter_end_at_the_deadline():
    # one call a minute: the second conversation's call would wait ~60 s for its token
    with FakeLLMServer(responder=lambda r: Scripted(200, chat_completion(calls=[("run_sql", {"sql": SQL})]))) as server:
        agent = build_agent(OpenAICompatAgentConfig(agent="openai_compat", base_url=server.url, model="m",
                                                    execs_per_minute=1, retry=NO_RETRY), CONTEXT)
        try:
            assert _timed(ADAPTERS["openai_compat"], agent, 600.0)[1]
            timed_out, _, elapsed = _timed(ADAPTERS["openai_compat"], agent, BUDGET_S)
        finally:
            agent.close()
    assert timed_out and elapsed < BOUND_S, elapsed
    assert len(server.requests) == 1  # the call that could not start in time was never sent


def test_a_wait_for_a_call_slot_ends_at_the_deadline():
    limiter = CallLimiter(max_concurrency=1)
    started = time.monotonic()
    with limiter.slot(), deadline.within(time.monotonic() + 0.5), pytest.raises(deadline.Expired):  # noqa: SIM117
        with limiter.slot():
            pass
    assert time.monotonic() - started < BOUND_S


def test_deleting_an_adk_session_after_the_conversation_is_bounded(monkeypatch):
    # closing runs after the conversation's deadline block: its own short budget bounds it
    import evalbench.agents.adk as adk

    monkeypatch.setattr(adk, "CLOSE_TIMEOUT_S", BUDGET_S)
    deleting = FirstCallDrips(lambda r: r.method == "DELETE", lambda r: {"pad": "x" * 400})  # ~25 s dripped
    with FakeLLMServer(responder=deleting) as server:
        agent = ADAPTERS["adk_run"].build(server.url, 600.0)
        session = agent.open_session(new_conversation(make_item(), seed=1, max_turns=5, patience=1, timeout_s=600))
        started = time.monotonic()
        session.close()
        elapsed = time.monotonic() - started
    assert deleting.calls == 1 and elapsed < BOUND_S, elapsed


# --------------------------------------------------------------------------- through `evalbench run`


def test_a_run_whose_agent_drips_one_reply_times_that_conversation_out_and_goes_on(tmp_path: Path):
    replies: dict[str, Any] = {"slow": Scripted(200, completion(SQL), drip_s=DRIP_S), "next": SQL, "last": SQL}
    items = [item(name, SQL) for name in replies]
    with AttackAgent(replies) as agent:
        config = write_run(tmp_path, items, agent)
        settings = json.loads(config.read_text())
        settings["model_config"]["timeout_s"] = BUDGET_S  # the conversation deadline (120 s) is far
        config.write_text(json.dumps(settings))
        started = time.monotonic()
        code = main(["run", "--config", str(config), "--output-dir", str(tmp_path), "--run-id", "drip", "--no-progress"])
        elapsed = time.monotonic() - started
    assert code in (0, 1)
    records = {r["item_id"]: r for r in map(json.loads, (tmp_path / "drip" / "conversations.jsonl").read_text().splitlines())}
    assert records["slow"]["outcome"] == Outcome.TIMEOUT.value, records["slow"]
    assert records["slow"]["elapsed_s"] < BOUND_S, records["slow"]["elapsed_s"]
    assert [records[name]["outcome"] for name in ("next", "last")] == [Outcome.SCORED.value] * 2
    assert elapsed < 60, f"the run took {elapsed:.0f} s"  # not the ~25 s of the dripped reply times anything


def test_a_genai_client_without_our_transport_is_still_given_up_at_the_budget():
    # as with Vertex AI, where the SDK keeps its own transport (google-auth's session): only the
    # SDK's per-read timeout (30 s here) applies inside, and the call is abandoned at timeout_s
    from google import genai
    from google.genai import types

    from evalbench.agents.chat import CallFailed
    from evalbench.clients.genai import generate

    with FakeLLMServer(responder=FirstCallDrips(_is_model_call, lambda r: gemini_text("late"))) as server:
        client = genai.Client(api_key="k", http_options=types.HttpOptions(
            base_url=server.url, timeout=30_000, retry_options=types.HttpRetryOptions(attempts=1)))
        started = time.monotonic()
        with pytest.raises(CallFailed) as failed:
            generate(client, "g", "Q", None, endpoint=server.url, timeout_s=BUDGET_S)
        elapsed = time.monotonic() - started
        assert failed.value.kind == "timeout" and elapsed < BOUND_S, (failed.value, elapsed)
        assert generate(client, "g", "Q", None, endpoint=server.url, timeout_s=BUDGET_S).text == "late"
        client.close()
