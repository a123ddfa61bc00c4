"""BIRD-Interact's official result comparison, reproduced rule by rule (``semantics: bird_interact``).

The reference is BIRD-Interact's ``evaluation/src`` (github.com/bird-bench/BIRD-Interact):
``eval_bird_interact_batch.py::batch_eval`` runs the predicted SQL once as it is (an error or a
timeout fails the item), then ``eval_bird_interact.py::test_case_default``, which

1. cleans both SQL lists: ``remove_comments``, then ``remove_distinct``, then ``remove_round``
   (:func:`clean_sql`; the same text transformations, written anew here);
2. runs each list as one script with ``postgresql_utils.execute_queries`` and keeps the last
   statement's rows (:func:`last_rows` applies its 10,000-row cap);
3. ``ex_base``: an error or timeout on either side fails; ``preprocess_results`` turns dates
   into ``YYYY-MM-DD`` text, rounds every Decimal half-up and every float with ``round`` to
   2 places (nested in lists and dicts too), and dumps lists and dicts as sorted JSON text
   (:func:`preprocess_rows`); an empty (or missing) result on either side fails; with
   ``conditions.order`` the rows are compared as lists, otherwise as Python sets.

Any exception in those steps (a Decimal too large to quantize, a JSON dump of a Decimal, an
unhashable cell) fails the item, as upstream. Values are first given the Python types psycopg2
would have produced (:func:`psycopg2_value`), since upstream's equality is Python's equality
over psycopg2's types. Nothing here reads ``conditions.decimal`` or ``conditions.distinct``:
upstream ignores them. docs/scoring.md lists each rule with an example.
"""

from __future__ import annotations

import datetime as dt
import decimal
import ipaddress
import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from evalbench.backends.base import ExecutionResult

MAX_ROWS = 10_000  # postgresql_utils.perform_query_on_postgresql_databases: fetchmany(MAX_ROWS + 1)[:MAX_ROWS]
PLACES = 2  # preprocess_results(results, decimal_places=2)

# decimal's default context (28 digits, InvalidOperation trapped), fixed so a caller's context
# cannot change a verdict: quantizing a number of more than 26 integer digits raises, as upstream.
_CONTEXT = decimal.Context(prec=28, rounding=decimal.ROUND_HALF_EVEN,
                           traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow])
_QUANTUM = decimal.Decimal(1).scaleb(-PLACES)


@dataclass(frozen=True)
class BirdVerdict:
    match: bool
    rule: str  # which upstream rule decided (docs/scoring.md names each)
    reason: str


# --------------------------------------------------------------------------- SQL cleaning

_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_LINE_COMMENT = re.compile(r"--.*?(\r\n|\r|\n)")  # a comment with no line end after it stays
_BLANK_LINES = re.compile(r"\n\s*\n+")
_ROUND_CALL = re.compile(r"ROUND\s*\(", re.IGNORECASE)  # no word boundary: also inside names and strings


def strip_comments(sql: str) -> str:
    """``remove_comments``: block comments, then ``--`` comments up to (not including) their line
    end, then runs of blank lines; the text is stripped. Quotes are not looked at."""
    text = _BLOCK_COMMENT.sub("", sql)
    text = _LINE_COMMENT.sub(r"\1", text)
    return _BLANK_LINES.sub("\n", text).strip()


def strip_distinct(sql: str) -> str:
    """``remove_distinct``: split on single spaces and drop every piece that is ``distinct`` in
    any case (a DISTINCT next to a newline, a tab or a parenthesis is kept)."""
    return " ".join(piece for piece in sql.split(" ") if piece.lower() != "distinct")


def strip_round(sql: str) -> str:
    """``remove_round_functions``: each ``ROUND(`` (any case, anywhere) becomes its first argument,
    found by counting parentheses; the leftmost call first, nested calls on later passes; stops at
    a call whose parenthesis is never closed."""
    text = sql
    while True:
        found = _ROUND_CALL.search(text)
        if found is None:
            return text
        opening = found.end() - 1
        closing = _closing_paren(text, opening)
        if closing < 0:
            return text
        first = text[opening + 1 : _first_argument_end(text, opening + 1)].strip()
        text = text[: found.start()] + first + text[closing + 1 :]


