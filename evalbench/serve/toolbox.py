"""The database tools of one served conversation: the discovery tools of the built-in agents
(:class:`~evalbench.agents.tools.Toolbox`: same budgets, caps and recording), with ``run_sql``
made to follow the conversation's phase.

- In a Query phase ``run_sql`` reads through the sandbox, read-only: a write is refused there.
- In a Management phase it runs in a disposable transaction (rolled back, sequences put back):
  first the writes this phase made through the tool, then the new statement. The agent sees its
  own changes and nothing persists; the phase's writes are its answer when its reply carries no
  SQL (:meth:`ServedToolbox.answer_sql`), so ``state_match`` and test cases judge exactly them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evalbench.agents.tools import RUN_SQL, Toolbox, ToolKit, result_rows
from evalbench.backends.base import PreprocessErrors, Sandbox
from evalbench.core.conversation import MAX_SQL_BYTES, Conversation, Phase, ToolCall
from evalbench.sql.statements import classify_statements

_READS = frozenset({"SELECT", "VALUES", "TABLE", "SHOW", "EXPLAIN", "DESCRIBE", "DESC", "PRAGMA", "WITH"})


@dataclass
class PhaseWork:
    """What one attempt at a phase ran through ``run_sql``: its writes, and its last read."""

    writes: list[str] = field(default_factory=list)
    last_read: str | None = None
    submitted: str | None = None  # SQL handed in through BIRD-Interact's /submit


class ServedToolbox(Toolbox):
    def __init__(self, kit: ToolKit, conv: Conversation, sandbox: Sandbox | None, preprocess_errors: PreprocessErrors) -> None:
        super().__init__(kit, conv.item)
        self.conv, self.sandbox, self.preprocess_errors = conv, sandbox, preprocess_errors
        self._work: dict[tuple[Phase, int], PhaseWork] = {}

    def work(self) -> PhaseWork:
        """This attempt's work: a debugging retry or the follow-up starts from the phase's state again."""
        phase = self.conv.phase
        return self._work.setdefault((phase.phase, phase.debug_used), PhaseWork())

    def answer_sql(self) -> str | None:
        """The phase's answer as the tools saw it: the SQL submitted last, else a Management phase's
        writes, else the last read."""
        work = self.work()
        if work.submitted is not None:
            return work.submitted
        if not self.conv.phase.is_query:
            return ";\n".join(work.writes) or None
        return work.last_read

    def submit(self, call: ToolCall) -> dict[str, object]:
        sql = call.args.get("sql")
        if not isinstance(sql, str) or not sql.strip():
            call.response, call.outcome = {"error": "no sql given"}, "error"
        elif len(sql.encode("utf-8", "surrogatepass")) > MAX_SQL_BYTES:
            call.response, call.outcome = {"error": f"the SQL is over {MAX_SQL_BYTES} bytes"}, "error"
        else:
            self.work().submitted = sql
            call.response, call.outcome = {"submitted": True}, "ok"
        return dict(call.response)

    def run(self, call: ToolCall) -> dict[str, object]:
        response = super().run(call)
        sql = call.args.get("sql")
        if call.name == RUN_SQL and call.outcome == "ok" and isinstance(sql, str):
            work = self.work()
            if self.conv.phase.is_query:
                work.last_read = sql
            else:
                work.writes += [text for text, verb, modifies in classify_statements(sql, self.item.dialect)
                                if modifies or verb not in _READS]
        return response

    def _rows(self, sql: str) -> dict[str, object]:
        phase = self.conv.phase
        if phase.is_query or self.sandbox is None:
            return super()._rows(sql)
        result = self.sandbox.execute([*self.work().writes, sql], mode="write", preprocess=phase.preprocess,
                                      preprocess_errors=self.preprocess_errors)
        return result_rows(result, self.kit.limits.max_rows)
