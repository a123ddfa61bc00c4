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

from pathlib import Path
from typing import Any

from evalbench.core.errors import ConfigError

# the journal's repair is the results package's (results/journal/repair.py); named here too for callers
from evalbench.results.journal.repair import RUN_AGAIN as RUN_AGAIN
from evalbench.results.journal.repair import JournalState as JournalState
from evalbench.results.journal.repair import repair_journal as repair_journal

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


def session_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Every config key a resumed session changed, as ``key: old -> new`` (secrets are redacted in
    both snapshots), for that session's entry in the manifest."""
    # where the run lives stays the run's (--resume names it); path notes are not settings
    return config_differences(old, new, ("evalbench_compat", "run_id", "reporting"))
