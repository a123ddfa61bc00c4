"""Splitting SQL text into statements and classifying them, with sqlglot's tokenizer.

Agent SQL is executed one statement at a time through the extended query protocol (which
refuses a string holding several commands), and only statement kinds allowed in the current
mode may run. A text the tokenizer cannot read is kept whole: the server then rejects it
if it holds more than one command, so a mis-split fails safe.
"""

from __future__ import annotations

from functools import lru_cache

from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

# First keywords of statements that only read.
READ_KEYWORDS = frozenset({"SELECT", "WITH", "VALUES", "TABLE", "(", "EXPLAIN", "SHOW"})
# Data and schema changes, allowed in write mode (management tasks), always rolled back.
WRITE_KEYWORDS = READ_KEYWORDS | frozenset(
    {"INSERT", "UPDATE", "DELETE", "MERGE", "CREATE", "ALTER", "DROP", "TRUNCATE", "COMMENT"}
)
# Statements that would return rows through a server-side cursor (DECLARE ... CURSOR FOR).
CURSOR_KEYWORDS = frozenset({"SELECT", "WITH", "VALUES", "TABLE", "("})


@lru_cache(maxsize=1)
def _tokenizer():  # type: ignore[no-untyped-def]
    from sqlglot.dialects.postgres import Postgres

    return Postgres().tokenizer_class()


def split_statements(sql: str) -> list[str]:
    """The non-empty statements of ``sql``, without their terminating semicolons."""
    try:
        tokens = _tokenizer().tokenize(sql)
    except TokenError:
        stripped = sql.strip().rstrip(";").strip()
        return [stripped] if stripped else []
    statements: list[str] = []
    start: int | None = None
    end = 0
    for token in tokens:  # token offsets include quotes and dollar tags
        if token.token_type == TokenType.SEMICOLON:
            if start is not None:
                statements.append(sql[start : end + 1].strip())
            start = None
        else:
            if start is None:
                start = token.start
            end = token.end
    if start is not None:
        statements.append(sql[start : end + 1].strip())
    return statements


def first_keyword(statement: str) -> str:
    """The statement's first keyword, upper-cased ('' for an empty statement)."""
    try:
        tokens = _tokenizer().tokenize(statement)
    except TokenError:
        words = statement.lstrip("( \n\t").split(None, 1)
        return words[0].upper() if words else ""
    if not tokens:
        return ""
    first = tokens[0]
    return "(" if first.token_type == TokenType.L_PAREN else first.text.upper()
