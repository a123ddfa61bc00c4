"""More scorers, under EvalBench's config keys: ``set_match``, ``exact_match``, ``sql_exact_match``,
``returned_sql``, ``recall_match``, ``regexp_matcher``, ``clarification``, ``latency``, ``tokens`` and
``bird_interact_reward``.

Every scorer's docstring states its exact rule (summarised in docs/scoring.md). None of them
raises on bad input: a missing result, a missing SQL or an unparsable SQL is a failed (or not
applicable) score, never an exception.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Hashable
from functools import lru_cache
from typing import Any

import sqlglot
from sqlglot import expressions as exp

from evalbench.backends.base import ExecutionResult
from evalbench.core.conversation import Conversation, Phase, PhaseRecord
from evalbench.core.errors import ConfigError
from evalbench.results.journal.record import REWARDS
from evalbench.scoring import Score
from evalbench.scoring.compare import normalise_rows


def _config_error(scorer: str, message: str, option: str | None = None) -> ConfigError:
    key = f"scorers.{scorer}" + (f".{option}" if option else "")
    return ConfigError(f"{scorer}: {message}", key=key)


def _no_options(scorer: str, options: dict[str, Any] | None, allowed: tuple[str, ...] = ()) -> None:
    unknown = sorted(set(options or {}) - set(allowed))
    if unknown:
        takes = f"only {', '.join(allowed)}" if allowed else "no options"
        raise _config_error(scorer, f"takes {takes}, got {', '.join(unknown)}", unknown[0])


def _unusable(result: ExecutionResult | None, side: str) -> str | None:
    """Why ``result`` cannot be compared (None when it can)."""
    if result is None:
        return "no SQL was executed" if side == "generated" else "no golden result"
    if result.error is not None:
        return f"{side} SQL failed: {result.error}"
    if result.truncated:
        return f"{side} result was truncated at the row cap; truncated results never match"
    return None


def compared_result(phase: PhaseRecord) -> ExecutionResult | None:
    """The agent's result as the run's semantics compares it: under ``bird_interact``, its SQL
    after BIRD-Interact's cleaning (like the golden result it is compared with), else as run."""
    return phase.compared if phase.compared is not None else phase.generated


def _comparable(phase: PhaseRecord) -> Score | None:
    """The verdict when the phase's result cannot be compared (None when it can)."""
    if not phase.is_query:
        return Score.not_applicable("management task: results are not compared")
    problem = _answer_problem(phase) or _unusable(compared_result(phase), "generated")
    return Score(0.0, False, detail=problem) if problem else None


def _answer_problem(phase: PhaseRecord) -> str | None:
    """Why the phase has no answer to compare (None when it has one)."""
    if phase.outcome is not None and phase.outcome.value != "scored":
        return f"no answer to score: {phase.outcome.value}"
    if phase.generated is None:
        return "the agent returned no SQL"
    return None


# --------------------------------------------------------------------------- set_match


class SetMatch:
    """BIRD's EX: the generated rows equal a golden result's rows **as sets** — order and
    duplicates ignored, columns by position (names ignored), cells normalised with
    ``compare.normalise_rows`` at ``conditions.decimal`` (no float tolerance beyond that).
    Any golden result may match. An errored or truncated result (either side) never matches;
    two empty results match (flagged ``both_empty``). Not applicable to management tasks."""

    name = "set_match"
    is_metric = False

    def __init__(self, options: dict[str, Any] | None) -> None:
        _no_options(self.name, options)

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        verdict = _comparable(phase)
        if verdict is not None:
            return verdict
        generated = compared_result(phase)
        assert generated is not None
        decimal = phase.conditions.decimal
        gen_set = set(normalise_rows(generated.rows, decimal))

        def compare(golden: ExecutionResult) -> tuple[bool, str]:
            gold_set = set(normalise_rows(golden.rows, decimal))
            if gen_set == gold_set:
                return True, f"same set of {len(gen_set)} distinct rows"
            return False, (f"different sets of rows: {len(gen_set - gold_set)} generated rows not in golden, "
                           f"{len(gold_set - gen_set)} golden rows missing")

        return _any_golden(phase, compare, empty=not gen_set)


