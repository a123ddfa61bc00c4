"""The summary.json of ``--baseline RUN_DIR``, checked where the gates read it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import NoReturn

from evalbench.core.errors import ConfigError, RunDirError
from evalbench.core.json_types import json_type
from evalbench.results.journal.safe_read import MAX_JSON_BYTES, open_run_file, too_deep

HINT = "; is --baseline a run directory written by evalbench? (`evalbench report RUN_DIR` rewrites its summary.json)"


def read_baseline(path: Path) -> dict[str, object]:
    """The baseline's summary.json, checked where the gates read it: anything else (unreadable,
    not UTF-8, not JSON, not an object, a value of the wrong type) is a ConfigError naming the
    file (and its line or key), exit 2 — never a traceback."""
    where = str(path)
    data = _parse(_read(path), where)
    if not isinstance(data, dict):
        raise ConfigError(f"--baseline: expected a JSON object (a run summary), got {json_type(data)}{HINT}", file=where)
    check_baseline_shape(data, where)
    return data


def _read(path: Path) -> bytes:
    where = str(path)
    try:  # a regular file of the run directory, read up to a cap (a FIFO or /dev/zero would never end)
        with open_run_file(path.parent, path.name, max_bytes=MAX_JSON_BYTES) as handle:
            assert handle is not None
            return handle.read(MAX_JSON_BYTES + 1)
    except RunDirError as exc:
        raise ConfigError(f"--baseline: {exc.message}", file=where) from None
    except OSError as exc:
        raise ConfigError(f"--baseline: cannot read the file: {exc.strerror or exc}", file=where) from None


def _parse(raw: bytes, where: str) -> object:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--baseline: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}){HINT}",
                          file=where) from None
    try:
        data: object = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--baseline: not valid JSON (column {exc.colno}: {exc.msg}){HINT}",
                          file=where, line=exc.lineno) from None
    except RecursionError:
        raise ConfigError(f"--baseline: not valid JSON (nested too deeply){HINT}", file=where) from None
    if too_deep(data):
        raise ConfigError(f"--baseline: not valid JSON (nested too deeply){HINT}", file=where)
    return data


def check_baseline_shape(data: dict[str, object], where: str) -> None:
    """The keys of a summary the gates and the scoring check read must have their types."""

    def fail(key: str, expected: str, value: object) -> NoReturn:
        raise ConfigError(f"--baseline: expected {expected}, got {json_type(value)}", file=where, key=key)

    def mapping(value: object, key: str, *, null: bool = True) -> dict[str, object]:
        if value is None and null:
            return {}
        if not isinstance(value, dict):
            fail(key, "an object" + (" or null" if null else ""), value)
        return value

    def number(holder: dict[str, object], name: str, key: str) -> None:
        value = holder.get(name)
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            fail(f"{key}.{name}", "a finite number or null", value)

    mapping(data.get("scoring"), "scoring")
    for phase, entry in mapping(data.get("success"), "success").items():
        number(mapping(entry, f"success.{phase}"), "rate", f"success.{phase}")
    for scorer, phases in mapping(data.get("scorers"), "scorers").items():
        for phase, tally in mapping(phases, f"scorers.{scorer}", null=False).items():
            tally = mapping(tally, f"scorers.{scorer}.{phase}")
            number(tally, "rate", f"scorers.{scorer}.{phase}")
            number(tally, "mean", f"scorers.{scorer}.{phase}")
    number(mapping(data.get("conversation"), "conversation"), "mean_reward", "conversation")
    completeness = mapping(data.get("completeness"), "completeness")
    reasons = completeness.get("reasons")
    if reasons is not None and (not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons)):
        fail("completeness.reasons", "an array of strings or null", reasons)
