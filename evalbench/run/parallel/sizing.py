"""How many workers a run gets (``run --workers``, ``--executor ray``): one per core by default,
never more than the run has conversations, and never two processes on one database file."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from evalbench.core.errors import ConfigError

if TYPE_CHECKING:
    from evalbench.dataset.loader import Group
    from evalbench.run.items import Items
    from evalbench.run.plan import DatabasesSpec, RunPlan


def check_workers(workers: int, shard: str | None) -> None:
    if workers < 1:
        raise ConfigError(f"--workers {workers}: at least 1")
    if workers > 1 and shard:
        raise ConfigError("--workers and --shard: a run is either split across processes here or one shard of a split")


MIN_CONVERSATIONS_PER_WORKER = 250  # below this, starting a process costs more than it saves


def auto_workers(plan: RunPlan, items: Items, shard: str | None, resume: Path | None) -> int:
    """The default of ``--workers``: one per core, at most one per :data:`MIN_CONVERSATIONS_PER_WORKER`
    conversations, and no more than :func:`shard_cap`; 1 for a shard of a split; on ``--resume``,
    as many as the run had."""
    if shard or (plan.serve is not None and plan.serve.port != 0):  # a fixed port is one process's
        return 1
    if resume is not None:
        return resumed_workers(resume)
    groups = items.groups()
    workers = min(usable_cores(), sum(groups.values()) * plan.conversation.trials // MIN_CONVERSATIONS_PER_WORKER)
    return max(1, min(workers, _cap(plan.databases, groups)[0] or workers))


def resumed_workers(run_dir: Path) -> int:
    """How many workers ``run_dir`` was run with: the shard folders in ``run_dir/shards`` (1 when
    it has none). The run directory may come from anywhere: past :func:`max_resumed_workers` shards
    (a fork bomb, not a run) ``--workers N`` must say how many."""
    shards, count, most = run_dir / "shards", 0, max_resumed_workers()
    if not shards.is_dir():
        return 1
    for entry in shards.iterdir():
        if entry.is_dir() and not entry.name.startswith("."):  # not a Ray shard being unpacked
            count += 1
            if count > most:
                raise ConfigError(f"{shards} holds more than {most} shards: resume it with --workers N (as many as it has)")
    return max(count, 1)


def max_resumed_workers() -> int:
    return max(64, 4 * usable_cores())


def shard_cap(plan: RunPlan, items: Items) -> int | None:
    """The most shards a run may have, or None for any number: a database file (SQLite, DuckDB)
    is used by one process at a time, so with one the shards must each have whole databases."""
    return _cap(plan.databases, items.groups())[0]


def fit_workers(plan: RunPlan, items: Items, workers: int) -> int:
    """``workers`` for a new run, checked against the run: refused beyond :func:`shard_cap` (naming
    the database file), and no more than the run has conversations (a note says so)."""
    if workers <= 1:
        return workers
    groups = items.groups()
    cap, files = _cap(plan.databases, groups)
    if cap is not None and cap < workers:
        raise ConfigError(f"--workers {workers}: {files[0]} is a database file, which one process at a time may use, and "
                          f"the run has {cap} database(s): at most {cap} worker(s) (each then has whole databases)")
    conversations = sum(groups.values()) * plan.conversation.trials
    if workers > max(1, conversations):
        print(f"evalbench: --workers {workers}: the run has {conversations} conversation(s); "
              f"{max(1, conversations)} worker(s)", file=sys.stderr)
        return max(1, conversations)
    return workers


def _cap(databases: DatabasesSpec, groups: dict[Group, int]) -> tuple[int | None, list[str]]:
    from evalbench.backends.names import is_file_backend

    files = [f"{dialect}/{database}" for dialect, database in groups
             if is_file_backend(databases.config_for(dialect, database).backend)]
    return (max(1, len(groups)) if files else None), files


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container or ``taskset`` may allow
    fewer than the machine has)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