def _any_golden(phase: PhaseRecord, compare: Callable[[ExecutionResult], tuple[bool, str]], *, empty: bool) -> Score:
    """Passed when ``compare`` matches any usable golden result (two empty results are flagged
    ``both_empty``); otherwise failed with the first golden result's reason."""
    reasons = []
    for golden in phase.golden:
        problem = _unusable(golden, "golden")
        if problem:
            reasons.append(problem)
            continue
        same, detail = compare(golden)
        if same:
            if empty:
                return Score(1.0, True, detail="both results are empty", flags=("both_empty",))
            return Score(1.0, True, detail=detail)
        reasons.append(detail)
    return Score(0.0, False, detail=reasons[0] if reasons else "no golden result")


# --------------------------------------------------------------------------- exact_match


class ExactMatch:
    """EvalBench's ``exact_match`` (``scorers/exactmatcher.py``, ``ExactMatcher.compare``: the
    golden and generated execution results are equal, ``golden_execution_result ==
    generated_execution_result``). EvalBench's results are lists of rows as column-name → value
    mappings, so here: the same number of rows, **in the same order**, and row by row the same
    mapping of column name to value (column order ignored, names matter; values as the driver
    returned them, compared exactly — no rounding, no tolerance). Any golden result may match.
    Differences from EvalBench: an errored or truncated result (either side) never matches
    (EvalBench compares two failed executions as equal), and two empty results match, flagged
    ``both_empty``. Not applicable to management tasks."""

    name = "exact_match"
    is_metric = False

    def __init__(self, options: dict[str, Any] | None) -> None:
        _no_options(self.name, options)

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        verdict = _comparable(phase)
        if verdict is not None:
            return verdict
        generated = compared_result(phase)
        assert generated is not None
        mine = _as_mappings(generated)

        def compare(golden: ExecutionResult) -> tuple[bool, str]:
            if _as_mappings(golden) == mine:
                return True, f"the same {len(mine)} rows in the same order"
            return False, (f"results differ ({len(generated.rows)} generated rows, {len(golden.rows)} golden rows; "
                           "compared in order, by column name, exactly)")

        return _any_golden(phase, compare, empty=not mine)


def _as_mappings(result: ExecutionResult) -> list[dict[str, Any]]:
    # a later column of the same name wins, as in a Python dict built from the row
    return [dict(zip(result.columns, row, strict=False)) for row in result.rows]


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

    def __init__(self, options: dict[str, Any] | None) -> None:
        options = options or {}
        _no_options(self.name, options, ("ignore_aliases",))
        value = options.get("ignore_aliases", False)
        if not isinstance(value, bool):
            raise _config_error(self.name, f"ignore_aliases must be true or false, got {value!r}", "ignore_aliases")
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

    def __init__(self, options: dict[str, Any] | None) -> None:
        _no_options(self.name, options)

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        if isinstance(phase.sql, str) and phase.sql.strip():
            return Score(1.0, True, detail="the agent returned SQL")
        return Score(0.0, False, detail="the agent returned no SQL")


# --------------------------------------------------------------------------- recall_match


def precision_recall(gen_rows: list[tuple[Hashable, ...]], gold_rows: list[tuple[Hashable, ...]]) -> tuple[float, float, int]:
    """(precision, recall, matched) of two multisets of rows: matched = size of the multiset
    intersection; precision = matched / generated rows; recall = matched / golden rows. An empty
    side gives 1.0 when the other side is empty too, else 0.0 (precision) / 1.0 (recall of an
    empty golden: nothing was missed)."""
    matched = sum((Counter(gen_rows) & Counter(gold_rows)).values())
    if gen_rows:
        precision = matched / len(gen_rows)
    else:
        precision = 1.0 if not gold_rows else 0.0
    recall = matched / len(gold_rows) if gold_rows else 1.0
    return precision, recall, matched


