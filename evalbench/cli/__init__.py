"""The ``evalbench`` command: one module per command and a table that wires them (:mod:`evalbench.cli.main`)."""

from evalbench.cli.main import main

__all__ = ["main"]
