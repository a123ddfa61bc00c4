"""One function per dataset format: a raw record (a dict) to typed :class:`Item` objects.

Problems raise :class:`RecordProblem` naming the key, which the loader turns into a
:class:`RecordError` with file and line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from evalbench.core.items import Ambiguity, Conditions, FollowUp, Item


class RecordProblem(ValueError):
    def __init__(self, message: str, item_id: str | None = None) -> None:
        super().__init__(message)
        self.item_id = item_id


# Dialect names as EvalBench and its users spell them, mapped to ours (dataset records, the run
# config's ``dialects`` and each db config's ``dialect`` are all normalised with this). Products
# (alloydb, cloudsql) are not spellings of a dialect: a dataset may carry them as dialects of
# their own (EvalBench's AlloyDB db configs say `db_type: alloydb`, `dialect: postgres`).
DIALECT_ALIASES = {"postgresql": "postgres", "pg": "postgres", "psql": "postgres", "postgre": "postgres"}


def normalise_dialect(name: str) -> str:
    """``postgresql`` (EvalBench's spelling), ``PostgreSQL``, ``pg``... -> ``postgres``."""
    key = name.strip().lower()
    return DIALECT_ALIASES.get(key, key)


def detect_format(record: object) -> str | None:
    if isinstance(record, dict):
        if "instance_id" in record or "sol_sql" in record:
            return "bird-interact"
        if "nl_prompt" in record or "golden_sql" in record:
            return "evalbench"
    return None


# --------------------------------------------------------------------------- helpers


def _str(raw: dict[str, object], key: str, *, required: bool = True, default: str | None = None) -> str | None:
    value = raw.get(key)
    if value is None:
        if required:
            raise RecordProblem(f"key {key!r} is missing")
        return default
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise RecordProblem(f"key {key!r}: expected a string, got {type(value).__name__}")
    return value


def _str_list(value: object, key: str, *, allow_string: bool = True) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) and allow_string:
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RecordProblem(f"key {key!r}: expected a list of strings")
    return list(value)


def _sql_list(value: object, key: str) -> list[str]:
    """BIRD-Interact's ``sol_sql``: a list of statements, or a string — which its evaluator reads
    as a JSON list when it is one (``eval_bird_interact_batch.py::ensure_list``), else as one SQL."""
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, list) and all(isinstance(v, str) for v in parsed):
            return parsed
    return _str_list(value, key)


def _conditions(value: object, key: str) -> Conditions:
    if value is None:
        return Conditions()
    if not isinstance(value, dict):
        raise RecordProblem(f"key {key!r}: expected a mapping with order, distinct, decimal")
    unknown = set(value) - {"order", "distinct", "decimal"}
    if unknown:
        raise RecordProblem(f"key {key!r}: unknown condition(s) {', '.join(sorted(unknown))}")
    decimal = value.get("decimal", -1)
    if decimal is None:
        decimal = -1
    if isinstance(decimal, bool) or not isinstance(decimal, int):
        raise RecordProblem(f"key {key}.decimal: expected an integer, got {decimal!r}")
    for flag in ("order", "distinct"):
        if not isinstance(value.get(flag, False), bool):
            raise RecordProblem(f"key {key}.{flag}: expected true or false, got {value.get(flag)!r}")
    return Conditions(order=value.get("order", False), distinct=value.get("distinct", False), decimal=decimal)


def _ambiguities(raw: dict[str, object]) -> list[Ambiguity]:
    out: list[Ambiguity] = []
    uqa = raw.get("user_query_ambiguity") or {}
    if not isinstance(uqa, dict):
        raise RecordProblem("key 'user_query_ambiguity': expected a mapping")
    sources: list[tuple[str, str, object]] = [
        ("critical", "user_query_ambiguity.critical_ambiguity", uqa.get("critical_ambiguity")),
        ("non_critical", "user_query_ambiguity.non_critical_ambiguity", uqa.get("non_critical_ambiguity")),
        ("knowledge", "knowledge_ambiguity", raw.get("knowledge_ambiguity")),
    ]
    for kind, key, entries in sources:
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise RecordProblem(f"key {key!r}: expected a list")
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("term"), str):
                raise RecordProblem(f"key {key}[{i}]: expected a mapping with a 'term' string")
            snippet = entry.get("sql_snippet")
            knowledge = entry.get("deleted_knowledge")
            out.append(
                Ambiguity(
                    term=entry["term"],
                    sql_snippet=snippet if isinstance(snippet, str) else None,
                    kind=kind,
                    type=entry.get("type") if isinstance(entry.get("type"), str) else None,
                    is_mask=bool(entry.get("is_mask", False)),
                    knowledge_id=knowledge if isinstance(knowledge, int) and not isinstance(knowledge, bool) else None,
                )
            )
    return out


# --------------------------------------------------------------------------- BIRD-Interact


