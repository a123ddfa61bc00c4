"""``evalbench merge OUT SHARD_DIR...``: the run directories of one run's shards (``--shard i/n``)
joined into one run directory, as if the run had not been split: one journal, one manifest
(every shard's sessions), and every report recomputed from the journal.

The shards must be shards of the same run: the same config fingerprint (the settings that make
two runs comparable; the subset is not one of them), the same dataset (its SHA-256), each a
different shard of the same count, and no conversation in two of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalbench.errors import ConfigError
from evalbench.results.journal.files import JOURNAL, write_atomic
from evalbench.results.journal.lines import conversation_key
from evalbench.results.journal.reader import read_journal
from evalbench.resume import read_manifest


def merge_shards(out: Path, shards: list[Path], *, replace: bool = False) -> dict[str, Any]:
    """Write the merged run directory ``out`` (which must not hold a journal, unless ``replace``
    and it was merged before: ``--workers`` merges again after a resume); its manifest."""
    if (out / JOURNAL).exists():
        merged_before = (out / "manifest.json").is_file() and "merged_from" in read_manifest(out)
        if not (replace and merged_before):
            raise ConfigError(f"{out} already holds a journal: merge into a new directory")
        (out / JOURNAL).unlink()
    manifests = [read_manifest(shard) for shard in shards]
    _check_same_run(shards, manifests)
    out.mkdir(parents=True, exist_ok=True)
    seen: dict[tuple[Any, str, int], Path] = {}
    with (out / JOURNAL).open("w", encoding="utf-8") as journal:
        for shard in shards:
            for record in read_journal(shard):
                key = conversation_key(record)
                if key in seen:
                    journal.close()
                    (out / JOURNAL).unlink()
                    raise ConfigError(f"conversation {key} is in {seen[key]} and in {shard}: not shards of one run")
                seen[key] = shard
                journal.write(json.dumps(record, ensure_ascii=False) + "\n")
    manifest = merged_manifest(out.name, manifests, [str(s) for s in shards], conversations=len(seen))
    write_atomic(out / "manifest.json", json.dumps(manifest, indent=2, ensure_ascii=False, default=str) + "\n")
    return manifest


def _check_same_run(shards: list[Path], manifests: list[dict[str, Any]]) -> None:
    first = manifests[0]
    split: str | None = None  # the "n" of every shard's "i/n"
    indexes: dict[str, Path] = {}
    for shard, manifest in zip(shards, manifests, strict=True):
        if manifest.get("config_fingerprint") != first.get("config_fingerprint"):
            raise ConfigError(f"{shard}: another config than {shards[0]} (config_fingerprint differs): not shards of one run")
        if (manifest.get("dataset") or {}).get("sha256") != (first.get("dataset") or {}).get("sha256"):
            raise ConfigError(f"{shard}: another dataset than {shards[0]}: not shards of one run")
        shard_of = ((manifest.get("dataset") or {}).get("subset") or {}).get("shard")
        if not shard_of:
            raise ConfigError(f"{shard} is not a shard (run with --shard i/n)")
        count = shard_of.split("/")[1]
        split = split or count
        if count != split:
            raise ConfigError(f"{shard} is shard {shard_of}, {shards[0]} one of {split}: not shards of one split")
        if shard_of in indexes:
            raise ConfigError(f"{shard} and {indexes[shard_of]} are both shard {shard_of}")
        indexes[shard_of] = shard
    missing = [f"{i}/{split}" for i in range(1, int(split or 0) + 1) if f"{i}/{split}" not in indexes]
    if missing:
        raise ConfigError(f"shard(s) {', '.join(missing)} missing: give every shard's run directory")


def merged_manifest(run_id: str, manifests: list[dict[str, Any]], sources: list[str], *, conversations: int) -> dict[str, Any]:
    """The first shard's manifest with every shard's sessions, items and databases; the shards
    ran side by side, so the run took as long as the slowest."""
    first = manifests[0]
    sessions = [dict(s, shard=m["dataset"]["subset"]["shard"]) for m in manifests for s in m.get("sessions", [])]
    dataset = dict(first["dataset"])
    dataset["items"] = sum(m["dataset"]["items"] for m in manifests)
    dataset["groups"] = {k: v for m in manifests for k, v in (m["dataset"].get("groups") or {}).items()}
    dataset["subset"] = {"shards": len(manifests), "merged_from": sources, "of": first["dataset"]["subset"].get("of")}
    extras = [m.get("summary_extra") or {} for m in manifests]
    elapsed = max((e.get("elapsed_s") or 0.0 for e in extras), default=0.0)
    total = sum(len(m.get("sessions", [])) for m in manifests)
    extra = dict(extras[0]) | {
        "elapsed_s": elapsed,
        "conversations_per_s": round(conversations / elapsed, 2) if elapsed > 0 else None,
        "databases": {k: v for e in extras for k, v in (e.get("databases") or {}).items()},
        "dataset": dict(extras[0].get("dataset") or {}) | {"items": dataset["items"]},
        "sessions": total,
        "cancelled": any(e.get("cancelled") for e in extras),
    }
    finished = [str(m["finished_at"]) for m in manifests if m.get("finished_at")]
    return first | {"run_id": run_id, "dataset": dataset, "sessions": sessions, "summary_extra": extra,
                    "databases": extra["databases"], "merged_from": sources,
                    "finished_at": max(finished) if len(finished) == len(manifests) else None}
