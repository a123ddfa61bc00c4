"""What evalbench built into a file database (SQLite, DuckDB), kept in a sidecar file
``<file>.evalbench`` beside it: the setup's checksum and the **catalog** the build left (every
table, view, index, trigger, sequence and macro with a digest of its definition, each table's
row count, each counter's value).

Provisioning reuses a file only when its catalog is still the recorded one: agent SQL cannot
change the file (the sandbox opens it read-only and writes to a copy), so a difference means
something outside the harness changed it, and reusing it would score later runs on another
database. :func:`check` names what changed and refuses, unless the db config says
``allow_destructive_setup`` (then the file is rebuilt). The record is an engine-neutral
``{object: value}`` map; each engine's ``files.py`` reads its own catalog.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from evalbench.core.errors import ProvisioningError

SUFFIX = ".evalbench"
BUILDING = "building"  # the checksum while a rebuild is under way (never matches a setup's)
Catalog = dict[str, str]  # "table main.items" -> "definition 1a2b..." | "rows 20" | "value 7"
_SHOWN = 5  # changes named in a refusal


def sidecar(path: Path) -> Path:
    return path.with_name(path.name + SUFFIX)


def read(path: Path, engine: str) -> dict[str, object] | None:
    """The record of ``path``, or None when evalbench did not build it for ``engine`` (no
    sidecar, not ours, or another engine's: ``x.db`` may be a SQLite or a DuckDB file)."""
    try:
        data = json.loads(sidecar(path).read_text(encoding="utf-8-sig"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("built_by") != "evalbench":
        return None
    return data if str(data.get("provisioning", "")).startswith(f"{engine}-") else None


def write(path: Path, provisioning: str, checksum: str, catalog: Catalog | None = None) -> None:
    """Write the record atomically (a temporary file renamed into place)."""
    target = sidecar(path)
    draft = target.with_name(f".{target.name}.{os.getpid()}")
    record = {"built_by": "evalbench", "provisioning": provisioning, "checksum": checksum, "catalog": catalog}
    draft.write_text(json.dumps(record, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(draft, target)


def definition(sql: object) -> str:
    """A catalog value for an object's definition (its SQL text, digested)."""
    return "definition " + hashlib.sha256(str(sql).encode()).hexdigest()[:16]


def changes(built: Catalog, now: Catalog) -> list[str]:
    """What differs, one phrase per object, in a stable order."""
    out = []
    for name in sorted(set(built) | set(now)):
        before, after = built.get(name), now.get(name)
        if before == after:
            continue
        if before is None:
            out.append(f"{name} was added")
        elif after is None:
            out.append(f"{name} is gone")
        elif before.startswith("definition "):
            out.append(f"{name} was redefined")
        else:
            out.append(f"{name}: {before} when built, {after} now")
    return out


def check(path: Path, record: Mapping[str, object], now: Catalog, allow_destructive: bool) -> bool:
    """True when the file is as it was built (reuse it), False when it should be rebuilt
    (its record has no catalog, or it changed and ``allow_destructive``); raises
    ProvisioningError naming what changed otherwise."""
    built = record.get("catalog")
    if not isinstance(built, dict):
        return False  # built by an evalbench that kept no catalog: rebuild it once
    found = changes({str(k): str(v) for k, v in built.items()}, now)
    if not found:
        return True
    if allow_destructive:
        return False
    more = f" and {len(found) - _SHOWN} more" if len(found) > _SHOWN else ""
    raise ProvisioningError(f"{path} was changed after evalbench built it ({'; '.join(found[:_SHOWN])}{more}); "
                            "it is not reused: set allow_destructive_setup: true in its db config to rebuild it "
                            "from its setup")
