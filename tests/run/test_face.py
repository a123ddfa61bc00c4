"""The face of evalbench.run: a callable module whose __all__ is its library entry point."""

from __future__ import annotations

import evalbench
import evalbench.run


def test_exported_members() -> None:
    assert evalbench.run.__all__ == ["run"]
    # `evalbench.run(config)` keeps working once the package is imported (the module is callable)
    assert callable(evalbench.run) and callable(evalbench.run.run)
