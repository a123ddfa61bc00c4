"""Import paths of modules that moved into packages in 0.2 (docs/extending.md), kept for one release.

``from evalbench.conversation import Conversation`` still works: a meta-path finder maps each old
module name to its new home and registers the new module under the old name too, so both names
are the same module object (monkeypatching one patches the other). Each old import warns once
with a :class:`DeprecationWarning` naming the new path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

MOVED = {
    "evalbench.errors": "evalbench.core.errors",
    "evalbench.registry": "evalbench.core.registry",
    "evalbench.conversation": "evalbench.core.conversation",
    "evalbench.scores": "evalbench.core.scores",
    "evalbench.execution_result": "evalbench.core.execution_result",
    "evalbench.deadline": "evalbench.core.deadline",
    "evalbench.ratelimit": "evalbench.core.ratelimit",
    "evalbench.json_types": "evalbench.core.json_types",
    "evalbench.redaction": "evalbench.core.redaction",
    "evalbench.terminal": "evalbench.core.terminal",
    "evalbench.usage": "evalbench.core.usage",
    "evalbench.dataset.items": "evalbench.core.items",
    "evalbench.statements": "evalbench.sql.statements",
    "evalbench.sqlclauses": "evalbench.sql.clauses",
    "evalbench.config_agents": "evalbench.config.agents",
    "evalbench.config_compat": "evalbench.config.compat",
    "evalbench.config_docs": "evalbench.config.reference",
    "evalbench.config_types": "evalbench.config.types",
    "evalbench.plugin_config": "evalbench.config.plugins",
    "evalbench.yamlfile": "evalbench.config.yamlfile",
    "evalbench.prices": "evalbench.config.prices",
    "evalbench.session_state": "evalbench.dataset.session_state",
    "evalbench.orchestrator": "evalbench.run.orchestrator",
    "evalbench.scheduler": "evalbench.run.scheduler",
    "evalbench.stages": "evalbench.run.stages",
    "evalbench.databases": "evalbench.run.databases",
    "evalbench.catalogs": "evalbench.run.catalogs",
    "evalbench.breaker": "evalbench.run.breaker",
    "evalbench.run_manifest": "evalbench.run.manifest",
    "evalbench.resume": "evalbench.run.resume",
    "evalbench.preflight": "evalbench.run.preflight",
    "evalbench.validate": "evalbench.run.validate",
    "evalbench.rescore": "evalbench.run.rescore",
    "evalbench.run_lock": "evalbench.run.lock",
    "evalbench.workers": "evalbench.run.parallel.processes",
    "evalbench.worker_count": "evalbench.run.parallel.sizing",
    "evalbench.ray_executor": "evalbench.run.parallel.ray",
    "evalbench.ray_shard": "evalbench.run.parallel.ray_task",
    "evalbench.lifeline": "evalbench.run.parallel.lifeline",
    "evalbench.genai_client": "evalbench.clients.genai",
    "evalbench.probes": "evalbench.clients.probes",
    "evalbench.agents.http": "evalbench.clients.http",
    "evalbench.agents.limits": "evalbench.clients.limits",
    "evalbench.knowledge_index": "evalbench.agents.knowledge_index",
    "evalbench.tables": "evalbench.backends.tables",
    "evalbench.gates": "evalbench.results.gates",
    "evalbench.report_console": "evalbench.results.render.console",
    "evalbench.dataset_info": "evalbench.cli.datasets",
    "evalbench.db_info": "evalbench.cli.db",
    "evalbench.text_table": "evalbench.cli.text_table",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.new}; the old import path goes in the next release",
                      DeprecationWarning, stacklevel=3)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """The module is the new one, already executed."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
