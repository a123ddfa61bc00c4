"""Splitting a run into shards (``--shard i/n``): shard i of n runs its share of the items, and
``evalbench merge`` puts the shards' run directories back together as one run.

Whole databases go to shards when there are at least as many (dialect, database) groups as
shards — each shard then provisions only its own databases — balanced by item count (the
largest group first, to the least loaded shard). With fewer groups than shards, each item goes
by a hash of its (dialect, id). Either way the assignment depends only on the dataset (and the
``dialects`` / ``query_types`` it is filtered by), so every shard of one run agrees on it, and
the shards together hold every item exactly once.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

Group = tuple[str, str]  # (dialect, database)


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``i/n`` with 1 <= i <= n; a ValueError saying what is expected."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise ValueError(f"shard {text!r}: expected i/n, e.g. 1/4")
    index, count = int(match.group(1)), int(match.group(2))
    if not 1 <= index <= count:
        raise ValueError(f"shard {text!r}: i must be between 1 and n")
    return Shard(index, count)


def group_assignment(groups: Mapping[Group, int], count: int) -> dict[Group, int] | None:
    """The shard (1-based) of every group when groups are split whole, None when items are."""
    if len(groups) < count:
        return None
    load = [0] * count
    assignment: dict[Group, int] = {}
    for group, size in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])):
        shard = min(range(count), key=lambda s: (load[s], s))
        assignment[group] = shard + 1
        load[shard] += size
    return assignment


def item_shard(dialect: str, item_id: str, count: int) -> int:
    """The shard (1-based) of one item when items are split one by one."""
    digest = hashlib.sha256(f"{dialect}\0{item_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % count + 1