def _closing_paren(text: str, opening: int) -> int:
    depth = 0
    for index in range(opening, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return index
    return -1


def _first_argument_end(text: str, start: int) -> int:
    depth = 0
    for index in range(start, len(text)):
        char = text[index]
        if char == "(":
            depth += 1
        elif char == ")":
            if depth == 0:
                return index
            depth -= 1
        elif char == "," and depth == 0:
            return index
    return len(text)


def clean_sql(sqls: Sequence[str]) -> list[str]:
    """``test_case_default``'s cleaning of one SQL list: comments, DISTINCT, then ROUND."""
    return [strip_round(strip_distinct(strip_comments(sql))) for sql in sqls]


# --------------------------------------------------------------------------- results


def last_rows(statement: str, result: ExecutionResult) -> list[tuple[object, ...]] | None:
    """The rows ``execute_queries`` keeps for the last statement of a script: at most 10,000 when
    the statement's text starts with ``select`` or ``with``, else everything ``fetchall`` gives;
    None for a statement that returns no rows (an UPDATE, a CREATE)."""
    if not result.columns and not result.rows:
        return None
    return result.rows[:MAX_ROWS] if _capped(statement) else result.rows


def _capped(statement: str) -> bool:
    """``perform_query_on_postgresql_databases`` fetches at most 10,000 rows of a statement whose
    text starts with ``select`` or ``with`` (``fetchmany``), every row of any other (``fetchall``)."""
    return statement.strip().lower().startswith(("select", "with"))


_ADDRESSES = (ipaddress.IPv4Address, ipaddress.IPv6Address, ipaddress.IPv4Interface, ipaddress.IPv6Interface,
              ipaddress.IPv4Network, ipaddress.IPv6Network)


def psycopg2_value(value: object) -> object:
    """The Python value psycopg2 (upstream's driver) gives for what psycopg 3 loaded: uuid, inet
    and cidr as text; a uuid or inet array as the server's array text (psycopg2 has no array
    loader for them); a record as the server's record text; bytea as a memoryview; ranges as
    text; other arrays element-wise."""
    if isinstance(value, (uuid.UUID, *_ADDRESSES)):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return memoryview(bytes(value))
    if isinstance(value, list):
        if value and all(v is None or isinstance(v, (uuid.UUID, *_ADDRESSES)) for v in value):
            return "{" + ",".join("NULL" if v is None else str(v) for v in value) + "}"
        return [psycopg2_value(v) for v in value]
    if isinstance(value, tuple):  # an anonymous record, loaded by psycopg 3 as a tuple of texts
        return "(" + ",".join(_record_field(v) for v in value) + ")"
    if type(value).__name__ == "Range":  # psycopg.types.range.Range
        return str(value)
    return value


def _record_field(value: object) -> str:
    """One field as PostgreSQL's record output writes it (record_out's quoting)."""
    if value is None:
        return ""
    text = str(value)
    if text == "" or any(c in text for c in '",\\() \t\n\r'):
        return '"' + text.replace("\\", "\\\\").replace('"', '""') + '"'
    return text


def _round_nested(value: object) -> object:
    """``process_decimals_recursive``: Decimals quantized half-up, floats through ``round``."""
    if isinstance(value, decimal.Decimal):
        return value.quantize(_QUANTUM, rounding=decimal.ROUND_HALF_UP, context=_CONTEXT)
    if isinstance(value, float):
        return round(value, PLACES)
    if isinstance(value, (list, tuple)):
        return type(value)(_round_nested(v) for v in value)
    if isinstance(value, dict):
        return {k: _round_nested(v) for k, v in value.items()}
    return value


def _cell(value: object) -> object:
    if isinstance(value, dt.date):  # datetime is a date too: the time of day is dropped
        return value.strftime("%Y-%m-%d")
    rounded = _round_nested(value)
    if isinstance(rounded, (dict, list)):
        return json.dumps(rounded, sort_keys=True)
    return rounded


def preprocess_rows(rows: Sequence[Sequence[object]]) -> list[tuple[object, ...]]:
    """``preprocess_results(rows, decimal_places=2)`` over psycopg2-typed rows."""
    return [tuple(_cell(psycopg2_value(v)) for v in row) for row in rows]


# --------------------------------------------------------------------------- the comparison


def compare(generated: ExecutionResult | None, generated_sql: str, golden: ExecutionResult, golden_sql: str,
            order: bool, *, raw_generated: ExecutionResult | None = None) -> BirdVerdict:
    """Upstream's verdict on a Query item. ``raw_generated`` is the agent's SQL run as it was
    written (``batch_eval`` fails the item when it errors); ``generated`` and ``golden`` are the
    cleaned scripts' results, ``*_sql`` their last statements; ``order`` is ``conditions.order``."""
    if raw_generated is not None and raw_generated.error is not None:
        kind = "timeout" if raw_generated.error_kind == "timeout" else "error"
        return BirdVerdict(False, f"pred_raw_{kind}", f"the SQL as written failed: {raw_generated.error}")
    if generated is None:
        return BirdVerdict(False, "pred_raw_error", "no SQL was executed")
    for side, result, sql in (("pred", generated, generated_sql), ("gold", golden, golden_sql)):
        if result.error is not None:
            kind = "timeout" if result.error_kind == "timeout" else "error"
            return BirdVerdict(False, f"{side}_clean_{kind}",
                               f"{'generated' if side == 'pred' else 'golden'} SQL failed after cleaning: {result.error}")
        if result.truncated and not (_capped(sql) and result.row_count >= MAX_ROWS):
            # upstream keeps 10,000 rows of a SELECT/WITH and every row of anything else: the
            # rows we hold (execution.max_rows) are not the rows it compares
            return BirdVerdict(False, f"{side}_truncated", f"a result exceeds execution.max_rows ({result.row_count:,} "
                               f"rows kept); BIRD-Interact compares the first {MAX_ROWS:,} rows of a SELECT or WITH "
                               "and every row of any other statement")
    pred_rows, gold_rows = last_rows(generated_sql, generated), last_rows(golden_sql, golden)
    try:
        pred, gold = preprocess_rows(pred_rows or []), preprocess_rows(gold_rows or [])
        if gold_rows is None or not gold:  # the same rule as an empty prediction; named for the item's sake
            return BirdVerdict(False, "empty_gold", "the golden result is empty (BIRD-Interact fails every answer)")
        if pred_rows is None or not pred:
            return BirdVerdict(False, "empty_pred", "the generated result is empty")
        if order:
            same = pred == gold
            return BirdVerdict(same, "ordered_equal" if same else "ordered_unequal",
                               "same rows in the same order (rounded to 2 places)" if same
                               else "the rows differ as ordered lists (rounded to 2 places)")
        same = set(pred) == set(gold)
    except Exception as exc:  # noqa: BLE001 — upstream fails the item on any exception here
        return BirdVerdict(False, f"exception:{type(exc).__name__}", f"{type(exc).__name__}: {exc}")
    return BirdVerdict(same, "set_equal" if same else "set_unequal",
                       "same set of rows (rounded to 2 places)" if same else "the rows differ as sets (rounded to 2 places)")
