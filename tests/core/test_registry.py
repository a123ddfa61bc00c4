"""The registries: built-ins are "module:attr" strings imported on first use, so names are listed
and checked (and run configs loaded) without importing an agent, virtual user, scorer or backend."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from evalbench.core import registries
from evalbench.core.registry import Registry

ROOT = Path(__file__).resolve().parents[2]
ADAPTER_PACKAGES = ("evalbench.agents", "evalbench.vuser", "evalbench.scoring", "evalbench.backends")
REGISTRIES = {"agents": registries.AGENTS, "vusers": registries.VUSERS, "scorers": registries.SCORERS,
              "backends": registries.BACKENDS}


def _adapter_modules_after(code: str, env: dict[str, str] | None = None) -> list[str]:
    """The modules of the adapter packages that ``code`` imports, in a fresh interpreter."""
    probe = (f"{code}\nimport json, sys\n"
             f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({ADAPTER_PACKAGES!r}))))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env=None if env is None else os.environ | env)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.splitlines()[-1]))


def test_importing_the_config_schema_imports_no_adapter_package():
    assert _adapter_modules_after("import evalbench.config") == []


def test_loading_run_configs_imports_no_adapter_package(tmp_path):
    """Every shipped config names built-in agents, virtual users, scorers and backends (a config
    for BIRD-Interact's data is given a folder shaped like it, as its comments say)."""
    configs = sorted(str(path) for path in (ROOT / "configs").glob("*.yaml"))
    assert len(configs) > 3
    shutil.copyfile(ROOT / "datasets" / "demo" / "greenleaf.jsonl", tmp_path / "bird_interact_data.jsonl")
    code = f"from evalbench.config import load_run_config\nfor path in {configs!r}:\n    load_run_config(path)"
    assert _adapter_modules_after(code, {"BIRD_INTERACT_DIR": str(tmp_path)}) == []


def test_names_list_the_built_ins_without_importing_them():
    code = ("from evalbench.core import registries as r\n"
            "listed = {k: reg.names() for k, reg in (('a', r.AGENTS), ('v', r.VUSERS), ('s', r.SCORERS), ('b', r.BACKENDS))}\n"
            "assert 'adk' in r.AGENTS and 'rules' in r.VUSERS and 'exec_match' in r.SCORERS and 'sqlite' in r.BACKENDS\n"
            "assert {'simulated:oracle', 'adk'} <= set(listed['a']) and {'postgres', 'duckdb'} <= set(listed['b'])")
    assert _adapter_modules_after(code) == []


def test_a_package_face_imports_none_of_its_adapters():
    code = "from evalbench.agents import AGENTS\nfrom evalbench.scoring import SCORERS\nAGENTS.names(), SCORERS.names()"
    assert _adapter_modules_after(code) == ["evalbench.agents", "evalbench.scoring"]


@pytest.mark.parametrize("kind", sorted(REGISTRIES))
def test_every_built_in_resolves_to_a_factory(kind):
    registry = REGISTRIES[kind]
    for name, target in registry.builtins.items():
        factory = registry.get(name)
        assert callable(factory), name
        assert f"{factory.__module__}:{factory.__qualname__}" == target


def test_the_package_faces_show_the_same_registries():
    from evalbench.agents import AGENTS
    from evalbench.backends import BACKENDS
    from evalbench.scoring import SCORERS
    from evalbench.vuser import VUSERS

    assert (AGENTS, VUSERS, SCORERS, BACKENDS) == (registries.AGENTS, registries.VUSERS, registries.SCORERS,
                                                    registries.BACKENDS)


def test_no_built_in_scorer_has_a_config_model():
    """What lets the config schema check a built-in scorer's name without importing it: there is no
    options model to validate (config.plugins.scorer_problem)."""
    for name in registries.SCORERS.builtins:
        schema = getattr(registries.SCORERS.get(name), "Config", None)
        assert not (isinstance(schema, type) and issubclass(schema, BaseModel)), name


@pytest.fixture
def demo_module(tmp_path, monkeypatch):
    """A module of factories on sys.path, not yet imported."""
    name = "registry_demo_factories"
    (tmp_path / f"{name}.py").write_text("def shout(text):\n    return text.upper()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    yield name
    sys.modules.pop(name, None)


def test_a_built_in_is_imported_on_first_get_only(demo_module):
    registry: Registry[object] = Registry("shouter", builtins={"loud": f"{demo_module}:shout"})
    assert registry.names() == ["loud"] and "loud" in registry and "quiet" not in registry
    assert demo_module not in sys.modules
    shout = registry.get("loud")
    assert demo_module in sys.modules and shout is sys.modules[demo_module].shout
    assert registry.get("loud") is shout


def test_in_process_registration_cannot_shadow_a_name(demo_module):
    registry: Registry[object] = Registry("shouter", builtins={"loud": f"{demo_module}:shout"})
    with pytest.raises(ValueError, match="shouter 'loud' is already registered"):
        registry.register("loud")(print)
    registry.register("echo")(print)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("echo")(print)
    assert registry.names() == ["echo", "loud"] and registry.get("echo") is print
    assert demo_module not in sys.modules


def test_an_unknown_name_lists_the_known_ones():
    registry: Registry[object] = Registry("shouter", builtins={"loud": "json:dumps"})
    with pytest.raises(KeyError, match=r"unknown shouter 'whisper' \(known: loud\)"):
        registry.get("whisper")
