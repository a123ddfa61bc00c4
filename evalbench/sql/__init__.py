"""SQL as text (README.md): splitting and classifying statements, and the clauses of a golden
query. Nothing here executes SQL."""

from __future__ import annotations

from evalbench.sql.clauses import golden_clauses, identifiers
from evalbench.sql.statements import classify_statements, first_keyword, last_statement, split_statements, sqlglot_dialect, statement_kind

__all__ = ["classify_statements", "first_keyword", "golden_clauses", "identifiers", "last_statement", "split_statements",
           "sqlglot_dialect", "statement_kind"]
