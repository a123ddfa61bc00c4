"""One conversation's door into the harness: its token, its tools, and the rules of who may call.

A call is run only while the conversation lasts and while the harness waits for the agent's
reply (a turn); one call at a time per conversation. Every call, run or refused, is recorded as a
:class:`~evalbench.core.conversation.ToolCall` and ends up on the turn's reply, so the journal,
``explain`` and the report show it as they show the built-in agents' tool calls.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping

from evalbench.agents.tools import clip
from evalbench.core import deadline
from evalbench.core.conversation import Conversation, ToolCall
from evalbench.serve.toolbox import ServedToolbox

log = logging.getLogger(__name__)

ASK_USER = "ask_user"
MAX_RECORDED = 1000  # calls of one turn kept (run or refused): an agent looping on a tool cannot fill memory
MAX_QUESTION_CHARS = 8192
SUBMIT_SQL = "submit_sql"  # BIRD-Interact's /submit (evalbench.serve.user_simulator)
# (question, the calls of the turn so far) -> the virtual user's answer, or None when refused
Ask = Callable[[str, list[ToolCall]], "str | None"]


class ConversationPort:
    def __init__(self, token: str, conv: Conversation, toolbox: ServedToolbox, ask: Ask, tools: frozenset[str]) -> None:
        self.token, self.conv, self.toolbox, self.ask, self.tools = token, conv, toolbox, ask, tools
        self._lock = threading.Lock()
        self._open = True
        self._in_turn = False
        self._calls: list[ToolCall] = []  # this turn's calls not yet on a reply
        self._turn_calls: list[ToolCall] = []  # all of this turn's calls (MAX_RECORDED at most)
        self._ids = itertools.count(1)

    @property
    def database(self) -> str:
        return self.conv.item.database

    def begin_turn(self) -> None:
        with self._lock:
            self._in_turn, self._calls, self._turn_calls = True, [], []
            self.toolbox.start_turn()

    def end_turn(self) -> tuple[list[ToolCall], list[ToolCall]]:
        """The calls of the turn not yet on a reply, and all the turn's calls (those put on a
        question's turn included); waits for a call still running."""
        with self._lock:
            self._in_turn = False
            calls, self._calls = self._calls, []
            return calls, list(self._turn_calls)

    def close(self) -> None:
        with self._lock:
            self._open = False

    def call(self, name: str, args: Mapping[str, object]) -> dict[str, object]:
        """Run tool ``name``, or refuse it; the response the agent gets (an ``error`` key: not run)."""
        call = ToolCall(name, dict(args), id=f"served-{next(self._ids)}")
        started = time.perf_counter()
        with self._lock:
            if len(self._turn_calls) >= MAX_RECORDED:
                return {"error": f"more than {MAX_RECORDED} calls in one turn: not run, not recorded; answer now"}
            if self._in_turn:
                self._turn_calls.append(call)
            refusal = self._refusal(name, args)
            if refusal is not None:
                refused: dict[str, object] = {"error": refusal}
                call.response, call.outcome = refused, "refused"
                call.latency_s = time.perf_counter() - started
                if self._in_turn:
                    self._calls.append(call)
                else:
                    log.info("item %s: served %s call refused: %s", self.conv.item.id, clip(name), refusal)
                return refused
            call.args.pop("database", None)
            with deadline.within(self.conv.deadline):
                if name == ASK_USER:
                    return self._ask(call, started)
                response = self.toolbox.submit(call) if name == SUBMIT_SQL else self.toolbox.run(call)
            self._calls.append(call)
            return response

    def _refusal(self, name: str, args: Mapping[str, object]) -> str | None:
        if not self._open:
            return "this conversation has ended: its tools are closed"
        if not self._in_turn:
            return "no turn in progress: tools answer only while the harness waits for your reply"
        if name not in self.tools:
            return f"unknown tool {clip(name)!r}"
        database = args.get("database")
        if database is not None and database != self.database:
            return f"this conversation's database is {self.database!r}: no other database is reachable"
        return None

    def _ask(self, call: ToolCall, started: float) -> dict[str, object]:
        """The virtual user's answer: the question becomes a clarification turn of its own, holding
        the calls the turn made so far (the answer is the next turn's user message)."""
        question = call.args.get("question")
        if not isinstance(question, str) or not question.strip():
            call.response, call.outcome = {"error": "no question given"}, "error"
        elif len(question) > MAX_QUESTION_CHARS:
            call.response, call.outcome = {"error": f"the question is over {MAX_QUESTION_CHARS} characters"}, "error"
        else:
            call.response, call.outcome = {"asked": True}, "ok"
            earlier, self._calls = self._calls, []
            call.result_bytes = 0
            answer = self.ask(question, [*earlier, call])
            if answer is None:
                call.response, call.outcome = {"error": "no more questions can be asked: answer now"}, "budget"
                self._calls = earlier
            else:
                call.response = {"answer": answer}
                call.result_bytes = len(answer.encode("utf-8", "surrogatepass"))
        call.latency_s = time.perf_counter() - started
        if call.outcome != "ok":
            self._calls.append(call)
        return dict(call.response)
