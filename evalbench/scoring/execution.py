"""Execution-based scorers: ``exec_match`` and ``executable``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache

import sqlglot
from sqlglot import expressions as exp

from evalbench.core.conversation import Conversation, PhaseRecord
from evalbench.core.json_types import JsonDict
from evalbench.scoring import Score, bird_compare
from evalbench.scoring.compare import compare
from evalbench.scoring.hard_coded import READS_NO_TABLE, hard_coded
from evalbench.scoring.semantics import ResultRules
from evalbench.sql.statements import last_statement, sqlglot_dialect


@lru_cache(maxsize=1024)
def golden_is_ordered(sql: str, dialect: str = "postgres") -> bool:
    """Whether the outermost query of ``sql`` has an ORDER BY (EvalBench items carry no
    ``conditions``; there, order matters exactly when the golden SQL sorts)."""
    try:
        tree = sqlglot.parse_one(last_statement(sql, dialect), read=dialect)
    except sqlglot.errors.SqlglotError:
        return False
    while isinstance(tree, (exp.Paren, exp.Subquery)) and tree.args.get("order") is None:
        tree = tree.this  # (SELECT ... ORDER BY ...) is still the top-level query
    return tree is not None and tree.args.get("order") is not None


@lru_cache(maxsize=1024)
def order_keys(sql: str, dialect: str = "postgres") -> tuple[str | int, ...] | None:
    """The outermost ORDER BY as output column names (lower case) or 1-based positions; None
    when there is none or a key is an expression not in the output."""
    try:
        tree = sqlglot.parse_one(last_statement(sql, dialect), read=dialect)
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


def tie_key_positions(sql: str, columns: list[str], dialect: str = "postgres") -> list[int] | None:
    """Positions in ``columns`` of the golden query's sort keys (None if any is not found)."""
    keys = order_keys(sql, dialect)
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


class ExecMatch:
    """The agent's result equals a golden result under the run's semantics: BIRD-Interact's
    official comparison (``semantics: bird_interact``) or our strict one (``evalbench``)."""

    name = "exec_match"
    is_metric = False
    OPTIONS = ("column_permutations", "semantics", "empty_gold")

    def __init__(self, options: Mapping[str, object]) -> None:
        unknown = set(options) - set(self.OPTIONS)
        if unknown:
            raise ValueError(f"exec_match options: unknown {sorted(unknown)} (known: {', '.join(self.OPTIONS)})")
        self.rules = ResultRules.from_options(options, None)
        self.permute_columns = bool(options.get("column_permutations", False))
        if self.permute_columns and self.rules.bird:
            raise ValueError("exec_match: column_permutations applies to semantics: evalbench only")

    def describe(self) -> JsonDict:
        return {"scorer": self.name, **self.rules.describe(), "column_permutations": self.permute_columns}

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        if not phase.is_query:
            return Score.not_applicable("management task: judged by test_cases or state_match")
        if phase.outcome is not None:
            return Score(0.0, False, detail=f"no answer to score: {phase.outcome.value}")
        if phase.generated is None:
            return Score(0.0, False, detail="the agent returned no SQL")
        runs = phase.golden_run_sql or [[sql] for sql in phase.golden_sql]
        score = self._bird(phase, runs) if self.rules.bird else self._evalbench(phase, runs)
        return self._hard_coded(conversation, phase, runs, score) if score.passed else score

    def _hard_coded(self, conversation: Conversation, phase: PhaseRecord, runs: list[list[str]], score: Score) -> Score:
        """A pass whose SQL types the values in (:mod:`evalbench.scoring.hard_coded`) is flagged
        ``hard_coded``; under ``evalbench`` it fails when it reads no table of the database, unless the
        golden SQL is itself hard-coded (SQL that reads a table but selects only constants is flagged only)."""
        item_dialect = conversation.item.dialect if conversation is not None else "postgres"
        dialect = getattr(phase.sandbox, "dialect", None) or sqlglot_dialect(item_dialect)
        reason = hard_coded([phase.sql or ""], dialect)
        if reason is None:
            return score
        flags = (*score.flags, "hard_coded")
        if any(hard_coded(run, dialect) for run in runs):
            return replace(score, detail=f"{score.detail}; hard-coded, as the golden SQL is (the SQL {reason})", flags=flags)
        if self.rules.bird:
            return replace(score, detail=f"{score.detail}; hard-coded: the SQL {reason} "
                                         "(BIRD-Interact's evaluator does not check)", flags=flags)
        if reason != READS_NO_TABLE:  # it reads the data (a yes/no answer may rightly select a constant): flagged only
            return replace(score, detail=f"{score.detail}; flagged: the SQL {reason}", flags=flags)
        return Score(0.0, False, detail=f"hard-coded answer: the SQL {reason}, yet returns the golden result "
                                        "(its values are typed in, not computed from the data)", flags=flags)

    def _bird(self, phase: PhaseRecord, runs: list[list[str]]) -> Score:
        order = phase.conditions.order if phase.conditions_explicit else False
        verdicts = []
        for golden, run in zip(phase.golden, runs, strict=False):
            verdict = bird_compare.compare(phase.compared or phase.generated, phase.compared_sql or phase.sql or "",
                                           golden, run[-1] if run else "", order, raw_generated=phase.generated)
            if verdict.match:
                return Score(1.0, True, detail=f"{verdict.reason} [{verdict.rule}]")
            verdicts.append(verdict)
        first = verdicts[0] if verdicts else None
        if first is None:
            return Score(0.0, False, detail="no golden result")
        flags = {"empty_pred": ("empty_generated",), "empty_gold": ("empty_gold",)}.get(first.rule, ())
        return Score(0.0, False, detail=f"{first.reason} [{first.rule}]", flags=flags)

    def _evalbench(self, phase: PhaseRecord, runs: list[list[str]]) -> Score:
        dialect = getattr(phase.sandbox, "dialect", "postgres")  # the SQL's, as the database runs it
        verdicts = []
        for golden, run in zip(phase.golden, runs, strict=False):
            sql = run[-1] if run else ""
            sorts = golden_is_ordered(sql, dialect)
            ordered = phase.conditions.order if phase.conditions_explicit else sorts
            undefined = ordered and not sorts  # `order: true` on a query without ORDER BY: no order to check
            ordered = ordered and sorts
            ties = tie_key_positions(sql, golden.columns, dialect) if ordered else None
            verdict = compare(phase.compared or phase.generated, golden, phase.conditions, ordered, ties,
                              self.permute_columns, self.rules.empty_gold)
            if undefined:
                verdict = replace(verdict, flags=(*verdict.flags, "order_undefined"))
            if verdict.match:
                return Score(1.0, True, detail=verdict.reason, flags=verdict.flags)
            verdicts.append(verdict)
        if verdicts and all(not v.applicable for v in verdicts):
            first = verdicts[0]
            return Score(None, None, applicable=False, detail=first.reason, flags=first.flags)
        shown = next((v for v in verdicts if v.applicable), verdicts[0] if verdicts else None)
        return Score(0.0, False, detail=shown.reason if shown else "no golden result", flags=shown.flags if shown else ())


class Executable:
    """The agent returned SQL and it ran without error (errors never count as executable)."""

    name = "executable"
    is_metric = False

    def __init__(self, options: Mapping[str, object]) -> None:
        pass

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        generated = phase.generated
        if generated is None:
            return Score(0.0, False, detail="no SQL was executed")
        if generated.error is not None:
            return Score(0.0, False, detail=f"{generated.error_kind}: {generated.error}")
        return Score(1.0, True, detail=f"{generated.row_count} rows")
