"""Offline agents, registered like real ones, for trying the harness without keys and testing it.

``simulated:oracle`` answers with the golden SQL and, when the item is ambiguous, first asks
about each annotated term. ``simulated:noisy`` behaves like the oracle except that, seeded per
conversation, a phase fails in one of the realistic ways of :data:`FAILURE_KINDS` — or, with
``nl_answer``, answers correctly in words (the golden result, read through the sandbox).
Both peek at the item on purpose: they stand in for an agent, they are not one.

With ``tools`` they use the discovery tools as a tool-using agent would, deterministically,
through the same :class:`~evalbench.agents.tools.Toolbox` as the model agents (so the calls are
real, budgeted and recorded): ``list_tables`` at the first turn, ``describe_table`` on each table
the golden SQL reads, ``search_knowledge`` with the name of each knowledge entry the phase cites
(less those an ambiguity deleted). With ``knows_knowledge: false`` the agent knows only what it
found: a phase citing an entry the search did not return is answered with a guess (the
``wrong_filter`` mutation) — the difference ``configs/quickstart_knowledge.yaml`` shows.
"""

from __future__ import annotations

import datetime as dt
import random
import time

import sqlglot
from sqlglot import expressions as exp

from evalbench.agents import AgentContext
from evalbench.agents.tools import ToolKit
from evalbench.config.agents import (
    FAILURE_KINDS,  # noqa: F401 (re-exported; the config schema validates rates against it)
    SimulatedAgentConfig,
)
from evalbench.core.conversation import AgentReply, Conversation, ReplyKind, ToolCall, conversation_seed
from evalbench.core.items import knowledge_refs

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
    def __init__(self, config: SimulatedAgentConfig, context: AgentContext) -> None:
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
        self.knowledge = context.knowledge
        self.knows_knowledge = config.knows_knowledge
        self.toolkit = ToolKit(config.tools, config.tool_limits, context) if config.tools else None

    def describe(self) -> dict[str, object]:
        tools = {"tools": sorted(self.toolkit.names)} if self.toolkit is not None else {}
        return {"agent": self.name, "seed": self.seed, "latency_s": self.latency_s, "failure_rates": self.rates,
                "session": "sticky" if self.sticky else "per_turn", "knows_knowledge": self.knows_knowledge, **tools}

    def open_session(self, conversation: Conversation) -> SimulatedSession:
        return SimulatedSession(self, conversation)

    def close(self) -> None:
        if self.toolkit is not None:
            self.toolkit.close()

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
        self.toolbox = agent.toolkit.session(self.item) if agent.toolkit is not None else None
        self.explored: set[str] = set()  # phases whose tools were called
        self.found: set[int] = set()  # knowledge ids search_knowledge returned

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
        calls = self._explore(text)
        reply = self._reply(text)
        reply.tool_calls = calls + reply.tool_calls
        reply.latency_s = time.perf_counter() - started
        return reply

    def _phase(self, text: str) -> tuple[str, str, list[object]]:
        """(phase, its golden SQL, the knowledge it cites) of the turn ``text`` opens."""
        follow_up = self.item.follow_up
        if follow_up is not None and (self.in_follow_up or text == follow_up.question):
            return "follow_up", follow_up.golden_sql[0], follow_up.external_knowledge
        return "main", self.item.golden_sql[0], self.item.external_knowledge

    def _needed(self, cited: list[object]) -> list[int]:
        """The knowledge entries a phase cites that the agent may see (an ambiguity's are asked for)."""
        entries = self.agent.knowledge.get(self.item.database, {})
        return [i for i in knowledge_refs(cited) if i in entries and i not in self.item.deleted_knowledge]

    def _explore(self, text: str) -> list[ToolCall]:
        """The tool calls of a phase's first turn, run through the toolbox (budgets apply)."""
        box = self.toolbox
        phase, golden, cited = self._phase(text)
        if box is None or phase in self.explored:
            return []
        self.explored.add(phase)
        box.start_turn()
        names = box.kit.names
        planned: list[ToolCall] = []
        if "list_tables" in names and phase == "main":
            planned.append(ToolCall("list_tables", {}, id="list_tables"))
        entries = self.agent.knowledge.get(self.item.database, {})
        if "search_knowledge" in names:
            planned += [ToolCall("search_knowledge", {"query": entries[i].name}, id=f"search_{i}") for i in self._needed(cited)]
        if "describe_table" in names:
            planned += [ToolCall("describe_table", {"table": t}, id=f"describe_{t}") for t in tables_read(golden, self.item.dialect)]
        for call in planned:
            response = box.run(call)
            if call.name == "search_knowledge":
                results = response.get("results", [])
                if isinstance(results, list):  # always (a list of the matches, possibly cut to fit)
                    self.found |= {r["id"] for r in results if r.get("kind") == "knowledge"}
        return planned

    def _reply(self, text: str) -> AgentReply:
        phase, golden, cited = self._phase(text)
        if phase == "follow_up":
            self.in_follow_up = True
            return self._answer(golden, self._failure(phase, cited), ambiguous_terms=[])
        terms = [a.term for a in self.item.ambiguities if a.kind != "non_critical"]
        return self._answer(golden, self._failure(phase, cited), ambiguous_terms=terms)

    def _failure(self, phase: str, cited: list[object]) -> str | None:
        """The phase's drawn failure; a guess when the agent lacks knowledge the phase needs."""
        drawn = self.failures[phase]
        if drawn is None and not self.agent.knows_knowledge and set(self._needed(cited)) - self.found:
            return "wrong_filter"  # not a draw: the seeded failures stay those of a run that knows
        return drawn

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


def in_words(value: object) -> str:
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


def tables_read(sql: str, dialect: str) -> list[str]:
    """The tables ``sql`` reads (not its CTEs, nor what it creates), in order of appearance; []
    when it does not parse."""
    if sqlglot.Dialect.get(dialect) is None:
        dialect = "postgres"
    try:
        tree = sqlglot.parse_one(sql.strip().rstrip(";"), read=dialect)
    except sqlglot.errors.SqlglotError:
        return []
    skip = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    skip |= {created.name for create in tree.find_all(exp.Create) if (created := create.find(exp.Table)) is not None}
    return list(dict.fromkeys(t.name for t in tree.find_all(exp.Table) if t.name and t.name not in skip))


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
