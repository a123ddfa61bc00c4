"""Streaming dataset loading.

Items are never all held in memory: :meth:`Dataset.scan` makes one pass to count items per
(dialect, database) group and to collect record errors, then each group streams its own items.
This keeps peak memory flat in the number of items.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from array import array
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evalbench.core.errors import DatasetError
from evalbench.core.items import Item, RecordError
from evalbench.dataset.formats import FORMATS, RecordProblem, detect_format, normalise_dialect
from evalbench.dataset.reader import MalformedRecord, iter_json_array, iter_jsonl

Group = tuple[str, str]  # (dialect, database)


@dataclass
class DatasetScan:
    """What one pass over the dataset found."""

    groups: Counter[Group] = field(default_factory=Counter)
    errors: list[RecordError] = field(default_factory=list)
    filtered_out: int = 0  # items excluded on purpose by `query_types`
    format: str = "auto"

    @property
    def total(self) -> int:
        return sum(self.groups.values())


class Dataset:
    def __init__(
        self,
        path: Path,
        format: str = "auto",
        dialects: Sequence[str] = ("postgres",),
        query_types: Sequence[str] | None = None,
    ) -> None:
        self.path = Path(path)
        self.format = format
        self.dialects = list(dialects)
        self.query_types = [q.lower() for q in query_types] if query_types else None
        # After scan(): digests of the (dialect, id) keys seen more than once. Only those ids are
        # then tracked when streaming, so memory does not grow with the number of items.
        self._duplicate_digests: set[int] | None = None
        # After a subset is chosen (evalbench.dataset.subset): the (dialect, id) keys that run
        self.only: set[tuple[str, str]] | None = None
        if not self.path.is_file():
            raise DatasetError("dataset file not found", file=str(self.path))

    def iter_records(self) -> Iterator[Item | RecordError]:
        """Every item and every record error, in file order. Later duplicates of an id are errors."""
        fmt = self.format
        seen: set[tuple[str, str]] = set()
        duplicates = self._duplicate_digests
        raw_records = iter_jsonl(self.path) if self.path.suffix == ".jsonl" else iter_json_array(self.path)
        for record in raw_records:
            if isinstance(record, MalformedRecord):
                yield RecordError(file=str(self.path), line=record.line, message=record.message)
                continue
            if fmt == "auto":
                detected = detect_format(record.data)
                if detected is None:
                    yield RecordError(
                        file=str(self.path), line=record.line, message="cannot tell the dataset format of this record"
                    )
                    continue
                fmt = detected
                self.format = fmt
            source = f"{self.path.name}:{record.line}"
            try:
                items = FORMATS[fmt](record.data, source, self.dialects)
            except RecordProblem as exc:
                yield RecordError(file=str(self.path), line=record.line, message=str(exc), item_id=exc.item_id)
                continue
            except ValueError as exc:  # pydantic validation of the Item itself
                yield RecordError(file=str(self.path), line=record.line, message=str(exc), item_id=_id_of(record.data))
                continue
            except (TypeError, AttributeError, KeyError, IndexError, OverflowError, RecursionError) as exc:
                # a value of an unexpected type the format's reader did not check: still this record's problem
                yield RecordError(file=str(self.path), line=record.line, item_id=_id_of(record.data),
                                  message=f"cannot read this record: {type(exc).__name__}: {exc}")
                continue
            for item in items:
                problem = _out_of_range(item)
                if problem:
                    yield RecordError(file=str(self.path), line=record.line, item_id=item.id, message=problem)
                    continue
                key = (item.dialect, item.id)
                if duplicates is None or _digest(key) in duplicates:
                    if key in seen:
                        yield RecordError(
                            file=str(self.path), line=record.line, item_id=item.id, message=f"duplicate item id {item.id!r}"
                        )
                        continue
                    seen.add(key)
                if not item.database:
                    yield RecordError(file=str(self.path), line=record.line, item_id=item.id, message="item names no database")
                    continue
                problem = database_name_problem(item.database)
                if problem is not None:  # it names a folder of the setup directory: never a path out of it
                    yield RecordError(file=str(self.path), line=record.line, item_id=item.id,
                                      message=f"key 'selected_database' / 'database': {problem}")
                    continue
                yield item

    def dialects_present(self) -> list[str]:
        """Every dialect the file's records carry (whatever ``dialects`` selects): for the error
        of a run whose dialects match none of them."""
        found: set[str] = set()
        raw_records = iter_jsonl(self.path) if self.path.suffix == ".jsonl" else iter_json_array(self.path)
        for record in raw_records:
            if isinstance(record, MalformedRecord) or not isinstance(record.data, dict):
                continue
            data = record.data
            if isinstance(data.get("dialects"), list):  # EvalBench's standard format
                found.update(normalise_dialect(d) for d in data["dialects"] if isinstance(d, str))
            elif detect_format(data) == "bird-interact":
                found.add(normalise_dialect(data["dialect"]) if isinstance(data.get("dialect"), str) else "postgres")
        return sorted(found)

    def nothing_to_run(self) -> str:
        """Why a scan found no item: the dialects (and query types) asked, and those the file has."""
        asked = f"no items to run for dialects {list(self.dialects)}" + (
            f" and query_types {list(self.query_types)}" if self.query_types else "")
        present = self.dialects_present()
        missing = [d for d in present if d not in self.dialects]
        if present and missing and not any(d in present for d in self.dialects):
            return f"{asked}: the file's items are of dialect(s) {', '.join(present)} (set dialects, or use a build of " \
                   "the dataset for the other dialect)"
        return asked

    def _selected(self, item: Item) -> bool:
        return ((self.query_types is None or item.query_type in self.query_types)
                and (self.only is None or (item.dialect, item.id) in self.only))

    def scan(self) -> DatasetScan:
        """Items per group, record errors (duplicate ids included), filtered-out count.

        One pass in the common case: it keeps an 8-byte digest per item instead of every id, and
        only when two digests collide does a second pass find the duplicates exactly.
        """
        self._duplicate_digests = set()  # track no ids during the first pass
        digests = array("Q")
        scan = self._count(digests)
        ordered = sorted(digests)
        self._duplicate_digests = {a for a, b in itertools.pairwise(ordered) if a == b}
        del digests, ordered
        return self._count(None) if self._duplicate_digests else scan

    def _count(self, digests: array[int] | None) -> DatasetScan:
        scan = DatasetScan()
        for record in self.iter_records():
            if isinstance(record, RecordError):
                scan.errors.append(record)
                continue
            if digests is not None:
                digests.append(_digest((record.dialect, record.id)))
            if self._selected(record):
                scan.groups[(record.dialect, record.database)] += 1
            else:
                scan.filtered_out += 1
        scan.format = self.format
        return scan

    def items(self, group: Group | None = None) -> Iterator[Item]:
        """The selected items of ``group`` (all groups when None), streamed."""
        for record in self.iter_records():
            if isinstance(record, Item) and self._selected(record) and (group is None or (record.dialect, record.database) == group):
                yield record


MAX_DECIMAL = 100  # conditions.decimal: places to round to; more would make the comparison itself huge


def _out_of_range(item: Item) -> str | None:
    follow_up = item.follow_up.conditions if item.follow_up is not None else None
    for key, conditions in (("conditions", item.conditions), ("follow_up.conditions", follow_up)):
        if conditions is not None and conditions.decimal > MAX_DECIMAL:
            return f"key {key}.decimal: {conditions.decimal} is out of range (-1 for no rounding, up to {MAX_DECIMAL} places)"
    return None


def _id_of(data: object) -> str | None:
    for key in ("instance_id", "id"):
        value = data.get(key) if isinstance(data, dict) else None
        if isinstance(value, str):
            return value
    return None


def _digest(key: tuple[str, str]) -> int:
    return int.from_bytes(hashlib.blake2b("\0".join(key).encode(), digest_size=8).digest(), "little")


def load_items(path: Path | str, format: str = "auto", dialects: Sequence[str] = ("postgres",)) -> tuple[list[Item], list[RecordError]]:
    """Load a whole (small) dataset into memory: for tests, notebooks and `validate`."""
    items: list[Item] = []
    errors: list[RecordError] = []
    for record in Dataset(Path(path), format, dialects).iter_records():
        (errors if isinstance(record, RecordError) else items).append(record)  # type: ignore[arg-type]  # the isinstance test picks the list of the record's type
    return items, errors


def database_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a database name (it names one folder inside the setup directory:
    not empty, ``.`` or ``..``, no path separator, NUL or absolute path), or None."""
    separators = {"/", "\\", os.sep} | ({os.altsep} if os.altsep else set())
    if not name or name in (".", "..") or "\x00" in name or any(s in name for s in separators) or os.path.isabs(name):
        return f"database name {name!r} is not a single folder name (not empty, '.' or '..', no '/', '\\' or NUL)"
    return None
