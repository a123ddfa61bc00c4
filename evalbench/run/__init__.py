"""One evaluation run: the plan resolved from the config, the orchestrator, the scheduler, the stages
of a conversation and, in :mod:`evalbench.run.parallel`, a run spread over processes or Ray tasks.
This is the only package that sees the whole run config (see README.md beside this file).

``evalbench.run`` is also the library entry point ``evalbench.run(config)``: the package module is
callable, so that importing it (which replaces the attribute of that name on ``evalbench``) keeps
the documented call working.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack

    from evalbench.config import RunConfig
    from evalbench.run.orchestrator import RunOptions, RunResult


def run(config: RunConfig, **kwargs: Unpack[RunOptions]) -> RunResult:
    """Run an evaluation described by ``config`` (see :func:`evalbench.config.load_run_config`);
    ``kwargs`` are those of :func:`evalbench.run.orchestrator.run`."""
    from evalbench.run.orchestrator import run as _run
    from evalbench.run.plan import RunPlan

    return _run(RunPlan.resolve(config), **kwargs)


class _CallableModule(types.ModuleType):
    def __call__(self, config: RunConfig, **kwargs: Unpack[RunOptions]) -> RunResult:
        return run(config, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["run"]
