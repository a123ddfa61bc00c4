"""Conversation, turn and reply types, and the state machine's transitions.

The transitions are pure: they read what a stage produced and decide the next stage, mutating
only the conversation record. All I/O (agent calls, the virtual user, SQL) happens in the
stage work (:mod:`evalbench.run.stages`), so the machine can be tested without any of it.

    EXECUTE (golden) -+- usable -> PROMPT -> GENERATE -+- clarification -> VUSER -> PROMPT   (clarification budget)
                      |                                +- sql / answer  -> EXECUTE -> SCORE -+-> EXECUTE (follow-up golden)
                      +- invalid_item / db_error -> SCORE               +- error -> SCORE    +-> COMPLETE

Each phase runs its golden SQL first: a golden statement that fails (a dataset bug) ends the
conversation as ``invalid_item`` before the agent is called.
"""

from __future__ import annotations

import math
import time
import zlib
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from evalbench.core.items import Conditions, Item
from evalbench.core.usage import CallUsage

if TYPE_CHECKING:
    from evalbench.core.execution_result import ExecutionResult
    from evalbench.core.scores import Score


class AgentSession(Protocol):
    """The agent-side thread of one conversation (sticky: reused for every turn of it).

    Defined here, beside the conversation that holds it, so the core needs no agent module;
    :mod:`evalbench.agents` re-exports it with the agent protocol."""

    def send(self, text: str) -> AgentReply: ...

    def close(self) -> None: ...


class Stage(str, Enum):
    PROMPT = "prompt"
    GENERATE = "generate"
    VUSER = "vuser"
    EXECUTE = "execute"
    SCORE = "score"
    COMPLETE = "complete"


class ReplyKind(str, Enum):
    SQL = "sql"
    CLARIFICATION = "clarification"
    ANSWER = "answer"  # natural language, no SQL
    ERROR = "error"


class Outcome(str, Enum):
    """Why a conversation ended. Closed: every conversation ends with exactly one of these."""

    SCORED = "scored"
    MAX_TURNS = "max_turns"
    AGENT_ERROR = "agent_error"
    VUSER_ERROR = "vuser_error"
    DB_ERROR = "db_error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    INVALID_ITEM = "invalid_item"  # the item's golden SQL cannot judge an answer: a dataset bug, not the agent's


class Phase(str, Enum):
    MAIN = "main"
    FOLLOW_UP = "follow_up"


# More tokens than any one reply: a count beyond it is not a count.
MAX_TOKENS = 10**12


def token_count(value: object) -> int:
    """A token count the agent's server reported, as a count the metrics may add up: a whole
    number from 0 to MAX_TOKENS (a number, or a string of digits), else 0. A server under test
    must not lower its own cost with negative counts, nor turn a usable reply into an error (or
    the totals into NaN) with infinite, fractional, textual or structured ones."""
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 13:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return 0
    return int(value) if 0 <= value <= MAX_TOKENS else 0


@dataclass
class TokenUsage:
    prompt: int = 0
    completion: int = 0
    total: int = 0

    @classmethod
    def reported(cls, prompt: object = 0, completion: object = 0, total: object = 0) -> TokenUsage:
        """The usage a reply reported (any JSON values), each count as :func:`token_count` reads it."""
        return cls(token_count(prompt), token_count(completion), token_count(total))


@dataclass
class ToolCall:
    name: str
    args: dict[str, Any] = field(default_factory=dict)
    response: Any = None
    id: str | None = None
    # set when the harness ran the call (a discovery tool): ok | error | budget (refused: over the budget)
    outcome: str | None = None
    latency_s: float | None = None
    result_bytes: int | None = None


@dataclass
class AgentReply:
    """What the agent answered to one user message, classified as exactly one kind."""

    kind: ReplyKind
    text: str = ""  # the final text, or the clarification question
    sql: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: TokenUsage = field(default_factory=TokenUsage)
    latency_s: float = 0.0
    error: str | None = None
    error_kind: str | None = None  # "timeout" ends the conversation as TIMEOUT, anything else as AGENT_ERROR
    raw: object = None  # raw events, truncated by the adapter


@dataclass
class VUserAction:
    """BIRD-Interact's encode step: which ambiguity the agent's question is about."""

    kind: str  # "labeled" | "unlabeled" | "unanswerable"
    terms: list[str] = field(default_factory=list)
    segment: str | None = None

    def __str__(self) -> str:
        if self.kind == "labeled":
            return "labeled(" + ", ".join(f'"{t}"' for t in self.terms) + ")"
        if self.kind == "unlabeled":
            return f'unlabeled("{self.segment}")'
        return "unanswerable()"


