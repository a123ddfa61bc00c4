"""What every backend's sandbox checks before it runs anything: the SQL is text, splits into
statements (in the backend's dialect), every statement is of a kind the mode allows, and the
conversation's deadline leaves time. Shared so no backend can forget one of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evalbench.backends.base import ExecutionResult, Mode, SandboxLimits
from evalbench.core import deadline
from evalbench.core.ratelimit import RateLimiter
from evalbench.sql.statements import READ_KEYWORDS, WRITE_KEYWORDS, classify_statements


@dataclass
class Admission:
    statements: list[str]
    result: ExecutionResult  # carries the error when the execution is refused
    budget_s: float = 0.0  # the time the execution may take

    @property
    def refused(self) -> bool:
        return self.result.error is not None


def admit(sql: str | Sequence[str], mode: Mode, dialect: str, timeout_s: float) -> Admission:
    """The statements of ``sql`` and their time budget, or a refusal (forbidden, empty, deadline)."""
    texts = [sql] if isinstance(sql, str) else list(sql)
    unreadable = not_text(texts)
    if unreadable is not None:
        return Admission([], ExecutionResult(error=unreadable, error_kind="sql"))
    classified = [c for text in texts for c in classify_statements(text, dialect)]
    statements = [statement for statement, _, _ in classified]
    result = ExecutionResult(statements=len(statements))
    allowed = READ_KEYWORDS if mode == "read" else WRITE_KEYWORDS
    for _, verb, _ in classified:
        if verb not in allowed:
            result.error = f"{verb or 'this'} statements are not allowed here ({mode}-only execution)"
            result.error_kind = "forbidden"
            return Admission(statements, result)
    if not statements:
        result.error, result.error_kind = "no SQL statement to run", "sql"
        return Admission(statements, result)
    budget = deadline.budget(timeout_s)
    if budget is not None and budget <= 0:
        result.error, result.error_kind = "the conversation deadline has passed", "timeout"
        return Admission(statements, result)
    return Admission(statements, result, timeout_s if budget is None else budget)


def admit_script(texts: Sequence[str], dialect: str) -> Admission:
    """The statements of a script run inside an open write transaction (``state_match``): only
    write-mode statement kinds; the transaction's own time budget applies."""
    classified = [c for text in texts for c in classify_statements(text, dialect)]
    statements = [statement for statement, _, _ in classified]
    result = ExecutionResult(statements=len(statements))
    forbidden = next((verb for _, verb, _ in classified if verb not in WRITE_KEYWORDS), None)
    if not statements:
        result.error, result.error_kind = "no SQL statement to run", "sql"
    elif forbidden is not None:
        result.error, result.error_kind = f"{forbidden or 'this'} statements are not allowed here", "forbidden"
    return Admission(statements, result)


def rate_limiter(limits: SandboxLimits) -> RateLimiter | None:
    """The database's executions-per-minute limit (bursts up to the pool size), or None."""
    per_minute = limits.executions_per_minute
    return RateLimiter(per_minute, burst=limits.pool_size) if per_minute else None


def not_text(texts: Sequence[str]) -> str | None:
    """Why the SQL cannot be sent (a lone surrogate or NUL: no server would read it), or None."""
    for text in texts:
        if "\x00" in text:
            return "the SQL contains a NUL character"
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"the SQL is not valid text ({exc.reason} at character {exc.start})"
    return None
