"""Scorers that read the agent's SQL text: ``sql_exact_match``, ``returned_sql`` and
``regexp_matcher``.

Every scorer's docstring states its exact rule (summarised in docs/scoring.md). None of them
raises on bad input: a missing or unparsable SQL is a failed score, never an exception.
"""

from __future__ import annotations

import re
from functools import lru_cache

import sqlglot
from sqlglot import expressions as exp

from evalbench.core.conversation import Conversation, PhaseRecord
from evalbench.core.scores import Score
from evalbench.scoring.options import ScorerOptions, config_error, no_options

__all__ = ["RegexpMatcher", "ReturnedSql", "SqlExactMatch", "normalise_sql", "strip_aliases"]


# --------------------------------------------------------------------------- sql_exact_match


def strip_aliases(tree: exp.Expr) -> exp.Expr:
    """A copy of ``tree`` without aliases: ``x AS a`` -> ``x``; ``FROM t AS a`` -> ``FROM t``
    (tables and subqueries); ``a.col`` -> ``col``."""
    tree = tree.copy()
    for alias in list(tree.find_all(exp.Alias)):
        alias.replace(alias.this)
    for source in list(tree.find_all(exp.Table, exp.Subquery)):
        source.set("alias", None)
    for column in list(tree.find_all(exp.Column)):
        column.set("table", None)
        column.set("db", None)
        column.set("catalog", None)
    if isinstance(tree, exp.Alias):  # find_all includes the root, which replace() cannot swap
        tree = tree.this
    return tree


def _plain(sql: str) -> str:
    text = re.sub(r"\s+", " ", sql).strip().lower()
    while text.endswith(";"):
        text = text[:-1].rstrip()
    return text


@lru_cache(maxsize=2048)
def normalise_sql(sql: str, ignore_aliases: bool = False, dialect: str = "postgres") -> str:
    """The text ``sql_exact_match`` compares: sqlglot's normalized PostgreSQL rendering, lower
    case, whitespace collapsed, no trailing semicolon. With ``ignore_aliases``, aliases and
    column qualifiers are removed first. Unparsable SQL: only case/whitespace/semicolon."""
    try:
        trees = [t for t in sqlglot.parse(sql, read=dialect) if t is not None]
        if not trees:
            return _plain(sql)
        if ignore_aliases:
            trees = [strip_aliases(t) for t in trees]
        text = "; ".join(t.sql(dialect=dialect, normalize=True, pretty=False) for t in trees)
    except Exception:  # noqa: BLE001 (sqlglot raises ParseError, TokenError and, on odd input, others)
        return _plain(sql)
    return _plain(text)


class SqlExactMatch:
    """The generated SQL equals a golden SQL after normalisation (see :func:`normalise_sql`):
    parsed with sqlglot (``read="postgres"``) and rendered with ``.sql(dialect="postgres",
    normalize=True, pretty=False)``, then lower-cased, whitespace collapsed and trailing
    semicolons stripped. SQL that sqlglot cannot parse is only lower-cased, whitespace-collapsed
    and semicolon-stripped. Option ``ignore_aliases: true`` first removes every alias (``AS x``
    on select expressions, tables and subqueries) and every column qualifier (``t.col`` ->
    ``col``) — simple and lossy: ``a.id`` and ``b.id`` become the same text. No SQL: failed."""

    name = "sql_exact_match"
    is_metric = False

    def __init__(self, options: ScorerOptions) -> None:
        options = options or {}
        no_options(self.name, options, ("ignore_aliases",))
        value = options.get("ignore_aliases", False)
        if not isinstance(value, bool):
            raise config_error(self.name, f"ignore_aliases must be true or false, got {value!r}", "ignore_aliases")
        self.ignore_aliases = value

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        if not isinstance(phase.sql, str) or not phase.sql.strip():
            return Score(0.0, False, detail="the agent returned no SQL")
        dialect = getattr(phase.sandbox, "dialect", "postgres")
        generated = normalise_sql(phase.sql, self.ignore_aliases, dialect)
        goldens = [g for g in phase.golden_sql if isinstance(g, str)]
        for i, golden in enumerate(goldens):
            if normalise_sql(golden, self.ignore_aliases, dialect) == generated:
                return Score(1.0, True, detail=f"equal to golden SQL #{i + 1} after normalisation")
        return Score(0.0, False, detail="differs from every golden SQL after normalisation" if goldens else "no golden SQL")


# --------------------------------------------------------------------------- returned_sql


class ReturnedSql:
    """The agent returned SQL for the phase: ``phase.sql`` is a non-empty (non-blank) string.
    Whether it ran is not considered (see ``executable``)."""

    name = "returned_sql"
    is_metric = False

    def __init__(self, options: ScorerOptions) -> None:
        no_options(self.name, options)

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        if isinstance(phase.sql, str) and phase.sql.strip():
            return Score(1.0, True, detail="the agent returned SQL")
        return Score(0.0, False, detail="the agent returned no SQL")


# --------------------------------------------------------------------------- regexp_matcher


class RegexpMatcher:
    """The generated SQL matches the option ``pattern`` (``re.search``, case-insensitive).
    ``pattern`` is required and must be a valid regular expression (else a config error naming
    ``pattern``). No SQL: failed."""

    name = "regexp_matcher"
    is_metric = False

    def __init__(self, options: ScorerOptions) -> None:
        options = options or {}
        no_options(self.name, options, ("pattern",))
        pattern = options.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise config_error(self.name, f"option 'pattern' (a regular expression) is required, got {pattern!r}", "pattern")
        try:
            self.regex = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise config_error(self.name, f"option 'pattern' is not a valid regular expression: {exc}", "pattern") from None
        self.pattern = pattern

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        if not isinstance(phase.sql, str) or not phase.sql.strip():
            return Score(0.0, False, detail="the agent returned no SQL")
        if self.regex.search(phase.sql):
            return Score(1.0, True, detail=f"matches /{self.pattern}/")
        return Score(0.0, False, detail=f"does not match /{self.pattern}/")
