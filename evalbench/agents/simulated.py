"""Offline agents, registered like real ones, for trying the harness without keys and testing it.

``simulated:oracle`` answers with the golden SQL and, when the item is ambiguous, first asks
about each annotated term. ``simulated:noisy`` behaves like the oracle except that, seeded per
conversation, a phase fails in one of the realistic ways of :data:`FAILURE_KINDS` — or, with
``nl_answer``, answers correctly in words (the golden result, read through the sandbox).
Both peek at the item on purpose: they stand in for an agent, they are not one.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from typing import Any

import sqlglot
from sqlglot import expressions as exp

from evalbench.agents import AGENTS, AgentContext
from evalbench.config_agents import FAILURE_KINDS  # noqa: F401 (re-exported; the config schema validates rates against it)
from evalbench.conversation import AgentReply, Conversation, ReplyKind, conversation_seed

DEFAULT_FAILURE_RATES = {
    "wrong_filter": 0.08,
    "missing_column": 0.06,
    "sql_error": 0.06,
    "empty_result": 0.05,
    "needless_question": 0.05,
    "skip_clarification": 0.05,
    "no_answer": 0.04,
    "agent_error": 0.02,
    "timeout": 0.01,
    "nl_answer": 0.05,
}
MAX_WORDS_CELLS = 12  # a result of more cells is given as SQL, not in words


class SimulatedAgent:
    def __init__(self, config: Any, context: AgentContext) -> None:
        self.name = config.agent
        self.query = context.query
        self.noisy = config.agent == "simulated:noisy"
        self.seed = config.seed if config.seed is not None else context.seed
        self.latency_s = config.latency_s
        self.sticky = config.session == "sticky"
        rates = dict(DEFAULT_FAILURE_RATES) if self.noisy else {}
        if config.failure_rates:
            rates = dict(config.failure_rates)
        self.rates = rates

    def describe(self) -> dict[str, Any]:
        return {"agent": self.name, "seed": self.seed, "latency_s": self.latency_s, "failure_rates": self.rates,
                "session": "sticky" if self.sticky else "per_turn"}

    def open_session(self, conversation: Conversation) -> SimulatedSession:
        return SimulatedSession(self, conversation)

    def close(self) -> None:
        pass

    def probe(self, timeout_s: float) -> str:
        """Preflight: an offline agent has nothing to reach."""
        return "offline (simulated): nothing to reach"


class SimulatedSession:
    def __init__(self, agent: SimulatedAgent, conversation: Conversation) -> None:
        self.agent = agent
        self.item = conversation.item
        self.asked: set[str] = set()
        self.turns = 0
        # each trial of an item draws anew; trial 1 draws as a run without trials does
        trial = getattr(conversation, "trial", 1)
        self.rng = random.Random(conversation_seed(agent.seed, self.item.id, "agent", trial))
        self.failures = {"main": self._draw(), "follow_up": self._draw()}
        self.in_follow_up = False  # once the follow-up is asked, every later turn belongs to it

    def _draw(self) -> str | None:
        roll = self.rng.random()
        for kind, rate in self.agent.rates.items():
            if roll < rate:
                return kind
            roll -= rate
        return None

    def close(self) -> None:
        pass

    def send(self, text: str) -> AgentReply:
        started = time.perf_counter()
        if self.agent.latency_s:
            time.sleep(self.agent.latency_s)
        self.turns += 1
        reply = self._reply(text)
        reply.latency_s = time.perf_counter() - started
        return reply

    def _reply(self, text: str) -> AgentReply:
        follow_up = self.item.follow_up
        if follow_up is not None and text == follow_up.question:
            self.in_follow_up = True
        if follow_up is not None and self.in_follow_up:
            return self._answer(follow_up.golden_sql[0], self.failures["follow_up"], ambiguous_terms=[])
        terms = [a.term for a in self.item.ambiguities if a.kind != "non_critical"]
        return self._answer(self.item.golden_sql[0], self.failures["main"], ambiguous_terms=terms)

    def _answer(self, golden: str, failure: str | None, ambiguous_terms: list[str]) -> AgentReply:
        if failure == "agent_error":
            return AgentReply(ReplyKind.ERROR, error="simulated agent crash (HTTP 500)", error_kind="http_500")
        if failure == "timeout":
            return AgentReply(ReplyKind.ERROR, error="simulated agent did not answer in time", error_kind="timeout")
        if failure == "needless_question" and "__needless__" not in self.asked:
            self.asked.add("__needless__")
            return AgentReply(ReplyKind.CLARIFICATION, text="Should I include rows with missing values as well?")
        if failure == "skip_clarification" and ambiguous_terms:
            return AgentReply(ReplyKind.SQL, sql=mutate(golden, "wrong_filter", self.item.dialect))
        for term in ambiguous_terms:
            if term not in self.asked:
                self.asked.add(term)
                return AgentReply(ReplyKind.CLARIFICATION, text=f'When you say "{term}", what exactly do you mean?')
        if failure == "no_answer":
            return AgentReply(ReplyKind.ANSWER, text="I could not find that information in the database.")
        if failure == "nl_answer":
            words = self._in_words(golden)
            if words is not None:
                return AgentReply(ReplyKind.ANSWER, text=words)
        if failure in ("wrong_filter", "missing_column", "sql_error", "empty_result"):
            return AgentReply(ReplyKind.SQL, sql=mutate(golden, failure, self.item.dialect))
        return AgentReply(ReplyKind.SQL, sql=golden)


    def _in_words(self, golden: str) -> str | None:
        """The golden result as a sentence (None when it cannot be had or is too large); only for
        a question without preprocess_sql, so what the sandbox returns is the golden result."""
        item = self.item
        if not item.is_query or item.preprocess_sql or self.in_follow_up:
            return None
        rows = self.agent.query(item.dialect, item.database, golden)
        if not rows or sum(len(row) for row in rows) > MAX_WORDS_CELLS:
            return None
        if len(rows) == 1 and len(rows[0]) == 1:
            return f"The answer is {in_words(rows[0][0])}."
        return "Here is what I found: " + "; ".join(", ".join(in_words(v) for v in row) for row in rows) + "."


def in_words(value: Any) -> str:
    """A cell as an agent would write it in a sentence."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.10g}"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ", timespec="minutes")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    return str(value)


