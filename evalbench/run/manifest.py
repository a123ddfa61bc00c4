"""What a run directory's manifest.json records of the run that wrote it: versions, the command
line with secrets redacted, the config snapshot and its fingerprint, the dataset's hash, the
agent, virtual user and scorers; and, on ``--resume``, the session appended to the first one's."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import platform
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

from evalbench import __version__
from evalbench.core.redaction import redact, redact_arg
from evalbench.dataset import Dataset
from evalbench.results.schema import SCHEMA_VERSION
from evalbench.run.plan import Identity
from evalbench.run.resume import session_changes


def make_run_id(source: Path | None) -> str:
    """A new run's id: the time, the config file's name and a random suffix."""
    stem = source.stem if source else "run"
    return f"{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{stem}-{secrets.token_hex(2)}"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def git_sha() -> str | None:
    try:
        result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None if result.returncode == 0 else None


def build_manifest(identity: Identity, run_id: str, dataset: Dataset, scan: Any, agent: dict[str, Any], vuser: dict[str, Any],
              dataset_sha256: str, metric_scorers: list[str]) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    packages: dict[str, str | None] = {}
    for name in ("sqlglot", "psycopg", "sqlalchemy", "pydantic", "pgserver", "google-genai", "httpx"):
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            packages[name] = None
    # one more pass over everything (the agent's and virtual user's descriptions, paths...): the
    # config snapshot and the command are redacted already, a secret anywhere else is too
    return redact({
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(),
        "evalbench_version": __version__,
        "git_sha": git_sha(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": packages,
        "command": [os.path.basename(sys.argv[0])] + [redact_arg(a) for a in sys.argv[1:]],
        "config_file": identity.where,
        "config": identity.snapshot(),
        "config_fingerprint": identity.fingerprint,
        "seed": identity.seed,
        "dataset": {"path": str(dataset.path), "sha256": dataset_sha256, "format": scan.format,
                    "items": scan.total, "groups": {f"{d}/{n}": c for (d, n), c in sorted(scan.groups.items())},
                    "record_errors": len(scan.errors)},
        "agent": agent,
        "vuser": vuser,
        "scorers": list(identity.scorers),
        "metric_scorers": metric_scorers,
    })


def with_session(manifest: dict[str, Any], previous: dict[str, Any] | None, session: dict[str, Any],
                 retry_errors: bool) -> dict[str, Any]:
    """The manifest of this session: a new run's, or on resume the first session's with this
    session appended and what may change on resume (the subset, the trials, with --retry-errors
    how the agent is reached) taken from this one — the next resume and the reports read it here."""
    if previous is None:
        return manifest | {"sessions": [session]}
    session["retry_errors"] = retry_errors
    previous_config = previous.get("config") or {}
    for key in ("run_id", "reporting"):  # the run directory is the one resumed, wherever --output-dir points
        if key in previous_config:
            manifest["config"][key] = previous_config[key]
    session["config_changes"] = session_changes(previous_config, manifest["config"])
    return previous | {"sessions": [*previous.get("sessions", []), session], "config": manifest["config"],
                       "dataset": manifest["dataset"], "agent": manifest["agent"],
                       "config_fingerprint": manifest["config_fingerprint"]}