class RecallMatch:
    """Value: the recall of the golden rows in the generated rows, as multisets (columns by
    position, cells normalised at ``conditions.decimal``): recall = matched / golden rows,
    precision = matched / generated rows, matched = the size of the multiset intersection.
    Passed when recall == 1 and precision == 1 (then the results are equal as multisets). With
    several golden results the best one counts (passed first, then recall, then precision).
    An errored or truncated result (either side) scores 0. Two empty results: 1, flagged
    ``both_empty``. Not applicable to management tasks (``phase.is_query`` false)."""

    name = "recall_match"
    is_metric = False

    def __init__(self, options: dict[str, Any] | None) -> None:
        _no_options(self.name, options)

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        verdict = _comparable(phase)
        if verdict is not None:
            return verdict
        generated = compared_result(phase)
        assert generated is not None
        decimal = phase.conditions.decimal
        gen_rows = normalise_rows(generated.rows, decimal)
        best: tuple[bool, float, float, int, int] | None = None
        reasons = []
        for golden in phase.golden:
            golden_problem = _unusable(golden, "golden")
            if golden_problem:
                reasons.append(golden_problem)
                continue
            gold_rows = normalise_rows(golden.rows, decimal)
            precision, recall, matched = precision_recall(gen_rows, gold_rows)
            candidate = (precision == 1.0 and recall == 1.0, recall, precision, matched, len(gold_rows))
            if best is None or candidate[:3] > best[:3]:
                best = candidate
        if best is None:
            return Score(0.0, False, detail=reasons[0] if reasons else "no golden result")
        passed, recall, precision, matched, gold_count = best
        flags = ("both_empty",) if not gen_rows and gold_count == 0 else ()
        detail = (f"precision {precision:.4g} ({matched}/{len(gen_rows)} generated rows in golden), "
                  f"recall {recall:.4g} ({matched}/{gold_count} golden rows returned)")
        return Score(recall, passed, detail=detail, flags=flags)


# --------------------------------------------------------------------------- regexp_matcher


class RegexpMatcher:
    """The generated SQL matches the option ``pattern`` (``re.search``, case-insensitive).
    ``pattern`` is required and must be a valid regular expression (else a config error naming
    ``pattern``). No SQL: failed."""

    name = "regexp_matcher"
    is_metric = False

    def __init__(self, options: dict[str, Any] | None) -> None:
        options = options or {}
        _no_options(self.name, options, ("pattern",))
        pattern = options.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise _config_error(self.name, f"option 'pattern' (a regular expression) is required, got {pattern!r}", "pattern")
        try:
            self.regex = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise _config_error(self.name, f"option 'pattern' is not a valid regular expression: {exc}", "pattern") from None
        self.pattern = pattern

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        if not isinstance(phase.sql, str) or not phase.sql.strip():
            return Score(0.0, False, detail="the agent returned no SQL")
        if self.regex.search(phase.sql):
            return Score(1.0, True, detail=f"matches /{self.pattern}/")
        return Score(0.0, False, detail=f"does not match /{self.pattern}/")


# --------------------------------------------------------------------------- clarification


class Clarification:
    """Main phase only: passed when the agent asked at least one clarification question
    exactly when the item needs clarification (``item.needs_clarification``: it has an
    ambiguity that is not ``non_critical``). Detail: "asked when needed", "no question needed"
    (passed); "needless question", "missing clarification" (failed). Not applicable to the
    follow-up phase."""

    name = "clarification"
    is_metric = False

    def __init__(self, options: dict[str, Any] | None) -> None:
        _no_options(self.name, options)

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        if phase.phase is not Phase.MAIN:
            return Score.not_applicable("clarification is judged on the main phase only")
        asked = (phase.clarifications or 0) > 0
        needed = bool(conversation.item.needs_clarification)
        if asked and needed:
            return Score(1.0, True, detail="asked when needed")
        if not asked and not needed:
            return Score(1.0, True, detail="no question needed")
        if asked:
            return Score(0.0, False, detail="needless question")
        return Score(0.0, False, detail="missing clarification")


