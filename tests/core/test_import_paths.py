"""The import paths users are told about keep working.

Every ``from evalbench… import …`` line and every dotted ``evalbench.…`` name in README.md and
docs/ resolves, and every module path that moved in 0.2 (evalbench/_moved.py) still imports, as
the same module object, with a DeprecationWarning naming the new path.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from evalbench._moved import MOVED
from evalbench.core.registries import AGENTS, BACKENDS, SCORERS, VUSERS

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# entry-point groups are written like module names but are not modules
GROUPS = {registry.group for registry in (AGENTS, BACKENDS, SCORERS, VUSERS)}

FROM_IMPORT = re.compile(r"^\s*from (evalbench(?:\.\w+)*) import ([\w, ]+)$", re.MULTILINE)
DOTTED = re.compile(r"`(evalbench(?:\.\w+)+)")


def resolve(dotted: str) -> object:
    """The module or attribute a dotted name stands for (the longest importable module prefix, then attributes)."""
    parts = dotted.split(".")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # an old path the docs mention on purpose
        return _resolve(parts, dotted)


def _resolve(parts: list[str], dotted: str) -> object:
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name)
        return found
    raise ModuleNotFoundError(dotted)


def documented_imports() -> list[tuple[str, str]]:
    pairs = set()
    for doc in DOCS:
        for module, names in FROM_IMPORT.findall(doc.read_text(encoding="utf-8")):
            pairs.update((f"{doc.name}: {module}", f"{module}.{name.strip()}") for name in names.split(",") if name.strip())
    return sorted(pairs)


def documented_dotted_names() -> list[tuple[str, str]]:
    names = set()
    for doc in DOCS:
        for dotted in DOTTED.findall(doc.read_text(encoding="utf-8")):
            if dotted not in GROUPS:
                names.add((doc.name, dotted))
    return sorted(names)


def test_the_docs_name_imports_and_dotted_names():
    assert documented_imports(), "the pattern found no import in the docs"
    assert documented_dotted_names(), "the pattern found no dotted name in the docs"


@pytest.mark.parametrize(("where", "dotted"), documented_imports())
def test_a_documented_import_resolves(where, dotted):
    assert resolve(dotted) is not None, where


@pytest.mark.parametrize(("doc", "dotted"), documented_dotted_names())
def test_a_documented_dotted_name_resolves(doc, dotted):
    try:
        resolve(dotted)
    except (ImportError, AttributeError) as error:
        pytest.fail(f"{doc} names `{dotted}`, which does not resolve: {error}")


def test_resolve_fails_on_a_name_that_does_not_exist():
    with pytest.raises(AttributeError):
        resolve("evalbench.core.conversation.NoSuchThing")


_OLD_PATHS = """
import importlib, json, sys, warnings
from evalbench._moved import MOVED
out = {}
for old, new in MOVED.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    out[old] = {
        "same": module is importlib.import_module(new),
        "warned": [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)],
    }
print(json.dumps(out))
"""


def test_every_moved_module_still_imports_as_the_same_module_and_warns():
    # a fresh interpreter: an old name already imported in this one would not warn again
    done = subprocess.run([sys.executable, "-c", _OLD_PATHS], capture_output=True, text=True, check=True, cwd=ROOT)
    seen = json.loads(done.stdout)
    assert set(seen) == set(MOVED)
    for old, new in MOVED.items():
        assert seen[old]["same"], f"{old} is not the module {new}"
        assert any(new in message for message in seen[old]["warned"]), f"importing {old} did not warn about {new}"


@pytest.mark.parametrize("package", ["evalbench.core", "evalbench.sql", "evalbench.backends", "evalbench.results"])
def test_every_name_of_a_package_face_resolves(package):
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert not missing, f"{package}.__all__ names what it does not give: {missing}"