@dataclass
class VUserReply:
    action: VUserAction | None
    text: str
    error: str | None = None
    audit: dict[str, Any] = field(default_factory=dict)
    usage: CallUsage | None = None  # the model calls made for this reply (None: a virtual user that calls no model)


@dataclass
class Turn:
    """One user message and the agent's reply (and, for a clarification, the vuser's answer)."""

    index: int
    phase: Phase
    user_text: str
    user_role: str  # "user" (opening or follow-up question) or "vuser" (answer to a clarification)
    reply: AgentReply | None = None
    vuser: VUserReply | None = None
    started: float = field(default_factory=time.time)


@dataclass
class PhaseRecord:
    """One phase of a conversation: its question, the final SQL, the results and the scores."""

    phase: Phase
    question: str
    golden_sql: list[str]
    conditions: Conditions
    conditions_explicit: bool
    is_query: bool
    clarification_budget: int
    preprocess: list[str] = field(default_factory=list)  # run before every golden and agent execution
    preprocess_errors: str = "fail"  # "stop": a failing preprocess text ends preprocessing (BIRD-Interact)
    golden_is_script: bool = False  # BIRD-Interact: golden_sql is one script; EvalBench: alternatives
    clarifications: int = 0
    sql: str | None = None
    answer: str | None = None  # the agent's natural-language text in its final reply
    generated: ExecutionResult | None = None  # the agent's SQL as written
    compared: ExecutionResult | None = None  # bird_interact: the agent's SQL after BIRD-Interact's cleaning
    compared_sql: str | None = None
    golden: list[ExecutionResult] = field(default_factory=list)
    golden_run_sql: list[list[str]] = field(default_factory=list)  # the SQL run for each golden result
    golden_ready: bool = False
    outcome: Outcome | None = None
    error: str | None = None
    scores: dict[str, Score] = field(default_factory=dict)
    primary: str | None = None  # the scorer whose verdict is the phase's (set by the score stage)
    debug_used: int = 0  # debugging attempts taken (BIRD-Interact: one more try after a wrong answer)
    attempts: list[dict[str, Any]] = field(default_factory=list)  # the wrong answers before the last
    pending_message: str | None = None  # what the user says next, before anything else
    conninfo: str | None = None  # the sandbox's connection, for scorers that run SQL themselves
    sandbox: Any = None  # the sandbox itself (state_match), never journaled

    @property
    def verdict(self) -> Score | None:
        """The primary scorer's score, when one applies."""
        return self.scores.get(self.primary) if self.primary is not None else None

    @property
    def failed_answer(self) -> bool:
        """The phase was answered and its primary verdict is a failure."""
        verdict = self.verdict
        return verdict is not None and verdict.passed is False

    @property
    def passed(self) -> bool:
        """Whether the phase succeeded on its primary scorer."""
        verdict = self.verdict
        return bool(verdict is not None and verdict.passed)


@dataclass
class Conversation:
    """The dialogue for one item: the durable unit, journaled once when COMPLETE."""

    item: Item
    seed: int
    max_turns: int
    patience: int
    deadline: float  # monotonic time after which the conversation ends as TIMEOUT
    debug_attempts: int = 0
    timeout_s: float = math.inf  # the deadline's distance from admission (see admit)
    trial: int = 1  # which of the item's repeated trials (``trials: k``), 1-based
    follow_up: bool = True  # False: no follow-up phase (``follow_up: false``, EvalBench's data-agent flow)
    stage: Stage = Stage.PROMPT
    turns: list[Turn] = field(default_factory=list)
    phases: list[PhaseRecord] = field(default_factory=list)
    outcome: Outcome | None = None
    error: str | None = None
    session: AgentSession | None = None
    sessions_opened: int = 0
    started: float = field(default_factory=time.monotonic)
    elapsed_s: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)
    invalid_phases: dict[str, str] = field(default_factory=dict)  # phase -> why its golden work cannot judge (reached or not)
    # what the harness serves this conversation's agent (evalbench.serve: token, endpoints, lent
    # login), for its session state; secrets valid while the conversation lasts, never journaled
    served: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def phase(self) -> PhaseRecord:
        return self.phases[-1]

    def admit(self) -> None:
        """The conversation starts now: its clock and deadline start at admission, not while
        it waited in the queue for a slot."""
        self.started = time.monotonic()
        self.deadline = self.started + self.timeout_s

    @property
    def last_turn(self) -> Turn:
        return self.turns[-1]


def conversation_seed(run_seed: int, item_id: str, salt: str = "", trial: int = 1) -> int:
    """A stable per-conversation seed derived from the run seed; the global RNG is never seeded.
    Trial 1 has the seed of a run without trials; each later trial its own."""
    if trial != 1:
        salt = f"{salt}:trial{trial}"
    return zlib.crc32(f"{run_seed}:{item_id}:{salt}".encode())


