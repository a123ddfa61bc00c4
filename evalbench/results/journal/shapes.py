"""Checking what a run directory holds against the run schema (:mod:`evalbench.results.schema`) as
it is read: a journal record, a manifest, a summary. A file read from a run directory
(:mod:`~evalbench.results.journal.safe_read`) is checked before any reader touches it, so a value
of the wrong type (a list for an object, a string for a number, null, a count of 10**18, a shard
``1/99999999999``) is refused where it is read
— a journal line is skipped as "not a conversation record", a manifest or summary is a
:class:`~evalbench.core.errors.RunDirError` naming the file and the key — instead of crashing (or
looping) later in whichever reader meets it.

The functions here return the checked dicts (the internal readers use them, and each decides what
a newer ``schema_version`` means to it); :mod:`evalbench.results.journal.typed` returns the models,
and refuses a version it does not read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evalbench.core.errors import RunDirError
from evalbench.core.json_types import json_type
from evalbench.results.journal.safe_read import read_json
from evalbench.results.schema import JournalRecord, Manifest, RunRecord, Summary, SummaryExtra


def record_problem(value: object) -> str | None:
    """Why ``value`` (a parsed journal line) is not a conversation record; None when it is one."""
    if not isinstance(value, dict):
        return "not a JSON object"
    try:
        JournalRecord.model_validate(value)
    except ValidationError as exc:
        key, message = _first_error(exc)
        return f"{key}: {message}"
    return None


def _first_error(exc: ValidationError) -> tuple[str, str]:
    """(the key path, what is wrong) of a validation's first error."""
    error = exc.errors(include_url=False)[0]
    message = str(error["msg"]).removeprefix("Value error, ")
    return ".".join(str(part) for part in error["loc"]), message


def _checked(model: type[RunRecord], run_dir: Path, name: str, what: str, *, missing_ok: bool) -> dict[str, Any] | None:
    where = str(Path(run_dir) / name)
    if missing_ok and Path(run_dir).is_dir() and not os.path.lexists(where):
        return None
    data = read_json(run_dir, name)
    if not isinstance(data, dict):
        raise RunDirError(f"expected a JSON object ({what}), got {json_type(data)}", file=where)
    try:
        model.model_validate(data)
    except ValidationError as exc:
        key, message = _first_error(exc)
        raise RunDirError(f"{message} (in {what})", file=where, key=key) from None
    return data


def read_manifest(run_dir: Path, *, missing_ok: bool = False) -> dict[str, Any]:
    """``run_dir/manifest.json``, checked (:class:`~evalbench.results.schema.Manifest`); ``{}`` when it does not exist
    and ``missing_ok``; anything else wrong is a :class:`RunDirError` naming the file and key."""
    return _checked(Manifest, run_dir, "manifest.json", "a run manifest", missing_ok=missing_ok) or {}


def summary_extra(manifest: Mapping[str, object]) -> dict[str, object]:
    """The run facts of a (checked) manifest that a summary rebuilt from the journal copies: only
    the keys of :class:`~evalbench.results.schema.SummaryExtra` (another key could replace a computed one, e.g. ``scorers``)."""
    extra = manifest.get("summary_extra") or {}
    assert isinstance(extra, dict), "a checked manifest's summary_extra is an object"
    return {key: extra[key] for key in SummaryExtra.model_fields if key in extra}


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """``run_dir/summary.json``, checked (:class:`~evalbench.results.schema.Summary`); None when it does not exist
    (a run that did not finish)."""
    return _checked(Summary, run_dir, "summary.json", "a run summary", missing_ok=True)
