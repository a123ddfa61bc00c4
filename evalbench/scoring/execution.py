"""Execution-based scorers: ``exec_match`` and ``executable``."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import sqlglot
from sqlglot import expressions as exp

from evalbench.conversation import Conversation, PhaseRecord
from evalbench.db.statements import last_statement
from evalbench.scoring import SCORERS, Score
from evalbench.scoring.compare import compare


@lru_cache(maxsize=1024)
def golden_is_ordered(sql: str) -> bool:
    """Whether the outermost query of ``sql`` has an ORDER BY (EvalBench items carry no
    ``conditions``; there, order matters exactly when the golden SQL sorts)."""
    try:
        tree = sqlglot.parse_one(last_statement(sql), read="postgres")
    except sqlglot.errors.SqlglotError:
        return False
    while isinstance(tree, (exp.Paren, exp.Subquery)) and tree.args.get("order") is None:
        tree = tree.this  # (SELECT ... ORDER BY ...) is still the top-level query
    return tree is not None and tree.args.get("order") is not None


@lru_cache(maxsize=1024)
def order_keys(sql: str) -> tuple[str | int, ...] | None:
    """The outermost ORDER BY as output column names (lower case) or 1-based positions; None
    when there is none or a key is an expression not in the output."""
    try:
        tree = sqlglot.parse_one(last_statement(sql), read="postgres")
    except sqlglot.errors.SqlglotError:
        return None
    while isinstance(tree, (exp.Paren, exp.Subquery)) and tree.args.get("order") is None:
        tree = tree.this
    order = tree.args.get("order") if tree is not None else None
    if order is None:
        return None
    select = tree if isinstance(tree, exp.Select) else None
    outputs = [e.unalias().sql() for e in select.expressions] if select is not None else []
    keys: list[str | int] = []
    for ordered in order.expressions:
        key = ordered.this
        if isinstance(key, exp.Column) and key.sql() not in outputs:
            keys.append(key.name.lower())
        elif isinstance(key, exp.Literal) and key.is_int:
            keys.append(int(key.this))
        elif key.sql() in outputs:  # ORDER BY an expression that is also selected
            keys.append(outputs.index(key.sql()) + 1)
        else:
            return None
    return tuple(keys)


def tie_key_positions(sql: str, columns: list[str]) -> list[int] | None:
    """Positions in ``columns`` of the golden query's sort keys (None if any is not found)."""
    keys = order_keys(sql)
    if not keys:
        return None
    names = [c.lower() for c in columns]
    positions = []
    for key in keys:
        if isinstance(key, int):
            if not 1 <= key <= len(names):
                return None
            positions.append(key - 1)
        elif names.count(key) == 1:
            positions.append(names.index(key))
        else:
            return None
    return positions


@SCORERS.register("exec_match")
class ExecMatch:
    """The generated result equals a golden result (any of them) under the item's conditions."""

    name = "exec_match"
    is_metric = False

    def __init__(self, options: dict[str, Any]) -> None:
        unknown = set(options) - {"column_permutations"}
        if unknown:
            raise ValueError(f"exec_match options: unknown {sorted(unknown)} (known: column_permutations)")
        self.permute_columns = bool(options.get("column_permutations", False))

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        if not phase.is_query:
            return Score.not_applicable("management task: judged by the test_cases scorer")
        if phase.outcome is not None:
            return Score(0.0, False, detail=f"no answer to score: {phase.outcome.value}")
        if phase.generated is None:
            return Score(0.0, False, detail="the agent returned no SQL")
        reasons = []
        for sql, golden in zip(phase.golden_sql, phase.golden):
            ordered = phase.conditions.order if phase.conditions_explicit else golden_is_ordered(sql)
            ties = tie_key_positions(sql, golden.columns) if ordered else None
            verdict = compare(phase.generated, golden, phase.conditions, ordered, ties, self.permute_columns)
            if verdict.match:
                return Score(1.0, True, detail=verdict.reason, flags=verdict.flags)
            reasons.append(verdict)
        first = reasons[0] if reasons else None
        return Score(0.0, False, detail=first.reason if first else "no golden result", flags=first.flags if first else ())


@SCORERS.register("executable")
class Executable:
    """The agent returned SQL and it ran without error (errors never count as executable)."""

    name = "executable"
    is_metric = False

    def __init__(self, options: dict[str, Any]) -> None:
        pass

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        generated = phase.generated
        if generated is None:
            return Score(0.0, False, detail="no SQL was executed")
        if generated.error is not None:
            return Score(0.0, False, detail=f"{generated.error_kind}: {generated.error}")
        return Score(1.0, True, detail=f"{generated.row_count} rows")