# --------------------------------------------------------------------------- transitions


def main_phase(item: Item, patience: int) -> PhaseRecord:
    """The main phase of ``item``, with its clarification budget (annotated ambiguities + patience)."""
    return PhaseRecord(
        phase=Phase.MAIN,
        question=item.opening_question,
        golden_sql=item.golden_sql,
        conditions=item.conditions,
        conditions_explicit=item.conditions_explicit,
        is_query=item.is_query,
        clarification_budget=item.ambiguities_to_ask + patience,
        preprocess=list(item.preprocess_sql),
        golden_is_script=item.golden_is_script,
    )


def follow_up_phase(item: Item, patience: int) -> PhaseRecord | None:
    """The follow-up phase of ``item`` (None when it has none)."""
    follow_up = item.follow_up
    if follow_up is None:
        return None
    return PhaseRecord(
        phase=Phase.FOLLOW_UP,
        question=follow_up.question,
        golden_sql=follow_up.golden_sql,
        conditions=follow_up.conditions,
        conditions_explicit=True,
        is_query=follow_up.category == "Query",
        clarification_budget=patience,
        preprocess=follow_up_preprocess(item),
        golden_is_script=item.golden_is_script,
    )


def start(conv: Conversation) -> Stage:
    """Open the main phase; its golden SQL runs first."""
    conv.phases.append(main_phase(conv.item, conv.patience))
    conv.stage = Stage.EXECUTE
    return conv.stage


def follow_up_preprocess(item: Item) -> list[str]:
    """What runs before the follow-up's SQL: the item's ``preprocess_sql``, then — for a
    BIRD-Interact management task — its golden SQL, then its ``clean_up_sqls``, as
    BIRD-Interact's ``batch_eval`` prepares a follow-up (``_fu``) evaluation: the follow-up
    builds on the state the main task leaves."""
    if not item.golden_is_script:
        return list(item.preprocess_sql)
    main_task = [] if item.is_query else list(item.golden_sql)  # a query changes nothing to replay
    return [*item.preprocess_sql, *main_task, *item.clean_up_sqls]


MAX_SQL_BYTES = 64 * 1024  # an agent's SQL (UTF-8 bytes); longer is an agent failure, never run or parsed
DEBUG_MESSAGE = "That is not the result I expected. Please check your SQL and try again."


def next_user_message(conv: Conversation) -> tuple[str, str]:
    """(text, role) of the next message to the agent: a pending message (after a wrong answer),
    the vuser's answer to a clarification, or the phase's question."""
    phase = conv.phase
    if phase.pending_message is not None:
        text, phase.pending_message = phase.pending_message, None
        return text, "user"
    if conv.turns and conv.last_turn.phase == conv.phase.phase and conv.last_turn.vuser is not None:
        return conv.last_turn.vuser.text, "vuser"
    return conv.phase.question, "user"


def after_prompt(conv: Conversation, text: str, role: str) -> Stage:
    conv.turns.append(Turn(index=len(conv.turns), phase=conv.phase.phase, user_text=text, user_role=role))
    return _goto(conv, Stage.GENERATE)


def after_generate(conv: Conversation, reply: AgentReply) -> Stage:
    conv.last_turn.reply = reply
    phase = conv.phase
    if reply.kind is ReplyKind.ERROR:
        outcome = Outcome.TIMEOUT if reply.error_kind == "timeout" else Outcome.AGENT_ERROR
        return _end_phase(conv, outcome, reply.error or "agent error")
    if reply.kind is ReplyKind.CLARIFICATION:
        phase.clarifications += 1
        if phase.clarifications > phase.clarification_budget:
            return _end_phase(conv, Outcome.MAX_TURNS, f"clarification budget of {phase.clarification_budget} exceeded")
        if len(conv.turns) >= conv.max_turns:
            return _end_phase(conv, Outcome.MAX_TURNS, f"max_turns ({conv.max_turns}) reached")
        return _goto(conv, Stage.VUSER)
    size = len((reply.sql or "").encode("utf-8", "surrogatepass")) if reply.kind is ReplyKind.SQL else 0
    if size > MAX_SQL_BYTES:  # an agent failure, before any parser spends seconds on it
        return _end_phase(conv, Outcome.AGENT_ERROR, f"the SQL is {size} bytes, over the limit of {MAX_SQL_BYTES} bytes")
    phase.sql = reply.sql if reply.kind is ReplyKind.SQL else None
    phase.answer = reply.text.strip() or None if reply.kind in (ReplyKind.SQL, ReplyKind.ANSWER) else None
    return _goto(conv, Stage.EXECUTE)


