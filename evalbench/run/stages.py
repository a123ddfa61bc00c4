"""The work of each stage: the I/O around the pure transitions of :mod:`evalbench.core.conversation`.

:class:`StageWork` holds the parts one conversation needs (agent, virtual user, sandbox, scorers)
and runs one stage at a time. The pooled scheduler and the sequential :func:`run_conversation`
drive the very same code.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from evalbench.agents import Agent
from evalbench.backends.base import Sandbox
from evalbench.core import deadline
from evalbench.core.conversation import (
    AgentReply,
    Conversation,
    Outcome,
    Phase,
    ReplyKind,
    Stage,
    VUserReply,
    after_execute,
    after_generate,
    after_golden,
    after_prompt,
    after_score,
    after_vuser,
    conversation_seed,
    fail,
    next_user_message,
    start,
)
from evalbench.dataset import Item
from evalbench.run.plan import ConversationSpec
from evalbench.run.served_turns import ServedTurns
from evalbench.scoring import Score, Scorer
from evalbench.scoring.primary import PrimaryPolicy
from evalbench.scoring.semantics import ResultRules, execute_generated, execute_golden, golden_problem
from evalbench.scoring.validity import GoldenCheck, first_error
from evalbench.vuser import VirtualUser

if TYPE_CHECKING:
    from evalbench.serve.server import Served

log = logging.getLogger(__name__)

# Who is to blame when a stage raises unexpectedly.
_STAGE_FAILURE = {
    Stage.PROMPT: Outcome.AGENT_ERROR,
    Stage.GENERATE: Outcome.AGENT_ERROR,
    Stage.VUSER: Outcome.VUSER_ERROR,
    Stage.EXECUTE: Outcome.DB_ERROR,
    Stage.SCORE: Outcome.SCORED,
}


@dataclass
class Parts:
    agent: Agent
    vuser: VirtualUser
    sandbox: Sandbox
    scorers: list[Scorer]
    rules: ResultRules = field(default_factory=ResultRules)
    primary: PrimaryPolicy = field(default_factory=PrimaryPolicy)
    check: GoldenCheck | None = None  # the validity checks (None: those of ``rules``, without test cases)
    served: Served | None = None  # the run's server for the agent under test (``serve:``)

    def __post_init__(self) -> None:
        if self.check is None:
            self.check = GoldenCheck(self.rules, None)


def new_conversation(item: Item, *, seed: int, max_turns: int, patience: int, timeout_s: float,
                     debug_attempts: int = 0, trial: int = 1, follow_up: bool = True) -> Conversation:
    conv = Conversation(item=item, seed=seed, max_turns=max_turns, patience=patience,
                        deadline=time.monotonic() + timeout_s, debug_attempts=debug_attempts, timeout_s=timeout_s,
                        trial=trial, follow_up=follow_up)
    start(conv)
    return conv


def planned_conversation(item: Item, spec: ConversationSpec, trial: int = 1) -> Conversation:
    """Trial ``trial`` of ``item`` in a run: its seed derives from the run's, the item and the trial,
    and its deadline runs from now."""
    return new_conversation(item, seed=conversation_seed(spec.seed, item.id, trial=trial), max_turns=spec.max_turns,
                            patience=spec.patience, timeout_s=spec.timeout_s, debug_attempts=spec.debug_attempts,
                            trial=trial, follow_up=spec.follow_up)


class StageWork:
    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.served = (ServedTurns(parts.served, parts.sandbox, parts.rules.preprocess_errors, self._vuser)
                       if parts.served is not None else None)

    def run(self, stage: Stage, conv: Conversation) -> Stage:
        """Do ``stage`` for ``conv`` and return the next stage. Never raises."""
        try:
            if stage is Stage.PROMPT:
                text, role = next_user_message(conv)
                return after_prompt(conv, text, role)
            if stage is Stage.GENERATE:
                with deadline.within(conv.deadline):  # every wait on the agent's behalf ends by it
                    reply = self._generate(conv)
                if conv.stage is not Stage.GENERATE:  # a question asked through a tool ended the phase
                    conv.last_turn.reply.tool_calls += reply.tool_calls  # type: ignore[union-attr]  # the question's turn has its reply
                    return conv.stage
                return after_generate(conv, reply)
            if stage is Stage.VUSER:
                with deadline.within(conv.deadline):
                    answer = self._vuser(conv)
                return after_vuser(conv, answer)
            if stage is Stage.EXECUTE:
                if not conv.phase.golden_ready:  # the harness's work: only the statement timeout bounds it
                    return after_golden(conv, self._execute_golden(conv))
                with deadline.within(conv.deadline):
                    self._execute(conv)
                return after_execute(conv)
            if stage is Stage.SCORE:
                with deadline.within(conv.deadline):
                    self._score(conv)
                nxt = after_score(conv)
                if nxt is Stage.COMPLETE:
                    self.finish(conv)
                return nxt
            raise ValueError(f"no work for stage {stage}")
        except Exception as exc:  # a bug or an unexpected failure: recorded, never fatal to the run
            log.warning("item %s: %s stage failed", conv.item.id, stage.value, exc_info=True)
            nxt = fail(conv, _STAGE_FAILURE.get(stage, Outcome.AGENT_ERROR), f"{stage.value} failed: {type(exc).__name__}: {exc}")
            if nxt is Stage.COMPLETE:
                self.finish(conv)
            return nxt

    def _generate(self, conv: Conversation) -> AgentReply:
        agent = self.parts.agent
        started = time.perf_counter()
        try:
            if conv.session is None:
                if self.served is not None:
                    self.served.open(conv)  # before the session: its state names the conversation's token
                conv.session = agent.open_session(conv)
                conv.sessions_opened += 1
            session, text = conv.session, conv.last_turn.user_text
            reply = self.served.turn(conv, lambda: session.send(text)) if self.served is not None else session.send(text)
        except Exception as exc:  # noqa: BLE001 (any adapter failure is the conversation's agent_error)
            kind = getattr(exc, "kind", None)  # an adapter's own classification (e.g. ADK: no session, "connection")
            reply = AgentReply(ReplyKind.ERROR, error=f"{type(exc).__name__}: {exc}",
                               error_kind=kind if isinstance(kind, str) and kind else "exception")
            reply.latency_s = time.perf_counter() - started
        if not agent.sticky:  # only to demonstrate agents that forget between turns
            self.close_session(conv)
        return reply

    def _vuser(self, conv: Conversation) -> VUserReply:
        reply = conv.last_turn.reply
        question = reply.text if reply is not None else ""
        try:
            return self.parts.vuser.answer(conv, question)
        except Exception as exc:  # noqa: BLE001 (any virtual-user failure is recorded, not raised)
            return VUserReply(action=None, text="", error=f"{type(exc).__name__}: {exc}")

    def _execute_golden(self, conv: Conversation) -> tuple[Outcome, str] | None:
        """Run the phase's golden SQL once (debugging attempts reuse it); why it cannot judge an
        answer, if it cannot (:mod:`evalbench.scoring.validity`, as ``evalbench validate``). At
        the main phase the follow-up is checked too, so that it is listed whether reached or not."""
        phase, sandbox, check = conv.phase, self.parts.sandbox, self.parts.check
        assert check is not None
        execute_golden(sandbox, phase, self.parts.rules)
        problem = golden_problem(phase, self.parts.rules)
        if problem is not None and problem[0] == Outcome.DB_ERROR.value:
            return Outcome.DB_ERROR, problem[1]
        invalid = first_error(check.phase(conv.item, phase, sandbox))
        if invalid is not None:
            conv.invalid_phases[phase.phase.value] = invalid.message
        if phase.phase is Phase.MAIN and conv.follow_up:
            follow_up = check.follow_up_reason(conv.item, sandbox)
            if follow_up is not None:
                conv.invalid_phases["follow_up"] = follow_up.message
        if invalid is None or invalid.judged:  # judged: asked anyway, for BIRD-Interact's official figure
            return None
        return Outcome.INVALID_ITEM, invalid.message

    def _execute(self, conv: Conversation) -> None:
        execute_generated(self.parts.sandbox, conv.phase, self.parts.rules)

    def _score(self, conv: Conversation) -> None:
        phase = conv.phase
        if phase.outcome is Outcome.INVALID_ITEM:
            return  # nothing to judge: the item is reported apart, in no agent denominator
        sandbox = self.parts.sandbox
        if sandbox is not None:
            phase.conninfo, phase.sandbox = sandbox.conninfo, sandbox
        self._run_scorers(conv)  # scorers that write take the sandbox's write lock themselves

    def _run_scorers(self, conv: Conversation) -> None:
        """Pass/fail scorers first, then the primary verdict is chosen, then the metrics (the
        reward reads the verdict)."""
        phase = conv.phase
        scorers = self.parts.scorers
        for scorer in [s for s in scorers if not s.is_metric] + [s for s in scorers if s.is_metric]:
            if scorer.is_metric and phase.primary is None:
                phase.primary = self.parts.primary.choose(phase)
            try:
                phase.scores[scorer.name] = scorer.score(conv, phase)
            except Exception as exc:
                log.warning("item %s: scorer %s failed", conv.item.id, scorer.name, exc_info=True)
                phase.scores[scorer.name] = Score(0.0, False if not scorer.is_metric else None, detail=f"scorer error: {exc}")
        if phase.primary is None:
            phase.primary = self.parts.primary.choose(phase)
        phase.sandbox = None
        # the journal keeps the configured order, whatever order the scorers ran in
        order = {scorer.name: index for index, scorer in enumerate(scorers)}
        phase.scores = dict(sorted(phase.scores.items(), key=lambda kv: order.get(kv[0], len(order))))

    def finish(self, conv: Conversation) -> None:
        """The conversation has ended: its agent session and its port on the run's server close."""
        self.close_session(conv)
        if self.served is not None:
            self.served.close(conv)

    def close_session(self, conv: Conversation) -> None:
        session, conv.session = conv.session, None
        if session is not None:
            try:
                session.close()
            except Exception:
                log.warning("item %s: closing the agent session failed", conv.item.id, exc_info=True)


def run_conversation(item: Item, parts: Parts, *, seed: int = 0, max_turns: int = 10, patience: int = 3,
                     timeout_s: float = 600.0, debug_attempts: int = 0) -> Conversation:
    """Run one conversation to COMPLETE in the calling thread (library use and tests)."""
    conv = new_conversation(item, seed=seed, max_turns=max_turns, patience=patience, timeout_s=timeout_s,
                            debug_attempts=debug_attempts)
    work = StageWork(parts)
    conv.admit()
    stage = conv.stage
    while stage is not Stage.COMPLETE:
        stage = work.run(stage, conv)
    return conv
