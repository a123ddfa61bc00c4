"""Resuming a run: may this config continue that run directory, and which conversations are done.

A run may be resumed with settings that do not change what a conversation's result would be:
threads, in-flight cap, output place, run id and retry policies (the *error policy*). Anything
else (dataset, databases, agent, virtual user, scorers, seed, limits) makes the finished
conversations incomparable with the new ones, and is refused with the list of differences.

The journal is repaired first: a line cut short by a crash (SIGKILL, power loss) and the
conversations recorded as ``cancelled`` or ``db_error`` (the run was interrupted, or its database
was unreachable: nothing was learnt about the agent) are dropped, so they run again; every other
conversation — keyed by (dialect, item id), as :func:`evalbench.results.read_journal` keys it — is
kept exactly once, by its last record (as read_journal counts it).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from evalbench.core.errors import ConfigError
from evalbench.results.journal.files import JOURNAL, OutputError, create_new
from evalbench.results.journal.lines import conversation_key, decode_record
from evalbench.results.journal.safe_read import journal_lines, open_run_file

# Outcomes that say nothing about the agent: their conversations run again on resume.
RUN_AGAIN = frozenset({"cancelled", "db_error"})
# With --retry-errors, every error outcome runs again too (a flaky endpoint, a slow model).
RETRY_ERRORS = RUN_AGAIN | {"agent_error", "vuser_error", "timeout"}
# Dotted config keys that may change on resume (prefix match). A changed subset runs the newly
# chosen items; more trials run the trials not yet in the journal.
MAY_CHANGE = ("run_id", "runners", "max_in_flight", "reporting", "model_config.retry", "vuser_model_config.retry",
              "subset", "trials", "evalbench_compat.paths")
# ... and with --retry-errors, how the agent and the virtual user are reached and how long they
# may take (not which agent or model it is): the errors were the endpoint's, not the agent's.
RETRY_MAY_CHANGE = (*tuple(f"{part}.{key}" for part in ("model_config", "vuser_model_config") for key in ("adkapi_server_url", "base_url", "headers", "api_key_env", "api_key", "connect_timeout_s", "read_timeout_s", "timeout_s", "execs_per_minute", "max_concurrency", "http_options", "project", "location")), "conversation_timeout_s")


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, sub in value.items():
            out |= _flatten(sub, f"{prefix}.{key}" if prefix else str(key))
        return out or {prefix: {}}
    return {prefix: value}


def config_differences(old: dict[str, Any], new: dict[str, Any], may_change: tuple[str, ...] = MAY_CHANGE) -> list[str]:
    """The config keys whose values differ (other than those in ``may_change``, by prefix)."""
    a, b = _flatten(old), _flatten(new)
    differences = []
    for key in sorted(set(a) | set(b)):
        if any(key == p or key.startswith(p + ".") for p in may_change):
            continue
        if a.get(key, "<unset>") != b.get(key, "<unset>"):
            differences.append(f"{key}: {a.get(key, '<unset>')!r} -> {b.get(key, '<unset>')!r}")
    return differences


def check_resumable(manifest: dict[str, Any], snapshot: dict[str, Any], dataset_sha256: str, run_dir: Path,
                    *, retry_errors: bool = False) -> None:
    """Raise :class:`ConfigError` listing why ``run_dir`` cannot be resumed with this config."""
    may_change = MAY_CHANGE + (RETRY_MAY_CHANGE if retry_errors else ())
    old = manifest.get("config") or {}
    problems = config_differences(old, snapshot, may_change)
    if int(snapshot.get("trials") or 1) < int(old.get("trials") or 1):
        problems.append(f"trials: {old.get('trials')} -> {snapshot.get('trials')} (trials may grow on resume, not shrink)")
    recorded = (manifest.get("dataset") or {}).get("sha256")
    if recorded and recorded != dataset_sha256:
        problems.insert(0, f"the dataset file changed (sha256 {recorded[:12]}... -> {dataset_sha256[:12]}...)")
    if problems:
        listed = "\n  ".join(problems[:20]) + (f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else "")
        raise ConfigError(f"cannot resume {run_dir}: the config differs from the run's in ways that change results:\n  "
                          f"{listed}\nStart a new run instead (or restore the original settings).")


@dataclass
class JournalState:
    # (dialect, item id) of every conversation whose record is kept: the key of
    # :func:`evalbench.results.read_journal` (an item id may recur in another dialect)
    done: set[tuple[Any, str, int]] = field(default_factory=set)
    kept: int = 0
    dropped_cancelled: int = 0
    dropped_partial: int = 0  # lines cut short by a crash, or not a conversation record
    dropped_duplicates: int = 0  # records superseded by a later record of the same conversation


def _decode(raw: bytes | None) -> dict[str, Any] | None:
    """The conversation record of a complete journal line, or None (too long, cut short, not JSON, not a record)."""
    if raw is None or not raw.endswith(b"\n"):
        return None  # the last line, cut short by a crash
    return decode_record(raw)


def session_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Every config key a resumed session changed, as ``key: old -> new`` (secrets are redacted in
    both snapshots), for that session's entry in the manifest."""
    # where the run lives stays the run's (--resume names it); path notes are not settings
    return config_differences(old, new, ("evalbench_compat", "run_id", "reporting"))


