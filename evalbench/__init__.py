"""evalbench: evaluate data agents in multi-turn conversations against real databases.

The public entry points are imported lazily so that ``import evalbench`` (and
``evalbench --help``) stays instant.
"""

from __future__ import annotations

__version__ = "0.1.0"

from evalbench import _moved
from evalbench import run as run  # the package is callable: evalbench.run(config)

_moved.install()


__all__ = ["__version__", "run"]
