"""``evalbench rescore RUN_DIR``: score a finished run again with the current scorers and
semantics, into a new run directory, without calling the agent or the virtual user.

The run's config (``--config FILE``, else the one the source recorded) is run through the
ordinary pipeline with two parts replaced: the agent by the replay agent
(:mod:`evalbench.agents.replay`), which answers every turn with the reply the journal recorded,
and the virtual user by the replay virtual user (:mod:`evalbench.vuser.replay`). Everything else
is a run like any other: the databases are provisioned and sandboxed, the golden SQL and the
recorded SQL are executed again, the scorers judge, the journal and every report are written.
The source directory is only read. The new manifest says where the run came from
(``rescored_from``). docs/rescore.md says what is replayed and what cannot be.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import secrets
from pathlib import Path
from typing import Any, TextIO

from evalbench.core.errors import ConfigError

log = logging.getLogger(__name__)

# Settings that shape the conversations (which turns are asked): a difference from the source
# asks for turns it never had, which the replay records as agent_error.
SHAPING = ("max_turns", "debug_attempts", "trials", "follow_up", "orchestrator", "dataset_format", "dialects",
           "query_types", "subset")
REPLACED = ("model_config", "vuser_model_config")  # rescore replays these; they cannot be set
KEPT = ("subset", "trials")  # which conversations: the source's, also with --config FILE


def rescore(source: Path, *, config_file: Path | None = None, overrides: dict[str, Any] | None = None,
            output_dir: Path | None = None, run_id: str | None = None, progress: bool = True,
            out: TextIO | None = None) -> Any:
    """Score the journal of ``source`` again into a new run directory; its :class:`RunResult`."""
    from evalbench.results.journal.files import JOURNAL, write_atomic
    from evalbench.results.journal.safe_read import open_run_file
    from evalbench.results.journal.shapes import read_manifest
    from evalbench.run.orchestrator import run

    source = source.resolve()
    manifest = read_manifest(source)
    with open_run_file(source, JOURNAL):  # there, and a regular file of the run directory
        pass
    overrides = dict(overrides or {})
    for key in REPLACED:
        if key in overrides:
            raise ConfigError(f"rescore replays the recorded agent and virtual user: {key} cannot be set", key=key)
    overrides["run_id"] = run_id or f"{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-rescore-{secrets.token_hex(2)}"
    overrides["reporting"] = {"csv": {"output_directory": str((output_dir or source.parent).resolve())}}
    if (Path(overrides["reporting"]["csv"]["output_directory"]) / overrides["run_id"]).resolve() == source:
        raise ConfigError(f"the rescored run would overwrite its source {source}: choose another --run-id or --output-dir")
    config, origin = load_rescore_config(source, manifest, config_file, overrides)
    _warn_differences(manifest, config)
    result = run(config, progress=progress, out=out, agent_down_after=0)  # no agent to be down
    new_manifest = read_manifest(result.run_dir)
    new_manifest["rescored_from"] = {
        "run_id": manifest.get("run_id"), "run_dir": str(source), "config_fingerprint": manifest.get("config_fingerprint"),
        "scoring": manifest.get("scoring"), "dataset_sha256": (manifest.get("dataset") or {}).get("sha256"),
        "config": origin,
    }
    write_atomic(result.run_dir / "manifest.json", json.dumps(new_manifest, indent=2, default=str) + "\n")
    return result


def load_rescore_config(source: Path, manifest: dict[str, Any], config_file: Path | None,
                        overrides: dict[str, Any]) -> tuple[Any, str]:
    """The run config to score with, its agent and virtual user replaced by the replays; and
    where it came from (the file, or ``manifest.json``)."""
    from evalbench.config import load_run_config

    agent = {"agent": "replay", "run_dir": str(source)}
    # the source's conversations are the ones scored: its subset and trials, unless --set says otherwise
    recorded = manifest.get("config")
    recorded = recorded if isinstance(recorded, dict) else {}
    same = {key: recorded[key] for key in KEPT if recorded.get(key) is not None and key not in overrides}
    if config_file is not None:
        config = load_run_config(config_file, **(same | overrides), model_config=agent)
        return _with_replay_vuser(config, source), str(config_file)
    try:
        return _from_snapshot(source, manifest, overrides, agent), "manifest.json"
    except ConfigError as exc:
        file = manifest.get("config_file")
        if not file or not Path(file).is_file():
            raise ConfigError(f"the config recorded in {source / 'manifest.json'} cannot be used ({exc.message}); "
                              "pass the run's config with --config FILE", file=exc.file, key=exc.key) from None
        log.warning("the config recorded in %s cannot be used (%s): using its config file %s instead",
                    source / "manifest.json", exc.message, file)
        config = load_run_config(file, **(same | overrides), model_config=agent)
        return _with_replay_vuser(config, source), str(file)


def _with_replay_vuser(config: Any, source: Path) -> Any:
    from evalbench.config import ReplayVUserConfig

    vuser = ReplayVUserConfig(vuser="replay", run_dir=source, patience=getattr(config.vuser, "patience", 3))
    return config.model_copy(update={"vuser": vuser})


def _from_snapshot(source: Path, manifest: dict[str, Any], overrides: dict[str, Any], agent: dict[str, Any]) -> Any:
    """The config the source recorded (``manifest.json → config``), paths as recorded (relative
    ones from the working directory)."""
    from pydantic import ValidationError

    from evalbench.config import RunConfig

    snapshot = manifest.get("config")
    where = str(source / "manifest.json")
    if not isinstance(snapshot, dict):
        raise ConfigError("the manifest records no config", file=where, key="config")
    fields = {f.alias or name for name, f in RunConfig.model_fields.items()} | set(RunConfig.model_fields)
    data = {k: v for k, v in snapshot.items() if k in fields and k not in REPLACED} | overrides
    secret = _redacted(data)
    if secret is not None:
        raise ConfigError("the manifest redacts a secret the run needs", file=where, key=f"config.{secret}")
    vuser = snapshot.get("vuser_model_config")
    vuser = vuser if isinstance(vuser, dict) else {}
    data["model_config"] = agent
    data["vuser_model_config"] = {"vuser": "replay", "run_dir": str(source), "patience": vuser.get("patience", 3)}
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        key = ".".join(str(part) for part in error["loc"])
        raise ConfigError(f"{error['msg']}", file=where, key=f"config.{key}") from None
    except ValueError as exc:  # a validator's own error
        raise ConfigError(str(exc), file=where, key="config") from None


def _redacted(value: Any, path: str = "") -> str | None:
    """The key path of the first value the manifest redacted (``***``), if any."""
    if isinstance(value, dict):
        for key, sub in value.items():
            found = _redacted(sub, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            found = _redacted(sub, f"{path}.{index}")
            if found is not None:
                return found
    elif isinstance(value, str) and (value == "***" or ":***@" in value or "=***" in value):
        return path  # how config.redact and redact_url write a secret
    return None


def _warn_differences(manifest: dict[str, Any], config: Any) -> None:
    """Warn about what makes the replay leave the recorded path: a changed dataset file, or a
    setting that decides which turns are asked."""
    recorded = (manifest.get("dataset") or {}).get("sha256")
    # the path comes from the source's manifest: only a regular file is hashed (the run then reads the dataset itself)
    if recorded and Path(config.dataset_config).is_file():
        from evalbench.run.manifest import file_sha256

        if file_sha256(Path(config.dataset_config)) != recorded:
            log.warning("the dataset file %s changed since the source run: its current golden SQL and conditions are "
                        "used", config.dataset_config)
    old, new = manifest.get("config") or {}, config.snapshot()
    changed = [key for key in SHAPING if key in old and old.get(key) != new.get(key)]
    if changed:
        log.warning("rescore: %s differ from the source run's; turns the source never had end as agent_error "
                    "(see docs/rescore.md)", ", ".join(changed))

