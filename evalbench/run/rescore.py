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

from evalbench.config.recorded import REPLACED, load_rescore_config
from evalbench.core.errors import ConfigError
from evalbench.run.plan import RunPlan

log = logging.getLogger(__name__)

# Settings that shape the conversations (which turns are asked): a difference from the source
# asks for turns it never had, which the replay records as agent_error.
SHAPING = ("max_turns", "debug_attempts", "trials", "follow_up", "orchestrator", "dataset_format", "dialects",
           "query_types", "subset")


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
    plan = RunPlan.resolve(config)
    _warn_differences(manifest, plan)
    result = run(plan, progress=progress, out=out, agent_down_after=0)  # no agent to be down
    new_manifest = read_manifest(result.run_dir)
    new_manifest["rescored_from"] = {
        "run_id": manifest.get("run_id"), "run_dir": str(source), "config_fingerprint": manifest.get("config_fingerprint"),
        "scoring": manifest.get("scoring"), "dataset_sha256": (manifest.get("dataset") or {}).get("sha256"),
        "config": origin,
    }
    write_atomic(result.run_dir / "manifest.json", json.dumps(new_manifest, indent=2, default=str) + "\n")
    return result


def _warn_differences(manifest: dict[str, Any], plan: RunPlan) -> None:
    """Warn about what makes the replay leave the recorded path: a changed dataset file, or a
    setting that decides which turns are asked."""
    recorded = (manifest.get("dataset") or {}).get("sha256")
    # the path comes from the source's manifest: only a regular file is hashed (the run then reads the dataset itself)
    dataset = plan.items.path
    if recorded and dataset.is_file():
        from evalbench.run.manifest import file_sha256

        if file_sha256(dataset) != recorded:
            log.warning("the dataset file %s changed since the source run: its current golden SQL and conditions are "
                        "used", dataset)
    old, new = manifest.get("config") or {}, plan.identity.snapshot()
    changed = [key for key in SHAPING if key in old and old.get(key) != new.get(key)]
    if changed:
        log.warning("rescore: %s differ from the source run's; turns the source never had end as agent_error "
                    "(see docs/rescore.md)", ", ".join(changed))

