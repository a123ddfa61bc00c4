"""evalbench: evaluate data agents in multi-turn conversations against real databases.

The public entry points are imported lazily so that ``import evalbench`` (and
``evalbench --help``) stays instant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover
    from evalbench.config import RunConfig
    from evalbench.orchestrator import RunResult


def run(config: RunConfig, **kwargs: Any) -> RunResult:
    """Run an evaluation described by ``config`` (see :func:`evalbench.config.load_run_config`)."""
    from evalbench.orchestrator import run as _run

    return _run(config, **kwargs)


__all__ = ["__version__", "run"]
