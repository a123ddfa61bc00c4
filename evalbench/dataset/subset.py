"""Choosing a subset of a dataset's items: ``--item-ids``, ``--sample N``, ``--limit N``.

The choice is made with extra streaming passes over the dataset and keeps only the chosen keys
(at most N of them, or the listed ids), so memory stays flat in the size of the dataset. The
sample is stratified by category (Query, Management) with proportional quotas, and within a
category it takes the items with the smallest seeded hash: the same seed and dataset always
give the same sample, and a larger sample contains a smaller one of the same seed.
"""

from __future__ import annotations

import hashlib
import heapq
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from evalbench.core.errors import ConfigError

if TYPE_CHECKING:
    from evalbench.core.items import Item
    from evalbench.dataset.loader import Dataset

Key = tuple[str, str]  # (dialect, item id)


@dataclass(frozen=True)
class Subset:
    item_ids: Sequence[str] | None = None
    sample: int | None = None
    limit: int | None = None
    seed: int = 0
    shard: str | None = None  # "i/n" (evalbench.dataset.shard)

    @property
    def empty(self) -> bool:
        return not self.item_ids and self.sample is None and self.limit is None and self.shard is None


@dataclass
class Chosen:
    """The keys chosen, their count per (dialect, database) group, and out of how many items."""

    keys: set[Key] = field(default_factory=set)
    groups: Counter[tuple[str, str]] = field(default_factory=Counter)
    of: int = 0  # selected items before the subset

    def describe(self, subset: Subset) -> dict[str, object]:
        return {"item_ids": len(subset.item_ids) if subset.item_ids else None, "sample": subset.sample,
                "limit": subset.limit, "seed": subset.seed if subset.sample else None, "shard": subset.shard,
                "chosen": len(self.keys), "of": self.of}


def choose(dataset: Dataset, subset: Subset, total: int, *, where: str | None = None,
           groups: Mapping[tuple[str, str], int] | None = None) -> Chosen:
    """The (dialect, id) keys of the items ``subset`` keeps out of the ``total`` the dataset
    selects (``groups``: its items per (dialect, database), for a shard). Unknown ``item_ids``
    are a :class:`ConfigError` naming them (never a silently smaller run)."""
    chosen = Chosen(of=total)
    wanted = set(subset.item_ids) if subset.item_ids else None
    if wanted is not None:
        found: set[str] = set()
        for item in dataset.items():
            if item.id in wanted:
                found.add(item.id)
        unknown = sorted(wanted - found)
        if unknown:
            shown = ", ".join(unknown[:10]) + (f" and {len(unknown) - 10} more" if len(unknown) > 10 else "")
            raise ConfigError(f"item id(s) not in the dataset (or filtered out by dialects/query_types): {shown}",
                              file=where, key="subset.item_ids (--item-ids)")
    if subset.shard is not None:  # first: the other choices are made within the shard
        dataset.only = _shard_keys(dataset, subset.shard, groups or {})
    items: Iterable[Item] = (item for item in dataset.items() if wanted is None or item.id in wanted)
    if subset.sample is not None:
        counts = Counter(item.category for item in dataset.items() if wanted is None or item.id in wanted)
        keys = _sample(items, counts, subset.sample, subset.seed)
        items = (item for item in dataset.items() if (item.dialect, item.id) in keys)
    for item in items:
        if subset.limit is not None and len(chosen.keys) >= subset.limit:
            break
        chosen.keys.add((item.dialect, item.id))
        chosen.groups[(item.dialect, item.database)] += 1
    return chosen


def _sample(items: Iterable[Item], counts: Counter[str], n: int, seed: int) -> set[Key]:
    quotas = _quotas(counts, n)
    heaps: dict[str, list[tuple[int, Key]]] = {category: [] for category in quotas}
    for item in items:
        quota = quotas.get(item.category, 0)
        if quota == 0:
            continue
        entry = (-_rank(seed, item.dialect, item.id), (item.dialect, item.id))  # a max-heap of the smallest ranks
        heap = heaps[item.category]
        if len(heap) < quota:
            heapq.heappush(heap, entry)
        elif entry > heap[0]:
            heapq.heapreplace(heap, entry)
    return {key for heap in heaps.values() for _, key in heap}


def _quotas(counts: Counter[str], n: int) -> dict[str, int]:
    """Proportional allocation of ``n`` over the categories (largest remainders get the rest)."""
    total = sum(counts.values())
    if n >= total:
        return dict(counts)
    exact = {category: n * count / total for category, count in counts.items()}
    quotas = {category: int(share) for category, share in exact.items()}
    by_remainder = sorted(exact, key=lambda c: (-(exact[c] - quotas[c]), c))
    for category in by_remainder[: n - sum(quotas.values())]:
        quotas[category] += 1
    return quotas


def _rank(seed: int, dialect: str, item_id: str) -> int:
    digest = hashlib.blake2b(f"{seed}\0{dialect}\0{item_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _shard_keys(dataset: Dataset, shard: str, groups: Mapping[tuple[str, str], int]) -> set[Key]:
    """The keys of the items of ``shard`` (evalbench.dataset.shard)."""
    from evalbench.dataset.shard import group_assignment, item_shard, parse_shard

    chosen = parse_shard(shard)
    assignment = group_assignment(groups, chosen.count)
    if assignment is not None:
        return {(item.dialect, item.id) for item in dataset.items()
                if assignment.get((item.dialect, item.database)) == chosen.index}
    return {(item.dialect, item.id) for item in dataset.items() if item_shard(item.dialect, item.id, chosen.count) == chosen.index}