def after_golden(conv: Conversation, problem: tuple[Outcome, str] | None) -> Stage:
    """The phase's golden SQL has run: ask the agent, or end the phase when the golden results
    cannot judge an answer (``invalid_item``: the dataset's fault; ``db_error``: the database's)."""
    phase = conv.phase
    phase.golden_ready = True
    if problem is not None:
        return _end_phase(conv, problem[0], problem[1])
    return _goto(conv, Stage.PROMPT)


def after_vuser(conv: Conversation, reply: VUserReply) -> Stage:
    conv.last_turn.vuser = reply
    if reply.error is not None:
        return _end_phase(conv, Outcome.VUSER_ERROR, reply.error)
    return _goto(conv, Stage.PROMPT)


def after_execute(conv: Conversation) -> Stage:
    """A lost connection is the harness's problem, not the agent's."""
    phase = conv.phase
    generated = phase.generated
    if generated is not None and generated.error_kind in ("connection", "preprocess"):
        return _end_phase(conv, Outcome.DB_ERROR, generated.error)
    return _goto(conv, Stage.SCORE)


def _judge_usage(phase: PhaseRecord) -> dict[str, object]:
    """The judges' usage of an answer about to be replaced by a debugging attempt (its calls were
    made: the journal's ``usage`` counts them)."""
    usage = {name: score.usage for name, score in phase.scores.items() if score.usage is not None}
    return {"usage": usage} if usage else {}


def after_score(conv: Conversation) -> Stage:
    phase = conv.phase
    if phase.outcome is None and phase.failed_answer and phase.debug_used < conv.debug_attempts:
        # BIRD-Interact's debugging: the user says the answer is wrong; one more try, same phase
        phase.attempts.append({"sql": phase.sql, "answer": phase.answer,
                               "scores": {n: s.passed for n, s in phase.scores.items()}}
                              | _judge_usage(phase))
        phase.debug_used += 1
        phase.sql, phase.answer, phase.generated, phase.scores, phase.primary = None, None, None, {}, None
        phase.compared, phase.compared_sql = None, None
        phase.pending_message = DEBUG_MESSAGE
        if len(conv.turns) >= conv.max_turns:
            return _end_phase(conv, Outcome.MAX_TURNS, f"max_turns ({conv.max_turns}) reached before debugging")
        return _goto(conv, Stage.PROMPT)
    if phase.outcome is None:
        phase.outcome = Outcome.SCORED
    follow_up = follow_up_phase(conv.item, conv.patience) if conv.follow_up else None
    if phase.phase is Phase.MAIN and phase.outcome is Outcome.SCORED and phase.passed and follow_up is not None:
        conv.phases.append(follow_up)
        if len(conv.turns) >= conv.max_turns:
            return _end_phase(conv, Outcome.MAX_TURNS, f"max_turns ({conv.max_turns}) reached before the follow-up")
        return _goto(conv, Stage.EXECUTE)
    # The conversation's outcome is the first phase outcome that is not SCORED (a follow-up whose
    # golden SQL is broken is invalid alone: the main phase's verdict stands).
    outcome = next((p.outcome for p in conv.phases if p.outcome is not Outcome.SCORED
                    and not (p.phase is Phase.FOLLOW_UP and p.outcome is Outcome.INVALID_ITEM)), Outcome.SCORED)
    error = next((p.error for p in conv.phases if p.error), None)
    return _finish(conv, outcome or Outcome.SCORED, error)


def fail(conv: Conversation, outcome: Outcome, error: str) -> Stage:
    """An unexpected failure inside a stage: end the current phase; it is still scored."""
    if conv.stage is Stage.SCORE or not conv.phases:
        return _finish(conv, outcome, error)
    return _end_phase(conv, outcome, error)


def _end_phase(conv: Conversation, outcome: Outcome, error: str | None) -> Stage:
    """The phase ends without a usable answer; it is still scored (as a failure)."""
    conv.phase.outcome = outcome
    conv.phase.error = error
    conv.stage = Stage.SCORE
    return conv.stage


def _goto(conv: Conversation, stage: Stage) -> Stage:
    if stage is not Stage.COMPLETE and time.monotonic() > conv.deadline:
        return _end_phase(conv, Outcome.TIMEOUT, "conversation timeout")
    conv.stage = stage
    return stage


def _finish(conv: Conversation, outcome: Outcome, error: str | None) -> Stage:
    if "main" in conv.invalid_phases and outcome not in (Outcome.CANCELLED, Outcome.DB_ERROR):
        # judged anyway (BIRD-Interact's evaluator may pass an answer), but in no rate of ours
        outcome, error = Outcome.INVALID_ITEM, conv.invalid_phases["main"]
    conv.outcome = outcome
    conv.error = error
    conv.elapsed_s = time.monotonic() - conv.started
    conv.stage = Stage.COMPLETE
    return conv.stage
