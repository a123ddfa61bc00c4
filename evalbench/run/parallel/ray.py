"""``evalbench run --executor ray``: the shards of ``--workers N`` as Ray tasks, on whichever
nodes Ray schedules them (:mod:`evalbench.run.parallel.ray_task` is what a task does). Ray retries a task
whose worker or node was lost; each shard's run directory comes back through Ray's object store
and is unpacked into ``<run_dir>/shards/<run_id>-shard-<i>/`` (its log beside it), then merged
into the run directory exactly as ``--workers`` merges, so reports, gates, trials and compare
behave the same. ``--resume RUN_DIR --executor ray`` reruns only the shards not complete there.

Ray is imported here only, when the executor is chosen; see docs/scaling.md.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import uuid
from collections import Counter
from pathlib import Path
from types import ModuleType

from evalbench.core.errors import ConfigError, EvalbenchError
from evalbench.core.redaction import redact_text
from evalbench.results.journal.files import open_append
from evalbench.results.journal.reader import read_journal
from evalbench.results.journal.shapes import read_manifest
from evalbench.results.merge import merge_shards
from evalbench.results.summary.rebuild import completeness
from evalbench.run.parallel.ray_task import ShardResult, ShardTask, pack, run_shard, unpack
from evalbench.run.resume import RETRY_ERRORS, RUN_AGAIN

RETRIES = 3  # attempts after a lost worker or node; a shard that exits with an error is not retried


def run_ray(argv: list[str], run_dir: Path, *, shards: int | None, address: str | None, resume: bool,
            retry_errors: bool = False, max_shards: int | None = None) -> tuple[int, dict[str, object] | None]:
    """Run the shards as Ray tasks and merge them into ``run_dir``: (0, the merged run's summary),
    or the worst failed shard's exit code (3 for a task Ray lost for good) and None, each failed
    shard and its log named. ``shards`` None: as many as the cluster has CPUs, at most
    ``max_shards`` (or, on resume, as many as the run had)."""
    ray = _import_ray()
    shards_dir = run_dir / "shards"
    split = _resumed_split(shards_dir, run_dir.name, shards) if resume else shards
    started = _connect(ray, address)
    try:
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))  # each task asks for one
        count = split or min(cpus, max_shards or cpus)
        names = [f"{run_dir.name}-shard-{i}" for i in range(1, count + 1)]
        if not resume and any((shards_dir / name).exists() for name in names):
            raise ConfigError(f"{shards_dir} holds shards of an earlier run: continue it with --resume {run_dir} --executor ray")
        shards_dir.mkdir(parents=True, exist_ok=True)
        todo = _tasks(shards_dir, names, argv, resume, RETRY_ERRORS if retry_errors else RUN_AGAIN)
        print(f"evalbench: run {run_dir.name}: {count} shards as Ray tasks, {len(todo)} to run (logs in {shards_dir})",
              file=sys.stderr, flush=True)
        failed = _collect(ray, todo, shards_dir)
        if failed:
            for name, (_, why) in failed.items():
                print(f"error: shard {name} {why}: see {shards_dir / (name + '.log')}", file=sys.stderr)
            print(f"resume with: evalbench run ... --resume {run_dir} --executor ray", file=sys.stderr)
            return max(code for code, _ in failed.values()), None
        return 0, merge_shards(run_dir, [shards_dir / name for name in names], replace=True)
    finally:
        if started:
            ray.shutdown()


def _import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor ray needs Ray: pip install 'evalbench[ray]'") from None
    return ray


def _connect(ray: ModuleType, address: str | None) -> bool:
    """Connect to the cluster at ``address`` (None: start a local Ray, unless ``RAY_ADDRESS`` names
    one); False when this process was connected already (a library caller's ``ray.init``)."""
    if ray.is_initialized():
        return False
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise EvalbenchError(f"cannot connect to Ray{f' at {address}' if address else ''}: {exc}") from exc
    return True


def _resumed_split(shards_dir: Path, run_name: str, shards: int | None) -> int:
    """The number of shards of the run being resumed, read from its shards' manifests."""
    splits = set()
    for manifest in shards_dir.glob(f"{run_name}-shard-*/manifest.json"):
        shard = ((read_manifest(manifest.parent).get("dataset") or {}).get("subset") or {}).get("shard")
        if shard:  # checked by read_manifest: i/n with n <= shapes.MAX_SHARDS
            splits.add(int(str(shard).split("/")[1]))
    if len(splits) > 1:
        raise ConfigError(f"{shards_dir} holds shards of different splits ({sorted(splits)}): not one run")
    if not splits:
        raise ConfigError(f"{shards_dir.parent} holds no shard of a run split into shards ({shards_dir} has none): nothing to resume")
    (split,) = splits
    if shards is not None and shards != split:
        raise ConfigError(f"{shards_dir.parent} was split into {split} shards, not {shards}: resume it with --workers {split}")
    return split


def _tasks(shards_dir: Path, names: list[str], argv: list[str], resume: bool, run_again: frozenset[str]) -> list[ShardTask]:
    """A task for every shard still to run: a complete one (on resume) is left as it is, an
    incomplete one is sent along (packed) to be resumed where the task runs."""
    token, tasks = uuid.uuid4().hex, []
    for i, name in enumerate(names, 1):
        place = shards_dir / name
        if resume and _complete(place, run_again):
            continue
        packed = pack(place) if resume and (place / "manifest.json").is_file() else None
        tasks.append(ShardTask(name, f"{i}/{len(names)}", argv, os.getcwd(), token, packed))
    return tasks


def _complete(run_dir: Path, run_again: frozenset[str]) -> bool:
    """Whether a shard's run finished with every conversation journaled, none of which a resume
    would redo (the shards write no summary: it is judged from the manifest and the journal)."""
    if not (run_dir / "manifest.json").is_file():
        return False
    outcomes = Counter(record["outcome"] for record in read_journal(run_dir))
    summary = {"total_items": sum(outcomes.values()), "outcomes": dict(outcomes)}
    return bool(completeness(summary, read_manifest(run_dir))["complete"]) and not any(outcomes[o] for o in run_again)


def _collect(ray: ModuleType, tasks: list[ShardTask], shards_dir: Path) -> dict[str, tuple[int, str]]:
    """Submit ``tasks`` and store each shard as it comes back; the failed ones (exit code, why).
    Ctrl-C (or SIGTERM) cancels the tasks: what they did comes back, then KeyboardInterrupt."""
    remote = ray.remote(num_cpus=1, max_retries=RETRIES)(run_shard)
    pending = {remote.remote(task): task.name for task in tasks}
    failed: dict[str, tuple[int, str]] = {}
    try:
        while pending:
            # a timeout, so that Ctrl-C is seen: a wait without one holds the signal off until a shard ends
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            if not ready:
                continue
            name = pending.pop(ready[0])
            failure = _store(ray, ready[0], name, shards_dir)
            if failure:
                failed[name] = failure
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref)
        for ref, name in pending.items():
            _store(ray, ref, name, shards_dir)
        print("cancelled: every shard journaled what it had in flight; continue with --resume RUN_DIR --executor ray",
              file=sys.stderr)
        raise
    return failed


def _store(ray: ModuleType, ref: object, name: str, shards_dir: Path) -> tuple[int, str] | None:
    """Unpack a task's shard into ``shards_dir/name`` and append its log; None when the shard
    ran to the end (exit 0), else (exit code, why)."""
    log = shards_dir / f"{name}.log"
    try:
        result: ShardResult = ray.get(ref)
    except ray.exceptions.TaskCancelledError:
        return (130, "was cancelled before it started")
    except ray.exceptions.RayError as exc:  # the task itself failed, or was lost for good (retries exhausted)
        with open(open_append(log), "a", encoding="utf-8") as out:
            out.write(f"evalbench: the Ray task of shard {name} failed: {redact_text(str(exc))}\n")
        if isinstance(exc, ray.exceptions.RayTaskError):
            return (3, f"failed in its Ray task ({type(exc).__name__})")
        return (3, f"was lost ({type(exc).__name__}) after {RETRIES} retries")
    with open(open_append(log), "ab") as out:
        out.write(result.log)
    if result.packed:
        _replace(shards_dir, name, result.packed)
    ended = "was cancelled" if result.cancelled else "ended"
    print(f"evalbench: shard {name} {ended} on node {result.node} with exit {result.code}", file=sys.stderr, flush=True)
    if result.code != 0 or result.cancelled:  # a shard does not judge itself: anything but 0 is a failure
        return (result.code if result.code > 1 else 3, f"ended with exit {result.code} on node {result.node}")
    if not result.packed:
        return (3, f"left no run directory on node {result.node}")
    return None


def _replace(shards_dir: Path, name: str, packed: bytes) -> None:
    """Put the shard's returned run directory in place of the one there (whole, then renamed)."""
    incoming = shards_dir / f".{name}.incoming"
    shutil.rmtree(incoming, ignore_errors=True)
    incoming.mkdir()
    unpack(packed, incoming)
    shutil.rmtree(shards_dir / name, ignore_errors=True)
    (incoming / name).rename(shards_dir / name)
    incoming.rmdir()