def repair_journal(run_dir: Path, on_record: Callable[[dict[str, Any]], None],
                   run_again: frozenset[str] = RUN_AGAIN) -> JournalState:
    """Rewrite the journal without partial lines, cancelled conversations and duplicates, calling
    ``on_record`` for each record kept (streaming: the records are not held in memory).

    A conversation is keyed as :func:`evalbench.results.read_journal` keys it — (dialect, item
    id) — and, recorded more than once, is its **last** record, as read_journal counts it; when that
    last record is ``cancelled`` or ``db_error`` the conversation runs again. The journal is written
    to a temporary file renamed into place: an OS error (a full disk) raises
    :class:`~evalbench.results.journal.files.OutputError`, removes the temporary file and leaves the
    journal as it was."""
    path = run_dir / JOURNAL
    state = JournalState()
    tmp = path.with_name(f".{JOURNAL}.resume")
    try:
        with open_run_file(run_dir, JOURNAL, missing_ok=True) as source:
            if source is None:
                return state
            kept_offsets = _last_records(source, state)
            # Second pass: copy the kept records, in journal order.
            with os.fdopen(create_new(tmp), "wb") as target:
                for here, raw in journal_lines(source):
                    if here not in kept_offsets:
                        continue
                    record = _decode(raw)
                    if record is None:  # the journal changed under us: treat as cut short
                        state.dropped_partial += 1
                        continue
                    if record.get("outcome") in run_again:
                        state.dropped_cancelled += 1
                        continue
                    state.done.add(conversation_key(record))
                    state.kept += 1
                    assert raw is not None  # it decoded
                    target.write(raw)
                    try:
                        on_record(record)
                    except OSError as exc:  # not the journal's: passed on as it is, below
                        raise _CallbackError(exc) from exc
                target.flush()
                os.fsync(target.fileno())
        os.replace(tmp, path)
    except _CallbackError as wrapped:
        _remove(tmp)
        raise wrapped.error from None
    except OSError as exc:
        _remove(tmp)
        raise OutputError(path, exc, temporary=tmp) from None
    except BaseException:
        _remove(tmp)
        raise
    return state


def _last_records(source: BinaryIO, state: JournalState) -> set[int]:
    """First pass: the offset of each conversation's last record (the others are counted as dropped)."""
    last: dict[tuple[Any, str, int], int] = {}
    records = 0
    for here, raw in journal_lines(source):
        if raw is not None and not raw.strip():
            continue
        record = _decode(raw)
        if record is None:
            state.dropped_partial += 1
            continue
        records += 1
        last[conversation_key(record)] = here
    state.dropped_duplicates = records - len(last)
    return set(last.values())


class _CallbackError(Exception):
    """An OS error raised by ``on_record`` (a report's file), not by the journal's repair."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def _remove(tmp: Path) -> None:
    with contextlib.suppress(OSError):
        tmp.unlink(missing_ok=True)
