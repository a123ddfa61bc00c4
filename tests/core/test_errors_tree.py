"""core/errors.py's docstring draws the whole EvalbenchError tree: every subclass in the package
is there, with its exit code, under its parent."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import evalbench.core.errors as errors
from evalbench.core.errors import EvalbenchError

PACKAGE = Path(errors.__file__).resolve().parents[1]


def _error_classes() -> dict[str, str]:
    """Every class of the package that derives from EvalbenchError -> its module (read from the source)."""
    bases: dict[str, tuple[str, list[str]]] = {}
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                names = [b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, ast.Name | ast.Attribute)]
                bases[node.name] = (module, names)
    found = {"EvalbenchError": "evalbench.core.errors"}
    grew = True
    while grew:
        grew = False
        for name, (module, parents) in bases.items():
            if name not in found and any(p in found for p in parents):
                found[name], grew = module, True
    return found


def _tree() -> dict[str, tuple[int, int]]:
    """Each class the docstring lists -> (its depth in the tree, the exit code it states)."""
    out = {}
    for line in (errors.__doc__ or "").splitlines():
        match = re.match(r"(\s*)- (.*?) \((\d)", line)
        if match:
            for name in re.findall(r"``(\w+)``", match.group(2)):
                out[name] = (len(match.group(1)) // 2, int(match.group(3)))
    return out


def test_every_error_class_is_in_the_tree_with_its_exit_code_under_its_parent():
    tree = _tree()
    classes = _error_classes()
    assert len(classes) >= 18
    missing = sorted(set(classes) - set(tree))
    assert not missing, f"core/errors.py's docstring does not list: {missing}"
    for name, module in classes.items():
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, EvalbenchError)
        depth, code = tree[name]
        assert cls.exit_code == code, f"{name}: exit code {cls.exit_code}, the tree says {code}"
        parent = cls.__mro__[1].__name__
        if name != "EvalbenchError":
            assert tree[parent][0] == depth - 1, f"{name} is not listed under {parent}"


def test_the_tree_lists_no_class_that_does_not_exist():
    assert set(_tree()) <= set(_error_classes())
