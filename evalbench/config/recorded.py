"""A run config made from a recorded run (``evalbench rescore``): the run's own config file, or the
config its manifest recorded, with the agent and the virtual user replaced by the replays of its
journal (:mod:`evalbench.agents.replay`, :mod:`evalbench.vuser.replay`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from evalbench.config.load import load_run_config
from evalbench.config.run import RunConfig
from evalbench.config.vusers import ReplayVUserConfig
from evalbench.core.errors import ConfigError

log = logging.getLogger(__name__)

REPLACED = ("model_config", "vuser_model_config")  # rescore replays these; they cannot be set
KEPT = ("subset", "trials")  # which conversations: the source's, also with --config FILE


def load_rescore_config(source: Path, manifest: dict[str, Any], config_file: Path | None,
                        overrides: dict[str, Any]) -> tuple[RunConfig, str]:
    """The run config to score with, its agent and virtual user replaced by the replays; and
    where it came from (the file, or ``manifest.json``)."""
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


def _with_replay_vuser(config: RunConfig, source: Path) -> RunConfig:
    vuser = ReplayVUserConfig(vuser="replay", run_dir=source, patience=getattr(config.vuser, "patience", 3))
    return config.model_copy(update={"vuser": vuser})


def _from_snapshot(source: Path, manifest: dict[str, Any], overrides: dict[str, Any], agent: dict[str, Any]) -> RunConfig:
    """The config the source recorded (``manifest.json → config``), paths as recorded (relative
    ones from the working directory)."""
    from pydantic import ValidationError

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