def bird_interact_items(raw: object, source: str, dialects: Iterable[str]) -> list[Item]:
    """A BIRD-Interact record: one item for its dialect (the optional key ``dialect``, PostgreSQL
    when absent) when that dialect is requested, else none."""
    if not isinstance(raw, dict):
        raise RecordProblem(f"expected a JSON object, got {type(raw).__name__}")
    item_id = _str(raw, "instance_id")
    try:
        golden = _sql_list(raw.get("sol_sql"), "sol_sql")
        if not golden:
            raise RecordProblem("key 'sol_sql' is missing or empty")
        follow_up = None
        fu = raw.get("follow_up")
        if fu:
            if not isinstance(fu, dict):
                raise RecordProblem("key 'follow_up': expected a mapping")
            fu_golden = _sql_list(fu.get("sol_sql"), "follow_up.sol_sql")
            if not fu_golden:
                raise RecordProblem("key 'follow_up.sol_sql' is missing or empty")
            follow_up = FollowUp(
                question=_str(fu, "query") or "",
                golden_sql=fu_golden,
                conditions=_conditions(fu.get("conditions"), "follow_up.conditions"),
                category=_str(fu, "category", required=False, default="Query") or "Query",
                type=_str(fu, "type", required=False),
                external_knowledge=list(fu.get("external_knowledge") or []),
                test_cases=_str_list(fu.get("test_cases"), "follow_up.test_cases"),
            )
        category = _str(raw, "category", required=False, default="Query") or "Query"
        # BIRD-Interact's SQL is PostgreSQL; a record transpiled to another engine says which
        # (datasets/demo/greenleaf_sqlite.jsonl carries "dialect": "sqlite").
        dialect = normalise_dialect(_str(raw, "dialect", required=False, default="postgres") or "postgres")
        if dialect not in dialects:
            return []
        return [
            Item(
                id=item_id or "",
                database=_str(raw, "selected_database") or "",
                dialect=dialect,
                format="bird-interact",
                question=_str(raw, "query") or "",
                ambiguous_question=_str(raw, "amb_user_query", required=False),
                ambiguities=_ambiguities(raw),
                golden_sql=golden,
                conditions=_conditions(raw.get("conditions"), "conditions"),
                conditions_explicit="conditions" in raw,
                category=category,
                query_type="dql" if category == "Query" else "dml",
                difficulty=_str(raw, "difficulty_tier", required=False),
                preprocess_sql=_str_list(raw.get("preprocess_sql"), "preprocess_sql"),
                clean_up_sqls=_str_list(raw.get("clean_up_sqls"), "clean_up_sqls"),
                test_cases=_str_list(raw.get("test_cases"), "test_cases"),
                external_knowledge=list(raw.get("external_knowledge") or []),
                follow_up=follow_up,
                other={k: raw[k] for k in ("high_level",) if k in raw},
                source=source,
            )
        ]
    except RecordProblem as exc:
        exc.item_id = item_id
        raise


# --------------------------------------------------------------------------- EvalBench


def evalbench_items(raw: object, source: str, dialects: Iterable[str]) -> list[Item]:
    """An EvalBench standard-format record: one item per requested dialect it supports."""
    if not isinstance(raw, dict):
        raise RecordProblem(f"expected a JSON object, got {type(raw).__name__}")
    item_id = _str(raw, "id")
    try:
        golden = raw.get("golden_sql")
        if not isinstance(golden, dict):
            raise RecordProblem("key 'golden_sql': expected a mapping of dialect to SQL list")
        golden = _by_dialect(golden)
        item_dialects = raw.get("dialects") or list(golden)
        if not isinstance(item_dialects, list) or not all(isinstance(d, str) for d in item_dialects):
            raise RecordProblem("key 'dialects': expected a list")
        item_dialects = [normalise_dialect(d) for d in item_dialects]
        query_type = (_str(raw, "query_type", required=False, default="dql") or "dql").lower()
        tags = raw.get("tags") or []
        other = raw.get("other") or {}
        items = []
        for dialect in dialects:
            if dialect not in item_dialects:
                continue
            sqls = _str_list(golden.get(dialect), f"golden_sql.{dialect}")
            if not sqls:
                raise RecordProblem(f"key 'golden_sql.{dialect}' is missing or empty")
            items.append(
                Item(
                    id=item_id or "",
                    database=_str(raw, "database") or "",
                    dialect=dialect,
                    format="evalbench",
                    question=_str(raw, "nl_prompt") or "",
                    golden_sql=sqls,
                    category="Query" if query_type == "dql" else "Management",
                    query_type=query_type,
                    preprocess_sql=_per_dialect(raw.get("setup_sql"), dialect, "setup_sql"),
                    clean_up_sqls=_per_dialect(raw.get("cleanup_sql"), dialect, "cleanup_sql"),
                    eval_query=[q for q in _per_dialect(raw.get("eval_query"), dialect, "eval_query", allow_null=True) if q],
                    tags=[str(t) for t in tags] if isinstance(tags, list) else [str(tags)],
                    other=other if isinstance(other, dict) else {"other": other},
                    source=source,
                )
            )
        return items
    except RecordProblem as exc:
        exc.item_id = item_id
        raise


def _per_dialect(value: object, dialect: str, key: str, allow_null: bool = False) -> list[str]:
    if value is None or value == {}:
        return []
    if not isinstance(value, dict):
        raise RecordProblem(f"key {key!r}: expected a mapping of dialect to SQL list")
    entries = _by_dialect(value).get(dialect) or []
    if allow_null and isinstance(entries, list):
        entries = [e for e in entries if e is not None]
    return _str_list(entries, f"{key}.{dialect}")


def _by_dialect(mapping: dict[object, object]) -> dict[object, object]:
    """A per-dialect mapping keyed by our dialect names (``postgresql:`` is ``postgres``)."""
    return {normalise_dialect(k) if isinstance(k, str) else k: v for k, v in mapping.items()}


FORMATS = {"bird-interact": bird_interact_items, "evalbench": evalbench_items}