# --------------------------------------------------------------------------- SQL mutations


def mutate(sql: str, kind: str, dialect: str = "postgres") -> str:
    """``sql`` changed the way a careless agent would get it wrong. Falls back to a simpler
    mutation when the SQL has nothing to change (no WHERE, a single column). ``dialect`` is the
    item's (postgres, sqlite, duckdb, mysql are also sqlglot's names); one sqlglot does not know
    (a product such as alloydb) is read and written as postgres."""
    if sqlglot.Dialect.get(dialect) is None:
        dialect = "postgres"
    body = sql.strip().rstrip(";").strip()
    if kind == "empty_result":
        return f"SELECT * FROM (\n{body}\n) AS answer WHERE FALSE"
    try:
        tree = sqlglot.parse_one(body, read=dialect)
    except sqlglot.errors.SqlglotError:
        tree = None
    if tree is not None:
        if kind == "wrong_filter":
            where = tree.find(exp.Where)
            if where is not None:
                where.set("this", exp.Not(this=exp.Paren(this=where.this)))
                return tree.sql(dialect=dialect)
            kind = "missing_column"
        if kind == "missing_column":
            select = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
            if select is not None and len(select.expressions) > 1:
                select.set("expressions", select.expressions[:-1])
                return tree.sql(dialect=dialect)
            kind = "sql_error"
        if kind == "sql_error":
            column = tree.find(exp.Column)
            if column is not None:
                column.set("this", exp.to_identifier(column.name + "_x"))
                return tree.sql(dialect=dialect)
    return f"SELECT * FROM (\n{body}\n) AS answer WHERE no_such_column IS NULL"


AGENTS.register("simulated:oracle")(SimulatedAgent)
AGENTS.register("simulated:noisy")(SimulatedAgent)