# --------------------------------------------------------------------------- latency, tokens


def _phase_replies(conversation: Conversation, phase: PhaseRecord) -> list[Any]:
    return [t.reply for t in conversation.turns if t.phase is phase.phase and t.reply is not None]


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


class Latency:
    """Metric: the sum of the agent's reply ``latency_s`` over the phase's turns (seconds;
    the virtual user's and the database's time are not included)."""

    name = "latency"
    is_metric = True

    def __init__(self, options: dict[str, Any] | None) -> None:
        _no_options(self.name, options)

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        replies = _phase_replies(conversation, phase)
        total = sum(_number(r.latency_s) for r in replies)
        return Score(total, detail=f"{total:.3f} s over {len(replies)} agent replies")


class Tokens:
    """Metric: total tokens of the agent's replies over the phase's turns (``usage.total``, or
    prompt + completion when the adapter left ``total`` at 0). Option ``prices: {prompt: $ per
    1M tokens, completion: $ per 1M tokens}`` adds the cost (prompt tokens × prompt price +
    completion tokens × completion price, / 1e6) to the detail; a missing price counts as 0."""

    name = "tokens"
    is_metric = True

    def __init__(self, options: dict[str, Any] | None) -> None:
        options = options or {}
        _no_options(self.name, options, ("prices",))
        prices = options.get("prices")
        self.prices: dict[str, float] | None = None
        if prices is not None:
            if not isinstance(prices, dict):
                raise _config_error(self.name, "prices must be a mapping {prompt: $ per 1M, completion: $ per 1M}", "prices")
            unknown = sorted(set(prices) - {"prompt", "completion"})
            if unknown:
                raise _config_error(self.name, f"prices takes prompt and completion, got {', '.join(unknown)}", "prices")
            for key, value in prices.items():
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                    raise _config_error(self.name, f"prices.{key} must be a non-negative number, got {value!r}", "prices")
            self.prices = {k: float(prices.get(k, 0.0)) for k in ("prompt", "completion")}

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        prompt = completion = total = 0
        for reply in _phase_replies(conversation, phase):
            usage = reply.usage
            p, c, t = int(_number(usage.prompt)), int(_number(usage.completion)), int(_number(usage.total))
            prompt, completion, total = prompt + p, completion + c, total + (t or p + c)
        detail = f"{total} tokens ({prompt} prompt, {completion} completion)"
        if self.prices is not None:
            cost = (prompt * self.prices["prompt"] + completion * self.prices["completion"]) / 1e6
            detail += f", ${cost:.6f}"
        return Score(float(total), detail=detail)


# --------------------------------------------------------------------------- bird_interact_reward


class BirdInteractReward:
    """Metric: the part of BIRD-Interact's reward earned by THIS phase, so that the per-phase
    values of a conversation add up to its ``reward`` (evalbench.results.journal.record.reward): main
    phase 0.7 when solved at the first try, 0.5 when solved after a debugging attempt; follow-up
    0.3 / 0.2; 0 when not solved. "Solved" is the phase's declared primary verdict (``primary:``),
    which is decided before any metric runs. A phase that ended without an answer (an error or
    timeout outcome) gives 0."""

    name = "bird_interact_reward"
    is_metric = True

    def __init__(self, options: dict[str, Any] | None) -> None:
        _no_options(self.name, options)

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        if phase.phase not in REWARDS:
            return Score.not_applicable(f"no reward for phase {phase.phase}")
        if phase.outcome is not None and phase.outcome.value != "scored":
            return Score(0.0, detail=f"not solved: {phase.outcome.value}")
        verdict = phase.verdict
        if verdict is None:
            return Score(0.0, detail="not judged: no primary scorer applies to this phase")
        name = phase.primary
        if not verdict.passed:
            return Score(0.0, detail=f"not solved ({name} failed)")
        first, debugged = REWARDS[phase.phase]
        value = debugged if phase.debug_used else first
        how = "after debugging" if phase.debug_used else "at the first try"
        return Score(value, detail=f"solved {how} ({name} passed)")
