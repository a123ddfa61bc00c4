"""Reading a predictions file: item id -> the SQL predicted for its main phase (and follow-up).

Shapes (docs/rescore.md):

- a JSON object ``{item_id: sql}``; a value may also be ``[main_sql, follow_up_sql]`` or an object
  ``{"sql": ..., "follow_up_sql": ...}``;
- a JSON list, or JSONL, of records: the id under ``instance_id`` / ``id`` / ``item_id``, the SQL
  under ``pred_sqls`` / ``sql`` / ``pred_sql`` / ``predicted_sql`` / ``generated_sql``, and the
  follow-up's under ``follow_up_sql``. A list of SQL texts in a record is ONE script (BIRD-Interact's
  ``pred_sqls``: ``eval_bird_interact_batch.py::batch_eval`` runs them in order, and reads a string as
  ``ensure_list`` does); an id ``X:follow_up`` is X's follow-up (our ``evals.csv``);
- a CSV file with the same columns (EvalBench's ``evals.csv``: ``id``, ``generated_sql``).

``format`` narrows the keys: ``bird_interact`` (``instance_id`` + ``pred_sqls``), ``evalbench``
(``id`` + ``generated_sql``); ``jsonl`` and ``auto`` accept all of them.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Final, Literal, TypeAlias

from evalbench.core.errors import ConfigError

ID_KEYS = {"bird_interact": ("instance_id",), "evalbench": ("id",)}
SQL_KEYS = {"bird_interact": ("pred_sqls",), "evalbench": ("generated_sql",)}
ANY_ID = ("instance_id", "id", "item_id")
ANY_SQL = ("pred_sqls", "sql", "pred_sql", "predicted_sql", "generated_sql")
FOLLOW_UP_KEY = "follow_up_sql"
FOLLOW_UP_SUFFIX = ":follow_up"


class _Absent(Enum):
    ABSENT = "absent"


_ABSENT: Final = _Absent.ABSENT  # no SQL given for that phase (unlike a blank prediction, None)
# One phase's prediction as read: its SQL, None (a blank prediction) or _ABSENT
_Read: TypeAlias = "str | Literal[_Absent.ABSENT] | None"


@dataclass
class Predictions:
    """What a predictions file gives: the SQL of each phase by item id (None: a blank prediction)."""

    main: dict[str, str | None] = field(default_factory=dict)
    follow_up: dict[str, str | None] = field(default_factory=dict)
    where: dict[tuple[str, str], str] = field(default_factory=dict)  # (phase, id) -> "file:line", for duplicates


def read_predictions(path: Path, fmt: str = "auto", *, follow_up_file: Path | None = None) -> Predictions:
    """Read ``path`` (and ``follow_up_file``, whose predictions are the follow-ups'); a malformed
    file is a :class:`ConfigError` naming the file, the line and the key."""
    out = Predictions()
    for line, entry in _entries(path, fmt):
        _add(out, path, line, entry, fmt, phase=None)
    if follow_up_file is not None:
        for line, entry in _entries(follow_up_file, fmt):
            _add(out, follow_up_file, line, entry, fmt, phase="follow_up")
    if not out.main and not out.follow_up:
        raise ConfigError("the file holds no prediction", file=str(path), key="predictions_file")
    return out


def _entries(path: Path, fmt: str) -> Iterator[tuple[int | None, object]]:
    """(line, entry) of each prediction: a record, or an (id, value) pair of a JSON object."""
    if path.suffix.lower() == ".csv":
        yield from _csv_rows(path)
        return
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the predictions file: {exc}", file=str(path), key="predictions_file") from None
    data: object = None
    if path.suffix.lower() != ".jsonl":
        try:
            data = json.loads(text)
        except ValueError:
            data = None  # JSONL, read line by line below
    if isinstance(data, dict) and not _looks_like_record(data, fmt):
        if fmt in ID_KEYS:
            raise ConfigError(f"format {fmt} expects records with {ID_KEYS[fmt][0]!r}, got a JSON object of item ids",
                              file=str(path), key="format")
        yield from ((None, (str(k), v)) for k, v in data.items())
    elif isinstance(data, (dict, list)):
        yield from ((None, record) for record in (data if isinstance(data, list) else [data]))
    else:
        yield from _jsonl(path, text)


def _jsonl(path: Path, text: str) -> Iterator[tuple[int | None, object]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"not valid JSON ({exc})", file=str(path), line=number) from None


def _csv_rows(path: Path) -> Iterator[tuple[int | None, object]]:
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            for row in reader:
                yield reader.line_num, {k: v for k, v in row.items() if k is not None}
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(f"cannot read the predictions CSV: {exc}", file=str(path)) from None


def _looks_like_record(data: Mapping[str, object], fmt: str) -> bool:
    """A one-line JSONL file parses as one JSON object: a record, not an {id: sql} mapping."""
    ids, sqls = ID_KEYS.get(fmt, ANY_ID), SQL_KEYS.get(fmt, ANY_SQL)
    return any(isinstance(data.get(k), (str, int)) for k in ids) and any(k in data for k in sqls)


def _add(out: Predictions, path: Path, line: int | None, entry: object, fmt: str, phase: str | None) -> None:
    where = f"{path}:{line}" if line is not None else str(path)
    item_id: str
    main: _Read
    follow_up: _Read
    if isinstance(entry, tuple):  # {id: value}
        item_id, value = entry
        main, follow_up = _mapping_value(value, path, item_id)
    else:
        item_id, main, follow_up = _record(entry, path, line, fmt)
    if item_id.endswith(FOLLOW_UP_SUFFIX) and fmt != "bird_interact":
        item_id, phase = item_id[: -len(FOLLOW_UP_SUFFIX)], "follow_up"
    if phase == "follow_up":  # a follow-up file's record, or an id X:follow_up: its SQL is the follow-up's
        sql = main if main is not _ABSENT else follow_up
        if sql is not _ABSENT:  # always: a prediction without SQL for either phase was refused
            _put(out, "follow_up", item_id, sql, where, path, line)
        return
    if main is not _ABSENT:
        _put(out, "main", item_id, main, where, path, line)
    if follow_up is not _ABSENT:
        _put(out, "follow_up", item_id, follow_up, where, path, line)


def _put(out: Predictions, phase: str, item_id: str, sql: str | None, where: str, path: Path, line: int | None) -> None:
    table = out.main if phase == "main" else out.follow_up
    if item_id in table:
        raise ConfigError(f"a second {phase} prediction for item {item_id!r} (the first: {out.where[(phase, item_id)]})",
                          file=str(path), line=line)
    table[item_id] = sql
    out.where[(phase, item_id)] = where


def _mapping_value(value: object, path: Path, item_id: str) -> tuple[_Read, _Read]:
    if isinstance(value, list):  # [main_sql, follow_up_sql]
        if not 1 <= len(value) <= 2 or not all(v is None or isinstance(v, str) for v in value):
            raise ConfigError("expected an SQL text, or a list [main_sql, follow_up_sql]", file=str(path), key=item_id)
        return _sql(value[0], path, None, item_id), _sql(value[1], path, None, item_id) if len(value) == 2 else _ABSENT
    if isinstance(value, dict):
        _, main, follow_up = _record(value | {"item_id": item_id}, path, None, "auto")
        return main, follow_up
    if value is None or isinstance(value, str):
        return _sql(value, path, None, item_id), _ABSENT
    raise ConfigError(f"expected an SQL text, got {type(value).__name__}", file=str(path), key=item_id)


def _record(record: object, path: Path, line: int | None, fmt: str) -> tuple[str, _Read, _Read]:
    if not isinstance(record, dict):
        raise ConfigError(f"expected a JSON object (a prediction record), got {type(record).__name__}", file=str(path), line=line)
    ids, sqls = ID_KEYS.get(fmt, ANY_ID), SQL_KEYS.get(fmt, ANY_SQL)
    id_key = next((k for k in ids if record.get(k) not in (None, "")), None)
    if id_key is None or isinstance(record[id_key], (dict, list, bool)):
        raise ConfigError(f"a prediction needs an item id under {' or '.join(ids)}", file=str(path), line=line,
                          key=id_key)
    sql_key = next((k for k in sqls if k in record), None)
    follow_up = _sql(record[FOLLOW_UP_KEY], path, line, FOLLOW_UP_KEY) if fmt not in ID_KEYS and FOLLOW_UP_KEY in record else _ABSENT
    if sql_key is None and follow_up is _ABSENT:
        raise ConfigError(f"item {record[id_key]}: the prediction needs its SQL under {' or '.join(sqls)}",
                          file=str(path), line=line)
    main = _sql(record[sql_key], path, line, sql_key) if sql_key is not None else _ABSENT
    return str(record[id_key]), main, follow_up


def _sql(value: object, path: Path, line: int | None, key: str) -> str | None:
    """One phase's SQL: a text, or a list of statements run as one script (BIRD-Interact's
    ``pred_sqls``; a text that is a JSON list is that list, as ``ensure_list`` reads it)."""
    if isinstance(value, str) and key == "pred_sqls" and value.strip().startswith("["):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            value = parsed
    if isinstance(value, list):
        if not all(isinstance(s, str) for s in value):
            raise ConfigError("expected a list of SQL texts", file=str(path), line=line, key=key)
        statements = [s.strip().rstrip(";").strip() for s in value if s.strip()]
        # a statement whose last line is a -- comment keeps a line end before the next ``;`` (the
        # last statement is kept as written: BIRD-Interact's cleaning reads a line end)
        last = len(statements) - 1
        return ";\n".join(s + "\n" if i < last and "--" in s.splitlines()[-1] else s
                           for i, s in enumerate(statements)) or None
    if value is None or isinstance(value, str):
        return value if value is None or value.strip() else None
    raise ConfigError(f"expected an SQL text, got {type(value).__name__}", file=str(path), line=line, key=key)
