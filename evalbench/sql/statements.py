"""Splitting SQL text into statements and classifying them, with sqlglot's tokenizer.

Agent SQL is executed one statement at a time through the extended query protocol (which
refuses a string holding several commands), and only statement kinds allowed in the current
mode may run. A text the tokenizer cannot read is kept whole: the server then rejects it
if it holds more than one command, so a mis-split fails safe.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import TYPE_CHECKING

from sqlglot import Tokenizer, TokenType  # sqlglot's explicit re-exports (sqlglot.tokens re-exports them implicitly)
from sqlglot.errors import TokenError

if TYPE_CHECKING:
    from sqlglot import Token

# First keywords of statements that only read.
READ_KEYWORDS = frozenset({"SELECT", "WITH", "VALUES", "TABLE", "(", "EXPLAIN", "SHOW"})
# Data and schema changes, allowed in write mode (management tasks), always rolled back.
WRITE_KEYWORDS = READ_KEYWORDS | frozenset(
    {"INSERT", "UPDATE", "DELETE", "MERGE", "CREATE", "ALTER", "DROP", "TRUNCATE", "COMMENT"}
)
# Statements whose rows are streamed (and cut at the row cap) rather than fetched whole.
STREAM_KEYWORDS = frozenset({"SELECT", "WITH", "VALUES", "TABLE", "(", "EXPLAIN", "SHOW"})


_local = threading.local()


def _tokenizer(dialect: str = "postgres") -> Tokenizer:
    """A tokenizer of this thread's own for ``dialect`` (sqlglot's name): sqlglot's tokenizer
    keeps state while it runs."""
    tokenizers = getattr(_local, "tokenizers", None)
    if tokenizers is None:
        tokenizers = _local.tokenizers = {}
    tokenizer = tokenizers.get(dialect)
    if tokenizer is None:
        from sqlglot.dialects.dialect import Dialect

        tokenizer = tokenizers[dialect] = Dialect.get_or_raise(dialect).tokenizer_class()
    return tokenizer


@lru_cache(maxsize=64)
def sqlglot_dialect(name: str) -> str:
    """sqlglot's name for an item's dialect: the same name when sqlglot knows it (postgres,
    sqlite, duckdb, mysql...), else postgres (alloydb, cloudsql: PostgreSQL products)."""
    from sqlglot.dialects.dialect import Dialect

    try:
        Dialect.get_or_raise(name)
    except ValueError:
        return "postgres"
    return name


# Texts up to this size are remembered by (text, dialect): the same golden or agent SQL is split
# and classified once, however many times a conversation executes, scores and audits it.
_CACHED_CHARS = 64 * 1024


def split_statements(sql: str, dialect: str = "postgres") -> list[str]:
    """The non-empty statements of ``sql`` (in ``dialect``), without their terminating semicolons."""
    return [text for text, _, _ in classify_statements(sql, dialect)]


def classify_statements(sql: str, dialect: str = "postgres") -> tuple[tuple[str, str, bool], ...]:
    """``(statement, main verb, modifies data)`` of every statement of ``sql``, from one
    tokenization (see :func:`statement_kind` for the verb)."""
    return _classified(sql, dialect) if len(sql) <= _CACHED_CHARS else _classify(sql, dialect)


@lru_cache(maxsize=4096)
def _classified(sql: str, dialect: str) -> tuple[tuple[str, str, bool], ...]:
    return _classify(sql, dialect)


def _classify(sql: str, dialect: str) -> tuple[tuple[str, str, bool], ...]:
    try:
        tokens = _tokenizer(dialect).tokenize(sql)
    except TokenError:
        stripped = sql.strip().rstrip(";").strip()
        return ((stripped, *_kind_from_text(stripped)),) if stripped else ()
    statements: list[tuple[str, str, bool]] = []
    group: list[Token] = []
    for token in tokens:  # token offsets include quotes and dollar tags
        if token.token_type == TokenType.SEMICOLON:
            if group:
                statements.append((sql[group[0].start : group[-1].end + 1].strip(), *_kind(group)))
            group = []
        else:
            group.append(token)
    if group:
        statements.append((sql[group[0].start : group[-1].end + 1].strip(), *_kind(group)))
    return tuple(statements)


# Objects of the whole server, not of the evaluation database: a change to them (``ALTER ROLE
# CURRENT_USER SET search_path ...``) would outlive the transaction or the throwaway copy it ran
# in. Such statements are refused: their verb is reported as e.g. "ALTER ROLE".
CLUSTER_OBJECTS = frozenset({"ROLE", "USER", "GROUP", "DATABASE", "SYSTEM", "TABLESPACE", "SUBSCRIPTION", "SERVER"})
_DDL = frozenset({"CREATE", "ALTER", "DROP", "COMMENT"})

_MAIN_VERBS = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "VALUES", "TABLE"})
_MODIFYING = frozenset({TokenType.INSERT, TokenType.UPDATE, TokenType.DELETE, TokenType.MERGE})
_LOCK_WORDS = frozenset({"FOR", "KEY", "NO"})  # SELECT ... FOR [NO KEY] UPDATE is a read


def statement_kind(statement: str, dialect: str = "postgres") -> tuple[str, bool]:
    """(main verb, modifies data) of one statement.

    The main verb of ``WITH ... UPDATE ...`` is UPDATE: the first verb at parenthesis depth 0
    after the CTE definitions. ``modifies`` is True when a data-modifying keyword appears
    anywhere (a data-modifying CTE); strings and quoted identifiers are not keywords.
    """
    if len(statement) <= _CACHED_CHARS:
        return _statement_kind(statement, dialect)
    return _uncached_kind(statement, dialect)


@lru_cache(maxsize=4096)
def _statement_kind(statement: str, dialect: str) -> tuple[str, bool]:
    return _uncached_kind(statement, dialect)


def _uncached_kind(statement: str, dialect: str) -> tuple[str, bool]:
    try:
        tokens = _tokenizer(dialect).tokenize(statement)
    except TokenError:
        return _kind_from_text(statement)
    return _kind(tokens)


def _kind_from_text(statement: str) -> tuple[str, bool]:
    """The kind of a statement the tokenizer cannot read: from its first word."""
    word = first_keyword(statement)
    return word, word in {"INSERT", "UPDATE", "DELETE", "MERGE"}


def _kind(tokens: list[Token]) -> tuple[str, bool]:
    """(main verb, modifies data) from one statement's tokens."""
    if not tokens:
        return "", False
    first = "(" if tokens[0].token_type == TokenType.L_PAREN else tokens[0].text.upper()
    if first in _DDL:
        position = 2 if first == "COMMENT" else 1  # COMMENT ON <kind>, ALTER <kind>
        kind = tokens[position].text.upper() if len(tokens) > position else ""
        if kind in CLUSTER_OBJECTS:
            return f"{first} {kind}", False
    modifies = any(
        token.token_type in _MODIFYING and (i == 0 or tokens[i - 1].text.upper() not in _LOCK_WORDS)
        for i, token in enumerate(tokens)
    )
    if first != "WITH":
        return first, modifies
    depth = 0
    for token in tokens[1:]:
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and token.token_type not in (TokenType.STRING, TokenType.IDENTIFIER) and token.text.upper() in _MAIN_VERBS:
            return token.text.upper(), modifies
    return "WITH", modifies


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


def last_statement(sql: str, dialect: str = "postgres") -> str:
    """The last statement of ``sql`` without its semicolon (comments after it dropped), for
    parsing a query that may end with ``; -- a comment``."""
    statements = split_statements(sql, dialect)
    return statements[-1] if statements else sql
